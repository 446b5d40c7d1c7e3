/*
 * redis+sentinel:// and rediss+sentinel:// — where the master is, asked of
 * the sentinels at each new connection.
 *
 *   redis+sentinel://[user:password@]s1[:port][,s2[:port]...]/MASTER_NAME
 *       [?db=N&sentinel_user=U&sentinel_password=P&...]
 *
 * The hosts are sentinels (port 26379); MASTER_NAME is the name they
 * monitor.  Two sets of credentials: the URI's user and password are the
 * master's (and its replicas'), as in redis://; sentinel_user and
 * sentinel_password are the sentinels' own (Sentinel's requirepass / ACL).
 * With rediss+sentinel:// both the sentinels and the master speak TLS.
 *
 * How a failover is followed: every connection the client makes (pool,
 * subscriber, fair=1 waiter) asks the sentinels, in turn, for the master
 * (SENTINEL GET-MASTER-ADDR-BY-NAME), connects there and must see ROLE
 * master, so no lock is ever taken on a replica.  A connection that fails
 * (Sentinel kills the clients of a demoted master) or answers READONLY
 * (redis_io.c marks it failed) is dropped, and the next one asks again.
 * A watcher thread also listens to one sentinel's +switch-master channel:
 * when the master moves (told by the channel, or found by any connect),
 * the generation goes up, so the pools close every connection made for
 * the old master even while it still answers as a master (a manual
 * failover leaves two masters for seconds), and the subscriber reconnects.
 * Held locks are then checked on the new master by their next renewal,
 * which reports a key that did not survive as a lost lock.
 *
 * The sentinel that answered is asked first next time.  Threads: any; the
 * order and the last master seen are under the mutex, and no lock is held
 * while a sentinel is asked.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_sentinel.h"

struct redis_sentinel {
	pthread_mutex_t mu;
	size_t n;
	struct redis_endpoint eps[REDIS_REDLOCK_MAX]; /* the sentinels, the one that answered last first */
	struct redis_cfg cfg;      /* the sentinels' credentials; TLS and timeouts as the master's */
	const struct redis_transport *data_via; /* how the master is reached: tcp or tls */
	char name[256];            /* the master's name */
	char last[280];            /* the master last named, "" before the first */
	atomic_uint generation;    /* goes up each time the master moves */
	void (*on_switch)(void *arg); /* told after each move (any thread) */
	void *on_switch_arg;

	/* The watcher thread (+switch-master). */
	pthread_t thread;
	int started;
	int stop;                  /* under mu */
	int wake[2];               /* pipe: dlock_redis_sentinel_free() wakes the thread */
};

static dlock_status parse_name(const dlock_uri *uri, char *out, size_t len, dlock_error *err)
{
	const char *p = uri->path[0] == '/' ? uri->path + 1 : uri->path;
	if (!*p || strchr(p, '/') || strlen(p) >= len)
		return dlock_error_set(err, DLOCK_EURI,
		                       "%s: the path must be the master's name as the sentinels know it "
		                       "(%s://sentinel:26379/mymaster): %s",
		                       uri->scheme, uri->scheme, uri->masked);
	for (const char *c = p; *c; c++)
		if ((unsigned char)*c <= ' ' || *c == 0x7f)
			return dlock_error_set(err, DLOCK_EURI, "%s: the master's name has a space or control byte: %s",
			                       uri->scheme, uri->masked);
	snprintf(out, len, "%s", p);
	return DLOCK_OK;
}

dlock_status dlock_redis_sentinel_new(const dlock_uri *uri, const struct redis_transport *via,
                                      const struct redis_cfg *data, struct redis_sentinel **out, long *db,
                                      dlock_error *err)
{
	if (uri->nhosts > REDIS_REDLOCK_MAX)
		return dlock_error_set(err, DLOCK_EURI, "%s: at most %d sentinels in one URI: %s", uri->scheme,
		                       REDIS_REDLOCK_MAX, uri->masked);
	struct redis_sentinel *s = calloc(1, sizeof *s);
	if (!s)
		return dlock_error_set(err, DLOCK_ENOMEM, "%s: out of memory", uri->scheme);
	dlock_status st = parse_name(uri, s->name, sizeof s->name, err);
	if (st == DLOCK_OK)
		st = via->endpoints(uri, s->eps, db, err);
	if (st != DLOCK_OK) {
		free(s);
		return st;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->n = uri->nhosts;
	for (size_t i = 0; i < s->n; i++) { /* messages say "redis sentinel HOST:PORT: ..." */
		char hostport[sizeof s->eps[i].label];
		memcpy(hostport, s->eps[i].label, sizeof hostport);
		snprintf(s->eps[i].label, sizeof s->eps[i].label, "sentinel %.260s", hostport);
	}
	s->data_via = data->tls ? &dlock_redis_tls : &dlock_redis_tcp;
	s->cfg = *data;
	s->cfg.user = dlock_uri_get(uri, "sentinel_user");
	s->cfg.password = dlock_uri_get(uri, "sentinel_password");
	s->cfg.db = 0;
	s->wake[0] = s->wake[1] = -1;
	*out = s;
	return DLOCK_OK;
}

void dlock_redis_sentinel_free(struct redis_sentinel *s)
{
	if (!s)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		pthread_mutex_unlock(&s->mu);
		char b = 1;
		if (write(s->wake[1], &b, 1) < 0 && errno != EAGAIN)
			dlock_host_log(s->cfg.host, DLOCK_LOG_DEBUG, "redis sentinel: cannot wake the watcher");
		pthread_join(s->thread, NULL);
	}
	for (int i = 0; i < 2; i++)
		if (s->wake[i] >= 0)
			close(s->wake[i]);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

const atomic_uint *dlock_redis_sentinel_generation(struct redis_sentinel *s)
{
	return &s->generation;
}

/* ------------------------------------------------------------ asking */

/* The sentinels' answer "host port" into `where`, or a status and message. */
static dlock_status master_reply(struct redis_sentinel *s, const struct redis_endpoint *sep, const redisReply *r,
                                 struct redis_endpoint *where, dlock_error *err)
{
	if (r->type == REDIS_REPLY_ERROR)
		return dlock_redis_reply_error(r, sep, "SENTINEL GET-MASTER-ADDR-BY-NAME", err);
	if (r->type == REDIS_REPLY_NIL)
		return dlock_error_set(err, DLOCK_ENOTFOUND, "redis %s: no master named '%s' is monitored",
		                       sep->label, s->name);
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof where->located ||
	    atoi(r->element[1]->str) <= 0 || atoi(r->element[1]->str) > 65535)
		return dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected answer for master '%s'",
		                       sep->label, s->name);
	*where = (struct redis_endpoint){ .via = s->data_via, .port = atoi(r->element[1]->str) };
	memcpy(where->located, r->element[0]->str, r->element[0]->len + 1);
	where->host = where->located;
	dlock_redis_hostport(where->label, sizeof where->label, where->located, where->port);
	return DLOCK_OK;
}

/* Ask one sentinel. */
static dlock_status ask(struct redis_sentinel *s, const struct redis_endpoint *sep, struct redis_endpoint *where,
                        dlock_error *err)
{
	struct redis_conn *ctx = NULL;
	dlock_status st = dlock_redis_connect(sep, &s->cfg, &ctx, err);
	if (st != DLOCK_OK)
		return st;
	struct redis_args a = { 0 };
	dlock_redis_arg(&a, "SENTINEL");
	dlock_redis_arg(&a, "GET-MASTER-ADDR-BY-NAME");
	dlock_redis_arg(&a, s->name);
	redisReply *r = dlock_redis_command(ctx, &a);
	st = r ? master_reply(s, sep, r, where, err) : dlock_redis_io_error(ctx, sep, err);
	freeReplyObject(r);
	dlock_redis_conn_free(ctx);
	return st;
}

/* The sentinels in the order to ask them (the last that answered first). */
static void sentinel_order(struct redis_sentinel *s, struct redis_endpoint order[REDIS_REDLOCK_MAX])
{
	pthread_mutex_lock(&s->mu);
	memcpy(order, s->eps, s->n * sizeof order[0]);
	pthread_mutex_unlock(&s->mu);
}

/* The sentinels name `label` as the master: when it moved, the old master's connections are done. */
static void master_seen(struct redis_sentinel *s, const char *label)
{
	pthread_mutex_lock(&s->mu);
	int moved = s->last[0] && strcmp(s->last, label) != 0;
	snprintf(s->last, sizeof s->last, "%s", label);
	if (moved)
		atomic_fetch_add(&s->generation, 1);
	pthread_mutex_unlock(&s->mu);
	if (!moved)
		return;
	dlock_host_log(s->cfg.host, DLOCK_LOG_INFO, "redis sentinel: master '%s' is now at %s", s->name, label);
	if (s->on_switch)
		s->on_switch(s->on_switch_arg);
}

/* Which failure to report when no sentinel answered: a configuration problem before an outage. */
static int rank(dlock_status st)
{
	return st == DLOCK_EAUTH || st == DLOCK_EPERM ? 3 : st == DLOCK_ENOTFOUND ? 2 : st == DLOCK_ECONNECT ? 0 : 1;
}

static dlock_status locate(void *arg, struct redis_endpoint *where, dlock_error *err)
{
	struct redis_sentinel *s = arg;
	struct redis_endpoint order[REDIS_REDLOCK_MAX];
	sentinel_order(s, order);

	dlock_status worst = DLOCK_ECONNECT;
	dlock_error why = { "" };
	for (size_t i = 0; i < s->n; i++) {
		dlock_error one = { "" };
		dlock_status st = ask(s, &order[i], where, &one);
		if (st == DLOCK_OK) {
			pthread_mutex_lock(&s->mu);
			for (size_t j = 0; j < s->n; j++) /* ask this one first from now on */
				if (strcmp(s->eps[j].label, order[i].label) == 0 && j > 0) {
					struct redis_endpoint first = s->eps[j];
					memmove(&s->eps[1], &s->eps[0], j * sizeof s->eps[0]);
					s->eps[0] = first;
				}
			pthread_mutex_unlock(&s->mu);
			master_seen(s, where->label);
			return DLOCK_OK;
		}
		if (why.msg[0] == '\0' || rank(st) > rank(worst)) {
			worst = st;
			why = one;
		}
	}
	if (worst == DLOCK_ECONNECT)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis sentinel: none of %zu sentinels answered for '%s' (%s)",
		                       s->n, s->name, why.msg);
	return dlock_error_set(err, worst, "%s", why.msg);
}

void dlock_redis_sentinel_endpoint(struct redis_sentinel *s, struct redis_endpoint *ep)
{
	*ep = (struct redis_endpoint){ .via = s->data_via, .locate = locate, .locate_arg = s };
	snprintf(ep->label, sizeof ep->label, "master '%.200s'", s->name);
}

/* ------------------------------------------------------------ the watcher */

#define WATCH_RETRY_MIN_MS 100
#define WATCH_RETRY_MAX_MS 2000

static int stopping(struct redis_sentinel *s)
{
	pthread_mutex_lock(&s->mu);
	int stop = s->stop;
	pthread_mutex_unlock(&s->mu);
	return stop;
}

/* A sentinel connection subscribed to +switch-master, or NULL with the last reason in *why. */
static struct redis_conn *watch_connect(struct redis_sentinel *s, dlock_error *why)
{
	struct redis_endpoint order[REDIS_REDLOCK_MAX];
	sentinel_order(s, order);
	for (size_t i = 0; i < s->n && !stopping(s); i++) { /* closing waits for one connect at most */
		struct redis_conn *ctx = NULL;
		if (dlock_redis_connect(&order[i], &s->cfg, &ctx, why) != DLOCK_OK)
			continue;
		const char *argv[2] = { "SUBSCRIBE", "+switch-master" };
		size_t len[2] = { 9, 14 };
		redisReply *r = dlock_redis_command_argv(ctx, 2, argv, len);
		if (r && r->type == REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			return ctx;
		}
		if (r)
			dlock_redis_reply_error(r, &order[i], "SUBSCRIBE +switch-master", why);
		else
			dlock_redis_io_error(ctx, &order[i], why);
		freeReplyObject(r);
		dlock_redis_conn_free(ctx);
	}
	return NULL;
}

/* "+switch-master NAME OLDIP OLDPORT NEWIP NEWPORT" for our master: the new address. */
static void on_message(struct redis_sentinel *s, const redisReply *r)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[2]->type != REDIS_REPLY_STRING)
		return;
	char name[256], ip[256];
	int port = 0;
	if (sscanf(r->element[2]->str, "%255s %*s %*s %255s %d", name, ip, &port) != 3 || strcmp(name, s->name) != 0)
		return;
	char label[280];
	dlock_redis_hostport(label, sizeof label, ip, port);
	master_seen(s, label);
}

static void *watch_main(void *arg)
{
	struct redis_sentinel *s = arg;
	struct redis_conn *ctx = NULL;
	int retry_ms = WATCH_RETRY_MIN_MS, logged = 0;
	while (!stopping(s)) {
		if (!ctx) {
			dlock_error why = { "" };
			if ((ctx = watch_connect(s, &why)) != NULL) {
				retry_ms = WATCH_RETRY_MIN_MS;
				logged = 0;
				/* A move while nobody listened: ask once (any connect would find it too). */
				struct redis_endpoint where;
				dlock_error ignored = { "" };
				locate(s, &where, &ignored);
			} else if (!logged && !stopping(s)) {
				/* Said once: a move is then found by the next connect, a READONLY or a renewal. */
				dlock_host_log(s->cfg.host, DLOCK_LOG_WARN,
				               "redis sentinel: cannot listen to +switch-master (%s); a new master is found at "
				               "the next connection instead",
				               why.msg);
				logged = 1;
			}
		}
		struct pollfd fds[2] = { { .fd = s->wake[0], .events = POLLIN }, { .fd = ctx ? ctx->fd : -1, .events = POLLIN } };
		int n = poll(fds, 2, ctx ? -1 : retry_ms);
		if (!ctx) {
			retry_ms = retry_ms * 2 > WATCH_RETRY_MAX_MS ? WATCH_RETRY_MAX_MS : retry_ms * 2;
			continue;
		}
		if (n <= 0 || !fds[1].revents)
			continue;
		void *reply = NULL;
		int failed = dlock_redis_read_some(ctx) != REDIS_OK;
		while (!failed && dlock_redis_buffered_reply(ctx, &reply) == REDIS_OK && reply) {
			on_message(s, reply);
			freeReplyObject(reply);
			reply = NULL;
		}
		if (failed || ctx->err) {
			dlock_redis_conn_free(ctx);
			ctx = NULL;
		}
	}
	dlock_redis_conn_free(ctx);
	return NULL;
}

dlock_status dlock_redis_sentinel_watch(struct redis_sentinel *s, void (*on_switch)(void *arg), void *arg,
                                        dlock_error *err)
{
	s->on_switch = on_switch;
	s->on_switch_arg = arg;
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		s->wake[0] = s->wake[1] = -1;
		return dlock_error_set(err, DLOCK_EIO, "redis sentinel: pipe: %s", strerror(errno));
	}
	/* Signals go to the application's threads, never to this one. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&s->thread, NULL, watch_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return dlock_error_set(err, DLOCK_EIO, "redis sentinel: cannot start the watcher thread: %s", strerror(rc));
	s->started = 1;
	return DLOCK_OK;
}
