/*
 * Hold bounds, after ShedLock's "lock at least for" and "lock at most for"
 * (dlock_acquire_options::min_hold, max_hold; URI min_hold, max_hold).
 *
 * Maximum: the watch timetable keys a held handle on the earlier of its
 * lease's validity and its max_at; the watch thread then declares the loss
 * with DLOCK_LOST_MAX_HOLD and the renewal thread releases it on the
 * server, as after any loss.  Renewals never carry a lease past max_at, so
 * a holder that stops running still loses the lock at the bound on a TTL
 * backend.
 *
 * Minimum: a release of the last level before min_until returns at once,
 * but the handle lingers: it stays among the name's holders (the client's
 * other handles, and this one, wait), while the application sees it as not
 * held.  On a TTL backend the lease is set to end at the bound, so the
 * lock holds even if the process dies, and closing the client leaves it to
 * the server; on a session backend the renewal thread keeps the session's
 * hold alive and releases it at the bound, and closing ends it early.  A
 * loss during the linger is nobody's news (the owner released): it is only
 * cleaned up.
 *
 * Threads: everything runs with c->mu held, on the releasing thread or the
 * renewal thread; driver calls drop it, with the handle marked busy.
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

int dlock_hold_linger_locked(struct dlock_lock *l)
{
	struct dlock_client *c = l->client;
	if (!l->min_until)
		return 0;
	int64_t now = dlock_monotonic_ns();
	if (now >= l->min_until)
		return 0;
	int ttl = 0;
	if (c->caps.lease == DLOCK_LEASE_TTL && c->driver->extend) {
		int64_t left_ms = (l->min_until - now + NS_PER_MS - 1) / NS_PER_MS;
		dlock_error err = { "" };
		pthread_mutex_unlock(&c->mu);
		int64_t sent = dlock_monotonic_ns();
		dlock_status st = c->driver->extend(c->backend, l->lk, left_ms, &err);
		pthread_mutex_lock(&c->mu);
		if (st == DLOCK_ENOTHELD)
			return 0; /* gone already: the release says so */
		if (st == DLOCK_OK) {
			dlock_lock_lease_renewed(l, sent, left_ms * NS_PER_MS);
			ttl = 1;
		} else {
			dlock_client_logf(c, DLOCK_LOG_WARN,
			                  "minimum hold: could not set the lease to end at the bound (%s): %s; renewing "
			                  "until then", dlock_status_name(st), err.msg);
		}
	}
	l->lingering = 1;
	l->linger_ttl = ttl;
	l->depth = 0;
	l->generation++; /* renewals sent before belong to the released acquisition */
	l->lost_pending = 0;
	dlock_sched_update(l);
	return 1;
}

void dlock_hold_end_linger_locked(struct dlock_lock *l, int leave_ttl)
{
	struct dlock_client *c = l->client;
	if (!(leave_ttl && l->linger_ttl) && !l->loss_cleaned)
		dlock_lock_server_release_locked(l, DLOCK_LOG_WARN, "minimum hold: releasing at the bound failed");
	dlock_lock_drop_hold_locked(l);
	pthread_cond_broadcast(&c->cond);
}
