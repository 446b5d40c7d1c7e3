/*
 * Algorithm "single", one Redis instance: one attempt at a time (the
 * core's loop waits), release, extend and check; and the lock values,
 * attempts and releases that the fair algorithm (redis_fair.c) builds on.
 *
 * Acquire costs one round trip when the lock is free: the acquire script,
 * or a plain SET NX PX when the caller wants no fencing token.
 * When it is held, the waiter watches the lock's channel through the
 * client's subscriber, and the core tries again: once the SUBSCRIBE is
 * confirmed (a release published before that would otherwise be missed),
 * on every release message, and when the holder's TTL, returned by the
 * failed attempt, runs out.  Without a subscription (refused, or the
 * subscriber cannot reach the server) the core polls with its backoff.
 * The key owner's release deletes the key and publishes, or, on a client
 * whose waiters queue (fair=1), runs the handoff script, which grants the
 * lock to the first queued waiter.  A semaphore's permits run their own
 * scripts (redis_sem.c), a reader its own (redis_scripts.c).
 *
 * Threads: a client is shared, a handle is used by one acquisition at a
 * time.  Errors: statuses and messages of redis_conn.c, through
 * redis_route.c.
 */
#include <stdio.h>
#include <string.h>

#include "redis_key.h"
#include "redis_lock.h"
#include "redis_route.h"
#include "redis_sem.h"

/* With no TTL to wait for (a key without expiry), look again at least this often. */
#define NO_TTL_RECHECK_MS 1000

/* ------------------------------------------------------------ lock values */

dlock_status dlock_redis_new_owner(struct redis_lock *lk, dlock_error *err)
{
	unsigned char raw[REDIS_OWNER_BYTES];
	if (dlock_random_bytes(raw, sizeof raw) != DLOCK_OK)
		return dlock_error_set(err, DLOCK_EIO, "redis: cannot read random bytes for the owner value");
	dlock_hex(raw, sizeof raw, lk->owner);
	return DLOCK_OK;
}

dlock_status dlock_redis_set_nx(const struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, char lease[24],
                               char value[REDIS_VALUE_MAX], struct redis_args *a, dlock_error *err)
{
	dlock_status st = dlock_redis_new_owner(lk, err);
	if (st != DLOCK_OK)
		return st;
	size_t reclen = 0;
	const char *rec = dlock_redis_record_of(c, lk, &reclen);
	int n = snprintf(value, REDIS_VALUE_MAX, "%s 0 -1 %.*s", lk->owner, (int)reclen, rec);
	*a = (struct redis_args){ 0 };
	dlock_redis_arg(a, "SET");
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_argn(a, value, n > 0 && n < REDIS_VALUE_MAX ? (size_t)n : strlen(value));
	dlock_redis_arg(a, "NX");
	dlock_redis_arg(a, "PX");
	dlock_redis_argi(a, lease, lease_ms);
	return DLOCK_OK;
}

const char *dlock_redis_record_of(const struct redis_client *c, const struct redis_lock *lk, size_t *len)
{
	int rw = lk->kind == DLOCK_KIND_RWLOCK;
	*len = rw ? c->rw_recordlen : c->recordlen;
	return rw ? c->rw_record : c->record;
}

int dlock_redis_owns(const char *v, size_t len, const char *owner)
{
	size_t n = strlen(owner);
	return n > 0 && len >= n && memcmp(v, owner, n) == 0 && (len == n || v[n] == ' ');
}

/* ------------------------------------------------------------ one call */

/*
 * Run a script on lk's server, or the command `a` itself when id is
 * REDIS_NOT_A_SCRIPT (dlock_redis_call: routed, redirections followed).  With
 * replicas=N and `wrote` given: when wrote(reply) says the command wrote
 * the lock, WAIT N replicas_timeout follows on the same connection (WAIT
 * counts the replicas that have that connection's writes; it cannot run
 * inside a script), and *acked is its answer (-1 when it could not be
 * asked: the connection failed).  `attempt`: an acquisition's attempt,
 * which does not wait for a cluster's slot to settle (struct redis_call).
 */
static dlock_status run_script_waiting(struct redis_client *c, const struct redis_lock *lk, enum redis_script_id id,
                                       int nkeys, const struct redis_args *a, const char *what, int attempt,
                                       int (*wrote)(const redisReply *), long long *acked, redisReply **out,
                                       int *maybe_ran, dlock_error *err)
{
	struct redis_call call = { .id = id, .nkeys = nkeys, .a = a, .what = what, .wrote = wrote, .attempt = attempt };
	return dlock_redis_call(c, lk, &call, acked, out, maybe_ran, err);
}

static dlock_status run_script(struct redis_client *c, const struct redis_lock *lk, enum redis_script_id id,
                               int nkeys, const struct redis_args *a, const char *what, int attempt,
                               redisReply **out, int *maybe_ran, dlock_error *err)
{
	return run_script_waiting(c, lk, id, nkeys, a, what, attempt, NULL, NULL, out, maybe_ran, err);
}

/* Did the reply say the lock was written?  (SET NX: OK; the acquire script: {1, token}; extend: 1.) */
static int set_wrote(const redisReply *r)
{
	return r->type == REDIS_REPLY_STATUS;
}

static int acquire_wrote(const redisReply *r)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
	       r->element[0]->integer == 1;
}

static int extend_wrote(const redisReply *r)
{
	return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

/* Fewer replicas than asked confirmed the write: the message, and the status `st`. */
static dlock_status too_few_replicas(struct redis_client *c, long long acked, dlock_status st, const char *what,
                                     dlock_error *err)
{
	if (acked < 0)
		return dlock_error_set(err, st, "redis %s: %s: WAIT for replicas got no answer (replicas=%d)", c->label,
		                       what, c->replicas);
	return dlock_error_set(err, st, "redis %s: %s: %lld of %d replicas confirmed the lock within %lld ms (replicas=%d)",
	                       c->label, what, acked, c->replicas, (long long)c->replicas_timeout_ms,
	                       c->replicas);
}

/* A script whose effect does not change when it runs twice: one more try after a connection failure. */
dlock_status dlock_redis_run_idempotent(struct redis_client *c, const struct redis_lock *lk, enum redis_script_id id,
                                        int nkeys, const struct redis_args *a, const char *what, int attempt,
                                        redisReply **out, dlock_error *err)
{
	int maybe_ran;
	dlock_status st = run_script(c, lk, id, nkeys, a, what, attempt, out, &maybe_ran, err);
	if (st == DLOCK_ECONNECT && maybe_ran)
		st = run_script(c, lk, id, nkeys, a, what, attempt, out, &maybe_ran, err);
	return st;
}

/* A reader's release: leave the readers; the last one out frees the key and publishes. */
static enum redis_script_id read_release_script(const struct redis_client *c, const struct redis_lock *lk,
                                                struct redis_args *a, int *nkeys)
{
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_arg_key(a, c, lk, "readers", NULL);
	dlock_redis_arg_key(a, c, lk, "holders", NULL);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_arg_key(a, c, lk, "released", NULL);
	dlock_redis_arg(a, c->publish);
	*nkeys = 3;
	return REDIS_SCRIPT_READ_RELEASE;
}

/* The key owner's release where nobody queues: delete the key if ours and publish on the lock's channel. */
static enum redis_script_id owner_release_script(const struct redis_client *c, const struct redis_lock *lk,
                                                 struct redis_args *a, int *nkeys)
{
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_arg_key(a, c, lk, "released", NULL);
	dlock_redis_arg(a, c->publish);
	*nkeys = 1;
	return REDIS_SCRIPT_RELEASE;
}

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
/* How long the handoff script remembers a withdrawal (the script's ARGV[5]). */
#define WITHDRAWN_TTL STRINGIFY(REDIS_FAIR_QUEUE_TTL_MS)

/* The handoff script: release to the next waiter (or withdraw from the queue). */
enum redis_script_id dlock_redis_handoff_args(const struct redis_client *c, const struct redis_lock *lk,
                                              struct redis_args *a, int *nkeys)
{
	*a = (struct redis_args){ 0 };
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_arg_key(a, c, lk, "queue", NULL);
	dlock_redis_arg_key(a, c, lk, "waiters", NULL);
	dlock_redis_arg_key(a, c, lk, "fence", NULL);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_arg_key(a, c, lk, "released", NULL);
	dlock_redis_arg_key(a, c, lk, "grant:", lk->owner);
	dlock_redis_arg(a, c->publish);
	dlock_redis_arg(a, WITHDRAWN_TTL);
	dlock_redis_arg_key(a, c, lk, "gone:", lk->owner);
	*nkeys = 4;
	return REDIS_SCRIPT_HANDOFF;
}

void dlock_redis_release_cmd(const struct redis_client *c, const struct redis_lock *lk, struct redis_cmd *cmd)
{
	cmd->a = (struct redis_args){ 0 };
	cmd->id = lk->kind == DLOCK_KIND_SEMAPHORE ? dlock_redis_sem_release_args(c, lk, cmd->nums[0], &cmd->a, &cmd->nkeys)
	          : lk->shared                     ? read_release_script(c, lk, &cmd->a, &cmd->nkeys)
	          : c->fair                        ? dlock_redis_handoff_args(c, lk, &cmd->a, &cmd->nkeys)
	                                           : owner_release_script(c, lk, &cmd->a, &cmd->nkeys);
}

/* The owner-only release script for lk->owner, run. */
static dlock_status release_args_run(struct redis_client *c, struct redis_lock *lk, redisReply **out,
                                     dlock_error *err)
{
	struct redis_cmd cmd;
	dlock_redis_release_cmd(c, lk, &cmd);
	return dlock_redis_run_idempotent(c, lk, cmd.id, cmd.nkeys, &cmd.a, "release", 0, out, err);
}

/* ------------------------------------------------------------ acquire */

/*
 * A reply that never came may hide a SET that succeeded: remove what may
 * be ours (owner-only, so nothing else is touched) rather than leave it to
 * its TTL, which would block every other owner until then.
 */
void dlock_redis_undo_failed(struct redis_client *c, const char *why)
{
	dlock_host_log(c->cfg.host, DLOCK_LOG_WARN,
	               "redis %s: an acquire whose reply was lost could not be undone (%s); "
	               "if it succeeded, the key stays until its TTL",
	               c->label, why);
}

static void undo_attempt(struct redis_client *c, struct redis_lock *lk)
{
	dlock_error ignored = { "" };
	redisReply *r = NULL;
	if (release_args_run(c, lk, &r, &ignored) != DLOCK_OK)
		dlock_redis_undo_failed(c, ignored.msg);
	freeReplyObject(r);
}

static int is_int_pair(const redisReply *r)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
	       r->element[1]->type == REDIS_REPLY_INTEGER;
}

/*
 * One attempt: the mode, a semaphore's waiter id, a new owner value, and
 * the command: the acquire script (a reader's, for a shared acquisition;
 * a permit's, for a semaphore), or, when no token is wanted, the plain
 * SET NX PX, which costs the server far less than a script.  A waiter
 * that sent SET asks for the holder's TTL separately (a holder that dies
 * publishes nothing: the TTL bounds the wait for it), unless `no_pttl`: a
 * single try, or fair=1, whose queue script tells it.
 */
dlock_status dlock_redis_try_begin(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
                                   int no_pttl, struct redis_try *t, dlock_error *err)
{
	(void)c;
	lk->shared = dlock_wait_mode(w) == DLOCK_MODE_SHARED;
	int sem = lk->kind == DLOCK_KIND_SEMAPHORE;
	*t = (struct redis_try){ .lease_ms = lease_ms, .wants_token = dlock_wait_wants_token(w) };
	t->set_nx = !sem && !t->wants_token && !lk->shared;
	t->no_pttl = dlock_wait_try_once(w) || no_pttl;
	if (sem) {
		t->listed = !dlock_wait_try_once(w); /* a waiter counts among the name's waiters (N agreement) */
		if (t->listed && !lk->waiter[0]) {
			dlock_status st = dlock_redis_new_owner(lk, err); /* a random value, kept as the waiter id */
			if (st != DLOCK_OK)
				return st;
			memcpy(lk->waiter, lk->owner, sizeof lk->waiter); /* also names its own channel, pwake:WAITER */
		}
		lk->wake_own = 0;
	}
	return dlock_redis_new_owner(lk, err);
}

/* The arguments of the acquire script: a reader joins the readers (the latest writer's token read when wanted),
 * anyone else takes the key with a new token. */
static void acquire_args(const struct redis_client *c, const struct redis_lock *lk, const struct redis_try *t,
                         struct redis_cmd *cmd)
{
	size_t reclen = 0;
	const char *rec = dlock_redis_record_of(c, lk, &reclen);
	struct redis_args *a = &cmd->a;
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	if (lk->shared) {
		dlock_redis_arg_key(a, c, lk, "readers", NULL);
		dlock_redis_arg_key(a, c, lk, "fence", NULL);
		dlock_redis_arg_key(a, c, lk, "holders", NULL);
		dlock_redis_arg(a, lk->owner);
		dlock_redis_argi(a, cmd->nums[0], t->lease_ms);
		dlock_redis_arg(a, t->wants_token ? "1" : "0");
		dlock_redis_argn(a, rec, reclen);
		cmd->nkeys = 4;
		cmd->id = REDIS_SCRIPT_READ_ACQUIRE;
		return;
	}
	dlock_redis_arg_key(a, c, lk, "fence", NULL);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_argi(a, cmd->nums[0], t->lease_ms);
	dlock_redis_argi(a, cmd->nums[1], dlock_redis_fence_ttl_ms(t->lease_ms));
	dlock_redis_argn(a, rec, reclen);
	cmd->nkeys = 2;
	cmd->id = REDIS_SCRIPT_ACQUIRE;
}

void dlock_redis_try_cmd(const struct redis_client *c, const struct redis_lock *lk, const struct redis_try *t,
                         struct redis_cmd *cmd)
{
	cmd->a = (struct redis_args){ 0 };
	if (lk->kind == DLOCK_KIND_SEMAPHORE) {
		cmd->id = dlock_redis_sem_acquire_args(c, lk, t->lease_ms, t->wants_token, t->listed, cmd->nums, &cmd->a,
		                                       &cmd->nkeys);
		return;
	}
	if (!t->set_nx) {
		acquire_args(c, lk, t, cmd);
		return;
	}
	size_t reclen = 0;
	const char *rec = dlock_redis_record_of(c, lk, &reclen);
	int n = snprintf(cmd->value, sizeof cmd->value, "%s 0 -1 %.*s", lk->owner, (int)reclen, rec);
	dlock_redis_arg(&cmd->a, "SET");
	dlock_redis_arg_key(&cmd->a, c, lk, "lock", NULL);
	dlock_redis_argn(&cmd->a, cmd->value, n > 0 && n < (int)sizeof cmd->value ? (size_t)n : strlen(cmd->value));
	dlock_redis_arg(&cmd->a, "NX");
	dlock_redis_arg(&cmd->a, "PX");
	dlock_redis_argi(&cmd->a, cmd->nums[0], t->lease_ms);
	cmd->nkeys = 0;
	cmd->id = REDIS_NOT_A_SCRIPT;
}

int dlock_redis_try_wrote(const struct redis_try *t, const redisReply *r)
{
	return t->set_nx ? set_wrote(r) : acquire_wrote(r);
}

dlock_status dlock_redis_try_answer(struct redis_client *c, struct redis_lock *lk, const struct redis_try *t,
                                    const redisReply *r, long long acked, int64_t sent_ns, dlock_acquired *out,
                                    int64_t *pttl_ms, int *undo, dlock_error *err)
{
	*undo = 1; /* unless the answer says that nothing of ours was written */
	if (dlock_redis_try_wrote(t, r) && acked < c->replicas) /* ours on the primary only: undone */
		return too_few_replicas(c, acked, DLOCK_ECONNECT, "acquire (undone)", err);
	if (lk->kind == DLOCK_KIND_SEMAPHORE) {
		dlock_status st = dlock_redis_sem_reply(c, lk, r, out, pttl_ms, err);
		lk->listed = t->listed && st == DLOCK_EBUSY;
		*undo = st == DLOCK_ESERVER; /* busy, or another N: no permit of ours was written */
		if (st == DLOCK_OK)
			out->sent_ns = sent_ns;
		return st;
	}
	if (t->set_nx && r->type == REDIS_REPLY_STATUS) {
		*out = (dlock_acquired){ .token = 0, .sent_ns = sent_ns };
		return DLOCK_OK;
	}
	if (t->set_nx && r->type == REDIS_REPLY_NIL) {
		*undo = 0;
		return DLOCK_EBUSY;
	}
	if (t->set_nx)
		return dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to SET", c->label);
	if (!is_int_pair(r))
		return dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to the acquire script", c->label);
	if (r->element[0]->integer != 1) {
		*pttl_ms = r->element[1]->integer;
		*undo = 0;
		return DLOCK_EBUSY;
	}
	*out = (dlock_acquired){ .token = (uint64_t)r->element[1]->integer, .sent_ns = sent_ns };
	return DLOCK_OK;
}

int dlock_redis_try_asks_pttl(const struct redis_try *t, dlock_status st)
{
	return st == DLOCK_EBUSY && t->set_nx && !t->no_pttl;
}

void dlock_redis_pttl_cmd(const struct redis_client *c, const struct redis_lock *lk, struct redis_cmd *cmd)
{
	cmd->a = (struct redis_args){ 0 };
	dlock_redis_arg(&cmd->a, "PTTL");
	dlock_redis_arg_key(&cmd->a, c, lk, "lock", NULL);
	cmd->nkeys = 0;
	cmd->id = REDIS_NOT_A_SCRIPT;
}

int64_t dlock_redis_pttl_answer(const redisReply *r)
{
	if (!r || r->type != REDIS_REPLY_INTEGER)
		return -1;
	return r->integer == -2 ? 0 : r->integer; /* -2: released meanwhile, try again at once; -1: no expiry */
}

/*
 * One attempt through the pools: DLOCK_OK (*out filled), DLOCK_EBUSY
 * (*pttl_ms: the holder's TTL, <0 unknown; for a permit, when to look
 * again) or an error, with nothing of it left on the server.
 */
static dlock_status try_run(struct redis_client *c, struct redis_lock *lk, const struct redis_try *t,
                            dlock_acquired *out, int64_t *pttl_ms, dlock_error *err)
{
	struct redis_cmd cmd;
	redisReply *r = NULL;
	int maybe_ran = 0, undo = 0;
	dlock_redis_try_cmd(c, lk, t, &cmd);
	int64_t sent = dlock_monotonic_ns();
	long long acked = c->replicas;
	dlock_status st = run_script_waiting(c, lk, cmd.id, cmd.nkeys, &cmd.a, "acquire", 1,
	                                     t->set_nx ? set_wrote : acquire_wrote, &acked, &r, &maybe_ran, err);
	if (st == DLOCK_OK)
		st = dlock_redis_try_answer(c, lk, t, r, acked, sent, out, pttl_ms, &undo, err);
	else
		undo = maybe_ran;
	freeReplyObject(r);
	if (dlock_redis_try_asks_pttl(t, st)) {
		r = NULL;
		dlock_redis_pttl_cmd(c, lk, &cmd);
		if (run_script(c, lk, REDIS_NOT_A_SCRIPT, 0, &cmd.a, "acquire", 1, &r, &maybe_ran, err) == DLOCK_OK)
			*pttl_ms = dlock_redis_pttl_answer(r);
		freeReplyObject(r);
	}
	if (st != DLOCK_OK) {
		if (undo)
			undo_attempt(c, lk);
		lk->owner[0] = '\0';
	}
	return st;
}

dlock_status dlock_redis_wait_failed(struct redis_client *c, dlock_status st, dlock_error *err)
{
	if (st == DLOCK_ETIMEDOUT || st == DLOCK_EBUSY)
		return dlock_error_set(err, DLOCK_EBUSY, "redis %s: the lock is held by another owner", c->label);
	if (st == DLOCK_ECANCELED)
		return dlock_error_set(err, st, "redis %s: acquire cancelled", c->label);
	return st;
}

dlock_status dlock_redis_attempt(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
                                 int no_pttl, dlock_acquired *out, int64_t *pttl_ms, dlock_error *err)
{
	struct redis_try t;
	dlock_status st = dlock_redis_try_begin(c, lk, lease_ms, w, no_pttl, &t, err);
	return st != DLOCK_OK ? st : try_run(c, lk, &t, out, pttl_ms, err);
}

/*
 * Without fair=1, what an attempt's answer `st` tells the core's waiting
 * loop.  Busy, the first answer subscribes to the lock's channel (the wake-up, given up in
 * dlock_redis_disarm()) and asks for another attempt at once if the
 * subscription is confirmed already (a release before it would have been
 * missed); while subscribed the core sleeps until a release message or the
 * holder's TTL runs out.  Without a subscription (refused, or the
 * subscriber cannot reach the server) the core polls, no longer than the
 * holder's TTL.
 */
dlock_status dlock_redis_single_waits(struct redis_client *c, struct redis_lock *lk, dlock_wait *w, dlock_status st,
                                     int64_t pttl_ms, dlock_retry *retry, dlock_error *err)
{
	/* In a cluster: a master failing over (its replica takes the slot within seconds), or the slot not
	 * served now (TRYAGAIN, CLUSTERDOWN): the core tries again, within the deadline and until cancelled. */
	if (st == DLOCK_ECONNECT && c->cluster)
		retry->transient = 1;
	if (st != DLOCK_EBUSY || dlock_wait_try_once(w))
		return st == DLOCK_EBUSY ? dlock_redis_wait_failed(c, st, err) : st;
	/* The channel's subscriber: in a cluster, that of the node serving the slot now, which a
	 * migration or a failover changes between two attempts. */
	struct redis_route rt;
	dlock_error ignored = { "" };
	struct redis_sub *sub = lk->watch_sub;
	if (lk->on_loop && c->loop_sub) /* an attempt on the loop: the loop's own, with no thread */
		sub = c->loop_sub;
	else if (dlock_redis_route(c, lk, &rt, &ignored) == DLOCK_OK)
		sub = dlock_redis_route_sub(c, &rt);
	/* A semaphore's queued waiter is woken on a channel of its own (redis_sem.c). */
	int own = lk->kind == DLOCK_KIND_SEMAPHORE && lk->wake_own;
	char chan[REDIS_KEY_MAX];
	size_t chanlen = dlock_redis_key(c, lk, own ? "pwake:" : "released", own ? lk->waiter : NULL, chan);
	if (lk->watching && (sub != lk->watch_sub || own != lk->watch_own)) {
		dlock_redis_sub_unwatch(lk->watch_sub, &lk->watch);
		lk->watching = 0;
	}
	enum redis_watch_state s = REDIS_WATCH_POLL;
	retry->armed = 1; /* from now on disarm() unwatches (a no-op when nothing is watched) */
	if (!lk->watching && sub) {
		lk->watching = 1;
		lk->watch_sub = sub;
		lk->watch_own = own;
		s = dlock_redis_sub_watch(sub, &lk->watch, chan, chanlen, w, NULL, NULL);
		if (s == REDIS_WATCH_ACTIVE) { /* subscribed already: a release since the try was not seen by us */
			retry->after_ms = 0;
			return dlock_redis_wait_failed(c, st, err);
		}
	} else if (lk->watching) {
		s = dlock_redis_sub_state(lk->watch_sub, &lk->watch);
	}
	retry->armed = s != REDIS_WATCH_POLL;
	retry->after_ms = pttl_ms >= 0 ? pttl_ms + 1 : NO_TTL_RECHECK_MS;
	return dlock_redis_wait_failed(c, st, err);
}

/* Without fair=1: one attempt for the core's waiting loop, then what it waits for (dlock_redis_single_waits). */
static dlock_status single_try_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
                                       dlock_retry *retry, dlock_acquired *out, dlock_error *err)
{
	int64_t pttl_ms = -1;
	dlock_status st = dlock_redis_attempt(c, lk, lease_ms, w, 0, out, &pttl_ms, err);
	return dlock_redis_single_waits(c, lk, w, st, pttl_ms, retry, err);
}

void dlock_redis_wake_unwatch(struct redis_lock *lk)
{
	if (lk->watching)
		dlock_redis_sub_unwatch(lk->watch_sub, &lk->watch);
	lk->watching = 0;
}

static void single_disarm(struct redis_client *c, struct redis_lock *lk)
{
	dlock_redis_wake_unwatch(lk);
	dlock_redis_sem_unlist(c, lk); /* a semaphore's waiter that gave up no longer counts */
}

/* ------------------------------------------------------------ release, extend, check */

dlock_status dlock_redis_owned_answer(const struct redis_client *c, const redisReply *r, const char *what,
                                      dlock_error *err)
{
	if (r->type != REDIS_REPLY_INTEGER)
		return dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to %s", c->label, what);
	if (r->integer < 1) /* 1, or 2 for a release that granted the lock to a waiter */
		return dlock_error_set(err, DLOCK_ENOTHELD, "redis %s: %s: the lock is no longer ours (expired or taken)",
		                       c->label, what);
	return DLOCK_OK;
}

static dlock_status owner_only_result(struct redis_client *c, redisReply *r, const char *what, dlock_error *err)
{
	dlock_status st = dlock_redis_owned_answer(c, r, what, err);
	freeReplyObject(r);
	return st;
}

/*
 * Released twice by a retry after a lost reply would say "not ours" the
 * second time: the answer is then ENOTHELD, the cautious one.
 */
dlock_status dlock_redis_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err)
{
	redisReply *r = NULL;
	dlock_status st = release_args_run(c, lk, &r, err);
	lk->handed_off = st == DLOCK_OK && r && r->type == REDIS_REPLY_INTEGER && r->integer == 2;
	if (st == DLOCK_OK)
		st = owner_only_result(c, r, "release", err);
	lk->owner[0] = '\0';
	return st;
}

enum redis_script_id dlock_redis_extend_args(const struct redis_client *c, const struct redis_lock *lk,
                                             int64_t lease_ms, char lease[24], struct redis_args *a, int *nkeys)
{
	if (lk->kind == DLOCK_KIND_SEMAPHORE)
		return dlock_redis_sem_extend_args(c, lk, lease_ms, lease, a, nkeys);
	*a = (struct redis_args){ 0 };
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	*nkeys = 1;
	if (lk->shared) {
		dlock_redis_arg_key(a, c, lk, "readers", NULL);
		dlock_redis_arg_key(a, c, lk, "holders", NULL);
		*nkeys = 3;
	}
	dlock_redis_arg(a, lk->owner);
	dlock_redis_argi(a, lease, lease_ms);
	return lk->shared ? REDIS_SCRIPT_READ_EXTEND : REDIS_SCRIPT_EXTEND;
}

dlock_status dlock_redis_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_error *err)
{
	struct redis_args a;
	char lease[24];
	redisReply *r = NULL;
	int nkeys;
	enum redis_script_id id = dlock_redis_extend_args(c, lk, lease_ms, lease, &a, &nkeys);
	long long acked = c->replicas;
	int maybe_ran;
	dlock_status st = run_script_waiting(c, lk, id, nkeys, &a, "extend", 0, extend_wrote, &acked, &r, &maybe_ran,
	                                     err);
	/* Extending twice is extending once: one more try when the connection failed after sending, or
	 * before WAIT answered (a failover kills the old master's clients mid-renewal). */
	if ((st == DLOCK_ECONNECT && maybe_ran) || (st == DLOCK_OK && acked < 0)) {
		freeReplyObject(r);
		r = NULL;
		acked = c->replicas;
		st = run_script_waiting(c, lk, id, nkeys, &a, "extend", 0, extend_wrote, &acked, &r, &maybe_ran, err);
	}
	int drop = 0;
	if (st == DLOCK_OK)
		st = dlock_redis_extend_answer(c, r, acked, &drop, err);
	freeReplyObject(r);
	if (drop) {
		dlock_error ignored = { "" };
		dlock_redis_release(c, lk, &ignored);
	}
	return st;
}

int dlock_redis_extend_wrote(const redisReply *r)
{
	return extend_wrote(r);
}

dlock_status dlock_redis_extend_answer(struct redis_client *c, const redisReply *r, long long acked, int *drop,
                                       dlock_error *err)
{
	dlock_status st = dlock_redis_owned_answer(c, r, "extend", err);
	*drop = 0;
	if (st == DLOCK_OK && acked < 0) /* not known to be confirmed or not: the renewal is retried */
		return too_few_replicas(c, acked, DLOCK_ECONNECT, "renewal", err);
	if (st == DLOCK_OK && acked < c->replicas) {
		/* Renewed on the primary only: a failover now could lose it.  Give it up and say so. */
		*drop = 1;
		return too_few_replicas(c, acked, DLOCK_ENOTHELD, "renewal (the lock was released)", err);
	}
	return st;
}

/* Check may only say held, not held, or cannot tell now. */
static dlock_status uncertain(dlock_error *err)
{
	char msg[DLOCK_ERROR_MAX];
	snprintf(msg, sizeof msg, "%s", err->msg);
	return dlock_error_set(err, DLOCK_EUNCERTAIN, "%s (cannot tell whether the lock is still ours)", msg);
}

/* The key's owner: GET, compared here; a reader: the check script, which compares its time with the server's. */
void dlock_redis_check_cmd(const struct redis_client *c, const struct redis_lock *lk, struct redis_cmd *cmd)
{
	cmd->a = (struct redis_args){ 0 };
	if (lk->kind == DLOCK_KIND_SEMAPHORE) {
		cmd->id = dlock_redis_sem_check_args(c, lk, &cmd->a, &cmd->nkeys);
	} else if (lk->shared) {
		dlock_redis_arg_key(&cmd->a, c, lk, "lock", NULL);
		dlock_redis_arg_key(&cmd->a, c, lk, "readers", NULL);
		dlock_redis_arg(&cmd->a, lk->owner);
		cmd->id = REDIS_SCRIPT_READ_CHECK;
		cmd->nkeys = 2;
	} else {
		dlock_redis_arg(&cmd->a, "GET");
		dlock_redis_arg_key(&cmd->a, c, lk, "lock", NULL);
		cmd->id = REDIS_NOT_A_SCRIPT;
		cmd->nkeys = 0;
	}
}

dlock_status dlock_redis_check_answer(const struct redis_client *c, const struct redis_lock *lk, dlock_status st,
                                      const redisReply *r, dlock_error *err)
{
	int scripted = lk->shared || lk->kind == DLOCK_KIND_SEMAPHORE;
	if (st == DLOCK_OK && (scripted ? r->type != REDIS_REPLY_INTEGER || r->integer != 1
	                                  : r->type != REDIS_REPLY_STRING || !dlock_redis_owns(r->str, r->len, lk->owner)))
		st = dlock_error_set(err, DLOCK_ENOTHELD, "redis %s: the lock is no longer ours (expired or taken)",
		                     c->label);
	return st == DLOCK_OK || st == DLOCK_ENOTHELD ? st : uncertain(err);
}

dlock_status dlock_redis_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err)
{
	struct redis_cmd cmd;
	redisReply *r = NULL;
	int maybe_ran;
	dlock_redis_check_cmd(c, lk, &cmd);
	dlock_status st = run_script(c, lk, cmd.id, cmd.nkeys, &cmd.a, "check", 0, &r, &maybe_ran, err);
	st = dlock_redis_check_answer(c, lk, st, r, err);
	freeReplyObject(r);
	return st;
}

const struct redis_algorithm dlock_redis_single = {
	.name = "single",
	.fencing = DLOCK_FENCING_CONDITIONAL,
	.wakeup = DLOCK_WAKEUP_NOTIFY,
	.try_acquire = single_try_acquire,
	.disarm = single_disarm,
	.release = dlock_redis_release,
	.extend = dlock_redis_extend,
	.check = dlock_redis_check,
};
