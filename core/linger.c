/*
 * The minimum hold (dlock_acquire_options::min_hold, URI min_hold; the
 * bounds themselves are hold.c's): a release of the last level before
 * min_until returns at once, but the handle lingers: it stays among the
 * name's holders (the client's other handles, and this one, wait), while
 * the application sees it as not held.  On a TTL backend the lease is set
 * to end at the bound, so the lock holds even if the process dies, and
 * closing the client leaves it to the server; on a session backend the
 * renewal thread keeps the session's hold alive and releases it at the
 * bound, and closing ends it early.  A loss during the linger is nobody's
 * news (the owner released): it is only cleaned up (held.c).
 *
 * Threads: everything runs with c->mu held, on the releasing thread, the
 * renewal thread, or the thread freeing the handle; driver calls drop it,
 * with the handle marked busy.  Errors: none returned; a lease that cannot
 * be set to end at the bound is logged, and then renewed until the bound.
 */
#include "internal.h"

#define NS_PER_MS 1000000LL

int dlock_linger_begin_locked(struct dlock_lock *l)
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

void dlock_linger_end_locked(struct dlock_lock *l, int leave_ttl)
{
	struct dlock_client *c = l->client;
	if (!(leave_ttl && l->linger_ttl) && !l->loss_cleaned)
		dlock_lock_server_release_locked(l, DLOCK_LOG_WARN, DLOCK_LINGER_END_FAILED);
	dlock_lock_drop_hold_locked(l);
	pthread_cond_broadcast(&c->cond);
}
