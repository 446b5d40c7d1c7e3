/*
 * The waiting loop: one for every driver that answers single attempts
 * (try_acquire(), driver ABI version 2).  The driver says acquired, busy
 * (with a hint: try again at once, no later than N ms, or when the wake-up
 * it armed fires) or failed; this loop owns the deadline, cancellation, the
 * backoff and the wake-ups, the way SQLite's busy handler owns them for
 * its VFS's xLock.
 *
 * Backoff: while no wake-up is armed, the sleeps grow from 1 ms, doubling
 * up to 50 ms, each drawn within +-25% so that pollers of one name drift
 * apart; a driver's after_ms bounds a sleep from above (the holder's lease
 * ends then).  With a wake-up armed the loop sleeps until the driver wakes
 * it (dlock_wait_wake()), until after_ms, or until the deadline.
 *
 * Threads: runs on the acquiring thread, without the client's mutex; the
 * PRNG lives on this call's stack.  disarm() is called once, on every way
 * out, after the last attempt, when any attempt armed.
 */
#include "internal.h"
#include "registry.h"

#define NS_PER_MS 1000000LL
#define BACKOFF_FIRST_NS (1 * NS_PER_MS)
#define BACKOFF_MAX_NS (50 * NS_PER_MS)

/* The next sleep: the current step +-25%, then double the step up to the cap. */
static int64_t backoff_next(struct dlock_backoff *b)
{
	if (b->rng == 0) {
		if (dlock_random_bytes(&b->rng, sizeof b->rng) != DLOCK_OK)
			b->rng = (uint64_t)dlock_monotonic_ns() ^ (uint64_t)(uintptr_t)b;
		b->rng |= 1; /* xorshift needs a non-zero state */
		b->step_ns = BACKOFF_FIRST_NS;
	}
	b->rng ^= b->rng << 13;
	b->rng ^= b->rng >> 7;
	b->rng ^= b->rng << 17;
	int64_t sleep_ns = b->step_ns * 3 / 4 + (int64_t)(b->rng % (uint64_t)(b->step_ns / 2));
	b->step_ns = b->step_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : b->step_ns * 2;
	return sleep_ns;
}

/* How long to sleep before the next attempt after `r`; -1: until woken (or the deadline). */
int64_t dlock_retry_sleep_ns(const dlock_retry *r, int armed, struct dlock_backoff *b)
{
	int64_t bound = r->after_ms >= 0 ? r->after_ms * NS_PER_MS : -1;
	if (armed || bound == 0)
		return bound; /* 0: at once (still through the sleep, which sees cancellation and the deadline) */
	int64_t poll = backoff_next(b);
	return bound >= 0 && bound < poll ? bound : poll;
}

dlock_status dlock_retry_loop(struct dlock_client *c, void *lk, int64_t lease_ms, struct dlock_wait *w,
                              dlock_acquired *out, dlock_error *err)
{
	dlock_driver_try_acquire_fn *try_acquire = dlock_driver_try_acquire_of(c->driver);
	dlock_driver_disarm_fn *disarm = dlock_driver_disarm_of(c->driver);
	struct dlock_backoff b = { 0, 0 };
	int armed = 0, waiting = 0;
	dlock_status st;
	for (;;) {
		dlock_retry r = { .after_ms = -1, .armed = 0, .transient = 0 };
		/* Each attempt writes its reason into *err: the last one stays as the message at the deadline. */
		st = try_acquire(c->backend, lk, lease_ms, w, &r, out, err);
		/* A wake-up is honoured only from a driver that can disarm it. */
		armed |= r.armed && disarm;
		if (st == DLOCK_OK || (st != DLOCK_EBUSY && !r.transient) || w->try_once)
			break;
		if (!waiting++)
			dlock_client_logf(c, DLOCK_LOG_DEBUG, "waiting: %s", err->msg[0] ? err->msg : "busy");
		dlock_status ws = dlock_wait_sleep(w, dlock_retry_sleep_ns(&r, r.armed && disarm, &b));
		if (ws == DLOCK_OK)
			continue;
		if (ws == DLOCK_ECANCELED) {
			st = dlock_error_set(err, ws, "%s://: acquire cancelled", c->driver->scheme);
		} else {
			/* The deadline: a busy lock times out; a transient failure keeps its own status. */
			st = st == DLOCK_EBUSY ? DLOCK_ETIMEDOUT : st;
		}
		break;
	}
	if (armed)
		disarm(c->backend, lk, w);
	return st;
}
