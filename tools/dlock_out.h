/*
 * What the dlock command writes: its messages on stderr, and untrusted
 * bytes on its output.  Lock names, identities, hosts and sessions come
 * from other processes through the server, and may hold any byte but NUL.
 * Text output escapes them so that they cannot move the terminal; JSON
 * output is valid JSON whatever the bytes.  The rules are stated in
 * dlock_out.c and in dlock(1).
 *
 * Threads: no state; cli_say() may be called from any thread; for the
 * others the caller owns the FILE (and its lock, if shared).
 * Errors: none reported here; the caller checks ferror() on the stream.
 */
#ifndef DLOCK_TOOLS_OUT_H
#define DLOCK_TOOLS_OUT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** Print "dlock: MESSAGE\n" to stderr as one line.  Thread-safe. */
void cli_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/** cli_say() with a va_list.  stderr's lock is recursive: a caller may hold it to add lines after. */
void cli_vsay(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/** Write `s` as text: printable ASCII as is, a backslash as "\\", any other byte as "\xNN". */
void cli_out_text(FILE *f, const char *s);

/**
 * `s` escaped as cli_out_text() would write it, into buf (always
 * NUL-terminated; cut with "..." when it does not fit).  Returns buf.
 */
const char *cli_text(char *buf, size_t len, const char *s);

/**
 * Write `"key":VALUE` to f: VALUE is `null` for s == NULL, else `s` as a
 * JSON string; when `s` is not valid UTF-8, `,"key_hex":"HEX"` follows with
 * its exact bytes (see dlock_out.c).
 */
void cli_out_json_field(FILE *f, const char *key, const char *s);

/** `ms` (Unix time in milliseconds) as ISO 8601 UTC, "2026-11-25T14:57:31.123Z", into buf. */
const char *cli_iso8601(char *buf, size_t len, int64_t ms);

#endif
