/*
 * Redis backend, ground floor: how a server is reached (redis_transport.c),
 * the first axis of the client's mode table — a server's endpoint, the
 * transports, and the socket helpers that the TLS layer and the
 * connections share.  Calls nothing else of the backend.  Never included
 * outside backends/redis/.
 *
 * Threads: any (the transports are constant; an endpoint's `locate` says
 * its own).  Errors: statuses with messages that name the URI masked or a
 * host, never a password.
 */
#ifndef DLOCK_REDIS_TRANSPORT_H
#define DLOCK_REDIS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dlock/sys/driver.h"

#define REDIS_NS_PER_MS 1000000LL

/* ------------------------------------------------------------ endpoints */

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

/* ------------------------------------------------------------ transports */

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

/* ------------------------------------------------------------ addresses resolved once */

#define REDIS_ADDRS_MAX 4

/* The socket addresses of one fixed endpoint (a loop client's connection, redis_nbconn.c), in the order to try. */
struct redis_addrs {
	int n;
	socklen_t len[REDIS_ADDRS_MAX];
	struct sockaddr_storage addr[REDIS_ADDRS_MAX];
};

/** The addresses of the fixed endpoint `ep`: its unix socket's path, or its host looked up now (blocking,
 *  the first REDIS_ADDRS_MAX).  DLOCK_ECONNECT when the host has none, DLOCK_EURI for a path too long. */
dlock_status dlock_redis_resolve(const struct redis_endpoint *ep, struct redis_addrs *out, dlock_error *err);
/** Start connecting a non-blocking, close-on-exec socket (*fd) to address `i` of `a`, without waiting:
 *  0 connected, 1 in progress (writable once it is done: dlock_redis_connect_result()), -1 with errno. */
int dlock_redis_connect_start(const struct redis_addrs *a, int i, int *fd);
/** How a connect in progress on `fd` ended, once the socket is writable: 0, or -1 with errno. */
int dlock_redis_connect_result(int fd);

extern const struct redis_transport dlock_redis_tcp;  /* redis://host:port,... */
extern const struct redis_transport dlock_redis_unix; /* redis+unix:///path */
extern const struct redis_transport dlock_redis_tls;  /* rediss://host:port,... */
extern const struct redis_transport dlock_redis_sentinel;     /* redis+sentinel://s1:port,.../MASTER */
extern const struct redis_transport dlock_redis_sentinel_tls; /* rediss+sentinel://... */
extern const struct redis_transport dlock_redis_cluster;      /* redis+cluster://seed1,seed2... */
extern const struct redis_transport dlock_redis_cluster_tls;  /* rediss+cluster://... */

#endif
