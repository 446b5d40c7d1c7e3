/*
 * A loop client's life: its asynchronous open and close, and the handles
 * freed while operations still need them.
 *
 * Open: the URI is parsed and the driver found at once (errors returned
 * to the caller, no callback); the reactor and the worker pool are made on
 * the caller's thread, which becomes the loop's; the driver's open runs on
 * a worker (on the loop, blocking, for a driver that runs on the loop:
 * loop_io) and its outcome is called back.
 *
 * Close: every acquisition is cancelled, every lock still held is
 * reported lost with DLOCK_LOST_CLOSED (posted, so the reports run on the
 * loop before the close's callback), and a worker waits for the other
 * operations' blocking parts to end before closing the client as a
 * blocking one would.  After the close's callback the turn of the loop
 * ends by destroying the reactor (the hooks hear of every descriptor
 * first) and joining the workers; the client's memory goes with its last
 * handle, as any client's.
 *
 * Handles: dlock_lock_free() of a loop client's handle cancels what it
 * waits for and frees it on a worker (its release is a server call) once
 * every callback that holds it has run.
 *
 * Threads: the loop's, except the *_run functions (a worker).  Errors:
 * through the client's error text, or the open's buffer.
 */
#include "async.h"
#include "reactor.h"
#include "registry.h"
#include "worker.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ open */

/* What the blocking core calls of this layer, for a loop client (internal.h). */
static const struct dlock_loop_seam loop_seam = {
	.refuse_blocking = dlock_loop_refuse_blocking,
	.refuse_unopened = dlock_loop_refuse_unopened,
	.lock_free = dlock_async_lock_free,
	.close = dlock_async_close_blocking,
	.start_background = dlock_loop_native_start,
	.post_lost_locked = dlock_async_post_lost_locked,
	.unref = dlock_async_unref,
	.post_observed_locked = dlock_async_post_observed_locked,
	.soon_locked = dlock_loop_native_soon_locked,
	.kick_locked = dlock_loop_kick_locked,
	.bg_call_locked = dlock_loop_bg_call_locked,
	.call_ended_locked = dlock_async_call_ended_locked,
};

dlock_status dlock_client_open_async(dlock_client **out, const char *uri, const dlock_client_options *opts,
                                     const dlock_loop_hooks *hooks, dlock_open_fn done, void *userdata,
                                     char *errbuf, size_t errlen)
{
	dlock_error err = { "" };
	struct dlock_client *c = NULL;
	dlock_status st;
	if (out)
		*out = NULL;
	if (!out || !done) {
		st = dlock_error_set(&err, DLOCK_EINVAL, "dlock_client_open_async: out and done must not be NULL");
		goto fail;
	}
	st = dlock_client_prepare(&c, uri, opts, &err);
	if (st != DLOCK_OK)
		goto fail;
	c->was_loop = 1;
	c->seam = &loop_seam;
	c->loop_native = dlock_driver_is_inline(c->driver);
	c->loop_io = !c->loop_native && dlock_driver_loop_io_of(c->driver) != NULL;
	c->io.client = c;
	if (!c->loop_native && !(c->workers = dlock_workers_new())) {
		st = dlock_error_set(&err, DLOCK_ENOMEM, "out of memory");
		goto fail;
	}
	st = dlock_reactor_create(c, hooks, &c->reactor, &err);
	if (st != DLOCK_OK)
		goto fail;
	struct dlock_op *op = dlock_async_op_new(c, DLOCK_OP_OPEN, NULL);
	if (!op) {
		st = dlock_error_set(&err, DLOCK_ENOMEM, "out of memory");
		goto fail;
	}
	dlock_async_op_set_open(op, done, userdata);
	c->opening = 1;
	st = dlock_async_submit(op);
	if (st != DLOCK_OK) {
		free(op);
		dlock_error_set(&err, st, "cannot start a worker thread to open the client");
		goto fail;
	}
	*out = c;
	return DLOCK_OK;
fail:
	if (errbuf && errlen)
		snprintf(errbuf, errlen, "%s", err.msg[0] ? err.msg : dlock_strerror(st));
	if (c) {
		dlock_reactor_destroy(c->reactor);
		dlock_workers_destroy(c->workers);
		c->reactor = NULL;
		dlock_client_free(c);
	}
	return st;
}

/* ------------------------------------------------------------ close */

/* Run on the loop: a lock that the close takes away, reported as lost. */
struct closed_report {
	struct dlock_reactor_item item;
	struct dlock_lock *lock;
	dlock_lost_fn fn;
	void *ud;
};

static void report_closed(struct dlock_reactor_item *item)
{
	struct closed_report *r = (struct closed_report *)item;
	struct dlock_client *c = r->lock->client;
	c->callbacks_depth++;
	r->fn(r->lock, DLOCK_LOST_CLOSED, "the client was closed while it held the lock", r->ud);
	c->callbacks_depth--;
	dlock_async_unref(r->lock);
	free(r);
}

/* Post a DLOCK_LOST_CLOSED report for every lock held with a callback that has not heard of a loss. */
static void report_held_locks(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	for (struct dlock_lock *l = c->locks; l; l = l->next) {
		if (!l->held || l->lingering || l->lost || !l->on_lost || l->lost_delivered)
			continue;
		struct closed_report *r = malloc(sizeof *r);
		if (!r) { /* the lock is still released; say so where the application can see it */
			dlock_client_logf(c, DLOCK_LOG_ERROR, "out of memory: a lock released by the close was not "
			                  "reported lost");
			continue;
		}
		l->lost_delivered = 1;
		l->async_refs++;
		r->item.run = report_closed;
		r->lock = l;
		r->fn = l->on_lost;
		r->ud = l->lost_userdata;
		dlock_reactor_post(c->reactor, &r->item);
	}
	pthread_mutex_unlock(&c->mu);
}

dlock_status dlock_client_close_async(dlock_client *c, dlock_close_fn done, void *userdata)
{
	if (!c)
		return DLOCK_EINVAL;
	if (!c->reactor)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_client_close_async: not a loop client");
	if (!dlock_reactor_is_loop_thread(c->reactor))
		return dlock_client_fail(c, DLOCK_EDEADLK,
		                         "dlock_client_close_async: a loop client is used only from its loop's thread");
	if (c->async_closing)
		return dlock_client_fail(c, DLOCK_ECLOSED, "client is already closing");
	struct dlock_op *op = dlock_async_op_new(c, DLOCK_OP_CLOSE, NULL);
	if (!op)
		return DLOCK_ENOMEM;
	dlock_async_op_set_close(op, done, userdata);
	c->async_closing = 1;
	report_held_locks(c);
	pthread_mutex_lock(&c->mu);
	for (struct dlock_lock *l = c->locks; l; l = l->next)
		dlock_lock_cancel_locked(l);
	pthread_mutex_unlock(&c->mu);
	if (dlock_async_submit(op) != DLOCK_OK) /* no thread for it: close here, blocking, and call back later */
		dlock_async_complete_later(op, dlock_async_close_run(c));
	return DLOCK_OK;
}

/* The end of a finished close, once the loop's turn is over: the reactor, the workers, maybe the client. */
static void close_finish(struct dlock_client *c)
{
	dlock_workers_destroy(c->workers); /* no worker posts to the reactor any more */
	dlock_reactor_run(c->reactor);     /* what is left is the core's own: steps that free what finished */
	dlock_reactor_destroy(c->reactor);
	pthread_mutex_lock(&c->mu);
	c->reactor = NULL;
	c->workers = NULL;
	dlock_client_maybe_free_locked(c);
}

void dlock_async_run(struct dlock_client *c)
{
	if (!c || !c->reactor || c->callbacks_depth > 0)
		return;
	/* Timers first: after a stall, the losses they declare are reported before any other completion. */
	dlock_reactor_run_timers(c->reactor);
	dlock_reactor_run(c->reactor);
	if (c->close_finished)
		close_finish(c);
}

dlock_status dlock_async_close_blocking(struct dlock_client *c)
{
	if (!dlock_reactor_is_loop_thread(c->reactor))
		return dlock_client_fail(c, DLOCK_EDEADLK,
		                         "dlock_client_close: a loop client is used only from its loop's thread");
	if (c->close_finished)
		return dlock_client_fail(c, DLOCK_ECLOSED, "client is already closed");
	if (!c->async_closing) {
		dlock_status st = dlock_client_close_async(c, NULL, NULL);
		if (st != DLOCK_OK)
			return st;
	}
	if (c->callbacks_depth > 0)
		return DLOCK_OK; /* the loop's turn finishes it */
	/* Drive the loop here until the close has been called back: the reactor's own descriptor is
	 * readable whenever work is posted.  A driver on the loop (loop_io) still has calls to end: its
	 * descriptors and timers too. */
	while (!c->close_finished) {
		if (c->loop_io) {
			dlock_reactor_wait(c->reactor);
			dlock_reactor_run_timers(c->reactor);
		} else {
			struct pollfd p = { .fd = dlock_reactor_wake_fd(c->reactor), .events = POLLIN, .revents = 0 };
			if (poll(&p, 1, -1) < 0)
				continue;
		}
		dlock_reactor_run(c->reactor);
	}
	close_finish(c);
	return DLOCK_OK;
}

/* ------------------------------------------------------------ handles */

int dlock_async_lock_free(struct dlock_lock *l, struct dlock_election *e)
{
	struct dlock_client *c = l->client;
	/* The thread first: off the loop (a worker freeing an election's handle) the close's fields are the
	 * loop's to change, and this call is not the loop's to take over. */
	if (!c->reactor || !dlock_reactor_is_loop_thread(c->reactor) || !dlock_async_live(c))
		return 0;
	pthread_mutex_lock(&c->mu);
	if (l->free_requested) {
		pthread_mutex_unlock(&c->mu);
		return 1;
	}
	l->free_requested = 1;
	l->free_election = e;
	dlock_lock_cancel_locked(l);
	unsigned refs = l->async_refs;
	pthread_mutex_unlock(&c->mu);
	if (refs == 0)
		dlock_async_free_now(l);
	return 1;
}

