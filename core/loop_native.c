/*
 * A loop client's background work on its loop (c->loop_bg: a native loop
 * client, or one whose driver runs on the loop): what the watch, renewal
 * and observer threads do for a blocking client, done by one tick on the
 * loop's timer (a reactor timer, hence the application's one timer in
 * push mode, dlock_loop_timeout_ms() in pull mode).  A native client's
 * driver calls are made in the tick; a loop driver's are started there
 * and answered later (loop_renew.c), and its elections are still observed
 * on a thread (dlock_inspect() blocks).
 *
 * The tick declares the losses that are due and calls their callbacks,
 * cleans up after them, renews the leases that are due, and reads the
 * elections that are observed; then it sets itself for the first of their
 * next due times.  Anything that brings work forward (a new lease, a loss
 * the driver reports from another thread, a driver's notification) calls
 * dlock_loop_native_soon_locked(), which posts a tick from any thread.
 * Because the tick is a timer, a loop that stalls stalls it too: its
 * renewals are late, and when it wakes the tick declares the expired
 * leases lost before anything else of the turn (dlock_async_run() fires
 * timers before it runs what was posted).
 *
 * Ownership: the timer and the posted item live in the client.  Threads:
 * the loop's, except dlock_loop_native_soon_locked() (any, c->mu held).
 */
#include "async.h"
#include "reactor.h"

static void tick(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->closed) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->loop_inline++; /* the observer reads through dlock_inspect(), which never waits here */
	int64_t next = dlock_background_tick_locked(c);
	/* A client whose driver runs on the loop observes on its observer thread (dlock_inspect() blocks). */
	int64_t next_observe = c->loop_native ? dlock_observer_tick_locked(c) : INT64_MAX;
	c->loop_inline--;
	if (next_observe < next)
		next = next_observe;
	c->loop_tick_due = next;
	pthread_mutex_unlock(&c->mu);
	if (next == INT64_MAX)
		dlock_reactor_timer_clear(c->reactor, &c->loop_tick);
	else if (dlock_reactor_timer_set(c->reactor, &c->loop_tick, next) != DLOCK_OK)
		dlock_client_logf(c, DLOCK_LOG_ERROR, "out of memory: the client's renewals stopped");
	dlock_loop_kick(c); /* a loss cleaned up may have freed a name */
}

static void run_tick_timer(struct dlock_reactor_timer *t)
{
	tick((struct dlock_client *)((char *)t - offsetof(struct dlock_client, loop_tick)));
}

static void run_tick_soon(struct dlock_reactor_item *item)
{
	struct dlock_client *c = (struct dlock_client *)((char *)item - offsetof(struct dlock_client, loop_tick_soon));
	pthread_mutex_lock(&c->mu);
	c->loop_tick_soon_posted = 0;
	pthread_mutex_unlock(&c->mu);
	tick(c);
}

dlock_status dlock_loop_native_start(struct dlock_client *c)
{
	c->loop_tick.run = run_tick_timer;
	c->loop_tick_soon.run = run_tick_soon;
	c->loop_tick_due = INT64_MAX;
	return DLOCK_OK;
}

void dlock_loop_native_soon_locked(struct dlock_client *c, int64_t due_ns)
{
	if (!c->loop_bg || !c->reactor || c->loop_tick_soon_posted || due_ns >= c->loop_tick_due)
		return;
	c->loop_tick_soon_posted = 1;
	c->loop_tick_due = due_ns; /* the tick sets it to what is really next */
	dlock_reactor_post(c->reactor, &c->loop_tick_soon);
}
