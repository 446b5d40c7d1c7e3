/*
 * libpq's failures in dlock's terms, for every file that talks to the
 * server (connecting, statements, the LISTEN thread): the status a
 * SQLSTATE stands for, and libpq's message as one line for dlock's error
 * text.  libpq never puts the password in a message.
 *
 * Threads: pure functions.  Errors: none of their own.
 */
#include <ctype.h>
#include <string.h>

#include "pg_backend.h"

dlock_status dlock_pg_sqlstate_status(const char *s)
{
	if (strcmp(s, "28P01") == 0 || strcmp(s, "28000") == 0)
		return DLOCK_EAUTH;
	if (strcmp(s, "3D000") == 0)
		return DLOCK_ENOTFOUND;
	if (strcmp(s, "42501") == 0)
		return DLOCK_EPERM;
	if (strcmp(s, "55P03") == 0)
		return DLOCK_EBUSY; /* lock_not_available: NOWAIT or lock_timeout */
	if (strcmp(s, "57014") == 0)
		return DLOCK_ECANCELED; /* query_canceled */
	if (strcmp(s, "53200") == 0)
		return DLOCK_ELIMIT; /* out_of_memory: "out of shared memory", the lock table is full */
	if (strncmp(s, "08", 2) == 0 || strcmp(s, "57P01") == 0 || strcmp(s, "57P02") == 0 ||
	    strcmp(s, "57P03") == 0 || strcmp(s, "53300") == 0)
		return DLOCK_ECONNECT;
	return DLOCK_ESERVER;
}

/*
 * libpq's message on one line, without the LOCATION lines of verbose mode.
 * Its lines go on with a tab ("Connection refused\n\tIs the server
 * running ..."): every run of blanks, newlines included, becomes one space,
 * and the lines are joined by "; ".
 */
void dlock_pg_one_line(const char *msg, char *out, size_t outlen)
{
	size_t o = 0;
	if (outlen == 0)
		return;
	for (const char *line = msg; *line;) {
		size_t n = strcspn(line, "\n");
		const char *end = line + n;
		while (line < end && isspace((unsigned char)*line))
			line++;
		if (line < end && strncmp(line, "LOCATION:", 9) != 0) {
			if (o && o + 2 < outlen) {
				out[o++] = ';';
				out[o++] = ' ';
			}
			for (int blank = 0; line < end && o + 1 < outlen; line++) {
				if (isspace((unsigned char)*line)) {
					blank = 1;
					continue;
				}
				if (blank)
					out[o++] = ' ';
				blank = 0;
				if (o + 1 < outlen)
					out[o++] = *line;
			}
		}
		line = *end ? end + 1 : end;
	}
	out[o] = '\0';
}
