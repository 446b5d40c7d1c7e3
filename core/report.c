/*
 * What a client tells its application: the calling thread's last error
 * (dlock_client_errmsg(), kept per thread in errmsg.c), lines through the
 * client's log callback, and lock names made printable for both.
 *
 * Threads: any, with or without c->mu (errmsg.c has its own locks; the log
 * callback and its level are fixed at open).  A message never holds a
 * secret: a URI appears only masked, a name only through
 * dlock_entry_printable().
 */
#include "internal.h"

#include <stdio.h>

/* ------------------------------------------------------------ errors */

dlock_status dlock_client_fail_locked(struct dlock_client *c, dlock_status status, const char *msg)
{
	dlock_errs_set(c->errs, msg && *msg ? msg : dlock_strerror(status));
	return status;
}

dlock_status dlock_client_fail(struct dlock_client *c, dlock_status status, const char *msg)
{
	return dlock_client_fail_locked(c, status, msg);
}

const char *dlock_client_errmsg(dlock_client *c)
{
	if (!c)
		return "client is NULL";
	return dlock_errs_get(c->errs);
}

/* ------------------------------------------------------------ logging */

void dlock_client_vlogf(struct dlock_client *c, dlock_log_level level, const char *fmt, va_list ap)
{
	if (!c->log || level > c->log_level)
		return;
	char buf[1024];
	vsnprintf(buf, sizeof buf, fmt, ap);
	c->log(c->log_userdata, level, buf);
}

void dlock_client_logf(struct dlock_client *c, dlock_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dlock_client_vlogf(c, level, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------ names */

void dlock_entry_printable(const struct dlock_entry *e, char *out, size_t outlen)
{
	size_t o = 0;
	for (size_t i = 0; i < e->len && o + 8 < outlen; i++) {
		unsigned char ch = (unsigned char)e->name[i];
		if (ch >= 0x20 && ch < 0x7f && ch != '\\')
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", ch);
		if (o > 60 && i + 1 < e->len) {
			o += (size_t)snprintf(out + o, outlen - o, "...");
			break;
		}
	}
	out[o < outlen ? o : outlen - 1] = '\0';
}
