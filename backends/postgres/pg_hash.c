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
 *   semaphores:    two-int keys, pg_advisory_lock(int4, int4)
 *                  (objsubid 2 in pg_locks, a space apart from the bigint
 *                  keys): classid = bytes 8..11 of that SHA-256 (big-endian)
 *                  & 0x7fffffff; objid = 0x40000000 | (bytes 12..15 &
 *                  0x3ffff000) + offset, where offset 0..1023 is a permit's
 *                  slot, 1023 + N the marker of a semaphore of N permits, and
 *                  2048 the key every semaphore holder and waiter of the
 *                  name holds shared (pg_sem.c, pg_row_sem.c), 2049 the key
 *                  every reader of row mode holds shared (pg_row.c), 2050
 *                  the key a writer of advisory mode holds shared beside
 *                  the bigint key (pg_advisory.c).  Both numbers are
 *                  non-negative, so int4 and oid agree; bit 30 keeps the
 *                  objid off the setup lock (objid 1, pg_setup.c).
 *
 * Not hashtext(): it is 32-bit (a collision among ~77k names is already
 * an even bet) and may change between server versions.  With 64 bits, n
 * names share a key with probability about n^2 / 2^65.  The golden vectors
 * in tests/test_postgres.c pin this function.
 */
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"

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

void dlock_pg_sem_keys(const char *namespaced, size_t len, int32_t *hi, int32_t *base)
{
	unsigned char digest[32];
	dlock_sha256(namespaced, len, digest);
	uint32_t a = 0, b = 0;
	for (int i = 8; i < 12; i++)
		a = a << 8 | digest[i];
	for (int i = 12; i < 16; i++)
		b = b << 8 | digest[i];
	*hi = (int32_t)(a & 0x7fffffffu);
	*base = (int32_t)(0x40000000u | (b & 0x3ffff000u));
}
