/*
 * How a Redis server is reached: the first axis of the backend's mode
 * table (redis_transport.h).  Each transport reads its servers from the URI
 * and opens a socket to one of them; everything above (the handshake, the
 * pools, the lock algorithms) is the same whatever the transport.
 *
 *   tcp   redis://host[:port][,host[:port]...][/db]   (port 6379)
 *   tls   rediss://host[:port][,host[:port]...][/db][?tls_...]: tcp, then
 *         TLS on every connection (redis_tls.c, the handshake in redis_conn.c)
 *   unix  redis+unix:///path/to/socket[?db=N]
 *   sentinel  redis+sentinel://s1[:port][,s2[:port]...]/MASTER[?db=N&sentinel_user=&sentinel_password=]
 *         (port 26379) and rediss+sentinel://: the hosts are sentinels; the
 *         master they name is found at each connect (redis_sentinel.c)
 *   cluster   redis+cluster://seed[:port][,seed[:port]...][/] and rediss+cluster://:
 *         the hosts are seeds of a Redis Cluster (redis_cluster.c), which has
 *         database 0 only
 *
 * The socket is made here, not by hiredis: hiredis 0.14 opens it without
 * close-on-exec, and setting the flag afterwards leaves a window in which
 * another thread's fork+exec inherits it.  socket(SOCK_CLOEXEC), then a
 * connect bounded by open_timeout.  A loop client's connection
 * (redis_nbconn.c) has its server's addresses resolved once, at open
 * (dlock_redis_resolve()), and connects without waiting
 * (dlock_redis_connect_start()), so that reconnecting never blocks on a
 * name lookup.  Calls nothing else of the backend.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "redis_transport.h"

#define REDIS_DEFAULT_PORT 6379
#define REDIS_SENTINEL_DEFAULT_PORT 26379

/* ------------------------------------------------------------ URI */

/* A database number: decimal digits only, 0..INT32_MAX. */
static int parse_db(const char *text, long *db)
{
	if (!*text || strlen(text) > 10 || strspn(text, "0123456789") != strlen(text))
		return -1;
	long long v = strtoll(text, NULL, 10);
	if (v > INT32_MAX)
		return -1;
	*db = (long)v;
	return 0;
}

/* The hosts of a URI, reached by `via`, `port` when the URI gives none. */
static dlock_status list_hosts(const dlock_uri *uri, const struct redis_transport *via, int port,
                               struct redis_endpoint *eps, dlock_error *err)
{
	for (size_t i = 0; i < uri->nhosts; i++) {
		struct redis_endpoint *ep = &eps[i];
		const dlock_uri_host *h = &uri->hosts[i];
		if (!h->host[0])
			return dlock_error_set(err, DLOCK_EURI, "%s://: host %zu is empty: %s", via->scheme, i + 1,
			                       uri->masked);
		ep->via = via;
		ep->host = h->host;
		ep->port = h->port ? h->port : port;
		dlock_redis_hostport(ep->label, sizeof ep->label, h->host, ep->port);
	}
	return DLOCK_OK;
}

/* The hosts of a redis:// or rediss:// URI, reached by `via`; the path is the database. */
static dlock_status host_endpoints(const dlock_uri *uri, const struct redis_transport *via,
                                   struct redis_endpoint *eps, long *db, dlock_error *err)
{
	const char *path = uri->path;
	if (path[0] == '/')
		path++;
	if (*path && parse_db(path, db) != 0)
		return dlock_error_set(err, DLOCK_EURI, "%s://: the path must be a database number (/0, /1 ...): %s",
		                       via->scheme, uri->masked);
	return list_hosts(uri, via, REDIS_DEFAULT_PORT, eps, err);
}

/*
 * The sentinels of a redis+sentinel:// or rediss+sentinel:// URI, reached
 * by plain TCP or TLS; the path is the master's name (redis_sentinel.c),
 * the database the `db` parameter.
 */
static dlock_status sentinel_endpoints(const dlock_uri *uri, struct redis_endpoint *eps, long *db, dlock_error *err)
{
	const struct redis_transport *via = strncmp(uri->scheme, "rediss", 6) == 0 ? &dlock_redis_tls : &dlock_redis_tcp;
	const char *dbtext = dlock_uri_get(uri, "db");
	if (dbtext && parse_db(dbtext, db) != 0)
		return dlock_error_set(err, DLOCK_EURI, "%s://: db must be a database number: %s", uri->scheme,
		                       uri->masked);
	return list_hosts(uri, via, REDIS_SENTINEL_DEFAULT_PORT, eps, err);
}

static dlock_status tcp_endpoints(const dlock_uri *uri, struct redis_endpoint *eps, long *db, dlock_error *err)
{
	return host_endpoints(uri, &dlock_redis_tcp, eps, db, err);
}

static dlock_status tls_endpoints(const dlock_uri *uri, struct redis_endpoint *eps, long *db, dlock_error *err)
{
	return host_endpoints(uri, &dlock_redis_tls, eps, db, err);
}

static dlock_status unix_endpoints(const dlock_uri *uri, struct redis_endpoint *eps, long *db, dlock_error *err)
{
	struct redis_endpoint *ep = &eps[0];
	const char *dbtext = dlock_uri_get(uri, "db");
	if (uri->nhosts != 1 || uri->hosts[0].host[0] || uri->hosts[0].port)
		return dlock_error_set(err, DLOCK_EURI, "redis+unix:// takes no host (redis+unix:///path/to/socket): %s",
		                       uri->masked);
	if (!uri->path[0] || strcmp(uri->path, "/") == 0)
		return dlock_error_set(err, DLOCK_EURI, "redis+unix:// needs the socket's path: %s", uri->masked);
	if (dbtext && parse_db(dbtext, db) != 0)
		return dlock_error_set(err, DLOCK_EURI, "redis+unix://: db must be a database number: %s", uri->masked);
	ep->via = &dlock_redis_unix;
	ep->path = uri->path;
	snprintf(ep->label, sizeof ep->label, "%s", uri->path);
	return DLOCK_OK;
}

/* ------------------------------------------------------------ sockets */

void dlock_redis_hostport(char *out, size_t len, const char *host, int port)
{
	snprintf(out, len, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

int dlock_redis_socket_timeouts(int fd, int64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
	return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
	                       setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0
	               ? 0
	               : -1;
}

int dlock_redis_connect_result(int fd)
{
	int soerr = 0;
	socklen_t len = sizeof soerr;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
		return -1;
	errno = soerr;
	return soerr ? -1 : 0;
}

static int wait_connected(int fd, int64_t deadline_ns)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	for (;;) {
		int64_t left = deadline_ns - dlock_monotonic_ns();
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		int rc = poll(&pfd, 1, (int)((left + REDIS_NS_PER_MS - 1) / REDIS_NS_PER_MS));
		if (rc > 0)
			break;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
	return dlock_redis_connect_result(fd);
}

/* Requests are small and answered one by one: never wait for Nagle; and notice a peer that vanished. */
static void tcp_tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

/* A non-blocking socket, close-on-exec, connecting to `addr`: 0 connected, 1 in progress, -1 with errno. */
static int connect_begin(int family, const struct sockaddr *addr, socklen_t addrlen, int *out)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	*out = fd;
	if (connect(fd, addr, addrlen) == 0)
		return 0;
	if (errno == EINPROGRESS) /* a unix socket with a full backlog says EAGAIN: it is not in progress */
		return 1;
	int saved = errno;
	close(fd);
	*out = -1;
	errno = saved;
	return -1;
}

/* A connected blocking socket, close-on-exec, or -1 with errno. */
static int socket_connect(int family, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline_ns)
{
	int fd = -1;
	int rc = connect_begin(family, addr, addrlen, &fd);
	if (rc < 0)
		return -1;
	if (rc == 1 && wait_connected(fd, deadline_ns) != 0)
		goto fail;
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
		goto fail;
	return fd;
fail:;
	int saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

static dlock_status tcp_connect(const struct redis_endpoint *ep, int64_t deadline_ns, int *out, dlock_error *err)
{
	struct redis_addrs a;
	dlock_status st = dlock_redis_resolve(ep, &a, err);
	if (st != DLOCK_OK)
		return st;
	int fd = -1, saved = 0;
	for (int i = 0; i < a.n && fd < 0; i++) {
		fd = socket_connect(a.addr[i].ss_family, (const struct sockaddr *)&a.addr[i], a.len[i], deadline_ns);
		saved = errno;
	}
	if (fd < 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: cannot connect: %s", ep->label,
		                       saved == ETIMEDOUT ? "no answer within open_timeout" : strerror(saved));
	tcp_tune(fd);
	*out = fd;
	return DLOCK_OK;
}

/* The address of a unix socket's path. */
static dlock_status unix_address(const struct redis_endpoint *ep, struct sockaddr_un *sun, dlock_error *err)
{
	*sun = (struct sockaddr_un){ .sun_family = AF_UNIX };
	if (strlen(ep->path) >= sizeof sun->sun_path)
		return dlock_error_set(err, DLOCK_EURI, "redis+unix: socket path is longer than %zu bytes",
		                       sizeof sun->sun_path - 1);
	memcpy(sun->sun_path, ep->path, strlen(ep->path) + 1);
	return DLOCK_OK;
}

static dlock_status unix_connect(const struct redis_endpoint *ep, int64_t deadline_ns, int *out, dlock_error *err)
{
	struct sockaddr_un sun;
	dlock_status st = unix_address(ep, &sun, err);
	if (st != DLOCK_OK)
		return st;
	int fd = socket_connect(AF_UNIX, (const struct sockaddr *)&sun, sizeof sun, deadline_ns);
	if (fd < 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: cannot connect: %s", ep->label, strerror(errno));
	*out = fd;
	return DLOCK_OK;
}

/* ------------------------------------------------------------ addresses resolved once */

dlock_status dlock_redis_resolve(const struct redis_endpoint *ep, struct redis_addrs *out, dlock_error *err)
{
	*out = (struct redis_addrs){ .n = 0 };
	if (ep->path) {
		struct sockaddr_un sun;
		dlock_status st = unix_address(ep, &sun, err);
		if (st != DLOCK_OK)
			return st;
		memcpy(&out->addr[0], &sun, sizeof sun);
		out->len[0] = sizeof sun;
		out->n = 1;
		return DLOCK_OK;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
	char port[16];
	snprintf(port, sizeof port, "%d", ep->port);
	int rc = getaddrinfo(ep->host, port, &hints, &res);
	if (rc != 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: cannot resolve the host: %s", ep->label,
		                       gai_strerror(rc));
	for (struct addrinfo *ai = res; ai && out->n < REDIS_ADDRS_MAX; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof out->addr[0])
			continue;
		memcpy(&out->addr[out->n], ai->ai_addr, ai->ai_addrlen);
		out->len[out->n++] = ai->ai_addrlen;
	}
	freeaddrinfo(res);
	if (out->n == 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: the host has no address", ep->label);
	return DLOCK_OK;
}

int dlock_redis_connect_start(const struct redis_addrs *a, int i, int *fd)
{
	int family = a->addr[i].ss_family;
	int rc = connect_begin(family, (const struct sockaddr *)&a->addr[i], a->len[i], fd);
	if (rc >= 0 && family != AF_UNIX)
		tcp_tune(*fd);
	return rc;
}

/* ------------------------------------------------------------ the transports */

/* The TLS parameters (read by redis_tls.c); named here, with every scheme's other parameters. */
int dlock_redis_tls_param(const char *key)
{
	static const char *const known[] = { "tls_ca_file", "tls_ca_dir", "tls_cert", "tls_key",
		                             "tls_server_name", "tls_insecure_skip_verify" };
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		if (strcmp(key, known[i]) == 0)
			return 1;
	return 0;
}


static int tcp_knows_param(const char *key)
{
	(void)key;
	return 0; /* the database is the URI's path */
}

static int unix_knows_param(const char *key)
{
	return strcmp(key, "db") == 0;
}

const struct redis_transport dlock_redis_tcp = {
	.scheme = "redis",
	.endpoints = tcp_endpoints,
	.connect = tcp_connect,
	.knows_param = tcp_knows_param,
};

const struct redis_transport dlock_redis_tls = {
	.scheme = "rediss",
	.tls = 1,
	.endpoints = tls_endpoints,
	.connect = tcp_connect, /* the TLS handshake follows (redis_conn.c) */
	.knows_param = dlock_redis_tls_param,
};

static dlock_status cluster_endpoints(const dlock_uri *uri, struct redis_endpoint *eps, long *db, dlock_error *err)
{
	const struct redis_transport *via = strncmp(uri->scheme, "rediss", 6) == 0 ? &dlock_redis_tls : &dlock_redis_tcp;
	return host_endpoints(uri, via, eps, db, err);
}

const struct redis_transport dlock_redis_cluster = {
	.scheme = "redis+cluster",
	.cluster = 1,
	.endpoints = cluster_endpoints,
	.connect = tcp_connect,
	.knows_param = tcp_knows_param,
};

const struct redis_transport dlock_redis_cluster_tls = {
	.scheme = "rediss+cluster",
	.tls = 1,
	.cluster = 1,
	.endpoints = cluster_endpoints,
	.connect = tcp_connect,
	.knows_param = dlock_redis_tls_param,
};

static int sentinel_knows_param(const char *key)
{
	return strcmp(key, "db") == 0 || strcmp(key, "sentinel_user") == 0 || strcmp(key, "sentinel_password") == 0;
}

static int sentinel_tls_knows_param(const char *key)
{
	return sentinel_knows_param(key) || dlock_redis_tls_param(key);
}

const struct redis_transport dlock_redis_sentinel = {
	.scheme = "redis+sentinel",
	.sentinel = 1,
	.endpoints = sentinel_endpoints,
	.connect = tcp_connect, /* to a sentinel, or to the master it names */
	.knows_param = sentinel_knows_param,
};

const struct redis_transport dlock_redis_sentinel_tls = {
	.scheme = "rediss+sentinel",
	.tls = 1,
	.sentinel = 1,
	.endpoints = sentinel_endpoints,
	.connect = tcp_connect,
	.knows_param = sentinel_tls_knows_param,
};

const struct redis_transport dlock_redis_unix = {
	.scheme = "redis+unix",
	.endpoints = unix_endpoints,
	.connect = unix_connect,
	.knows_param = unix_knows_param,
};
