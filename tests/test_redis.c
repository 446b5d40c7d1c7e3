/*
 * redis:// and RedLock against real redis-server processes started by
 * ci/servers/redis.sh, which exports:
 *
 *   DLOCK_TEST_REDIS_URI, DLOCK_TEST_REDIS_PORT        one instance
 *   DLOCK_TEST_REDIS_UNIX_URI                           the same over its unix socket
 *   DLOCK_TEST_REDLOCK_URI, DLOCK_TEST_REDLOCK_PORTS    three independent instances
 *   DLOCK_TEST_REDIS_CTL                                "... restart|stop|start PORT"
 *
 * Without them the program says SKIPPED and passes, unless
 * DLOCK_TEST_REQUIRE_ALL=1.  Every test works under its own key prefix, and
 * a raw hiredis connection looks at what the backend left on the servers.
 */
#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "dlock/sys/driver.h"
#include "testredis.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000 /* an acquire that must succeed: a hang becomes a failure */
#define AWAIT_MS 10000
#define PROMPT_MS 2000     /* "promptly": far below the 30 s lease a missed wake-up would cost */
#define FAST_MS 1000       /* a refused connection or a wrong password */

static const char *redis_uri, *redlock_uri, *unix_uri, *ctl;
static int redis_port;
static int redlock_ports[3];

/* ------------------------------------------------------------ helpers */

/* What a client's log said. */
struct logcap {
	atomic_int refused, evict, total;
};

static void logcap_fn(void *userdata, dlock_log_level level, const char *msg)
{
	struct logcap *l = userdata;
	(void)level;
	atomic_fetch_add(&l->total, 1);
	if (strstr(msg, "SUBSCRIBE refused"))
		atomic_fetch_add(&l->refused, 1);
	if (strstr(msg, "maxmemory-policy is"))
		atomic_fetch_add(&l->evict, 1);
}

static dlock_client *open_uri(const char *uri, struct logcap *log)
{
	dlock_client *c = dlock_test_open(uri, log ? logcap_fn : NULL, log);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_lock *new_lock(dlock_client *c, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(c, name);
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	return l;
}

static dlock_status acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms)
{
	return dlock_test_acquire(l, wait_ms, lease_ms, -1, NULL, NULL);
}

static int ctl_run(const char *what, int port)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s %s %d", ctl, what, port);
	int rc = system(cmd);
	if (rc != 0)
		printf("\n    '%s' failed (%d)", cmd, rc);
	return rc == 0;
}

/* A TCP port on 127.0.0.1 where nothing listens. */
static int dead_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	CU_ASSERT_FATAL(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
	getsockname(fd, (struct sockaddr *)&a, &len);
	close(fd);
	return ntohs(a.sin_port);
}

/* Await that a waiter's driver acquire has started (its first attempt failed). */
static void await_first_attempt(dlock_client *c)
{
	dlock_test_count n = { c, 1 };
	CU_ASSERT_FATAL(dlock_test_await(dlock_test_attempted, &n, AWAIT_MS));
}

/* ------------------------------------------------------------ URIs and errors */

static void test_bad_uris(void)
{
	char uri[512];
	dlock_client *c = NULL;
	/* Braces in the prefix would break the hash tag (found by fuzz_redis_key). */
	const char *bad[] = { "/abc", "/1x", "/-1", "?db=1", "?user=x", "?prefix={}", "?prefix=a%7Bb%7D" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(uri, sizeof uri, "redis://127.0.0.1:%d%s", redis_port, bad[i]);
		CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, NULL, 0), DLOCK_EURI);
		CU_ASSERT_PTR_NULL(c);
	}
	CU_ASSERT_EQUAL(dlock_client_open(&c, "redis+unix://host/tmp/x.sock", NULL, NULL, 0), DLOCK_EURI);
	CU_ASSERT_EQUAL(dlock_client_open(&c, "redis+unix:///tmp/x.sock?db=x", NULL, NULL, 0), DLOCK_EURI);
	CU_ASSERT_EQUAL(dlock_client_open(&c, "redis+unix:///", NULL, NULL, 0), DLOCK_EURI);
}

static void test_dead_port_fast(void)
{
	char uri[128], errbuf[512] = "";
	dlock_client *c = NULL;
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d", dead_port());
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, errbuf, sizeof errbuf), DLOCK_ECONNECT);
	CU_ASSERT(dlock_test_now_ms() - t0 < FAST_MS);
	CU_ASSERT_PTR_NOT_NULL(strstr(errbuf, "127.0.0.1"));
	CU_ASSERT_EQUAL(dlock_client_open(&c, "redis+unix:///nonexistent/redis.sock", NULL, NULL, 0), DLOCK_ECONNECT);
}

/* A server-side ACL user that tests may log in as; removed by drop_user(). */
static void make_user(const char *user, const char *pass, const char *rules)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "ACL SETUSER %s reset on >%s ~* %s +@all", user, pass, rules);
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	redisFree(ctx);
}

static void drop_user(const char *user)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	freeReplyObject(redisCommand(ctx, "ACL DELUSER %s", user));
	redisFree(ctx);
}

static void test_wrong_password_fast(void)
{
	char uri[256], user[64], errbuf[512] = "";
	dlock_client *c = NULL;
	snprintf(user, sizeof user, "dlt%d", (int)getpid());
	make_user(user, "right-secret", "allchannels");

	snprintf(uri, sizeof uri, "redis://%s:wrong-secret@127.0.0.1:%d", user, redis_port);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, errbuf, sizeof errbuf), DLOCK_EAUTH);
	CU_ASSERT(dlock_test_now_ms() - t0 < FAST_MS);
	CU_ASSERT_PTR_NULL(strstr(errbuf, "wrong-secret"));
	/* The default user has no password here: any password is refused. */
	snprintf(uri, sizeof uri, "redis://:wrong-secret@127.0.0.1:%d", redis_port);
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, errbuf, sizeof errbuf), DLOCK_EAUTH);
	CU_ASSERT_PTR_NULL(strstr(errbuf, "wrong-secret"));

	snprintf(uri, sizeof uri, "redis://%s:right-secret@127.0.0.1:%d", user, redis_port);
	c = open_uri(uri, NULL);
	dlock_client_close(c);
	drop_user(user);
}

static void test_unknown_db(void)
{
	char uri[256], errbuf[512] = "";
	dlock_client *c = NULL;
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/9999", redis_port);
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, errbuf, sizeof errbuf), DLOCK_ENOTFOUND);
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/3", redis_port);
	c = open_uri(uri, NULL);
	dlock_client_close(c);
}

static void test_capabilities(void)
{
	dlock_capabilities caps;
	dlock_client *c = open_uri(redis_uri, NULL);
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(caps.backend, "redis");
	CU_ASSERT_EQUAL(caps.consistency, DLOCK_CONSISTENCY_AP);
	CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_CONDITIONAL);
	CU_ASSERT(strlen(caps.fencing_note) > 0);
	CU_ASSERT_EQUAL(caps.lease, DLOCK_LEASE_TTL);
	CU_ASSERT_EQUAL(caps.wakeup, DLOCK_WAKEUP_SERVER_QUEUE); /* the queue by default: one server */
	CU_ASSERT_EQUAL(caps.scope, DLOCK_SCOPE_NETWORK);
	CU_ASSERT_EQUAL(caps.fair, 1);
	dlock_client_close(c);

	char uri[512];
	snprintf(uri, sizeof uri, "%s?fair=0", redis_uri); /* pub/sub wake-ups, no order */
	c = open_uri(uri, NULL);
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_EQUAL(caps.wakeup, DLOCK_WAKEUP_NOTIFY);
	CU_ASSERT_EQUAL(caps.fair, 0);
	dlock_client_close(c);
	snprintf(uri, sizeof uri, "%s?replicas=1", redis_uri); /* replicas=N: not the queue */
	c = open_uri(uri, NULL);
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_EQUAL(caps.fair, 0);
	dlock_client_close(c);

	c = open_uri(redlock_uri, NULL);
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_NONE);
	CU_ASSERT_EQUAL(caps.wakeup, DLOCK_WAKEUP_POLL);
	CU_ASSERT_EQUAL(caps.consistency, DLOCK_CONSISTENCY_AP);
	dlock_client_close(c);
}

static void test_eviction_warning(void)
{
	struct logcap log = { 0 };
	redisContext *ctx = dlock_testredis_raw(redis_port);
	freeReplyObject(redisCommand(ctx, "CONFIG SET maxmemory-policy allkeys-lru"));
	dlock_client *c = open_uri(redis_uri, &log);
	CU_ASSERT_EQUAL(atomic_load(&log.evict), 1);
	dlock_client_close(c);
	freeReplyObject(redisCommand(ctx, "CONFIG SET maxmemory-policy noeviction"));
	redisFree(ctx);
	struct logcap quiet = { 0 };
	c = open_uri(redis_uri, &quiet);
	CU_ASSERT_EQUAL(atomic_load(&quiet.evict), 0);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ one instance */

static void test_keys_and_tokens(void)
{
	char prefix[64], uri[512], key[256], fence[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *c = open_uri(uri, NULL);
	dlock_lock *l = new_lock(c, "orders");

	CU_ASSERT_EQUAL_FATAL(acquire(l, 0, 10000), DLOCK_OK);
	uint64_t t1 = dlock_test_token(l);
	dlock_testredis_key(key, sizeof key, prefix, "orders", "lock");
	dlock_testredis_key(fence, sizeof fence, prefix, "orders", "fence");
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "PTTL %s", key);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer > 5000 && r->integer <= 10000);
	freeReplyObject(r);
	r = redisCommand(ctx, "PTTL %s", fence);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer > 6LL * 24 * 3600 * 1000);
	freeReplyObject(r);
	r = redisCommand(ctx, "GET %s", fence);
	CU_ASSERT(r && r->type == REDIS_REPLY_STRING && strtoull(r->str, NULL, 10) == t1);
	freeReplyObject(r);
	/* The token follows the server's clock in microseconds. */
	r = redisCommand(ctx, "TIME");
	CU_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	uint64_t now_us = strtoull(r->element[0]->str, NULL, 10) * 1000000 + strtoull(r->element[1]->str, NULL, 10);
	CU_ASSERT(t1 <= now_us && t1 > now_us - 60000000);
	freeReplyObject(r);

	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(l, 20000), DLOCK_OK);
	r = redisCommand(ctx, "PTTL %s", key);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer > 15000);
	freeReplyObject(r);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1); /* the fence counter only */

	CU_ASSERT_EQUAL_FATAL(acquire(l, 0, 10000), DLOCK_OK);
	CU_ASSERT(dlock_test_token(l) > t1);
	/* Someone else takes over after our key is gone: release must not touch it. */
	freeReplyObject(redisCommand(ctx, "SET %s intruder", key));
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	r = redisCommand(ctx, "GET %s", key);
	CU_ASSERT(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "intruder") == 0);
	freeReplyObject(r);
	redisFree(ctx);
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void test_script_flush(void)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *c = open_uri(uri, NULL);
	dlock_lock *l = new_lock(c, "flushed");
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0, 10000), DLOCK_OK);
	CU_ASSERT_FATAL(ctl_run("flush-scripts", redis_port));
	CU_ASSERT_EQUAL(dlock_extend(l, 10000), DLOCK_OK);
	CU_ASSERT_FATAL(ctl_run("flush-scripts", redis_port));
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_FATAL(ctl_run("flush-scripts", redis_port));
	CU_ASSERT_EQUAL(acquire(l, 0, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/*
 * Many locks held by one client at a short lease: the renewal thread sends
 * them in batches (one pipeline per server), and none is lost — also
 * across a SCRIPT FLUSH, after which each batch's replies say NOSCRIPT and
 * the locks are renewed one by one (loading the script again), and on the
 * cluster, where a batch is split by master.  Each lock is then still held.
 */
static void held_many(const char *base, int cluster)
{
	enum { N = 1500, LEASE_MS = 900 };
	char prefix[64], uri[1024], name[32];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, base, prefix, "");
	dlock_client *c = open_uri(uri, NULL);
	static dlock_lock *locks[N];
	dlock_test_lost lost = { 0 };
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "held-%d", i);
		locks[i] = new_lock(c, name);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(locks[i], 0, LEASE_MS, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	}
	dlock_client_stats st;
	CU_ASSERT_EQUAL(dlock_client_get_stats(c, &st), DLOCK_OK);
	dlock_test_count r = { c, st.renewals + 2 * N }; /* every lock renewed twice more */
	CU_ASSERT(dlock_test_await(dlock_test_renewed, &r, 20000));
	if (!cluster) {
		CU_ASSERT_FATAL(ctl_run("flush-scripts", redis_port));
		r.want += 2 * N;
		CU_ASSERT(dlock_test_await(dlock_test_renewed, &r, 20000));
	}
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	int held = 0;
	for (int i = 0; i < N; i++) {
		held += dlock_check(locks[i]) == DLOCK_OK;
		CU_ASSERT_EQUAL(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	printf("\n    %s: %d of %d locks held at a %d ms lease, %d lost", cluster ? "cluster" : "one server", held, N,
	       LEASE_MS, atomic_load(&lost.count));
	CU_ASSERT_EQUAL(held, N);
	dlock_client_close(c);
}

static void test_held_many(void)
{
	held_many(redis_uri, 0);
	const char *cluster = dlock_test_env("DLOCK_TEST_CLUSTER_URI");
	if (cluster)
		held_many(cluster, 1);
}

static void test_unix_socket(void)
{
	if (!unix_uri) {
		CU_PASS("DLOCK_TEST_REDIS_UNIX_URI unset");
		return;
	}
	char prefix[64], uri[512], tcp[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, unix_uri, prefix, "");
	dlock_testredis_uri(tcp, sizeof tcp, redis_uri, prefix, "");
	dlock_client *c = open_uri(uri, NULL), *t = open_uri(tcp, NULL);
	dlock_lock *l = new_lock(c, "sock"), *lt = new_lock(t, "sock");
	CU_ASSERT_EQUAL(acquire(l, 0, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(lt, 0, 10000), DLOCK_EBUSY); /* same server, same lock */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(lt, 0, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lt), DLOCK_OK);
	dlock_lock_free(l);
	dlock_lock_free(lt);
	dlock_client_close(c);
	dlock_client_close(t);
}

static void test_odd_names(void)
{
	static const char *names[] = {
		"with space", "{braces}", "}{", "{", "}", "a{b}c", "'single' \"double\"", "\xff\xfe\x80 not utf-8",
		"end\"); redis.call('FLUSHALL') --", "%00%s%n", "new\nline",
	};
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *a = open_uri(uri, NULL), *b = open_uri(uri, NULL);
	size_t n = sizeof names / sizeof names[0];
	dlock_lock *la[sizeof names / sizeof names[0]];
	for (size_t i = 0; i < n; i++) {
		la[i] = new_lock(a, names[i]);
		CU_ASSERT_EQUAL(acquire(la[i], 0, 10000), DLOCK_OK);
	}
	for (size_t i = 0; i < n; i++) { /* each name is its own lock, held by a */
		dlock_lock *lb = new_lock(b, names[i]);
		CU_ASSERT_EQUAL(acquire(lb, 0, 10000), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(dlock_release(la[i]), DLOCK_OK);
		CU_ASSERT_EQUAL(acquire(lb, 0, 10000), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
		dlock_lock_free(lb);
		dlock_lock_free(la[i]);
	}
	/* Only fence counters remain, and no key holds a byte of a name. */
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "KEYS %s:*", prefix);
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_ARRAY);
	CU_ASSERT_EQUAL(r->elements, n);
	for (size_t i = 0; i < r->elements; i++) {
		const char *k = r->element[i]->str + strlen(prefix);
		CU_ASSERT_EQUAL(strspn(k, ":{}0123456789abcdefnc"), strlen(k));
	}
	freeReplyObject(r);
	redisFree(ctx);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_long_name(void)
{
	char name[DLOCK_NAME_MAX + 1], prefix[64], uri[512];
	memset(name, '\xff', DLOCK_NAME_MAX);
	name[DLOCK_NAME_MAX] = '\0';
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *c = open_uri(uri, NULL);
	dlock_lock *l = new_lock(c, name);
	CU_ASSERT_EQUAL(acquire(l, 0, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/*
 * The release may come at any moment of the waiter's subscribing (fair=0)
 * or queueing (the default): it must never be missed.
 */
static void release_while_waiting(const char *mode)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, mode);
	dlock_client *a = open_uri(uri, NULL), *b = open_uri(uri, NULL);
	dlock_lock *la = new_lock(a, "race"), *lb = new_lock(b, "race");
	int64_t worst = 0;
	for (int i = 0; i < 200; i++) {
		dlock_test_waiter w;
		CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 30000), DLOCK_OK);
		dlock_test_waiter_start(&w, lb, 10000, 30000);
		/* Deliberately varied timing (not a synchronisation): 0..3 ms into the waiter's start. */
		if (i % 4)
			dlock_test_sleep_ms(i % 4 - 1);
		int64_t released = dlock_test_now_ms();
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
		pthread_join(w.thread, NULL);
		CU_ASSERT_EQUAL(w.status, DLOCK_OK);
		if (w.at_ms - released > worst)
			worst = w.at_ms - released;
		if (w.status == DLOCK_OK)
			CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	}
	printf("\n    %s: slowest wake-up after release: %lld ms", mode[0] ? mode : "default", (long long)worst);
	CU_ASSERT(worst < PROMPT_MS);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_release_while_subscribing(void)
{
	release_while_waiting("fair=0");
	release_while_waiting("");
}

/* The subscriber's connection is killed while a waiter waits: it reconnects, and the waiter still wakes. */
static void test_subscriber_reconnect(void)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "fair=0");
	dlock_client *a = open_uri(uri, NULL), *b = open_uri(uri, NULL);
	dlock_lock *la = new_lock(a, "resub"), *lb = new_lock(b, "resub");
	dlock_test_waiter w;
	CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 30000), DLOCK_OK);
	dlock_test_waiter_start(&w, lb, LONG_WAIT_MS, 30000);
	await_first_attempt(b);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	freeReplyObject(redisCommand(ctx, "CLIENT KILL TYPE pubsub"));
	redisFree(ctx);
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	pthread_join(w.thread, NULL);
	CU_ASSERT_EQUAL(w.status, DLOCK_OK);
	CU_ASSERT(w.at_ms - released < PROMPT_MS);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

static int refused_logged(void *arg)
{
	return atomic_load(&((struct logcap *)arg)->refused) > 0;
}

/* An ACL user without channels: SUBSCRIBE is refused, waiters poll, the log says so once. */
static void test_subscribe_refused(void)
{
	char prefix[64], uri[512], base[256], user[64];
	snprintf(user, sizeof user, "dltnochan%d", (int)getpid());
	make_user(user, "pw", "resetchannels");
	snprintf(base, sizeof base, "redis://%s:pw@127.0.0.1:%d", user, redis_port);
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, base, prefix, "fair=0");
	struct logcap log = { 0 };
	dlock_client *a = open_uri(uri, NULL), *b = open_uri(uri, &log);
	dlock_lock *la = new_lock(a, "nochan"), *lb = new_lock(b, "nochan");
	for (int i = 0; i < 3; i++) {
		dlock_test_waiter w;
		CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 30000), DLOCK_OK);
		dlock_test_waiter_start(&w, lb, LONG_WAIT_MS, 30000);
		await_first_attempt(b);
		if (i == 0) /* the refusal itself: waiters poll from then on */
			CU_ASSERT(dlock_test_await(refused_logged, &log, AWAIT_MS));
		int64_t released = dlock_test_now_ms();
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
		pthread_join(w.thread, NULL);
		CU_ASSERT_EQUAL(w.status, DLOCK_OK);
		CU_ASSERT(w.at_ms - released < PROMPT_MS);
		CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(atomic_load(&log.refused), 1);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
	drop_user(user);
}

/* ------------------------------------------------------------ lost replies */

/*
 * A TCP relay in front of the server that can swallow one reply: the
 * request reaches the server and runs, but the client only sees its
 * connection close, as when a network fails at the worst moment.
 */
#define RELAYS_MAX 32

struct proxy {
	int lfd, port, target;
	atomic_int drop_next_reply, stop;
	pthread_t acceptor, relays[RELAYS_MAX];
	atomic_int nrelays;
};

struct relay {
	struct proxy *px;
	int cfd, sfd;
};

static int relay_copy(int from, int to)
{
	char buf[16384];
	ssize_t n = read(from, buf, sizeof buf);
	return n > 0 && write(to, buf, (size_t)n) == n ? 0 : -1;
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	struct pollfd fds[2] = { { .fd = r->cfd, .events = POLLIN }, { .fd = r->sfd, .events = POLLIN } };
	while (!atomic_load(&r->px->stop)) {
		if (poll(fds, 2, 50) <= 0)
			continue;
		if (fds[0].revents && relay_copy(r->cfd, r->sfd) != 0)
			break;
		if (fds[1].revents && atomic_exchange(&r->px->drop_next_reply, 0))
			break; /* the reply is lost: close both sides */
		if (fds[1].revents && relay_copy(r->sfd, r->cfd) != 0)
			break;
	}
	close(r->cfd);
	close(r->sfd);
	free(r);
	return NULL;
}

static void *acceptor_main(void *arg)
{
	struct proxy *px = arg;
	struct pollfd pfd = { .fd = px->lfd, .events = POLLIN };
	while (!atomic_load(&px->stop)) {
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		struct relay *r = calloc(1, sizeof *r);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)px->target),
			                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		r->px = px;
		r->cfd = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC);
		r->sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int n = atomic_load(&px->nrelays);
		if (r->cfd < 0 || n >= RELAYS_MAX || connect(r->sfd, (struct sockaddr *)&a, sizeof a) != 0 ||
		    pthread_create(&px->relays[n], NULL, relay_main, r) != 0) {
			close(r->cfd);
			close(r->sfd);
			free(r);
			continue;
		}
		atomic_store(&px->nrelays, n + 1);
	}
	return NULL;
}

static void proxy_start(struct proxy *px, int target)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	*px = (struct proxy){ .target = target };
	px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CU_ASSERT_FATAL(px->lfd >= 0 && bind(px->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(px->lfd, 16) == 0);
	getsockname(px->lfd, (struct sockaddr *)&a, &len);
	px->port = ntohs(a.sin_port);
	CU_ASSERT_FATAL(pthread_create(&px->acceptor, NULL, acceptor_main, px) == 0);
}

static void proxy_stop(struct proxy *px)
{
	atomic_store(&px->stop, 1);
	pthread_join(px->acceptor, NULL);
	for (int i = 0; i < atomic_load(&px->nrelays); i++)
		pthread_join(px->relays[i], NULL);
	close(px->lfd);
}

/* One acquisition whose reply the proxy drops; `shared`: a reader of a read-write lock. */
static void lost_reply_undone(struct proxy *px, dlock_client *c, dlock_client *other, const char *prefix, int shared)
{
	char key[256], readers[256];
	const char *name = shared ? "unlucky-reader" : "unlucky";
	dlock_lock *l = NULL, *lo = new_lock(other, name);
	if (shared) {
		CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(c, name, &l), DLOCK_OK);
	} else {
		l = new_lock(c, name);
	}
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.lease_ms = 60000;
	o.mode = shared ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;

	atomic_store(&px->drop_next_reply, 1);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_ECONNECT);
	CU_ASSERT_EQUAL(atomic_load(&px->drop_next_reply), 0); /* the script ran, its reply was lost */
	dlock_testredis_key(key, sizeof key, prefix, name, "lock");
	dlock_testredis_key(readers, sizeof readers, prefix, name, "readers");
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "EXISTS %s %s", key, readers);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0); /* undone, not left for 60 s */
	freeReplyObject(r);
	redisFree(ctx);
	CU_ASSERT_EQUAL(acquire(lo, 0, 10000), DLOCK_OK); /* a mutex of the name: free again */
	CU_ASSERT_EQUAL(dlock_release(lo), DLOCK_OK);
	o.lease_ms = 10000;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK); /* and the client works on */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_lock_free(lo);
}

/* A reply lost after the acquire ran is undone: a mutex's SET, and a reader's entry among the readers. */
static void test_lost_reply_undone(void)
{
	char prefix[64], uri[512], base[128];
	struct proxy px;
	proxy_start(&px, redis_port);
	snprintf(base, sizeof base, "redis://127.0.0.1:%d", px.port);
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, base, prefix, "");
	dlock_client *c = open_uri(uri, NULL);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *other = open_uri(uri, NULL);
	lost_reply_undone(&px, c, other, prefix, 0);
	lost_reply_undone(&px, c, other, prefix, 1);
	dlock_client_close(c);
	dlock_client_close(other);
	proxy_stop(&px);
}

/* A server that stops answering: the acquire gives up after io_timeout, and so does its undo (tried twice). */
static void test_io_timeout(void)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "io_timeout=200ms");
	dlock_client *c = open_uri(uri, NULL);
	dlock_lock *l = new_lock(c, "paused");
	redisContext *ctx = dlock_testredis_raw(redis_port);
	freeReplyObject(redisCommand(ctx, "CLIENT PAUSE 1500 ALL"));
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(acquire(l, 0, 10000), DLOCK_ECONNECT);
	int64_t dt = dlock_test_now_ms() - t0;
	CU_ASSERT(dt >= 150 && dt < 3 * 200 + FAST_MS);
	printf("\n    gave up after %lld ms: %s", (long long)dt, dlock_client_errmsg(c));
	freeReplyObject(redisCommand(ctx, "CLIENT UNPAUSE"));
	redisFree(ctx);
	CU_ASSERT_EQUAL(acquire(l, 0, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ restart */

static void test_restart_while_held(void)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *c = open_uri(uri, NULL);
	dlock_lock *l = new_lock(c, "restarted");
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 1500, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	uint64_t t1 = dlock_test_token(l);

	CU_ASSERT_FATAL(ctl_run("restart", redis_port));
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);

	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 5000, 1500, 1, NULL, NULL), DLOCK_OK);
	uint64_t t2 = dlock_test_token(l);
	printf("\n    token before the restart %llu, after %llu", (unsigned long long)t1, (unsigned long long)t2);
	CU_ASSERT(t2 > t1);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ processes */

#define FENCE_PROCS 4
#define FENCE_TOTAL 10000

struct fence_shared {
	dlock_test_overlap *ov;
	uint64_t tokens[FENCE_TOTAL];
	atomic_int failures;
};

static int fence_child(struct fence_shared *sh, const char *uri)
{
	dlock_client *c = NULL;
	dlock_lock *l = NULL;
	if (dlock_client_open(&c, uri, NULL, NULL, 0) != DLOCK_OK || dlock_lock_new(c, "fenced", &l) != DLOCK_OK)
		return 1;
	for (int i = 0; i < FENCE_TOTAL / FENCE_PROCS; i++) {
		uint64_t token = 0;
		if (acquire(l, LONG_WAIT_MS, 30000) != DLOCK_OK || dlock_lock_fencing_token(l, &token) != DLOCK_OK) {
			atomic_fetch_add(&sh->failures, 1);
			continue;
		}
		uint64_t seq = dlock_test_overlap_enter(sh->ov);
		if (seq < FENCE_TOTAL)
			sh->tokens[seq] = token;
		dlock_test_overlap_leave(sh->ov);
		if (dlock_release(l) != DLOCK_OK)
			atomic_fetch_add(&sh->failures, 1);
	}
	dlock_lock_free(l);
	dlock_client_close(c);
	return 0;
}

static int run_children(int n, int (*fn)(void *arg, const char *uri), void *arg, const char *uri)
{
	pid_t pids[16];
	int ok = 1;
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		CU_ASSERT_FATAL(pids[i] >= 0);
		if (pids[i] == 0)
			_exit(fn(arg, uri));
	}
	for (int i = 0; i < n; i++) {
		int status = 0;
		waitpid(pids[i], &status, 0);
		ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
	}
	return ok;
}

static int fence_child_fn(void *arg, const char *uri)
{
	return fence_child(arg, uri);
}

static void test_fencing_processes(void)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	struct fence_shared *sh = dlock_test_shared_alloc(sizeof *sh);
	sh->ov = dlock_test_overlap_new();
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT(run_children(FENCE_PROCS, fence_child_fn, sh, uri));
	int64_t dt = dlock_test_now_ms() - t0;
	CU_ASSERT_EQUAL(atomic_load(&sh->failures), 0);
	CU_ASSERT_EQUAL(dlock_test_overlap_violations(sh->ov), 0);
	CU_ASSERT_EQUAL(dlock_test_overlap_count(sh->ov), FENCE_TOTAL);
	size_t backwards = 0;
	for (size_t i = 1; i < FENCE_TOTAL; i++)
		backwards += sh->tokens[i] <= sh->tokens[i - 1];
	CU_ASSERT_EQUAL(backwards, 0);
	printf("\n    %d contended acquisitions by %d processes in %lld ms", FENCE_TOTAL, FENCE_PROCS, (long long)dt);
	dlock_test_overlap_free(sh->ov);
	dlock_test_shared_free(sh, sizeof *sh);
}

#define CONT_PROCS 4
#define CONT_THREADS 4
#define CONT_ROUNDS 50
#define CONT_TOTAL (CONT_PROCS * CONT_THREADS * CONT_ROUNDS)

struct contend_shared {
	dlock_test_overlap *ov;
	_Atomic int64_t released_ns;  /* monotonic time of the last release (one clock for every process) */
	int64_t handoff_ns[CONT_TOTAL];
	atomic_int failures;
};

struct contend_thread {
	struct contend_shared *sh;
	dlock_lock *lock;
};

static void *contend_main(void *arg)
{
	struct contend_thread *t = arg;
	struct contend_shared *sh = t->sh;
	for (int i = 0; i < CONT_ROUNDS; i++) {
		if (acquire(t->lock, LONG_WAIT_MS, 30000) != DLOCK_OK) {
			atomic_fetch_add(&sh->failures, 1);
			continue;
		}
		int64_t now = dlock_monotonic_ns(), last = atomic_load(&sh->released_ns);
		uint64_t seq = dlock_test_overlap_enter(sh->ov);
		if (seq < CONT_TOTAL)
			sh->handoff_ns[seq] = last ? now - last : -1;
		dlock_test_overlap_leave(sh->ov);
		atomic_store(&sh->released_ns, dlock_monotonic_ns());
		if (dlock_release(t->lock) != DLOCK_OK)
			atomic_fetch_add(&sh->failures, 1);
	}
	return NULL;
}

static int contend_child(void *arg, const char *uri)
{
	struct contend_shared *sh = arg;
	dlock_client *c = NULL;
	if (dlock_client_open(&c, uri, NULL, NULL, 0) != DLOCK_OK)
		return 1;
	pthread_t th[CONT_THREADS];
	struct contend_thread ct[CONT_THREADS];
	for (int i = 0; i < CONT_THREADS; i++) {
		ct[i] = (struct contend_thread){ .sh = sh };
		if (dlock_lock_new(c, "contended", &ct[i].lock) != DLOCK_OK ||
		    pthread_create(&th[i], NULL, contend_main, &ct[i]) != 0)
			return 1;
	}
	for (int i = 0; i < CONT_THREADS; i++) {
		pthread_join(th[i], NULL);
		dlock_lock_free(ct[i].lock);
	}
	dlock_client_close(c);
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void print_handoffs(const char *what, int64_t *v, size_t n)
{
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (v[i] >= 0)
			v[m++] = v[i];
	if (m == 0)
		return;
	qsort(v, m, sizeof *v, cmp_i64);
	printf("\n    %s: release -> next acquire (us): p50 %lld, p90 %lld, p99 %lld, max %lld (%zu hand-offs)", what,
	       (long long)v[m / 2] / 1000, (long long)v[m * 9 / 10] / 1000, (long long)v[m * 99 / 100] / 1000,
	       (long long)v[m - 1] / 1000, m);
}

static void contended(const char *base, const char *what)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, base, prefix, "");
	struct contend_shared *sh = dlock_test_shared_alloc(sizeof *sh);
	sh->ov = dlock_test_overlap_new();
	CU_ASSERT(run_children(CONT_PROCS, contend_child, sh, uri));
	CU_ASSERT_EQUAL(atomic_load(&sh->failures), 0);
	CU_ASSERT_EQUAL(dlock_test_overlap_violations(sh->ov), 0);
	CU_ASSERT_EQUAL(dlock_test_overlap_count(sh->ov), CONT_TOTAL);
	print_handoffs(what, sh->handoff_ns, CONT_TOTAL);
	dlock_test_overlap_free(sh->ov);
	dlock_test_shared_free(sh, sizeof *sh);
}

static void test_contended(void)
{
	contended(redis_uri, "redis, 16 threads in 4 processes");
}

static void test_contended_redlock(void)
{
	contended(redlock_uri, "RedLock, 16 threads in 4 processes");
}

/* ------------------------------------------------------------ RedLock */

static void test_redlock_basic(void)
{
	char prefix[64], uri[512], key[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redlock_uri, prefix, "");
	dlock_client *a = open_uri(uri, NULL), *b = open_uri(uri, NULL);
	dlock_lock *la = new_lock(a, "quorum"), *lb = new_lock(b, "quorum");
	uint64_t token;
	CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(la, &token), DLOCK_ENOTSUP);
	dlock_testredis_key(key, sizeof key, prefix, "quorum", "lock");
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(dlock_testredis_keys_under(redlock_ports[i], prefix), 1);
	CU_ASSERT_EQUAL(acquire(lb, 0, 10000), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_check(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(la, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(dlock_testredis_keys_under(redlock_ports[i], prefix), 0);
	CU_ASSERT_EQUAL(acquire(lb, 1000, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_redlock_instances_down(void)
{
	char prefix[64], uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(uri, sizeof uri, redlock_uri, prefix, "");
	dlock_client *c = open_uri(uri, NULL);
	dlock_lock *l = new_lock(c, "degraded");

	CU_ASSERT_FATAL(ctl_run("stop", redlock_ports[0]));
	CU_ASSERT_EQUAL(acquire(l, 5000, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_client *late = open_uri(uri, NULL); /* a majority is enough to open */
	dlock_client_close(late);

	CU_ASSERT_FATAL(ctl_run("stop", redlock_ports[1]));
	int64_t t0 = dlock_test_now_ms();
	dlock_status st = acquire(l, 1000, 10000);
	int64_t dt = dlock_test_now_ms() - t0;
	printf("\n    two of three down: %s after %lld ms: %s", dlock_status_name(st), (long long)dt,
	       dlock_client_errmsg(c));
	CU_ASSERT(st == DLOCK_ECONNECT || st == DLOCK_ETIMEDOUT);
	CU_ASSERT(dt < 1000 + FAST_MS);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redlock_ports[2], prefix), 0);

	CU_ASSERT(ctl_run("start", redlock_ports[0]));
	CU_ASSERT(ctl_run("start", redlock_ports[1]));
	CU_ASSERT_EQUAL(acquire(l, 5000, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ main */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis", NULL, NULL);
	CU_add_test(s, "malformed URIs are EURI", test_bad_uris);
	CU_add_test(s, "a dead port is ECONNECT, fast", test_dead_port_fast);
	CU_add_test(s, "a wrong password is EAUTH, fast", test_wrong_password_fast);
	CU_add_test(s, "an unknown database is ENOTFOUND", test_unknown_db);
	CU_add_test(s, "capabilities", test_capabilities);
	CU_add_test(s, "an evicting maxmemory-policy is logged", test_eviction_warning);
	CU_add_test(s, "keys, TTLs and tokens on the server", test_keys_and_tokens);
	CU_add_test(s, "SCRIPT FLUSH while held", test_script_flush);
	CU_add_test(s, "redis+unix:// reaches the same server", test_unix_socket);
	CU_add_test(s, "odd names are only KEYS/ARGV", test_odd_names);
	CU_add_test(s, "a name of DLOCK_NAME_MAX bytes", test_long_name);
	CU_add_test(s, "a release during SUBSCRIBE is not missed", test_release_while_subscribing);
	CU_add_test(s, "the subscriber reconnects and waiters wake", test_subscriber_reconnect);
	CU_add_test(s, "many held locks renewed in batches, none lost", test_held_many);
	CU_add_test(s, "SUBSCRIBE refused: waiters poll", test_subscribe_refused);
	CU_add_test(s, "a lost acquire reply is undone (a mutex's, a reader's), not left to its TTL",
	            test_lost_reply_undone);
	CU_add_test(s, "a server that stops answering: io_timeout", test_io_timeout);
	CU_add_test(s, "fencing increases over 10000 acquisitions by 4 processes", test_fencing_processes);
	CU_add_test(s, "contended: 16 threads in 4 processes", test_contended);
	CU_add_test(s, "restart while held: lost, reconnect, larger token", test_restart_while_held);
	CU_pSuite r = CU_add_suite("redlock", NULL, NULL);
	CU_add_test(r, "majority of three", test_redlock_basic);
	CU_add_test(r, "one of three down acquires; two down fail and leave nothing", test_redlock_instances_down);
	CU_add_test(r, "contended: 16 threads in 4 processes", test_contended_redlock);
}

int main(void)
{
	redis_uri = dlock_test_env("DLOCK_TEST_REDIS_URI");
	redlock_uri = dlock_test_env("DLOCK_TEST_REDLOCK_URI");
	unix_uri = dlock_test_env("DLOCK_TEST_REDIS_UNIX_URI");
	ctl = dlock_test_env("DLOCK_TEST_REDIS_CTL");
	const char *port = dlock_test_env("DLOCK_TEST_REDIS_PORT"), *ports = dlock_test_env("DLOCK_TEST_REDLOCK_PORTS");
	if (!redis_uri || !redlock_uri || !ctl || !port || !ports ||
	    sscanf(ports, "%d %d %d", &redlock_ports[0], &redlock_ports[1], &redlock_ports[2]) != 3) {
		return dlock_test_skip("no redis server (DLOCK_TEST_REDIS_URI unset)");
	}
	redis_port = atoi(port);
	return dlock_test_main(add_suites);
}
