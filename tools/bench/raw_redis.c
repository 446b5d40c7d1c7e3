/*
 * The raw Redis client: what a careful hand-written lock does, as fast as
 * hiredis allows.
 *   acquire  SET key owner NX PX ttl   (a waiter simply tries again at once);
 *            with fencing, a script (EVALSHA) that does that SET and, when
 *            it took the key, INCRs the name's counter (its expiry renewed)
 *            and returns the token
 *   release  the compare-and-delete script (EVALSHA), owner-only
 * One connection per worker thread, hiredis' blocking API, like the backend.
 * Each command is formatted once per name (a worker keeps its name) and
 * only written and read afterwards; hiredis still allocates each reply.
 * The owner value is one per connection: a connection holds one lock at a
 * time.  A name's keys share its hash tag: bench-raw:{NAME}:lock, :fence.
 *
 * In a Redis Cluster (redis+cluster://seed,…) it does what a careful
 * hand-written cluster client does: the slot map from CLUSTER SLOTS at
 * connect, the slot of each name from CLUSTER KEYSLOT the first time the
 * name is used, and each command sent straight to the master of that slot,
 * over a connection of its own to each master it meets.  It does not
 * follow MOVED or ASK: the bench measures a stable cluster, and the faults
 * scenario locks through dlock, not through it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"

#define RAW_TTL_MS 30000
#define RAW_MAX_NODES 16  /* masters of a cluster */
#define RAW_MAX_RANGES 64 /* slot ranges of CLUSTER SLOTS */

static const char release_lua[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                                  "return redis.call('DEL', KEYS[1]) end return 0";
/* KEYS lock, fence; ARGV owner, ttl: the token, or false when the key is taken. */
static const char acquire_lua[] = "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
                                  "return false end local t = redis.call('INCR', KEYS[2]) "
                                  "redis.call('PEXPIRE', KEYS[2], 604800000) return t";

/* A connection to one server (in a cluster, to one master) with the scripts loaded there. */
struct rnode {
	char host[64];
	int port;
	redisContext *ctx;
	char release_sha[41], acquire_sha[41];
};

struct rrange {
	int first, last; /* slots */
	int node;        /* index in rconn.nodes */
};

struct rconn {
	struct rnode seed; /* the server; in a cluster, the seed that gave the map */
	int cluster;
	struct rnode nodes[RAW_MAX_NODES]; /* cluster: the masters; ctx NULL until used */
	int nnodes;
	struct rrange ranges[RAW_MAX_RANGES];
	int nranges;
	int fencing;      /* acquisitions take a token */
	char name[160];   /* the last name routed, its server and its commands, formatted */
	struct rnode *at;
	char *acquire_cmd, *release_cmd;
	int acquire_len, release_len;
	char owner[64];
};

static void rconn_close(void *p)
{
	struct rconn *c = p;
	if (c->seed.ctx)
		redisFree(c->seed.ctx);
	for (int i = 0; i < c->nnodes; i++)
		if (c->nodes[i].ctx)
			redisFree(c->nodes[i].ctx);
	redisFreeCommand(c->acquire_cmd);
	redisFreeCommand(c->release_cmd);
	free(c);
}

/* SCRIPT LOAD `lua` on n into sha; 0 or -1. */
static int load_script(struct rnode *n, const char *lua, char sha[41])
{
	redisReply *r = redisCommand(n->ctx, "SCRIPT LOAD %s", lua);
	int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
	if (ok) {
		memcpy(sha, r->str, 40);
		sha[40] = '\0';
	}
	if (r)
		freeReplyObject(r);
	return ok ? 0 : -1;
}

/* Connect n to its host and port, and load the release script there; 0, or -1 with a message (n->ctx NULL). */
static int rnode_connect(struct rnode *n, char *err, size_t errlen)
{
	struct timeval tv = { 5, 0 };
	n->ctx = redisConnectWithTimeout(n->host, n->port, tv);
	if (!n->ctx || n->ctx->err) {
		snprintf(err, errlen, "redis %s:%d: %s", n->host, n->port, n->ctx ? n->ctx->errstr : "out of memory");
		goto fail;
	}
	fcntl(n->ctx->fd, F_SETFD, FD_CLOEXEC); /* hiredis does not set it */
	if (load_script(n, release_lua, n->release_sha) == 0 && load_script(n, acquire_lua, n->acquire_sha) == 0)
		return 0;
	snprintf(err, errlen, "redis %s:%d: SCRIPT LOAD failed", n->host, n->port);
fail:
	if (n->ctx)
		redisFree(n->ctx);
	n->ctx = NULL;
	return -1;
}

/* The index of the master host:port in c->nodes, added when new; -1 when full. */
static int cluster_node(struct rconn *c, const char *host, size_t hostlen, int port)
{
	for (int i = 0; i < c->nnodes; i++)
		if (c->nodes[i].port == port && strlen(c->nodes[i].host) == hostlen &&
		    memcmp(c->nodes[i].host, host, hostlen) == 0)
			return i;
	if (c->nnodes == RAW_MAX_NODES || hostlen >= sizeof c->nodes[0].host)
		return -1;
	struct rnode *n = &c->nodes[c->nnodes];
	memcpy(n->host, host, hostlen);
	n->host[hostlen] = '\0';
	n->port = port;
	return c->nnodes++;
}

/* The slot map, from CLUSTER SLOTS on the seed: [first, last, [host, port, …], replicas…] per range. */
static int cluster_map(struct rconn *c, char *err, size_t errlen)
{
	redisReply *r = redisCommand(c->seed.ctx, "CLUSTER SLOTS");
	int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0;
	for (size_t i = 0; ok && i < r->elements; i++) {
		redisReply *e = r->element[i];
		ok = e->type == REDIS_REPLY_ARRAY && e->elements >= 3 && e->element[2]->type == REDIS_REPLY_ARRAY &&
		     e->element[2]->elements >= 2 && e->element[2]->element[0]->type == REDIS_REPLY_STRING &&
		     e->element[2]->element[1]->type == REDIS_REPLY_INTEGER && c->nranges < RAW_MAX_RANGES;
		if (!ok)
			break;
		redisReply *m = e->element[2];
		int node = cluster_node(c, m->element[0]->str, m->element[0]->len, (int)m->element[1]->integer);
		ok = node >= 0;
		c->ranges[c->nranges++] = (struct rrange){ (int)e->element[0]->integer, (int)e->element[1]->integer,
			                                   node };
	}
	if (!ok)
		snprintf(err, errlen, "redis %s:%d: no usable CLUSTER SLOTS reply", c->seed.host, c->seed.port);
	if (r)
		freeReplyObject(r);
	return ok ? 0 : -1;
}

/* The master of `name`'s slot in a cluster; NULL with a message. */
static struct rnode *slot_master(struct rconn *c, const char *name, char *err, size_t errlen)
{
	redisReply *r = redisCommand(c->seed.ctx, "CLUSTER KEYSLOT bench-raw:{%s}:lock", name);
	long long slot = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
	if (r)
		freeReplyObject(r);
	struct rnode *n = NULL;
	for (int i = 0; i < c->nranges && !n; i++)
		if (slot >= c->ranges[i].first && slot <= c->ranges[i].last)
			n = &c->nodes[c->ranges[i].node];
	if (!n)
		snprintf(err, errlen, "redis cluster: no master for slot %lld", slot);
	else if (!n->ctx && rnode_connect(n, err, errlen) != 0)
		n = NULL;
	return n;
}

/*
 * Route `name`: its server (in a cluster, its slot's master) and its two
 * commands, formatted once; the connection, or NULL with a message.
 */
static struct rnode *route(struct rconn *c, const char *name, char *err, size_t errlen)
{
	if (c->at && strcmp(c->name, name) == 0)
		return c->at;
	struct rnode *n = c->cluster ? slot_master(c, name, err, errlen) : &c->seed;
	if (!n || strlen(name) >= sizeof c->name)
		return NULL;
	redisFreeCommand(c->acquire_cmd);
	redisFreeCommand(c->release_cmd);
	c->acquire_cmd = c->release_cmd = NULL;
	c->at = NULL;
	c->acquire_len = c->fencing ? redisFormatCommand(&c->acquire_cmd, "EVALSHA %s 2 bench-raw:{%s}:lock "
	                                                                  "bench-raw:{%s}:fence %s %d",
	                                                 n->acquire_sha, name, name, c->owner, RAW_TTL_MS)
	                            : redisFormatCommand(&c->acquire_cmd, "SET bench-raw:{%s}:lock %s NX PX %d", name,
	                                                 c->owner, RAW_TTL_MS);
	c->release_len = redisFormatCommand(&c->release_cmd, "EVALSHA %s 1 bench-raw:{%s}:lock %s", n->release_sha,
	                                    name, c->owner);
	if (c->acquire_len < 0 || c->release_len < 0) { /* what was formatted goes at the next route or close */
		snprintf(err, errlen, "redis: out of memory");
		return NULL;
	}
	snprintf(c->name, sizeof c->name, "%s", name);
	return c->at = n;
}

/* Write a formatted command and read its reply; NULL when the connection failed. */
static redisReply *run(struct rnode *n, const char *cmd, int len)
{
	void *reply = NULL;
	if (redisAppendFormattedCommand(n->ctx, cmd, (size_t)len) != REDIS_OK ||
	    redisGetReply(n->ctx, &reply) != REDIS_OK)
		return NULL;
	return reply;
}

static void *rconn_connect(const char *uri, int fencing, char *err, size_t errlen)
{
	struct rconn *c = calloc(1, sizeof *c);
	if (!c || bench_uri_host(uri, c->seed.host, sizeof c->seed.host, &c->seed.port, 6379) != 0) {
		snprintf(err, errlen, "redis: cannot read host and port from the URI");
		free(c);
		return NULL;
	}
	c->cluster = strncmp(uri, "redis+cluster:", 14) == 0;
	c->fencing = fencing;
	snprintf(c->owner, sizeof c->owner, "%d-%p", (int)getpid(), (void *)c);
	if (rnode_connect(&c->seed, err, errlen) != 0 || (c->cluster && cluster_map(c, err, errlen) != 0)) {
		rconn_close(c);
		return NULL;
	}
	return c;
}

static int io_failed(const struct rnode *n, char *err, size_t errlen)
{
	snprintf(err, errlen, "redis %s:%d: %s", n->host, n->port, n->ctx->err ? n->ctx->errstr : "unexpected reply");
	return -1;
}

static int rconn_acquire(void *p, const char *name, const _Atomic int *stop, char *err, size_t errlen)
{
	struct rconn *c = p;
	struct rnode *n = route(c, name, err, errlen);
	if (!n)
		return -1;
	for (;;) {
		redisReply *r = run(n, c->acquire_cmd, c->acquire_len);
		if (!r)
			return io_failed(n, err, errlen);
		int got = c->fencing ? r->type == REDIS_REPLY_INTEGER && r->integer > 0 : r->type == REDIS_REPLY_STATUS;
		int busy = r->type == REDIS_REPLY_NIL;
		freeReplyObject(r);
		if (got)
			return 1;
		if (!busy)
			return io_failed(n, err, errlen);
		if (atomic_load(stop))
			return 0;
	}
}

static int rconn_release(void *p, const char *name, char *err, size_t errlen)
{
	struct rconn *c = p;
	struct rnode *n = route(c, name, err, errlen);
	if (!n)
		return -1;
	redisReply *r = run(n, c->release_cmd, c->release_len);
	if (!r)
		return io_failed(n, err, errlen);
	int ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	if (!ok)
		snprintf(err, errlen, "redis: release found the key gone or taken");
	return ok ? 0 : -1;
}

static int rconn_ping(void *p)
{
	struct rconn *c = p;
	redisReply *r = redisCommand(c->seed.ctx, "PING");
	if (r)
		freeReplyObject(r);
	return r ? 0 : -1;
}

/* Cut every client connection but ours on one server; -1 when it does not answer. */
static int rnode_cut(struct rnode *n, long long killed[2])
{
	const char *types[2] = { "normal", "pubsub" };
	for (int i = 0; i < 2; i++) {
		redisReply *r = redisCommand(n->ctx, "CLIENT KILL TYPE %s SKIPME yes", types[i]);
		if (!r)
			return -1;
		int ok = r->type == REDIS_REPLY_INTEGER;
		killed[i] += ok ? r->integer : 0;
		freeReplyObject(r);
		if (!ok)
			return -1;
	}
	return 0;
}

/*
 * Redis cannot tell which connection holds a key: every client connection
 * but ours is cut, on the server or, in a cluster, on every master.
 */
static int rconn_cut(void *p, char *msg, size_t msglen)
{
	struct rconn *c = p;
	long long n[2] = { 0, 0 };
	int rc = 0;
	if (!c->cluster)
		rc = rnode_cut(&c->seed, n);
	for (int i = 0; i < c->nnodes && rc == 0; i++) {
		char err[200];
		struct rnode *m = &c->nodes[i];
		if (!m->ctx && rnode_connect(m, err, sizeof err) != 0)
			rc = -1;
		else
			rc = rnode_cut(m, n);
	}
	snprintf(msg, msglen, "CLIENT KILL%s: %lld normal and %lld pub/sub connections", c->cluster ? " on every master" : "",
	         n[0], n[1]);
	return rc;
}

/* Add the calls of INFO commandstats' "cmdstat_NAME:calls=N,..." lines to *calls, but INFO's and PING's. */
static int node_commands(struct rnode *n, uint64_t *calls)
{
	redisReply *r = redisCommand(n->ctx, "INFO commandstats");
	int ok = r && r->type == REDIS_REPLY_STRING;
	for (const char *line = ok ? r->str : NULL; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		char name[64];
		unsigned long long v;
		if (sscanf(line, "cmdstat_%63[^:]:calls=%llu", name, &v) == 2 && strcmp(name, "info") != 0 &&
		    strcmp(name, "ping") != 0)
			*calls += v;
	}
	if (r)
		freeReplyObject(r);
	return ok ? 0 : -1;
}

/*
 * Commands run on the server, or on every master of a cluster (its replicas
 * are left out: they replay the masters' writes), from INFO commandstats,
 * which counts the commands that scripts run too.  INFO (this count) and
 * PING (the round-trip probe) come only from dlock-bench: left out.
 */
static int rconn_commands(void *p, uint64_t *calls)
{
	struct rconn *c = p;
	char err[200];
	*calls = 0;
	if (!c->cluster)
		return node_commands(&c->seed, calls);
	for (int i = 0; i < c->nnodes; i++) /* first every connection, whose SCRIPT LOADs come before any count */
		if (!c->nodes[i].ctx && rnode_connect(&c->nodes[i], err, sizeof err) != 0)
			return -1;
	for (int i = 0; i < c->nnodes; i++)
		if (node_commands(&c->nodes[i], calls) != 0)
			return -1;
	return 0;
}

static const char *const schemes[] = { "redis", "redis+cluster", NULL };

const struct bench_raw bench_raw_redis = {
	.name = "redis",
	.schemes = schemes,
	.what = "SET key owner NX PX (with fencing: a script, that SET and INCR of a counter), compare-and-delete "
	        "script, by EVALSHA, each command formatted once per name; in a cluster, on the master of the key's slot",
	.host_list = "redis+cluster",
	.connect = rconn_connect,
	.acquire = rconn_acquire,
	.release = rconn_release,
	.ping = rconn_ping,
	.cut = rconn_cut,
	.close = rconn_close,
	.commands = rconn_commands,
};
