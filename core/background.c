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
 * The renewal thread also cleans up after a declared loss (see sched.c,
 * cleanup_due(), for when): it has the driver release what may be left of
 * the acquisition on the server (the release is owner-only), and only then
 * lets the next local contender for the name go to the server, so that the
 * other handles of the client move on without waiting for the application
 * to release the lost one.
 *
 * Both take their work from the client's timetables (sched.c); a loss, a
 * renewal's answer, a cleanup and a linger's end go through held.c and
 * linger.c, the hold bounds through hold.c.  Threads: both run with
 * c->mu held, dropped around driver calls (the handles marked busy) and
 * callbacks.  Errors: starting returns DLOCK_ENOMEM when a thread cannot be
 * made; a failed renewal is logged and tried again until the lease runs
 * out, and the holder then hears of the loss.
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
	if (c->reactor && !c->loop_native) { /* a loop client whose background runs on threads: the loop runs it */
		c->seam->post_lost_locked(c, l);
		return;
	}
	unsigned inline_depth = c->loop_inline;
	if (c->loop_native) { /* on the loop already (its tick): a handle freed inside waits for the return */
		l->async_refs++;
		c->callbacks_depth++;
		c->loop_inline = 0; /* the application's blocking calls are refused there, as anywhere on the loop */
	}
	l->callback_running = 1;
	dlock_lost_fn fn = l->on_lost;
	void *ud = l->lost_userdata;
	dlock_lost_reason reason = l->lost_reason;
	char detail[DLOCK_LOST_DETAIL_MAX + 1];
	snprintf(detail, sizeof detail, "%s", dlock_lock_lost_text(l));
	pthread_mutex_unlock(&c->mu);
	fn(l, reason, detail, ud);
	pthread_mutex_lock(&c->mu);
	l->callback_running = 0;
	pthread_cond_broadcast(&c->cond);
	if (c->loop_native) {
		c->loop_inline = inline_depth;
		c->callbacks_depth--;
		pthread_mutex_unlock(&c->mu);
		c->seam->unref(l);
		pthread_mutex_lock(&c->mu);
	}
}

/* Declare due expiries (the first of the watch timetable) and deliver one
 * queued loss; returns 1 after a delivery (handles may have changed while
 * c->mu was dropped), else 0 and the next expiry.  Only a loss makes it
 * walk the handles, to find the one with its report queued. */
static int watch_locked(struct dlock_client *c, int64_t *next_due)
{
	int64_t now = dlock_monotonic_ns();
	struct dlock_lock *l;
	while ((l = dlock_sched_first(c, DLOCK_SCHED_WATCH)) != NULL && now >= l->sched_key[DLOCK_SCHED_WATCH]) {
		if (dlock_hold_due_reason(l, now) == DLOCK_LOST_MAX_HOLD)
			dlock_lock_declare_lost(l, DLOCK_LOST_MAX_HOLD, "held for its maximum hold: released");
		else
			dlock_lock_declare_lost(l, DLOCK_LOST_EXPIRED, "lease ran out without a successful renewal");
	}
	if (c->losses_pending) {
		for (l = c->locks; l; l = l->next) {
			if (l->held && l->lost_pending) {
				deliver_lost_locked(c, l);
				return 1;
			}
		}
		c->losses_pending = 0;
	}
	l = dlock_sched_first(c, DLOCK_SCHED_WATCH);
	*next_due = l ? l->sched_key[DLOCK_SCHED_WATCH] : INT64_MAX;
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

/* Apply the answer to one renewal of acquisition `generation` sent at `sent`; c->mu held. */
static void renewed_locked(struct dlock_lock *l, uint64_t generation, int64_t lease_ns, int64_t sent,
                           dlock_status st, const char *msg)
{
	struct dlock_client *c = l->client;
	l->busy = 0;
	/* A renewal that returns after the loss was declared changes nothing:
	 * the holder has been told, and release cleans up what is still ours. */
	if (!l->held || l->generation != generation || l->lost) {
		dlock_sched_update(l);
		return;
	}
	if (st == DLOCK_OK) {
		dlock_lock_lease_renewed(l, sent, lease_ns);
		c->stats.renewals++;
	} else if (st == DLOCK_ENOTHELD) {
		dlock_lock_declare_lost(l, dlock_lock_gone_reason(l, sent), msg[0] ? msg : "renewal found the lock gone");
	} else {
		/* Transient: try again soon; the watch thread declares the loss
		 * if no renewal succeeds in time. */
		dlock_client_logf(c, DLOCK_LOG_WARN, "lease renewal failed (%s): %s; retrying", dlock_status_name(st), msg);
		l->next_renew = dlock_monotonic_ns() + min64(lease_ns / 10, 1000 * NS_PER_MS);
	}
	dlock_sched_update(l);
}

#define CLEANUP_WHAT "releasing a lost lock on the server"
#define CLOSE_WHAT "closing: a held lock could not be released"

void dlock_background_answer_locked(struct dlock_lock *l, enum dlock_bg_call what, uint64_t generation,
                                    int64_t lease_ns, int64_t sent, dlock_status st, const char *msg)
{
	struct dlock_client *c = l->client;
	switch (what) {
	case DLOCK_BG_RENEW:
		renewed_locked(l, generation, lease_ns, sent, st, msg);
		break;
	case DLOCK_BG_CLEANUP:
		dlock_lock_release_answered_locked(l, DLOCK_LOG_DEBUG, CLEANUP_WHAT, st, msg);
		dlock_lock_loss_cleaned(l);
		break;
	case DLOCK_BG_LINGER_END:
		dlock_lock_release_answered_locked(l, DLOCK_LOG_WARN, DLOCK_LINGER_END_FAILED, st, msg);
		dlock_lock_drop_hold_locked(l);
		break;
	case DLOCK_BG_CLOSE: /* the close finishes the handle (dlock_locks_shutdown_finish_locked()) */
		dlock_lock_release_answered_locked(l, DLOCK_LOG_WARN, CLOSE_WHAT, st, msg);
		break;
	}
	pthread_cond_broadcast(&c->cond);
}

/*
 * Renew batch[0..n) in one driver call (extend_many), or the one lock with
 * extend(); c->mu held, dropped inside.  Each lock's new lease counts from
 * the moment the batch was sent.
 */
static void renew_batch_locked(struct dlock_client *c, struct renewal *batch, size_t n, int64_t now)
{
	if (c->loop_io) { /* on the loop: each lock's extend_start, answered later */
		for (size_t i = 0; i < n; i++)
			if (!dlock_seam_bg_call_locked(batch[i].l, DLOCK_BG_RENEW, batch[i].generation, batch[i].lease_ns))
				renewed_locked(batch[i].l, batch[i].generation, batch[i].lease_ns, now, DLOCK_ENOMEM,
				               "out of memory");
		return;
	}
	dlock_driver_extend_many_fn *many = dlock_driver_extend_many_of(c->driver);
	void *lks[DLOCK_RENEW_BATCH_MAX];
	int64_t lease_ms[DLOCK_RENEW_BATCH_MAX];
	dlock_status st[DLOCK_RENEW_BATCH_MAX];
	dlock_error err = { "" };
	for (size_t i = 0; i < n; i++) {
		batch[i].l->busy = 1;
		dlock_sched_update(batch[i].l);
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
		renewed_locked(batch[i].l, batch[i].generation, batch[i].lease_ns, sent, st[i], err.msg);
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
	if (dlock_seam_bg_call_locked(l, DLOCK_BG_CLEANUP, l->generation, 0))
		return; /* on the loop: answered later */
	dlock_lock_server_release_locked(l, DLOCK_LOG_DEBUG, CLEANUP_WHAT);
	dlock_lock_loss_cleaned(l);
	pthread_cond_broadcast(&c->cond);
}

/* A lingering hold's minimum has passed: release it now; c->mu held, dropped inside. */
static void end_linger_locked(struct dlock_lock *l)
{
	if (!l->loss_cleaned && dlock_seam_bg_call_locked(l, DLOCK_BG_LINGER_END, l->generation, 0))
		return; /* on the loop: answered later */
	dlock_linger_end_locked(l, 0);
}

/*
 * Do one due cleanup, or the due renewals, taken from the front of the
 * renewal timetable (sched.c: a lost acquisition is there until cleaned,
 * keyed on when its cleanup is due; a lease that the client saw run out is
 * still the server's until its end, the holder's time to act on the news
 * before anyone else can have the lock).  With a driver that renews in
 * batches, every lock due (and those due within their batch_slack()) up to
 * DLOCK_RENEW_BATCH_MAX at once, else the first one due.  Returns 1 if it
 * did something, else 0 and the next due time.  The cost is that of the
 * locks due, whatever the number of locks held.
 */
static int renew_due_locked(struct dlock_client *c, int64_t *next_due)
{
	struct renewal batch[DLOCK_RENEW_BATCH_MAX];
	size_t n = 0, max = dlock_driver_extend_many_of(c->driver) && !c->loop_io ? DLOCK_RENEW_BATCH_MAX : 1;
	int64_t now = dlock_monotonic_ns();
	struct dlock_lock *l;
	while (n < max && (l = dlock_sched_first(c, DLOCK_SCHED_RENEW)) != NULL) {
		int64_t due = l->sched_key[DLOCK_SCHED_RENEW];
		if (l->lost) {
			if (now < due || n > 0)
				break; /* the batch goes first; the cleanup on the next turn */
			if (c->closing) {
				/* Closing releases it; the renewals of the others go on meanwhile. */
				l->busy = 1;
				dlock_sched_update(l);
				l->busy = 0;
				continue;
			}
			clean_lost_locked(c, l);
			return 1;
		}
		if (l->lingering) {
			if (now >= l->min_until) { /* its minimum hold has passed: release it now */
				if (n > 0)
					break;
				end_linger_locked(l);
				return 1;
			}
			if (now < due)
				break;
		}
		if (now < due && (n == 0 || now + batch_slack(l) < due))
			break;
		batch[n++] = (struct renewal){ .l = l, .generation = l->generation,
			                       .lease_ns = dlock_hold_renew_lease(l, now) };
		l->busy = 1; /* out of the timetable while its renewal is on the way */
		dlock_sched_update(l);
	}
	if (n == 0) {
		l = dlock_sched_first(c, DLOCK_SCHED_RENEW);
		*next_due = l ? l->sched_key[DLOCK_SCHED_RENEW] : INT64_MAX;
		return 0;
	}
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

/* ------------------------------------------------------------ on a loop */

int64_t dlock_background_tick_locked(struct dlock_client *c)
{
	int64_t next_watch = INT64_MAX, next_renew = INT64_MAX;
	while (watch_locked(c, &next_watch))
		;
	/* A closing client whose driver runs on the loop starts no call there: the close releases what it holds. */
	while (!(c->loop_io && c->closing) && renew_due_locked(c, &next_renew))
		;
	return min64(next_watch, next_renew);
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

int dlock_background_is_self(struct dlock_client *c)
{
	if (c->loop_native) /* its background work runs on the loop */
		return dlock_reactor_is_loop_thread(c->reactor);
	return c->bg_started && pthread_equal(pthread_self(), c->bg_thread);
}
