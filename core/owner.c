/*
 * Who a client is: its identity (dlock_client_options::identity, the URI's
 * `identity`, or "HOST:PID") and the owner record that drivers store
 * beside each lock it holds, so that inspection in another process can
 * name the holder.  The record is built once at open and read back here
 * too (dlock_owner_parse()), so every backend writes and reads one format:
 *
 *   id=IDENTITY&host=HOST&pid=PID
 *
 * with every byte outside [A-Za-z0-9._~:-] as %XX (dlock_percent_encode(),
 * which drivers use for fields of their own).  Unknown keys are skipped
 * when reading, so a later library may append fields.
 *
 * Threads: the record is written before the client is shared and only
 * read afterwards.  No secrets: an identity is shown to anyone who can
 * inspect, as the docs of the option say.
 */
#include "owner.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

dlock_status dlock_identity_check(const char *identity, dlock_error *err)
{
	if (!identity || !*identity)
		return dlock_error_set(err, DLOCK_EINVAL, "the identity must not be empty");
	size_t len = strlen(identity);
	if (len > DLOCK_IDENTITY_MAX)
		return dlock_error_set(err, DLOCK_EINVAL, "the identity is %zu bytes, more than %d", len,
		                       DLOCK_IDENTITY_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)identity[i];
		if (ch < 0x20 || ch == 0x7f)
			return dlock_error_set(err, DLOCK_EINVAL, "the identity has a control character at byte %zu",
			                       i + 1);
	}
	return DLOCK_OK;
}

static int plain_byte(unsigned char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' ||
	       ch == '_' || ch == '~' || ch == ':' || ch == '-';
}

size_t dlock_percent_encode(char *out, size_t cap, size_t n, const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < len && n + 4 < cap; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (plain_byte(ch)) {
			out[n++] = (char)ch;
		} else {
			out[n++] = '%';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		}
	}
	out[n] = '\0';
	return n;
}

void dlock_owner_init(struct dlock_owner *o, const char *identity)
{
	memset(o, 0, sizeof *o);
	if (gethostname(o->host, sizeof o->host - 1) != 0 || !o->host[0])
		snprintf(o->host, sizeof o->host, "localhost");
	o->host[sizeof o->host - 1] = '\0';
	o->pid = (long)getpid();
	if (identity)
		snprintf(o->identity, sizeof o->identity, "%s", identity);
	else
		snprintf(o->identity, sizeof o->identity, "%.100s:%ld", o->host, o->pid);

	size_t n = 0;
	memcpy(o->record, "id=", 3);
	n = 3;
	n = dlock_percent_encode(o->record, sizeof o->record, n, o->identity, strlen(o->identity));
	n += (size_t)snprintf(o->record + n, sizeof o->record - n, "&host=");
	n = dlock_percent_encode(o->record, sizeof o->record, n, o->host, strlen(o->host));
	n += (size_t)snprintf(o->record + n, sizeof o->record - n, "&pid=%ld", o->pid);
	o->record_len = n < sizeof o->record ? n : sizeof o->record - 1;
}

long dlock_percent_decode(char *out, size_t cap, const char *s, size_t len)
{
	const char *end = s + len;
	long n = 0;
	while (s < end) {
		int ch = (unsigned char)*s;
		if (ch == '%') {
			if (end - s < 3 || dlock_hex_digit(s[1]) < 0 || dlock_hex_digit(s[2]) < 0)
				return -1;
			ch = dlock_hex_digit(s[1]) * 16 + dlock_hex_digit(s[2]);
			s += 3;
		} else {
			s++;
		}
		if (ch == 0)
			return -1;
		if ((size_t)n + 1 < cap)
			out[n] = (char)ch;
		n++;
	}
	out[(size_t)n < cap ? (size_t)n : cap - 1] = '\0';
	return n;
}

/* Decode [s, end) into out (cap bytes, cut to fit); 0 on a bad escape or a NUL byte. */
static int unescape(const char *s, const char *end, char *out, size_t cap)
{
	return dlock_percent_decode(out, cap, s, (size_t)(end - s)) >= 0;
}

int dlock_owner_parse(const char *rec, size_t len, char *identity, size_t idcap, char *host, size_t hostcap,
                      int64_t *pid)
{
	if (!rec || len < 3 || memcmp(rec, "id=", 3) != 0)
		return 0;
	const char *end = rec + len;
	int have_id = 0;
	for (const char *item = rec; item < end;) {
		const char *amp = memchr(item, '&', (size_t)(end - item));
		const char *item_end = amp ? amp : end;
		const char *eq = memchr(item, '=', (size_t)(item_end - item));
		if (eq) {
			size_t klen = (size_t)(eq - item);
			if (klen == 2 && memcmp(item, "id", 2) == 0) {
				if (!unescape(eq + 1, item_end, identity, idcap))
					return 0;
				have_id = 1;
			} else if (klen == 4 && memcmp(item, "host", 4) == 0) {
				if (!unescape(eq + 1, item_end, host, hostcap))
					return 0;
			} else if (klen == 3 && memcmp(item, "pid", 3) == 0) {
				int64_t v = 0;
				for (const char *d = eq + 1; d < item_end; d++) {
					if (*d < '0' || *d > '9' || v > INT64_MAX / 10 - 10)
						return 0;
					v = v * 10 + (*d - '0');
				}
				*pid = v;
			}
		}
		item = amp ? amp + 1 : end;
	}
	return have_id;
}
