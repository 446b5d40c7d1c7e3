/*
 * Redis backend: connections with AUTH and SELECT, what failures mean,
 * pools of connections, command arguments (redis_conn.c); with the layers
 * beneath, which this header brings along: a connection's bytes
 * (redis_io.h), TLS (redis_tls.h) and the transports (redis_transport.h).
 * Calls nothing above them.  Never included outside backends/redis/.
 *
 * Threads: a pool is shared by any number of threads (a free list under a
 * mutex, created on demand up to REDIS_POOL_MAX, then callers wait for one
 * to be returned); one thread uses a connection at a time, and a connection
 * that saw an I/O error or a timeout is closed, never reused.
 */
#ifndef DLOCK_REDIS_CONN_H
#define DLOCK_REDIS_CONN_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/sys/driver.h"
#include "redis_io.h"
#include "redis_tls.h"
#include "redis_transport.h"

#define REDIS_POOL_MAX 16
#define REDIS_PREFIX_MAX 256 /* bytes of the URI's prefix, which every key name repeats */
#define REDIS_REDLOCK_MAX 15 /* instances in one RedLock URI */

/* ------------------------------------------------------------ config */

/* How to talk to every server of a client.  Strings are the core's. */
struct redis_cfg {
	const char *user;     /* NULL or "": AUTH with the password only */
	const char *password; /* NULL: no AUTH; never printed */
	long db;              /* SELECT when not 0 */
	int64_t connect_timeout_ms, io_timeout_ms;
	const struct redis_tls *tls; /* rediss: every connection speaks TLS (redis_tls.c); NULL: plaintext */
	dlock_host *host;     /* for log messages */
};

/* ------------------------------------------------------------ arguments (struct redis_args: redis_io.h) */

/** Append a NUL-terminated argument. */
void dlock_redis_arg(struct redis_args *a, const char *s);
/** Append `n` bytes. */
void dlock_redis_argn(struct redis_args *a, const char *s, size_t n);
/** Append a decimal integer (kept in `buf`, which must outlive the call). */
void dlock_redis_argi(struct redis_args *a, char buf[24], long long v);

/* ------------------------------------------------------------ connections */

/** Connect, set timeouts, AUTH and SELECT.  ECONNECT, EAUTH, ENOTFOUND, ESERVER... */
dlock_status dlock_redis_connect(const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                 struct redis_conn **out, dlock_error *err);

/* What a new connection sends first, in this order, each when the configuration asks for it. */
enum { REDIS_HELLO_AUTH, REDIS_HELLO_SELECT };
/** The command of handshake step `step` into `a` (`buf` keeps a number): 1, or 0 when the step is not needed.
 *  The arguments point into `cfg` (the password among them: never printed). */
int dlock_redis_hello_args(const struct redis_cfg *cfg, int step, struct redis_args *a, char buf[24]);
/** What the answer `r` of handshake step `step` means: DLOCK_OK, DLOCK_EAUTH (AUTH refused), DLOCK_ENOTFOUND
 *  (no such database), or the status of another error reply. */
dlock_status dlock_redis_hello_answer(const struct redis_cfg *cfg, int step, const redisReply *r,
                                      const struct redis_endpoint *ep, dlock_error *err);

/** Status and message for a connection whose I/O failed (ECONNECT, EAUTH for a refused certificate, ENOMEM). */
dlock_status dlock_redis_io_error(const struct redis_conn *ctx, const struct redis_endpoint *ep,
                                  dlock_error *err);

/** Status and message for an error reply to `what` (EAUTH, EPERM, ESERVER...). */
dlock_status dlock_redis_reply_error(const redisReply *r, const struct redis_endpoint *ep, const char *what,
                                     dlock_error *err);

/** 1 when `r` is an error reply starting with `code` ("NOSCRIPT", ...). */
int dlock_redis_is_error(const redisReply *r, const char *code);

/** 1 when `r` is a Redis Cluster's refusal that names no failure of the command: the slot is served
 *  elsewhere (MOVED, ASK) or not now (TRYAGAIN, CLUSTERDOWN).  The command did not run. */
int dlock_redis_is_redirection(const redisReply *r);

/* Connections to one server. */
struct redis_pool {
	pthread_mutex_t mu;
	pthread_cond_t cond;      /* a connection came back or a slot was freed */
	struct redis_conn *idle[REDIS_POOL_MAX];
	unsigned nidle, total;    /* idle ones, and all that exist (idle or in use) */
	struct redis_endpoint ep;
	const struct redis_cfg *cfg;
	/* Sentinel: bumped when the master moves; connections of an older
	 * generation are closed, never reused.  NULL: one fixed server. */
	const atomic_uint *generation;
};

void dlock_redis_pool_init(struct redis_pool *p, const struct redis_cfg *cfg);
void dlock_redis_pool_destroy(struct redis_pool *p);
/** An idle healthy connection or a new one. */
dlock_status dlock_redis_pool_get(struct redis_pool *p, struct redis_conn **out, dlock_error *err);
/** Give a connection back; one with an error is closed instead.  NULL is a no-op. */
void dlock_redis_pool_put(struct redis_pool *p, struct redis_conn *ctx);
/** An idle or new connection, or DLOCK_EBUSY at once when all REDIS_POOL_MAX are in use. */
dlock_status dlock_redis_pool_try_get(struct redis_pool *p, struct redis_conn **out, dlock_error *err);
/** Close a connection taken from the pool (its state is unknown). */
void dlock_redis_pool_discard(struct redis_pool *p, struct redis_conn *ctx);

/** Warn through the log when the server may evict keys with a TTL.  Never fails. */
void dlock_redis_check_eviction(struct redis_conn *ctx, const struct redis_endpoint *ep, dlock_host *host);

#endif
