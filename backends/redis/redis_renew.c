/*
 * Redis backend: the renewals of many held locks at once (the driver's
 * extend_many), for the core's renewal thread.
 *
 * The locks are grouped by the server that holds them (one server, or a
 * cluster's masters: each group is one node, so no script ever spans
 * nodes), and each group goes out as one pipeline of the extend scripts on
 * one pooled connection: each lock's own script (a reader's renews its
 * entry among the readers, anyone else the key), written together, then
 * the replies read in order.  The core bounds a batch (DLOCK_RENEW_BATCH_MAX),
 * so no pipeline holds the server for long.
 *
 * Whatever a pipeline cannot settle is renewed alone, by the algorithm's
 * own extend(), which knows the rest: an error reply (NOSCRIPT: the server
 * lost the script; MOVED, ASK, TRYAGAIN: a cluster's slot moving), a
 * connection that fails midway, and the algorithms that do more than one
 * command per renewal (RedLock's majority, replicas=N's WAIT).
 *
 * Threads: the core's renewal thread only.  No allocation: the core's
 * batch bound sizes every array.
 */
#include <inttypes.h>
#include <stdio.h>

#include "redis_lock.h"
#include "redis_renew.h"
#include "redis_route.h"

/* What happened to each lock of the batch. */
enum renewal { PENDING, ALONE, DONE };

/*
 * One pipeline: the locks of `state` that are PENDING and go to `pool`, on
 * one connection.  Each one answered is DONE (out[i] set); the rest are left
 * ALONE.
 */
static void pipeline(struct redis_client *c, struct redis_pool *pool, struct redis_pool *const *pools,
                     struct redis_lock *const *lks, const int64_t *lease_ms, size_t n, enum renewal *state,
                     dlock_status *out, dlock_error *err)
{
	size_t sent[DLOCK_RENEW_BATCH_MAX], nsent = 0;
	char lease[DLOCK_RENEW_BATCH_MAX][24];
	struct redis_conn *ctx = NULL;
	dlock_error ignored = { "" };
	if (dlock_redis_pool_get(pool, &ctx, &ignored) != DLOCK_OK)
		goto alone;
	for (size_t i = 0; i < n; i++) {
		struct redis_args a;
		int nkeys;
		if (state[i] != PENDING || pools[i] != pool)
			continue;
		/* The lock's own extend script: a reader's renews its entry among the readers. */
		enum redis_script_id id = dlock_redis_extend_args(c, lks[i], lease_ms[i], lease[i], &a, &nkeys);
		if (dlock_redis_script_append(ctx, &c->scripts, id, nkeys, &a) != REDIS_OK)
			break;
		sent[nsent++] = i;
	}
	for (size_t k = 0; k < nsent; k++) {
		void *reply = NULL;
		if (dlock_redis_get_reply(ctx, &reply) != REDIS_OK)
			break; /* the rest: alone (an extend sent twice is one extend) */
		redisReply *r = reply;
		size_t i = sent[k];
		if (r->type == REDIS_REPLY_INTEGER) {
			state[i] = DONE;
			out[i] = r->integer == 1 ? DLOCK_OK
			                         : dlock_error_set(err, DLOCK_ENOTHELD,
			                                           "redis %s: extend: the lock is no longer ours (expired or taken)",
			                                           c->label);
		}
		freeReplyObject(r);
	}
alone:
	dlock_redis_pool_put(pool, ctx);
	for (size_t i = 0; i < n; i++)
		if (state[i] == PENDING && pools[i] == pool)
			state[i] = ALONE;
}

void dlock_redis_extend_many(struct redis_client *c, struct redis_lock *const *lks, const int64_t *lease_ms, size_t n,
                             dlock_status *out, dlock_error *err)
{
	enum renewal state[DLOCK_RENEW_BATCH_MAX];
	struct redis_pool *pools[DLOCK_RENEW_BATCH_MAX];
	/* One command per renewal, on one server: what a pipeline can carry. */
	int one_command = c->algo != &dlock_redis_redlock && c->replicas == 0;
	if (n > DLOCK_RENEW_BATCH_MAX)
		n = DLOCK_RENEW_BATCH_MAX;
	for (size_t i = 0; i < n; i++) {
		struct redis_route rt;
		dlock_error ignored = { "" };
		state[i] = ALONE;
		pools[i] = NULL;
		if (one_command && lks[i]->owner[0] && lease_ms[i] > 0 &&
		    dlock_redis_route(c, lks[i], &rt, &ignored) == DLOCK_OK) {
			state[i] = PENDING;
			pools[i] = rt.pool;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (state[i] == PENDING)
			pipeline(c, pools[i], pools, lks, lease_ms, n, state, out, err);
	for (size_t i = 0; i < n; i++)
		if (state[i] == ALONE)
			out[i] = c->algo->extend(c, lks[i], lease_ms[i], err);
}
