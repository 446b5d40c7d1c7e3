/*
 * Redis backend: the names of a lock's keys (redis_key.c), built from the
 * handle's digest into each command's own arguments.
 *
 * Keys of a lock: PREFIX:{D}:lock ("OWNER TOKEN ACQUIRED_MS RECORD": the
 * owner value, then what inspection shows of the holder (redis_scripts.c;
 * a writer's RECORD ends in REDIS_RWLOCK_FIELD), or the owner value alone
 * as the previous release wrote it; TTL = lease; "shared" while
 * readers of a read-write lock hold it, "semaphore" while permits of a
 * semaphore do), PREFIX:{D}:fence (fencing counter),
 * PREFIX:{D}:readers (a read-write lock's readers, see redis_scripts.c),
 * PREFIX:{D}:permits, :slots, :pwaiters, :npermits, :pqueue and :pwoken
 * (a semaphore's permits, their slots, its waiters, its N, its wake-up
 * queue and the waiters promised a permit; the channel :pwake:WAITER of
 * each queued waiter; see redis_sem.c),
 * PREFIX:{D}:holders (each reader's or permit's "TOKEN ACQUIRED_MS RECORD"),
 * with fair=1 PREFIX:{D}:queue and PREFIX:{D}:waiters (the
 * waiter queue, see redis_scripts.c), and the channel PREFIX:{D}:released,
 * where D is the first 32 hex digits of the SHA-256 of the name (the prefix
 * at most REDIS_PREFIX_MAX bytes).  A handle keeps D only, and each command
 * builds the names it sends into its own arguments.  They differ
 * only after the "}" that closes the digest, so they share a Redis Cluster
 * slot whatever the prefix holds, and braces or any other byte of the name
 * cannot reach a key.  With fair=1, a release grants the lock to a waiter
 * by pushing onto PREFIX:{D}:grant:OWNER, the waiter's own list, which the
 * waiter blocks on (BLPOP).
 *
 * Threads: any; these functions only read the client and the handle.
 * Errors: none (every bound is a compile-time one).
 */
#ifndef DLOCK_REDIS_KEY_H
#define DLOCK_REDIS_KEY_H

#include "redis_client.h"

/* A key's name, NUL included: PREFIX:{D}:SUFFIX, the longest suffix "grant:" or "pwake:" and an owner value. */
#define REDIS_KEY_MAX (REDIS_PREFIX_MAX + 4 + REDIS_DIGEST_HEX + 6 + REDIS_OWNER_HEX)
/* The names one command sends at most (a semaphore's release: its 8 keys, its channel and the stem of pwake). */
#define REDIS_LOCK_NAMES_MAX 10
_Static_assert(REDIS_LOCK_NAMES_MAX * REDIS_KEY_MAX <= REDIS_ARGS_BYTES, "a command's key names fit its arguments");

/** lk->digest and lk->slot for a name of `len` bytes (also inspection's and elections' handles). */
void dlock_redis_lock_name(struct redis_lock *lk, const char *name, size_t len);
/** PREFIX:{D}:SUFFIX of lk, then `id` (an owner value or a waiter's id: grant:OWNER, pwake:WAITER) unless NULL,
 *  NUL-terminated into `out`; returns its length. */
size_t dlock_redis_key(const struct redis_client *c, const struct redis_lock *lk, const char *suffix, const char *id,
                       char out[REDIS_KEY_MAX]);
/** Append that name to `a`, built into a's own bytes (REDIS_LOCK_NAMES_MAX names per command at most). */
void dlock_redis_arg_key(struct redis_args *a, const struct redis_client *c, const struct redis_lock *lk,
                         const char *suffix, const char *id);
/** The fencing counter's (PREFIX:{D}:fence) expiry for acquisitions of `lease_ms`: far longer than any lease. */
int64_t dlock_redis_fence_ttl_ms(int64_t lease_ms);

#endif
