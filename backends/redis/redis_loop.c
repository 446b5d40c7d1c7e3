/*
 * A loop client's lock calls on its loop (driver contract 9): the
 * non-blocking forms of algorithm "single"'s try_acquire, release, extend
 * and check, which the core calls on the application's loop thread, so
 * that a waiting acquisition holds no thread.  Each sends the command its
 * blocking form sends (redis_lock.c builds it and reads its answer for
 * both) on the client's connection of the loop (redis_nbconn.c), pipelined
 * behind the others, and ends with dlock_call_done() when the answer comes.
 *
 *   try_acquire   the acquire script (or SET NX PX, then PTTL when busy);
 *                 busy, the lock's channel is watched through the
 *                 client's subscriber of the loop (redis_sub.c, no
 *                 thread: its connection is another of the loop's) as
 *                 the blocking attempt watches it through the threaded
 *                 one (dlock_redis_single_waits()); an attempt whose answer
 *                 never came, or was not one the lock can be taken from,
 *                 sends the owner-only release of its owner value (the
 *                 undo, as the blocking attempt does), on a new connection
 *                 when the failure was the connection's, and ends with the
 *                 attempt's failure once that is answered
 *   release, extend, check   the owner-only scripts (GET for a check)
 *   disarm        the watch given up; a semaphore's waiter is withdrawn by
 *                 a command whose answer nobody waits for
 *
 * A script the server lost (NOSCRIPT, after SCRIPT FLUSH or a restart) is
 * sent again as EVAL, its command built again from the lock's state (the
 * blocking path's fallback).  With replicas=N an attempt that took the
 * lock, or an extend, is followed by WAIT on the same connection, as the
 * blocking forms do; too few replicas undo the attempt, or release the
 * lock renewed (then DLOCK_ENOTHELD), and a WAIT without an answer counts
 * none (the blocking extend sends its extend again first).  Each call is bounded by io_timeout (the
 * connection's timer); a connection that fails ends every call on it with
 * its status (DLOCK_ECONNECT; DLOCK_EAUTH for a refused password), and the
 * next call connects again.  Unlike the blocking forms, a release, extend
 * or check whose connection failed is not sent again on a new one: it ends
 * with that failure (a release's lock then ends with its lease; the
 * core's renewal, also an extend_start() on the loop, tries again).
 *
 * Ownership: a lock's call lives in its struct redis_loop_op
 * (redis_client.h), lent to the connection while its command waits; a
 * withdrawal is allocated, and freed by its answer.  Threads: the loop's
 * only; the blocking methods may run beside on other threads, sharing
 * only the client's read-only fields, the pools and the subscriber.
 * Errors: as the blocking forms.
 */
#include <stddef.h>
#include <stdlib.h>

#include "redis_loop.h"
#include "redis_route.h"
#include "redis_sem.h"

/* What a lock's call sends. */
enum op_kind {
	OP_ACQUIRE, /* the attempt */
	OP_PTTL,    /* the busy SET NX's holder TTL */
	OP_UNDO,    /* the owner-only release of an attempt that failed after it may have run */
	OP_RELEASE,
	OP_EXTEND,
	OP_CHECK,
	OP_WAIT,    /* replicas=N: WAIT after an attempt or extend that wrote (`after`), its reply held meanwhile */
	OP_DROP,    /* replicas=N: the release of a lock renewed on too few replicas */
};

static const char *const op_what[] = {
	[OP_ACQUIRE] = "acquire", [OP_PTTL] = "acquire", [OP_UNDO] = "release", [OP_RELEASE] = "release",
	[OP_EXTEND] = "extend",   [OP_CHECK] = "check",  [OP_WAIT] = "WAIT",    [OP_DROP] = "release",
};

int dlock_redis_loop_fits(const struct redis_client *c)
{
	return c->algo == &dlock_redis_single && c->npools == 1 && !c->sentinel && !c->cluster;
}

/* ------------------------------------------------------------ sending */

/* A command on the connection: a script as EVALSHA (EVAL when `eval`, or when SCRIPT LOAD was refused). */
struct sending {
	const struct redis_client *c;
	const struct redis_cmd *cmd;
	int eval;
};

static int append_cmd(struct redis_conn *conn, void *arg)
{
	const struct sending *s = arg;
	const struct redis_cmd *cmd = s->cmd;
	if (cmd->id == REDIS_NOT_A_SCRIPT)
		return dlock_redis_append_argv(conn, cmd->a.argc, cmd->a.argv, cmd->a.len);
	if (s->eval)
		return dlock_redis_script_append_eval(conn, cmd->id, cmd->nkeys, &cmd->a);
	return dlock_redis_script_append(conn, &s->c->scripts, cmd->id, cmd->nkeys, &cmd->a);
}

static struct redis_lock *lock_of(struct redis_loop_op *op)
{
	return (struct redis_lock *)((char *)op - offsetof(struct redis_lock, op));
}

/* The command of lk's call, built from the lock's state and the call's own (again after NOSCRIPT). */
static void op_cmd(struct redis_client *c, struct redis_lock *lk, struct redis_cmd *cmd)
{
	struct redis_loop_op *op = &lk->op;
	switch (op->kind) {
	case OP_ACQUIRE: dlock_redis_try_cmd(c, lk, &op->t, cmd); break;
	case OP_PTTL: dlock_redis_pttl_cmd(c, lk, cmd); break;
	case OP_UNDO:
	case OP_RELEASE:
	case OP_DROP: dlock_redis_release_cmd(c, lk, cmd); break;
	case OP_EXTEND:
		cmd->a = (struct redis_args){ 0 };
		cmd->id = dlock_redis_extend_args(c, lk, op->lease_ms, cmd->nums[0], &cmd->a, &cmd->nkeys);
		break;
	case OP_CHECK: dlock_redis_check_cmd(c, lk, cmd); break;
	case OP_WAIT:
		dlock_redis_wait_cmd(c, &cmd->a, cmd->nums[0], cmd->nums[1]);
		cmd->id = REDIS_NOT_A_SCRIPT;
		cmd->nkeys = 0;
		break;
	}
}

static void op_answer(struct redis_nbreq *rq, redisReply *r, dlock_status st, const dlock_error *why,
                      int maybe_ran);

/* Send lk's call as op->kind says.  DLOCK_OK: op_answer() comes. */
static dlock_status op_send(struct redis_client *c, struct redis_lock *lk, dlock_error *err)
{
	struct redis_cmd cmd;
	op_cmd(c, lk, &cmd);
	struct sending s = { c, &cmd, lk->op.eval };
	lk->op.rq.answer = op_answer;
	return dlock_redis_nbconn_send(c->loop, &lk->op.rq, append_cmd, &s, err);
}

/* ------------------------------------------------------------ answers */

/* The acquisition's attempt ended with `st` (its holder's TTL `pttl_ms`): what the core's loop is told. */
static void acquire_done(struct redis_client *c, struct redis_lock *lk, dlock_status st, int64_t pttl_ms)
{
	struct redis_loop_op *op = &lk->op;
	if (st != DLOCK_OK)
		lk->owner[0] = '\0';
	st = dlock_redis_single_waits(c, lk, op->w, st, pttl_ms, op->retry, op->err);
	dlock_call_done(op->call, st);
}

/* Send the call's next command, of `kind` (its answer comes to op_answer()): 1 when it went. */
static int op_next(struct redis_client *c, struct redis_lock *lk, int kind, dlock_error *err)
{
	lk->op.kind = kind;
	lk->op.eval = 0;
	return op_send(c, lk, err) == DLOCK_OK;
}

/* The attempt's answer, `st` after its transport (with `r` when DLOCK_OK): the lock, busy, or the undo. */
static void acquire_answer(struct redis_client *c, struct redis_lock *lk, dlock_status st, const redisReply *r,
                           long long acked, int undo)
{
	struct redis_loop_op *op = &lk->op;
	int64_t pttl_ms = -1;
	dlock_error ignored;
	if (st == DLOCK_OK)
		st = dlock_redis_try_answer(c, lk, &op->t, r, acked, op->sent_ns, op->out, &pttl_ms, &undo, op->err);
	if (dlock_redis_try_asks_pttl(&op->t, st)) {
		if (op_next(c, lk, OP_PTTL, &ignored))
			return; /* else busy, the TTL unknown, as a blocking PTTL that failed */
	} else if (st != DLOCK_OK && undo) {
		op->failed = st;
		if (op_next(c, lk, OP_UNDO, &ignored))
			return;
		dlock_redis_undo_failed(c, ignored.msg);
	}
	acquire_done(c, lk, st, pttl_ms);
}

/*
 * What lk's call answers for its command's outcome: `st` (`r` its reply
 * when DLOCK_OK, no error reply; `acked` the replicas that confirmed a
 * write), into the core's out-parameters and `err`, then
 * dlock_call_done(), or the call's next command.
 */
static void op_ended(struct redis_client *c, struct redis_lock *lk, dlock_status st, const redisReply *r,
                     long long acked, int maybe_ran, dlock_error *err)
{
	struct redis_loop_op *op = &lk->op;
	int drop = 0;
	switch (op->kind) {
	case OP_ACQUIRE:
		acquire_answer(c, lk, st, r, acked, maybe_ran);
		return;
	case OP_PTTL: /* its failure leaves the TTL unknown, as in the blocking attempt */
		acquire_done(c, lk, DLOCK_EBUSY, st == DLOCK_OK ? dlock_redis_pttl_answer(r) : -1);
		return;
	case OP_UNDO: /* done or not, what may be ours ends with its lease at the latest */
		if (st == DLOCK_OK && (st = dlock_redis_owned_answer(c, r, "release", err)) == DLOCK_ENOTHELD)
			st = DLOCK_OK; /* nothing of ours was there */
		if (st != DLOCK_OK)
			dlock_redis_undo_failed(c, err->msg);
		acquire_done(c, lk, op->failed, -1);
		return;
	case OP_EXTEND:
		if (st == DLOCK_OK)
			st = dlock_redis_extend_answer(c, r, acked, &drop, err);
		if (drop) { /* renewed on too few replicas: given up, as the blocking extend gives it up */
			dlock_error ignored;
			op->failed = st;
			if (op_next(c, lk, OP_DROP, &ignored))
				return;
		}
		break;
	case OP_DROP: /* done or not, the extend's answer stands */
		st = op->failed;
		break;
	case OP_RELEASE: /* the owner value is done with, as in the blocking release */
		if (st == DLOCK_OK)
			st = dlock_redis_owned_answer(c, r, "release", err);
		lk->owner[0] = '\0';
		break;
	case OP_CHECK:
		st = dlock_redis_check_answer(c, lk, st, r, err);
		break;
	case OP_WAIT: /* op_answer() put the write's kind back */
		break;
	}
	dlock_call_done(op->call, st);
}

/*
 * What a command's own answer says before its call reads it: a script the
 * server lost is sent again as EVAL (1: the call goes on); an error reply,
 * or a connection that failed, becomes the status and message of the
 * blocking form (*r then NULL).
 */
static int settle(struct redis_client *c, struct redis_lock *lk, redisReply **r, dlock_status *st,
                  const dlock_error *why, int *maybe_ran, dlock_error *err)
{
	struct redis_loop_op *op = &lk->op;
	if (*r && !op->eval && dlock_redis_is_error(*r, "NOSCRIPT")) {
		freeReplyObject(*r);
		*r = NULL;
		op->eval = 1;
		if ((*st = op_send(c, lk, err)) == DLOCK_OK)
			return 1;
		*maybe_ran = 0; /* it did not run */
	} else if (*r && (*r)->type == REDIS_REPLY_ERROR) {
		*st = dlock_redis_refusal(&c->pools[0].ep, *r, op_what[op->kind], err);
		freeReplyObject(*r);
		*r = NULL;
	} else if (!*r) {
		dlock_error_set(err, *st, "%s", why ? why->msg : "");
	}
	return 0;
}

/* 1 when `r`, the reply of lk's call, wrote what replicas=N must confirm (an attempt that took it, an extend). */
static int wrote(const struct redis_client *c, const struct redis_loop_op *op, const redisReply *r)
{
	if (c->replicas == 0 || !r)
		return 0;
	return op->kind == OP_ACQUIRE ? dlock_redis_try_wrote(&op->t, r)
	                              : op->kind == OP_EXTEND && dlock_redis_extend_wrote(r);
}

/* The answer `r` of lk's command, or the failure `st` (with `why`) of its connection. */
static void op_answer(struct redis_nbreq *rq, redisReply *r, dlock_status st, const dlock_error *why,
                      int maybe_ran)
{
	struct redis_loop_op *op = (struct redis_loop_op *)rq;
	struct redis_lock *lk = lock_of(op);
	struct redis_client *c = op->c;
	dlock_error ignored = { "" };
	int internal = op->kind == OP_UNDO || op->kind == OP_PTTL || op->kind == OP_DROP;
	dlock_error *err = internal ? &ignored : op->err;
	long long acked = c->replicas; /* what a write needs, unless WAIT tells otherwise */
	if (op->kind == OP_WAIT) { /* the write's own answer, with the replicas that have it */
		acked = dlock_redis_wait_answer(r);
		freeReplyObject(r);
		r = op->held;
		op->held = NULL;
		op->kind = op->after;
		st = DLOCK_OK;
		maybe_ran = 1;
	} else if (settle(c, lk, &r, &st, why, &maybe_ran, err)) {
		return;
	} else if (wrote(c, op, r)) { /* WAIT, on the connection that wrote it, as the blocking forms do */
		op->held = r;
		op->after = op->kind;
		if (op_next(c, lk, OP_WAIT, &ignored))
			return;
		op->kind = op->after;
		op->held = NULL;
		acked = -1; /* no answer */
	}
	op_ended(c, lk, st, r, acked, maybe_ran, err);
	freeReplyObject(r);
}

/* ------------------------------------------------------------ the methods */

/* lk's call of `kind`, with the core's `call` and `err`. */
static void op_begin(struct redis_client *c, struct redis_lock *lk, int kind, dlock_error *err, dlock_call *call)
{
	lk->op = (struct redis_loop_op){ .c = c, .kind = kind, .call = call, .err = err };
}

dlock_status dlock_redis_loop_try_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                          dlock_wait *w, dlock_retry *retry, dlock_acquired *out, dlock_error *err,
                                          dlock_call *call)
{
	op_begin(c, lk, OP_ACQUIRE, err, call);
	lk->on_loop = 1; /* its disarm() comes on the loop too */
	lk->op.w = w;
	lk->op.retry = retry;
	lk->op.out = out;
	dlock_status st = dlock_redis_try_begin(c, lk, lease_ms, w, 0, &lk->op.t, err);
	lk->op.sent_ns = dlock_monotonic_ns();
	if (st == DLOCK_OK)
		st = op_send(c, lk, err);
	if (st == DLOCK_OK)
		return DLOCK_OK;
	lk->owner[0] = '\0'; /* nothing was sent: nothing to undo */
	return dlock_redis_single_waits(c, lk, w, st, -1, retry, err);
}

dlock_status dlock_redis_loop_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err,
                                      dlock_call *call)
{
	op_begin(c, lk, OP_RELEASE, err, call);
	return op_send(c, lk, err);
}

dlock_status dlock_redis_loop_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                     dlock_error *err, dlock_call *call)
{
	op_begin(c, lk, OP_EXTEND, err, call);
	lk->op.lease_ms = lease_ms;
	return op_send(c, lk, err);
}

dlock_status dlock_redis_loop_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err,
                                    dlock_call *call)
{
	op_begin(c, lk, OP_CHECK, err, call);
	dlock_status st = op_send(c, lk, err);
	return st == DLOCK_OK ? st : dlock_redis_check_answer(c, lk, st, NULL, err);
}

/* ------------------------------------------------------------ a semaphore's waiter withdrawn */

/* The withdrawal of a waiter that gave up: a copy of its lock's state (keys, waiter id, N), nobody waiting. */
struct withdrawal {
	struct redis_nbreq rq; /* first member */
	struct redis_client *c;
	struct redis_lock lk;
	int eval;
};

static void withdrawal_answer(struct redis_nbreq *rq, redisReply *r, dlock_status st, const dlock_error *why,
                              int maybe_ran);

static void withdrawal_cmd(const struct withdrawal *wd, struct redis_cmd *cmd)
{
	cmd->id = dlock_redis_sem_withdraw_args(wd->c, &wd->lk, cmd->nums[0], &cmd->a, &cmd->nkeys);
}

static dlock_status withdrawal_send(struct withdrawal *wd)
{
	struct redis_cmd cmd;
	dlock_error ignored;
	withdrawal_cmd(wd, &cmd);
	struct sending s = { wd->c, &cmd, wd->eval };
	wd->rq.answer = withdrawal_answer;
	return dlock_redis_nbconn_send(wd->c->loop, &wd->rq, append_cmd, &s, &ignored);
}

/* Best effort, as the blocking withdrawal: its entries expire anyway. */
static void withdrawal_answer(struct redis_nbreq *rq, redisReply *r, dlock_status st, const dlock_error *why,
                              int maybe_ran)
{
	struct withdrawal *wd = (struct withdrawal *)rq;
	(void)st, (void)why, (void)maybe_ran;
	int again = r && !wd->eval && dlock_redis_is_error(r, "NOSCRIPT");
	freeReplyObject(r);
	if (again) {
		wd->eval = 1;
		if (withdrawal_send(wd) == DLOCK_OK)
			return;
	}
	free(wd);
}

void dlock_redis_loop_disarm(struct redis_client *c, struct redis_lock *lk)
{
	lk->on_loop = 0;
	dlock_redis_wake_unwatch(lk);
	if (!lk->listed)
		return;
	lk->listed = 0;
	struct withdrawal *wd = calloc(1, sizeof *wd);
	if (!wd)
		return; /* its entry among the waiters expires */
	wd->c = c;
	wd->lk = *lk;
	if (withdrawal_send(wd) != DLOCK_OK)
		free(wd);
}

/* ------------------------------------------------------------ open, close */

dlock_status dlock_redis_loop_open(struct redis_client *c, dlock_io *io, dlock_error *err)
{
	dlock_status st = dlock_redis_nbconn_new(io, &c->pools[0].ep, &c->cfg, &c->loop, err);
	if (st == DLOCK_OK)
		st = dlock_redis_sub_new_loop(&c->loop_sub, io, &c->pools[0].ep, &c->cfg, err);
	return st;
}

void dlock_redis_loop_close(struct redis_client *c)
{
	dlock_redis_sub_free(c->loop_sub); /* every acquisition of the loop disarmed: nothing watches */
	c->loop_sub = NULL;
	dlock_redis_nbconn_free(c->loop);
	c->loop = NULL;
}
