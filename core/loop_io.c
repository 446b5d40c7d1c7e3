/*
 * The loop as a driver of contract 9 sees it (sys/driver.h, "the loop"):
 * dlock_host_io(), descriptor watches and timers on the client's reactor,
 * and dlock_call_done(), which posts the end of a driver's non-blocking
 * call to the loop, where the core goes on with it (so the driver's own
 * callback has returned by then); dlock_call_offload() runs a call's
 * blocking form on a worker of the client and ends the call with it.
 *
 * Ownership: a timer is the driver's, from dlock_io_timer_new() to
 * dlock_io_timer_free(); a dlock_call lives in the core's operation that
 * started it, an offloaded call's job in its own allocation until it has
 * run.  Threads: the loop's only, but an offloaded call's blocking form and
 * its dlock_call_done() (which only posts) on a worker.  Errors: DLOCK_EINVAL for a NULL
 * or a call off the loop (a driver's mistake, said in the client's log),
 * DLOCK_ENOMEM, DLOCK_EIO when the application's loop refuses a
 * descriptor.
 */
#include "async.h"
#include "reactor.h"
#include "worker.h"

#include <stdlib.h>

#define NS_PER_MS 1000000LL

dlock_io *dlock_host_io(dlock_host *host)
{
	struct dlock_client *c = host ? host->client : NULL;
	return c && c->loop_io && c->reactor ? &c->io : NULL;
}

/* The reactor behind `io`, when the caller is on its loop. */
static struct dlock_reactor *reactor_of(dlock_io *io, const char *call)
{
	struct dlock_client *c = io ? io->client : NULL;
	if (!c || !c->reactor)
		return NULL;
	if (!dlock_reactor_is_loop_thread(c->reactor)) {
		dlock_client_logf(c, DLOCK_LOG_ERROR, "driver error: %s called off the loop's thread", call);
		return NULL;
	}
	return c->reactor;
}

dlock_status dlock_io_watch(dlock_io *io, int fd, unsigned events, dlock_io_ready_fn *ready, void *arg)
{
	struct dlock_reactor *r = reactor_of(io, "dlock_io_watch");
	return r ? dlock_reactor_watch(r, fd, events, ready, arg) : DLOCK_EINVAL;
}

struct dlock_io_timer {
	struct dlock_reactor_timer t; /* first member */
	struct dlock_reactor *r;
	void (*fire)(void *arg);
	void *arg;
};

static void timer_run(struct dlock_reactor_timer *t)
{
	struct dlock_io_timer *it = (struct dlock_io_timer *)t;
	it->fire(it->arg); /* may free it: nothing of it is used after */
}

dlock_status dlock_io_timer_new(dlock_io *io, void (*fire)(void *arg), void *arg, dlock_io_timer **out)
{
	if (out)
		*out = NULL;
	struct dlock_reactor *r = reactor_of(io, "dlock_io_timer_new");
	if (!r || !fire || !out)
		return DLOCK_EINVAL;
	struct dlock_io_timer *t = calloc(1, sizeof *t);
	if (!t)
		return DLOCK_ENOMEM;
	t->t.run = timer_run;
	t->r = r;
	t->fire = fire;
	t->arg = arg;
	*out = t;
	return DLOCK_OK;
}

dlock_status dlock_io_timer_set(dlock_io_timer *t, int64_t ms)
{
	if (!t)
		return DLOCK_EINVAL;
	if (ms < 0) {
		dlock_reactor_timer_clear(t->r, &t->t);
		return DLOCK_OK;
	}
	int64_t now = dlock_monotonic_ns();
	int64_t due = ms > (INT64_MAX - now) / NS_PER_MS ? INT64_MAX - 1 : now + ms * NS_PER_MS;
	return dlock_reactor_timer_set(t->r, &t->t, due);
}

void dlock_io_timer_free(dlock_io_timer *t)
{
	if (!t)
		return;
	dlock_reactor_timer_clear(t->r, &t->t);
	free(t);
}

/* ------------------------------------------------------------ calls */

static void call_run(struct dlock_reactor_item *item)
{
	struct dlock_call *call = (struct dlock_call *)item;
	call->finish(call, call->status);
}

void dlock_call_init(struct dlock_call *call, struct dlock_client *c,
                     void (*finish)(struct dlock_call *call, dlock_status status))
{
	*call = (struct dlock_call){ .c = c, .finish = finish };
	call->item.run = call_run;
}

void dlock_call_done(dlock_call *call, dlock_status status)
{
	if (!call || call->done) {
		if (call)
			dlock_client_logf(call->c, DLOCK_LOG_ERROR, "driver error: dlock_call_done called twice for one call");
		return;
	}
	call->done = 1;
	call->status = status;
	dlock_reactor_post(call->c->reactor, &call->item);
}

/* A call's blocking form on a worker (dlock_call_offload()). */
struct offload {
	struct dlock_job job; /* first member */
	dlock_call *call;
	dlock_status (*fn)(void *arg);
	void *arg;
};

static void offload_run(struct dlock_job *job)
{
	struct offload *o = (struct offload *)job;
	dlock_call_done(o->call, o->fn(o->arg)); /* posted: the loop goes on with it */
}

static void offload_after(struct dlock_job *job)
{
	free(job);
}

dlock_status dlock_call_offload(dlock_call *call, dlock_status (*fn)(void *arg), void *arg)
{
	if (!call || !fn || !call->c->workers || !reactor_of(&call->c->io, "dlock_call_offload"))
		return DLOCK_EINVAL;
	struct offload *o = calloc(1, sizeof *o);
	if (!o)
		return DLOCK_ENOMEM;
	*o = (struct offload){ .job = { .run = offload_run, .after = offload_after }, .call = call, .fn = fn, .arg = arg };
	dlock_status st = dlock_workers_submit(call->c->workers, &o->job);
	if (st != DLOCK_OK)
		free(o);
	return st;
}
