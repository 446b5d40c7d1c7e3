/*
 * Redis backend: the Lua scripts, SCRIPT LOAD, EVALSHA with EVAL fallback
 * (redis_scripts.c).  Never included outside backends/redis/.
 */
#ifndef DLOCK_REDIS_SCRIPTS_H
#define DLOCK_REDIS_SCRIPTS_H

#include "redis_conn.h"

/* ------------------------------------------------------------ scripts */

enum redis_script_id {
	REDIS_SCRIPT_ACQUIRE, /* KEYS lock, fence; ARGV owner, lease ms, fence ttl ms, owner record
	                         -> {1, token} | {0, pttl} */
	REDIS_SCRIPT_RELEASE, /* KEYS lock; ARGV owner, channel, PUBLISH|SPUBLISH -> 1 released | 0 not ours */
	REDIS_SCRIPT_EXTEND,  /* KEYS lock; ARGV owner, lease ms -> 1 extended | 0 not ours */
	REDIS_SCRIPT_ENQUEUE, /* fair=1, KEYS lock, queue, waiters, fence: wait in the queue (see the script) */
	REDIS_SCRIPT_HANDOFF, /* fair=1, same KEYS: release to the next waiter, or withdraw from the queue */
	/* Readers of a read-write lock (KEYS lock, readers[, fence], holders last; see the scripts): */
	REDIS_SCRIPT_READ_ACQUIRE, /* KEYS lock, readers, fence, holders; ARGV owner, lease ms, "1" for a token,
	                              owner record -> {1, latest token} | {0, pttl} */
	REDIS_SCRIPT_READ_RELEASE, /* KEYS lock, readers, holders; ARGV owner, channel, PUBLISH|SPUBLISH
	                              -> 1 | 0 not ours */
	REDIS_SCRIPT_READ_EXTEND,  /* KEYS lock, readers, holders; ARGV owner, lease ms -> 1 extended | 0 not ours */
	REDIS_SCRIPT_READ_CHECK,   /* KEYS lock, readers; ARGV owner -> 1 ours | 0 not ours */
	/* Permits of a semaphore (KEYS lock, permits, slots, waiters, N[, fence], holders last; see the scripts): */
	REDIS_SCRIPT_SEM_ACQUIRE, /* + fence, queue, woken; ARGV owner, lease ms, N, waiter id ("": try once),
	                             fence ttl ms ("0": no token), owner record, "1" to queue
	                             -> {1, token, slot} | {0, ms to look again, watch} | {-1, N, 0} */
	REDIS_SCRIPT_SEM_RELEASE, /* + queue, woken; ARGV owner, channel, PUBLISH|SPUBLISH, N, waiters' channel
	                             prefix -> 1 released | 0 not ours */
	REDIS_SCRIPT_SEM_WITHDRAW, /* + queue, woken; ARGV waiter id, PUBLISH|SPUBLISH, N, waiters' channel
	                              prefix -> 1 */
	REDIS_SCRIPT_SEM_EXTEND,  /* ARGV owner, lease ms -> 1 extended | 0 not ours */
	REDIS_SCRIPT_SEM_CHECK,   /* KEYS lock, permits; ARGV owner -> 1 ours | 0 not ours */
	/* Every kind at once (KEYS lock, queue, waiters, fence, readers, permits, slots, holders, pwaiters,
	 * npermits; see the scripts): */
	REDIS_SCRIPT_INSPECT, /* read-only -> {value, pttl, now, queue length, semaphore waiters, N, holders...} */
	REDIS_SCRIPT_BREAK,   /* ARGV channel, PUBLISH|SPUBLISH -> live holders removed */
	REDIS_SCRIPT_PROCLAIM, /* KEYS lock; ARGV owner, record with the leader's value, channel,
	                          PUBLISH|SPUBLISH -> 1 kept | 0 not ours */
	REDIS_SCRIPT_COUNT
};

/* SHA1 of each script as the server reported it; "" when SCRIPT LOAD was refused. */
struct redis_scripts {
	char sha[REDIS_SCRIPT_COUNT][41];
};

/** SCRIPT LOAD every script on `ctx`.  I/O errors and NOAUTH fail; another refusal means EVAL. */
dlock_status dlock_redis_scripts_load(struct redis_conn *ctx, const struct redis_endpoint *ep,
                                      struct redis_scripts *s, dlock_error *err);
/** Queue EVALSHA (EVAL without a sha) of `id` with `nkeys` keys first in `a`. */
int dlock_redis_script_append(struct redis_conn *ctx, const struct redis_scripts *s, enum redis_script_id id,
                              int nkeys, const struct redis_args *a);
/** Queue EVAL of `id` (the script's text): for a server that answered NOSCRIPT. */
int dlock_redis_script_append_eval(struct redis_conn *ctx, enum redis_script_id id, int nkeys,
                                   const struct redis_args *a);
/** Read the reply of an appended script; on NOSCRIPT, run it with EVAL.  NULL on I/O error. */
redisReply *dlock_redis_script_read(struct redis_conn *ctx, enum redis_script_id id, int nkeys,
                                    const struct redis_args *a);
/** Append and read. */
redisReply *dlock_redis_script_run(struct redis_conn *ctx, const struct redis_scripts *s, enum redis_script_id id,
                                   int nkeys, const struct redis_args *a);

#endif
