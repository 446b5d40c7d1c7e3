/*
 * Faults between dlock and Redis, injected by the fault proxy
 * (tests/support/faultproxy.h): what the holder is told, and whether
 * mutual exclusion held (hold intervals and fencing tokens).  Servers and
 * variables come from ci/servers/redis.sh (DLOCK_TEST_REDIS_URI,
 * DLOCK_TEST_REDIS_PORT, DLOCK_TEST_REDLOCK_PORTS).  Restart during a hold,
 * SCRIPT FLUSH and a reply lost with its connection are in test_redis.c.
 */
#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock/sys/driver.h"
#include "faultproxy.h"
#include "faults.h"
#include "testsupport.h"

static const char *redis_uri;
static int redis_port, redlock_ports[3];

/* redis://127.0.0.1:PORT?prefix=...&extra */
static void uri_at(char *out, size_t len, int port, const char *prefix, const char *extra)
{
	snprintf(out, len, "redis://127.0.0.1:%d?prefix=%s%s%s", port, prefix, *extra ? "&" : "", extra);
}

static void new_prefix(char *out, size_t len)
{
	ft_name(out, len, "p");
}

/* ------------------------------------------------------------ the server's view */

static redisContext *raw(int port)
{
	redisContext *ctx = redisConnect("127.0.0.1", port);
	CU_ASSERT_FATAL(ctx != NULL && !ctx->err);
	return ctx;
}

static void key_of(char *out, size_t len, const char *prefix, const char *name)
{
	unsigned char sum[32];
	char hex[65];
	dlock_sha256(name, strlen(name), sum);
	dlock_hex(sum, 16, hex);
	snprintf(out, len, "%s:{%s}:lock", prefix, hex);
}

/* The value of the lock key of `name` ("" when there is none). */
static void owner_of(int port, const char *prefix, const char *name, char *out, size_t len)
{
	char key[256];
	key_of(key, sizeof key, prefix, name);
	redisContext *ctx = raw(port);
	redisReply *r = redisCommand(ctx, "GET %s", key);
	snprintf(out, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
	freeReplyObject(r);
	redisFree(ctx);
}

static long lock_keys(int port, const char *prefix)
{
	redisContext *ctx = raw(port);
	redisReply *r = redisCommand(ctx, "KEYS %s:*:lock", prefix);
	long n = r && r->type == REDIS_REPLY_ARRAY ? (long)r->elements : -1;
	freeReplyObject(r);
	redisFree(ctx);
	return n;
}

/* ------------------------------------------------------------ paused holder */

#define PAUSE_LOCKS 3
#define PAUSE_LEASE_MS 1500

/*
 * The holder's network stops past its TTL (blackhole both ways, sockets
 * open): it must declare every lock lost, once, before the server lets the
 * next holder in (ft_silent_begin()); afterwards its extend, check and
 * release say not held and leave the next holder's key alone.
 */
static void test_paused_holder(void)
{
	char prefix[64], uri[512], direct[512], before[64], after[64];
	new_prefix(prefix, sizeof prefix);
	faultproxy *px = ft_proxy_to(redis_port);
	uri_at(uri, sizeof uri, faultproxy_port(px), prefix, "io_timeout=200ms");
	uri_at(direct, sizeof direct, redis_port, prefix, "");
	ft_silent s;
	ft_silent_begin(&s, px, uri, direct, "paused", PAUSE_LOCKS, PAUSE_LEASE_MS);

	/* The network is back: the old holder learns nothing new, and harms nothing. */
	const char *name = dlock_lock_name(s.first.lv);
	owner_of(redis_port, prefix, name, before, sizeof before);
	CU_ASSERT_EQUAL(dlock_extend(s.first.lv, 10000), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_check(s.first.lv), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(s.first.lv), DLOCK_ENOTHELD);
	owner_of(redis_port, prefix, name, after, sizeof after);
	CU_ASSERT(before[0] != '\0');
	CU_ASSERT_STRING_EQUAL(before, after);
	ft_silent_end(&s, DLOCK_LOST_EXPIRED);
	faultproxy_stop(px);
}

/* ------------------------------------------------------------ blackholed reply */

struct key_seen {
	int port;
	const char *prefix, *name;
};

static int key_exists(void *arg)
{
	struct key_seen *k = arg;
	char owner[64];
	owner_of(k->port, k->prefix, k->name, owner, sizeof owner);
	return owner[0] != '\0';
}

/*
 * The acquire script runs, but its reply never comes back (the path to
 * the client goes silent, the connection stays open): after io_timeout the
 * client removes the key it may have set, instead of leaving it for the
 * whole TTL.  The removal's request reaches the server even though its
 * reply is held too.
 */
static void test_reply_blackholed(void)
{
	char prefix[64], uri[512], direct[512];
	new_prefix(prefix, sizeof prefix);
	faultproxy *px = ft_proxy_to(redis_port);
	uri_at(uri, sizeof uri, faultproxy_port(px), prefix, "io_timeout=300ms");
	uri_at(direct, sizeof direct, redis_port, prefix, "");
	ft_pair p;
	ft_pair_open(&p, uri, direct, "silent");
	faultproxy_blackhole(px, FP_DOWN);

	dlock_test_waiter w;
	dlock_test_waiter_start(&w, p.lv, 0, 0);
	struct key_seen k = { redis_port, prefix, "silent" };
	CU_ASSERT(dlock_test_await(key_exists, &k, FT_AWAIT_MS)); /* the SET went through */
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, FT_AWAIT_MS), DLOCK_ECONNECT);
	CU_ASSERT_FALSE(key_exists(&k)); /* removed by its owner, not left for 30 s */
	CU_ASSERT_EQUAL(ft_acquire(p.ld, 0, 0, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(p.ld), DLOCK_OK);
	faultproxy_pass(px);
	CU_ASSERT_EQUAL(ft_acquire(p.lv, 0, 0, NULL), DLOCK_OK); /* and the client works on */
	CU_ASSERT_EQUAL(dlock_release(p.lv), DLOCK_OK);
	ft_pair_close(&p);
	faultproxy_stop(px);
}

/* ------------------------------------------------------------ RedLock */

#define SLOW_MS 400 /* each way: a round trip of 800 ms */
#define REDLOCK_LEASE_MS 600

/*
 * Two of three instances answer later than the lease: the majority comes
 * too late to be valid.  The acquire fails instead of returning a lock
 * that has already expired, returns within its wait and one more round,
 * and leaves no key on any instance.
 */
static void test_redlock_slow_majority(void)
{
	char prefix[64], uri[512], direct[512];
	faultproxy *px[3];
	new_prefix(prefix, sizeof prefix);
	for (int i = 0; i < 3; i++)
		px[i] = ft_proxy_to(redlock_ports[i]);
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?prefix=%s", faultproxy_port(px[0]),
	         faultproxy_port(px[1]), faultproxy_port(px[2]), prefix);
	snprintf(direct, sizeof direct, "redis://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?prefix=%s", redlock_ports[0],
	         redlock_ports[1], redlock_ports[2], prefix);
	ft_pair p;
	ft_pair_open(&p, uri, direct, "slow");
	dlock_lock *la = p.lv, *lb = p.ld;
	for (int i = 1; i < 3; i++)
		faultproxy_latency(px[i], FP_BOTH, SLOW_MS);

	int64_t t0 = dlock_test_now_ms();
	dlock_status st = ft_acquire(la, 1000, REDLOCK_LEASE_MS, NULL);
	int64_t dt = dlock_test_now_ms() - t0;
	printf("\n    slow majority: %s after %lld ms: %s", dlock_status_name(st), (long long)dt,
	       dlock_client_errmsg(p.via));
	CU_ASSERT(st == DLOCK_ETIMEDOUT || st == DLOCK_EBUSY);
	CU_ASSERT(dt < 1000 + 2 * 2 * SLOW_MS + FT_SLACK_MS);
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(lock_keys(redlock_ports[i], prefix), 0);
	CU_ASSERT_EQUAL(ft_acquire(lb, 0, 10000, NULL), DLOCK_OK); /* nothing was left behind */
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);

	for (int i = 0; i < 3; i++)
		faultproxy_pass(px[i]);
	CU_ASSERT_EQUAL(ft_acquire(la, 1000, REDLOCK_LEASE_MS, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	ft_pair_close(&p);
	for (int i = 0; i < 3; i++)
		faultproxy_stop(px[i]);
}

/* ------------------------------------------------------------ open, close */

/* A server that accepts but never answers, and one that refuses: a clear status, no hang. */
static void test_server_down_at_open(void)
{
	char uri[512];
	uri_at(uri, sizeof uri, redis_port, "hung", "");
	ft_check_open_server_down(uri, redis_port, "open_timeout=500ms&io_timeout=500ms", 500 + 500, 0);
}

/* A client closed while it holds locks on a slow path: the next client gets them at once. */
static void test_close_releases(void)
{
	char prefix[64], uri[512];
	new_prefix(prefix, sizeof prefix);
	uri_at(uri, sizeof uri, redis_port, prefix, "");
	ft_check_close_releases(uri, redis_port, "", 30000);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis faults", NULL, NULL);
	CU_add_test(s, "holder paused past its TTL: told first, harmless after", test_paused_holder);
	CU_add_test(s, "reply blackholed after a successful SET: key removed", test_reply_blackholed);
	CU_add_test(s, "RedLock, two of three slow: fails in time, no keys left", test_redlock_slow_majority);
	CU_add_test(s, "server hung or refusing at open: ECONNECT in time", test_server_down_at_open);
	CU_add_test(s, "closed while holding on a slow path: released", test_close_releases);
}

int main(void)
{
	redis_uri = dlock_test_env("DLOCK_TEST_REDIS_URI");
	const char *port = dlock_test_env("DLOCK_TEST_REDIS_PORT"), *ports = dlock_test_env("DLOCK_TEST_REDLOCK_PORTS");
	if (!redis_uri || !port || !ports ||
	    sscanf(ports, "%d %d %d", &redlock_ports[0], &redlock_ports[1], &redlock_ports[2]) != 3)
		return dlock_test_skip("no redis server (DLOCK_TEST_REDIS_URI unset)");
	redis_port = atoi(port);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
