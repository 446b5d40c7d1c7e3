/*
 * The server-side identity of a lock name — fixed and documented, because
 * every client of every version must map a name to the same resource.
 *
 * Both modes start from the namespaced name: the bytes prefix ":" name
 * (prefix is the URI's `prefix`, default "dlock"; the name's bytes as
 * given, UTF-8 or not).
 *
 *   row mode:      that byte string is the bytea primary key of the table.
 *   advisory mode: key = the first 8 bytes of its SHA-256, read as a
 *                  big-endian unsigned 64-bit number and stored as
 *                  PostgreSQL's bigint (two's complement), for
 *                  pg_advisory_lock(bigint).
 *
 * Not hashtext(): it is 32-bit (a collision among ~77k names is already
 * an even bet) and may change between server versions.  With 64 bits, n
 * names share a key with probability about n^2 / 2^65.  The golden vectors
 * in tests/test_postgres.c pin this function.
 */
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

char *dlock_pg_namespaced(const char *prefix, const char *name, size_t len, size_t *outlen)
{
	size_t plen = strlen(prefix);
	char *buf = malloc(plen + 1 + len + 1);
	if (!buf)
		return NULL;
	memcpy(buf, prefix, plen);
	buf[plen] = ':';
	memcpy(buf + plen + 1, name, len);
	buf[plen + 1 + len] = '\0';
	*outlen = plen + 1 + len;
	return buf;
}

int64_t dlock_pg_key(const char *namespaced, size_t len)
{
	unsigned char digest[32];
	dlock_sha256(namespaced, len, digest);
	uint64_t k = 0;
	for (int i = 0; i < 8; i++)
		k = k << 8 | digest[i];
	return (int64_t)k;
}
