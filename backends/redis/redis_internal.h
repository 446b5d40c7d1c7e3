/*
 * redis:// and redis+unix:// — declarations shared by the files of the
 * Redis backend (never included outside backends/redis/).
 *
 *   redis.c          driver objects: URI, open/close, capabilities, lock keys
 *   redis_lock.c     one instance: acquire (with waiting), release, extend, check
 *   redis_fair.c     one instance with fair=1: waiting in a queue kept in Redis
 *   redis_conn.c     connecting (CLOEXEC sockets, AUTH, SELECT), error mapping, pools
 *   redis_scripts.c  the Lua scripts, SCRIPT LOAD, EVALSHA with EVAL fallback
 *   redis_sub.c      the subscriber thread that turns release messages into wake-ups
 *   redlock.c        several independent instances: majority (RedLock)
 *
 * Threads: a client is shared by any number of threads.  Each server has a
 * small pool of blocking hiredis connections (a free list under a mutex,
 * created on demand up to REDIS_POOL_MAX, then callers wait for one to be
 * returned); one thread uses a connection at a time, and a connection that
 * saw an I/O error or a timeout is closed, never reused.  Waiting is done by
 * one subscriber thread per client with its own connection; with fair=1, by
 * each waiter blocking on a connection of a second pool, the client's
 * `waits`, so that waiters never take the connections releases need.
 *
 * Keys of a lock: PREFIX:{D}:lock (owner value, TTL = lease), PREFIX:{D}:fence
 * (fencing counter), with fair=1 PREFIX:{D}:queue and PREFIX:{D}:waiters (the
 * waiter queue, see redis_scripts.c), and the channel PREFIX:{D}:released,
 * where D is the first 32 hex digits of the SHA-256 of the name.  They differ
 * only after the "}" that closes the digest, so they share a Redis Cluster
 * slot whatever the prefix holds, and braces or any other byte of the name
 * cannot reach a key.  With fair=1, a release grants the lock to a waiter
 * by pushing onto PREFIX:{D}:grant:OWNER, the waiter's own list, which the
 * waiter blocks on (BLPOP).
 */
#ifndef DLOCK_REDIS_INTERNAL_H
#define DLOCK_REDIS_INTERNAL_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/sys/driver.h"

#define REDIS_POOL_MAX 16
#define REDIS_OWNER_BYTES 16 /* 128 random bits per acquisition */
#define REDIS_OWNER_HEX (2 * REDIS_OWNER_BYTES + 1)
#define REDIS_DIGEST_HEX 32
#define REDIS_ARGS_MAX 12
#define REDIS_REDLOCK_MAX 15 /* instances in one RedLock URI */
#define REDIS_NS_PER_MS 1000000LL

/* ------------------------------------------------------------ config */

/* One server of the URI. */
struct redis_endpoint {
	const char *host; /* TCP host (owned by the core's URI), or NULL for a unix socket */
	int port;
	const char *path; /* unix socket path, or NULL */
	char label[280];  /* "host:port" or the socket path, for messages */
};

/* How to talk to every server of a client.  Strings are the core's. */
struct redis_cfg {
	const char *user;     /* NULL or "": AUTH with the password only */
	const char *password; /* NULL: no AUTH; never printed */
	long db;              /* SELECT when not 0 */
	int64_t connect_timeout_ms, io_timeout_ms;
	dlock_host *host;     /* for log messages */
};

/* ------------------------------------------------------------ arguments */

/* Arguments of one command (binary-safe). */
struct redis_args {
	int argc;
	const char *argv[REDIS_ARGS_MAX];
	size_t len[REDIS_ARGS_MAX];
};

/** Append a NUL-terminated argument. */
void dlock_redis_arg(struct redis_args *a, const char *s);
/** Append `n` bytes. */
void dlock_redis_argn(struct redis_args *a, const char *s, size_t n);
/** Append a decimal integer (kept in `buf`, which must outlive the call). */
void dlock_redis_argi(struct redis_args *a, char buf[24], long long v);

/* ------------------------------------------------------------ connections */

/** Connect, set timeouts, AUTH and SELECT.  ECONNECT, EAUTH, ENOTFOUND, ESERVER... */
dlock_status dlock_redis_connect(const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                 redisContext **out, dlock_error *err);

/** Status and message for a context whose I/O failed (ECONNECT, or ENOMEM). */
dlock_status dlock_redis_io_error(const redisContext *ctx, const struct redis_endpoint *ep,
                                  dlock_error *err);

/** Status and message for an error reply to `what` (EAUTH, EPERM, ESERVER...). */
dlock_status dlock_redis_reply_error(const redisReply *r, const struct redis_endpoint *ep, const char *what,
                                     dlock_error *err);

/** 1 when `r` is an error reply starting with `code` ("NOSCRIPT", ...). */
int dlock_redis_is_error(const redisReply *r, const char *code);

/* Connections to one server. */
struct redis_pool {
	pthread_mutex_t mu;
	pthread_cond_t cond;      /* a connection came back or a slot was freed */
	redisContext *idle[REDIS_POOL_MAX];
	unsigned nidle, total;    /* idle ones, and all that exist (idle or in use) */
	struct redis_endpoint ep;
	const struct redis_cfg *cfg;
};

void dlock_redis_pool_init(struct redis_pool *p, const struct redis_cfg *cfg);
void dlock_redis_pool_destroy(struct redis_pool *p);
/** An idle healthy connection or a new one. */
dlock_status dlock_redis_pool_get(struct redis_pool *p, redisContext **out, dlock_error *err);
/** Give a connection back; one with an error is closed instead.  NULL is a no-op. */
void dlock_redis_pool_put(struct redis_pool *p, redisContext *ctx);
/** An idle or new connection, or DLOCK_EBUSY at once when all REDIS_POOL_MAX are in use. */
dlock_status dlock_redis_pool_try_get(struct redis_pool *p, redisContext **out, dlock_error *err);
/** Close a connection taken from the pool (its state is unknown). */
void dlock_redis_pool_discard(struct redis_pool *p, redisContext *ctx);

/** Warn through the log when the server may evict keys with a TTL.  Never fails. */
void dlock_redis_check_eviction(redisContext *ctx, const struct redis_endpoint *ep, dlock_host *host);

/* ------------------------------------------------------------ scripts */

enum redis_script_id {
	REDIS_SCRIPT_ACQUIRE, /* KEYS lock, fence; ARGV owner, lease ms, fence ttl ms -> {1, token} | {0, pttl} */
	REDIS_SCRIPT_RELEASE, /* KEYS lock; ARGV owner, channel -> 1 released | 0 not ours */
	REDIS_SCRIPT_EXTEND,  /* KEYS lock; ARGV owner, lease ms -> 1 extended | 0 not ours */
	REDIS_SCRIPT_ENQUEUE, /* fair=1, KEYS lock, queue, waiters, fence: wait in the queue (see the script) */
	REDIS_SCRIPT_HANDOFF, /* fair=1, same KEYS: release to the next waiter, or withdraw from the queue */
	REDIS_SCRIPT_COUNT
};

/* SHA1 of each script as the server reported it; "" when SCRIPT LOAD was refused. */
struct redis_scripts {
	char sha[REDIS_SCRIPT_COUNT][41];
};

/** SCRIPT LOAD every script on `ctx`.  I/O errors and NOAUTH fail; another refusal means EVAL. */
dlock_status dlock_redis_scripts_load(redisContext *ctx, const struct redis_endpoint *ep,
                                      struct redis_scripts *s, dlock_error *err);
/** Queue EVALSHA (EVAL without a sha) of `id` with `nkeys` keys first in `a`. */
int dlock_redis_script_append(redisContext *ctx, const struct redis_scripts *s, enum redis_script_id id,
                              int nkeys, const struct redis_args *a);
/** Read the reply of an appended script; on NOSCRIPT, run it with EVAL.  NULL on I/O error. */
redisReply *dlock_redis_script_read(redisContext *ctx, enum redis_script_id id, int nkeys,
                                    const struct redis_args *a);
/** Append and read. */
redisReply *dlock_redis_script_run(redisContext *ctx, const struct redis_scripts *s, enum redis_script_id id,
                                   int nkeys, const struct redis_args *a);

/* ------------------------------------------------------------ subscriber */

struct redis_sub;
struct redis_chan;

/* One acquire() watching a channel; lives on that call's stack. */
struct redis_watch {
	struct redis_watch *prev, *next;
	struct redis_chan *chan; /* NULL: not watching (polling instead) */
	dlock_wait *w;
};

enum redis_watch_state {
	REDIS_WATCH_POLL = -1,   /* no subscription possible now: poll */
	REDIS_WATCH_PENDING = 0, /* SUBSCRIBE not confirmed yet: a wake-up follows its confirmation */
	REDIS_WATCH_ACTIVE = 1   /* confirmed: every release wakes the watcher */
};

dlock_status dlock_redis_sub_new(struct redis_sub **out, const struct redis_endpoint *ep,
                                 const struct redis_cfg *cfg, dlock_error *err);
/** Stop the thread and free everything.  No watch may remain.  NULL is a no-op. */
void dlock_redis_sub_free(struct redis_sub *s);
/** Watch channel `chan`: `w` is woken by its messages and by subscription changes. */
enum redis_watch_state dlock_redis_sub_watch(struct redis_sub *s, struct redis_watch *wt, const char *chan,
                                             size_t len, dlock_wait *w);
enum redis_watch_state dlock_redis_sub_state(struct redis_sub *s, const struct redis_watch *wt);
void dlock_redis_sub_unwatch(struct redis_sub *s, struct redis_watch *wt);

/* ------------------------------------------------------------ client, lock */

struct redis_client {
	struct redis_cfg cfg;
	size_t npools;            /* 1: one instance; more: RedLock over independent instances */
	struct redis_pool *pools;
	size_t quorum;            /* npools / 2 + 1 */
	struct redis_scripts scripts;
	struct redis_sub *sub;    /* one instance only */
	int fair;                 /* fair=1: waiters queue in Redis and a release grants the first */
	struct redis_pool waits;  /* fair=1: connections that block in BLPOP until a release grants the lock */
	atomic_int blpop_whole_seconds; /* the server wants BLPOP's timeout in whole seconds (Redis < 6) */
	const char *prefix;
	size_t prefixlen;
};

struct redis_lock {
	char *keys;             /* one block holding the six names below */
	const char *key, *fence, *queue, *waiters, *chan;
	char *grant;            /* PREFIX:{D}:grant: then, with fair=1, the owner value (redis_fair.c) */
	size_t keylen, fencelen, queuelen, waiterslen, chanlen, grantlen; /* grantlen: without the owner */
	char owner[REDIS_OWNER_HEX]; /* this acquisition's owner value, "" when none */
	int handed_off;         /* fair=1: our last release granted the lock to a queued waiter */
	struct redis_watch watch; /* the channel's watch while `watching`: an acquisition's armed wake-up */
	int watching;
};

/** A fresh random owner value into lk->owner. */
dlock_status dlock_redis_new_owner(struct redis_lock *lk, dlock_error *err);
/** A new owner value, and in `a` the command SET key owner NX PX lease_ms (`lease` keeps the number). */
dlock_status dlock_redis_set_nx(struct redis_lock *lk, int64_t lease_ms, char lease[24], struct redis_args *a,
                               dlock_error *err);
/** The fencing counter's expiry for acquisitions of `lease_ms`: far longer than any lease. */
int64_t dlock_redis_fence_ttl_ms(int64_t lease_ms);
/** Random number in [lo, hi] from a cheap per-call source (jitter only). */
int64_t dlock_redis_jitter(int64_t lo, int64_t hi);

/* redis_lock.c: one instance */
/** Run script `id` (one retry when the connection failed after sending).  Error replies become statuses. */
dlock_status dlock_redis_run_idempotent(struct redis_client *c, enum redis_script_id id, int nkeys,
                                        const struct redis_args *a, const char *what, redisReply **out,
                                        dlock_error *err);
/** The status and message of a wait that did not end with the lock. */
dlock_status dlock_redis_wait_failed(struct redis_client *c, dlock_status st, dlock_error *err);
/** fair=1: the blocking acquire (the server queues the waiters). */
dlock_status dlock_redis_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                 dlock_wait *w, dlock_acquired *out, dlock_error *err);
/** Without fair=1: one attempt for the core's loop; its wake-up (the channel's watch) goes in dlock_redis_disarm(). */
dlock_status dlock_redis_try_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
                                     dlock_retry *retry, dlock_acquired *out, dlock_error *err);
void dlock_redis_disarm(struct redis_client *c, struct redis_lock *lk);
dlock_status dlock_redis_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err);
dlock_status dlock_redis_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                dlock_error *err);
dlock_status dlock_redis_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err);

/* redis_fair.c: after a first attempt found the lock held (lk->owner is ""). */
dlock_status dlock_redis_fair_wait(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                   dlock_wait *w, dlock_acquired *out, dlock_error *err);
/** The handoff script's arguments for lk->owner into `a` (writes the grant key into lk->grant). */
void dlock_redis_handoff_args(struct redis_lock *lk, struct redis_args *a);

/* redlock.c: several instances */
dlock_status dlock_redis_redlock_try_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                             dlock_retry *retry, dlock_acquired *out, dlock_error *err);
dlock_status dlock_redis_redlock_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err);
dlock_status dlock_redis_redlock_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                        dlock_error *err);
dlock_status dlock_redis_redlock_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err);

#endif
