/*
 * Redis backend: the names of a lock's keys (the layout: redis_key.h), and
 * how long its fencing counter outlives the leases.  Beneath every file
 * that sends a lock's commands; calls only the core's digest, the
 * cluster's hash slot and the argument lists of redis_conn.c.
 *
 * A handle keeps the digest of its name, not the names of its keys: each
 * command builds those it sends (dlock_redis_arg_key), so that a client
 * holding 10,000 locks keeps no key name at all.
 */
#include <stdlib.h>
#include <string.h>

#include "redis_cluster.h"
#include "redis_key.h"

void dlock_redis_lock_name(struct redis_lock *lk, const char *name, size_t len)
{
	unsigned char sum[32];
	char digest[REDIS_DIGEST_HEX + 1];
	dlock_sha256(name, len, sum);
	dlock_hex(sum, REDIS_DIGEST_HEX / 2, digest);
	memcpy(lk->digest, digest, REDIS_DIGEST_HEX);
	/* A cluster routes every key of the lock by the slot of its hash tag, {D}: the prefix is not hashed. */
	char tag[2 + REDIS_DIGEST_HEX];
	tag[0] = '{';
	memcpy(tag + 1, digest, REDIS_DIGEST_HEX);
	tag[1 + REDIS_DIGEST_HEX] = '}';
	lk->slot = dlock_redis_key_slot(tag, sizeof tag);
}

size_t dlock_redis_key(const struct redis_client *c, const struct redis_lock *lk, const char *suffix, const char *id,
                       char out[REDIS_KEY_MAX])
{
	size_t n = c->prefixlen, s = strlen(suffix), i = id ? strnlen(id, REDIS_OWNER_HEX - 1) : 0;
	memcpy(out, c->prefix, n);
	memcpy(out + n, ":{", 2);
	memcpy(out + n + 2, lk->digest, REDIS_DIGEST_HEX);
	n += 2 + REDIS_DIGEST_HEX;
	memcpy(out + n, "}:", 2);
	memcpy(out + n + 2, suffix, s);
	n += 2 + s;
	if (i) /* memcpy from NULL is undefined, even of no bytes */
		memcpy(out + n, id, i);
	n += i;
	out[n] = '\0';
	return n;
}

void dlock_redis_arg_key(struct redis_args *a, const struct redis_client *c, const struct redis_lock *lk,
                         const char *suffix, const char *id)
{
	if (a->used + REDIS_KEY_MAX > sizeof a->bytes)
		abort(); /* more names than REDIS_LOCK_NAMES_MAX: a programming error, never input-dependent */
	char *p = a->bytes + a->used;
	size_t n = dlock_redis_key(c, lk, suffix, id, p);
	a->used += n + 1;
	dlock_redis_argn(a, p, n);
}

/* The fencing counter outlives any lease by far, and at least a week. */
#define FENCE_TTL_MIN_MS (7LL * 24 * 3600 * 1000)
#define FENCE_TTL_LEASES 100

int64_t dlock_redis_fence_ttl_ms(int64_t lease_ms)
{
	return lease_ms > FENCE_TTL_MIN_MS / FENCE_TTL_LEASES ? lease_ms * FENCE_TTL_LEASES : FENCE_TTL_MIN_MS;
}
