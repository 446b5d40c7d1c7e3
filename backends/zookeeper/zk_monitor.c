/*
 * The monitor thread of a client: it times the session, replaces a dead
 * one and closes dead handles once no call uses them.
 *
 * Timing: the C client does not say when it last heard from the server, so
 * the monitor pings (an asynchronous exists on the base path) every third
 * of the negotiated timeout and keeps, per session, the send time of the
 * newest request that the server answered (pings and the driver's own
 * calls).  The server cannot have expired the session before that time
 * plus the timeout; past it (less 1% + 2 ms for clock rates), the session
 * is declared dead and its locks lost, even if the connection is still
 * being retried.  Counting from when the disconnection was noticed instead
 * would be late by as much as two thirds of the timeout.
 *
 * Observers' watches that a reconnection or a new session left unarmed
 * are armed again here, on the connected session, through the hook that
 * zk.c set at open (c->hooks, zk_elect.c's).
 *
 * Replacing: a session is never replaced from a watcher (that would make
 * synchronous calls on the completion thread); the watcher marks it dead
 * and the monitor starts the next one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "zookeeper_internal.h"

#define NS_PER_MS 1000000LL
#define MONITOR_IDLE_NS (1000 * NS_PER_MS)
#define RETRY_START_NS (1000 * NS_PER_MS)

static int64_t ping_interval_ns(const struct zk_session *s)
{
	int64_t ns = (int64_t)s->timeout_ms * NS_PER_MS / 3;
	return ns < 10 * NS_PER_MS ? 10 * NS_PER_MS : ns;
}

/* The time after which the server may have expired `s`; 0 before any answer. */
static int64_t expiry_ns(const struct zk_session *s)
{
	if (!s->last_ok_ns || s->timeout_ms <= 0)
		return 0;
	int64_t t = (int64_t)s->timeout_ms * NS_PER_MS;
	return s->last_ok_ns + t - t / 100 - 2 * NS_PER_MS;
}

static void ping_done(int rc, const struct Stat *stat, const void *data)
{
	struct zk_session *s = (struct zk_session *)data;
	struct zk_client *c = s->c;
	(void)stat;
	dlock_zk_log_enter(c); /* completion thread of one of c's handles */
	pthread_mutex_lock(&c->mu);
	if (dlock_zk_rc_answered(rc) && s->state != ZK_DEAD && s->ping_sent_ns > s->last_ok_ns)
		s->last_ok_ns = s->ping_sent_ns;
	s->ping_out = 0;
	s->next_ping_ns = s->ping_sent_ns + ping_interval_ns(s);
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/* mu held; dropped around the call.  Only the monitor closes sessions, so `s` stays. */
static void send_ping_locked(struct zk_client *c, struct zk_session *s)
{
	s->ping_out = 1;
	s->ping_sent_ns = dlock_monotonic_ns();
	pthread_mutex_unlock(&c->mu);
	int rc = zoo_aexists(s->zh, c->cfg.base, 0, ping_done, s);
	pthread_mutex_lock(&c->mu);
	if (rc != ZOK) {
		s->ping_out = 0;
		s->next_ping_ns = s->ping_sent_ns + ping_interval_ns(s);
	}
}

/* Declare the session dead when its time is up, ping when due; returns when to look again. */
static int64_t tick_locked(struct zk_client *c)
{
	struct zk_session *s = c->cur;
	int64_t now = dlock_monotonic_ns(), wake = now + MONITOR_IDLE_NS;
	int64_t expiry = expiry_ns(s);
	if (s->state != ZK_DEAD && expiry && now >= expiry) {
		dlock_zk_session_kill_locked(s, "no answer from ZooKeeper within the session timeout");
		pthread_mutex_unlock(&c->mu);
		dlock_host_log(c->host, DLOCK_LOG_WARN,
		               "zk: no answer from ZooKeeper for the session timeout (%d ms): session 0x%llx is "
		               "presumed expired and its locks lost; a new session will be started",
		               s->timeout_ms, (unsigned long long)s->id);
		pthread_mutex_lock(&c->mu);
		return now;
	}
	if (expiry && expiry < wake)
		wake = expiry;
	if (s->state == ZK_CONNECTED && !s->ping_out && now >= s->next_ping_ns)
		send_ping_locked(c, s);
	if (s->state == ZK_CONNECTED && !s->ping_out && s->next_ping_ns < wake)
		wake = s->next_ping_ns;
	return wake;
}

/* Start the next session; the dead one waits in `retired` until unused. */
static void replace_locked(struct zk_client *c)
{
	struct zk_session *next = NULL;
	dlock_error err = { "" };
	pthread_mutex_unlock(&c->mu);
	dlock_status st = dlock_zk_session_new(c, &next, &err);
	if (st != DLOCK_OK)
		dlock_host_log(c->host, DLOCK_LOG_WARN, "zk: cannot start a new session: %s", err.msg);
	pthread_mutex_lock(&c->mu);
	if (st != DLOCK_OK) {
		if (!c->stop)
			dlock_cond_wait_until(&c->cond, &c->mu, dlock_monotonic_ns() + RETRY_START_NS);
		return;
	}
	c->cur->next_retired = c->retired;
	c->retired = c->cur;
	c->cur = next;
	dlock_zk_slots_wake_locked(c);
	pthread_cond_broadcast(&c->cond);
}

static void close_retired_locked(struct zk_client *c)
{
	for (;;) {
		struct zk_session **pp = &c->retired;
		while (*pp && (*pp)->refs > 0)
			pp = &(*pp)->next_retired;
		struct zk_session *s = *pp;
		if (!s)
			return;
		*pp = s->next_retired;
		pthread_mutex_unlock(&c->mu);
		dlock_zk_session_free(s);
		pthread_mutex_lock(&c->mu);
	}
}

static void *monitor_main(void *arg)
{
	struct zk_client *c = arg;
	dlock_zk_log_enter(c);
	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		if (c->cur->state == ZK_DEAD) {
			replace_locked(c);
			continue;
		}
		close_retired_locked(c);
		c->hooks.rearm_locked(c); /* observers' watches, after a reconnection or a new session */
		int64_t wake = tick_locked(c);
		if (!c->stop && c->cur->state != ZK_DEAD)
			dlock_cond_wait_until(&c->cond, &c->mu, wake);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

dlock_status dlock_zk_monitor_start(struct zk_client *c, dlock_error *err)
{
	int rc = pthread_create(&c->monitor, NULL, monitor_main, c);
	if (rc != 0)
		return dlock_error_set(err, DLOCK_EIO, "zk://: cannot start the session monitor thread (error %d)", rc);
	c->monitor_started = 1;
	return DLOCK_OK;
}

void dlock_zk_sessions_close(struct zk_client *c)
{
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
	if (c->monitor_started)
		pthread_join(c->monitor, NULL);
	c->monitor_started = 0;
	/* Nothing else runs now: close() comes after every other call. */
	while (c->retired) {
		struct zk_session *s = c->retired;
		c->retired = s->next_retired;
		dlock_zk_session_free(s);
	}
	if (c->cur)
		dlock_zk_session_free(c->cur);
	c->cur = NULL;
}
