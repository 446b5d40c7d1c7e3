/*
 * Acquisitions of a native loop client (DLOCK_FEATURE_LOOP_NATIVE: its
 * driver is inline, DLOCK_FACT_INLINE), and of a loop client whose driver
 * runs on the loop (DLOCK_FACT_LOOP_IO): the blocking acquisition of
 * lock.c and retry.c as a state machine the loop runs, with no thread.
 *
 * One acquisition: admitted (kinds, reentry) like a blocking one, queued
 * in its name's local FIFO, then, when dlock_queue_may_go() lets it,
 * contending: one try_acquire() per step, called on the loop's thread (a
 * driver on the loop: try_acquire_start(), whose end is the next step;
 * meanwhile wake-ups, a cancel and the deadline wait for that answer, and
 * a grant that comes with it wins over a cancel).
 * Between steps it waits on the reactor — for the driver's wake-up
 * (dlock_wait_wake(), which posts this acquisition's step to the loop from
 * whichever thread calls it), a backoff or the driver's after_ms (a timer),
 * the deadline (the same timer), dlock_cancel() (a wake-up too), or a turn
 * in the local queue (dlock_loop_kick(), after anything that changes who
 * holds or waits).  The first step is always posted, so the start call
 * never calls back.
 *
 * Ownership: the acquisition is this file's from start to its callback; a
 * step posted when it has already finished frees it (it may only go once
 * nothing of the loop's can still reach it).  Threads: the loop's, except
 * wake_posted()'s poster (any thread, under the wait's mutex).  Errors: the
 * callback's status and message, as dlock_acquire() would return them.
 */
#include "async.h"
#include "reactor.h"
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>

#define NS_PER_MS 1000000LL

struct loop_acq {
	struct dlock_reactor_item step;   /* posted by wake-ups and kicks; first member */
	struct dlock_reactor_timer timer; /* the deadline, or the next attempt */
	struct dlock_wait w;
	struct dlock_queued q;
	struct dlock_acquire_params p;
	struct dlock_lock *l;
	struct dlock_backoff backoff;
	dlock_error err;
	int step_posted;    /* under w.mu: `step` is in the reactor's queue */
	int contending;     /* inside the driver's attempts */
	int armed;          /* the driver armed a wake-up: disarm() at the end */
	int done;           /* called back: freed by the step still posted, if one is */
	int decided;        /* decided at its start (a reentry, a refusal): its first step calls back */
	int counted;        /* counted in c->ops_working (a driver on the loop): a close waits for it */
	int in_flight;      /* a try_acquire_start() has not ended: steps wait for its end */
	int stepped;        /* a step came meanwhile (a wake-up, the deadline): the answer does not sleep */
	struct dlock_call call; /* that call (a driver on the loop, contract 9) */
	dlock_retry r;      /* its out-parameters */
	dlock_acquired acq;
	dlock_status decided_st;
	unsigned kick_gen;  /* the last kick that stepped it */
	int64_t started_ns;
	dlock_status last_st; /* the last attempt's answer (EBUSY before any): kept at the deadline if transient */
	struct loop_acq *next; /* the client's acquisitions in progress (kicks) */
	void (*cb)(void *arg, dlock_status st, const char *msg);
	void *arg;
};

static void advance(struct loop_acq *a);

/* The wait's wake-up, under w.mu, from any thread: post one step. */
static void wake_posted(void *arg)
{
	struct loop_acq *a = arg;
	if (a->step_posted)
		return;
	a->step_posted = 1;
	dlock_reactor_post(a->l->client->reactor, &a->step);
}

static void run_step(struct dlock_reactor_item *item)
{
	struct loop_acq *a = (struct loop_acq *)item;
	pthread_mutex_lock(&a->w.mu);
	a->step_posted = 0;
	pthread_mutex_unlock(&a->w.mu);
	if (a->decided && !a->done) {
		a->done = 1;
		a->cb(a->arg, a->decided_st, a->err.msg);
	}
	if (a->done) {
		dlock_wait_destroy(&a->w);
		free(a);
		return;
	}
	advance(a);
}

static void run_timer(struct dlock_reactor_timer *t)
{
	advance((struct loop_acq *)((char *)t - offsetof(struct loop_acq, timer)));
}

/* ------------------------------------------------------------ the end */

/* Unlink `a` from the client's acquisitions in progress.  c->mu held. */
static void unlink_locked(struct dlock_client *c, struct loop_acq *a)
{
	struct loop_acq **pp = &c->loop_acquires;
	while (*pp && *pp != a)
		pp = &(*pp)->next;
	if (*pp)
		*pp = a->next;
}

static void finish(struct loop_acq *a, dlock_status st)
{
	struct dlock_lock *l = a->l;
	struct dlock_client *c = l->client;
	if (a->armed)
		dlock_driver_disarm_of(c->driver)(c->backend, l->lk, &a->w);
	dlock_wait_on_wake(&a->w, NULL, NULL); /* no more steps posted from here on */
	dlock_reactor_timer_clear(c->reactor, &a->timer);
	pthread_mutex_lock(&c->mu);
	if (a->contending) {
		l->entry->contending = 0;
		l->contending = 0;
		c->stats.contending--;
		l->lost_early = 0;
	}
	dlock_queue_remove(l->entry, &a->q);
	struct dlock_wait **pp = &l->waits;
	while (*pp && *pp != &a->w)
		pp = &(*pp)->next;
	if (*pp)
		*pp = a->w.next;
	while (a->w.pins > 0) /* a canceller on another thread still uses the wait, briefly */
		pthread_cond_wait(&c->cond, &c->mu);
	unlink_locked(c, a);
	if (st == DLOCK_EBUSY && a->p.wait_ms != 0)
		st = DLOCK_ETIMEDOUT;
	char buf[64];
	const char *msg = "";
	if (st != DLOCK_OK)
		msg = a->err.msg[0] ? a->err.msg : dlock_acquire_failure_text(st, buf, sizeof buf, a->p.wait_ms);
	if (a->counted)
		dlock_async_work_done_locked(c);
	pthread_mutex_unlock(&c->mu);
	a->done = 1;
	a->cb(a->arg, st, msg);
	dlock_loop_kick(c); /* the name's queue changed */
	pthread_mutex_lock(&a->w.mu);
	int posted = a->step_posted;
	pthread_mutex_unlock(&a->w.mu);
	if (!posted) {
		dlock_wait_destroy(&a->w);
		free(a);
	}
}

/* Cancelled (dlock_cancel(), the client closing): the message says so, not the last attempt's answer. */
static void finish_cancelled(struct loop_acq *a)
{
	dlock_error_set(&a->err, DLOCK_ECANCELED, "%s://: acquire cancelled", a->l->client->driver->scheme);
	finish(a, DLOCK_ECANCELED);
}

/* The deadline passed: a busy lock times out (EBUSY, made ETIMEDOUT by finish()); a transient failure
 * keeps its own status and message, as in the blocking loop (retry.c). */
static void finish_deadline(struct loop_acq *a)
{
	finish(a, a->last_st);
}

/* ------------------------------------------------------------ steps */

static void wait_until(struct loop_acq *a, int64_t due)
{
	if (due > a->w.deadline_ns)
		due = a->w.deadline_ns;
	if (due == INT64_MAX)
		dlock_reactor_timer_clear(a->l->client->reactor, &a->timer);
	else if (dlock_reactor_timer_set(a->l->client->reactor, &a->timer, due) != DLOCK_OK)
		finish(a, dlock_error_set(&a->err, DLOCK_ENOMEM, "out of memory"));
}

/* What one attempt answered (`st`, with a->r, a->acq and a->err): held, given up, or the next wait. */
static void attempted(struct loop_acq *a, dlock_status st)
{
	struct dlock_lock *l = a->l;
	struct dlock_client *c = l->client;
	int can_disarm = dlock_driver_disarm_of(c->driver) != NULL;
	a->armed |= a->r.armed && can_disarm;
	a->last_st = st;
	if (st == DLOCK_OK) { /* also when a cancel came meanwhile: the grant won */
		pthread_mutex_lock(&c->mu);
		dlock_become_holder_locked(l, &a->p, &a->acq, a->started_ns);
		pthread_mutex_unlock(&c->mu);
		finish(a, DLOCK_OK);
		return;
	}
	if ((st != DLOCK_EBUSY && !a->r.transient) || a->w.try_once) {
		finish(a, st);
		return;
	}
	if (dlock_wait_cancelled(&a->w) != DLOCK_OK || c->closing) {
		finish_cancelled(a);
		return;
	}
	int64_t sleep_ns = dlock_retry_sleep_ns(&a->r, a->r.armed && can_disarm, &a->backoff);
	if (a->stepped) /* woken while the answer was on its way: the release may have come after it */
		sleep_ns = 0;
	a->stepped = 0;
	wait_until(a, sleep_ns < 0 ? INT64_MAX : dlock_monotonic_ns() + sleep_ns);
}

/* The end of a try_acquire_start() (loop_io.c posts it after the driver's callback). */
static void attempt_ended(struct dlock_call *call, dlock_status st)
{
	struct loop_acq *a = (struct loop_acq *)((char *)call - offsetof(struct loop_acq, call));
	a->in_flight = 0;
	attempted(a, st);
}

static void advance(struct loop_acq *a)
{
	struct dlock_lock *l = a->l;
	struct dlock_client *c = l->client;
	if (a->in_flight) { /* its end comes, and decides: a cancel or the deadline waits for the server's answer */
		a->stepped = 1;
		return;
	}
	int64_t now = dlock_monotonic_ns();
	if (dlock_wait_cancelled(&a->w) != DLOCK_OK || c->closing) {
		finish_cancelled(a);
		return;
	}
	pthread_mutex_lock(&c->mu);
	if (!a->contending) {
		if (!dlock_queue_may_go(l->entry, &a->q)) {
			pthread_mutex_unlock(&c->mu);
			if (a->w.try_once)
				finish(a, DLOCK_EBUSY);
			else if (now >= a->w.deadline_ns)
				finish(a, DLOCK_ETIMEDOUT);
			else
				wait_until(a, INT64_MAX); /* a kick brings it back, or the deadline */
			return;
		}
		a->contending = 1;
		l->entry->contending = 1;
		l->contending = 1;
		l->lost_early = 0;
		c->stats.server_acquires++;
		c->stats.contending++;
		a->started_ns = now;
	} else if (now >= a->w.deadline_ns && !a->w.try_once) {
		pthread_mutex_unlock(&c->mu);
		finish_deadline(a);
		return;
	}
	pthread_mutex_unlock(&c->mu);

	a->r = (dlock_retry){ .after_ms = -1, .armed = 0, .transient = 0 };
	a->acq = (dlock_acquired){ 0, 0, 0 };
	if (c->loop_io) { /* the driver answers later, through attempt_ended() */
		dlock_call_init(&a->call, c, attempt_ended);
		a->in_flight = 1;
		dlock_status st = c->driver->try_acquire_start(c->backend, l->lk, a->p.lease_ms, &a->w, &a->r, &a->acq,
		                                               &a->err, &a->call);
		if (st != DLOCK_OK) { /* not started: no end will come */
			a->in_flight = 0;
			attempted(a, st);
		}
		return;
	}
	dlock_status st = dlock_driver_try_acquire_of(c->driver)(c->backend, l->lk, a->p.lease_ms, &a->w, &a->r,
	                                                         &a->acq, &a->err);
	attempted(a, st);
}

/* ------------------------------------------------------------ start, kick */

dlock_status dlock_loop_acquire_start(struct dlock_lock *l, const dlock_acquire_options *opts, uint64_t cancel_seq,
                                      void (*cb)(void *arg, dlock_status st, const char *msg), void *arg)
{
	struct dlock_client *c = l->client;
	struct loop_acq *a = calloc(1, sizeof *a);
	if (!a)
		return dlock_client_fail(c, DLOCK_ENOMEM, "out of memory");
	const char *why = "";
	dlock_status st = dlock_acquire_params_resolve(l, opts, &a->p, &why);
	if (st != DLOCK_OK) {
		free(a);
		return dlock_client_fail(c, st, why);
	}
	a->l = l;
	a->last_st = DLOCK_EBUSY;
	a->cb = cb;
	a->arg = arg;
	a->step.run = run_step;
	a->timer.run = run_timer;
	int64_t deadline = a->p.wait_ms < 0 ? INT64_MAX : dlock_monotonic_ns() + a->p.wait_ms * NS_PER_MS;
	dlock_wait_init(&a->w, deadline, a->p.wait_ms == 0, a->p.fencing, a->p.mode);
	a->q.lock = l;
	a->q.mode = a->p.mode;

	pthread_mutex_lock(&c->mu);
	int decided = 0;
	if (c->closing) {
		decided = 1;
		st = dlock_error_set(&a->err, DLOCK_ECANCELED, "client is closing");
	} else if (cancel_seq != DLOCK_CANCEL_SEQ_NOW && cancel_seq != l->cancel_seq) {
		decided = 1;
		st = dlock_error_set(&a->err, DLOCK_ECANCELED, "acquire cancelled (dlock_cancel or client closing)");
	} else if (dlock_acquire_admit_locked(l, &a->p, &st)) {
		decided = 1;
		if (st != DLOCK_OK)
			dlock_error_set(&a->err, st, "%s", dlock_client_errmsg(c));
	}
	if (!decided) {
		a->w.next = l->waits;
		l->waits = &a->w;
		dlock_queue_push(l->entry, &a->q);
		a->next = c->loop_acquires;
		c->loop_acquires = a;
		a->counted = c->loop_io; /* the close (on a worker) waits for it before the driver's release */
		c->ops_working += (unsigned)a->counted;
	}
	pthread_mutex_unlock(&c->mu);
	if (decided) { /* reentry, a refusal: still called back from the loop, not from here */
		a->decided = 1;
		a->decided_st = st;
		a->step_posted = 1;
		dlock_reactor_post(c->reactor, &a->step);
		return DLOCK_OK;
	}
	dlock_wait_on_wake(&a->w, wake_posted, a);
	dlock_wait_wake(&a->w); /* the first step, on the loop's next turn */
	return DLOCK_OK;
}

static void run_kick(struct dlock_reactor_item *item)
{
	struct dlock_client *c = (struct dlock_client *)((char *)item - offsetof(struct dlock_client, loop_kick));
	pthread_mutex_lock(&c->mu);
	c->loop_kick_posted = 0;
	pthread_mutex_unlock(&c->mu);
	/* Step each acquisition waiting for its turn, once: a step may finish one (and free it) or start
	 * one contending, so look again from the head after each, skipping those this kick has seen. */
	unsigned gen = ++c->loop_kick_gen;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		struct loop_acq *a = c->loop_acquires;
		while (a && (a->contending || a->kick_gen == gen))
			a = a->next;
		if (a)
			a->kick_gen = gen;
		pthread_mutex_unlock(&c->mu);
		if (!a)
			break;
		advance(a);
	}
}

void dlock_loop_kick_locked(struct dlock_client *c)
{
	if (!(c->loop_native || c->loop_io) || !c->reactor || c->loop_kick_posted)
		return;
	c->loop_kick_posted = 1;
	c->loop_kick.run = run_kick;
	dlock_reactor_post(c->reactor, &c->loop_kick);
}

void dlock_loop_kick(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	dlock_loop_kick_locked(c);
	pthread_mutex_unlock(&c->mu);
}
