/*
 * The observer thread of a client: reads who leads each observed election
 * and calls its observer back on a change (dlock_observe()).  Started on
 * the first dlock_observe() of the client, stopped when it closes.  Who
 * leads is the first holder of an inspection of the name
 * (dlock_election_leader_of(), which dlock_election_leader() reads too).
 *
 * For each election it arms the driver's watch() first, then reads (an
 * inspection), so that a change between the two wakes it again; it reads
 * again when woken and at least every OBSERVE_PERIOD of the lease (the
 * URI's ttl), since notifications are lost while disconnected and an
 * expiring Redis key sends none.  A read showing an older term than one
 * already delivered is dropped: observers never go back.
 *
 * Threads: the fields of struct dlock_election that observing uses are
 * guarded by c->mu, dropped around driver calls and callbacks; an election
 * being read or called back is `observe_busy`, and dlock_observe(e, NULL)
 * waits for that to end.  One callback at a time per client.
 */
#include "internal.h"
#include "registry.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS 1000000LL

/* Read again after half the lease, at the latest: twice per lease. */
static int64_t read_period_ns(const struct dlock_client *c)
{
	int64_t ms = c->uri->ttl_ms / 2;
	return (ms < 100 ? 100 : ms) * NS_PER_MS;
}

dlock_status dlock_election_leader_of(const dlock_lock_info *info, dlock_leader *out)
{
	*out = (dlock_leader){ 0, 0, "", NULL };
	if (!info || info->nholders == 0)
		return DLOCK_OK;
	const dlock_holder *h = info->holders[0];
	out->elected = 1;
	out->term = h->token;
	out->value = h->value ? h->value : "";
	out->holder = h;
	return DLOCK_OK;
}

/* From the driver, any thread: the name may have changed. */
static void changed(void *arg)
{
	struct dlock_election *e = arg;
	struct dlock_client *c = e->client;
	pthread_mutex_lock(&c->mu);
	e->observe_changed = 1;
	pthread_cond_signal(&c->observe_cond);
	dlock_seam_soon_locked(c, 0);
	pthread_mutex_unlock(&c->mu);
}

/* 1 when `now` should be delivered after what `e` delivered last. */
static int news_locked(const struct dlock_election *e, const dlock_leader *now)
{
	if (now->elected && now->term == 0)
		return 0; /* a holder whose term is not known yet (PostgreSQL: before its proclaim, which notifies) */
	if (!e->observe_delivered)
		return 1;
	if (now->elected && e->last_elected && now->term < e->last_term)
		return 0; /* an older term: a stale read, never delivered */
	if (now->elected != e->last_elected || now->term != e->last_term)
		return 1;
	return now->elected && strcmp(now->value, e->last_value ? e->last_value : "") != 0;
}

static void remember_locked(struct dlock_election *e, const dlock_leader *now)
{
	e->observe_delivered = 1;
	e->last_elected = now->elected;
	if (now->elected)
		e->last_term = now->term;
	char *v = strdup(now->value);
	if (v) {
		free(e->last_value);
		e->last_value = v;
	}
}

/* One turn for `e`: arm, read, maybe call back.  c->mu held, dropped inside. */
static void observe_one_locked(struct dlock_client *c, struct dlock_election *e)
{
	dlock_driver_watch_fn *watch = dlock_driver_watch_of(c->driver);
	e->observe_busy = 1;
	e->observe_changed = 0;
	int arm = watch && !e->watch_handle;
	pthread_mutex_unlock(&c->mu);

	dlock_error err = { "" };
	void *handle = NULL;
	if (arm && watch(c->backend, e->name, strlen(e->name), changed, e, &handle, &err) != DLOCK_OK) {
		dlock_client_logf(c, DLOCK_LOG_DEBUG, "observer: no notification for now (%s); reading each period",
		                  err.msg);
		handle = NULL;
	}
	dlock_lock_info *info = NULL;
	dlock_status st = dlock_inspect(c, e->name, &info);
	dlock_leader now;
	dlock_election_leader_of(info, &now);

	pthread_mutex_lock(&c->mu);
	if (handle)
		e->watch_handle = handle;
	e->observe_next = dlock_monotonic_ns() + read_period_ns(c);
	if (st == DLOCK_OK && e->observe_fn && news_locked(e, &now)) {
		remember_locked(e, &now);
		dlock_leader_fn fn = e->observe_fn;
		void *ud = e->observe_userdata;
		if (c->reactor) { /* a loop client: the loop calls it, with the inspection it takes over */
			c->seam->post_observed_locked(c, e, fn, ud, info);
			info = NULL;
		} else {
			pthread_mutex_unlock(&c->mu);
			fn(e, &now, ud);
			pthread_mutex_lock(&c->mu);
		}
	} else if (st != DLOCK_OK) {
		dlock_client_logf(c, DLOCK_LOG_WARN, "observer: cannot read who leads (%s); trying again",
		                  dlock_status_name(st));
		e->observe_next = dlock_monotonic_ns() + read_period_ns(c) / 4;
	}
	pthread_mutex_unlock(&c->mu);
	dlock_lock_info_free(info);
	pthread_mutex_lock(&c->mu);
	e->observe_busy = 0;
	pthread_cond_broadcast(&c->cond);
}

/* The first election due for a turn, or NULL and in *next when the next one is.  c->mu held. */
static struct dlock_election *first_due_locked(struct dlock_client *c, int64_t *next)
{
	int64_t now = dlock_monotonic_ns();
	*next = INT64_MAX;
	for (struct dlock_election *e = c->observed; e; e = e->observe_next_in_client) {
		if (e->observe_changed || now >= e->observe_next)
			return e;
		if (e->observe_next < *next)
			*next = e->observe_next;
	}
	return NULL;
}

static void *observe_main(void *arg)
{
	struct dlock_client *c = arg;
	pthread_mutex_lock(&c->mu);
	while (!c->observe_stop) {
		int64_t next;
		struct dlock_election *due = first_due_locked(c, &next);
		if (due)
			observe_one_locked(c, due);
		else
			dlock_cond_wait_until(&c->observe_cond, &c->mu, next);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int64_t dlock_observer_tick_locked(struct dlock_client *c)
{
	int64_t next = INT64_MAX;
	struct dlock_election *due;
	while (!c->observe_stop && (due = first_due_locked(c, &next)) != NULL)
		observe_one_locked(c, due);
	return next;
}

/* Start the thread if it is not running.  c->mu held. */
static dlock_status start_locked(struct dlock_client *c)
{
	if (c->observe_started || c->loop_native) /* a native loop client observes in its loop's tick */
		return DLOCK_OK;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&c->observe_thread, NULL, observe_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return DLOCK_ENOMEM;
	c->observe_started = 1;
	return DLOCK_OK;
}

static void unlink_locked(struct dlock_client *c, struct dlock_election *e)
{
	struct dlock_election **pp = &c->observed;
	while (*pp && *pp != e)
		pp = &(*pp)->observe_next_in_client;
	if (*pp)
		*pp = e->observe_next_in_client;
	e->observe_next_in_client = NULL;
}

dlock_status dlock_observe(dlock_election *e, dlock_leader_fn fn, void *userdata)
{
	if (!e)
		return DLOCK_EINVAL;
	struct dlock_client *c = e->client;
	pthread_mutex_lock(&c->mu);
	int self = c->observe_started && pthread_equal(pthread_self(), c->observe_thread);
	if (fn) {
		if (c->closing) {
			pthread_mutex_unlock(&c->mu);
			return dlock_client_fail(c, DLOCK_ECLOSED, "client is closed");
		}
		dlock_status st = start_locked(c);
		if (st != DLOCK_OK) {
			pthread_mutex_unlock(&c->mu);
			return dlock_client_fail(c, st, "cannot start the client's observer thread");
		}
		if (!e->observing) {
			e->observe_next_in_client = c->observed;
			c->observed = e;
			e->observing = 1;
		}
		e->observe_fn = fn;
		e->observe_userdata = userdata;
		e->observe_delivered = 0; /* the new observer hears who leads now */
		e->observe_changed = 1;
		pthread_cond_signal(&c->observe_cond);
		dlock_seam_soon_locked(c, 0);
		pthread_mutex_unlock(&c->mu);
		return DLOCK_OK;
	}
	if (self && e->observe_busy) {
		e->observe_fn = NULL; /* stops after this call; the caller may not free it now */
		pthread_mutex_unlock(&c->mu);
		return dlock_client_fail(c, DLOCK_EDEADLK, "an observer cannot stop its own election from its callback");
	}
	e->observe_fn = NULL;
	/* A closing client disarms every watch itself (dlock_observer_stop()): wait for that. */
	while (c->closing && !c->observers_disarmed && !self) /* (the observer thread: close waits for it) */
		pthread_cond_wait(&c->cond, &c->mu);
	if (e->observing) {
		unlink_locked(c, e);
		e->observing = 0;
	}
	while (e->observe_busy)
		pthread_cond_wait(&c->cond, &c->mu);
	void *handle = e->watch_handle;
	e->watch_handle = NULL;
	if (handle)
		c->inflight++; /* closing waits for the driver call */
	pthread_mutex_unlock(&c->mu);
	if (handle)
		dlock_driver_unwatch_of(c->driver)(c->backend, handle);
	pthread_mutex_lock(&c->mu);
	if (handle) {
		c->inflight--;
		pthread_cond_broadcast(&c->cond);
	}
	free(e->last_value);
	e->last_value = NULL;
	pthread_mutex_unlock(&c->mu);
	return DLOCK_OK;
}

void dlock_observer_stop(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	int started = c->observe_started;
	c->observe_stop = 1;
	pthread_cond_signal(&c->observe_cond);
	pthread_mutex_unlock(&c->mu);
	if (started)
		pthread_join(c->observe_thread, NULL);
	/* Disarm every watch while the driver is still open; the elections stay for their owners to free. */
	dlock_driver_unwatch_fn *unwatch = dlock_driver_unwatch_of(c->driver);
	pthread_mutex_lock(&c->mu);
	for (struct dlock_election *e = c->observed; e; e = e->observe_next_in_client) {
		void *handle = e->watch_handle;
		e->watch_handle = NULL;
		if (handle && unwatch) {
			pthread_mutex_unlock(&c->mu);
			unwatch(c->backend, handle);
			pthread_mutex_lock(&c->mu);
		}
	}
	c->observers_disarmed = 1;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}
