/*
 * The raw Redis client: what a careful hand-written lock does.
 *   acquire  SET key owner NX PX ttl   (a waiter simply tries again at once)
 *   release  the compare-and-delete script (EVALSHA), owner-only
 * One connection per worker thread, hiredis' blocking API, like the backend.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"

#define RAW_TTL_MS 30000

static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                                  "return redis.call('DEL', KEYS[1]) end return 0";

struct rconn {
	redisContext *ctx;
	char sha[41];
	char owner[64];
	unsigned long long seq;
};

static void rconn_close(void *p)
{
	struct rconn *c = p;
	if (c->ctx)
		redisFree(c->ctx);
	free(c);
}

static void *rconn_connect(const char *uri, char *err, size_t errlen)
{
	char host[256];
	int port;
	struct rconn *c = calloc(1, sizeof *c);
	if (!c || bench_uri_host(uri, host, sizeof host, &port, 6379) != 0) {
		snprintf(err, errlen, "redis: cannot read host and port from the URI");
		free(c);
		return NULL;
	}
	struct timeval tv = { 5, 0 };
	c->ctx = redisConnectWithTimeout(host, port, tv);
	if (!c->ctx || c->ctx->err) {
		snprintf(err, errlen, "redis %s:%d: %s", host, port, c->ctx ? c->ctx->errstr : "out of memory");
		rconn_close(c);
		return NULL;
	}
	fcntl(c->ctx->fd, F_SETFD, FD_CLOEXEC); /* hiredis does not set it */
	redisReply *r = redisCommand(c->ctx, "SCRIPT LOAD %s", release_lua);
	if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
		snprintf(err, errlen, "redis %s:%d: SCRIPT LOAD failed", host, port);
		if (r)
			freeReplyObject(r);
		rconn_close(c);
		return NULL;
	}
	memcpy(c->sha, r->str, 40);
	freeReplyObject(r);
	return c;
}

static int io_failed(struct rconn *c, char *err, size_t errlen)
{
	snprintf(err, errlen, "redis: %s", c->ctx->err ? c->ctx->errstr : "unexpected reply");
	return -1;
}

static int rconn_acquire(void *p, const char *name, const _Atomic int *stop, char *err, size_t errlen)
{
	struct rconn *c = p;
	snprintf(c->owner, sizeof c->owner, "%d-%p-%llu", (int)getpid(), p, ++c->seq);
	for (;;) {
		redisReply *r = redisCommand(c->ctx, "SET bench-raw:%s %s NX PX %d", name, c->owner, RAW_TTL_MS);
		if (!r)
			return io_failed(c, err, errlen);
		int got = r->type == REDIS_REPLY_STATUS, busy = r->type == REDIS_REPLY_NIL;
		freeReplyObject(r);
		if (got)
			return 1;
		if (!busy)
			return io_failed(c, err, errlen);
		if (atomic_load(stop))
			return 0;
	}
}

static int rconn_release(void *p, const char *name, char *err, size_t errlen)
{
	struct rconn *c = p;
	redisReply *r = redisCommand(c->ctx, "EVALSHA %s 1 bench-raw:%s %s", c->sha, name, c->owner);
	if (!r)
		return io_failed(c, err, errlen);
	int ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	if (!ok)
		snprintf(err, errlen, "redis: release found the key gone or taken");
	return ok ? 0 : -1;
}

static int rconn_ping(void *p)
{
	struct rconn *c = p;
	redisReply *r = redisCommand(c->ctx, "PING");
	if (r)
		freeReplyObject(r);
	return r ? 0 : -1;
}

/* Redis cannot tell which connection holds a key: every client connection but ours is cut. */
static int rconn_cut(void *p, char *msg, size_t msglen)
{
	struct rconn *c = p;
	long long n[2] = { 0, 0 };
	const char *types[2] = { "normal", "pubsub" };
	for (int i = 0; i < 2; i++) {
		redisReply *r = redisCommand(c->ctx, "CLIENT KILL TYPE %s SKIPME yes", types[i]);
		if (!r)
			return -1;
		n[i] = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
		freeReplyObject(r);
	}
	snprintf(msg, msglen, "CLIENT KILL: %lld normal and %lld pub/sub connections", n[0], n[1]);
	return n[0] >= 0 && n[1] >= 0 ? 0 : -1;
}

static const char *const schemes[] = { "redis", NULL };

const struct bench_raw bench_raw_redis = {
	.name = "redis",
	.schemes = schemes,
	.what = "SET key owner NX PX, compare-and-delete script",
	.connect = rconn_connect,
	.acquire = rconn_acquire,
	.release = rconn_release,
	.ping = rconn_ping,
	.cut = rconn_cut,
	.close = rconn_close,
};
