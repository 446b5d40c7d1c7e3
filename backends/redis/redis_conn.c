/*
 * Connections to one Redis server: the handshake on a socket that the
 * endpoint's transport opened (redis_transport.c), the meaning of failures,
 * and the pool that lets many threads share a client.
 *
 * redisConnectFd() hands the transport's descriptor to a blocking hiredis
 * context whose reads and writes are bounded by io_timeout.
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

dlock_status dlock_redis_io_error(const redisContext *ctx, const struct redis_endpoint *ep, dlock_error *err)
{
	if (!ctx || ctx->err == REDIS_ERR_OOM)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", ep->label);
	/* A read or write that hit SO_RCVTIMEO/SO_SNDTIMEO reports EAGAIN. */
	if (ctx->err == REDIS_ERR_IO && strcmp(ctx->errstr, strerror(EAGAIN)) == 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: no answer within io_timeout", ep->label);
	return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: connection failed: %s", ep->label,
	                       ctx->errstr[0] ? ctx->errstr : "unknown error");
}

int dlock_redis_is_error(const redisReply *r, const char *code)
{
	size_t n = strlen(code);
	return r && r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, code, n) == 0 &&
	       (r->str[n] == ' ' || r->str[n] == '\0');
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
	/* The server's text never holds the password: it is safe to show. */
	return dlock_error_set(err, st, "redis %s: %s: %s", ep->label, what, text);
}

/* ------------------------------------------------------------ handshake */

/* Run one command of the handshake: DLOCK_OK, DLOCK_ESERVER (*out is the error reply) or an I/O failure. */
static dlock_status hello_command(redisContext *ctx, const struct redis_endpoint *ep, const struct redis_args *a,
                                  redisReply **out, dlock_error *err)
{
	struct redis_args copy = *a; /* hiredis 0.14 takes `const char **` */
	redisReply *r = redisCommandArgv(ctx, copy.argc, copy.argv, copy.len);
	if (!r)
		return dlock_redis_io_error(ctx, ep, err);
	*out = r;
	return r->type == REDIS_REPLY_ERROR ? DLOCK_ESERVER : DLOCK_OK;
}

static dlock_status authenticate(redisContext *ctx, const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                 dlock_error *err)
{
	struct redis_args a = { 0 };
	redisReply *r = NULL;
	dlock_redis_arg(&a, "AUTH");
	if (cfg->user && cfg->user[0])
		dlock_redis_arg(&a, cfg->user);
	dlock_redis_arg(&a, cfg->password ? cfg->password : "");
	dlock_status st = hello_command(ctx, ep, &a, &r, err);
	if (st == DLOCK_ESERVER) /* every refusal of AUTH is an authentication failure */
		st = dlock_error_set(err, DLOCK_EAUTH, "redis %s: authentication failed: %s", ep->label, r->str);
	freeReplyObject(r);
	return st;
}

static dlock_status select_db(redisContext *ctx, const struct redis_endpoint *ep, long db, dlock_error *err)
{
	struct redis_args a = { 0 };
	char buf[24];
	redisReply *r = NULL;
	dlock_redis_arg(&a, "SELECT");
	dlock_redis_argi(&a, buf, db);
	dlock_status st = hello_command(ctx, ep, &a, &r, err);
	if (st == DLOCK_ESERVER && strstr(r->str, "out of range"))
		st = dlock_error_set(err, DLOCK_ENOTFOUND, "redis %s: database %ld does not exist (%s)", ep->label, db,
		                     r->str);
	else if (st == DLOCK_ESERVER)
		st = dlock_redis_reply_error(r, ep, "SELECT", err);
	freeReplyObject(r);
	return st;
}

static struct timeval to_timeval(int64_t ms)
{
	return (struct timeval){ .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
}

dlock_status dlock_redis_connect(const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                 redisContext **out, dlock_error *err)
{
	int64_t deadline = dlock_monotonic_ns() + cfg->connect_timeout_ms * REDIS_NS_PER_MS;
	int fd = -1;
	redisContext *ctx = NULL;
	dlock_status st = ep->via->connect(ep, deadline, &fd, err);
	if (st != DLOCK_OK)
		return st;
	ctx = redisConnectFd(fd);
	if (!ctx) {
		close(fd);
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", ep->label);
	}
	if (cfg->io_timeout_ms > 0 && redisSetTimeout(ctx, to_timeval(cfg->io_timeout_ms)) != REDIS_OK) {
		st = dlock_redis_io_error(ctx, ep, err);
		goto fail;
	}
	/* A user without a password still logs in as that user (a `nopass` ACL user), never as default. */
	int auth = cfg->password || (cfg->user && cfg->user[0]);
	if (auth && (st = authenticate(ctx, ep, cfg, err)) != DLOCK_OK)
		goto fail;
	if (cfg->db != 0 && (st = select_db(ctx, ep, cfg->db, err)) != DLOCK_OK)
		goto fail;
	*out = ctx;
	return DLOCK_OK;
fail:
	redisFree(ctx);
	return st;
}

void dlock_redis_check_eviction(redisContext *ctx, const struct redis_endpoint *ep, dlock_host *host)
{
	redisReply *r = redisCommand(ctx, "CONFIG GET maxmemory-policy");
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
}

void dlock_redis_pool_destroy(struct redis_pool *p)
{
	while (p->nidle > 0)
		redisFree(p->idle[--p->nidle]);
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
static int conn_stale(const redisContext *ctx)
{
	struct pollfd pfd = { .fd = ctx->fd, .events = POLLIN };
	return ctx->err || poll(&pfd, 1, 0) != 0;
}

/* An idle connection, or a slot for a new one (*slot); with `block`, wait for one of the two. */
static redisContext *pool_take(struct redis_pool *p, int block, int *slot)
{
	*slot = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		if (p->nidle > 0) {
			redisContext *ctx = p->idle[--p->nidle];
			if (!conn_stale(ctx)) {
				pthread_mutex_unlock(&p->mu);
				return ctx;
			}
			redisFree(ctx); /* rare (after a restart), and close() does not block */
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

static dlock_status pool_get(struct redis_pool *p, int block, redisContext **out, dlock_error *err)
{
	int slot;
	if ((*out = pool_take(p, block, &slot)) != NULL)
		return DLOCK_OK;
	if (!slot)
		return dlock_error_set(err, DLOCK_EBUSY, "redis %s: all %d connections are in use", p->ep.label,
		                       REDIS_POOL_MAX);
	dlock_status st = dlock_redis_connect(&p->ep, p->cfg, out, err);
	if (st != DLOCK_OK) {
		pthread_mutex_lock(&p->mu);
		p->total--;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->mu);
	}
	return st;
}

dlock_status dlock_redis_pool_get(struct redis_pool *p, redisContext **out, dlock_error *err)
{
	return pool_get(p, 1, out, err);
}

dlock_status dlock_redis_pool_try_get(struct redis_pool *p, redisContext **out, dlock_error *err)
{
	return pool_get(p, 0, out, err);
}

void dlock_redis_pool_discard(struct redis_pool *p, redisContext *ctx)
{
	if (!ctx)
		return;
	redisFree(ctx);
	pthread_mutex_lock(&p->mu);
	p->total--;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mu);
}

void dlock_redis_pool_put(struct redis_pool *p, redisContext *ctx)
{
	if (!ctx)
		return;
	if (ctx->err) {
		dlock_redis_pool_discard(p, ctx);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->idle[p->nidle++] = ctx;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mu);
}
