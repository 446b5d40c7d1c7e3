/*
 * Waiting: the deadline and cancellation of one acquisition, handed to the
 * driver as a dlock_wait.  Sleeps are on the monotonic clock and wake on
 * a notification (dlock_wait_wake), cancellation or the deadline.  A wake
 * that arrives while the driver is not sleeping is remembered, so a
 * notification between "try" and "sleep" is never lost.
 *
 * The condition variable is made by the first thread that waits on it
 * (under w->mu), not with the wait: most acquisitions never sleep, and
 * nobody can be waiting on it before then, so a broadcast until then has
 * nobody to wake and is skipped.
 *
 * Here too the condition wait on the monotonic clock that the core's
 * threads and the drivers use (dlock_cond_init_monotonic(),
 * dlock_cond_wait_until(), declared in sys/driver.h).
 */
#include "internal.h"

#include <errno.h>
#include <time.h>

void dlock_cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
}

int dlock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ns)
{
	if (deadline_ns == INT64_MAX) {
		pthread_cond_wait(cond, mu);
		return 0;
	}
	struct timespec ts = { .tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000 };
	return pthread_cond_timedwait(cond, mu, &ts) == ETIMEDOUT ? ETIMEDOUT : 0;
}

void dlock_wait_init(struct dlock_wait *w, int64_t deadline_ns, int try_once, int wants_token,
                     dlock_lock_mode mode)
{
	*w = (struct dlock_wait){
		.deadline_ns = deadline_ns, .try_once = try_once, .wants_token = wants_token, .mode = mode
	};
	pthread_mutex_init(&w->mu, NULL);
}

void dlock_wait_destroy(struct dlock_wait *w)
{
	if (w->cond_ready)
		pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->mu);
}

/* The wait's condition variable, made on first use.  w->mu held. */
static pthread_cond_t *wait_cond(struct dlock_wait *w)
{
	if (!w->cond_ready) {
		dlock_cond_init_monotonic(&w->cond);
		w->cond_ready = 1;
	}
	return &w->cond;
}

/* Wake every thread waiting on the wait's condition variable (none before it is made).  w->mu held. */
static void wait_broadcast(struct dlock_wait *w)
{
	if (w->cond_ready)
		pthread_cond_broadcast(&w->cond);
}

int64_t dlock_wait_deadline_ns(const dlock_wait *w)
{
	return w->deadline_ns;
}

int dlock_wait_try_once(const dlock_wait *w)
{
	return w->try_once;
}

int dlock_wait_wants_token(const dlock_wait *w)
{
	return w->wants_token;
}

dlock_lock_mode dlock_wait_mode(const dlock_wait *w)
{
	return w->mode;
}

int64_t dlock_wait_remaining_ms(const dlock_wait *w)
{
	if (w->deadline_ns == INT64_MAX)
		return -1;
	int64_t left = w->deadline_ns - dlock_monotonic_ns();
	if (left <= 0)
		return 0;
	return left < 1000000 ? 1 : left / 1000000;
}

dlock_status dlock_wait_sleep(dlock_wait *w, int64_t max_ns)
{
	int64_t until = w->deadline_ns;
	if (max_ns >= 0) {
		int64_t now = dlock_monotonic_ns();
		if (max_ns < until - now)
			until = now + max_ns;
	}
	dlock_status st = DLOCK_OK;
	pthread_mutex_lock(&w->mu);
	while (!w->cancelled && !w->woken) {
		if (dlock_cond_wait_until(wait_cond(w), &w->mu, until) == ETIMEDOUT)
			break;
	}
	if (w->cancelled)
		st = DLOCK_ECANCELED;
	else if (!w->woken && dlock_monotonic_ns() >= w->deadline_ns)
		st = DLOCK_ETIMEDOUT;
	w->woken = 0;
	pthread_mutex_unlock(&w->mu);
	return st;
}

void dlock_wait_wake(dlock_wait *w)
{
	pthread_mutex_lock(&w->mu);
	w->woken = 1;
	wait_broadcast(w);
	if (w->on_wake)
		w->on_wake(w->on_wake_arg);
	pthread_mutex_unlock(&w->mu);
}

void dlock_wait_on_wake(struct dlock_wait *w, void (*fn)(void *arg), void *arg)
{
	pthread_mutex_lock(&w->mu);
	w->on_wake = fn;
	w->on_wake_arg = arg;
	pthread_mutex_unlock(&w->mu);
}

dlock_status dlock_wait_cancelled(const dlock_wait *w)
{
	struct dlock_wait *mw = (struct dlock_wait *)w;
	pthread_mutex_lock(&mw->mu);
	int c = mw->cancelled;
	pthread_mutex_unlock(&mw->mu);
	return c ? DLOCK_ECANCELED : DLOCK_OK;
}

/* Run the interrupt hook without holding w->mu (it may talk to a server),
 * marking it running so that clearing the hook can wait for it. */
static void run_interrupt_locked(struct dlock_wait *w)
{
	void (*fn)(void *) = w->interrupt;
	void *arg = w->interrupt_arg;
	if (!fn || w->interrupt_running)
		return;
	w->interrupt_running = 1;
	pthread_mutex_unlock(&w->mu);
	fn(arg);
	pthread_mutex_lock(&w->mu);
	w->interrupt_running = 0;
	wait_broadcast(w);
}

void dlock_wait_set_interrupt(dlock_wait *w, void (*fn)(void *arg), void *arg)
{
	pthread_mutex_lock(&w->mu);
	while (w->interrupt_running)
		pthread_cond_wait(wait_cond(w), &w->mu);
	w->interrupt = fn;
	w->interrupt_arg = arg;
	if (fn && w->cancelled)
		run_interrupt_locked(w);
	pthread_mutex_unlock(&w->mu);
}

void dlock_wait_cancel(struct dlock_wait *w)
{
	pthread_mutex_lock(&w->mu);
	w->cancelled = 1;
	wait_broadcast(w);
	if (w->on_wake)
		w->on_wake(w->on_wake_arg);
	run_interrupt_locked(w);
	pthread_mutex_unlock(&w->mu);
}
