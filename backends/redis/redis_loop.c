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
 *                 client's subscriber as the blocking attempt watches it
 *                 (dlock_redis_single_waits()); an attempt whose answer
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
 * blocking path's fallback).  Each call is bounded by io_timeout (the
 * connection's timer); a connection that fails ends every call on it with
 * its status (DLOCK_ECONNECT; DLOCK_EAUTH for a refused password), and the
 * next call connects again.  Unlike the blocking forms, a release, extend
 * or check whose connection failed is not sent again on a new one: it ends
 * with that failure (a release's lock then ends with its lease; the
 * core's renewal tries again).  A release leaves lk->owner as it was: the
 * core's renewal may read it on its thread meanwhile (driver.h), and the
 * next attempt writes a new one.
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
};

static const char *const op_what[] = {
	[OP_ACQUIRE] = "acquire", [OP_PTTL] = "acquire", [OP_UNDO] = "release",
	[OP_RELEASE] = "release", [OP_EXTEND] = "extend", [OP_CHECK] = "check",
};

int dlock_redis_loop_fits(const struct redis_client *c)
{
	return c->algo == &dlock_redis_single && c->npools == 1 && !c->sentinel && !c->cluster && c->replicas == 0;
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
	case OP_RELEASE: dlock_redis_release_cmd(c, lk, cmd); break;
	case OP_EXTEND:
		cmd->a = (struct redis_args){ 0 };
		cmd->id = dlock_redis_extend_args(c, lk, op->lease_ms, cmd->nums[0], &cmd->a, &cmd->nkeys);
		break;
	case OP_CHECK: dlock_redis_check_cmd(c, lk, cmd); break;
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

/* The attempt's answer, `st` after its transport (with `r` when DLOCK_OK): the lock, busy, or the undo. */
static void acquire_answer(struct redis_client *c, struct redis_lock *lk, dlock_status st, const redisReply *r,
                           int undo)
{
	struct redis_loop_op *op = &lk->op;
	int64_t pttl_ms = -1;
	dlock_error ignored;
	if (st == DLOCK_OK) /* replicas=N is not run on the loop: nothing to count */
		st = dlock_redis_try_answer(c, lk, &op->t, r, c->replicas, op->sent_ns, op->out, &pttl_ms, &undo, op->err);
	if (dlock_redis_try_asks_pttl(&op->t, st)) {
		op->kind = OP_PTTL;
		op->eval = 0;
		if (op_send(c, lk, &ignored) == DLOCK_OK)
			return; /* else busy, the TTL unknown, as a blocking PTTL that failed */
	} else if (st != DLOCK_OK && undo) {
		op->kind = OP_UNDO;
		op->eval = 0;
		op->failed = st;
		if (op_send(c, lk, &ignored) == DLOCK_OK)
			return;
		dlock_redis_undo_failed(c, ignored.msg);
	}
	acquire_done(c, lk, st, pttl_ms);
}

/*
 * The answer `r` of lk's call, or the failure `st` (with `why`) of its
 * connection: what the blocking form would return, into the core's
 * out-parameters, then dlock_call_done() (or the next command of the call).
 */
static void op_answer(struct redis_nbreq *rq, redisReply *r, dlock_status st, const dlock_error *why,
                      int maybe_ran)
{
	struct redis_loop_op *op = (struct redis_loop_op *)rq;
	struct redis_lock *lk = lock_of(op);
	struct redis_client *c = op->c;
	dlock_error ignored;
	dlock_error *err = op->kind == OP_UNDO || op->kind == OP_PTTL ? &ignored : op->err;
	if (r && !op->eval && dlock_redis_is_error(r, "NOSCRIPT")) { /* the server lost the script: EVAL */
		op->eval = 1;
		if ((st = op_send(c, lk, err)) == DLOCK_OK)
			return;
		maybe_ran = 0;
		r = NULL;
	} else if (r && r->type == REDIS_REPLY_ERROR) {
		st = dlock_redis_refusal(&c->pools[0].ep, r, op_what[op->kind], err);
		r = NULL;
	} else if (!r) {
		dlock_error_set(err, st, "%s", why ? why->msg : "");
	}
	switch (op->kind) {
	case OP_ACQUIRE:
		acquire_answer(c, lk, st, r, maybe_ran);
		return;
	case OP_PTTL: /* its failure leaves the TTL unknown, as in the blocking attempt */
		acquire_done(c, lk, DLOCK_EBUSY, st == DLOCK_OK ? dlock_redis_pttl_answer(r) : -1);
		return;
	case OP_UNDO: /* done or not, what may be ours ends with its lease at the latest */
		if (st == DLOCK_OK && (st = dlock_redis_owned_answer(c, r, "release", err)) == DLOCK_ENOTHELD)
			st = DLOCK_OK; /* nothing of ours was there */
		if (st != DLOCK_OK)
			dlock_redis_undo_failed(c, ignored.msg);
		acquire_done(c, lk, op->failed, -1);
		return;
	case OP_RELEASE:
	case OP_EXTEND:
		if (st == DLOCK_OK)
			st = dlock_redis_owned_answer(c, r, op_what[op->kind], err);
		break;
	case OP_CHECK:
		st = dlock_redis_check_answer(c, lk, st, r, err);
		break;
	}
	dlock_call_done(op->call, st);
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

static dlock_status withdrawal_send(struct withdrawal *wd)
{
	struct redis_cmd cmd;
	dlock_error ignored;
	cmd.id = dlock_redis_sem_withdraw_args(wd->c, &wd->lk, cmd.nums[0], &cmd.a, &cmd.nkeys);
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
	if (r && !wd->eval && dlock_redis_is_error(r, "NOSCRIPT")) {
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
	return dlock_redis_nbconn_new(io, &c->pools[0].ep, &c->cfg, &c->loop, err);
}

void dlock_redis_loop_close(struct redis_client *c)
{
	dlock_redis_nbconn_free(c->loop);
	c->loop = NULL;
}
