/*
 * What the dlock command writes: its own messages on stderr (cli_say),
 * and untrusted bytes escaped for its output.
 *
 * Messages: "dlock: MESSAGE" as one line, written under the stream's lock,
 * so that a line from the library's log (its own thread) never mixes
 * with one of dlock's.
 *
 * Text: bytes 0x20..0x7E are written as they are, except the backslash,
 * written "\\"; every other byte (controls, DEL, and all bytes of 0x80 and
 * above, so also UTF-8) is written "\xNN" in lowercase hex.  A hostile name
 * can therefore neither send a terminal sequence nor pass for another name:
 * the escaped form is unambiguous and the bytes can be recovered from it.
 *
 * JSON (RFC 8259): a string is written as UTF-8.  '"' and '\' are escaped,
 * controls (U+0000..U+001F), DEL, the C1 controls (U+0080..U+009F) and
 * U+2028/U+2029 are written \u00XX / \u2028 (the same code points, so this
 * is faithful).  A byte that is not part of a valid UTF-8 sequence
 * (overlong forms, surrogates and code points above U+10FFFF included)
 * cannot be written faithfully in a JSON string: it becomes U+FFFD, and
 * the field is followed by a second one, KEY_hex, holding the exact bytes
 * of the value in lowercase hex, so that a program can still tell two such
 * names apart and pass the real bytes back (dlock break NAME).
 *
 * Written here and not taken from a library: the JSON libraries of Debian
 * bookworm do not apply this rule.  jansson refuses a string that is not
 * valid UTF-8 (json_stringn() fails), json-c copies such bytes into its
 * output unchecked (the output is then not JSON); with either, dlock would
 * still validate UTF-8 itself, for a new dependency of the command and its
 * package.  The output is small (one object per lock), so a hand-written
 * writer of a hundred lines is the smaller risk.
 *
 * Threads: no state; cli_say() from any thread.  Errors: those of the
 * stream, left for the caller (a message that cannot be written is lost).
 */
#include "dlock_out.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static const char hex[] = "0123456789abcdef";

void cli_vsay(const char *fmt, va_list ap)
{
	/* One locked stream: the library may log from its own thread. */
	flockfile(stderr);
	fputs("dlock: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	funlockfile(stderr);
}

void cli_say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vsay(fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ text */

static int text_plain(unsigned char c)
{
	return c >= 0x20 && c <= 0x7e && c != '\\';
}

/* The escaped form of byte c into one[] (4 bytes at most); returns its length. */
static size_t text_escape(unsigned char c, char one[4])
{
	if (text_plain(c)) {
		one[0] = (char)c;
		return 1;
	}
	if (c == '\\') {
		one[0] = one[1] = '\\';
		return 2;
	}
	one[0] = '\\';
	one[1] = 'x';
	one[2] = hex[c >> 4];
	one[3] = hex[c & 15];
	return 4;
}

void cli_out_text(FILE *f, const char *s)
{
	char one[4];

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		size_t n = text_escape(*p, one);

		fwrite(one, 1, n, f);
	}
}

const char *cli_text(char *buf, size_t len, const char *s)
{
	const unsigned char *p;
	size_t total = 0, at = 0, room;
	char one[4];

	if (len == 0)
		return buf;
	for (p = (const unsigned char *)s; *p; p++)
		total += text_escape(*p, one);
	/* Cut: whole escapes only, then "..." (when there is room for it). */
	room = total < len ? total : len > 4 ? len - 4 : 0;
	for (p = (const unsigned char *)s; *p; p++) {
		size_t n = text_escape(*p, one);

		if (at + n > room)
			break;
		memcpy(buf + at, one, n);
		at += n;
	}
	if (total >= len && len > 4) {
		memcpy(buf + at, "...", 3);
		at += 3;
	}
	buf[at] = '\0';
	return buf;
}

/* ------------------------------------------------------------------ JSON */

/*
 * Length of the valid UTF-8 sequence at p (1..4) with its code point in
 * *cp, or 0 when the byte at p does not start one.
 */
static size_t utf8_seq(const unsigned char *p, uint32_t *cp)
{
	uint32_t c = p[0], min;
	size_t n;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		c &= 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		c &= 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		c &= 0x07;
		min = 0x10000;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80) /* also stops at the NUL */
			return 0;
		c = (c << 6) | (p[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

/* Write s as a JSON string; returns 1 when s was valid UTF-8. */
static int json_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	int valid = 1;

	putc('"', f);
	while (*p) {
		uint32_t cp;
		size_t n = utf8_seq(p, &cp);

		if (n == 0) {
			fputs("\xef\xbf\xbd", f); /* U+FFFD */
			valid = 0;
			p++;
			continue;
		}
		if (cp == '"' || cp == '\\')
			fprintf(f, "\\%c", (char)cp);
		else if (cp == '\n')
			fputs("\\n", f);
		else if (cp == '\t')
			fputs("\\t", f);
		else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029)
			fprintf(f, "\\u%04" PRIx32, cp);
		else
			fwrite(p, 1, n, f);
		p += n;
	}
	putc('"', f);
	return valid;
}

void cli_out_json_field(FILE *f, const char *key, const char *s)
{
	fprintf(f, "\"%s\":", key);
	if (s == NULL) {
		fputs("null", f);
		return;
	}
	if (json_string(f, s))
		return;
	fprintf(f, ",\"%s_hex\":\"", key);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		fprintf(f, "%c%c", hex[*p >> 4], hex[*p & 15]);
	putc('"', f);
}

/* ------------------------------------------------------------------ time */

const char *cli_iso8601(char *buf, size_t len, int64_t ms)
{
	time_t secs = (time_t)(ms / 1000);
	int frac = (int)(ms % 1000);
	struct tm tm;

	if (frac < 0) {
		secs--;
		frac += 1000;
	}
	if (gmtime_r(&secs, &tm) == NULL) {
		snprintf(buf, len, "@%" PRId64 "ms", ms);
		return buf;
	}
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
	         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
	return buf;
}
