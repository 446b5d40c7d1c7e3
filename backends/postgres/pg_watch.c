/*
 * mode=advisory: observers of elections woken by LISTEN/NOTIFY.  A client
 * that watches a name gets one connection of its own for it (never one of
 * the pool: a LISTEN session must stay idle between notifications, and no
 * lock pins it), and one thread, both made at its first watch() and ended
 * when the client closes.  The thread owns the connection: it LISTENs on
 * the channel of each watched name (pg_elect.c: the name's key in hex),
 * UNLISTENs those no longer watched, and waits in poll() for a
 * notification, a new watch (an eventfd) or PING_MS of quiet, after which
 * a "SELECT 1" proves the connection still works (a silently dropped
 * connection, a server's idle timeout).
 *
 * Calls of changed(): after the LISTEN of a new watch is in effect (the
 * core's read may have come before it: the call makes it read again), on
 * each notification of the watch's channel, and, after a lost connection,
 * for every watch once the new connection LISTENs again (notifications
 * sent meanwhile are lost).  watch() itself does not wait for the LISTEN.
 * While the server cannot be reached the thread tries again after 100 ms,
 * doubling up to 2 s; the core reads once per lease meanwhile.
 *
 * Threads: `mu` guards the watch list and `stop`, and is held while
 * changed() runs, so that once unwatch() has returned its watch is neither
 * running nor called again (changed() takes only the core's client lock,
 * which the core never holds when it calls watch() or unwatch()).  The
 * connection and the list of channels listened are the thread's alone.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pg_backend.h"

#define PING_MS 10000
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 2000

struct pg_watch {
	struct pg_watch *next;
	int64_t key;
	void (*changed)(void *arg);
	void *arg;
	int listened; /* (mu) the thread's connection LISTENs on its channel */
};

struct dlock_pg_listener {
	struct dlock_pg_backend *b;
	pthread_mutex_t mu;
	pthread_t thread;
	int wake_fd;
	int stop;                 /* (mu) */
	struct pg_watch *watches; /* (mu) */
	/* The thread's own: its connection and the channels it listens on. */
	struct dlock_pg_conn *conn;
	int64_t *keys;
	size_t nkeys, capkeys;
};

static void wake(struct dlock_pg_listener *l)
{
	uint64_t one = 1;
	ssize_t n = write(l->wake_fd, &one, sizeof one);
	(void)n; /* a full counter already wakes it */
}

static void drain_wake(struct dlock_pg_listener *l)
{
	uint64_t drain;
	while (read(l->wake_fd, &drain, sizeof drain) > 0)
		;
}

/* Call the watches of `key` (any: every watch).  mu held. */
static void call_locked(struct dlock_pg_listener *l, int any, int64_t key)
{
	for (struct pg_watch *w = l->watches; w; w = w->next)
		if (any || w->key == key)
			w->changed(w->arg);
}

/* The connection failed: drop it; every watch LISTENs again on the next one. */
static void conn_lost(struct dlock_pg_listener *l)
{
	dlock_pg_conn_close(l->conn);
	l->conn = NULL;
	l->nkeys = 0;
	pthread_mutex_lock(&l->mu);
	for (struct pg_watch *w = l->watches; w; w = w->next)
		w->listened = 0;
	pthread_mutex_unlock(&l->mu);
}

static int simple(struct dlock_pg_listener *l, const char *sql)
{
	struct dlock_pg_stmt s = { .sql = sql };
	char sqlstate[6];
	dlock_error ignored;
	return dlock_pg_run(l->b, l->conn, &s, sqlstate, &ignored) == DLOCK_OK;
}

static int keys_has(const struct dlock_pg_listener *l, int64_t key, size_t *at)
{
	for (size_t i = 0; i < l->nkeys; i++)
		if (l->keys[i] == key) {
			if (at)
				*at = i;
			return 1;
		}
	return 0;
}

/* One LISTEN or UNLISTEN that the watches call for; 0 when none is due, -1 when the connection failed. */
static int listen_step(struct dlock_pg_listener *l)
{
	int64_t key = 0;
	int job = 0; /* 1 LISTEN, 2 UNLISTEN */
	pthread_mutex_lock(&l->mu);
	for (struct pg_watch *w = l->watches; w && !job; w = w->next)
		if (!w->listened) {
			key = w->key;
			job = 1;
		}
	for (size_t i = 0; i < l->nkeys && !job; i++) {
		int watched = 0;
		for (struct pg_watch *w = l->watches; w && !watched; w = w->next)
			watched = w->key == l->keys[i];
		if (!watched) {
			key = l->keys[i];
			job = 2;
		}
	}
	pthread_mutex_unlock(&l->mu);
	if (!job)
		return 0;
	char channel[DLOCK_PG_CHANNEL_SIZE], sql[DLOCK_PG_CHANNEL_SIZE + 16];
	dlock_pg_leader_channel(key, channel);
	snprintf(sql, sizeof sql, "%s %s", job == 1 ? "LISTEN" : "UNLISTEN", channel);
	if (!keys_has(l, key, NULL) || job == 2) {
		if (!simple(l, sql))
			return -1;
	}
	size_t at;
	if (job == 2 && keys_has(l, key, &at)) {
		l->keys[at] = l->keys[--l->nkeys];
		return 1;
	}
	if (!keys_has(l, key, NULL)) {
		if (l->nkeys == l->capkeys) {
			size_t cap = l->capkeys ? l->capkeys * 2 : 8;
			int64_t *v = realloc(l->keys, cap * sizeof *v);
			if (!v) {
				simple(l, "UNLISTEN *");
				return -1; /* start again on a new connection */
			}
			l->keys = v;
			l->capkeys = cap;
		}
		l->keys[l->nkeys++] = key;
	}
	pthread_mutex_lock(&l->mu);
	for (struct pg_watch *w = l->watches; w; w = w->next)
		if (w->key == key && !w->listened) {
			w->listened = 1;
			w->changed(w->arg); /* its first read may have come before the LISTEN */
		}
	pthread_mutex_unlock(&l->mu);
	return 1;
}

/* The notifications libpq has read: each wakes its channel's watches. */
static void deliver(struct dlock_pg_listener *l)
{
	for (PGnotify *n; (n = PQnotifies(l->conn->pg)) != NULL; PQfreemem(n)) {
		unsigned long long k = 0;
		if (sscanf(n->relname, "dlock_leader_%16llx", &k) != 1)
			continue;
		pthread_mutex_lock(&l->mu);
		call_locked(l, 0, (int64_t)k);
		pthread_mutex_unlock(&l->mu);
	}
}

/* Sleep `ms` or until woken; 1 when told to stop. */
static int nap(struct dlock_pg_listener *l, int ms)
{
	struct pollfd p = { .fd = l->wake_fd, .events = POLLIN };
	poll(&p, 1, ms);
	drain_wake(l);
	pthread_mutex_lock(&l->mu);
	int stop = l->stop;
	pthread_mutex_unlock(&l->mu);
	return stop;
}

/* Wait for a notification, a wake-up or PING_MS; 0 when the connection failed. */
static int await(struct dlock_pg_listener *l)
{
	deliver(l); /* read along with a statement's result */
	struct pollfd p[2] = { { .fd = PQsocket(l->conn->pg), .events = POLLIN },
		               { .fd = l->wake_fd, .events = POLLIN } };
	int n = poll(p, 2, PING_MS);
	drain_wake(l);
	if (p[0].revents) {
		if (!PQconsumeInput(l->conn->pg) || PQstatus(l->conn->pg) != CONNECTION_OK)
			return 0;
		deliver(l);
	}
	return n != 0 || simple(l, "SELECT 1");
}

static void *listen_main(void *arg)
{
	struct dlock_pg_listener *l = arg;
	int retry_ms = 0;
	while (!nap(l, retry_ms)) {
		if (!l->conn) {
			dlock_error ignored;
			if (dlock_pg_conn_open(l->b, &l->conn, &ignored) != DLOCK_OK) {
				l->conn = NULL;
				retry_ms = retry_ms < RETRY_MIN_MS ? RETRY_MIN_MS : retry_ms * 2;
				retry_ms = retry_ms > RETRY_MAX_MS ? RETRY_MAX_MS : retry_ms;
				continue;
			}
		}
		retry_ms = 0;
		int step = listen_step(l);
		if (step < 0 || (step == 0 && !await(l)))
			conn_lost(l);
	}
	dlock_pg_conn_close(l->conn);
	l->conn = NULL;
	return NULL;
}

static struct dlock_pg_listener *listener_new(struct dlock_pg_backend *b, dlock_error *err)
{
	struct dlock_pg_listener *l = calloc(1, sizeof *l);
	if (!l) {
		dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
		return NULL;
	}
	l->b = b;
	l->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->wake_fd < 0) {
		free(l);
		dlock_error_set(err, DLOCK_EIO, "eventfd: out of descriptors");
		return NULL;
	}
	pthread_mutex_init(&l->mu, NULL);
	if (pthread_create(&l->thread, NULL, listen_main, l) != 0) {
		pthread_mutex_destroy(&l->mu);
		close(l->wake_fd);
		free(l);
		dlock_error_set(err, DLOCK_EIO, "cannot start the LISTEN thread");
		return NULL;
	}
	return l;
}

void dlock_pg_listener_free(struct dlock_pg_listener *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	l->stop = 1;
	pthread_mutex_unlock(&l->mu);
	wake(l);
	pthread_join(l->thread, NULL);
	for (struct pg_watch *w = l->watches, *next; w; w = next) {
		next = w->next;
		free(w);
	}
	free(l->keys);
	pthread_mutex_destroy(&l->mu);
	close(l->wake_fd);
	free(l);
}

dlock_status dlock_pg_watch(void *backend, const char *name, size_t len, void (*changed)(void *arg), void *arg,
                            void **out, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	if (b->mode != &dlock_pg_advisory_mode)
		return dlock_error_set(err, DLOCK_ENOTSUP, "%s: mode=row has no leader election", b->masked);
	size_t n;
	char *ns = dlock_pg_namespaced(b->prefix, name, len, &n);
	struct pg_watch *w = calloc(1, sizeof *w);
	if (!ns || !w) {
		free(ns);
		free(w);
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	}
	w->key = dlock_pg_key(ns, n);
	free(ns);
	w->changed = changed;
	w->arg = arg;
	pthread_mutex_lock(&b->watch_mu);
	if (!b->listener)
		b->listener = listener_new(b, err);
	struct dlock_pg_listener *l = b->listener;
	pthread_mutex_unlock(&b->watch_mu);
	if (!l) {
		free(w);
		return DLOCK_EIO;
	}
	pthread_mutex_lock(&l->mu);
	w->next = l->watches;
	l->watches = w;
	pthread_mutex_unlock(&l->mu);
	wake(l);
	*out = w;
	return DLOCK_OK;
}

void dlock_pg_unwatch(void *backend, void *watch)
{
	struct dlock_pg_backend *b = backend;
	struct pg_watch *w = watch;
	pthread_mutex_lock(&b->watch_mu);
	struct dlock_pg_listener *l = b->listener;
	pthread_mutex_unlock(&b->watch_mu);
	if (!l || !w)
		return;
	pthread_mutex_lock(&l->mu);
	struct pg_watch **pp = &l->watches;
	while (*pp && *pp != w)
		pp = &(*pp)->next;
	if (*pp)
		*pp = w->next;
	pthread_mutex_unlock(&l->mu);
	free(w);
	wake(l); /* its channel may be UNLISTENed */
}
