/*
 * RedLock: one lock over several independent Redis instances (a URI that
 * lists several hosts).  The lock is held while a majority of instances
 * hold its key with our owner value.
 *
 * Every request goes to all instances at once: it is written to each
 * instance's connection first, and only then are the replies read, so the
 * slowest instance, not the sum of them, sets the time a round takes.
 * Acquire succeeds with a majority and a remaining validity
 * (lease - elapsed - drift) above zero; otherwise it removes its key from
 * every instance (owner-only) and tries again after a random delay, so
 * that competing clients do not keep splitting the votes.
 *
 * Waiters poll (capabilities say wakeup POLL).  There are no fencing
 * tokens: counters on independent instances are not ordered.
 */
#include <string.h>

#include "redis_key.h"
#include "redis_lock.h"


/* One request sent to every instance and its replies. */
struct fanout {
	struct redis_conn *ctx[REDIS_REDLOCK_MAX];
	redisReply *reply[REDIS_REDLOCK_MAX]; /* NULL: none (unreachable, lost, or an error reply) */
	size_t answered;                      /* instances that gave a reply that is not an error */
	dlock_error err;                      /* the last failure, for the message */
};

/* A script (id >= 0) or a plain command (id < 0) with `nkeys` keys first in `a`. */
struct request {
	int id;
	int nkeys;
	const struct redis_args *a;
};

static int append_one(struct redis_client *c, struct redis_conn *ctx, const struct request *rq)
{
	if (rq->id >= 0)
		return dlock_redis_script_append(ctx, &c->scripts, (enum redis_script_id)rq->id, rq->nkeys, rq->a);
	return dlock_redis_append_argv(ctx, rq->a->argc, rq->a->argv, rq->a->len);
}

static redisReply *read_one(struct redis_conn *ctx, const struct request *rq)
{
	void *reply = NULL;
	if (rq->id >= 0)
		return dlock_redis_script_read(ctx, (enum redis_script_id)rq->id, rq->nkeys, rq->a);
	return dlock_redis_get_reply(ctx, &reply) == REDIS_OK ? reply : NULL;
}

static void fanout_run(struct redis_client *c, struct fanout *f, const struct request *rq)
{
	*f = (struct fanout){ .answered = 0 };
	for (size_t i = 0; i < c->npools; i++) {
		if (dlock_redis_pool_get(&c->pools[i], &f->ctx[i], &f->err) != DLOCK_OK)
			f->ctx[i] = NULL;
		else if (append_one(c, f->ctx[i], rq) != REDIS_OK)
			dlock_redis_io_error(f->ctx[i], &c->pools[i].ep, &f->err);
	}
	for (size_t i = 0; i < c->npools; i++)
		if (f->ctx[i] && !f->ctx[i]->err)
			dlock_redis_flush(f->ctx[i]); /* a failure stays in ctx->err */
	for (size_t i = 0; i < c->npools; i++) {
		struct redis_conn *ctx = f->ctx[i];
		if (!ctx)
			continue;
		redisReply *r = ctx->err ? NULL : read_one(ctx, rq);
		if (!r)
			dlock_redis_io_error(ctx, &c->pools[i].ep, &f->err);
		else if (r->type == REDIS_REPLY_ERROR)
			dlock_redis_reply_error(r, &c->pools[i].ep, "RedLock request", &f->err);
		if (r && r->type == REDIS_REPLY_ERROR) {
			freeReplyObject(r);
			r = NULL;
		}
		f->reply[i] = r;
		f->answered += r != NULL;
		dlock_redis_pool_put(&c->pools[i], ctx);
		f->ctx[i] = NULL;
	}
}

static void fanout_free(struct redis_client *c, struct fanout *f)
{
	for (size_t i = 0; i < c->npools; i++) {
		freeReplyObject(f->reply[i]);
		f->reply[i] = NULL;
	}
}

/* Instances whose reply is the integer `v`. */
static size_t count_int(const struct redis_client *c, const struct fanout *f, long long v)
{
	size_t n = 0;
	for (size_t i = 0; i < c->npools; i++)
		n += f->reply[i] && f->reply[i]->type == REDIS_REPLY_INTEGER && f->reply[i]->integer == v;
	return n;
}

/* Why a majority was not reached: not enough instances answered, or they were held by others. */
static dlock_status no_majority(struct redis_client *c, const struct fanout *f, dlock_error *err)
{
	if (f->answered < c->quorum)
		return dlock_error_set(err, DLOCK_ECONNECT, "RedLock: %zu of %zu instances answered, %zu needed (%s)",
		                       f->answered, c->npools, c->quorum, f->err.msg);
	return dlock_error_set(err, DLOCK_EBUSY, "RedLock: the lock is held by another owner");
}

/* ------------------------------------------------------------ release */

static void release_all(struct redis_client *c, struct redis_lock *lk, struct fanout *f)
{
	struct redis_args a = { 0 };
	dlock_redis_arg_key(&a, c, lk, "lock", NULL);
	dlock_redis_arg(&a, lk->owner);
	dlock_redis_arg_key(&a, c, lk, "released", NULL);
	dlock_redis_arg(&a, c->publish);
	struct request rq = { .id = REDIS_SCRIPT_RELEASE, .nkeys = 1, .a = &a };
	fanout_run(c, f, &rq);
}

static dlock_status redlock_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err)
{
	struct fanout f;
	release_all(c, lk, &f);
	size_t released = count_int(c, &f, 1);
	dlock_status st = DLOCK_OK;
	if (released < c->quorum && released + (c->npools - f.answered) >= c->quorum)
		st = dlock_error_set(err, DLOCK_ECONNECT, "RedLock: released on %zu of %zu instances, others unreachable (%s)",
		                     released, c->npools, f.err.msg);
	else if (released < c->quorum)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "RedLock: the lock was ours on %zu of %zu instances only",
		                     released, c->npools);
	fanout_free(c, &f);
	lk->owner[0] = '\0';
	return st;
}

/* ------------------------------------------------------------ acquire */

static int64_t drift_ns(int64_t lease_ms)
{
	return lease_ms * REDIS_NS_PER_MS / 100 + 2 * REDIS_NS_PER_MS;
}

/* One round: OK with a majority in time; else everything undone and EBUSY or ECONNECT. */
static dlock_status try_round(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                              dlock_acquired *out, dlock_error *err)
{
	struct redis_args a;
	char lease[24], value[REDIS_VALUE_MAX];
	struct fanout f;
	dlock_status st = dlock_redis_set_nx(c, lk, lease_ms, lease, value, &a, err);
	if (st != DLOCK_OK)
		return st;
	struct request rq = { .id = -1, .nkeys = 1, .a = &a };

	int64_t start = dlock_monotonic_ns();
	fanout_run(c, &f, &rq);
	size_t won = 0;
	for (size_t i = 0; i < c->npools; i++)
		won += f.reply[i] && f.reply[i]->type == REDIS_REPLY_STATUS && strcmp(f.reply[i]->str, "OK") == 0;
	int64_t validity = lease_ms * REDIS_NS_PER_MS - (dlock_monotonic_ns() - start) - drift_ns(lease_ms);
	if (won >= c->quorum && validity > 0) {
		fanout_free(c, &f);
		*out = (dlock_acquired){ .token = 0, .sent_ns = start };
		return DLOCK_OK;
	}
	st = won >= c->quorum ? dlock_error_set(err, DLOCK_EBUSY, "RedLock: majority reached too late (lease too short)")
	                      : no_majority(c, &f, err);
	fanout_free(c, &f);
	/* Every instance, also those whose reply was lost: a lost reply may hide a SET that succeeded. */
	release_all(c, lk, &f);
	fanout_free(c, &f);
	lk->owner[0] = '\0';
	return st;
}

/*
 * One round for the core's waiting loop: busy when another owner holds a
 * majority; no majority reachable is transient (the core tries again
 * within the deadline, and that failure is the answer if it passes).
 */
static dlock_status redlock_try_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                        dlock_wait *w, dlock_retry *retry, dlock_acquired *out, dlock_error *err)
{
	(void)w; /* no wake-up: waiters poll with the core's backoff */
	dlock_status st = try_round(c, lk, lease_ms, out, err);
	retry->transient = st == DLOCK_ECONNECT;
	return st;
}

/* ------------------------------------------------------------ extend, check */

static dlock_status redlock_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                        dlock_error *err)
{
	struct redis_args a = { 0 };
	char lease[24];
	struct fanout f;
	dlock_redis_arg_key(&a, c, lk, "lock", NULL);
	dlock_redis_arg(&a, lk->owner);
	dlock_redis_argi(&a, lease, lease_ms);
	struct request rq = { .id = REDIS_SCRIPT_EXTEND, .nkeys = 1, .a = &a };
	int64_t start = dlock_monotonic_ns();
	fanout_run(c, &f, &rq);
	size_t extended = count_int(c, &f, 1), lost = count_int(c, &f, 0);
	int64_t validity = lease_ms * REDIS_NS_PER_MS - (dlock_monotonic_ns() - start) - drift_ns(lease_ms);
	dlock_status st = DLOCK_OK;
	if (lost > c->npools - c->quorum)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "RedLock: the lock is no longer ours on %zu of %zu instances",
		                     lost, c->npools);
	else if (extended < c->quorum || validity <= 0)
		st = dlock_error_set(err, DLOCK_ECONNECT, "RedLock: extended on %zu of %zu instances, %zu needed (%s)",
		                     extended, c->npools, c->quorum, f.err.msg);
	fanout_free(c, &f);
	return st;
}

static dlock_status redlock_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err)
{
	struct redis_args a = { 0 };
	struct fanout f;
	dlock_redis_arg(&a, "GET");
	dlock_redis_arg_key(&a, c, lk, "lock", NULL);
	struct request rq = { .id = -1, .nkeys = 1, .a = &a };
	fanout_run(c, &f, &rq);
	size_t ours = 0;
	for (size_t i = 0; i < c->npools; i++)
		ours += f.reply[i] && f.reply[i]->type == REDIS_REPLY_STRING &&
		        dlock_redis_owns(f.reply[i]->str, f.reply[i]->len, lk->owner);
	size_t others = f.answered - ours;
	dlock_status st = DLOCK_OK;
	if (others > c->npools - c->quorum)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "RedLock: the lock is no longer ours on %zu of %zu instances",
		                     others, c->npools);
	else if (ours < c->quorum)
		st = dlock_error_set(err, DLOCK_EUNCERTAIN, "RedLock: ours on %zu of %zu instances, others unreachable (%s)",
		                     ours, c->npools, f.err.msg);
	fanout_free(c, &f);
	return st;
}

const struct redis_algorithm dlock_redis_redlock = {
	.name = "redlock",
	.fencing = DLOCK_FENCING_NONE, /* independent servers give no order */
	.wakeup = DLOCK_WAKEUP_POLL,
	.try_acquire = redlock_try_acquire,
	.release = redlock_release,
	.extend = redlock_extend,
	.check = redlock_check,
};
