/*
 * redis+sentinel:// and rediss+sentinel://, against real topologies of a
 * primary, a replica and three sentinels (ci/servers/redis.sh): one in the
 * clear with separate passwords for the sentinels and the data nodes, one
 * all TLS.
 *
 * What is checked: a lock lands on the master the sentinels name; dead or
 * unknown sentinels are skipped, and when none answers the open fails in
 * time; an unknown master name, wrong sentinel or data passwords are clear
 * statuses; a failover under a held lock moves the holder to the new
 * master (the replicated key survives, nobody else gets the lock, new
 * acquires and the release go to the new master); a failover to a replica
 * that never received the key (its link to the master held by a fault
 * proxy) is the AP hole: the holder is told its lock is lost, and the next
 * holder's token is still larger; the same over TLS.
 */
#include "dlock/dlock.h"
#include "faultproxy.h"
#include "testredis.h"
#include "testsupport.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AWAIT_MS 20000
#define FAILOVER_LEASE_MS 12000

static const char *ctl, *master_name, *sentinel_pw, *data_pw, *tls_dir, *tls_master, *data_ports;
static char sentinels[256], tls_sentinels[256];

/* "127.0.0.1:P1,127.0.0.1:P2,..." from "P1 P2 ..." */
static void host_list(const char *ports, char *out, size_t len)
{
	char copy[256];
	snprintf(copy, sizeof copy, "%s", ports);
	out[0] = '\0';
	for (char *save = NULL, *p = strtok_r(copy, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
		size_t n = strlen(out);
		snprintf(out + n, len - n, "%s127.0.0.1:%s", n ? "," : "", p);
	}
}

/* redis+sentinel://:DATA@SENTINELS/MASTER?prefix=...&sentinel_password=...&EXTRA */
static void sentinel_uri(char *out, size_t len, const char *prefix, const char *extra)
{
	char base[512], more[512];
	snprintf(base, sizeof base, "redis+sentinel://:%s@%s/%s", data_pw, sentinels, master_name);
	snprintf(more, sizeof more, "sentinel_password=%s%s%s", sentinel_pw, extra[0] ? "&" : "", extra);
	dlock_testredis_uri(out, len, base, prefix, more);
}

/* The master's port as the sentinels say it now (through the control command). */
static int master_port(const char *name)
{
	char what[300];
	snprintf(what, sizeof what, "master %s", name);
	return dlock_testredis_ctl_port(ctl, what);
}

static int run_ctl(const char *what)
{
	return dlock_testredis_ctl(ctl, what);
}

/* The value of `key` on the data node at `port` ("" when absent). */
static void value_at(int port, const char *key, char *out, size_t len)
{
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "AUTH %s", data_pw);
	freeReplyObject(r);
	r = redisCommand(raw, "GET %s", key);
	snprintf(out, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
	freeReplyObject(r);
	redisFree(raw);
}

/* Open `uri` expecting `want`; neither password may reach the message. */
static void expect_open_fails(const char *uri, dlock_status want, const char *expect)
{
	const char *const secrets[] = { sentinel_pw, data_pw, NULL };
	dlock_testredis_open_fails(uri, want, expect, secrets);
}

/* ------------------------------------------------------------ tests */

static void test_lock_on_master(void)
{
	char prefix[64], uri[2048], key[512], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	sentinel_uri(uri, sizeof uri, prefix, "");
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_PTR_NULL(strstr(dlock_client_uri(c), sentinel_pw)); /* both passwords masked */
	CU_ASSERT_PTR_NULL(strstr(dlock_client_uri(c), data_pw));
	dlock_lock *l = dlock_test_new_lock(c, "where");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, 1, NULL, NULL), DLOCK_OK);
	int port = master_port(master_name);
	CU_ASSERT_FATAL(port > 0);
	dlock_testredis_key(key, sizeof key, prefix, "where", "lock");
	value_at(port, key, value, sizeof value);
	CU_ASSERT(value[0] != '\0');
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	value_at(port, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, "");
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void test_dead_and_wrong(void)
{
	char uri[2048], base[1024];
	/* A dead sentinel first in the list: the next one answers. */
	snprintf(base, sizeof base, "redis+sentinel://:%s@127.0.0.1:1,%s/%s", data_pw, sentinels, master_name);
	char more[256];
	snprintf(more, sizeof more, "sentinel_password=%s&open_timeout=1s", sentinel_pw);
	dlock_testredis_uri(uri, sizeof uri, base, "dlock-sen-dead", more);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "dead-first"), DLOCK_OK);
	dlock_client_close(c);

	/* None answers: ECONNECT within open_timeout per sentinel. */
	snprintf(uri, sizeof uri, "redis+sentinel://127.0.0.1:1,127.0.0.1:2/%s?open_timeout=500ms", master_name);
	int64_t t0 = dlock_test_now_ms();
	expect_open_fails(uri, DLOCK_ECONNECT, "none of 2 sentinels");
	CU_ASSERT(dlock_test_now_ms() - t0 < 3000);

	/* An unknown master, a wrong sentinel password, none, a wrong data password. */
	snprintf(uri, sizeof uri, "redis+sentinel://:%s@%s/no-such-master?sentinel_password=%s", data_pw, sentinels,
	         sentinel_pw);
	expect_open_fails(uri, DLOCK_ENOTFOUND, "no-such-master");
	snprintf(uri, sizeof uri, "redis+sentinel://:%s@%s/%s?sentinel_password=wrong-%s", data_pw, sentinels,
	         master_name, sentinel_pw);
	expect_open_fails(uri, DLOCK_EAUTH, "sentinel");
	snprintf(uri, sizeof uri, "redis+sentinel://:%s@%s/%s", data_pw, sentinels, master_name);
	expect_open_fails(uri, DLOCK_EAUTH, "sentinel");
	snprintf(uri, sizeof uri, "redis+sentinel://:wrong-%s@%s/%s?sentinel_password=%s", data_pw, sentinels,
	         master_name, sentinel_pw);
	expect_open_fails(uri, DLOCK_EAUTH, NULL);

	/* Bad URIs. */
	snprintf(uri, sizeof uri, "redis+sentinel://%s", sentinels);
	expect_open_fails(uri, DLOCK_EURI, "master's name");
	snprintf(uri, sizeof uri, "redis+sentinel://%s/%s?db=x", sentinels, master_name);
	expect_open_fails(uri, DLOCK_EURI, "db");
	snprintf(uri, sizeof uri, "redis+sentinel://%s/%s?tls_ca_file=/x", sentinels, master_name);
	expect_open_fails(uri, DLOCK_EURI, "tls_ca_file");
}

struct on_port {
	int port;
	char key[512], owner[128];
};

/* The holder's key is on `port` with its value (renewed there). */
static int key_on(void *arg)
{
	struct on_port *o = arg;
	char value[128];
	value_at(o->port, o->key, value, sizeof value);
	return strcmp(value, o->owner) == 0;
}

/*
 * A failover under a held lock whose key reached the replica: the holder
 * keeps it on the new master, nobody else gets it, and the old master's
 * connections are not used any more.
 */
static void test_failover_keeps_replicated_lock(void)
{
	char prefix[64], uri[2048], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	sentinel_uri(uri, sizeof uri, prefix, "replicas=1&replicas_timeout=2s");
	dlock_client *holder = dlock_test_open(uri, NULL, NULL), *other = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
	CU_ASSERT_PTR_NOT_NULL_FATAL(other);
	dlock_lock *l = dlock_test_new_lock(holder, "failover"), *o = dlock_test_new_lock(other, "failover");
	dlock_test_lost lost = { 0 };
	/* A lease well past the failover itself (3.4 s seen under ASan): the renewals that fail meanwhile must not run it out. */
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, FAILOVER_LEASE_MS, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	uint64_t before = dlock_test_token(l);
	int old = master_port(master_name);
	struct on_port at = { .port = old };
	dlock_testredis_key(at.key, sizeof at.key, prefix, "failover", "lock");
	value_at(old, at.key, at.owner, sizeof at.owner);
	CU_ASSERT_FATAL(at.owner[0] != '\0');

	char what[512];
	snprintf(what, sizeof what, "failover %s", master_name);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_FATAL(run_ctl(what));
	int now = master_port(master_name);
	printf("\n    master %d -> %d in %lld ms", old, now, (long long)(dlock_test_now_ms() - t0));
	CU_ASSERT_FATAL(now > 0 && now != old);

	/* The holder renews on the new master, which had the key (WAIT replicas=1). */
	at.port = now;
	CU_ASSERT(dlock_test_await(key_on, &at, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_test_acquire(o, 0, 0, 0, NULL, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	value_at(now, at.key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, ""); /* released on the new master */

	/* The other client takes it there, with a larger token. */
	CU_ASSERT_EQUAL(dlock_test_acquire(o, 5000, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_token(o) > before);
	CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);

	/* The old master comes back as a replica (for the next run). */
	snprintf(what, sizeof what, "rejoin %s %d", master_name, old);
	CU_ASSERT(run_ctl(what));
	dlock_lock_free(l);
	dlock_lock_free(o);
	dlock_client_close(holder);
	dlock_client_close(other);
}

/* A command on the data node at `port` (AUTH first); the reply, which the caller frees. */
static redisReply *on_data_node(int port, const char *fmt, const char *arg1, int arg2)
{
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "AUTH %s", data_pw);
	freeReplyObject(r);
	r = redisCommand(raw, fmt, arg1, arg2);
	redisFree(raw);
	return r;
}

struct probe {
	int port;
	char key[128];
};

/* The replica has the probe key: its link (through the proxy) is up and caught up. */
static int probe_arrived(void *arg)
{
	struct probe *p = arg;
	redisReply *r = on_data_node(p->port, "EXISTS %s", p->key, 0);
	int there = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	return there;
}

/* The port of the data node that is not `port`. */
static int other_data_port(int port)
{
	int a = 0, b = 0;
	if (sscanf(data_ports, "%d %d", &a, &b) != 2)
		return 0;
	return a == port ? b : a;
}

/*
 * The AP hole: the replica never gets the lock's key (its link to the
 * master goes through a fault proxy that holds every byte), the master
 * dies, and the sentinels promote the replica.  The holder is told its
 * lock is lost, once; another client takes the lock on the new master, and
 * its token is still larger (the counter restarts at the server's clock).
 */
static void test_failover_loses_unreplicated_lock(void)
{
	char prefix[64], uri[2048], what[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	int old = master_port(master_name), replica = other_data_port(old);
	CU_ASSERT_FATAL(old > 0 && replica > 0);
	faultproxy *px = faultproxy_start("127.0.0.1", old);
	CU_ASSERT_PTR_NOT_NULL_FATAL(px);
	redisReply *r = on_data_node(replica, "REPLICAOF %s %d", "127.0.0.1", faultproxy_port(px));
	CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	struct probe p = { .port = replica };
	snprintf(p.key, sizeof p.key, "%s:probe", prefix);
	r = on_data_node(old, "SET %s 1", p.key, 0);
	freeReplyObject(r);
	CU_ASSERT_FATAL(dlock_test_await(probe_arrived, &p, AWAIT_MS)); /* replicating through the proxy */
	faultproxy_blackhole(px, FP_BOTH);

	sentinel_uri(uri, sizeof uri, prefix, "");
	dlock_client *holder = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
	dlock_lock *l = dlock_test_new_lock(holder, "unreplicated");
	dlock_test_lost lost = { 0 };
	/* A lease long enough to outlast the failover: the loss is found on the new master, not by expiry. */
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, FAILOVER_LEASE_MS, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	uint64_t first = dlock_test_token(l);

	snprintf(what, sizeof what, "stop %d", old);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_FATAL(run_ctl(what));
	faultproxy_reset(px); /* the held bytes die with the master */
	faultproxy_stop(px);
	snprintf(what, sizeof what, "wait-failover %s %d", master_name, old);
	CU_ASSERT_FATAL(run_ctl(what));
	int64_t promoted = dlock_test_now_ms();
	printf("\n    promoted after %lld ms", (long long)(promoted - t0));
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, AWAIT_MS));
	printf("\n    holder told %lld ms after the promotion", (long long)(dlock_test_now_ms() - promoted));
	CU_ASSERT(dlock_test_now_ms() - promoted < FAILOVER_LEASE_MS / 3 + 3000); /* within a renewal period, and slack */
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);

	dlock_client *next = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(next);
	dlock_lock *n = dlock_test_new_lock(next, "unreplicated");
	CU_ASSERT_EQUAL(dlock_test_acquire(n, 5000, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_token(n) > first);
	CU_ASSERT_EQUAL(dlock_release(n), DLOCK_OK);

	/* The old master comes back as a replica (for the next tests and runs). */
	snprintf(what, sizeof what, "start %d", old);
	CU_ASSERT(run_ctl(what));
	snprintf(what, sizeof what, "rejoin %s %d", master_name, old);
	CU_ASSERT(run_ctl(what));
	dlock_lock_free(l);
	dlock_lock_free(n);
	dlock_client_close(holder);
	dlock_client_close(next);
}

static void test_tls_sentinel(void)
{
	if (!tls_master) {
		dlock_test_skip_part("no TLS sentinels (DLOCK_TEST_SENTINEL_TLS_PORTS unset)");
		return;
	}
	char uri[2048], base[512], extra[600], prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	snprintf(base, sizeof base, "rediss+sentinel://%s/%s", tls_sentinels, tls_master);
	snprintf(extra, sizeof extra, "tls_ca_file=%s/ca.pem", tls_dir);
	dlock_testredis_uri(uri, sizeof uri, base, prefix, extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *l = dlock_test_new_lock(c, "tls");
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
	/* The wrong CA: the sentinels' certificates are refused, never read in the clear. */
	snprintf(extra, sizeof extra, "tls_ca_file=%s/other-ca.pem", tls_dir);
	dlock_testredis_uri(uri, sizeof uri, base, prefix, extra);
	expect_open_fails(uri, DLOCK_EAUTH, "certificate");
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis+sentinel://", NULL, NULL);
	CU_add_test(s, "a lock lands on the master the sentinels name", test_lock_on_master);
	CU_add_test(s, "dead sentinels, unknown masters, wrong passwords, bad URIs", test_dead_and_wrong);
	CU_add_test(s, "a failover under a replicated lock: the holder keeps it on the new master",
	            test_failover_keeps_replicated_lock);
	CU_add_test(s, "a failover to a replica that missed the key: the holder is told, the token still grows",
	            test_failover_loses_unreplicated_lock);
	CU_add_test(s, "rediss+sentinel://: all TLS", test_tls_sentinel);
}

int main(void)
{
	ctl = dlock_test_env("DLOCK_TEST_REDIS_CTL");
	master_name = dlock_test_env("DLOCK_TEST_SENTINEL_MASTER");
	sentinel_pw = dlock_test_env("DLOCK_TEST_SENTINEL_PASSWORD");
	data_pw = dlock_test_env("DLOCK_TEST_SENTINEL_DATA_PASSWORD");
	const char *ports = dlock_test_env("DLOCK_TEST_SENTINEL_PORTS");
	data_ports = dlock_test_env("DLOCK_TEST_SENTINEL_DATA_PORTS");
	if (!ctl || !master_name || !sentinel_pw || !data_pw || !ports || !data_ports)
		return dlock_test_skip("no Redis Sentinel topology (DLOCK_TEST_SENTINEL_PORTS unset)");
	host_list(ports, sentinels, sizeof sentinels);
	tls_dir = dlock_test_env("DLOCK_TEST_TLS_DIR");
	tls_master = dlock_test_env("DLOCK_TEST_SENTINEL_TLS_MASTER");
	const char *tls_ports = dlock_test_env("DLOCK_TEST_SENTINEL_TLS_PORTS");
	if (tls_ports && tls_dir)
		host_list(tls_ports, tls_sentinels, sizeof tls_sentinels);
	else
		tls_master = NULL;
	return dlock_test_main(add_suites);
}
