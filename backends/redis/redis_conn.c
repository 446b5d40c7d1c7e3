/*
 * Connections to one Redis server: the handshake on a socket that the
 * endpoint's transport opened (redis_transport.c) — TLS first for rediss
 * (redis_tls.c), then AUTH and SELECT — the meaning of failures, and the
 * pool that lets many threads share a client.
 *
 * The transport's descriptor becomes a blocking connection (redis_io.c)
 * whose reads and writes are bounded by io_timeout.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_conn.h"

/* ------------------------------------------------------------ arguments */

void dlock_redis_argn(struct redis_args *a, const char *s, size_t n)
{
	if (a->argc >= REDIS_ARGS_MAX)
		abort(); /* a programming error in this backend, never input-dependent */
	a->argv[a->argc] = s;
	a->len[a->argc++] = n;
}

void dlock_redis_arg(struct redis_args *a, const char *s)
{
	dlock_redis_argn(a, s, strlen(s));
}

void dlock_redis_argi(struct redis_args *a, char buf[24], long long v)
{
	int n = snprintf(buf, 24, "%lld", v);
	dlock_redis_argn(a, buf, (size_t)n);
}

/* ------------------------------------------------------------ errors */

dlock_status dlock_redis_io_error(const struct redis_conn *ctx, const struct redis_endpoint *ep, dlock_error *err)
{
	if (!ctx || ctx->err == REDIS_ERR_OOM)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", ep->label);
	if (ctx->timed_out)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: no answer within io_timeout", ep->label);
	if (ctx->cert_missing && ctx->replies == 0 && (ctx->err == REDIS_ERR_IO || ctx->err == REDIS_ERR_EOF))
		/* The alert may be lost to the RST that follows it: what we know is that it asked. */
		return dlock_error_set(err, DLOCK_EAUTH,
		                       "redis %s: the server asked for a client certificate, none was given (tls_cert and "
		                       "tls_key give one), and it dropped the connection (%s)",
		                       ep->label, ctx->errstr);
	if (ctx->refused_cert) /* TLS 1.3 says so only after the handshake, at the first read */
		return dlock_error_set(err, DLOCK_EAUTH, "redis %s: %s (tls_cert and tls_key give one)", ep->label,
		                       ctx->errstr);
	return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: connection failed: %s", ep->label,
	                       ctx->errstr[0] ? ctx->errstr : "unknown error");
}

int dlock_redis_is_error(const redisReply *r, const char *code)
{
	size_t n = strlen(code);
	return r && r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, code, n) == 0 &&
	       (r->str[n] == ' ' || r->str[n] == '\0');
}

int dlock_redis_is_redirection(const redisReply *r)
{
	return dlock_redis_is_error(r, "MOVED") || dlock_redis_is_error(r, "ASK") ||
	       dlock_redis_is_error(r, "TRYAGAIN") || dlock_redis_is_error(r, "CLUSTERDOWN");
}

dlock_status dlock_redis_reply_error(const redisReply *r, const struct redis_endpoint *ep, const char *what,
                                     dlock_error *err)
{
	const char *text = r && r->type == REDIS_REPLY_ERROR && r->str ? r->str : "unexpected reply";
	dlock_status st = DLOCK_ESERVER;
	if (dlock_redis_is_error(r, "NOAUTH") || dlock_redis_is_error(r, "WRONGPASS"))
		st = DLOCK_EAUTH;
	else if (dlock_redis_is_error(r, "NOPERM"))
		st = DLOCK_EPERM;
	else if (dlock_redis_is_error(r, "READONLY")) /* a demoted master: the connection is dropped (redis_io.c) */
		st = DLOCK_ECONNECT;
	/* The server's text never holds the password: it is safe to show. */
	return dlock_error_set(err, st, "redis %s: %s: %s", ep->label, what, text);
}

/* ------------------------------------------------------------ handshake */

int dlock_redis_hello_args(const struct redis_cfg *cfg, int step, struct redis_args *a, char buf[24])
{
	*a = (struct redis_args){ 0 };
	/* A user without a password still logs in as that user (a `nopass` ACL user), never as default. */
	if (step == REDIS_HELLO_AUTH && (cfg->password || (cfg->user && cfg->user[0]))) {
		dlock_redis_arg(a, "AUTH");
		if (cfg->user && cfg->user[0])
			dlock_redis_arg(a, cfg->user);
		dlock_redis_arg(a, cfg->password ? cfg->password : "");
		return 1;
	}
	if (step == REDIS_HELLO_SELECT && cfg->db != 0) {
		dlock_redis_arg(a, "SELECT");
		dlock_redis_argi(a, buf, cfg->db);
		return 1;
	}
	return 0;
}

dlock_status dlock_redis_hello_answer(const struct redis_cfg *cfg, int step, const redisReply *r,
                                      const struct redis_endpoint *ep, dlock_error *err)
{
	if (r->type != REDIS_REPLY_ERROR)
		return DLOCK_OK;
	if (step == REDIS_HELLO_AUTH) /* every refusal of AUTH is an authentication failure */
		return dlock_error_set(err, DLOCK_EAUTH, "redis %s: authentication failed: %s", ep->label, r->str);
	if (strstr(r->str, "out of range"))
		return dlock_error_set(err, DLOCK_ENOTFOUND, "redis %s: database %ld does not exist (%s)", ep->label,
		                       cfg->db, r->str);
	return dlock_redis_reply_error(r, ep, "SELECT", err);
}

/* AUTH, then SELECT, each when the configuration asks for it: DLOCK_OK or the failure of the first refused. */
static dlock_status hello(struct redis_conn *ctx, const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                          dlock_error *err)
{
	for (int step = REDIS_HELLO_AUTH; step <= REDIS_HELLO_SELECT; step++) {
		struct redis_args a;
		char buf[24];
		if (!dlock_redis_hello_args(cfg, step, &a, buf))
			continue;
		redisReply *r = dlock_redis_command(ctx, &a);
		if (!r)
			return dlock_redis_io_error(ctx, ep, err);
		dlock_status st = dlock_redis_hello_answer(cfg, step, r, ep, err);
		freeReplyObject(r);
		if (st != DLOCK_OK)
			return st;
	}
	return DLOCK_OK;
}

/* The server must be a master: never a lock on a replica (Sentinel's answer may be stale). */
static dlock_status require_master(struct redis_conn *ctx, const struct redis_endpoint *ep, dlock_error *err)
{
	const char *argv[1] = { "ROLE" };
	size_t len[1] = { 4 };
	redisReply *r = dlock_redis_command_argv(ctx, 1, argv, len);
	dlock_status st = DLOCK_OK;
	if (!r)
		st = dlock_redis_io_error(ctx, ep, err);
	else if (r->type == REDIS_REPLY_ERROR)
		st = dlock_redis_reply_error(r, ep, "ROLE (needed to refuse a replica)", err);
	else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING)
		st = dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected answer to ROLE", ep->label);
	else if (strcmp(r->element[0]->str, "master") != 0)
		st = dlock_error_set(err, DLOCK_ECONNECT,
		                     "redis %s: the sentinels name it as master, but it is a %s (a failover in progress?)",
		                     ep->label, r->element[0]->str);
	freeReplyObject(r);
	return st;
}

static dlock_status connect_at(const struct redis_endpoint *ep, const struct redis_cfg *cfg, struct redis_conn **out,
                               dlock_error *err);

dlock_status dlock_redis_connect(const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                 struct redis_conn **out, dlock_error *err)
{
	if (!ep->locate)
		return connect_at(ep, cfg, out, err);
	struct redis_endpoint where;
	dlock_status st = ep->locate(ep->locate_arg, &where, err);
	if (st == DLOCK_OK)
		st = connect_at(&where, cfg, out, err);
	if (st == DLOCK_OK && (st = require_master(*out, &where, err)) != DLOCK_OK) {
		dlock_redis_conn_free(*out);
		*out = NULL;
	}
	return st;
}

static dlock_status connect_at(const struct redis_endpoint *ep, const struct redis_cfg *cfg, struct redis_conn **out,
                               dlock_error *err)
{
	int64_t deadline = dlock_monotonic_ns() + cfg->connect_timeout_ms * REDIS_NS_PER_MS;
	int fd = -1;
	SSL *ssl = NULL;
	struct redis_conn *ctx = NULL;
	dlock_status st = ep->via->connect(ep, deadline, &fd, err);
	if (st != DLOCK_OK)
		return st;
	int cert_missing = 0;
	if (cfg->tls && (st = dlock_redis_tls_handshake(cfg->tls, fd, ep->host, ep->label, deadline, &ssl, &cert_missing,
	                                                 err)) != DLOCK_OK) {
		close(fd);
		return st;
	}
	/* After the handshake's own bound (redis_tls.c), io_timeout; 0 is never. */
	if (dlock_redis_socket_timeouts(fd, cfg->io_timeout_ms > 0 ? cfg->io_timeout_ms : 0) != 0) {
		st = dlock_error_set(err, DLOCK_EIO, "redis %s: cannot set io_timeout: %s", ep->label, strerror(errno));
		SSL_free(ssl);
		close(fd);
		return st;
	}
	ctx = dlock_redis_conn_new(fd, ssl);
	if (!ctx)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", ep->label);
	ctx->cert_missing = cert_missing;
	if ((st = hello(ctx, ep, cfg, err)) != DLOCK_OK) {
		dlock_redis_conn_free(ctx);
		return st;
	}
	*out = ctx;
	return DLOCK_OK;
}

void dlock_redis_check_eviction(struct redis_conn *ctx, const struct redis_endpoint *ep, dlock_host *host)
{
	const char *argv[3] = { "CONFIG", "GET", "maxmemory-policy" };
	size_t len[3] = { 6, 3, 16 };
	redisReply *r = dlock_redis_command_argv(ctx, 3, argv, len);
	if (!r)
		return; /* the caller sees ctx->err */
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
		const char *policy = r->element[1]->str;
		if (strncmp(policy, "volatile-", 9) == 0 || strncmp(policy, "allkeys-", 8) == 0)
			dlock_host_log(host, DLOCK_LOG_WARN,
			               "redis %s: maxmemory-policy is %s: under memory pressure the server may evict "
			               "a lock's key while it is held (noeviction keeps locks)",
			               ep->label, policy);
	} else if (r->type == REDIS_REPLY_ERROR) {
		dlock_host_log(host, DLOCK_LOG_DEBUG, "redis %s: cannot read maxmemory-policy (%s); not checked",
		               ep->label, r->str);
	}
	freeReplyObject(r);
}

/* ------------------------------------------------------------ pool */

void dlock_redis_pool_init(struct redis_pool *p, const struct redis_cfg *cfg)
{
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->nidle = p->total = 0;
	p->cfg = cfg;
	p->generation = NULL;
}

void dlock_redis_pool_destroy(struct redis_pool *p)
{
	while (p->nidle > 0)
		dlock_redis_conn_free(p->idle[--p->nidle]);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->mu);
}

/*
 * An idle connection has no request in flight, so anything readable on it
 * (the FIN of a server that restarted or closed it for idleness, or stray
 * bytes) means it cannot be trusted with a request.  Finding that out
 * before sending keeps a stale connection from turning a request into one
 * whose fate is unknown.
 */
static unsigned generation_of(const struct redis_pool *p)
{
	return p->generation ? atomic_load(p->generation) : 0;
}

static int conn_stale(const struct redis_pool *p, struct redis_conn *ctx)
{
	if (ctx->generation != generation_of(p))
		return 1; /* made for a master the sentinels no longer name */
	struct pollfd pfd = { .fd = ctx->fd, .events = POLLIN };
	if (ctx->err || poll(&pfd, 1, 0) == 0)
		return ctx->err != 0;
	if (!ctx->ssl)
		return 1;
	/* Under TLS the bytes may be records without data (TLS 1.3 session
	 * tickets); only data, an alert or the end of the stream make it stale. */
	return dlock_redis_read_some(ctx) != REDIS_OK || ctx->reader->pos < ctx->reader->len;
}

/* An idle connection, or a slot for a new one (*slot); with `block`, wait for one of the two. */
static struct redis_conn *pool_take(struct redis_pool *p, int block, int *slot)
{
	*slot = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		if (p->nidle > 0) {
			struct redis_conn *ctx = p->idle[--p->nidle];
			if (!conn_stale(p, ctx)) {
				pthread_mutex_unlock(&p->mu);
				return ctx;
			}
			dlock_redis_conn_free(ctx); /* rare (after a restart), and close() does not block */
			p->total--;
			continue;
		}
		if (p->total < REDIS_POOL_MAX) {
			p->total++;
			*slot = 1;
			break;
		}
		if (!block)
			break;
		pthread_cond_wait(&p->cond, &p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static dlock_status pool_get(struct redis_pool *p, int block, struct redis_conn **out, dlock_error *err)
{
	int slot;
	if ((*out = pool_take(p, block, &slot)) != NULL)
		return DLOCK_OK;
	if (!slot)
		return dlock_error_set(err, DLOCK_EBUSY, "redis %s: all %d connections are in use", p->ep.label,
		                       REDIS_POOL_MAX);
	unsigned gen = generation_of(p); /* before the sentinels are asked: a move meanwhile makes it stale */
	dlock_status st = dlock_redis_connect(&p->ep, p->cfg, out, err);
	if (st == DLOCK_OK)
		(*out)->generation = gen;
	if (st != DLOCK_OK) {
		pthread_mutex_lock(&p->mu);
		p->total--;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->mu);
	}
	return st;
}

dlock_status dlock_redis_pool_get(struct redis_pool *p, struct redis_conn **out, dlock_error *err)
{
	return pool_get(p, 1, out, err);
}

dlock_status dlock_redis_pool_try_get(struct redis_pool *p, struct redis_conn **out, dlock_error *err)
{
	return pool_get(p, 0, out, err);
}

void dlock_redis_pool_discard(struct redis_pool *p, struct redis_conn *ctx)
{
	if (!ctx)
		return;
	dlock_redis_conn_free(ctx);
	pthread_mutex_lock(&p->mu);
	p->total--;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mu);
}

void dlock_redis_pool_put(struct redis_pool *p, struct redis_conn *ctx)
{
	if (!ctx)
		return;
	if (ctx->err || ctx->generation != generation_of(p)) {
		dlock_redis_pool_discard(p, ctx);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->idle[p->nidle++] = ctx;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mu);
}
