/*
 * Redis backend: the lock algorithms, the second axis of the client's mode
 * table (redis_client.h), and the single instance's functions
 * (redis_lock.c) that the algorithms "single" and "fair" share and
 * RedLock's rounds build on.  Never included outside backends/redis/.
 *
 * Threads: a client is shared, a handle is used by one acquisition at a
 * time.  Errors: statuses and messages of redis_conn.c; error replies
 * become statuses (redis_route.c).
 */
#ifndef DLOCK_REDIS_LOCK_H
#define DLOCK_REDIS_LOCK_H

#include "redis_client.h"

/* A lock key's value: "OWNER TOKEN ACQUIRED_MS RECORD" (redis_scripts.c), at most this long. */
#define REDIS_VALUE_MAX (REDIS_OWNER_HEX + 48 + DLOCK_OWNER_MAX)

/* fair=1: how long the queue's keys, and a waiter's withdrawal, are kept after their last use (ms): past
 * every queued waiter's deadline (redis_fair.c: 3 refreshes of at most 1 s), twice over. */
#define REDIS_FAIR_QUEUE_TTL_MS 6000

/* ------------------------------------------------------------ the algorithms */

/*
 * A lock algorithm, chosen at open (redis.c) from the URI: the only
 * dispatch after the driver table.  Each of the driver's lock methods
 * (redis.c) checks what every algorithm would, then makes one call through
 * the client's entry, and nothing beneath calls through it again; the
 * driver's extend_many (redis_renew.c) makes one call to `extend` for each
 * lock that a pipeline cannot renew.  Each method has the meaning of the
 * driver method of that name (dlock/sys/driver.h); `acquire` is set only
 * where the server queues the waiters, `try_acquire` where the core's loop
 * waits.
 */
struct redis_algorithm {
	const char *name;          /* "single", "redlock", "fair" */
	dlock_fencing fencing;     /* what its tokens guarantee */
	dlock_wakeup wakeup;       /* how its waiters learn of a release */
	dlock_status (*try_acquire)(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
	                            dlock_retry *retry, dlock_acquired *out, dlock_error *err);
	void (*disarm)(struct redis_client *c, struct redis_lock *lk); /* NULL: arms nothing */
	dlock_status (*acquire)(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
	                        dlock_acquired *out, dlock_error *err);
	dlock_status (*release)(struct redis_client *c, struct redis_lock *lk, dlock_error *err);
	dlock_status (*extend)(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_error *err);
	dlock_status (*check)(struct redis_client *c, struct redis_lock *lk, dlock_error *err);
};

extern const struct redis_algorithm dlock_redis_single;  /* redis_lock.c */
extern const struct redis_algorithm dlock_redis_redlock; /* redlock.c */
extern const struct redis_algorithm dlock_redis_fair;    /* redis_fair.c */

/* ------------------------------------------------------------ lock values */

/** A fresh random owner value into lk->owner. */
dlock_status dlock_redis_new_owner(struct redis_lock *lk, dlock_error *err);
/** A new owner value, and in `a` the command SET key value NX PX lease_ms, the value "OWNER 0 -1 RECORD"
 *  written into `value` (no token, acquisition time unknown), `lease` keeping the number. */
dlock_status dlock_redis_set_nx(const struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, char lease[24],
                               char value[REDIS_VALUE_MAX], struct redis_args *a, dlock_error *err);
/** 1 when a lock key's value `v` (`len` bytes) is `owner`'s: the value itself (an older release's) or its
 *  first word. */
int dlock_redis_owns(const char *v, size_t len, const char *owner);
/** The owner record stored beside a hold of `lk` (*len its length): the client's, or for a read-write lock its
 *  rw_record, so that inspection names a writer's kind. */
const char *dlock_redis_record_of(const struct redis_client *c, const struct redis_lock *lk, size_t *len);

/* ------------------------------------------------------------ one instance */

/** Run script `id` (one retry when the connection failed after sending).  Error replies become statuses.
 *  `attempt`: as redis_call's (redis_route.h). */
dlock_status dlock_redis_run_idempotent(struct redis_client *c, const struct redis_lock *lk, enum redis_script_id id,
                                        int nkeys, const struct redis_args *a, const char *what, int attempt,
                                        redisReply **out, dlock_error *err);
/** The status and message of a wait that did not end with the lock. */
dlock_status dlock_redis_wait_failed(struct redis_client *c, dlock_status st, dlock_error *err);
/**
 * One attempt on one instance: DLOCK_OK (*out filled), DLOCK_EBUSY
 * (*pttl_ms: the holder's TTL, < 0 unknown; not asked when `no_pttl`) or an
 * error, nothing of it left on the server.
 */
dlock_status dlock_redis_attempt(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
                                 int no_pttl, dlock_acquired *out, int64_t *pttl_ms, dlock_error *err);
/** The handoff script for lk->owner into `a` (its number of keys into *nkeys): the release of a client whose
 *  waiters queue (fair=1), which grants the lock to the first live waiter, and a waiter's withdrawal. */
enum redis_script_id dlock_redis_handoff_args(const struct redis_client *c, const struct redis_lock *lk,
                                              struct redis_args *a, int *nkeys);
/** The extend script of lk's acquisition (a reader's or the key's owner's) for a lease of `lease_ms`:
 *  its arguments into `a` (`lease` keeps the number), its number of keys into *nkeys. */
enum redis_script_id dlock_redis_extend_args(const struct redis_client *c, const struct redis_lock *lk,
                                             int64_t lease_ms, char lease[24], struct redis_args *a, int *nkeys);
/* One instance's release (a permit's, a reader's, or the key owner's: the handoff script where the waiters
 * queue), extend and check. */
dlock_status dlock_redis_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err);
dlock_status dlock_redis_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                dlock_error *err);
dlock_status dlock_redis_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err);

#endif
