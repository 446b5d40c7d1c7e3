/*
 * Sessions: one zhandle per session, one current session per client,
 * shared by all its threads.  The library reconnects by itself (to any
 * server of the ensemble) while the session lives; what it cannot do is
 * tell how long the session has left.  So:
 *
 *   CONNECTING  connection lost: locks are still held as far as we know
 *               (check() answers "uncertain"); the monitor declares the
 *               session dead once the negotiated timeout has passed since
 *               the send time of the newest request the server answered,
 *               because the server may expire it then without being able
 *               to tell us.
 *   CONNECTED   requests go through.
 *   DEAD        expired (the server said so), presumed expired (see
 *               above) or refused: every lock held in it is reported lost
 *               and the monitor starts a new session for later acquires.
 *               A dead session's handle is closed once no call uses it.
 *
 * What a change means to the layers above (observers' watches to arm
 * again, held locks to report lost) is theirs: the session calls the hooks
 * that zk.c set at open (c->hooks), and nothing above it by name.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "zookeeper_internal.h"

#define NS_PER_MS 1000000LL
#define LOSS_SETTLE_NS (20 * NS_PER_MS)

/* ------------------------------------------------------------ events */

static void on_connected_locked(struct zk_session *s, zhandle_t *zh, char *msg, size_t len)
{
	const clientid_t *id = zoo_client_id(zh);
	s->state = ZK_CONNECTED;
	s->id = id ? id->client_id : 0;
	s->timeout_ms = zoo_recv_timeout(zh);
	/* The server renewed the session when it took this connection, just
	 * before now; the first ping confirms it with a measured send time. */
	s->last_ok_ns = dlock_monotonic_ns();
	s->next_ping_ns = s->last_ok_ns;
	const char *server = zoo_get_current_server(zh);
	snprintf(msg, len, "zk: connected to %s, session 0x%llx, negotiated timeout %d ms",
	         server ? server : "?", (unsigned long long)s->id, s->timeout_ms);
}

static void on_connecting_locked(struct zk_session *s, char *msg, size_t len)
{
	if (s->state != ZK_CONNECTED)
		return;
	s->state = ZK_CONNECTING;
	snprintf(msg, len,
	         "zk: connection lost, reconnecting; session 0x%llx and its locks last at most %d ms "
	         "after the last answer",
	         (unsigned long long)s->id, s->timeout_ms);
}

/* The global watcher of every handle: session events only (no call sets a default watch). */
static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk_session *s = ctx;
	struct zk_client *c = s->c;
	char msg[256] = "";
	dlock_log_level level = DLOCK_LOG_WARN;
	(void)path;
	dlock_zk_log_enter(c); /* the completion thread of this handle works for c only */
	if (type != ZOO_SESSION_EVENT)
		return;
	pthread_mutex_lock(&c->mu);
	if (s->state != ZK_DEAD) {
		if (state == ZOO_CONNECTED_STATE) {
			on_connected_locked(s, zh, msg, sizeof msg);
			c->hooks.reconnected_locked(c); /* observers' watches: the monitor arms them again, then tells */
			level = DLOCK_LOG_INFO;
		} else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
			on_connecting_locked(s, msg, sizeof msg);
		} else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
			const char *why = state == ZOO_EXPIRED_SESSION_STATE ? "the ZooKeeper session expired"
			                                                     : "ZooKeeper refused the credentials";
			dlock_zk_session_kill_locked(s, why);
			snprintf(msg, sizeof msg, "zk: session 0x%llx ended: %s; a new session will be started",
			         (unsigned long long)s->id, why);
		}
		dlock_zk_slots_wake_locked(c);
		pthread_cond_broadcast(&c->cond);
	}
	int now_connected = s->state == ZK_CONNECTED && state == ZOO_CONNECTED_STATE;
	pthread_mutex_unlock(&c->mu);
	if (now_connected)
		dlock_zk_own_reconnected(s);
	if (msg[0])
		dlock_host_log(c->host, level, "%s", msg);
}

void dlock_zk_session_kill_locked(struct zk_session *s, const char *why)
{
	struct zk_client *c = s->c;
	if (s->state == ZK_DEAD)
		return;
	s->state = ZK_DEAD;
	c->hooks.expired_locked(c, s->gen, why);
	dlock_zk_slots_wake_locked(c);
	pthread_cond_broadcast(&c->cond);
}

/* ------------------------------------------------------------ handles */

dlock_status dlock_zk_session_new(struct zk_client *c, struct zk_session **out, dlock_error *err)
{
	dlock_status st;
	struct zk_session *s = calloc(1, sizeof *s);
	*out = NULL;
	if (!s)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	s->c = c;
	pthread_mutex_lock(&c->mu);
	s->gen = ++c->next_gen;
	pthread_mutex_unlock(&c->mu);
	s->zh = zookeeper_init2(c->cfg.hosts, session_watcher, c->cfg.session_timeout_ms, NULL, s, 0,
	                        dlock_zk_log_line);
	if (!s->zh) {
		st = dlock_error_set(err, DLOCK_ECONNECT, "zk://%s: cannot start a session: %s", c->cfg.hosts,
		                     strerror(errno));
		goto fail;
	}
	/* Host names are resolved again on connection loss only, not on every turn of the I/O thread (the
	 * library's default): no getaddrinfo() runs in a quiet client, so a process that forks while one is
	 * open does not hand its child the resolver's lock held (glibc's check_pf), nor load the DNS. */
	zoo_set_servers_resolution_delay(s->zh, -1);
	/* Kept by the handle and sent again on every reconnection, before any request. */
	if (c->cfg.auth) {
		int rc = zoo_add_auth(s->zh, "digest", c->cfg.auth, (int)strlen(c->cfg.auth), NULL, NULL);
		if (rc == ZINVALIDSTATE) { /* the handle already gave up connecting */
			st = dlock_error_set(err, DLOCK_ECONNECT, "zk://%s: cannot connect", c->cfg.hosts);
			goto fail;
		}
		if (rc != ZOK) {
			st = dlock_zk_fail(err, rc, "adding the digest credentials");
			goto fail;
		}
	}
	*out = s;
	return DLOCK_OK;
fail:
	if (s->zh)
		zookeeper_close(s->zh);
	free(s);
	return st;
}

void dlock_zk_session_free(struct zk_session *s)
{
	/* Never with c->mu held: closing joins the completion thread, which may wait for it. */
	if (s->zh)
		zookeeper_close(s->zh);
	free(s);
}

/* ------------------------------------------------------------ use */

dlock_status dlock_zk_session_wait(struct zk_client *c, dlock_wait *w, struct zk_session **out,
                                   dlock_error *err)
{
	pthread_mutex_lock(&c->mu);
	for (;;) {
		struct zk_session *s = c->cur;
		if (s->state == ZK_CONNECTED) {
			s->refs++;
			*out = s;
			pthread_mutex_unlock(&c->mu);
			return DLOCK_OK;
		}
		pthread_mutex_unlock(&c->mu);
		if (dlock_wait_try_once(w))
			return dlock_error_set(err, DLOCK_ECONNECT, "zk://: not connected to ZooKeeper (reconnecting)");
		/* Session events wake the acquire through its slot. */
		dlock_status st = dlock_wait_sleep(w, -1);
		if (st == DLOCK_ECANCELED)
			return dlock_error_set(err, st, "zk://: acquire cancelled while waiting for a connection");
		if (st != DLOCK_OK)
			return dlock_error_set(err, DLOCK_ECONNECT,
			                       "zk://: no connection to ZooKeeper before the wait ran out");
		pthread_mutex_lock(&c->mu);
	}
}

struct zk_session *dlock_zk_session_of(struct zk_client *c, uint64_t gen)
{
	pthread_mutex_lock(&c->mu);
	struct zk_session *s = c->cur;
	if (s->gen == gen && s->state != ZK_DEAD)
		s->refs++;
	else
		s = NULL;
	pthread_mutex_unlock(&c->mu);
	return s;
}

void dlock_zk_session_put(struct zk_session *s)
{
	struct zk_client *c = s->c;
	pthread_mutex_lock(&c->mu);
	if (--s->refs == 0 && s->state == ZK_DEAD)
		pthread_cond_broadcast(&c->cond); /* the monitor may close it now */
	pthread_mutex_unlock(&c->mu);
}

int dlock_zk_session_await(struct zk_session *s, int after_loss)
{
	struct zk_client *c = s->c;
	pthread_mutex_lock(&c->mu);
	/* A call can fail with a connection loss before the watcher has heard of
	 * it: give the news a moment to arrive instead of retrying at once. */
	int64_t settle = dlock_monotonic_ns() + LOSS_SETTLE_NS;
	while (after_loss && s->state == ZK_CONNECTED &&
	       dlock_cond_wait_until(&c->cond, &c->mu, settle) != ETIMEDOUT)
		;
	while (s->state == ZK_CONNECTING)
		pthread_cond_wait(&c->cond, &c->mu);
	int up = s->state == ZK_CONNECTED;
	pthread_mutex_unlock(&c->mu);
	return up;
}

int dlock_zk_session_connected(struct zk_session *s)
{
	pthread_mutex_lock(&s->c->mu);
	int up = s->state == ZK_CONNECTED;
	pthread_mutex_unlock(&s->c->mu);
	return up;
}

void dlock_zk_session_answered(struct zk_session *s, int64_t sent_ns)
{
	pthread_mutex_lock(&s->c->mu);
	if (s->state != ZK_DEAD && sent_ns > s->last_ok_ns)
		s->last_ok_ns = sent_ns;
	pthread_mutex_unlock(&s->c->mu);
}

/* ------------------------------------------------------------ first session */

static dlock_status await_first_connection(struct zk_client *c, struct zk_session *s, dlock_error *err)
{
	int64_t deadline = dlock_monotonic_ns() + c->cfg.connect_timeout_ms * NS_PER_MS;
	pthread_mutex_lock(&c->mu);
	while (s->state == ZK_CONNECTING && dlock_cond_wait_until(&c->cond, &c->mu, deadline) != ETIMEDOUT)
		;
	enum zk_state state = s->state;
	pthread_mutex_unlock(&c->mu);
	if (state == ZK_CONNECTED)
		return DLOCK_OK;
	if (state == ZK_DEAD)
		return dlock_error_set(err, DLOCK_EAUTH, "zk://%s: ZooKeeper refused the session or its credentials",
		                       c->cfg.hosts);
	return dlock_error_set(err, DLOCK_ECONNECT, "zk://%s: cannot connect to ZooKeeper within %lld ms",
	                       c->cfg.hosts, (long long)c->cfg.connect_timeout_ms);
}

dlock_status dlock_zk_session_start(struct zk_client *c, dlock_error *err)
{
	struct zk_session *s;
	dlock_status st = dlock_zk_session_new(c, &s, err);
	if (st != DLOCK_OK)
		return st;
	c->cur = s;
	return await_first_connection(c, s, err);
}
