/*
 * Redis: who holds a lock (dlock_inspect), the held names of a prefix
 * (dlock_list) and taking a lock from its holder (dlock_break), on every
 * Redis URI of $DLOCK_TEST_URIS (one server and fair=0, RedLock, TLS,
 * Sentinel, Cluster; redis+unix from $DLOCK_TEST_REDIS_UNIX_URI), each with
 * a prefix of its own.  What the server keeps is looked at with a raw
 * connection on $DLOCK_TEST_REDIS_PORT: a value as the previous release
 * wrote it (the owner value alone) inspects as held by an unknown owner,
 * excludes the new clients, and a holder whose value is in that form still
 * renews and releases.
 */
#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testredis.h"
#include "testsupport.h"

#define LEASE_MS 10000


/* ------------------------------------------------------------ helpers */

/* A client on `base` with `prefix` and the URI parameters `extra`. */
static dlock_client *open_with(const char *base, const char *prefix, const char *extra)
{
	char uri[1400];
	dlock_testredis_uri(uri, sizeof uri, base, prefix, extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_client *open_as(const char *base, const char *prefix, const char *identity)
{
	char extra[300];
	snprintf(extra, sizeof extra, "identity=%s", identity);
	return open_with(base, prefix, extra);
}

static int64_t flags_of(dlock_client *c)
{
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_INSPECT, &v), DLOCK_OK);
	return v;
}

static int is_redlock(const char *uri)
{
	return strncmp(uri, "redis://", 8) == 0 && strchr(uri, ',') != NULL;
}

static int wall_ms_near(int64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	return ms > now - 30000 && ms <= now + 5000; /* the servers run on this host */
}

/* Inspect `name` on c, expecting `n` holders; the info (to free) or NULL. */
static dlock_lock_info *inspect_n(dlock_client *c, const char *name, size_t n)
{
	dlock_lock_info *info = NULL;
	dlock_status st = dlock_inspect(c, name, &info);
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	if (st != DLOCK_OK) {
		printf("\n    inspect: %s", dlock_client_errmsg(c));
		return NULL;
	}
	CU_ASSERT_EQUAL(info->nholders, n);
	if (info->nholders != n) {
		dlock_lock_info_free(info);
		return NULL;
	}
	return info;
}

/* ------------------------------------------------------------ tests */

/* One mutex holder: its identity, pid, host, acquisition time, lease and token, seen from another client. */
static void mutex_on(const char *base)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_as(base, prefix, "alice"), *b = open_as(base, prefix, "bob");
	int64_t flags = flags_of(b);
	CU_ASSERT(flags & DLOCK_INSPECT_HELD);
	CU_ASSERT(flags & DLOCK_INSPECT_OWNER);
	CU_ASSERT(flags & DLOCK_INSPECT_LEASE);
	CU_ASSERT_EQUAL(!!(flags & DLOCK_INSPECT_LIST), !is_redlock(base));
	CU_ASSERT_EQUAL(!!(flags & DLOCK_INSPECT_TOKEN), !is_redlock(base));
	CU_ASSERT_FALSE(flags & DLOCK_INSPECT_NAMES);
	int64_t effect = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(b, DLOCK_FEATURE_BREAK, &effect), DLOCK_OK);
	CU_ASSERT_EQUAL(effect, DLOCK_BREAK_DELETE);

	dlock_lock_info *info = inspect_n(b, "job", 0);
	if (info) {
		CU_ASSERT_STRING_EQUAL(info->name, "job");
		CU_ASSERT_PTR_NOT_NULL(strstr(info->resource, "}:lock"));
		dlock_lock_info_free(info);
	}
	dlock_lock *l = dlock_test_new_lock(a, "job");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, LEASE_MS, 1, NULL, NULL), DLOCK_OK);
	uint64_t token = 0;
	dlock_status tst = dlock_lock_fencing_token(l, &token);
	info = inspect_n(b, "job", 1);
	if (info) {
		const dlock_holder *h = info->holders[0];
		CU_ASSERT_STRING_EQUAL(h->identity, "alice");
		CU_ASSERT_EQUAL(h->pid, (int64_t)getpid());
		CU_ASSERT(h->host[0] != '\0');
		CU_ASSERT(h->lease_left_ms > 0 && h->lease_left_ms <= LEASE_MS);
		CU_ASSERT_EQUAL(h->mode, DLOCK_MODE_EXCLUSIVE);
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_MUTEX);
		CU_ASSERT_PTR_NOT_NULL(strstr(info->resource, prefix));
		if (tst == DLOCK_OK) {
			CU_ASSERT_EQUAL(h->token, token);
			CU_ASSERT(wall_ms_near(h->acquired_ms));
		} else {
			CU_ASSERT_EQUAL(h->token, 0);
		}
		if (flags & DLOCK_INSPECT_WAITERS)
			CU_ASSERT_EQUAL(info->waiters, 0);
		dlock_lock_info_free(info);
	}
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	info = inspect_n(b, "job", 0);
	dlock_lock_info_free(info);

	/* Without a token: a plain SET NX PX, which still carries the owner. */
	if (!is_redlock(base)) {
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = 0;
		o.fence = DLOCK_OFF;
		CU_ASSERT_EQUAL_FATAL(dlock_acquire(l, &o), DLOCK_OK);
		info = inspect_n(b, "job", 1);
		if (info) {
			CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "alice");
			CU_ASSERT_EQUAL(info->holders[0]->token, 0);
			dlock_lock_info_free(info);
		}
		CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_extend(l, LEASE_MS), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	dlock_lock_free(l);
	dlock_client_close(a);
	dlock_client_close(b);
}

/*
 * A writer is a read-write lock's holder, whichever way its key was
 * written: the script with a token, or a plain SET NX without one
 * (fencing=0), alone and with the read level taken on its handle.
 */
static void writer_on(const char *base)
{
	if (is_redlock(base))
		return; /* no read-write locks there */
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_with(base, prefix, "identity=writer&fencing=0"), *b = open_as(base, prefix, "writer");
	dlock_client *clients[2] = { a, b };
	for (int i = 0; i < 2; i++) {
		dlock_lock *w = NULL;
		CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(clients[i], "doc", &w), DLOCK_OK);
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = 0;
		o.lease_ms = LEASE_MS;
		CU_ASSERT_EQUAL_FATAL(dlock_acquire(w, &o), DLOCK_OK);
		o.mode = DLOCK_MODE_SHARED;
		for (int level = 0; level < 2; level++) {
			dlock_lock_info *info = inspect_n(clients[1 - i], "doc", 1);
			if (info) {
				CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
				CU_ASSERT_EQUAL(info->holders[0]->mode, DLOCK_MODE_EXCLUSIVE);
				CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "writer");
				CU_ASSERT_EQUAL(info->waiters, -1); /* a read-write lock's wait in their clients */
				dlock_lock_info_free(info);
			}
			if (level == 0)
				CU_ASSERT_EQUAL(dlock_acquire(w, &o), DLOCK_OK); /* the read level on the writer's handle */
		}
		CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
		dlock_lock_free(w);
	}
	dlock_client_close(a);
	dlock_client_close(b);
}

/* Every reader and every permit listed, with its owner, mode, slot and lease. */
static void shared_on(const char *base)
{
	if (is_redlock(base))
		return; /* no read-write locks nor semaphores there */
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_as(base, prefix, "reader-a"), *b = open_as(base, prefix, "reader-b");
	dlock_lock *r1 = NULL, *r2 = NULL, *s1 = NULL, *s2 = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(a, "table", &r1), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(b, "table", &r2), DLOCK_OK);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.lease_ms = LEASE_MS;
	o.mode = DLOCK_MODE_SHARED;
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(r1, &o), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(r2, &o), DLOCK_OK);
	dlock_lock_info *info = inspect_n(a, "table", 2);
	if (info) {
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
		int seen_a = 0, seen_b = 0;
		for (size_t i = 0; i < info->nholders; i++) {
			const dlock_holder *h = info->holders[i];
			CU_ASSERT_EQUAL(h->mode, DLOCK_MODE_SHARED);
			CU_ASSERT(h->lease_left_ms > 0 && h->lease_left_ms <= LEASE_MS);
			CU_ASSERT(wall_ms_near(h->acquired_ms));
			seen_a += strcmp(h->identity, "reader-a") == 0;
			seen_b += strcmp(h->identity, "reader-b") == 0;
		}
		CU_ASSERT(seen_a == 1 && seen_b == 1);
		dlock_lock_info_free(info);
	}
	CU_ASSERT_EQUAL(dlock_release(r1), DLOCK_OK);
	info = inspect_n(b, "table", 1);
	if (info) {
		CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "reader-b");
		dlock_lock_info_free(info);
	}
	CU_ASSERT_EQUAL(dlock_release(r2), DLOCK_OK);
	dlock_lock_info_free(inspect_n(b, "table", 0));

	CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(a, "pool", 3, &s1), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(b, "pool", 3, &s2), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(s1, 0, LEASE_MS, 1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(s2, 0, LEASE_MS, 1, NULL, NULL), DLOCK_OK);
	uint64_t t1 = 0, t2 = 0;
	uint32_t slot1 = 99, slot2 = 99;
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(s1, &t1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(s2, &t2), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_permit_slot(s1, &slot1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_permit_slot(s2, &slot2), DLOCK_OK);
	info = inspect_n(a, "pool", 2);
	if (info) {
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_SEMAPHORE);
		CU_ASSERT_EQUAL(info->permits, 3);
		CU_ASSERT_EQUAL(info->waiters, 0);
		for (size_t i = 0; i < info->nholders; i++) {
			const dlock_holder *h = info->holders[i];
			int is_a = strcmp(h->identity, "reader-a") == 0;
			CU_ASSERT(is_a || strcmp(h->identity, "reader-b") == 0);
			CU_ASSERT_EQUAL(h->slot, (int64_t)(is_a ? slot1 : slot2));
			CU_ASSERT_EQUAL(h->token, is_a ? t1 : t2);
			CU_ASSERT(h->lease_left_ms > 0 && h->lease_left_ms <= LEASE_MS);
		}
		dlock_lock_info_free(info);
	}
	size_t broken = 0;
	CU_ASSERT_EQUAL(dlock_break(b, "pool", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 2);
	CU_ASSERT_EQUAL(dlock_check(s1), DLOCK_ENOTHELD);
	dlock_lock_info_free(inspect_n(b, "pool", 0));
	dlock_release(s1);
	dlock_release(s2);
	dlock_lock_free(r1);
	dlock_lock_free(r2);
	dlock_lock_free(s1);
	dlock_lock_free(s2);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* A queued waiter is counted where the server queues them (fair=1). */
static void waiters_on(const char *base)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_as(base, prefix, "holder"), *b = open_as(base, prefix, "waiter");
	if (!(flags_of(a) & DLOCK_INSPECT_WAITERS)) {
		dlock_client_close(a);
		dlock_client_close(b);
		return;
	}
	dlock_lock *la = dlock_test_new_lock(a, "q"), *lb = dlock_test_new_lock(b, "q");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, LEASE_MS, 1, NULL, NULL), DLOCK_OK);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, 20000, LEASE_MS);
	int64_t until = dlock_test_now_ms() + 5000;
	int64_t waiters = -1;
	while (waiters != 1 && dlock_test_now_ms() < until) {
		dlock_lock_info *info = inspect_n(a, "q", 1);
		waiters = info ? info->waiters : -1;
		dlock_lock_info_free(info);
		if (waiters != 1)
			dlock_test_sleep_ms(20);
	}
	CU_ASSERT_EQUAL(waiters, 1);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* The held locks of the prefix, with their keys and holders; names are not kept (hashed). */
static void list_on(const char *base)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_as(base, prefix, "lister");
	dlock_lock_list *list = NULL;
	if (is_redlock(base)) {
		CU_ASSERT_EQUAL(dlock_list(a, NULL, &list), DLOCK_ENOTSUP);
		CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "RedLock"));
		dlock_client_close(a);
		return;
	}
	enum { N = 5 };
	dlock_lock *l[N];
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof name, "batch/%d", i);
		l[i] = dlock_test_new_lock(a, name);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l[i], 0, LEASE_MS, 1, NULL, NULL), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(dlock_release(l[N - 1]), DLOCK_OK); /* not listed */
	CU_ASSERT_EQUAL_FATAL(dlock_list(a, NULL, &list), DLOCK_OK);
	CU_ASSERT_EQUAL(list->count, N - 1);
	for (size_t i = 0; i < list->count; i++) {
		const dlock_lock_info *it = list->items[i];
		CU_ASSERT_PTR_NULL(it->name);
		CU_ASSERT_PTR_NOT_NULL(strstr(it->resource, prefix));
		CU_ASSERT_EQUAL(it->nholders, 1);
		if (it->nholders == 1)
			CU_ASSERT_STRING_EQUAL(it->holders[0]->identity, "lister");
	}
	dlock_lock_list_free(list);
	list = NULL;
	CU_ASSERT_EQUAL(dlock_list(a, "batch/", &list), DLOCK_OK); /* names unknown: none kept */
	if (list)
		CU_ASSERT_EQUAL(list->count, 0);
	dlock_lock_list_free(list);
	for (int i = 0; i < N; i++) {
		dlock_release(l[i]);
		dlock_lock_free(l[i]);
	}
	dlock_client_close(a);
}

/* Break: the holder learns of it at its next renewal (DLOCK_LOST_TAKEN), the next token is larger. */
static void break_on(const char *base)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_as(base, prefix, "stuck"), *b = open_as(base, prefix, "admin");
	dlock_lock *la = dlock_test_new_lock(a, "stuck-job"), *lb = dlock_test_new_lock(b, "stuck-job");
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, 1500, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	uint64_t before = 0, after = 0;
	int tokens = dlock_lock_fencing_token(la, &before) == DLOCK_OK;
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, 20000, LEASE_MS); /* waits for the stuck holder */
	dlock_test_sleep_ms(100);
	size_t broken = 9;
	int64_t at = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_break(b, "stuck-job", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, 10000), DLOCK_OK);
	CU_ASSERT(w.at_ms - at < 1500); /* woken, not left to a lease */
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, 3000));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	if (tokens) {
		CU_ASSERT_EQUAL(dlock_lock_fencing_token(lb, &after), DLOCK_OK);
		CU_ASSERT(after > before);
	}
	dlock_lock_info *info = inspect_n(a, "stuck-job", 1);
	if (info) {
		CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "admin");
		dlock_lock_info_free(info);
	}
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	broken = 9;
	CU_ASSERT_EQUAL(dlock_break(b, "stuck-job", &broken), DLOCK_OK); /* free: not an error */
	CU_ASSERT_EQUAL(broken, 0);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* Hostile bytes in a name and an identity, and a name of 1,024 bytes. */
static void hostile_on(const char *base)
{
	char prefix[64], name[DLOCK_NAME_MAX + 1];
	dlock_testredis_prefix(prefix, sizeof prefix);
	const char *identity = "eve%20&id=x&host=y {*}"; /* percent-encoded in the record */
	dlock_client *a = open_as(base, prefix, "eve%2520%26id%3Dx%26host%3Dy%20%7B*%7D");
	for (size_t i = 0; i < DLOCK_NAME_MAX; i++)
		name[i] = (char)(1 + (i * 37) % 255);
	name[DLOCK_NAME_MAX] = '\0';
	const char *names[] = { "a{b}c*?[x]\\ 'x\" ; DEL * %00", name };
	for (size_t k = 0; k < 2; k++) {
		dlock_lock *l = dlock_test_new_lock(a, names[k]);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, LEASE_MS, 1, NULL, NULL), DLOCK_OK);
		dlock_lock_info *info = inspect_n(a, names[k], 1);
		if (info) {
			CU_ASSERT_STRING_EQUAL(info->name, names[k]);
			CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, identity);
			dlock_lock_info_free(info);
		}
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		size_t broken = 9;
		CU_ASSERT_EQUAL(dlock_break(a, names[k], &broken), DLOCK_OK);
		CU_ASSERT_EQUAL(broken, 0);
		dlock_lock_free(l);
	}
	dlock_lock_info *info = NULL;
	CU_ASSERT_EQUAL(dlock_inspect(a, "", &info), DLOCK_EINVAL);
	dlock_client_close(a);
}

/*
 * The previous release's values: the owner value alone.  A holder of that
 * form inspects as held by an unknown owner and keeps new clients out; the
 * previous release's owner-only scripts (exact comparison) still release
 * it, and do not touch a new client's value.  A new holder whose value
 * has that form (granted by an older release's queue) renews, checks and
 * releases it.
 */
static void test_old_format(void)
{
	int redis_port = 0;
	const char *base = dlock_testredis_single(&redis_port);
	if (!base)
		return;
	static const char old_release[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	                                  "  redis.call('DEL', KEYS[1])\n"
	                                  "  return 1\n"
	                                  "end\n"
	                                  "return 0\n";
	static const char *const old_owner = "0123456789abcdef0123456789abcdef";
	for (int fair = 0; fair < 2; fair++) {
		char prefix[64], key[256];
		dlock_testredis_prefix(prefix, sizeof prefix);
		dlock_testredis_key(key, sizeof key, prefix, "legacy", "lock");
		dlock_client *a = open_as(base, prefix, fair ? "new-fair" : "new");
		char uri[1400];
		dlock_testredis_uri(uri, sizeof uri, base, prefix, fair ? "fair=1" : "fair=0");
		redisContext *ctx = dlock_testredis_raw(redis_port);
		redisReply *r = redisCommand(ctx, "SET %s %s PX %d", key, old_owner, LEASE_MS);
		freeReplyObject(r);

		dlock_lock_info *info = inspect_n(a, "legacy", 1);
		if (info) {
			CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "");
			CU_ASSERT_EQUAL(info->holders[0]->pid, 0);
			CU_ASSERT_EQUAL(info->holders[0]->token, 0);
			CU_ASSERT(info->holders[0]->lease_left_ms > 0);
			dlock_lock_info_free(info);
		}
		dlock_lock *l = dlock_test_new_lock(a, "legacy");
		CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, LEASE_MS, 0, NULL, NULL), DLOCK_EBUSY);
		r = redisCommand(ctx, "EVAL %s 1 %s %s", old_release, key, old_owner);
		CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
		freeReplyObject(r);

		/* A new holder: the old script, with another owner, leaves it alone. */
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, LEASE_MS, 0, NULL, NULL), DLOCK_OK);
		r = redisCommand(ctx, "EVAL %s 1 %s %s", old_release, key, old_owner);
		CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0);
		freeReplyObject(r);
		/* Its value cut back to the owner value alone, as an older release's grant writes it. */
		r = redisCommand(ctx, "GET %s", key);
		CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_STRING && strchr(r->str, ' '));
		char owner[64];
		snprintf(owner, sizeof owner, "%.*s", (int)strcspn(r->str, " "), r->str);
		freeReplyObject(r);
		r = redisCommand(ctx, "SET %s %s PX %d", key, owner, LEASE_MS);
		freeReplyObject(r);
		CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_extend(l, 2 * LEASE_MS), DLOCK_OK);
		r = redisCommand(ctx, "PTTL %s", key);
		CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer > LEASE_MS);
		freeReplyObject(r);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		r = redisCommand(ctx, "EXISTS %s", key);
		CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0);
		freeReplyObject(r);
		redisFree(ctx);
		dlock_lock_free(l);
		dlock_client_close(a);
	}
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis inspection", NULL, NULL);
	dlock_testredis_add_each(s, "a mutex's holder: identity, pid, host, time, lease, token", mutex_on);
	dlock_testredis_add_each(s, "a writer, with a token or without: a read-write lock", writer_on);
	dlock_testredis_add_each(s, "every reader and every permit", shared_on);
	dlock_testredis_add_each(s, "queued waiters counted", waiters_on);
	dlock_testredis_add_each(s, "list under the prefix", list_on);
	dlock_testredis_add_each(s, "break: lost at the next renewal, waiter woken, larger token", break_on);
	dlock_testredis_add_each(s, "hostile names and identity, a 1,024-byte name", hostile_on);
	CU_add_test(s, "the previous release's values", test_old_format);
}

int main(void)
{
	if (dlock_testredis_every_uri() == 0)
		return dlock_test_skip("no redis URI in DLOCK_TEST_URIS");
	return dlock_test_main(add_suites);
}
