/*
 * Helpers for the core and for drivers (include/dlock/sys/driver.h):
 * clock, randomness, digests, names, decimals.
 *
 * Threads: no state; every function may be called from any thread.
 * Errors: only dlock_random_bytes() fails (DLOCK_EIO).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/evp.h>

#include "dlock/sys/driver.h"
#include "util.h"

int64_t dlock_monotonic_ns(void)
{
	struct timespec ts;
	/* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

dlock_status dlock_random_bytes(void *buf, size_t len)
{
	if (!buf && len)
		return DLOCK_EINVAL;
	unsigned char *p = buf;
	/* getrandom() may return fewer bytes than asked (signals, large requests). */
	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return DLOCK_EIO;
		}
		p += n;
		len -= (size_t)n;
	}
	return DLOCK_OK;
}

void dlock_sha256(const void *data, size_t len, unsigned char out[32])
{
	unsigned int outlen = 0;
	if (!data)
		data = "";
	/*
	 * The digest names on-disk files and server keys, so a wrong value would
	 * let two processes map one lock name to two resources and both "hold"
	 * it.  EVP_Digest only fails when OpenSSL cannot allocate or load its
	 * default provider; with no way to report that through this signature,
	 * stopping is the only safe answer.
	 */
	if (EVP_Digest(data, len, out, &outlen, EVP_sha256(), NULL) != 1 || outlen != 32)
		abort();
}

void dlock_hex(const unsigned char *bytes, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 0x0f];
	}
	out[2 * len] = '\0';
}

/* ------------------------------------------------------- name components */

#define COMPONENT_HASH_HEX 64
/* Longest escaped prefix kept in front of "~" and the digest. */
#define COMPONENT_CUT (DLOCK_COMPONENT_MAX - 1 - COMPONENT_HASH_HEX)

static int component_safe(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
	       c == '-';
}

/*
 * Escape bytes of `name` into `out` while they fit in `room` characters; a
 * %XX triple is written whole or not at all, so a cut never splits one.
 * Returns the characters written and stores in *used the bytes consumed.
 */
static size_t escape_into(const unsigned char *name, size_t len, char *out, size_t room, size_t *used)
{
	static const char digits[] = "0123456789ABCDEF";
	size_t o = 0, i = 0;
	for (; i < len; i++) {
		size_t need = component_safe(name[i]) ? 1 : 3;
		if (o + need > room)
			break;
		if (need == 1) {
			out[o++] = (char)name[i];
		} else {
			out[o++] = '%';
			out[o++] = digits[name[i] >> 4];
			out[o++] = digits[name[i] & 0x0f];
		}
	}
	*used = i;
	return o;
}

/*
 * Why this is injective: the escaping is a prefix code, so two names with
 * the same short form are the same name.  Short forms never contain '~'
 * (it is escaped), while every long form does, so a short form never
 * equals a long one.  Two long forms differ in their digest of the whole
 * name.  An empty name (never valid as a lock name) takes the long form so
 * that the result is never "".  '.' is escaped, so "." and ".." cannot be
 * produced, and neither can '/'.
 */
void dlock_name_component(const char *name, size_t len, char *out)
{
	const unsigned char *raw = (const unsigned char *)(name ? name : "");
	size_t used = 0;
	size_t n = escape_into(raw, len, out, DLOCK_COMPONENT_MAX, &used);
	if (len > 0 && used == len) {
		out[n] = '\0';
		return;
	}
	/* Too long: keep as many whole escapes as fit in front of the digest. */
	n = escape_into(raw, len, out, COMPONENT_CUT, &used);
	unsigned char digest[32];
	dlock_sha256(raw, len, digest);
	out[n++] = '~';
	dlock_hex(digest, sizeof digest, out + n);
}

size_t dlock_decimal(char *out, int64_t v)
{
	char digits[DLOCK_DECIMAL_MAX];
	size_t n = 0, o = 0;
	/* In unsigned arithmetic, so that INT64_MIN has a magnitude too. */
	uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do {
		digits[n++] = (char)('0' + m % 10);
		m /= 10;
	} while (m);
	if (v < 0)
		out[o++] = '-';
	while (n)
		out[o++] = digits[--n];
	out[o] = '\0';
	return o;
}

int dlock_hex_digit(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int dlock_name_component_decode(const char *comp, size_t comp_len, char *out)
{
	if (!comp || comp_len == 0 || comp_len > DLOCK_COMPONENT_MAX)
		return -1;
	if (memchr(comp, '~', comp_len))
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < comp_len; n++) {
		if (n >= DLOCK_NAME_MAX)
			return -1;
		if (comp[i] != '%') {
			out[n] = comp[i++];
			continue;
		}
		int hi = i + 2 < comp_len ? dlock_hex_digit(comp[i + 1]) : -1;
		int lo = i + 2 < comp_len ? dlock_hex_digit(comp[i + 2]) : -1;
		if (hi < 0 || lo < 0)
			return -1;
		out[n] = (char)(hi << 4 | lo);
		i += 3;
	}
	if (memchr(out, '\0', n))
		return -1;
	/* Only the one spelling dlock_name_component() writes stands for a name. */
	char again[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(out, n, again);
	return strlen(again) == comp_len && memcmp(again, comp, comp_len) == 0 ? (int)n : -1;
}
