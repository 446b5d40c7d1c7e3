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
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/sys/driver.h"

#define REDIS_POOL_MAX 16
#define REDIS_ARGS_MAX 16
#define REDIS_PREFIX_MAX 256 /* bytes of the URI's prefix, which every key name repeats */
/* Bytes an argument list keeps for the key names it builds (redis_lock.h: a lock's, REDIS_LOCK_NAMES_MAX at most). */
#define REDIS_ARGS_BYTES 3400
#define REDIS_REDLOCK_MAX 15 /* instances in one RedLock URI */
#define REDIS_NS_PER_MS 1000000LL

/* ------------------------------------------------------------ config */

struct redis_transport;

/* One server of the URI. */
struct redis_endpoint {
	const struct redis_transport *via; /* how it is reached */
	const char *host; /* TCP host (owned by the core's URI, or `located`), or NULL for a unix socket */
	int port;
	const char *path; /* unix socket path, or NULL */
	char label[280];  /* "host:port" or the socket path, for messages */
	/*
	 * A server whose address is asked anew at each connect (Sentinel's
	 * master, redis_sentinel.c): `locate` fills a fixed endpoint, whose host
	 * it keeps in `located`, and the connection must then say ROLE master.
	 * NULL for a fixed address.  Any thread.
	 */
	dlock_status (*locate)(void *arg, struct redis_endpoint *where, dlock_error *err);
	void *locate_arg;
	char located[256];
};

struct redis_tls;

/* How to talk to every server of a client.  Strings are the core's. */
struct redis_cfg {
	const char *user;     /* NULL or "": AUTH with the password only */
	const char *password; /* NULL: no AUTH; never printed */
	long db;              /* SELECT when not 0 */
	int64_t connect_timeout_ms, io_timeout_ms;
	const struct redis_tls *tls; /* rediss: every connection speaks TLS (redis_tls.c); NULL: plaintext */
	dlock_host *host;     /* for log messages */
};

/* ------------------------------------------------------------ transports (redis_transport.c) */

/*
 * How a server is reached: the first axis of the mode table, independent
 * of the lock algorithm (the second, redis_lock.h).  One entry per URI
 * scheme; a new way in (TLS, Sentinel, Cluster) is a new entry here.
 */
struct redis_transport {
	const char *scheme; /* "redis", "redis+unix", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster"... */
	int tls;            /* every connection speaks TLS */
	int sentinel;       /* the hosts are sentinels; the lock's server is the master they name */
	int cluster;        /* the hosts are seeds of a Redis Cluster; a lock's server is its slot's master */
	/** The servers of `uri` into eps[0 .. uri->nhosts-1] (labels set) and the database into *db. */
	dlock_status (*endpoints)(const dlock_uri *uri, struct redis_endpoint *eps, long *db, dlock_error *err);
	/** A connected blocking socket, close-on-exec, by `deadline_ns`. */
	dlock_status (*connect)(const struct redis_endpoint *ep, int64_t deadline_ns, int *fd, dlock_error *err);
	/** 1 for a backend parameter of this scheme's URIs. */
	int (*knows_param)(const char *key);
};

/** 1 for a parameter of the TLS schemes: tls_ca_file, tls_ca_dir, tls_cert, tls_key, tls_server_name... */
int dlock_redis_tls_param(const char *key);
/** Reads and writes on the blocking socket `fd` fail after `ms` (0: never).  0, or -1 with errno. */
int dlock_redis_socket_timeouts(int fd, int64_t ms);
/** "host:port", or "[host]:port" for an IPv6 address, into `out`. */
void dlock_redis_hostport(char *out, size_t len, const char *host, int port);

extern const struct redis_transport dlock_redis_tcp;  /* redis://host:port,... */
extern const struct redis_transport dlock_redis_unix; /* redis+unix:///path */
extern const struct redis_transport dlock_redis_tls;  /* rediss://host:port,... */
extern const struct redis_transport dlock_redis_sentinel;     /* redis+sentinel://s1:port,.../MASTER */
extern const struct redis_transport dlock_redis_sentinel_tls; /* rediss+sentinel://... */
extern const struct redis_transport dlock_redis_cluster;      /* redis+cluster://seed1,seed2... */
extern const struct redis_transport dlock_redis_cluster_tls;  /* rediss+cluster://... */

/* ------------------------------------------------------------ TLS (redis_tls.c) */

/** The URI's TLS settings: DLOCK_EURI for a bad value or a file that cannot be loaded (named by
 *  its parameter, never by its path). */
dlock_status dlock_redis_tls_new(const dlock_uri *uri, dlock_host *host, struct redis_tls **out, dlock_error *err);
void dlock_redis_tls_free(struct redis_tls *t);
/**
 * TLS on the connected socket `fd` (not taken), by `deadline_ns`, verifying
 * the certificate for tls_server_name or `host` (NULL: no name); *cert_missing
 * says whether the server asked for a client certificate we do not have
 * (TLS 1.3 servers refuse that only after the handshake).  DLOCK_EAUTH
 * when the certificate or name is not accepted or ours is refused,
 * DLOCK_ECONNECT when the handshake fails otherwise.
 */
dlock_status dlock_redis_tls_handshake(const struct redis_tls *t, int fd, const char *host, const char *label,
                                       int64_t deadline_ns, SSL **out, int *cert_missing, dlock_error *err);
/** 1 when OpenSSL error `e` is the server's alert refusing our certificate (or its absence). */
int dlock_redis_tls_refused_certificate(unsigned long e);

/* ------------------------------------------------------------ a connection's bytes (redis_io.c) */

/*
 * One connection: a blocking socket, in the clear or inside TLS, with
 * hiredis's reader and formatter (hiredis 0.14's own context cannot speak
 * TLS).  The calls mirror hiredis's: REDIS_OK or REDIS_ERR, and after a
 * failure `err` stays set and the connection is never used again.
 */
struct redis_conn {
	int fd;
	SSL *ssl;             /* NULL: plaintext */
	redisReader *reader;
	char *out;            /* formatted commands not sent yet */
	size_t outlen, outcap;
	int err;              /* 0, or REDIS_ERR_IO, _EOF, _PROTOCOL, _OOM */
	int timed_out;        /* the failure was a read or write past io_timeout */
	int refused_cert;     /* the failure was the server's alert refusing our certificate */
	int cert_missing;     /* the server asked for a client certificate and we have none */
	unsigned long replies; /* replies read so far */
	unsigned generation;  /* the pool's generation when it was made (Sentinel: which master) */
	char errstr[160];
};

/** A connection over `fd` and `ssl` (both taken, even on failure: NULL = out of memory). */
struct redis_conn *dlock_redis_conn_new(int fd, SSL *ssl);
void dlock_redis_conn_free(struct redis_conn *conn);
/** Queue a command (sent by the next flush or get_reply). */
int dlock_redis_append_argv(struct redis_conn *conn, int argc, const char *const *argv, const size_t *len);
/** Send every queued command. */
int dlock_redis_flush(struct redis_conn *conn);
/** Send what is queued, then block (up to io_timeout per read) for the next reply. */
int dlock_redis_get_reply(struct redis_conn *conn, void **reply);
/** Read what the socket has without blocking (after poll() said readable). */
int dlock_redis_read_some(struct redis_conn *conn);
/** The next complete reply already read, or *reply = NULL. */
int dlock_redis_buffered_reply(struct redis_conn *conn, void **reply);
/** Append and read one reply: NULL when the connection failed. */
redisReply *dlock_redis_command_argv(struct redis_conn *conn, int argc, const char *const *argv, const size_t *len);

/* ------------------------------------------------------------ arguments */

/* Arguments of one command (binary-safe), and the bytes of those it built itself. */
struct redis_args {
	int argc;
	const char *argv[REDIS_ARGS_MAX];
	size_t len[REDIS_ARGS_MAX];
	size_t used;                  /* bytes of `bytes` in use */
	char bytes[REDIS_ARGS_BYTES]; /* key names built when the command is sent (dlock_redis_arg_key) */
};

/** Append a NUL-terminated argument. */
void dlock_redis_arg(struct redis_args *a, const char *s);
/** Append `n` bytes. */
void dlock_redis_argn(struct redis_args *a, const char *s, size_t n);
/** Append a decimal integer (kept in `buf`, which must outlive the call). */
void dlock_redis_argi(struct redis_args *a, char buf[24], long long v);
/** dlock_redis_command_argv() with `a`. */
redisReply *dlock_redis_command(struct redis_conn *conn, const struct redis_args *a);

/* ------------------------------------------------------------ connections */

/** Connect, set timeouts, AUTH and SELECT.  ECONNECT, EAUTH, ENOTFOUND, ESERVER... */
dlock_status dlock_redis_connect(const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                 struct redis_conn **out, dlock_error *err);

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
