/*
 * redis://…?replicas=N: WAIT for N replicas after each acquire and renewal,
 * on a real primary with one real replica (ci/servers/redis.sh).  An
 * acquire that the replicas do not confirm in time is undone and fails; a
 * renewal they do not confirm gives the lock up and reports it lost.  Bad
 * values and combinations are EURI.
 */
#include "dlock/dlock.h"
#include "testredis.h"
#include "testsupport.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AWAIT_MS 20000

static const char *primary_uri, *ctl;
static int primary_port, replica_port;

static dlock_client *open_with(const char *prefix, const char *params)
{
	char uri[512];
	dlock_testredis_uri(uri, sizeof uri, primary_uri, prefix, params);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static long long wait_calls(void)
{
	redisContext *ctx = dlock_testredis_raw(primary_port);
	redisReply *r = redisCommand(ctx, "INFO commandstats");
	long long calls = 0;
	const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_wait:calls=") : NULL;
	if (at)
		calls = atoll(at + strlen("cmdstat_wait:calls="));
	freeReplyObject(r);
	redisFree(ctx);
	return calls;
}

/* The value of `key` on the server at `port` ("" when absent). */
static void value_at(int port, const char *key, char *out, size_t len)
{
	redisContext *ctx = dlock_testredis_raw(port);
	redisReply *r = redisCommand(ctx, "GET %s", key);
	snprintf(out, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
	freeReplyObject(r);
	redisFree(ctx);
}

static int replica_synced(void *arg)
{
	(void)arg;
	redisContext *ctx = redisConnect("127.0.0.1", replica_port); /* may be down: no assertion */
	redisReply *r = ctx && !ctx->err ? redisCommand(ctx, "INFO replication") : NULL;
	int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
	freeReplyObject(r);
	redisFree(ctx);
	return up;
}

static int replica(const char *what)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s %s %d", ctl, what, replica_port);
	int rc = system(cmd);
	if (rc != 0)
		printf("\n    '%s' failed (%d)", cmd, rc);
	return rc == 0;
}

static void test_bad_params(void)
{
	static const char *bad[] = { "replicas=-1", "replicas=x", "replicas=101", "replicas=", "replicas_timeout=1s",
		                     "replicas=1&replicas_timeout=0", "replicas=1&replicas_timeout=soon",
		                     "replicas=1&fair=1" };
	char uri[512], err[512];
	dlock_client *c = NULL;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(uri, sizeof uri, "%s?%s", primary_uri, bad[i]);
		CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, err, sizeof err), DLOCK_EURI);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, "replicas"));
		CU_ASSERT_PTR_NULL(c);
	}
	const char *redlock = dlock_test_env("DLOCK_TEST_REDLOCK_URI");
	if (redlock) {
		snprintf(uri, sizeof uri, "%s?replicas=1", redlock);
		CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, err, sizeof err), DLOCK_EURI);
		CU_ASSERT_PTR_NOT_NULL(strstr(err, "RedLock"));
	}
}

/* Confirmed by the replica: the acquire returns once the replica has the key, with and without a token. */
static void test_confirmed(void)
{
	char prefix[64], key[512], on_replica[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c = open_with(prefix, "replicas=1&replicas_timeout=5s");
	dlock_lock *l = dlock_test_new_lock(c, "confirmed");
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	dlock_testredis_key(key, sizeof key, prefix, "confirmed", "lock");
	for (int fencing = 1; fencing >= 0; fencing--) {
		long long before = wait_calls();
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = 0;
		o.fence = dlock_test_switch(fencing);
		CU_ASSERT_EQUAL_FATAL(dlock_acquire(l, &o), DLOCK_OK);
		value_at(replica_port, key, on_replica, sizeof on_replica);
		CU_ASSERT(on_replica[0] != '\0'); /* WAIT returned: the replica has it */
		CU_ASSERT(wait_calls() >= before + 1);
		CU_ASSERT_EQUAL(dlock_extend(l, 0), DLOCK_OK); /* a renewal waits too */
		CU_ASSERT(wait_calls() >= before + 2);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	dlock_lock_free(l);
	dlock_client_close(c);

	/* Without replicas=, no WAIT. */
	c = open_with(prefix, "");
	l = dlock_test_new_lock(c, "confirmed");
	long long before = wait_calls();
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(wait_calls(), before);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* A reader of a read-write lock waits for the replicas too, after its acquire and its renewals. */
static void test_reader_confirmed(void)
{
	char prefix[64], key[512], on_replica[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c = open_with(prefix, "replicas=1&replicas_timeout=5s");
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(c, "reader", &l), DLOCK_OK);
	dlock_testredis_key(key, sizeof key, prefix, "reader", "lock");
	long long before = wait_calls();
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.mode = DLOCK_MODE_SHARED;
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(l, &o), DLOCK_OK);
	value_at(replica_port, key, on_replica, sizeof on_replica);
	CU_ASSERT_STRING_EQUAL(on_replica, "shared"); /* WAIT returned: the replica has the readers' key */
	CU_ASSERT(wait_calls() >= before + 1);
	CU_ASSERT_EQUAL(dlock_extend(l, 0), DLOCK_OK);
	CU_ASSERT(wait_calls() >= before + 2);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* A semaphore's permit waits for the replicas too; one not confirmed is undone (no permit left on the primary). */
static void test_permit_confirmed(void)
{
	char prefix[64], key[512], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c = open_with(prefix, "replicas=1&replicas_timeout=5s");
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(c, "permit", 2, &l), DLOCK_OK);
	dlock_testredis_key(key, sizeof key, prefix, "permit", "lock");
	long long before = wait_calls();
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_OK);
	value_at(replica_port, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, "semaphore"); /* WAIT returned: the replica has the permits' key */
	CU_ASSERT(wait_calls() >= before + 1);
	CU_ASSERT_EQUAL(dlock_extend(l, 0), DLOCK_OK);
	CU_ASSERT(wait_calls() >= before + 2);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);

	c = open_with(prefix, "replicas=2&replicas_timeout=200ms");
	CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(c, "permit", 2, &l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_ECONNECT);
	value_at(primary_port, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, ""); /* undone, not left for its lease */
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* More replicas asked than exist, or the replica down: the acquire is undone and fails, in time. */
static void test_not_confirmed(void)
{
	char prefix[64], key[512], on_primary[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(key, sizeof key, prefix, "unconfirmed", "lock");
	dlock_client *c = open_with(prefix, "replicas=2&replicas_timeout=200ms");
	dlock_lock *l = dlock_test_new_lock(c, "unconfirmed");
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_ECONNECT);
	CU_ASSERT(dlock_test_now_ms() - t0 < 5000);
	printf("\n    %s", dlock_client_errmsg(c));
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "1 of 2 replicas confirmed the lock within 200 ms"));
	value_at(primary_port, key, on_primary, sizeof on_primary);
	CU_ASSERT_STRING_EQUAL(on_primary, ""); /* undone, not left for its lease */
	dlock_lock_free(l);
	dlock_client_close(c);

	CU_ASSERT_FATAL(replica("stop"));
	c = open_with(prefix, "replicas=1&replicas_timeout=200ms");
	l = dlock_test_new_lock(c, "unconfirmed");
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_ECONNECT);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "0 of 1 replicas confirmed"));
	value_at(primary_port, key, on_primary, sizeof on_primary);
	CU_ASSERT_STRING_EQUAL(on_primary, "");
	CU_ASSERT(replica("start"));
	CU_ASSERT(dlock_test_await(replica_synced, NULL, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 5000, 0, 0, NULL, NULL), DLOCK_OK); /* and again once it is back */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* The replica goes while the lock is held: the next renewal is not confirmed, the lock is given up and reported. */
static void test_renewal_not_confirmed(void)
{
	char prefix[64], key[512], on_primary[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(key, sizeof key, prefix, "renewed", "lock");
	dlock_client *c = open_with(prefix, "replicas=1&replicas_timeout=200ms");
	dlock_lock *l = dlock_test_new_lock(c, "renewed");
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 1500, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	CU_ASSERT_FATAL(replica("stop"));
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, AWAIT_MS));
	CU_ASSERT(dlock_test_now_ms() - t0 < 1500 + 1000); /* within a renewal period and WAIT's bound */
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	value_at(primary_port, key, on_primary, sizeof on_primary);
	CU_ASSERT_STRING_EQUAL(on_primary, ""); /* given up on the primary too */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT(replica("start"));
	CU_ASSERT(dlock_test_await(replica_synced, NULL, AWAIT_MS));
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis replicas=N", NULL, NULL);
	CU_add_test(s, "bad replicas= and replicas_timeout= are EURI", test_bad_params);
	CU_add_test(s, "confirmed: the replica has the key when acquire returns", test_confirmed);
	CU_add_test(s, "a reader of a read-write lock: confirmed too", test_reader_confirmed);
	CU_add_test(s, "a semaphore's permit: confirmed too, or undone", test_permit_confirmed);
	CU_add_test(s, "not confirmed in time: undone and failed", test_not_confirmed);
	CU_add_test(s, "a renewal not confirmed: given up and reported lost", test_renewal_not_confirmed);
}

int main(void)
{
	primary_uri = dlock_test_env("DLOCK_TEST_REDIS_PRIMARY_URI");
	ctl = dlock_test_env("DLOCK_TEST_REDIS_CTL");
	const char *rp = dlock_test_env("DLOCK_TEST_REDIS_REPLICA_PORT");
	const char *colon = primary_uri ? strrchr(primary_uri, ':') : NULL;
	if (!primary_uri || !ctl || !rp || !colon)
		return dlock_test_skip("no redis primary with a replica (DLOCK_TEST_REDIS_PRIMARY_URI unset)");
	primary_port = atoi(colon + 1);
	replica_port = atoi(rp);
	return dlock_test_main(add_suites);
}
