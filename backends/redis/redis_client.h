/*
 * Redis backend: the client and a lock handle, the state that every file
 * above the connections shares (never included outside backends/redis/).
 *
 * Files, from the top (each calls only those below it, and includes only
 * their headers and this one):
 *   redis.c            the driver objects: URI, open/close, the facts, the
 *                      driver's lock methods, each one call through the client's
 *                      algorithm (redis_lock.h)
 *   redis_inspect.c    inspection, listing and breaking of any kind
 *   redis_renew.c      the renewals of many held locks, one pipeline per server
 *   redis_fair.c       algorithm "fair" (fair=1): waiting in a queue kept in Redis
 *   redlock.c          algorithm "redlock": several independent instances, majority
 *   redis_elect.c      elections: a leader's value in its lock key, observers on the lock's channel
 *   redis_loop.c       a loop client's lock calls on its loop (driver contract 9): algorithm
 *                      "single"'s commands and answers (redis_lock.c) on the loop's connection
 *   redis_lock.c       algorithm "single": one instance; also the lock values,
 *                      attempts and releases that fair builds on
 *   redis_sem.c        a semaphore's permits: the arguments and replies of their scripts
 *   redis_route.c      where a lock's commands go (the one instance, or the cluster's master
 *                      of its slot) and one command sent there, redirections followed
 *   redis_key.c        the names of a lock's keys (this header's handle keeps only their digest)
 *   redis_cluster.c    redis+cluster: the nodes, the slot map, MOVED and ASK
 *   redis_sub.c        the subscriber thread that turns release messages into wake-ups
 *   redis_sentinel.c   redis+sentinel: the master's address, asked of the sentinels at each connect
 *   redis_scripts.c    the Lua scripts, SCRIPT LOAD, EVALSHA with EVAL fallback
 *   redis_nbconn.c     a loop client's connection: non-blocking, on its loop, pipelined
 *   redis_conn.c       connections (TLS, AUTH, SELECT), error mapping, pools, arguments
 *   redis_io.c         a connection's bytes, plain or TLS, through hiredis's reader
 *   redis_tls.c        rediss: TLS settings from the URI, the handshake
 *   redis_transport.c  how a server is reached (tcp, tls, unix): URI hosts, sockets
 *
 * The client's mode table has two axes that do not multiply: the transport
 * (redis_transport.h: how a server is reached) and the algorithm (redis_lock.h:
 * which lock runs on the servers), each chosen once at open.
 *
 * Threads: a client is shared by any number of threads.  Each server has a
 * small pool of blocking hiredis connections (a free list under a mutex,
 * created on demand up to REDIS_POOL_MAX, then callers wait for one to be
 * returned); one thread uses a connection at a time, and a connection that
 * saw an I/O error or a timeout is closed, never reused.  Waiting is done by
 * one subscriber thread per client with its own connection; with fair=1, by
 * each waiter blocking on a connection of a second pool, the client's
 * `waits`, so that waiters never take the connections releases need.
 * A loop client of one server with algorithm "single" (redis_loop.c) also
 * has one non-blocking connection, `loop`, which only its loop's thread
 * uses, for the lock calls the core makes there, and a subscriber there,
 * `loop_sub`, that wakes the acquisitions waiting on the loop; its other
 * calls run on the pools (and watch through `sub`) as on any client.
 */
#ifndef DLOCK_REDIS_CLIENT_H
#define DLOCK_REDIS_CLIENT_H

#include <stdatomic.h>

#include "redis_conn.h"
#include "redis_nbconn.h"
#include "redis_scripts.h"
#include "redis_sub.h"

#define REDIS_OWNER_BYTES 16 /* 128 random bits per acquisition */
#define REDIS_OWNER_HEX (2 * REDIS_OWNER_BYTES + 1)
#define REDIS_DIGEST_HEX 32
/* Appended to the owner record of a read-write lock's holds: a writer's key says which kind it is (inspection
 * tells it from a mutex's by that); a field the core's record parser skips. */
#define REDIS_RWLOCK_FIELD "&kind=rwlock"

struct redis_algorithm;   /* redis_lock.h */
struct redis_cluster;     /* redis_cluster.h */
struct redis_sentinel;    /* redis_sentinel.h */
struct redis_elect_watch; /* redis_elect.c */

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
	struct redis_nbconn *loop; /* a loop client's connection on its loop (redis_loop.c), else NULL; owned */
	struct redis_sub *loop_sub; /* and its subscriber there, with no thread (redis_sub.c), else NULL; owned */
};

/* One attempt of an acquisition, as dlock_redis_try_begin() decided it (redis_lock.c): what its command is
 * built from, so that it can be built again. */
struct redis_try {
	int64_t lease_ms;
	unsigned char set_nx;      /* no token wanted: SET NX PX, not the acquire script */
	unsigned char no_pttl;     /* busy: the holder's TTL is not asked (one try; fair=1's queue tells it) */
	unsigned char wants_token;
	unsigned char listed;      /* a semaphore's waiter, counted among the name's waiters while it finds no permit */
};

/* A loop client's call on one lock, from its _start method to its dlock_call_done() (redis_loop.c).  The
 * pointers are the core's, valid until then.  The loop's thread only. */
struct redis_loop_op {
	struct redis_nbreq rq;     /* on the loop's connection while its command waits for its answer */
	struct redis_client *c;
	int kind;                  /* what is sent (redis_loop.c) */
	int eval;                  /* sent again as EVAL: the server had lost the script */
	dlock_call *call;
	dlock_wait *w;             /* an acquisition's */
	dlock_retry *retry;
	dlock_acquired *out;
	dlock_error *err;
	struct redis_try t;        /* an acquisition's attempt */
	int64_t lease_ms;          /* an extend's */
	int64_t sent_ns;           /* an acquisition's: when its attempt was sent */
	dlock_status failed;       /* an undo's (a drop's): what the call ends with once it is done */
	int after;                 /* replicas=N's WAIT: the kind of the write it counts */
	redisReply *held;          /* the write's reply while its WAIT waits for its answer; owned */
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
	unsigned char on_loop;  /* the acquisition in progress makes its attempts on a loop (redis_loop.c) */
	struct redis_watch watch; /* the channel's watch while `watching`: an acquisition's armed wake-up */
	struct redis_sub *watch_sub; /* the subscriber that holds `watch` */
	struct redis_loop_op op;  /* a loop client's call in progress on this lock (redis_loop.c) */
};

#endif
