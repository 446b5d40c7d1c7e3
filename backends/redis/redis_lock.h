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

/* ------------------------------------------------------------ one command, built and answered */

/* The id of a command that is not a script (struct redis_cmd, struct redis_call). */
#define REDIS_NOT_A_SCRIPT REDIS_SCRIPT_COUNT

/*
 * One command of a lock: a script with its `nkeys` keys first in `a`, or,
 * when `id` is REDIS_NOT_A_SCRIPT, the command `a` itself.  Its arguments
 * point into the lock, the client and here (`nums`, `value`).  Built by
 * the functions below from the lock's state alone, so that one blocking
 * call (redis_lock.c) and one call on a loop (redis_loop.c) send the same
 * command and read its answer with the same function; and built again for
 * the same call when the server lost a script (EVAL after NOSCRIPT).
 */
struct redis_cmd {
	enum redis_script_id id;
	int nkeys;
	struct redis_args a;
	char nums[3][24];
	char value[REDIS_VALUE_MAX];
};

/** An attempt of lk begun: its mode from `w`, a semaphore's waiter id, a new owner value, and in *t what its
 *  command is built from (`no_pttl`: a busy answer does not ask the holder's TTL).  DLOCK_OK or DLOCK_EIO. */
dlock_status dlock_redis_try_begin(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
                                   int no_pttl, struct redis_try *t, dlock_error *err);
/** The attempt's command: the acquire script (a reader's, a permit's), or SET NX PX when no token is wanted. */
void dlock_redis_try_cmd(const struct redis_client *c, const struct redis_lock *lk, const struct redis_try *t,
                         struct redis_cmd *cmd);
/** 1 when the attempt's reply `r` (no error reply) says it wrote the lock (replicas=N: WAIT then counts). */
int dlock_redis_try_wrote(const struct redis_try *t, const redisReply *r);
/**
 * The attempt's reply `r` (no error reply), sent at `sent_ns`; `acked` the
 * replicas that confirmed it when it wrote (c->replicas when none are
 * asked): DLOCK_OK (*out), DLOCK_EBUSY (*pttl_ms: the holder's TTL when
 * the reply tells it; a permit's, when to look again), DLOCK_EKIND,
 * DLOCK_ECONNECT (too few replicas) or DLOCK_ESERVER.  On a failure
 * *undo says whether what may be ours is to be removed (undo, then
 * lk->owner cleared, by the caller).
 */
dlock_status dlock_redis_try_answer(struct redis_client *c, struct redis_lock *lk, const struct redis_try *t,
                                    const redisReply *r, long long acked, int64_t sent_ns, dlock_acquired *out,
                                    int64_t *pttl_ms, int *undo, dlock_error *err);
/** 1 when an attempt that answered `st` asks the holder's TTL next (PTTL: a busy SET NX that waits). */
int dlock_redis_try_asks_pttl(const struct redis_try *t, dlock_status st);
/** PTTL of lk's key, and what its reply says: the holder's TTL in ms, 0 (freed meanwhile), -1 unknown. */
void dlock_redis_pttl_cmd(const struct redis_client *c, const struct redis_lock *lk, struct redis_cmd *cmd);
int64_t dlock_redis_pttl_answer(const redisReply *r);
/**
 * Without fair=1, what an attempt's status `st` (its holder's TTL
 * `pttl_ms`, < 0 unknown) tells the core's waiting loop: busy, the lock's
 * channel watched through the client's subscriber (retry->armed,
 * after_ms) and the message of a busy lock; otherwise `st`.  Never waits
 * on the network (the subscriber's thread subscribes).
 */
dlock_status dlock_redis_single_waits(struct redis_client *c, struct redis_lock *lk, dlock_wait *w, dlock_status st,
                                      int64_t pttl_ms, dlock_retry *retry, dlock_error *err);
/** The wake-up that dlock_redis_single_waits() armed, given up (a semaphore's waiter is still listed: lk->listed). */
void dlock_redis_wake_unwatch(struct redis_lock *lk);
/** Say in the log that the undo of an attempt whose answer was lost failed (`why`). */
void dlock_redis_undo_failed(struct redis_client *c, const char *why);
/** The owner-only release of lk->owner: a permit's, a reader's, or the key owner's (the handoff script where the
 *  waiters queue); also the undo of an attempt whose answer was lost. */
void dlock_redis_release_cmd(const struct redis_client *c, const struct redis_lock *lk, struct redis_cmd *cmd);
/** The reply `r` (no error reply) of an owner-only release or extend: DLOCK_OK, DLOCK_ENOTHELD, DLOCK_ESERVER. */
dlock_status dlock_redis_owned_answer(const struct redis_client *c, const redisReply *r, const char *what,
                                      dlock_error *err);
/** 1 when the reply `r` (no error reply) of an extend script says it wrote the lease (replicas=N: WAIT then counts). */
int dlock_redis_extend_wrote(const redisReply *r);
/** The extend script's reply `r` (no error reply), `acked` the replicas that confirmed it (c->replicas when none
 *  are asked): DLOCK_OK, DLOCK_ENOTHELD (also, with *drop set, when fewer than replicas=N confirmed it: the lock
 *  is then to be released by the caller), DLOCK_ECONNECT (WAIT had no answer), DLOCK_ESERVER. */
dlock_status dlock_redis_extend_answer(struct redis_client *c, const redisReply *r, long long acked, int *drop,
                                       dlock_error *err);
/** The check of lk's acquisition; and what check() answers for the call's status `st` and reply `r` (read only
 *  when `st` is DLOCK_OK): DLOCK_OK, DLOCK_ENOTHELD, or DLOCK_EUNCERTAIN. */
void dlock_redis_check_cmd(const struct redis_client *c, const struct redis_lock *lk, struct redis_cmd *cmd);
dlock_status dlock_redis_check_answer(const struct redis_client *c, const struct redis_lock *lk, dlock_status st,
                                      const redisReply *r, dlock_error *err);

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
/** The extend script of lk's acquisition (a reader's or the key owner's) for a lease of `lease_ms`:
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
