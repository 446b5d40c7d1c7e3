/*
 * redis+cluster:// and rediss+cluster://, against a real Redis Cluster of
 * three masters with one replica each (ci/servers/redis.sh), whose nodes
 * also speak TLS.  The conformance suite runs on the cluster URI too; this
 * program checks what only a cluster does.
 *
 * What is checked: locks land on every master, each on its slot's, and
 * so do a read-write lock's keys (readers and writer); bad
 * URIs, dead seeds, a seed that is not a cluster node, a plain redis:// on
 * a cluster node and a wrong CA are clear statuses; a slot migrated under
 * a held lock (begun, keys moved, ended: the ASK and then the MOVED
 * paths) keeps the lock with its holder; a slot migrated under a waiter
 * (default and fair=1) still wakes the waiter at the release, which now
 * happens on the other master; a lock's keys split between the two nodes
 * of a migration (TRYAGAIN): an acquisition ends at its deadline, a
 * cancelled one at once, and the lock goes on once the slot has moved; a
 * master killed under a held lock and under waiters: the holder keeps its
 * lock (replicated before the kill) on
 * the promoted replica, the waiters wait through the failover and get the lock in turn
 * with growing tokens, and a lock whose key is missing on the promoted
 * replica is reported lost within a renewal period.
 */
#include "dlock/dlock.h"
#include "testredis.h"
#include "testsupport.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AWAIT_MS 20000

static const char *ctl, *cluster_uri, *tls_uri, *tls_dir, *plain_uri;
static int ports[6], nports; /* the nodes as started (roles change with failovers) */
static int seed_port;        /* the first of them, for a plain redis:// on a cluster node */

/* ------------------------------------------------------------ helpers */

static int run_ctl(const char *what)
{
	return dlock_testredis_ctl(ctl, what);
}

static int ctl_port(const char *what)
{
	return dlock_testredis_ctl_port(ctl, what);
}

static int master_of(unsigned slot)
{
	char what[64];
	snprintf(what, sizeof what, "cluster-master %u", slot);
	return ctl_port(what);
}

/* A master other than `port`: the one serving the first of a few spread slots that is not it. */
static int other_master(int port)
{
	static const unsigned probes[] = { 0, 5500, 11000, 16383 };
	for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
		int m = master_of(probes[i]);
		if (m > 0 && m != port)
			return m;
	}
	return 0;
}

/* The slot of `key`, as the first node that answers computes it. */
static unsigned key_slot(const char *key)
{
	for (int i = 0; i < nports; i++) {
		redisContext *raw = redisConnect("127.0.0.1", ports[i]);
		redisReply *r = raw && !raw->err ? redisCommand(raw, "CLUSTER KEYSLOT %s", key) : NULL;
		long long slot = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
		freeReplyObject(r);
		redisFree(raw);
		if (slot >= 0)
			return (unsigned)slot;
	}
	CU_FAIL("no cluster node answers CLUSTER KEYSLOT");
	return 0;
}

/* The value of `key` on the node at `port` ("" when absent or not served there). */
static void value_at(int port, const char *key, char *out, size_t len)
{
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "GET %s", key);
	snprintf(out, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
	freeReplyObject(r);
	redisFree(raw);
}

/* Delete `key` on the node at `port`, which must serve it. */
static void delete_at(int port, const char *key)
{
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "DEL %s", key);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	redisFree(raw);
}

struct subscribed {
	int port;
	char chan[512];
	long want;
};

/* The node at `port` has at least `want` subscribers to the sharded channel. */
static int has_subscribers(void *arg)
{
	struct subscribed *s = arg;
	redisContext *raw = dlock_testredis_raw(s->port);
	redisReply *r = redisCommand(raw, "PUBSUB SHARDNUMSUB %s", s->chan);
	long n = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER
	                 ? (long)r->element[1]->integer
	                 : -1;
	freeReplyObject(r);
	redisFree(raw);
	return n >= s->want;
}

static void uri_with(char *out, size_t len, const char *base, const char *prefix, const char *extra)
{
	dlock_testredis_uri(out, len, base, prefix, extra);
}

/* ------------------------------------------------------------ tests */

/* Error replies `code` ("MOVED", "TRYAGAIN") the node at `port` has sent so far (INFO errorstats; 0 when down). */
static long long error_replies(int port, const char *code)
{
	char field[64];
	snprintf(field, sizeof field, "errorstat_%s:count=", code);
	redisContext *raw = redisConnect("127.0.0.1", port);
	redisReply *r = raw && !raw->err ? redisCommand(raw, "INFO errorstats") : NULL;
	const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
	long long n = at ? atoll(at + strlen(field)) : 0;
	freeReplyObject(r);
	redisFree(raw);
	return n;
}

/* MOVED replies the cluster's nodes have sent so far, all nodes together. */
static long long moved_replies(void)
{
	long long n = 0;
	for (int i = 0; i < nports; i++)
		n += error_replies(ports[i], "MOVED");
	return n;
}

/*
 * Enough names to land on every master: each lock's key is on its slot's
 * master, and only there, and the client sends each command straight
 * there (no node answered MOVED: a client that routed wrongly would still
 * work, by following the redirections, at twice the cost).
 */
static void test_every_master(void)
{
	enum { NAMES = 24 };
	char prefix[64], uri[1024], name[32], key[512], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, cluster_uri, prefix, "");
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *locks[NAMES];
	int masters[3] = { 0 }, nmasters = 0;
	long long moved = moved_replies();
	for (int i = 0; i < NAMES; i++) {
		snprintf(name, sizeof name, "n%d", i);
		locks[i] = dlock_test_new_lock(c, name);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(locks[i], 0, 0, 0, NULL, NULL), DLOCK_OK);
		dlock_testredis_key(key, sizeof key, prefix, name, "lock");
		int m = master_of(key_slot(key));
		value_at(m, key, value, sizeof value);
		CU_ASSERT(value[0] != '\0'); /* held on its slot's master */
		int seen = 0;
		for (int k = 0; k < nmasters; k++)
			seen |= masters[k] == m;
		if (!seen && nmasters < 3)
			masters[nmasters++] = m;
	}
	printf("\n    %d names on %d masters", NAMES, nmasters);
	CU_ASSERT_EQUAL(nmasters, 3);
	CU_ASSERT_EQUAL(moved_replies(), moved);
	for (int i = 0; i < NAMES; i++) {
		CU_ASSERT_EQUAL(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	for (int k = 0; k < nmasters; k++)
		CU_ASSERT_EQUAL(dlock_testredis_keys_under(masters[k], prefix) >= 0, 1);
	dlock_client_close(c);
}

static long long zcard_at(int port, const char *key)
{
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "ZCARD %s", key);
	long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
	freeReplyObject(r);
	redisFree(raw);
	return n;
}

static dlock_status rw_acquire(dlock_lock *l, dlock_lock_mode mode, int64_t lease_ms, int renew)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.lease_ms = lease_ms;
	o.renewal = dlock_test_switch(renew);
	o.mode = mode;
	return dlock_acquire(l, &o);
}

/*
 * A read-write lock's keys (:lock, "shared" while readers hold, and
 * :readers) share its slot and live on that slot's master, reached with no
 * redirection, for names on every master and for a name with braces of its
 * own (Redisson's testName: "{test}:abc:key"); readers of two clients
 * (fair=1 and fair=0) overlap there and are renewed in batches, a writer
 * waits for them and then holds the key as a mutex would.
 */
static void test_rwlock_on_slot_master(void)
{
	enum { NAMES = 8 };
	char prefix[64], uri[1024], uri0[1024], name[32], key[512], readers[512], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, cluster_uri, prefix, "");
	uri_with(uri0, sizeof uri0, cluster_uri, prefix, "fair=0");
	dlock_client *a = dlock_test_open(uri, NULL, NULL), *b = dlock_test_open(uri0, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_PTR_NOT_NULL_FATAL(b);
	dlock_lock *ra[NAMES], *rb[NAMES], *w[NAMES];
	int masters[3] = { 0 }, nmasters = 0;
	long long moved = moved_replies();
	for (int i = 0; i < NAMES; i++) {
		if (i == 0)
			snprintf(name, sizeof name, "{test}:abc:key");
		else
			snprintf(name, sizeof name, "rw%d", i);
		CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(a, name, &ra[i]), DLOCK_OK);
		CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(b, name, &rb[i]), DLOCK_OK);
		CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(b, name, &w[i]), DLOCK_OK);
		CU_ASSERT_EQUAL_FATAL(rw_acquire(ra[i], DLOCK_MODE_SHARED, 900, 1), DLOCK_OK);
		CU_ASSERT_EQUAL_FATAL(rw_acquire(rb[i], DLOCK_MODE_SHARED, 900, 1), DLOCK_OK);
		dlock_testredis_key(key, sizeof key, prefix, name, "lock");
		dlock_testredis_key(readers, sizeof readers, prefix, name, "readers");
		unsigned slot = key_slot(key);
		CU_ASSERT_EQUAL(key_slot(readers), slot);
		int m = master_of(slot);
		value_at(m, key, value, sizeof value);
		CU_ASSERT_STRING_EQUAL(value, "shared");
		CU_ASSERT_EQUAL(zcard_at(m, readers), 2);
		int seen = 0;
		for (int k = 0; k < nmasters; k++)
			seen |= masters[k] == m;
		if (!seen && nmasters < 3)
			masters[nmasters++] = m;
	}
	printf("\n    %d read-write locks on %d masters", NAMES, nmasters);
	CU_ASSERT(nmasters >= 2);
	dlock_test_count renewals = { a, 2 * NAMES }; /* each of a's readers twice */
	CU_ASSERT(dlock_test_await(dlock_test_renewed, &renewals, AWAIT_MS));
	for (int i = 0; i < NAMES; i++) {
		CU_ASSERT_EQUAL(dlock_check(ra[i]), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(rb[i]), DLOCK_OK); /* rb's handle and w share client b: one at a time */
		dlock_client *c = dlock_test_open(uri0, NULL, NULL);
		dlock_lock *other = NULL;
		CU_ASSERT_EQUAL(dlock_rwlock_new(c, dlock_lock_name(w[i]), &other), DLOCK_OK);
		CU_ASSERT_EQUAL(rw_acquire(other, DLOCK_MODE_EXCLUSIVE, 0, -1), DLOCK_EBUSY);
		dlock_lock_free(other);
		dlock_client_close(c);
		CU_ASSERT_EQUAL(dlock_release(ra[i]), DLOCK_OK);
		CU_ASSERT_EQUAL(rw_acquire(w[i], DLOCK_MODE_EXCLUSIVE, 0, -1), DLOCK_OK);
		dlock_testredis_key(key, sizeof key, prefix, dlock_lock_name(w[i]), "lock");
		value_at(master_of(key_slot(key)), key, value, sizeof value);
		CU_ASSERT_EQUAL(strcspn(value, " "), 32);
		CU_ASSERT_EQUAL(dlock_release(w[i]), DLOCK_OK);
		dlock_lock_free(ra[i]);
		dlock_lock_free(rb[i]);
		dlock_lock_free(w[i]);
	}
	CU_ASSERT_EQUAL(moved_replies(), moved);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_bad_input(void)
{
	char uri[1024], base[512];
	/* Not a cluster node. */
	snprintf(uri, sizeof uri, "redis+cluster://%s", plain_uri + strlen("redis://"));
	dlock_testredis_open_fails(uri, DLOCK_ESERVER, "redis://", NULL);
	/* A cluster has database 0 only; unknown parameters; TLS parameters on a plaintext URI. */
	snprintf(uri, sizeof uri, "%s/1", cluster_uri);
	dlock_testredis_open_fails(uri, DLOCK_EURI, "database 0", NULL);
	snprintf(uri, sizeof uri, "%s?no_such_param=1", cluster_uri);
	dlock_testredis_open_fails(uri, DLOCK_EURI, "no_such_param", NULL);
	snprintf(uri, sizeof uri, "%s?tls_ca_file=/x", cluster_uri);
	dlock_testredis_open_fails(uri, DLOCK_EURI, "tls_ca_file", NULL);
	/* No seed answers: ECONNECT in time; a dead seed first is skipped. */
	int64_t t0 = dlock_test_now_ms();
	dlock_testredis_open_fails("redis+cluster://127.0.0.1:1,127.0.0.1:2?open_timeout=500ms", DLOCK_ECONNECT,
	                           "none of 2 nodes", NULL);
	CU_ASSERT(dlock_test_now_ms() - t0 < 3000);
	snprintf(uri, sizeof uri, "redis+cluster://127.0.0.1:1,%s", cluster_uri + strlen("redis+cluster://"));
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "dead-seed-first"), DLOCK_OK);
	dlock_client_close(c);

	/* A plain redis:// on a cluster node: a name on another master says which scheme to use. */
	snprintf(base, sizeof base, "redis://127.0.0.1:%d", seed_port);
	c = dlock_test_open(base, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int moved = 0;
	for (int i = 0; i < 16 && !moved; i++) {
		char name[32];
		snprintf(name, sizeof name, "elsewhere-%d", i);
		dlock_lock *l = dlock_test_new_lock(c, name);
		dlock_status st = dlock_test_acquire(l, 0, 0, 0, NULL, NULL);
		if (st == DLOCK_OK) {
			CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK); /* its slot is this node's */
		} else {
			const char *err = dlock_client_errmsg(c);
			printf("\n    %s: %s", dlock_status_name(st), err);
			CU_ASSERT_EQUAL(st, DLOCK_ESERVER);
			CU_ASSERT_PTR_NOT_NULL(strstr(err, "redis+cluster://"));
			moved = 1;
		}
		dlock_lock_free(l);
	}
	CU_ASSERT(moved);
	dlock_client_close(c);

	/* Over TLS, the wrong CA: the nodes' certificates are refused. */
	if (tls_uri && tls_dir) {
		snprintf(uri, sizeof uri, "%s", tls_uri);
		char *q = strchr(uri, '?');
		if (q)
			snprintf(q, sizeof uri - (size_t)(q - uri), "?tls_ca_file=%s/other-ca.pem", tls_dir);
		dlock_testredis_open_fails(uri, DLOCK_EAUTH, "certificate", NULL);
	}
}

/* The TLS twin: a lock taken and released through the TLS ports. */
static void test_tls(void)
{
	if (!tls_uri) {
		dlock_test_skip_part("no TLS cluster URI (DLOCK_TEST_CLUSTER_TLS_URI unset)");
		return;
	}
	char prefix[64], uri[1024];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, tls_uri, prefix, "");
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	for (int i = 0; i < 6; i++) {
		char name[32];
		snprintf(name, sizeof name, "tls-%d", i);
		CU_ASSERT_EQUAL(dlock_test_probe(c, name), DLOCK_OK);
	}
	dlock_client_close(c);
}

/*
 * A slot migrated, step by step, under a held lock: while the keys are
 * still on the source, after they moved (the source answers ASK), and once
 * the target owns the slot (MOVED).  The holder checks, extends and keeps
 * the lock throughout, nobody else gets it, and the release happens on the
 * target.
 */
static void test_migration_under_holder(void)
{
	char prefix[64], uri[1024], key[512], owner[128], value[128], what[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, cluster_uri, prefix, "");
	dlock_client *holder = dlock_test_open(uri, NULL, NULL), *other = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
	CU_ASSERT_PTR_NOT_NULL_FATAL(other);
	dlock_lock *l = dlock_test_new_lock(holder, "migrating"), *o = dlock_test_new_lock(other, "migrating");
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 3000, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	dlock_testredis_key(key, sizeof key, prefix, "migrating", "lock");
	unsigned slot = key_slot(key);
	int src = master_of(slot), dst = other_master(src);
	CU_ASSERT_FATAL(src > 0 && dst > 0);
	value_at(src, key, owner, sizeof owner);
	CU_ASSERT_FATAL(owner[0] != '\0');
	printf("\n    slot %u: %d -> %d", slot, src, dst);

	const char *const steps[] = { "cluster-slot-begin %u %d", "cluster-slot-keys %u", "cluster-slot-end %u" };
	for (size_t i = 0; i < 3; i++) {
		snprintf(what, sizeof what, steps[i], slot, dst);
		CU_ASSERT_FATAL(run_ctl(what));
		dlock_status st = dlock_check(l);
		if (st == DLOCK_OK)
			st = dlock_extend(l, 3000);
		if (st != DLOCK_OK)
			printf("\n    after %s: %s", what, dlock_client_errmsg(holder));
		CU_ASSERT_EQUAL(st, DLOCK_OK);
		st = dlock_test_acquire(o, 0, 0, 0, NULL, NULL);
		if (st != DLOCK_EBUSY)
			printf("\n    after %s, another acquire: %s", what, dlock_client_errmsg(other));
		CU_ASSERT_EQUAL(st, DLOCK_EBUSY);
	}
	value_at(dst, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, owner); /* the key and its owner moved */
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	value_at(dst, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, "");
	/* The fencing counter moved with the slot: the next token is larger. */
	CU_ASSERT_EQUAL(dlock_test_acquire(o, 0, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_token(o) > first);
	CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	dlock_lock_free(l);
	dlock_lock_free(o);
	dlock_client_close(holder);
	dlock_client_close(other);
}

struct queued {
	int port;
	char queue[512];
};

/* One waiter is in the fair=1 queue on the node at `port`. */
static int is_queued(void *arg)
{
	struct queued *q = arg;
	redisContext *raw = dlock_testredis_raw(q->port);
	redisReply *r = redisCommand(raw, "LLEN %s", q->queue);
	int one = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	redisFree(raw);
	return one;
}

/*
 * A slot migrated under a waiter: subscribed (default) or queued and
 * blocked in BLPOP (fair=1) on the source.  The holder's lease is far
 * longer than the test, so only a wake-up at the release, now on the
 * target, gets the waiter the lock in time.
 */
static void migration_under_waiter(const char *extra)
{
	char prefix[64], uri[1024], key[512], what[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, cluster_uri, prefix, extra);
	dlock_client *holder = dlock_test_open(uri, NULL, NULL), *waiter = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
	CU_ASSERT_PTR_NOT_NULL_FATAL(waiter);
	dlock_lock *l = dlock_test_new_lock(holder, "wait-move"), *w = dlock_test_new_lock(waiter, "wait-move");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 60000, 1, NULL, NULL), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	dlock_testredis_key(key, sizeof key, prefix, "wait-move", "lock");
	unsigned slot = key_slot(key);
	int src = master_of(slot), dst = other_master(src);
	CU_ASSERT_FATAL(src > 0 && dst > 0);

	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, w, 30000, 0);
	if (strcmp(extra, "fair=0") == 0) { /* subscribed on the source before the slot moves */
		struct subscribed s = { .port = src, .want = 1 };
		dlock_testredis_key(s.chan, sizeof s.chan, prefix, "wait-move", "released");
		CU_ASSERT(dlock_test_await(has_subscribers, &s, AWAIT_MS));
	} else { /* queued on the source */
		struct queued q = { .port = src };
		dlock_testredis_key(q.queue, sizeof q.queue, prefix, "wait-move", "queue");
		CU_ASSERT(dlock_test_await(is_queued, &q, AWAIT_MS));
	}
	snprintf(what, sizeof what, "cluster-migrate %u %d", slot, dst);
	CU_ASSERT_FATAL(run_ctl(what));
	if (strcmp(extra, "fair=0") == 0) { /* the waiter watches again, on the target */
		struct subscribed s = { .port = dst, .want = 1 };
		dlock_testredis_key(s.chan, sizeof s.chan, prefix, "wait-move", "released");
		CU_ASSERT(dlock_test_await(has_subscribers, &s, AWAIT_MS));
	}
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_status joined = dlock_test_waiter_join(&wt, AWAIT_MS);
	if (joined != DLOCK_OK)
		printf("\n    the waiter: %s: %s", dlock_status_name(joined), dlock_client_errmsg(waiter));
	CU_ASSERT_EQUAL(joined, DLOCK_OK);
	printf("\n    %s: the waiter got the lock %lld ms after the release on the new master", extra[0] ? extra : "default",
	       (long long)(wt.at_ms - released));
	CU_ASSERT(wt.token > first);
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	dlock_lock_free(l);
	dlock_lock_free(w);
	dlock_client_close(holder);
	dlock_client_close(waiter);
}

static void test_migration_under_waiter(void)
{
	migration_under_waiter("fair=0");
}

static void test_migration_under_fair_waiter(void)
{
	migration_under_waiter("fair=1");
}

/* EXISTS `key` on the node at `port`, after ASKING (a target answers for a slot it imports): 1, 0, or
 * -1 for an error reply (a redirection). */
static long long exists_at(int port, const char *key)
{
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "ASKING");
	freeReplyObject(r);
	r = redisCommand(raw, "EXISTS %s", key);
	long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
	freeReplyObject(r);
	redisFree(raw);
	return n;
}

/*
 * MIGRATE one key from the node at `src` (migrating its slot) to the node at
 * `dst` (importing it).  The nodes migrate in TLS (tls-cluster), so MIGRATE
 * is given the target's TLS port, which the target tells (CONFIG GET).
 */
static int migrate_key(int src, int dst, const char *key)
{
	redisContext *raw = dlock_testredis_raw(dst);
	redisReply *r = redisCommand(raw, "CONFIG GET tls-port");
	int tport = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING
	                    ? atoi(r->element[1]->str)
	                    : 0;
	freeReplyObject(r);
	redisFree(raw);
	char port[16];
	snprintf(port, sizeof port, "%d", tport > 0 ? tport : dst);
	const char *argv[] = { "MIGRATE", "127.0.0.1", port, "", "0", "1000", "KEYS", key };
	raw = dlock_testredis_raw(src);
	r = redisCommandArgv(raw, (int)(sizeof argv / sizeof argv[0]), argv, NULL);
	int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
	if (!ok)
		printf("\n    MIGRATE %s to %d: %s", key, dst, r && r->str ? r->str : "no reply");
	freeReplyObject(r);
	redisFree(raw);
	return ok;
}

struct refusals {
	int port;
	long long before;
};

/* The node at `port` has answered TRYAGAIN since `before` was counted. */
static int refused_again(void *arg)
{
	const struct refusals *f = arg;
	return error_replies(f->port, "TRYAGAIN") > f->before;
}

/*
 * TRYAGAIN, as a migration shows it: the slot of a held lock being moved,
 * and only the fencing counter moved to the target yet (by hand), the lock
 * key still on the source.  The acquire script touches both, so the source
 * answers TRYAGAIN for as long as the keys stay split.  An acquisition
 * then ends at its deadline, with that refusal as its message, and a
 * cancelled one returns at once: the wait for the slot to settle is the
 * acquisition's own.  The holder renews throughout (its script touches the
 * lock key only).  Once the rest has moved and the slot is the target's,
 * the next holder gets a larger token: the counter moved intact.  With
 * fair=1 the queue's scripts, which touch the counter too, are refused
 * alike.
 */
static void tryagain_split_keys(const char *extra)
{
	enum { DEADLINE_MS = 200, PROMPT_MS = 500 };
	char prefix[64], uri[1024], key[512], fence[512], what[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, cluster_uri, prefix, extra);
	dlock_client *holder = dlock_test_open(uri, NULL, NULL), *other = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
	CU_ASSERT_PTR_NOT_NULL_FATAL(other);
	dlock_lock *l = dlock_test_new_lock(holder, "split"), *o = dlock_test_new_lock(other, "split");
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 30000, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	dlock_testredis_key(key, sizeof key, prefix, "split", "lock");
	dlock_testredis_key(fence, sizeof fence, prefix, "split", "fence");
	unsigned slot = key_slot(key);
	int src = master_of(slot), dst = other_master(src);
	CU_ASSERT_FATAL(src > 0 && dst > 0);
	snprintf(what, sizeof what, "cluster-slot-begin %u %d", slot, dst);
	CU_ASSERT_FATAL(run_ctl(what));

	/* From here on the migration is ended whatever fails. */
	int split = migrate_key(src, dst, fence);
	CU_ASSERT(split);
	CU_ASSERT_EQUAL(exists_at(src, key), 1);
	CU_ASSERT_EQUAL(exists_at(dst, key), 0);
	CU_ASSERT_EQUAL(exists_at(dst, fence), 1);
	printf("\n    %s: slot %u: %d -> %d, the fencing counter moved, the lock key not", extra[0] ? extra : "default",
	       slot, src, dst);
	if (split) {
		CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_extend(l, 30000), DLOCK_OK);

		int64_t t0 = dlock_test_now_ms();
		dlock_status st = dlock_test_acquire(o, DEADLINE_MS, 0, 0, NULL, NULL);
		int64_t took = dlock_test_now_ms() - t0;
		printf("\n    an acquire of %d ms: %s after %lld ms: %s", DEADLINE_MS, dlock_status_name(st),
		       (long long)took, dlock_client_errmsg(other));
		CU_ASSERT_EQUAL(st, DLOCK_ECONNECT); /* a transient failure keeps its status at the deadline */
		CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(other), "TRYAGAIN"));
		CU_ASSERT(took >= DEADLINE_MS - 1 && took < DEADLINE_MS + PROMPT_MS);

		struct refusals f = { .port = src, .before = error_replies(src, "TRYAGAIN") };
		dlock_test_waiter wt;
		dlock_test_waiter_start(&wt, o, 30000, 0);
		CU_ASSERT(dlock_test_await(refused_again, &f, AWAIT_MS));
		int64_t cancelled = dlock_test_now_ms();
		CU_ASSERT_EQUAL(dlock_cancel(o), DLOCK_OK);
		st = dlock_test_waiter_join(&wt, AWAIT_MS);
		printf("\n    a waiting acquire, cancelled: %s %lld ms after the cancel", dlock_status_name(st),
		       (long long)(wt.at_ms - cancelled));
		CU_ASSERT_EQUAL(st, DLOCK_ECANCELED);
		CU_ASSERT(wt.at_ms - cancelled < PROMPT_MS);
	}

	snprintf(what, sizeof what, "cluster-slot-keys %u", slot);
	CU_ASSERT(run_ctl(what));
	snprintf(what, sizeof what, "cluster-slot-end %u", slot);
	CU_ASSERT(run_ctl(what));
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(o, 0, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_token(o) > first);
	CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	dlock_lock_free(l);
	dlock_lock_free(o);
	dlock_client_close(holder);
	dlock_client_close(other);
}

static void test_tryagain_split_keys(void)
{
	tryagain_split_keys("fair=0");
}

static void test_tryagain_split_keys_fair(void)
{
	tryagain_split_keys("fair=1");
}

/*
 * Everything the master at `port` wrote so far has reached its replica: a
 * write of our own in the slot of `key`, then WAIT for it (the replication
 * stream is in order, so the writes before ours arrived too).
 */
static void replicated(int port, const char *key)
{
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "SET %s:probe 1 PX 60000", key);
	freeReplyObject(r);
	r = redisCommand(raw, "WAIT 1 10000");
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	redisFree(raw);
}

/* One of two waiters returned. */
static int either_done(void *arg)
{
	dlock_test_waiter *const *w = arg;
	return atomic_load(&w[0]->done) || atomic_load(&w[1]->done);
}

/* A name of `prefix` whose key is on the master at `port`. */
static void name_on(int port, const char *prefix, const char *stem, char *name, size_t len)
{
	char key[512];
	for (int i = 0; i < 1000; i++) {
		snprintf(name, len, "%s-%d", stem, i);
		dlock_testredis_key(key, sizeof key, prefix, name, "lock");
		if (master_of(key_slot(key)) == port)
			return;
	}
	CU_FAIL("no name found on that master");
}

/* The calls of command `cmd` ("wait") the node at `port` has served so far (INFO commandstats). */
static long long command_calls(int port, const char *cmd)
{
	char field[64];
	snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
	redisContext *raw = dlock_testredis_raw(port);
	redisReply *r = redisCommand(raw, "INFO commandstats");
	const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
	long long n = at ? atoll(at + strlen(field)) : 0;
	freeReplyObject(r);
	redisFree(raw);
	return n;
}

/*
 * replicas=N in a cluster: WAIT on the master of the lock's slot, on every
 * master.  With one replica each, replicas=1 is confirmed (acquire and
 * renewal each WAIT there); replicas=2 never is: the acquisition fails in
 * time with the count in its message and is undone on that master.
 */
static void test_replicas(void)
{
	char prefix[64], uri[1024], name[64], key[512], value[128], stem[16];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, cluster_uri, prefix, "replicas=1&replicas_timeout=5s");
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int masters[3] = { master_of(0), master_of(8192), master_of(16383) };
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_FATAL(masters[i] > 0);
		snprintf(stem, sizeof stem, "r%d", i);
		name_on(masters[i], prefix, stem, name, sizeof name);
		dlock_lock *l = dlock_test_new_lock(c, name);
		long long before = command_calls(masters[i], "wait");
		CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_extend(l, 0), DLOCK_OK);
		CU_ASSERT(command_calls(masters[i], "wait") >= before + 2);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		dlock_lock_free(l);
	}
	dlock_client_close(c);

	uri_with(uri, sizeof uri, cluster_uri, prefix, "replicas=2&replicas_timeout=200ms");
	c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	name_on(masters[1], prefix, "unconfirmed", name, sizeof name);
	dlock_lock *l = dlock_test_new_lock(c, name);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_ECONNECT);
	CU_ASSERT(dlock_test_now_ms() - t0 < 5000);
	printf("\n    %s", dlock_client_errmsg(c));
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "1 of 2 replicas confirmed the lock within 200 ms"));
	dlock_testredis_key(key, sizeof key, prefix, name, "lock");
	value_at(masters[1], key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, ""); /* undone, not left for its lease */
	dlock_lock_free(l);
	dlock_client_close(c);
}

/*
 * A master killed (SIGKILL) under held locks and waiters.  Its replica is
 * promoted after cluster-node-timeout; meanwhile commands for its slots
 * fail, and every other slot answers CLUSTERDOWN once the failure is
 * agreed.  The holder of a lock whose key reached the replica keeps it on
 * the promoted replica, nobody else gets it, and the two waiters (default
 * and fair=1) wait through the failover and get it in turn, with growing
 * tokens.  (Not with replicas=1: the promoted replica has no replica of its
 * own until the killed node rejoins, so no renewal could be confirmed and
 * the lock would be given up, as replicas=N promises.)  A lock whose key is missing on the promoted replica (deleted
 * there: what a replica that missed the write would show) is reported
 * lost within a renewal period.  The killed node then rejoins as a replica.
 */
static void test_master_failover(void)
{
	char prefix[64], uri[1024], fair_uri[1024], what[128], held[64], gone[64], key[512], owner[128], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	uri_with(uri, sizeof uri, cluster_uri, prefix, "fair=0");
	uri_with(fair_uri, sizeof fair_uri, cluster_uri, prefix, "fair=1");
	int victim = master_of(0);
	CU_ASSERT_FATAL(victim > 0);
	name_on(victim, prefix, "held", held, sizeof held);
	name_on(victim, prefix, "gone", gone, sizeof gone);

	dlock_client *holder = dlock_test_open(uri, NULL, NULL), *waiter = dlock_test_open(uri, NULL, NULL),
	             *fair = dlock_test_open(fair_uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(holder);
	CU_ASSERT_PTR_NOT_NULL_FATAL(waiter);
	CU_ASSERT_PTR_NOT_NULL_FATAL(fair);
	dlock_lock *l = dlock_test_new_lock(holder, held), *g = dlock_test_new_lock(holder, gone);
	dlock_lock *w = dlock_test_new_lock(waiter, held), *f = dlock_test_new_lock(fair, held);
	dlock_test_lost lost_held = { 0 }, lost_gone = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 12000, 1, dlock_test_on_lost, &lost_held), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(g, 0, 12000, 1, dlock_test_on_lost, &lost_gone), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	dlock_testredis_key(key, sizeof key, prefix, held, "lock");
	value_at(victim, key, owner, sizeof owner);
	CU_ASSERT_FATAL(owner[0] != '\0');
	replicated(victim, key);
	dlock_test_waiter ww, fw;
	dlock_test_waiter_start(&ww, w, 60000, 0);
	dlock_test_waiter_start(&fw, f, 60000, 0);
	struct subscribed s = { .port = victim, .want = 1 };
	dlock_testredis_key(s.chan, sizeof s.chan, prefix, held, "released");
	CU_ASSERT(dlock_test_await(has_subscribers, &s, AWAIT_MS));

	snprintf(what, sizeof what, "cluster-kill %d", victim);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_FATAL(run_ctl(what));
	snprintf(what, sizeof what, "cluster-wait-failover %d", victim);
	int promoted = ctl_port(what);
	int64_t t1 = dlock_test_now_ms();
	printf("\n    master %d killed; %d promoted after %lld ms", victim, promoted, (long long)(t1 - t0));
	CU_ASSERT_FATAL(promoted > 0 && promoted != victim);

	/* The key missing on the new master: the holder is told within a renewal period (12 s / 3). */
	dlock_testredis_key(key, sizeof key, prefix, gone, "lock");
	delete_at(promoted, key);
	int64_t deleted = dlock_test_now_ms();
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost_gone, AWAIT_MS));
	printf("\n    the missing key was reported %lld ms after it went", (long long)(dlock_test_now_ms() - deleted));
	CU_ASSERT(dlock_test_now_ms() - deleted < 12000 / 3 + 3000);

	/* The replicated lock stayed with its holder; the waiters still wait. */
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	dlock_testredis_key(key, sizeof key, prefix, held, "lock");
	value_at(promoted, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, owner);
	CU_ASSERT_EQUAL(atomic_load(&ww.done), 0);
	CU_ASSERT_EQUAL(atomic_load(&fw.done), 0);
	CU_ASSERT_EQUAL(atomic_load(&lost_held.count), 0);

	/* Released on the new master: the waiters get it in turn. */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_test_waiter *both[2] = { &ww, &fw };
	CU_ASSERT_FATAL(dlock_test_await(either_done, both, AWAIT_MS));
	dlock_test_waiter *firstw = atomic_load(&ww.done) ? &ww : &fw, *second = firstw == &ww ? &fw : &ww;
	CU_ASSERT_EQUAL(dlock_test_waiter_join(firstw, AWAIT_MS), DLOCK_OK);
	CU_ASSERT(firstw->token > first);
	CU_ASSERT_EQUAL(atomic_load(&second->done), 0); /* one at a time */
	CU_ASSERT_EQUAL(dlock_release(firstw->lock), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(second, AWAIT_MS), DLOCK_OK);
	CU_ASSERT(second->token > firstw->token);
	CU_ASSERT_EQUAL(dlock_release(second->lock), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost_gone.count), 1);
	CU_ASSERT_EQUAL(dlock_release(g), DLOCK_ENOTHELD);

	/* The killed node comes back as a replica: the cluster is whole for the next tests and runs. */
	snprintf(what, sizeof what, "cluster-rejoin %d", victim);
	CU_ASSERT(run_ctl(what));
	dlock_lock_free(l);
	dlock_lock_free(g);
	dlock_lock_free(w);
	dlock_lock_free(f);
	dlock_client_close(holder);
	dlock_client_close(waiter);
	dlock_client_close(fair);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis+cluster://", NULL, NULL);
	CU_add_test(s, "locks land on every master, each on its slot's", test_every_master);
	CU_add_test(s, "read-write locks: their keys on their slot's master", test_rwlock_on_slot_master);
	CU_add_test(s, "bad URIs, dead seeds, not a cluster, redis:// on a cluster node, wrong CA", test_bad_input);
	CU_add_test(s, "rediss+cluster://: through the TLS ports", test_tls);
	CU_add_test(s, "a slot migrated under a held lock: begun, keys moved, ended", test_migration_under_holder);
	CU_add_test(s, "a slot migrated under a subscribed waiter", test_migration_under_waiter);
	CU_add_test(s, "a slot migrated under a queued waiter (fair=1)", test_migration_under_fair_waiter);
	CU_add_test(s, "TRYAGAIN: a lock's keys split by a migration; deadline, cancel", test_tryagain_split_keys);
	CU_add_test(s, "TRYAGAIN: the same with fair=1", test_tryagain_split_keys_fair);
	CU_add_test(s, "replicas=N: WAIT on the slot's master", test_replicas);
	CU_add_test(s, "a master killed under held locks and waiters", test_master_failover);
}

int main(void)
{
	ctl = dlock_test_env("DLOCK_TEST_REDIS_CTL");
	cluster_uri = dlock_test_env("DLOCK_TEST_CLUSTER_URI");
	plain_uri = dlock_test_env("DLOCK_TEST_REDIS_URI");
	const char *list = dlock_test_env("DLOCK_TEST_CLUSTER_PORTS");
	if (!ctl || !cluster_uri || !list || !plain_uri)
		return dlock_test_skip("no Redis Cluster (DLOCK_TEST_CLUSTER_URI unset)");
	for (const char *p = list; *p && nports < 6; p += strspn(p, "0123456789"), p += strspn(p, " "))
		ports[nports++] = atoi(p);
	seed_port = ports[0];
	tls_uri = dlock_test_env("DLOCK_TEST_CLUSTER_TLS_URI");
	tls_dir = dlock_test_env("DLOCK_TEST_TLS_DIR");
	return dlock_test_main(add_suites);
}
