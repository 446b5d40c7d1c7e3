/*
 * The raw ZooKeeper client: the lock recipe written by hand.
 *   acquire  create PARENT/lock- EPHEMERAL_SEQUENTIAL (create2: the answer
 *            carries the node's czxid, the token) and get the children,
 *            sent together (one round trip: the server answers a session's
 *            requests in order); lowest wins, else watch the predecessor
 *            (exists with a watch); when it goes, the lock is ours if it was
 *            the lowest, else look again
 *   release  delete the node
 * As dlock's zk:// does (backends/zookeeper/zk_pipe.c), so that the
 * baseline is never slower by doing less at once.
 * Watches as dlock's (backends/zookeeper/zk_own.c), so that a node deleted
 * by someone else is noticed as dlock notices it: the looks at the queue
 * set a child watch on the parent until the node has an exists-watch of its
 * own, which the first change of the children then sets (one asynchronous
 * exists).  Without them the raw client would skip work that dlock's
 * guarantee costs: a notification per acquisition, and per contended
 * acquisition one exists.
 * Synchronous API of libzookeeper_mt, one session per worker thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zookeeper/zookeeper.h>

#include "bench.h"

#define ROOT "/dlock-bench-raw"
#define DEFAULT_SESSION_MS 10000
#define CONNECT_TIMEOUT_NS (10 * BENCH_NS_PER_S)
#define WAIT_SLICE_NS (100 * BENCH_NS_PER_MS)

struct zconn {
	zhandle_t *zh;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int connected, events;
	char node[512];
	/* The pipelined create and first look, under mu: their answers, and how many came */
	int answers, create_rc, kids_rc;
	struct String_vector kids;
	int pred_gone; /* the predecessor watched now was deleted (under mu) */
	/* The watch on our own node, all under mu: */
	char own[512];   /* the node watched now, or "" (released) */
	int own_watched; /* an exists-watch is set on it, or on its way */
	int own_lost;    /* it was deleted by someone else */
};

static void own_checked(int rc, const struct Stat *st, const void *data);

/* The child watch on the parent and the exists-watch on our node: they do not wake the waiting loop. */
static void on_own_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zconn *c = ctx;
	char own[512] = "";
	(void)state;
	if (type == ZOO_SESSION_EVENT || !path)
		return;
	pthread_mutex_lock(&c->mu);
	if (c->own[0] && strcmp(path, c->own) == 0 && type == ZOO_DELETED_EVENT)
		c->own_lost = 1;
	else if (c->own[0] && !c->own_watched && type == ZOO_CHILD_EVENT) {
		c->own_watched = 1;
		snprintf(own, sizeof own, "%s", c->own);
	}
	pthread_mutex_unlock(&c->mu);
	if (own[0])
		zoo_awexists(zh, own, on_own_event, c, own_checked, c);
}

static void own_checked(int rc, const struct Stat *st, const void *data)
{
	struct zconn *c = (struct zconn *)data;
	(void)st;
	if (rc == ZNONODE) {
		pthread_mutex_lock(&c->mu);
		c->own_lost = c->own[0] != '\0';
		pthread_mutex_unlock(&c->mu);
	}
}

static void own_set(struct zconn *c, const char *node)
{
	pthread_mutex_lock(&c->mu);
	snprintf(c->own, sizeof c->own, "%s", node);
	c->own_watched = c->own_lost = 0;
	pthread_mutex_unlock(&c->mu);
}

static int own_unwatched(struct zconn *c)
{
	pthread_mutex_lock(&c->mu);
	int unwatched = !c->own_watched;
	pthread_mutex_unlock(&c->mu);
	return unwatched;
}

static void on_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zconn *c = ctx;
	(void)zh;
	(void)path;
	(void)type;
	pthread_mutex_lock(&c->mu);
	if (state == ZOO_CONNECTED_STATE)
		c->connected = 1;
	c->events++;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/* The exists-watch on the predecessor: an event for the waiting loop, and whether it was the deletion. */
static void on_pred_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zconn *c = ctx;
	pthread_mutex_lock(&c->mu);
	c->pred_gone |= type == ZOO_DELETED_EVENT;
	pthread_mutex_unlock(&c->mu);
	on_event(zh, type, state, path, ctx);
}

/* Wait for an event after `seen` events, up to `ns`; the event count now. */
static int wait_event(struct zconn *c, int seen, int64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's default clock */
	int64_t t = (int64_t)ts.tv_sec * BENCH_NS_PER_S + ts.tv_nsec + ns;
	ts = (struct timespec){ .tv_sec = t / BENCH_NS_PER_S, .tv_nsec = t % BENCH_NS_PER_S };
	pthread_mutex_lock(&c->mu);
	while (c->events == seen && pthread_cond_timedwait(&c->cond, &c->mu, &ts) == 0)
		;
	int n = c->events;
	pthread_mutex_unlock(&c->mu);
	return n;
}

static int events_now(struct zconn *c)
{
	pthread_mutex_lock(&c->mu);
	int n = c->events;
	pthread_mutex_unlock(&c->mu);
	return n;
}

static void zconn_close(void *p)
{
	struct zconn *c = p;
	if (c->zh)
		zookeeper_close(c->zh);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static int session_ms(const char *uri)
{
	char text[32];
	int64_t ms;
	if (bench_uri_param(uri, "session_timeout", text, sizeof text) == 0 &&
	    dlock_duration_parse(text, 1, &ms) == DLOCK_OK && ms > 0 && ms < 3600000)
		return (int)ms;
	return DEFAULT_SESSION_MS;
}

static void *zconn_connect(const char *uri, int fencing, char *err, size_t errlen)
{
	char host[256], hosts[300];
	int port;
	struct zconn *c = calloc(1, sizeof *c);
	if (!c || bench_uri_host(uri, host, sizeof host, &port, 2181) != 0) {
		snprintf(err, errlen, "zk: cannot read host and port from the URI");
		free(c);
		return NULL;
	}
	(void)fencing; /* the token is the lock node's czxid, which the create answers with: no extra work */
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cond, NULL);
	snprintf(hosts, sizeof hosts, "%s:%d", host, port);
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	c->zh = zookeeper_init(hosts, on_event, session_ms(uri), NULL, c, 0);
	int64_t deadline = bench_now_ns() + CONNECT_TIMEOUT_NS;
	int connected = 0;
	while (c->zh && !connected && bench_now_ns() < deadline) {
		wait_event(c, events_now(c), WAIT_SLICE_NS);
		pthread_mutex_lock(&c->mu);
		connected = c->connected;
		pthread_mutex_unlock(&c->mu);
	}
	if (!c->zh || !connected) {
		snprintf(err, errlen, "zk %s: no session within 10 s", hosts);
		zconn_close(c);
		return NULL;
	}
	zoo_create(c->zh, ROOT, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
	return c;
}

static long long seq_of(const char *child)
{
	const char *dash = strrchr(child, '-');
	return dash ? atoll(dash + 1) : -1;
}

/* Of `kids`, the highest sequence below ours into `pred`: 0 ours is lowest; 1 pred is set (*first: it is the lowest). */
static int pick(struct zconn *c, const char *parent, const struct String_vector *kids, char *pred, size_t predlen,
                int *first)
{
	long long mine = seq_of(strrchr(c->node, '/') + 1), best = -1, lowest = mine;
	for (int32_t i = 0; i < kids->count; i++) {
		long long s = seq_of(kids->data[i]);
		if (s < mine && s > best) {
			best = s;
			snprintf(pred, predlen, "%s/%s", parent, kids->data[i]);
		}
		lowest = s >= 0 && s < lowest ? s : lowest;
	}
	*first = best >= 0 && best == lowest;
	return best >= 0;
}

/* 0: ours is lowest; 1: pred is set; <0: a ZooKeeper error. */
static int scan(struct zconn *c, const char *parent, char *pred, size_t predlen, int *first)
{
	struct String_vector kids = { 0, NULL };
	int rc = zoo_wget_children(c->zh, parent, own_unwatched(c) ? on_own_event : NULL, c, &kids);
	if (rc != ZOK)
		return rc < 0 ? rc : -rc;
	int s = pick(c, parent, &kids, pred, predlen, first);
	deallocate_String_vector(&kids);
	return s;
}

/* The pipelined create's answer: our node, watched from now on (its child watch may fire next). */
static void created(int rc, const char *node, const struct Stat *st, const void *data)
{
	struct zconn *c = (struct zconn *)data;
	(void)st;
	pthread_mutex_lock(&c->mu);
	c->create_rc = rc;
	if (rc == ZOK) {
		snprintf(c->node, sizeof c->node, "%s", node);
		snprintf(c->own, sizeof c->own, "%s", node);
		c->own_watched = c->own_lost = 0;
	}
	c->answers++;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/* The pipelined first look's answer: the children, copied. */
static void looked(int rc, const struct String_vector *kids, const void *data)
{
	struct zconn *c = (struct zconn *)data;
	pthread_mutex_lock(&c->mu);
	c->kids_rc = rc;
	c->kids = (struct String_vector){ 0, NULL };
	if (rc == ZOK && kids && kids->count > 0 && allocate_String_vector(&c->kids, kids->count) == ZOK)
		for (int32_t i = 0; i < kids->count; i++)
			c->kids.data[i] = strdup(kids->data[i]);
	c->answers++;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
}

/* Create and first look in one round trip: 0 (c->kids set: free it), or a ZooKeeper error. */
static int create_and_look(struct zconn *c, const char *parent, const char *prefix)
{
	pthread_mutex_lock(&c->mu);
	c->answers = 0;
	c->own[0] = '\0';
	pthread_mutex_unlock(&c->mu);
	int rc = zoo_acreate2(c->zh, prefix, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, created, c);
	if (rc != ZOK)
		return rc;
	int sent = zoo_awget_children(c->zh, parent, on_own_event, c, looked, c) == ZOK ? 2 : 1;
	pthread_mutex_lock(&c->mu);
	while (c->answers < sent)
		pthread_cond_wait(&c->cond, &c->mu);
	rc = c->create_rc != ZOK ? c->create_rc : sent == 2 ? c->kids_rc : ZSYSTEMERROR;
	if (rc != ZOK)
		deallocate_String_vector(&c->kids);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int zfail(char *err, size_t errlen, const char *what, int rc)
{
	snprintf(err, errlen, "zk: %s: %s", what, zerror(rc));
	return -1;
}

static int zconn_acquire(void *p, const char *name, const _Atomic int *stop, char *err, size_t errlen)
{
	struct zconn *c = p;
	char parent[400], prefix[420], pred[512];
	snprintf(parent, sizeof parent, ROOT "/%s", name);
	snprintf(prefix, sizeof prefix, "%s/lock-", parent);
	/* The create's czxid is the fencing token, as dlock's: the answer carries it. */
	int rc = create_and_look(c, parent, prefix);
	if (rc == ZNONODE) {
		zoo_create(c->zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
		rc = create_and_look(c, parent, prefix);
	}
	if (rc != ZOK)
		return zfail(err, errlen, "create and get_children", rc);
	int first = 0, seen = events_now(c);
	int s = pick(c, parent, &c->kids, pred, sizeof pred, &first);
	deallocate_String_vector(&c->kids);
	for (;;) {
		if (s == 0)
			return 1;
		if (s < 0)
			return zfail(err, errlen, "get_children", -s);
		struct Stat st;
		pthread_mutex_lock(&c->mu);
		c->pred_gone = 0;
		pthread_mutex_unlock(&c->mu);
		rc = zoo_wexists(c->zh, pred, on_pred_event, c, &st);
		if (rc != ZOK && rc != ZNONODE)
			return zfail(err, errlen, "exists", rc);
		if (rc == ZOK) {
			while (wait_event(c, seen, WAIT_SLICE_NS) == seen) {
				if (atomic_load(stop)) {
					own_set(c, "");
					zoo_delete(c->zh, c->node, -1);
					return 0;
				}
			}
		}
		pthread_mutex_lock(&c->mu);
		int gone = rc == ZNONODE || c->pred_gone;
		pthread_mutex_unlock(&c->mu);
		if (first && gone) /* the lowest went, and nothing lower can come: ours */
			return 1;
		seen = events_now(c);
		s = scan(c, parent, pred, sizeof pred, &first);
	}
}

static int zconn_release(void *p, const char *name, char *err, size_t errlen)
{
	struct zconn *c = p;
	(void)name;
	own_set(c, ""); /* our own delete is no loss */
	int rc = zoo_delete(c->zh, c->node, -1);
	return rc == ZOK ? 0 : zfail(err, errlen, "delete", rc);
}

static int zconn_ping(void *p)
{
	struct zconn *c = p;
	struct Stat st;
	return zoo_exists(c->zh, "/", 0, &st) == ZOK ? 0 : -1;
}

static const char *const schemes[] = { "zk", NULL };

const struct bench_raw bench_raw_zookeeper = {
	.name = "zookeeper",
	.schemes = schemes,
	.what = "create EPHEMERAL_SEQUENTIAL and get_children sent together (+ exists watch on the predecessor; "
	        "its deletion hands the lock over when it was the lowest), delete; the node's deletion watched as "
	        "dlock watches it",
	.connect = zconn_connect,
	.acquire = zconn_acquire,
	.release = zconn_release,
	.ping = zconn_ping,
	.cut = NULL,
	.close = zconn_close,
};
