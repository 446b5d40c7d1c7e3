/*
 * Redis backend, bottom layer: how a server is reached (the transports,
 * the first axis of the backend's mode table), connections with AUTH and
 * SELECT, what failures mean, pools of connections, command arguments.
 * Calls nothing else of the backend.  Never included outside backends/redis/.
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
#include <stddef.h>
#include <stdint.h>

#include "dlock/sys/driver.h"

#define REDIS_POOL_MAX 16
#define REDIS_ARGS_MAX 12
#define REDIS_REDLOCK_MAX 15 /* instances in one RedLock URI */
#define REDIS_NS_PER_MS 1000000LL

/* ------------------------------------------------------------ config */

struct redis_transport;

/* One server of the URI. */
struct redis_endpoint {
	const struct redis_transport *via; /* how it is reached */
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

/* ------------------------------------------------------------ transports (redis_transport.c) */

/*
 * How a server is reached: the first axis of the mode table, independent
 * of the lock algorithm (the second, redis_lock.h).  One entry per URI
 * scheme; a new way in (TLS, Sentinel, Cluster) is a new entry here.
 */
struct redis_transport {
	const char *scheme; /* "redis", "redis+unix" */
	/** The servers of `uri` into eps[0 .. uri->nhosts-1] (labels set) and the database into *db. */
	dlock_status (*endpoints)(const dlock_uri *uri, struct redis_endpoint *eps, long *db, dlock_error *err);
	/** A connected blocking socket, close-on-exec, by `deadline_ns`. */
	dlock_status (*connect)(const struct redis_endpoint *ep, int64_t deadline_ns, int *fd, dlock_error *err);
	/** 1 for a backend parameter of this scheme's URIs. */
	int (*knows_param)(const char *key);
};

extern const struct redis_transport dlock_redis_tcp;  /* redis://host:port,... */
extern const struct redis_transport dlock_redis_unix; /* redis+unix:///path */

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

#endif
