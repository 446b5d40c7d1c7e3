/*
 * libFuzzer harness for dlock_name_component() (core/util.c), which turns a
 * lock name into one file name (file://) or znode name (zk://).
 *
 * The input is the name, any bytes.  Properties:
 *   - the component is 1..DLOCK_COMPONENT_MAX bytes of [A-Za-z0-9_%~-],
 *     never "." or "..", so it can never climb out of its directory;
 *   - a short form (no '~') decodes back to exactly the name, so two names
 *     never share one;
 *   - a long form is whole %XX escapes of a prefix of the name, then '~'
 *     and the hex SHA-256 of the whole name;
 *   - the same name always gives the same component.
 */
#include "fuzz.h"

#include "dlock/sys/driver.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1; /* lower case is never written */
}

static int safe(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/*
 * Decode the escaped part [s, s+n) and compare it with the start of `name`
 * (len bytes).  Returns the bytes decoded, or -1 when the text is not a
 * sequence of safe bytes and upper-case %XX escapes of unsafe bytes.
 */
static long decode_prefix(const char *s, size_t n, const unsigned char *name, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++, o++) {
		int byte;
		if (s[i] == '%') {
			if (i + 2 >= n)
				return -1;
			int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			byte = hi << 4 | lo;
			if (safe((unsigned char)byte))
				return -1; /* a safe byte is always written as itself */
			i += 2;
		} else {
			byte = (unsigned char)s[i];
			if (!safe((unsigned char)byte))
				return -1;
		}
		if (o >= len || name[o] != byte)
			return -1;
	}
	return (long)o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *name = (const char *)data;
	char out[DLOCK_COMPONENT_MAX + 1 + 16], again[DLOCK_COMPONENT_MAX + 1];
	memset(out, 'x', sizeof out);
	dlock_name_component(name, size, out);
	size_t n = strnlen(out, sizeof out);
	FUZZ_CHECK(n >= 1 && n <= DLOCK_COMPONENT_MAX);
	FUZZ_CHECK(strcmp(out, ".") != 0 && strcmp(out, "..") != 0);
	FUZZ_CHECK(strspn(out, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_%~-") == n);

	size_t escaped = 0;
	for (size_t i = 0; i < size; i++)
		escaped += safe(data[i]) ? 1 : 3;
	const char *tilde = strchr(out, '~');
	if (!tilde) {
		/* Short form: it is the whole name, escaped. */
		FUZZ_CHECK(size > 0 && escaped <= DLOCK_COMPONENT_MAX);
		FUZZ_CHECK(decode_prefix(out, n, data, size) == (long)size);
	} else {
		/* Long form: as many whole escapes as fit, '~', the digest of the whole name. */
		size_t cut = (size_t)(tilde - out);
		unsigned char sum[32];
		char hex[65];
		FUZZ_CHECK(size == 0 || escaped > DLOCK_COMPONENT_MAX);
		dlock_sha256(name, size, sum);
		dlock_hex(sum, sizeof sum, hex);
		FUZZ_CHECK(strcmp(tilde + 1, hex) == 0);
		long used = decode_prefix(out, cut, data, size);
		FUZZ_CHECK(used >= 0 && (size == 0 || (size_t)used < size));
		if (size > 0)
			FUZZ_CHECK(cut + (safe(data[used]) ? 1 : 3) > DLOCK_COMPONENT_MAX - 1 - 64);
	}
	dlock_name_component(name, size, again);
	FUZZ_CHECK(strcmp(out, again) == 0);
	return 0;
}
