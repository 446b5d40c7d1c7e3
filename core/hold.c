/*
 * Hold bounds, after ShedLock's "lock at least for" and "lock at most for"
 * (dlock_acquire_options::min_hold, max_hold; URI min_hold, max_hold): the
 * bounds of an acquisition and what they say about its lease.
 *
 * Maximum: the watch timetable keys a held handle on the earlier of its
 * lease's validity and its max_at; the watch thread then declares the loss
 * with DLOCK_LOST_MAX_HOLD and the renewal thread releases it on the
 * server, as after any loss.  Renewals never carry a lease past max_at, so
 * a holder that stops running still loses the lock at the bound on a TTL
 * backend.
 *
 * Minimum: a release of the last level before min_until lingers until the
 * bound (linger.c).
 *
 * Threads: c->mu held.  Plain arithmetic on the handle's fields (and a
 * clock reading): nothing here can fail.
 */
#include "internal.h"

#define NS_PER_MS 1000000LL

void dlock_hold_begin(struct dlock_lock *l, int64_t min_hold_ms, int64_t max_hold_ms)
{
	/* Without bounds nothing counts from it: no clock reading per acquisition. */
	l->held_since = min_hold_ms > 0 || max_hold_ms > 0 ? dlock_monotonic_ns() : 0;
	l->min_until = min_hold_ms > 0 ? l->held_since + min_hold_ms * NS_PER_MS : 0;
	l->max_at = max_hold_ms > 0 ? l->held_since + max_hold_ms * NS_PER_MS : INT64_MAX;
	l->lingering = l->linger_ttl = 0;
}

void dlock_hold_clear(struct dlock_lock *l)
{
	l->min_until = 0;
	l->max_at = INT64_MAX;
	l->lingering = l->linger_ttl = 0;
}

int64_t dlock_hold_renew_lease(const struct dlock_lock *l, int64_t now)
{
	if (l->lingering || l->max_at == INT64_MAX || now + l->lease_ns <= l->max_at)
		return l->lease_ns;
	int64_t left = l->max_at - now;
	return left > NS_PER_MS ? left : NS_PER_MS;
}

dlock_lost_reason dlock_hold_due_reason(const struct dlock_lock *l, int64_t now)
{
	if (l->lingering || l->max_at == INT64_MAX)
		return DLOCK_LOST_EXPIRED;
	/* The lease was cut to end at the bound: its running out is the bound. */
	if (now >= l->max_at || !l->tracked || l->lease_end + 2 * NS_PER_MS >= l->max_at)
		return DLOCK_LOST_MAX_HOLD;
	return DLOCK_LOST_EXPIRED;
}
