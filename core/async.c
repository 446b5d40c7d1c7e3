/*
 * Asynchronous operations of a loop client (dlock/loop.h): start, run,
 * call back.
 *
 * An operation is one allocation (struct dlock_op) that copies what its
 * start call was given.  The start call checks what it can at once (an
 * error there never calls back), takes a reference on the handle, and
 * hands the operation to a worker thread of the client — or, while the
 * client is still opening, queues it until the open completes.  The worker
 * makes the blocking call (the same code path as a blocking client's),
 * keeps its status and error text, and posts the operation to the loop,
 * where the callback runs; the handle's reference is dropped after it, so
 * that a handle freed inside its own callback goes then (async_client.c).
 *
 * Cancellation: an acquisition records its handle's cancellation sequence
 * when it starts, so that a dlock_cancel() between the start and the
 * moment the worker begins to wait is not lost (dlock_acquire_since()).
 *
 * Ownership: the operation belongs to the core from a successful start
 * until its callback has returned; what the callback receives (an
 * inspection, a list, a leader) is the application's.  Threads: start
 * calls and callbacks on the loop's thread; the blocking part on a worker.
 */
#include "async.h"
#include "reactor.h"
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op_kind {
	OP_OPEN, OP_ACQUIRE, OP_RELEASE, OP_EXTEND, OP_CHECK, OP_INSPECT, OP_LIST, OP_BREAK,
	OP_CAMPAIGN, OP_PROCLAIM, OP_RESIGN, OP_LEADER, OP_CLOSE, OP_FREE
};

_Static_assert(OP_OPEN == DLOCK_OP_OPEN && OP_CLOSE == DLOCK_OP_CLOSE, "async.h's kinds");

union op_done {
	dlock_open_fn open;
	dlock_lock_done_fn lock;
	dlock_inspect_fn inspect;
	dlock_list_fn list;
	dlock_break_fn brk;
	dlock_election_done_fn election;
	dlock_leader_done_fn leader;
	dlock_close_fn close;
};

struct dlock_op {
	struct dlock_job job;
	struct dlock_reactor_item item;
	struct dlock_op *next_waiting; /* in client->open_waiters */
	enum op_kind kind;
	struct dlock_client *c;
	struct dlock_lock *lock;       /* the handle it holds a reference on, or NULL */
	struct dlock_election *e;
	dlock_acquire_options opts;    /* as the current version, read from the caller's */
	uint64_t cancel_seq;
	int64_t lease_ms;
	char *text;                    /* the name, prefix or value it was given (copied), or NULL */
	union op_done done;
	void *ud;
	dlock_status st;
	char msg[DLOCK_ERROR_MAX];
	dlock_lock_info *info;
	dlock_lock_list *list;
	size_t broken;
	uint64_t term;
	dlock_leader *leader;
	/* A release, extend or check made with the driver's _start method (a driver on the loop). */
	struct dlock_call call;
	dlock_error err;
	int was_lost;
	int64_t sent, lease_ns;
};

/* ------------------------------------------------------------ checks */

/* Record `msg` as the caller's error and return `st` (in this file, so that its callers' paths are plain). */
static dlock_status fail(struct dlock_client *c, dlock_status st, const char *msg)
{
	dlock_client_fail(c, st, msg);
	return st;
}

dlock_status dlock_loop_refuse_blocking(struct dlock_client *c, const char *call)
{
	/* The loop's thread first: only it writes close_finished and loop_inline, and a worker reads neither. */
	if (!c || !c->reactor || !dlock_reactor_is_loop_thread(c->reactor) || c->close_finished || c->loop_inline)
		return DLOCK_OK;
	char buf[200];
	snprintf(buf, sizeof buf, "%s would block the loop of this loop client: use its _async form", call);
	return fail(c, DLOCK_EDEADLK, buf);
}

dlock_status dlock_loop_refuse_unopened(struct dlock_client *c, const char *call)
{
	if (!c || !c->reactor)
		return DLOCK_OK;
	pthread_mutex_lock(&c->mu);
	int opening = c->opening;
	dlock_status failed = c->open_status;
	pthread_mutex_unlock(&c->mu);
	if (!opening && failed == DLOCK_OK)
		return DLOCK_OK;
	char buf[200];
	snprintf(buf, sizeof buf, opening ? "%s: the client is still opening: call it from the open's callback on"
	                                  : "%s: the client did not open", call);
	return fail(c, opening ? DLOCK_EINVAL : failed, buf);
}

int dlock_async_live(const struct dlock_client *c)
{
	return c && c->reactor && !c->close_finished && !c->loop_inline;
}

/* Whether a start call may go on: a loop client, its thread, not closing.  Once the client is
 * closing (or closed) the call fails at once with `closed_st`, what its blocking form would say then. */
static dlock_status may_start(struct dlock_client *c, const char *call, dlock_status closed_st)
{
	char buf[200];
	if (!c->was_loop) {
		snprintf(buf, sizeof buf, "%s: not a loop client (open it with dlock_client_open_async)", call);
		return fail(c, DLOCK_EINVAL, buf);
	}
	if (c->async_closing || c->closing || !c->reactor) {
		snprintf(buf, sizeof buf, "%s: the client is %s", call,
		         closed_st == DLOCK_ENOTHELD ? "closed; its locks were released" : "closing");
		return fail(c, closed_st, buf);
	}
	if (!dlock_reactor_is_loop_thread(c->reactor)) {
		snprintf(buf, sizeof buf, "%s: a loop client is used only from its loop's thread", call);
		return fail(c, DLOCK_EDEADLK, buf);
	}
	return DLOCK_OK;
}

/* ------------------------------------------------------------ the client's own */

dlock_status dlock_async_open_run(struct dlock_client *c, char *msg, size_t len)
{
	dlock_error err = { "" };
	dlock_status st = dlock_client_connect(c, &err);
	snprintf(msg, len, "%s", err.msg);
	return st;
}

static void open_done(struct dlock_client *c, dlock_status st)
{
	pthread_mutex_lock(&c->mu);
	c->opening = 0;
	c->open_status = st;
	pthread_mutex_unlock(&c->mu);
}

dlock_status dlock_async_close_run(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	while (c->ops_working > 0)
		pthread_cond_wait(&c->cond, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return dlock_client_close_now(c);
}

static void close_done(struct dlock_client *c)
{
	c->close_finished = 1;
}

void dlock_async_free_now(struct dlock_lock *l)
{
	struct dlock_client *c = l->client;
	if (dlock_async_free_submit(l) != DLOCK_OK)
		dlock_client_logf(c, DLOCK_LOG_ERROR, "no worker thread to free a handle: it is leaked");
}

void dlock_async_unref(struct dlock_lock *l)
{
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	unsigned refs = --l->async_refs;
	int go = refs == 0 && l->free_requested;
	pthread_mutex_unlock(&c->mu);
	if (go)
		dlock_async_free_now(l);
}

/* ------------------------------------------------------------ running */

static void op_free(struct dlock_op *op)
{
	free(op->text);
	free(op);
}

/* On the loop: the callback, then what the operation still held. */
static void op_finish(struct dlock_reactor_item *item)
{
	struct dlock_op *op = (struct dlock_op *)((char *)item - offsetof(struct dlock_op, item));
	struct dlock_client *c = op->c;
	if (op->st != DLOCK_OK)
		dlock_client_fail(c, op->st, op->msg);
	c->callbacks_depth++;
	switch (op->kind) {
	case OP_OPEN:
		open_done(c, op->st);
		op->done.open(c, op->st, op->ud);
		break;
	case OP_ACQUIRE: case OP_RELEASE: case OP_EXTEND: case OP_CHECK:
		op->done.lock(op->lock, op->st, op->ud);
		break;
	case OP_INSPECT:
		op->done.inspect(c, op->st, op->info, op->ud);
		break;
	case OP_LIST:
		op->done.list(c, op->st, op->list, op->ud);
		break;
	case OP_BREAK:
		op->done.brk(c, op->st, op->broken, op->ud);
		break;
	case OP_CAMPAIGN: case OP_PROCLAIM: case OP_RESIGN:
		op->done.election(op->e, op->st, op->term, op->ud);
		break;
	case OP_LEADER:
		op->done.leader(op->e, op->st, op->leader, op->ud);
		break;
	case OP_CLOSE:
		if (c->loop_io && c->backend) { /* a driver on the loop is closed on it, before the callback */
			c->driver->close(c->backend);
			c->backend = NULL;
		}
		if (op->done.close)
			op->done.close(op->st, op->ud);
		break;
	case OP_FREE:
		break;
	}
	c->callbacks_depth--;
	if (op->lock)
		dlock_async_unref(op->lock);
	if (op->kind == OP_OPEN)
		dlock_async_release_waiters(c, op->st, op->msg);
	if (op->kind == OP_CLOSE)
		close_done(c);
	if (c->loop_io && (op->kind == OP_RELEASE || op->kind == OP_BREAK || op->kind == OP_FREE))
		dlock_loop_kick(c); /* a name of this client may be free for its acquisitions waiting on the loop */
	op_free(op);
}

/* The blocking call of `op`, the same on a worker and, for a native client, on the loop: its status,
 * and on failure the client's text in op->msg.  A free has no outcome to keep. */
static dlock_status op_call(struct dlock_op *op)
{
	struct dlock_client *c = op->c;
	dlock_status st = DLOCK_OK;
	switch (op->kind) {
	case OP_OPEN: return dlock_async_open_run(c, op->msg, sizeof op->msg);
	case OP_ACQUIRE: st = dlock_acquire_since(op->lock, &op->opts, op->cancel_seq); break;
	case OP_RELEASE: st = dlock_release(op->lock); break;
	case OP_EXTEND: st = dlock_extend(op->lock, op->lease_ms); break;
	case OP_CHECK: st = dlock_check(op->lock); break;
	case OP_INSPECT: st = dlock_inspect(c, op->text, &op->info); break;
	case OP_LIST: st = dlock_list(c, op->text, &op->list); break;
	case OP_BREAK: st = dlock_break(c, op->text, &op->broken); break;
	case OP_CAMPAIGN: st = dlock_campaign_since(op->e, op->text, &op->opts, &op->term, op->cancel_seq); break;
	case OP_PROCLAIM: st = dlock_proclaim(op->e, op->text); break;
	case OP_RESIGN: st = dlock_resign(op->e); break;
	case OP_LEADER: st = dlock_election_leader(op->e, &op->leader); break;
	case OP_CLOSE: st = dlock_async_close_run(c); break;
	case OP_FREE:
		if (op->lock->free_election)
			dlock_election_free(op->lock->free_election);
		else
			dlock_lock_free(op->lock);
		return DLOCK_OK;
	}
	if (st != DLOCK_OK)
		snprintf(op->msg, sizeof op->msg, "%s", dlock_client_errmsg(c));
	return st;
}

/* On a worker: the blocking call. */
static void op_run(struct dlock_job *job)
{
	struct dlock_op *op = (struct dlock_op *)((char *)job - offsetof(struct dlock_op, job));
	struct dlock_client *c = op->c;
	op->st = op_call(op);
	if (op->kind == OP_FREE) { /* no callback, no `after`: done here */
		pthread_mutex_lock(&c->mu);
		dlock_async_work_done_locked(c);
		pthread_mutex_unlock(&c->mu);
		op_free(op);
	}
}

/* On the worker, once it counts as free again: post the outcome to the loop. */
static void op_post(struct dlock_job *job)
{
	struct dlock_op *op = (struct dlock_op *)((char *)job - offsetof(struct dlock_op, job));
	struct dlock_client *c = op->c;
	/* Post first, so that a close waiting for the workers is called back after this operation; the
	 * loop may free `op` as soon as it is posted. */
	struct dlock_reactor *r = c->reactor;
	int counted = op->kind != OP_CLOSE;
	pthread_mutex_lock(&c->mu);
	dlock_reactor_post(r, &op->item);
	if (counted)
		dlock_async_work_done_locked(c);
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

void dlock_async_complete_later(struct dlock_op *op, dlock_status st)
{
	op->st = st;
	op->item.run = op_finish;
	dlock_reactor_post(op->c->reactor, &op->item);
}

/* ------------------------------------------------------------ native */

/* The engine's answer for an acquisition or a campaign (loop_acquire.c), on the loop. */
static void native_acquired(void *arg, dlock_status st, const char *msg)
{
	struct dlock_op *op = arg;
	struct dlock_client *c = op->c;
	op->st = st;
	snprintf(op->msg, sizeof op->msg, "%s", msg ? msg : "");
	if (op->kind == OP_CAMPAIGN && st == DLOCK_OK) { /* the value, then the term, as dlock_campaign() */
		c->loop_inline++;
		st = dlock_proclaim(op->e, op->text);
		if (st != DLOCK_OK) {
			snprintf(op->msg, sizeof op->msg, "%s", dlock_client_errmsg(c));
			dlock_release(op->lock);
			op->st = st;
		} else if (dlock_lock_fencing_token(op->lock, &op->term) != DLOCK_OK) {
			op->term = 0;
		}
		c->loop_inline--;
	}
	op_finish(&op->item);
}

/* A native client's close, on the turn after the close was asked: the acquisitions it cancelled have
 * ended by then (their steps were posted first), so nothing of theirs is left with the driver. */
static void native_close(struct dlock_reactor_item *item)
{
	struct dlock_op *op = (struct dlock_op *)((char *)item - offsetof(struct dlock_op, item));
	op->c->loop_inline++;
	op->st = dlock_async_close_run(op->c);
	op->c->loop_inline--;
	op_finish(item);
}

/* Run `op` on the loop of a native client: its driver never waits, so the blocking call is made here,
 * and its callback comes on the next turn; an acquisition goes to the engine. */
static dlock_status native_run(struct dlock_op *op)
{
	struct dlock_client *c = op->c;
	if (op->kind == OP_ACQUIRE || op->kind == OP_CAMPAIGN)
		return dlock_loop_acquire_start(op->lock, &op->opts, op->cancel_seq, native_acquired, op);
	if (op->kind == OP_CLOSE) { /* after the steps of the acquisitions it cancelled, posted before it */
		op->item.run = native_close;
		dlock_reactor_post(c->reactor, &op->item);
		return DLOCK_OK;
	}
	c->loop_inline++;
	op->st = op_call(op);
	c->loop_inline--;
	if (op->kind == OP_FREE) {
		op_free(op);
		return DLOCK_OK;
	}
	dlock_reactor_post(c->reactor, &op->item);
	if (op->kind != OP_OPEN)
		dlock_loop_kick(c); /* a release, a break...: the local queue may move */
	return DLOCK_OK;
}

/* The end of a release, extend or check that the driver made on the loop: the core's part after the
 * driver call, then the callback (this runs from the loop's queue, never inside the start call). */
static void lock_call_ended(struct dlock_call *call, dlock_status st)
{
	struct dlock_op *op = (struct dlock_op *)((char *)call - offsetof(struct dlock_op, call));
	struct dlock_client *c = op->c;
	struct dlock_lock *l = op->lock;
	if (op->kind == OP_RELEASE)
		st = dlock_release_end(l, op->was_lost, st, op->err.msg);
	else if (op->kind == OP_EXTEND)
		st = dlock_extend_end(l, op->sent, op->lease_ns, st, op->err.msg);
	else
		st = dlock_check_end(l, op->sent, st, op->err.msg);
	op->st = st;
	if (st != DLOCK_OK)
		snprintf(op->msg, sizeof op->msg, "%s", dlock_client_errmsg(c));
	pthread_mutex_lock(&c->mu);
	dlock_async_work_done_locked(c);
	pthread_mutex_unlock(&c->mu);
	op_finish(&op->item);
}

/* A release, extend or check on the loop: 0 when it must go to a worker (it would wait, or needs
 * more than the one driver call), else 1 with the start's status (a decided answer is posted). */
static int lock_call_start(struct dlock_op *op, dlock_status *start_st)
{
	struct dlock_client *c = op->c;
	struct dlock_lock *l = op->lock;
	dlock_status st = DLOCK_OK;
	enum dlock_step step;
	if (op->kind == OP_RELEASE)
		step = dlock_release_begin(l, 1, &st, &op->was_lost);
	else if (op->kind == OP_EXTEND)
		step = dlock_extend_begin(l, op->lease_ms, 1, &st, &op->lease_ns);
	else
		step = dlock_check_begin(l, 1, &st);
	if (step == DLOCK_STEP_ELSEWHERE) {
		pthread_mutex_lock(&c->mu);
		int parked = l->loop_call; /* only the loop's thread sets and clears it: it is still out */
		if (parked) { /* after that call, rather than on a worker (dlock_async_call_ended_locked()) */
			op->next_waiting = l->loop_parked;
			l->loop_parked = op;
		}
		pthread_mutex_unlock(&c->mu);
		*start_st = DLOCK_OK;
		return parked;
	}
	*start_st = DLOCK_OK;
	if (step == DLOCK_STEP_DONE) {
		op->st = st;
		if (st != DLOCK_OK)
			snprintf(op->msg, sizeof op->msg, "%s", dlock_client_errmsg(c));
		dlock_reactor_post(c->reactor, &op->item);
		return 1;
	}
	pthread_mutex_lock(&c->mu);
	c->ops_working++; /* a close waits for the driver's answer */
	pthread_mutex_unlock(&c->mu);
	dlock_call_init(&op->call, c, lock_call_ended);
	op->err.msg[0] = '\0';
	op->sent = dlock_monotonic_ns();
	if (op->kind == OP_RELEASE)
		st = c->driver->release_start(c->backend, l->lk, &op->err, &op->call);
	else if (op->kind == OP_EXTEND)
		st = c->driver->extend_start(c->backend, l->lk, op->lease_ns / 1000000, &op->err, &op->call);
	else
		st = c->driver->check_start(c->backend, l->lk, &op->err, &op->call);
	if (st != DLOCK_OK) /* not started: end it as the driver's answer, on the next turn */
		dlock_call_done(&op->call, st);
	return 1;
}

/* The end of a close on the loop (loop_close.c): its callback, which closes the driver. */
static void loop_closed(void *arg, dlock_status st)
{
	dlock_async_complete_later(arg, st);
}

/* A client whose driver runs on the loop (loop_io): its open on the loop (blocking: the driver
 * connects within its open_timeout), its acquisitions through the engine and the driver's
 * try_acquire_start(), its releases, extends and checks through the driver's _start methods where
 * they need nothing else; 0 when `op` goes to a worker as on any loop client. */
static int loop_io_run(struct dlock_op *op, dlock_status *st)
{
	struct dlock_client *c = op->c;
	switch (op->kind) {
	case OP_ACQUIRE:
		*st = dlock_loop_acquire_start(op->lock, &op->opts, op->cancel_seq, native_acquired, op);
		return 1;
	case OP_RELEASE: case OP_EXTEND: case OP_CHECK:
		return lock_call_start(op, st);
	case OP_CLOSE:
		*st = DLOCK_OK;
		return dlock_loop_close_start(c, loop_closed, op);
	case OP_OPEN:
		op->st = op_call(op);
		dlock_reactor_post(c->reactor, &op->item);
		*st = DLOCK_OK;
		return 1;
	default:
		return 0;
	}
}

/* Hand `op` to a worker; c->mu held. */
static dlock_status to_worker_locked(struct dlock_op *op)
{
	struct dlock_client *c = op->c;
	if (op->kind != OP_CLOSE)
		c->ops_working++;
	pthread_mutex_unlock(&c->mu);
	dlock_status st = dlock_workers_submit(c->workers, &op->job);
	pthread_mutex_lock(&c->mu);
	if (st != DLOCK_OK && op->kind != OP_CLOSE)
		dlock_async_work_done_locked(c);
	return st;
}

/* A parked release, extend or check goes on, on the loop (or to a worker, for what would still wait). */
static void op_resume(struct dlock_reactor_item *item)
{
	struct dlock_op *op = (struct dlock_op *)((char *)item - offsetof(struct dlock_op, item));
	struct dlock_client *c = op->c;
	dlock_status st = DLOCK_OK;
	op->item.run = op_finish;
	if (lock_call_start(op, &st))
		return;
	pthread_mutex_lock(&c->mu);
	st = to_worker_locked(op);
	pthread_mutex_unlock(&c->mu);
	if (st != DLOCK_OK) { /* it was started: its callback says so */
		snprintf(op->msg, sizeof op->msg, "cannot start a worker thread for the operation");
		dlock_async_complete_later(op, st);
	}
}

void dlock_async_call_ended_locked(struct dlock_lock *l)
{
	struct dlock_op *op = l->loop_parked, *back = NULL;
	l->loop_parked = NULL;
	while (op) { /* parked newest first: go on in the order they came */
		struct dlock_op *next = op->next_waiting;
		op->next_waiting = back;
		back = op;
		op = next;
	}
	for (op = back; op; op = op->next_waiting) {
		op->item.run = op_resume;
		dlock_reactor_post(l->client->reactor, &op->item);
	}
}

/* Hand `op` to a worker, or keep it until the open completes.  On the loop's thread. */
dlock_status dlock_async_submit(struct dlock_op *op)
{
	struct dlock_client *c = op->c;
	op->job.run = op_run;
	op->job.after = op_post;
	op->item.run = op_finish;
	pthread_mutex_lock(&c->mu);
	if (op->lock)
		op->lock->async_refs++;
	if (c->opening && op->kind != OP_OPEN) {
		struct dlock_op **pp = &c->open_waiters;
		while (*pp)
			pp = &(*pp)->next_waiting;
		op->next_waiting = NULL;
		*pp = op;
		pthread_mutex_unlock(&c->mu);
		return DLOCK_OK;
	}
	if (c->loop_native || c->loop_io) {
		pthread_mutex_unlock(&c->mu);
		dlock_status nst = DLOCK_OK;
		int ran = c->loop_native ? (nst = native_run(op), 1) : loop_io_run(op, &nst);
		if (ran) {
			if (nst != DLOCK_OK && op->lock) {
				pthread_mutex_lock(&c->mu);
				op->lock->async_refs--;
				pthread_mutex_unlock(&c->mu);
			}
			return nst;
		}
		pthread_mutex_lock(&c->mu); /* to a worker, below */
	}
	dlock_status st = to_worker_locked(op);
	if (st != DLOCK_OK && op->lock)
		op->lock->async_refs--;
	pthread_mutex_unlock(&c->mu);
	return st != DLOCK_OK ? fail(c, st, "cannot start a worker thread for the operation") : DLOCK_OK;
}

/* The open completed (async_client.c): let the waiting operations go, or fail them with its status. */
void dlock_async_release_waiters(struct dlock_client *c, dlock_status open_st, const char *why)
{
	pthread_mutex_lock(&c->mu);
	struct dlock_op *op = c->open_waiters;
	c->open_waiters = NULL;
	pthread_mutex_unlock(&c->mu);
	while (op) {
		struct dlock_op *next = op->next_waiting;
		if (op->lock) { /* dlock_async_submit() takes it again */
			pthread_mutex_lock(&c->mu);
			op->lock->async_refs--;
			pthread_mutex_unlock(&c->mu);
		}
		dlock_status st = open_st;
		if (st == DLOCK_OK || op->kind == OP_CLOSE)
			st = dlock_async_submit(op);
		if (st != DLOCK_OK) { /* called back on the next turn, as any operation */
			if (op->lock) {
				pthread_mutex_lock(&c->mu);
				op->lock->async_refs++;
				pthread_mutex_unlock(&c->mu);
			}
			snprintf(op->msg, sizeof op->msg, "%s", why);
			dlock_async_complete_later(op, st);
		}
		op = next;
	}
}

/* A new operation of `kind` on `c` (NULL out of memory: the client's error says so). */
struct dlock_op *dlock_async_op_new(struct dlock_client *c, int kind, const char *text)
{
	struct dlock_op *op = calloc(1, sizeof *op);
	if (op && text && !(op->text = strdup(text))) {
		free(op);
		op = NULL;
	}
	if (!op) {
		dlock_client_fail(c, DLOCK_ENOMEM, "out of memory");
		return NULL;
	}
	op->c = c;
	op->kind = (enum op_kind)kind;
	op->cancel_seq = DLOCK_CANCEL_SEQ_NOW;
	return op;
}

/* Set the close's callback (async_client.c). */
void dlock_async_op_set_close(struct dlock_op *op, dlock_close_fn done, void *userdata)
{
	op->done.close = done;
	op->ud = userdata;
}

/* Set the open's callback (async_client.c). */
void dlock_async_op_set_open(struct dlock_op *op, dlock_open_fn done, void *userdata)
{
	op->done.open = done;
	op->ud = userdata;
}

/* A handle's free (async_client.c): no callback. */
dlock_status dlock_async_free_submit(struct dlock_lock *l)
{
	struct dlock_op *op = dlock_async_op_new(l->client, OP_FREE, NULL);
	if (!op)
		return DLOCK_ENOMEM;
	op->lock = l;
	op->job.run = op_run;
	struct dlock_client *c = l->client;
	if (c->loop_native)
		return native_run(op);
	pthread_mutex_lock(&c->mu);
	/* A driver on the loop frees an idle handle there (its lock_fini() does not block); a held one is
	 * released on a worker first. */
	int idle = c->loop_io && !l->held && !l->busy && !l->loop_call && !l->callback_running && !l->waits &&
	           !l->lingering;
	if (idle) {
		pthread_mutex_unlock(&c->mu);
		return native_run(op);
	}
	c->ops_working++;
	pthread_mutex_unlock(&c->mu);
	dlock_status st = dlock_workers_submit(c->workers, &op->job);
	if (st != DLOCK_OK) {
		pthread_mutex_lock(&c->mu);
		dlock_async_work_done_locked(c);
		pthread_mutex_unlock(&c->mu);
		op_free(op);
	}
	return st;
}

/* ------------------------------------------------------------ start calls */

static dlock_status start_on_lock(dlock_lock *l, int kind, const char *call, dlock_lock_done_fn done,
                                  void *userdata, struct dlock_op **out)
{
	*out = NULL;
	if (!l || !done)
		return l ? fail(l->client, DLOCK_EINVAL, "the callback must not be NULL") : DLOCK_EINVAL;
	dlock_status st = may_start(l->client, call, kind == OP_ACQUIRE ? DLOCK_ECANCELED : DLOCK_ENOTHELD);
	if (st != DLOCK_OK)
		return st;
	if (l->free_requested)
		return fail(l->client, DLOCK_EINVAL, "the handle is being freed");
	struct dlock_op *op = dlock_async_op_new(l->client, kind, NULL);
	if (!op)
		return DLOCK_ENOMEM;
	op->lock = l;
	op->done.lock = done;
	op->ud = userdata;
	*out = op;
	return DLOCK_OK;
}

static dlock_status submit_or_free(struct dlock_op *op)
{
	dlock_status st = dlock_async_submit(op);
	if (st != DLOCK_OK)
		op_free(op);
	return st;
}

dlock_status dlock_acquire_async(dlock_lock *l, const dlock_acquire_options *opts, dlock_lock_done_fn done,
                                 void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_lock(l, OP_ACQUIRE, "dlock_acquire_async", done, userdata, &op);
	if (st != DLOCK_OK)
		return st;
	const char *why = "";
	st = dlock_acquire_check(l, opts, &op->opts, &why);
	if (st != DLOCK_OK) {
		op_free(op);
		return fail(l->client, st, why);
	}
	op->cancel_seq = dlock_lock_cancel_seq(l);
	return submit_or_free(op);
}

dlock_status dlock_release_async(dlock_lock *l, dlock_lock_done_fn done, void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_lock(l, OP_RELEASE, "dlock_release_async", done, userdata, &op);
	return st == DLOCK_OK ? submit_or_free(op) : st;
}

dlock_status dlock_extend_async(dlock_lock *l, int64_t lease_ms, dlock_lock_done_fn done, void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_lock(l, OP_EXTEND, "dlock_extend_async", done, userdata, &op);
	if (st != DLOCK_OK)
		return st;
	op->lease_ms = lease_ms;
	return submit_or_free(op);
}

dlock_status dlock_check_async(dlock_lock *l, dlock_lock_done_fn done, void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_lock(l, OP_CHECK, "dlock_check_async", done, userdata, &op);
	return st == DLOCK_OK ? submit_or_free(op) : st;
}

/* Start an operation of the client: check, copy `text`, set its callback, submit. */
static dlock_status start_on_client(dlock_client *c, int kind, const char *call, union op_done done, int has_done,
                                    void *userdata, const char *text, int text_needed)
{
	if (!c)
		return DLOCK_EINVAL;
	if (!has_done || (text_needed && !text)) {
		char buf[160];
		snprintf(buf, sizeof buf, "%s: %s must not be NULL", call, has_done ? "the name" : "the callback");
		return fail(c, DLOCK_EINVAL, buf);
	}
	dlock_status st = may_start(c, call, DLOCK_ECLOSED);
	if (st != DLOCK_OK)
		return st;
	struct dlock_op *op = dlock_async_op_new(c, kind, text);
	if (!op)
		return DLOCK_ENOMEM;
	op->done = done;
	op->ud = userdata;
	return submit_or_free(op);
}

dlock_status dlock_inspect_async(dlock_client *c, const char *name, dlock_inspect_fn done, void *userdata)
{
	return start_on_client(c, OP_INSPECT, "dlock_inspect_async", (union op_done){ .inspect = done }, done != NULL,
	                       userdata, name, 1);
}

dlock_status dlock_list_async(dlock_client *c, const char *name_prefix, dlock_list_fn done, void *userdata)
{
	return start_on_client(c, OP_LIST, "dlock_list_async", (union op_done){ .list = done }, done != NULL,
	                       userdata, name_prefix, 0);
}

dlock_status dlock_break_async(dlock_client *c, const char *name, dlock_break_fn done, void *userdata)
{
	return start_on_client(c, OP_BREAK, "dlock_break_async", (union op_done){ .brk = done }, done != NULL,
	                       userdata, name, 1);
}

/* Start an operation of an election: check, copy `value`, set its callback; the caller submits. */
static dlock_status start_on_election(dlock_election *e, int kind, const char *call, union op_done done,
                                      int has_done, void *userdata, const char *value, struct dlock_op **out)
{
	*out = NULL;
	if (!e)
		return DLOCK_EINVAL;
	struct dlock_lock *l = dlock_election_lock(e);
	if (!has_done)
		return fail(l->client, DLOCK_EINVAL, "the callback must not be NULL");
	dlock_status st = may_start(l->client, call, kind == OP_CAMPAIGN ? DLOCK_ECANCELED
	                                             : kind == OP_LEADER ? DLOCK_ECLOSED : DLOCK_ENOTHELD);
	if (st != DLOCK_OK)
		return st;
	if (l->free_requested)
		return fail(l->client, DLOCK_EINVAL, "the election is being freed");
	if (value && strnlen(value, DLOCK_VALUE_MAX + 1) > DLOCK_VALUE_MAX) {
		char buf[96];
		snprintf(buf, sizeof buf, "a leader's value is at most %d bytes", DLOCK_VALUE_MAX);
		return fail(l->client, DLOCK_EINVAL, buf);
	}
	struct dlock_op *op = dlock_async_op_new(l->client, kind, value);
	if (!op)
		return DLOCK_ENOMEM;
	op->e = e;
	op->lock = l;
	op->done = done;
	op->ud = userdata;
	*out = op;
	return DLOCK_OK;
}

dlock_status dlock_campaign_async(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                                  dlock_election_done_fn done, void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_election(e, OP_CAMPAIGN, "dlock_campaign_async", (union op_done){ .election = done },
	                                    done != NULL, userdata, value ? value : "", &op);
	if (st != DLOCK_OK)
		return st;
	const char *why = "";
	st = dlock_campaign_check(e, opts, &op->opts, &why);
	if (st != DLOCK_OK) {
		struct dlock_client *c = op->c;
		op_free(op);
		return fail(c, st, why);
	}
	op->cancel_seq = dlock_lock_cancel_seq(op->lock);
	return submit_or_free(op);
}

dlock_status dlock_proclaim_async(dlock_election *e, const char *value, dlock_election_done_fn done,
                                  void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_election(e, OP_PROCLAIM, "dlock_proclaim_async", (union op_done){ .election = done },
	                                    done != NULL, userdata, value ? value : "", &op);
	return st == DLOCK_OK ? submit_or_free(op) : st;
}

dlock_status dlock_resign_async(dlock_election *e, dlock_election_done_fn done, void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_election(e, OP_RESIGN, "dlock_resign_async", (union op_done){ .election = done },
	                                    done != NULL, userdata, NULL, &op);
	return st == DLOCK_OK ? submit_or_free(op) : st;
}

dlock_status dlock_election_leader_async(dlock_election *e, dlock_leader_done_fn done, void *userdata)
{
	struct dlock_op *op;
	dlock_status st = start_on_election(e, OP_LEADER, "dlock_election_leader_async", (union op_done){ .leader = done },
	                                    done != NULL, userdata, NULL, &op);
	return st == DLOCK_OK ? submit_or_free(op) : st;
}
