/*
 * Who holds a session: its application_name.  PostgreSQL shows every
 * session's application_name to every role (pg_stat_activity), so each
 * connection of a client carries its owner there, set once when it
 * connects (libpq keyword, pg_conn.c) — no round trip, nothing per lock.
 * The server keeps at most 63 bytes (NAMEDATALEN) and turns bytes outside
 * printable ASCII into '?', so the owner is written as
 *
 *   dlock:PID:IDENTITY      an identity of the client's choosing
 *   dlock:PID:@HOST         the default identity, "HOST:PID"
 *
 * where IDENTITY and HOST are escaped as in the owner record of
 * dlock_host_owner() (every byte outside [A-Za-z0-9._~:-] as %XX: plain
 * ASCII, nothing for the server to replace).  When that is longer than 63
 * bytes it is cut (never inside a %XX) to 54 bytes and "+" and 8 hex
 * digits of the SHA-256 of the whole text are appended: the identity then
 * shows as its first bytes and that mark ('+' is never in escaped text).
 * The host of an identity of the client's choosing is not written: the
 * server's view of the client (client_hostname, else client_addr) stands
 * for it, escaped alike (dlock_percent_encode()).  A URI that gives
 * application_name itself keeps it, and its sessions show no owner.
 *
 * Threads: pure functions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"

#define APP_PREFIX "dlock:"
#define APP_MAX 63
#define CUT_KEEP 54

/* The value of `key` in the owner record rec[0..len): a pointer into it and *vlen; NULL if absent. */
static const char *record_field(const char *rec, size_t len, const char *key, size_t *vlen)
{
	size_t klen = strlen(key);
	const char *end = rec + len;
	for (const char *item = rec; item < end;) {
		const char *amp = memchr(item, '&', (size_t)(end - item));
		const char *item_end = amp ? amp : end;
		if ((size_t)(item_end - item) > klen && memcmp(item, key, klen) == 0 && item[klen] == '=') {
			*vlen = (size_t)(item_end - item) - klen - 1;
			return item + klen + 1;
		}
		item = amp ? amp + 1 : end;
	}
	return NULL;
}

void dlock_pg_app_name(const char *record, size_t len, char out[DLOCK_PG_APP_NAME_SIZE])
{
	size_t idlen = 0, hostlen = 0, pidlen = 0;
	const char *id = record_field(record, len, "id", &idlen);
	const char *host = record_field(record, len, "host", &hostlen);
	const char *pid = record_field(record, len, "pid", &pidlen);
	char full[DLOCK_OWNER_MAX + 16];
	if (!id || !pid || pidlen > 20) {
		snprintf(out, DLOCK_PG_APP_NAME_SIZE, "dlock");
		return;
	}
	/* The default identity is "HOST:PID", escaped alike: the escaped host, ':', the pid. */
	int dflt = host && idlen == hostlen + 1 + pidlen && memcmp(id, host, hostlen) == 0 && id[hostlen] == ':' &&
	           memcmp(id + hostlen + 1, pid, pidlen) == 0;
	int n = snprintf(full, sizeof full, APP_PREFIX "%.*s:%s%.*s", (int)pidlen, pid, dflt ? "@" : "",
	                 (int)(dflt ? hostlen : idlen), dflt ? host : id);
	if (n <= APP_MAX) {
		memcpy(out, full, (size_t)n + 1);
		return;
	}
	unsigned char digest[32];
	dlock_sha256(full, (size_t)n, digest);
	size_t keep = CUT_KEEP;
	for (size_t i = keep >= 2 ? keep - 2 : 0; i < keep; i++)
		if (full[i] == '%') {
			keep = i; /* never half an escape */
			break;
		}
	memcpy(out, full, keep);
	snprintf(out + keep, DLOCK_PG_APP_NAME_SIZE - keep, "+%02x%02x%02x%02x", digest[0], digest[1], digest[2],
	         digest[3]);
}

size_t dlock_pg_app_owner(const char *app, const char *client_host, char *rec, size_t cap)
{
	size_t plen = strlen(APP_PREFIX);
	if (cap < DLOCK_PG_APP_NAME_SIZE * 3 || strncmp(app, APP_PREFIX, plen) != 0)
		return 0;
	const char *pid = app + plen;
	size_t pidlen = strspn(pid, "0123456789");
	if (pidlen == 0 || pidlen > 20 || pid[pidlen] != ':' || !pid[pidlen + 1])
		return 0;
	const char *x = pid + pidlen + 1;
	int n;
	if (x[0] == '@' && !strchr(x, '+'))
		n = snprintf(rec, cap, "id=%s:%.*s&host=%s&pid=%.*s", x + 1, (int)pidlen, pid, x + 1, (int)pidlen, pid);
	else if (x[0] == '@') /* a cut host: the identity is the cut text too */
		n = snprintf(rec, cap, "id=%s&host=%s&pid=%.*s", x + 1, x + 1, (int)pidlen, pid);
	else
		n = snprintf(rec, cap, "id=%s&pid=%.*s&host=", x, (int)pidlen, pid);
	if (n < 0 || (size_t)n >= cap)
		return 0;
	if (x[0] != '@') {
		const char *host = client_host ? client_host : "";
		n = (int)dlock_percent_encode(rec, cap, (size_t)n, host, strlen(host));
	}
	return (size_t)n;
}
