/*
 * The client's two background threads.
 *
 * The watch thread declares a lock lost when its validity runs out without
 * a successful renewal and calls lost-lock callbacks, so callbacks always
 * run on this one thread, never inside the caller's dlock call or a
 * driver's internal thread.  The renewal thread extends leases at about a
 * third of their length.  They are separate so that a renewal stuck on an
 * unresponsive server (up to the I/O timeout) never delays a loss being
 * declared on time: the holder must hear of it before the server can give
 * the lock to someone else.
 *
 * The renewal thread also cleans up after a declared loss (see
 * cleanup_due() for when): it has the driver release what may be left of
 * the acquisition on the server (the release is owner-only), and only then
 * lets the next local contender for the name go to the server, so that the
 * other handles of the client move on without waiting for the application
 * to release the lost one.
 */
#include "internal.h"
#include "registry.h"

#include <signal.h>
#include <stdio.h>

#define NS_PER_MS 1000000LL

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* ------------------------------------------------------------ watch thread */

/* Call the user's callback for a queued loss; c->mu held, dropped inside. */
static void deliver_lost_locked(struct dlock_client *c, struct dlock_lock *l)
{
	l->lost_pending = 0;
	if (!l->on_lost || l->lost_delivered)
		return;
	l->lost_delivered = 1;
	l->callback_running = 1;
	dlock_lost_fn fn = l->on_lost;
	void *ud = l->lost_userdata;
	dlock_lost_reason reason = l->lost_reason;
	char detail[sizeof l->lost_detail];
	snprintf(detail, sizeof detail, "%s", l->lost_detail);
	pthread_mutex_unlock(&c->mu);
	fn(l, reason, detail, ud);
	pthread_mutex_lock(&c->mu);
	l->callback_running = 0;
	pthread_cond_broadcast(&c->cond);
}

/* Declare due expiries and deliver one queued loss; returns 1 after a
 * delivery (the list may have changed while c->mu was dropped), else 0
 * and the next expiry. */
static int watch_locked(struct dlock_client *c, int64_t *next_due)
{
	int64_t now = dlock_monotonic_ns();
	*next_due = INT64_MAX;
	for (struct dlock_lock *l = c->locks; l; l = l->next) {
		if (!l->held)
			continue;
		if (l->tracked && !l->lost && now >= l->valid_until)
			dlock_lock_declare_lost(l, DLOCK_LOST_EXPIRED, "lease ran out without a successful renewal");
		if (l->lost_pending) {
			deliver_lost_locked(c, l);
			return 1;
		}
		if (l->tracked && !l->lost)
			*next_due = min64(*next_due, l->valid_until);
	}
	return 0;
}

static void *watch_main(void *arg)
{
	struct dlock_client *c = arg;
	pthread_mutex_lock(&c->mu);
	while (!c->bg_stop) {
		int64_t next_due;
		if (watch_locked(c, &next_due))
			continue;
		c->bg_sleep_until = next_due;
		dlock_cond_wait_until(&c->bg_cond, &c->mu, next_due);
		c->bg_sleep_until = INT64_MIN;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* ---------------------------------------------------------- renewal thread */

/* One lock of a batch: what was sent, to tell what came back. */
struct renewal {
	struct dlock_lock *l;
	uint64_t generation;
	int64_t lease_ns;
};

/* Apply the answer to one renewal sent at `sent`; c->mu held. */
static void renewed_locked(struct dlock_client *c, const struct renewal *rn, int64_t sent, int64_t now,
                           dlock_status st, const char *msg)
{
	struct dlock_lock *l = rn->l;
	l->busy = 0;
	/* A renewal that returns after the loss was declared changes nothing:
	 * the holder has been told, and release cleans up what is still ours. */
	if (!l->held || l->generation != rn->generation || l->lost)
		return;
	if (st == DLOCK_OK) {
		dlock_lock_lease_renewed(l, sent, rn->lease_ns);
		c->stats.renewals++;
	} else if (st == DLOCK_ENOTHELD) {
		dlock_lock_declare_lost(l, dlock_lock_gone_reason(l, sent), msg[0] ? msg : "renewal found the lock gone");
	} else {
		/* Transient: try again soon; the watch thread declares the loss
		 * if no renewal succeeds in time. */
		dlock_client_logf(c, DLOCK_LOG_WARN, "lease renewal failed (%s): %s; retrying", dlock_status_name(st), msg);
		l->next_renew = now + min64(rn->lease_ns / 10, 1000 * NS_PER_MS);
	}
}

/*
 * Renew batch[0..n) in one driver call (extend_many), or the one lock with
 * extend(); c->mu held, dropped inside.  Each lock's new lease counts from
 * the moment the batch was sent.
 */
static void renew_batch_locked(struct dlock_client *c, struct renewal *batch, size_t n, int64_t now)
{
	dlock_driver_extend_many_fn *many = dlock_driver_extend_many_of(c->driver);
	void *lks[DLOCK_RENEW_BATCH_MAX];
	int64_t lease_ms[DLOCK_RENEW_BATCH_MAX];
	dlock_status st[DLOCK_RENEW_BATCH_MAX];
	dlock_error err = { "" };
	for (size_t i = 0; i < n; i++) {
		batch[i].l->busy = 1;
		lks[i] = batch[i].l->lk;
		lease_ms[i] = batch[i].lease_ns / NS_PER_MS;
	}
	pthread_mutex_unlock(&c->mu);

	int64_t sent = dlock_monotonic_ns();
	if (many && n > 1)
		many(c->backend, lks, lease_ms, n, st, &err);
	else
		for (size_t i = 0; i < n; i++)
			st[i] = c->driver->extend(c->backend, lks[i], lease_ms[i], &err);

	pthread_mutex_lock(&c->mu);
	for (size_t i = 0; i < n; i++)
		renewed_locked(c, &batch[i], sent, now, st[i], err.msg);
	pthread_cond_broadcast(&c->cond);
}

/*
 * How early a renewal may go out to join a batch: a twentieth of its lease,
 * at most 100 ms.  Never later than its own schedule.
 */
static int64_t batch_slack(const struct dlock_lock *l)
{
	return min64(l->lease_ns / 20, 100 * NS_PER_MS);
}

/* Release a lost acquisition on the server and hand the name on; c->mu
 * held, dropped inside.  Whatever the release answers, nothing of ours is
 * left that could keep the next contender out for longer than the server
 * keeps it anyway: a lease runs out, and a backend that is unsure whether
 * it released ends the session that held it. */
static void clean_lost_locked(struct dlock_client *c, struct dlock_lock *l)
{
	dlock_error err = { "" };
	l->busy = 1;
	pthread_mutex_unlock(&c->mu);

	dlock_status st = c->driver->release(c->backend, l->lk, &err);

	pthread_mutex_lock(&c->mu);
	c->stats.server_releases++;
	if (st != DLOCK_OK && st != DLOCK_ENOTHELD)
		dlock_client_logf(c, DLOCK_LOG_DEBUG, "releasing a lost lock on the server (%s): %s",
		                  dlock_status_name(st), err.msg);
	dlock_lock_loss_cleaned(l);
	l->busy = 0;
	pthread_cond_broadcast(&c->cond);
}

/* When to clean up after a loss.  A lease that the client saw run out is
 * still the server's until its end: the margin before it is the holder's
 * time to act on the news before anyone else can have the lock, locally
 * too.  Any other loss means the server has already let go. */
static int64_t cleanup_due(const struct dlock_lock *l, int64_t now)
{
	return l->lost_reason == DLOCK_LOST_EXPIRED && l->tracked ? l->lease_end : now;
}

/*
 * Do one due cleanup, or the due renewals: with a driver that renews in
 * batches, every lock due (and those due within their batch_slack()) up
 * to DLOCK_RENEW_BATCH_MAX at once, else the first one due.  Returns 1 if
 * it did something, else 0 and the next due time.
 */
static int renew_due_locked(struct dlock_client *c, int64_t *next_due)
{
	struct renewal batch[DLOCK_RENEW_BATCH_MAX];
	size_t n = 0, max = dlock_driver_extend_many_of(c->driver) ? DLOCK_RENEW_BATCH_MAX : 1;
	int64_t now = dlock_monotonic_ns();
	*next_due = INT64_MAX;
	for (struct dlock_lock *l = c->locks; l && n < max; l = l->next) {
		if (l->held && l->lost && !l->loss_cleaned) {
			int64_t due = cleanup_due(l, now);
			if (l->busy || c->closing)
				continue; /* end_call() wakes us; closing releases it */
			if (now >= due && n == 0) {
				clean_lost_locked(c, l);
				return 1;
			}
			*next_due = min64(*next_due, due);
			continue;
		}
		if (!l->held || !l->tracked || !l->renew || l->lost || l->busy)
			continue;
		if (now >= l->next_renew || (n > 0 && now + batch_slack(l) >= l->next_renew))
			batch[n++] = (struct renewal){ .l = l, .generation = l->generation, .lease_ns = l->lease_ns };
		else
			*next_due = min64(*next_due, l->next_renew);
	}
	if (n == 0)
		return 0;
	renew_batch_locked(c, batch, n, now);
	return 1;
}

static void *renew_main(void *arg)
{
	struct dlock_client *c = arg;
	pthread_mutex_lock(&c->mu);
	while (!c->bg_stop) {
		int64_t next_due;
		if (renew_due_locked(c, &next_due))
			continue;
		c->renew_sleep_until = next_due;
		dlock_cond_wait_until(&c->renew_cond, &c->mu, next_due);
		c->renew_sleep_until = INT64_MIN;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* ------------------------------------------------------------ control */

dlock_status dlock_background_start(struct dlock_client *c)
{
	/* Signals go to the application's threads, never to these. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&c->bg_thread, NULL, watch_main, c);
	if (rc == 0 && pthread_create(&c->renew_thread, NULL, renew_main, c) != 0) {
		pthread_mutex_lock(&c->mu);
		c->bg_stop = 1;
		pthread_cond_signal(&c->bg_cond);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->bg_thread, NULL);
		rc = -1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return DLOCK_ENOMEM;
	c->bg_started = 1;
	return DLOCK_OK;
}

void dlock_background_stop(struct dlock_client *c)
{
	if (!c->bg_started)
		return;
	pthread_mutex_lock(&c->mu);
	c->bg_stop = 1;
	pthread_cond_signal(&c->bg_cond);
	pthread_cond_signal(&c->renew_cond);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->renew_thread, NULL);
	pthread_join(c->bg_thread, NULL);
}

void dlock_background_kick(struct dlock_client *c)
{
	pthread_cond_signal(&c->bg_cond);
	pthread_cond_signal(&c->renew_cond);
}

/* Acquire and release happen far more often than renewals: signal a
 * thread only when it would otherwise sleep past the new due time.  While
 * awake, each rescans every lock after each piece of work anyway. */
void dlock_background_due(struct dlock_client *c, const struct dlock_lock *l)
{
	if (l->held && l->lost && !l->loss_cleaned) /* a cleanup skipped while the handle was busy */
		pthread_cond_signal(&c->renew_cond);
	if (!l->held || !l->tracked || l->lost)
		return;
	if (l->valid_until < c->bg_sleep_until)
		pthread_cond_signal(&c->bg_cond);
	if (l->renew && l->next_renew < c->renew_sleep_until)
		pthread_cond_signal(&c->renew_cond);
}

int dlock_background_is_self(struct dlock_client *c)
{
	return c->bg_started && pthread_equal(pthread_self(), c->bg_thread);
}
