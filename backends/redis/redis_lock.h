/*
 * redis:// and redis+unix:// — the client, the lock and the lock
 * algorithms (the second axis of the mode table), shared by the files of
 * the Redis backend (never included outside backends/redis/).
 *
 * Files, from the top (each calls only those below it):
 *   redis.c            driver objects: URI, open/close, the backend's facts, lock keys;
 *                      every lock method goes through the client's mode table
 *   redis_fair.c       algorithm "fair" (fair=1): waiting in a queue kept in Redis
 *   redlock.c          algorithm "redlock": several independent instances, majority
 *   redis_lock.c       algorithm "single": one instance; also the lock values and
 *                      attempts that fair builds on
 *   redis_sem.c        a semaphore's permits: the arguments and replies of their scripts
 *   redis_inspect.c    inspection, listing and breaking of any kind
 *   redis_elect.c      elections: a leader's value in its lock key, observers on the lock's channel
 *   redis_route.c      where a lock's commands go (the one instance, or the cluster's master
 *                      of its slot) and one command sent there, redirections followed
 *   redis_cluster.c    redis+cluster: the nodes, the slot map, MOVED and ASK
 *   redis_sub.c        the subscriber thread that turns release messages into wake-ups
 *   redis_sentinel.c   redis+sentinel: the master's address, asked of the sentinels at each connect
 *   redis_scripts.c    the Lua scripts, SCRIPT LOAD, EVALSHA with EVAL fallback
 *   redis_conn.c       connections (TLS, AUTH, SELECT), error mapping, pools, arguments
 *   redis_io.c         a connection's bytes, plain or TLS, through hiredis's reader
 *   redis_tls.c        rediss: TLS settings from the URI, the handshake
 *   redis_transport.c  how a server is reached (tcp, tls, unix): URI hosts, sockets
 *
 * The mode table has two axes that do not multiply: the transport
 * (redis_conn.h: how a server is reached) and the algorithm (below: which
 * lock runs on the servers), each chosen once at open.
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
 */
#ifndef DLOCK_REDIS_LOCK_H
#define DLOCK_REDIS_LOCK_H

#include <stdatomic.h>

#include "redis_cluster.h"
#include "redis_conn.h"
#include "redis_scripts.h"
#include "redis_sub.h"

#define REDIS_OWNER_BYTES 16 /* 128 random bits per acquisition */
#define REDIS_OWNER_HEX (2 * REDIS_OWNER_BYTES + 1)
#define REDIS_DIGEST_HEX 32
/* A key's name, NUL included: PREFIX:{D}:SUFFIX, the longest suffix "grant:" or "pwake:" and an owner value. */
#define REDIS_KEY_MAX (REDIS_PREFIX_MAX + 4 + REDIS_DIGEST_HEX + 6 + REDIS_OWNER_HEX)
/* The names one command sends at most (a semaphore's release: its 8 keys, its channel and the stem of pwake). */
#define REDIS_LOCK_NAMES_MAX 10
_Static_assert(REDIS_LOCK_NAMES_MAX * REDIS_KEY_MAX <= REDIS_ARGS_BYTES, "a command's key names fit its arguments");
/* A lock key's value: "OWNER TOKEN ACQUIRED_MS RECORD" (redis_scripts.c), at most this long. */
#define REDIS_VALUE_MAX (REDIS_OWNER_HEX + 48 + DLOCK_OWNER_MAX)
/* Appended to the owner record of a read-write lock's holds: a writer's key says which kind it is (inspection
 * tells it from a mutex's by that); a field the core's record parser skips. */
#define REDIS_RWLOCK_FIELD "&kind=rwlock"

/* ------------------------------------------------------------ client, lock */

struct redis_algorithm;

struct redis_client {
	struct redis_cfg cfg;
	struct redis_tls *tls;    /* rediss: the TLS settings (cfg.tls), owned */
	struct redis_sentinel *sentinel; /* redis+sentinel: the sentinels behind pools[0]'s endpoint, owned */
	struct redis_cluster *cluster; /* redis+cluster: the nodes and the slot map, owned; no pools then */
	const char *label;        /* the server(s) in messages: pools[0]'s label, or "cluster SEED" */
	const char *publish;      /* how a release wakes the waiters: PUBLISH, or SPUBLISH in a cluster */
	const struct redis_algorithm *algo; /* the lock algorithm, chosen at open */
	size_t npools;            /* 1: one instance; more: RedLock over independent instances; 0: a cluster */
	struct redis_pool *pools;
	size_t quorum;            /* npools / 2 + 1 */
	struct redis_scripts scripts;
	struct redis_sub *sub;    /* one instance only (a cluster has one per master) */
	int fair;                 /* fair=1: waiters queue in Redis and a release grants the first */
	struct redis_pool waits;  /* fair=1: connections that block in BLPOP until a release grants the lock */
	atomic_int blpop_whole_seconds; /* the server wants BLPOP's timeout in whole seconds (Redis < 6) */
	const char *prefix;
	size_t prefixlen;
	int replicas;             /* replicas=N: WAIT for N replicas after each acquire and renewal (0: none) */
	int64_t replicas_timeout_ms; /* replicas_timeout: WAIT's bound */
	const char *record;       /* the client's owner record (dlock_host_owner), stored beside each hold */
	size_t recordlen;
	char rw_record[DLOCK_OWNER_MAX + sizeof REDIS_RWLOCK_FIELD]; /* the record of a read-write lock's holds */
	size_t rw_recordlen;
	pthread_mutex_t elect_mu; /* guards elect_watches (redis_elect.c) */
	struct redis_elect_watch *elect_watches; /* the observers' watches of this client */
};

struct redis_lock {
	char digest[REDIS_DIGEST_HEX]; /* D of the keys' names (no NUL): a handle keeps no names, each
	                                  command builds those it sends (dlock_redis_arg_key) */
	char owner[REDIS_OWNER_HEX]; /* this acquisition's owner value, "" when none */
	char waiter[REDIS_OWNER_HEX]; /* a semaphore's id among the waiters, made once per handle ("" before) */
	dlock_lock_kind kind;   /* DLOCK_KIND_MUTEX, RWLOCK or SEMAPHORE (whose waiters never queue: fair=1 too) */
	uint32_t permits_n;     /* a semaphore's N */
	unsigned slot;          /* the keys' hash slot (a cluster routes by it) */
	unsigned char listed;   /* a semaphore: the last attempt left `waiter` among the waiters */
	unsigned char wake_own; /* a semaphore: the last busy attempt said a release wakes it on its pwake:WAITER */
	unsigned char watch_own; /* a semaphore: `watch` is on its pwake:WAITER, not on the lock's channel */
	unsigned char shared;   /* this acquisition (or attempt) is a reader's: the READ_ scripts */
	unsigned char handed_off; /* fair=1: our last release granted the lock to a queued waiter */
	unsigned char watching; /* `watch` is armed */
	struct redis_watch watch; /* the channel's watch while `watching`: an acquisition's armed wake-up */
	struct redis_sub *watch_sub; /* the subscriber that holds `watch` */
};

/*
 * A lock algorithm: the second axis of the mode table.  The driver's
 * methods (redis.c) call through the client's entry and never test which
 * one it is.  Each method has the meaning of the driver method of that
 * name (dlock/sys/driver.h); `acquire` is set only where the server queues
 * the waiters, `try_acquire` where the core's loop waits.
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
	/** The owner-only release script for lk->owner into `a`, its number of keys into *nkeys (single
	 *  servers: also how an attempt whose reply was lost is undone). */
	enum redis_script_id (*release_script)(const struct redis_client *c, struct redis_lock *lk, struct redis_args *a,
	                                       int *nkeys);
};

extern const struct redis_algorithm dlock_redis_single;  /* redis_lock.c */
extern const struct redis_algorithm dlock_redis_redlock; /* redlock.c */
extern const struct redis_algorithm dlock_redis_fair;    /* redis_fair.c */

/* ------------------------------------------------------------ redis.c: the names of a lock's keys */

/** PREFIX:{D}:SUFFIX of lk, then `id` (an owner value or a waiter's id: grant:OWNER, pwake:WAITER) unless NULL,
 *  NUL-terminated into `out`; returns its length. */
size_t dlock_redis_key(const struct redis_client *c, const struct redis_lock *lk, const char *suffix, const char *id,
                       char out[REDIS_KEY_MAX]);
/** Append that name to `a`, built into a's own bytes (REDIS_LOCK_NAMES_MAX names per command at most). */
void dlock_redis_arg_key(struct redis_args *a, const struct redis_client *c, const struct redis_lock *lk,
                         const char *suffix, const char *id);
/** lk->digest and lk->slot for a name of `len` bytes (also inspection's and elections' handles). */
void dlock_redis_lock_name(struct redis_lock *lk, const char *name, size_t len);

/* ------------------------------------------------------------ redis_route.c: where a lock's commands go */

/* The server that holds a lock's keys: the client's one instance, or the cluster's master of its slot. */
struct redis_route {
	struct redis_pool *pool;  /* commands */
	struct redis_pool *waits; /* fair=1: connections blocked in BLPOP */
	struct redis_sub *sub;    /* one instance: the client's subscriber */
	struct redis_node *node;  /* a cluster: the node (its subscriber is made on first use); else NULL */
};

/** Where lk's commands go now (a cluster may ask for its map first: DLOCK_ECONNECT when it cannot). */
dlock_status dlock_redis_route(struct redis_client *c, const struct redis_lock *lk, struct redis_route *rt,
                               dlock_error *err);
/** The subscriber for the channel of a lock routed to `rt` (NULL: none can be made, poll). */
struct redis_sub *dlock_redis_route_sub(struct redis_client *c, const struct redis_route *rt);
/** 1 when error reply `r` says the lock's slot is served elsewhere or not now (MOVED, ASK, TRYAGAIN,
 *  CLUSTERDOWN); a cluster's map is then looked at again before the next command. */
int dlock_redis_slot_elsewhere(struct redis_client *c, const redisReply *r);
/** A connection to the lock's server failed: a cluster looks at its map again before the next command. */
void dlock_redis_route_failed(struct redis_client *c);

/* One command, or one script, for a lock. */
struct redis_call {
	enum redis_script_id id;  /* REDIS_SCRIPT_COUNT: the command `a` itself */
	int nkeys;                /* a script's keys, first in `a` */
	const struct redis_args *a;
	const char *what;         /* for messages: "acquire", "release"... */
	int (*wrote)(const redisReply *r); /* replicas=N: WAIT after a reply for which this says 1; or NULL */
	int attempt;              /* 1: an acquisition's attempt: DLOCK_ECONNECT at once where the slot is not
	                             served now (TRYAGAIN, CLUSTERDOWN), for the acquisition to wait out within its
	                             deadline; 0: wait here, up to io_timeout (see redis_route.c) */
};

/**
 * Send `call` to lk's server and read its reply into *out, following a
 * cluster's redirections.  *maybe_ran: the request may have reached a
 * server (a failure after that leaves its effect unknown).  With
 * `call->wrote` and replicas=N, *acked is WAIT's answer on the same
 * connection (-1: none).  Error replies become statuses and messages.
 */
dlock_status dlock_redis_call(struct redis_client *c, const struct redis_lock *lk, const struct redis_call *call,
                              long long *acked, redisReply **out, int *maybe_ran, dlock_error *err);

/* ------------------------------------------------------------ redis_lock.c: lock values, one instance */

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
/** The fencing counter's expiry for acquisitions of `lease_ms`: far longer than any lease. */
int64_t dlock_redis_fence_ttl_ms(int64_t lease_ms);
/** Run script `id` (one retry when the connection failed after sending).  Error replies become statuses.
 *  `attempt`: as redis_call's. */
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
/** The extend script of lk's acquisition (a reader's or the key's owner's) for a lease of `lease_ms`:
 *  its arguments into `a` (`lease` keeps the number), its number of keys into *nkeys. */
enum redis_script_id dlock_redis_extend_args(const struct redis_client *c, const struct redis_lock *lk,
                                             int64_t lease_ms, char lease[24], struct redis_args *a, int *nkeys);
/* One instance's release (through the algorithm's release_script, or a reader's), extend and check. */
dlock_status dlock_redis_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err);
dlock_status dlock_redis_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                dlock_error *err);
dlock_status dlock_redis_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err);
/* ------------------------------------------------------------ redis_sem.c: a semaphore's permits */

/** The acquire script of a permit into `a` (`bufs` keeps the numbers); `listed`: count lk among the waiters
 *  when no permit is free.  Its number of keys into *nkeys. */
enum redis_script_id dlock_redis_sem_acquire_args(const struct redis_client *c, const struct redis_lock *lk,
                                                  int64_t lease_ms, int wants_token, int listed, char bufs[3][24],
                                                  struct redis_args *a, int *nkeys);
/** A permit's release (nkeys 8; `n` keeps a number), extend (6) and check (2) scripts for lk->owner. */
enum redis_script_id dlock_redis_sem_release_args(const struct redis_client *c, const struct redis_lock *lk,
                                                  char n[24], struct redis_args *a, int *nkeys);
enum redis_script_id dlock_redis_sem_extend_args(const struct redis_client *c, const struct redis_lock *lk,
                                                 int64_t lease_ms, char lease[24], struct redis_args *a, int *nkeys);
enum redis_script_id dlock_redis_sem_check_args(const struct redis_client *c, const struct redis_lock *lk,
                                                struct redis_args *a, int *nkeys);
/**
 * The acquire script's reply: DLOCK_OK (*out: token and slot), DLOCK_EBUSY
 * (*retry_ms: when to look again; lk->wake_own: a release wakes lk on its
 * own channel PREFIX:{D}:pwake:WAITER), DLOCK_EKIND (another N, both named) or
 * DLOCK_ESERVER for a reply of another shape.
 */
dlock_status dlock_redis_sem_reply(const struct redis_client *c, struct redis_lock *lk, const redisReply *r,
                                   dlock_acquired *out, int64_t *retry_ms, dlock_error *err);
/** A waiter that gives up: no longer counted among the waiters nor queued, a permit promised to it passed on
 *  (best effort: its entries expire anyway). */
void dlock_redis_sem_unlist(struct redis_client *c, struct redis_lock *lk);

/* ------------------------------------------------------------ redis_inspect.c: who holds a lock */

/* The driver's inspect, list and break_lock methods (dlock/sys/driver.h). */
dlock_status dlock_redis_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err);
dlock_status dlock_redis_list(void *backend, dlock_info *info, dlock_error *err);
dlock_status dlock_redis_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err);
/** dlock_gc(): nothing to collect (every key expires); DLOCK_ENOTSUP saying why (redis_inspect.c). */
dlock_status dlock_redis_gc(void *backend, const char *prefix, size_t len, unsigned flags,
                            dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err);

/* ------------------------------------------------------------ redis_elect.c: elections */

/* The driver's proclaim, watch and unwatch methods (dlock/sys/driver.h). */
dlock_status dlock_redis_proclaim(void *backend, void *lk, const char *value, size_t len, dlock_error *err);
dlock_status dlock_redis_watch(void *backend, const char *name, size_t len, void (*changed)(void *arg), void *arg,
                               void **watch, dlock_error *err);
void dlock_redis_unwatch(void *backend, void *watch);
/** The client's watch list: set up right after the client is allocated, torn down when it is freed. */
void dlock_redis_elect_init(struct redis_client *c);
void dlock_redis_elect_fini(struct redis_client *c);
/** Arm again, where the name is served now, the watches of channel `chan` whose subscription was lost
 *  (a cluster slot that moved): called by each inspection of the name. */
void dlock_redis_elect_rearm(struct redis_client *c, const char *chan, size_t len);
/** The leader's value in a holder's record (`len` bytes), decoded into `out`: 1, or 0 when it has none. */
int dlock_redis_record_value(const char *rec, size_t len, char out[DLOCK_VALUE_MAX + 1]);

/** Renew lks[0..n) (n at most DLOCK_RENEW_BATCH_MAX), one pipeline per server (redis_renew.c); out[i] as extend. */
void dlock_redis_extend_many(struct redis_client *c, struct redis_lock *const *lks, const int64_t *lease_ms, size_t n,
                             dlock_status *out, dlock_error *err);

#endif
