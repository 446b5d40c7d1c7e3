/*
 * Where a lock's commands go, and one command sent there: the client's one
 * instance, or the master of the lock's slot in a Redis Cluster
 * (redis_cluster.c), following the cluster's redirections.
 *
 * A command for a lock in a cluster:
 *   - MOVED: the slot is served elsewhere now; sent again there (the map is
 *     updated), up to REDIS_REDIRECTS_MAX times.
 *   - ASK: the slot is being migrated and our keys are already on the
 *     target: sent there once, after ASKING.
 *   - TRYAGAIN (a script whose keys are split between the two nodes of a
 *     migration, for the moment between two MIGRATE batches) and
 *     CLUSTERDOWN (no master for some slot: a failover under way): the
 *     slot settles soon.  An acquisition's attempt does not wait for it:
 *     DLOCK_ECONNECT at once, which the acquisition's own loop (the core's
 *     around try_acquire(), fair=1's in acquire()) treats as transient and
 *     waits out on its dlock_wait, so up to its deadline and no longer than
 *     its cancellation.  Release, extend and check get no dlock_wait from
 *     the driver contract, so they see neither: they send again after 5,
 *     10, 20... ms, for up to io_timeout (at most REDIS_SETTLE_MS) in all,
 *     then DLOCK_ECONNECT.
 *   - A connection that fails: the map is looked at again before the next
 *     command (a killed master's replica takes its slots over).
 * A single-server client that receives MOVED or ASK talks to a cluster
 * node: DLOCK_ESERVER, naming the cluster scheme.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "redis_cluster.h"
#include "redis_route.h"

#define REDIS_REDIRECTS_MAX 16
#define REDIS_SETTLE_MS 1000
#define REDIS_SETTLE_FIRST_MS 5
#define REDIS_SETTLE_STEP_MAX_MS 100

dlock_status dlock_redis_route(struct redis_client *c, const struct redis_lock *lk, struct redis_route *rt,
                               dlock_error *err)
{
	if (!c->cluster) {
		*rt = (struct redis_route){ .pool = &c->pools[0], .waits = &c->waits, .sub = c->sub };
		return DLOCK_OK;
	}
	struct redis_node *n = NULL;
	dlock_status st = dlock_redis_cluster_node(c->cluster, lk->slot, &n, err);
	if (st != DLOCK_OK)
		return st;
	*rt = (struct redis_route){ .pool = &n->pool, .waits = &n->waits, .node = n };
	return DLOCK_OK;
}

struct redis_sub *dlock_redis_route_sub(struct redis_client *c, const struct redis_route *rt)
{
	return rt->node ? dlock_redis_cluster_sub(c->cluster, rt->node) : rt->sub;
}

int dlock_redis_slot_elsewhere(struct redis_client *c, const redisReply *r)
{
	int elsewhere = dlock_redis_is_redirection(r);
	if (elsewhere && c->cluster)
		dlock_redis_cluster_stale(c->cluster);
	return elsewhere;
}

void dlock_redis_route_failed(struct redis_client *c)
{
	if (c->cluster)
		dlock_redis_cluster_stale(c->cluster);
}

dlock_status dlock_redis_refusal(const struct redis_endpoint *ep, const redisReply *r, const char *what,
                                 dlock_error *err)
{
	if (dlock_redis_is_error(r, "MOVED") || dlock_redis_is_error(r, "ASK"))
		return dlock_error_set(err, DLOCK_ESERVER,
		                       "redis %s: the server is a Redis Cluster node and the lock's slot is elsewhere (%s): "
		                       "use redis+cluster:// (rediss+cluster:// over TLS)",
		                       ep->label, r->str);
	return dlock_redis_reply_error(r, ep, what, err);
}

/* The address of a MOVED or ASK error ("MOVED 3999 127.0.0.1:6381"): its start and length. */
static const char *redirect_addr(const redisReply *r, size_t *len)
{
	const char *slot = memchr(r->str, ' ', (size_t)r->len);
	const char *addr = slot ? memchr(slot + 1, ' ', (size_t)(r->str + r->len - slot - 1)) : NULL;
	if (!addr)
		return NULL;
	addr++;
	*len = (size_t)(r->str + r->len - addr);
	return addr;
}

/* A call's wait for its slot to settle (TRYAGAIN, CLUSTERDOWN). */
struct settle {
	int waits;        /* 0: an acquisition's attempt, which fails at once instead */
	int64_t until_ns; /* when waiting gives up: io_timeout, at most REDIS_SETTLE_MS, after the first refusal */
	int64_t step_ms;  /* the next sleep */
};

static void settle_sleep(int64_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * REDIS_NS_PER_MS };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/*
 * What to do after error reply `r` from `rt`: 0, it is the answer; 1, send
 * again (to rt, now pointing where the cluster said; *asking: after
 * ASKING); -1, give up with *st and `err` set.  `s`: the wait for TRYAGAIN
 * and CLUSTERDOWN so far.
 */
static int redirected(struct redis_client *c, const struct redis_lock *lk, const redisReply *r,
                      struct redis_route *rt, int *asking, struct settle *s, dlock_status *st, dlock_error *err)
{
	if (!dlock_redis_is_redirection(r))
		return 0;
	int moved = dlock_redis_is_error(r, "MOVED"), ask = dlock_redis_is_error(r, "ASK");
	if (!c->cluster) {
		if (!moved && !ask)
			return 0;
		*st = dlock_redis_refusal(&rt->pool->ep, r, "", err);
		return -1;
	}
	*asking = 0;
	if (moved || ask) {
		size_t len = 0;
		const char *addr = redirect_addr(r, &len);
		struct redis_node *n = NULL;
		if (!addr) {
			*st = dlock_redis_reply_error(r, &rt->pool->ep, "a redirection", err);
			return -1;
		}
		if ((*st = dlock_redis_cluster_redirect(c->cluster, lk->slot, moved, addr, len, &n, err)) != DLOCK_OK)
			return -1;
		*rt = (struct redis_route){ .pool = &n->pool, .waits = &n->waits, .node = n };
		*asking = ask;
		return 1;
	}
	/* TRYAGAIN, CLUSTERDOWN: the slot settles soon; the map is looked at again before the next command. */
	dlock_redis_cluster_stale(c->cluster);
	int64_t now = dlock_monotonic_ns();
	if (s->waits && !s->until_ns) {
		int64_t io = c->cfg.io_timeout_ms;
		s->until_ns = now + (io > 0 && io < REDIS_SETTLE_MS ? io : REDIS_SETTLE_MS) * REDIS_NS_PER_MS;
	}
	int64_t left_ms = s->waits ? (s->until_ns - now) / REDIS_NS_PER_MS : 0;
	if (left_ms <= 0) {
		*st = dlock_error_set(err, DLOCK_ECONNECT, "redis %s: the lock's slot is not served now (%s)",
		                      rt->pool->ep.label, r->str);
		return -1;
	}
	settle_sleep(s->step_ms < left_ms ? s->step_ms : left_ms);
	s->step_ms = s->step_ms * 2 < REDIS_SETTLE_STEP_MAX_MS ? s->step_ms * 2 : REDIS_SETTLE_STEP_MAX_MS;
	*st = dlock_redis_route(c, lk, rt, err);
	return *st == DLOCK_OK ? 1 : -1;
}

/* ASKING, then the command, on `ctx`: the target of an ASK answers it for a slot it is importing. */
static int send_asking(struct redis_conn *ctx)
{
	const char *argv[1] = { "ASKING" };
	size_t len[1] = { 6 };
	redisReply *r = dlock_redis_command_argv(ctx, 1, argv, len);
	int ok = r && r->type == REDIS_REPLY_STATUS;
	freeReplyObject(r);
	return ok;
}

void dlock_redis_wait_cmd(const struct redis_client *c, struct redis_args *a, char n[24], char ms[24])
{
	*a = (struct redis_args){ 0 };
	dlock_redis_arg(a, "WAIT");
	dlock_redis_argi(a, n, c->replicas);
	dlock_redis_argi(a, ms, c->replicas_timeout_ms);
}

long long dlock_redis_wait_answer(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

/* WAIT N replicas_timeout on `ctx`: the number of replicas that have its writes, -1 without an answer. */
static long long wait_replicas(struct redis_client *c, struct redis_conn *ctx)
{
	struct redis_args wa;
	char n[24], ms[24];
	dlock_redis_wait_cmd(c, &wa, n, ms);
	redisReply *w = dlock_redis_command(ctx, &wa);
	long long acked = dlock_redis_wait_answer(w);
	freeReplyObject(w);
	return acked;
}

dlock_status dlock_redis_call(struct redis_client *c, const struct redis_lock *lk, const struct redis_call *call,
                              long long *acked, redisReply **out, int *maybe_ran, dlock_error *err)
{
	struct redis_route rt;
	int asking = 0;
	struct settle settle = { .waits = !call->attempt, .until_ns = 0, .step_ms = REDIS_SETTLE_FIRST_MS };
	*out = NULL;
	*maybe_ran = 0;
	dlock_status st = dlock_redis_route(c, lk, &rt, err);
	for (int hop = 0; st == DLOCK_OK; hop++) {
		struct redis_conn *ctx = NULL;
		if ((st = dlock_redis_pool_get(rt.pool, &ctx, err)) != DLOCK_OK) {
			dlock_redis_route_failed(c);
			break;
		}
		*maybe_ran = 1;
		redisReply *r = NULL;
		/* After ASKING, one command only: a script goes as EVAL, since the EVAL that follows a
		 * NOSCRIPT (the target may never have seen it) would go without ASKING and be sent back. */
		static const struct redis_scripts by_eval;
		if (!asking || send_asking(ctx))
			r = call->id == REDIS_SCRIPT_COUNT
			            ? dlock_redis_command(ctx, call->a)
			            : dlock_redis_script_run(ctx, asking ? &by_eval : &c->scripts, call->id, call->nkeys,
			                                     call->a);
		if (!r) {
			st = dlock_redis_io_error(ctx, &rt.pool->ep, err);
			dlock_redis_pool_put(rt.pool, ctx);
			dlock_redis_route_failed(c);
			break;
		}
		if (r->type != REDIS_REPLY_ERROR && call->wrote && c->replicas > 0 && call->wrote(r))
			*acked = wait_replicas(c, ctx);
		dlock_redis_pool_put(rt.pool, ctx);
		if (r->type != REDIS_REPLY_ERROR) {
			*out = r;
			break;
		}
		if (dlock_redis_is_redirection(r))
			*maybe_ran = 0; /* refused before it ran, as every earlier hop was */
		int again = hop + 1 < REDIS_REDIRECTS_MAX ? redirected(c, lk, r, &rt, &asking, &settle, &st, err) : 0;
		if (again == 0)
			st = dlock_redis_reply_error(r, &rt.pool->ep, call->what, err);
		freeReplyObject(r);
		if (again <= 0)
			break;
	}
	return st;
}
