/*
 * redis:// semaphores: the keys a semaphore leaves (which, their values and
 * TTLs), slots and tokens, the server's clock deciding when a permit's
 * lease ends, a holder whose lease runs out (reported lost, its permit
 * taken by a waiter, never silently renewed), a waiter woken by a release's
 * message, the N of a name agreed across clients (holders and waiters),
 * mutexes, read-write locks and semaphores of one name across clients (the
 * kinds exclude each other: DLOCK_FEATURE_KIND_CHECK is 0), permits renewed
 * in batches; then the same acquire, wait and release on every topology
 * that has them (TLS, Unix socket, Sentinel, Cluster), and RedLock, which
 * has none.
 */
#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testredis.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000 /* an acquire that must succeed: a hang becomes a failure */
#define AWAIT_MS 10000
#define PROMPT_MS 2000     /* "promptly": far below the 30 s lease a missed wake-up would cost */
#define SLACK_MS 1000      /* scheduling and renewal slack around a lease */

static const char *redis_uri;
static int redis_port;

/* ------------------------------------------------------------ helpers */

/* A client of its own prefix on `base` (`extra`: more of the query, "" for none). */
static dlock_client *open_on(const char *base, const char *prefix, const char *extra)
{
	char uri[1024];
	dlock_testredis_uri(uri, sizeof uri, base, prefix, extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_client *open_prefixed(const char *prefix, const char *extra)
{
	return open_on(redis_uri, prefix, extra);
}

static dlock_lock *sem(dlock_client *c, const char *name, uint32_t n)
{
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(c, name, n, &l), DLOCK_OK);
	return l;
}

/* One acquisition: a wait bound (0: try once), a lease (0: the URI's), renewal (-1: the URI's). */
static dlock_status sem_acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms, int renew)
{
	return dlock_test_acquire(l, wait_ms, lease_ms, renew, NULL, NULL);
}

static uint32_t slot_of(dlock_lock *l)
{
	uint32_t slot = 9999;
	CU_ASSERT_EQUAL(dlock_lock_permit_slot(l, &slot), DLOCK_OK);
	return slot;
}

/* Members of the sorted set `key`, lowest score first: owners into owners[0..max), scores into scores. */
static size_t zset_entries(redisContext *ctx, const char *key, char owners[][64], int64_t *scores, size_t max)
{
	redisReply *r = redisCommand(ctx, "ZRANGE %s 0 -1 WITHSCORES", key);
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_ARRAY);
	size_t n = 0;
	for (size_t i = 0; i + 1 < r->elements && n < max; i += 2, n++) {
		if (owners)
			snprintf(owners[n], 64, "%s", r->element[i]->str);
		if (scores)
			scores[n] = strtoll(r->element[i + 1]->str, NULL, 10);
	}
	n = r->elements / 2;
	freeReplyObject(r);
	return n;
}

/* ------------------------------------------------------------ keys, slots, tokens */

#define KEYS_N 3

/*
 * Three clients hold the three permits of a name: :lock says "semaphore"
 * with the last permit's TTL, :permits has one entry per holder scored by
 * the server's clock plus its lease, :npermits keeps N, slots are 0, 1, 2
 * and tokens increase; a fourth is refused (try once) and counts among no
 * waiters.  A release frees its slot, which the next permit takes (the
 * lowest free one) with a greater token; the last release leaves only the
 * fence counter.
 */
static void test_keys_slots_tokens(void)
{
	char prefix[64], key[256], permits[256], npermits[256], pwaiters[256], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(key, sizeof key, prefix, "pool", "lock");
	dlock_testredis_key(permits, sizeof permits, prefix, "pool", "permits");
	dlock_testredis_key(npermits, sizeof npermits, prefix, "pool", "npermits");
	dlock_testredis_key(pwaiters, sizeof pwaiters, prefix, "pool", "pwaiters");
	redisContext *ctx = dlock_testredis_raw(redis_port);
	dlock_client *c[KEYS_N + 1];
	dlock_lock *l[KEYS_N + 1];
	for (int i = 0; i <= KEYS_N; i++) {
		c[i] = open_prefixed(prefix, i % 2 ? "fair=0" : "");
		l[i] = sem(c[i], "pool", KEYS_N);
	}
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c[0], DLOCK_FEATURE_SEMAPHORE, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_SEMAPHORE_UNORDERED);
	CU_ASSERT_EQUAL(dlock_client_feature(c[0], DLOCK_FEATURE_PERMIT_FENCING, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_FENCING_CONDITIONAL);

	int seen[KEYS_N] = { 0 };
	uint64_t last = 0;
	int64_t before = dlock_testredis_server_ms(ctx);
	for (int i = 0; i < KEYS_N; i++) {
		CU_ASSERT_EQUAL_FATAL(sem_acquire(l[i], 0, 10000 + 1000 * i, 0), DLOCK_OK);
		uint32_t s = slot_of(l[i]);
		CU_ASSERT_FATAL(s < KEYS_N);
		CU_ASSERT_EQUAL(seen[s]++, 0);
		uint64_t t = dlock_test_token(l[i]);
		CU_ASSERT(t > last);
		last = t;
	}
	dlock_testredis_get(ctx, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, "semaphore");
	long long pttl = dlock_testredis_integer(ctx, "PTTL %s", key);
	CU_ASSERT(pttl > 10000 && pttl <= 12000); /* the last permit's */
	dlock_testredis_get(ctx, npermits, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, "3");
	int64_t scores[KEYS_N + 1];
	CU_ASSERT_EQUAL_FATAL(zset_entries(ctx, permits, NULL, scores, KEYS_N + 1), KEYS_N);
	CU_ASSERT(scores[0] >= before + 10000 && scores[0] <= dlock_testredis_server_ms(ctx) + 10000); /* the server's clock + lease */

	CU_ASSERT_EQUAL(sem_acquire(l[KEYS_N], 0, 0, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_testredis_integer(ctx, "EXISTS %s", pwaiters), 0); /* trying once is not waiting */

	int freed = -1;
	for (int i = 0; i < KEYS_N; i++)
		if (slot_of(l[i]) == 1)
			freed = i;
	CU_ASSERT_FATAL(freed >= 0);
	CU_ASSERT_EQUAL(dlock_release(l[freed]), DLOCK_OK);
	CU_ASSERT_EQUAL(zset_entries(ctx, permits, NULL, NULL, 0), KEYS_N - 1);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(l[KEYS_N], 0, 0, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(l[KEYS_N]), 1); /* the lowest free slot */
	CU_ASSERT(dlock_test_token(l[KEYS_N]) > last);
	for (int i = 0; i <= KEYS_N; i++) {
		if (i != freed) {
			CU_ASSERT_EQUAL(dlock_check(l[i]), DLOCK_OK);
			CU_ASSERT_EQUAL(dlock_release(l[i]), DLOCK_OK);
		}
	}
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1); /* the fence counter only */
	redisFree(ctx);
	for (int i = 0; i <= KEYS_N; i++) {
		dlock_lock_free(l[i]);
		dlock_client_close(c[i]);
	}
}

/*
 * Two handles of one client: with N = 2 both hold, in slots 0 and 1; with
 * N = 1 the second waits for the first (in the client) and is refused when
 * it tries once.
 */
static void test_one_client_two_handles(void)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c = open_prefixed(prefix, "");
	dlock_lock *a = sem(c, "two", 2), *b = sem(c, "two", 2);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(a, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(b, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(a) + slot_of(b), 1);
	CU_ASSERT_NOT_EQUAL(slot_of(a), slot_of(b));
	CU_ASSERT_EQUAL(dlock_release(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(b), DLOCK_OK);

	dlock_lock *x = sem(c, "one", 1), *y = sem(c, "one", 1);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(x, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(x), 0);
	CU_ASSERT_EQUAL(sem_acquire(y, 0, 0, -1), DLOCK_EBUSY);
	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, y, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(100);
	CU_ASSERT_EQUAL(atomic_load(&wt.done), 0);
	CU_ASSERT_EQUAL(dlock_release(x), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(y), 0);
	CU_ASSERT_EQUAL(dlock_release(y), DLOCK_OK);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_lock_free(x);
	dlock_lock_free(y);
	dlock_client_close(c);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 2); /* the two names' fence counters */
}

/* ------------------------------------------------------------ waiting */

/*
 * The (N+1)th acquirer waits on the server and is woken by a release's
 * message: it holds promptly after the release, far before the holders'
 * 30 s leases would end; with the queue's client (whose queue serves
 * mutexes only) and with fair=0's.
 */
static void woken_waiter(const char *extra)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *h = open_prefixed(prefix, extra), *wc = open_prefixed(prefix, extra);
	dlock_lock *a = sem(h, "woken", 2), *b = sem(h, "woken", 2), *w = sem(wc, "woken", 2);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(a, 0, 30000, 0), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(b, 0, 30000, 0), DLOCK_OK);
	dlock_client_stats before;
	dlock_client_get_stats(wc, &before);
	dlock_test_count waiting = { wc, before.server_acquires + 1 }; /* waiting on the server */
	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, w, LONG_WAIT_MS, 0);
	CU_ASSERT(dlock_test_await(dlock_test_attempted, &waiting, AWAIT_MS));
	dlock_test_sleep_ms(50);
	CU_ASSERT_EQUAL(atomic_load(&wt.done), 0);
	int64_t released = dlock_test_now_ms();
	uint32_t freed = slot_of(b);
	CU_ASSERT_EQUAL(dlock_release(b), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	printf("\n    %s: handoff in %lld ms after the release", *extra ? extra : "fair=1",
	       (long long)(wt.at_ms - released));
	CU_ASSERT(wt.at_ms - released < PROMPT_MS);
	CU_ASSERT_EQUAL(slot_of(w), freed);
	CU_ASSERT_EQUAL(dlock_release(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_lock_free(w);
	dlock_client_close(h);
	dlock_client_close(wc);
}

static void test_waiter_woken(void)
{
	woken_waiter("");
	woken_waiter("fair=0");
}

/*
 * The longest prefix the driver takes (256 bytes; one more is refused):
 * every command names its keys and channels in full, the longest being a
 * semaphore's release (ten names) and a queued waiter's own channel
 * pwake:WAITER, and a fair=1 mutex's grant:OWNER.  A semaphore's waiter is
 * woken by the release and takes, renews, checks and releases the permit;
 * a mutex's waiter queues and is granted the lock.
 */
static void test_longest_prefix(void)
{
	char prefix[258], uri[1024];
	dlock_testredis_prefix(prefix, sizeof prefix);
	size_t n = strlen(prefix);
	memset(prefix + n, 'p', 257 - n);
	prefix[257] = '\0';
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *c = NULL;
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, NULL, 0), DLOCK_EURI);
	CU_ASSERT_PTR_NULL(c);
	prefix[256] = '\0';
	dlock_client *h = open_prefixed(prefix, ""), *wc = open_prefixed(prefix, "");
	dlock_lock *a = sem(h, "long", 1), *w = sem(wc, "long", 1);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(a, 0, 30000, 0), DLOCK_OK);
	/* The waiter's client counted before it starts: a queued waiter tries once, then waits to be woken. */
	dlock_test_waiter wt;
	dlock_client_stats before;
	dlock_client_get_stats(wc, &before);
	dlock_test_count waiting = { wc, before.server_acquires + 1 };
	dlock_test_waiter_start(&wt, w, LONG_WAIT_MS, 30000);
	CU_ASSERT(dlock_test_await(dlock_test_attempted, &waiting, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_release(a), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(w, 30000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(w), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	dlock_lock_free(a);
	dlock_lock_free(w);
	dlock_lock *m = NULL, *mw = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(h, "long-mutex", &m), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(wc, "long-mutex", &mw), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(m, 0, 30000, 0, NULL, NULL), DLOCK_OK);
	dlock_client_get_stats(wc, &before);
	waiting.want = before.server_acquires + 1;
	dlock_test_waiter_start(&wt, mw, LONG_WAIT_MS, 30000);
	CU_ASSERT(dlock_test_await(dlock_test_attempted, &waiting, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(mw), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(mw), DLOCK_OK);
	dlock_lock_free(m);
	dlock_lock_free(mw);
	dlock_client_close(h);
	dlock_client_close(wc);
}

#define SHORT_LEASE_MS 800

/*
 * A holder whose lease runs out (renewal off) is reported lost, and its
 * permit goes to a waiter about one lease after it was taken, never later;
 * its extend then says ENOTHELD and adds no permit back (the waiter's is
 * the only one).
 */
static void test_lease_runs_out(void)
{
	char prefix[64], permits[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(permits, sizeof permits, prefix, "short", "permits");
	dlock_client *h = open_prefixed(prefix, ""), *wc = open_prefixed(prefix, "fair=0");
	dlock_lock *old = sem(h, "short", 1), *w = sem(wc, "short", 1);
	dlock_test_lost lost = { 0, 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(old, 0, SHORT_LEASE_MS, 0, dlock_test_on_lost, &lost), DLOCK_OK);
	int64_t taken = dlock_test_now_ms();
	uint64_t t0 = dlock_test_token(old);
	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, w, LONG_WAIT_MS, 30000);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	int64_t waited = wt.at_ms - taken;
	printf("\n    the waiter held %lld ms after the old permit was taken (lease %d ms)", (long long)waited,
	       SHORT_LEASE_MS);
	CU_ASSERT(waited >= SHORT_LEASE_MS / 2);
	CU_ASSERT(waited <= SHORT_LEASE_MS + SLACK_MS);
	CU_ASSERT(wt.token > t0);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_extend(old, 30000), DLOCK_ENOTHELD);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	CU_ASSERT_EQUAL(zset_entries(ctx, permits, NULL, NULL, 0), 1); /* the waiter's only */
	redisFree(ctx);
	CU_ASSERT_EQUAL(dlock_check(w), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	dlock_release(old);
	dlock_lock_free(old);
	dlock_lock_free(w);
	dlock_client_close(h);
	dlock_client_close(wc);
}

/*
 * The server's clock decides when a permit's lease has ended, never the
 * client's: a permit whose entry says, by the server's TIME, that its
 * lease has passed is no longer held — check and extend say ENOTHELD
 * although its client still counts the lease as running (and the extend
 * does not bring it back), and the next acquire takes its place.
 */
static void test_server_clock_decides(void)
{
	char prefix[64], permits[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(permits, sizeof permits, prefix, "clock", "permits");
	dlock_client *a = open_prefixed(prefix, ""), *b = open_prefixed(prefix, "fair=0");
	dlock_lock *la = sem(a, "clock", 1), *lb = sem(b, "clock", 1);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(la, 0, 30000, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(sem_acquire(lb, 0, 30000, 0), DLOCK_EBUSY);
	char owners[2][64];
	CU_ASSERT_EQUAL_FATAL(zset_entries(ctx, permits, owners, NULL, 2), 1);
	freeReplyObject(redisCommand(ctx, "ZADD %s XX %lld %s", permits, (long long)dlock_testredis_server_ms(ctx) - 1, owners[0]));
	CU_ASSERT_EQUAL(dlock_check(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_extend(la, 30000), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(lb, 0, 30000, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(lb), 0);
	CU_ASSERT_EQUAL(zset_entries(ctx, permits, NULL, NULL, 0), 1);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	redisFree(ctx);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* ------------------------------------------------------------ N */

/* An acquisition of `l` refused with DLOCK_EKIND, its message naming `have` and `want`. */
static void refused_n(dlock_client *c, dlock_lock *l, int64_t wait_ms, const char *have, const char *want)
{
	CU_ASSERT_EQUAL(sem_acquire(l, wait_ms, 0, -1), DLOCK_EKIND);
	const char *msg = dlock_client_errmsg(c);
	char expect[128];
	snprintf(expect, sizeof expect, "semaphore of %s permits, not %s", have, want);
	printf("\n    %s", msg);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, expect));
}

/*
 * All clients of a name agree on N: while a permit of N = 3 is held, an
 * acquisition with N = 4 is refused, try-once or waiting, its message
 * naming both; so is one while only a waiter of N = 3 is live; a waiter
 * that gives up no longer counts; once nobody holds or waits, a new N
 * applies.
 */
static void test_n_agreed(void)
{
	char prefix[64], pwaiters[256], npermits[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(pwaiters, sizeof pwaiters, prefix, "agreed", "pwaiters");
	dlock_testredis_key(npermits, sizeof npermits, prefix, "agreed", "npermits");
	dlock_client *a = open_prefixed(prefix, ""), *b = open_prefixed(prefix, "fair=0"), *c = open_prefixed(prefix, "");
	dlock_lock *three = sem(a, "agreed", 3), *four = sem(b, "agreed", 4), *one = sem(c, "agreed", 1);
	redisContext *ctx = dlock_testredis_raw(redis_port);

	CU_ASSERT_EQUAL_FATAL(sem_acquire(three, 0, 0, -1), DLOCK_OK);
	refused_n(b, four, 0, "3", "4");
	refused_n(b, four, 1000, "3", "4"); /* refused at once, not after waiting */
	refused_n(c, one, 0, "3", "1");
	CU_ASSERT_EQUAL(dlock_release(three), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(four, 0, 0, -1), DLOCK_OK); /* nobody left: N = 4 applies */
	refused_n(a, three, 0, "4", "3");
	CU_ASSERT_EQUAL(dlock_release(four), DLOCK_OK);

	/* A waiter of N = 1 behind a holder of N = 1: it counts, and stops counting when it gives up. */
	dlock_lock *one_b = sem(b, "agreed-w", 1), *one_c = sem(c, "agreed-w", 1), *two = sem(a, "agreed-w", 2);
	dlock_testredis_key(pwaiters, sizeof pwaiters, prefix, "agreed-w", "pwaiters");
	CU_ASSERT_EQUAL_FATAL(sem_acquire(one_b, 0, 0, -1), DLOCK_OK);
	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, one_c, LONG_WAIT_MS, 0);
	redisContext *raw = ctx;
	int listed = 0;
	for (int i = 0; i < 100 && !listed; i++, dlock_test_sleep_ms(10))
		listed = dlock_testredis_integer(raw, "ZCARD %s", pwaiters) == 1;
	CU_ASSERT_FATAL(listed);
	/* The holder leaves without waking anyone (its entry dropped on the server): only the waiter is live. */
	char permits[256], owners[1][64];
	dlock_testredis_key(permits, sizeof permits, prefix, "agreed-w", "permits");
	CU_ASSERT_EQUAL_FATAL(zset_entries(ctx, permits, owners, NULL, 1), 1);
	freeReplyObject(redisCommand(ctx, "ZADD %s XX %lld %s", permits, (long long)dlock_testredis_server_ms(ctx) - 1, owners[0]));
	refused_n(a, two, 0, "1", "2");
	CU_ASSERT_EQUAL(dlock_release(one_b), DLOCK_ENOTHELD); /* its lease had passed; the release wakes the waiter */
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK); /* it takes the freed permit */
	CU_ASSERT_EQUAL(dlock_testredis_integer(ctx, "EXISTS %s", pwaiters), 0);
	CU_ASSERT_EQUAL(dlock_release(one_c), DLOCK_OK);

	/* A waiter that gives up is no longer counted: N = 2 applies at once after the holder leaves. */
	CU_ASSERT_EQUAL_FATAL(sem_acquire(one_b, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(sem_acquire(one_c, 200, 0, -1), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(dlock_testredis_integer(ctx, "ZCARD %s", pwaiters), 0);
	CU_ASSERT_EQUAL(dlock_release(one_b), DLOCK_OK);
	CU_ASSERT_EQUAL(sem_acquire(two, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(two), DLOCK_OK);

	redisFree(ctx);
	dlock_lock_free(three);
	dlock_lock_free(four);
	dlock_lock_free(one);
	dlock_lock_free(one_b);
	dlock_lock_free(one_c);
	dlock_lock_free(two);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ kinds */

/*
 * A mutex, a read-write lock and a semaphore of one name across clients:
 * the kinds exclude each other (DLOCK_FEATURE_KIND_CHECK 0: busy, not
 * refused), in both orders; a mutex queued (fair=1) behind the permits is
 * woken by the last one's release, and a permit waiting behind the mutex
 * by the mutex's (meanwhile it counts as a waiter: another N is refused).
 */
static void test_kinds_across_clients(void)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_prefixed(prefix, ""), *b = open_prefixed(prefix, "fair=0"), *d = open_prefixed(prefix, "");
	dlock_client *r = open_prefixed(prefix, "");
	int64_t kc = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(a, DLOCK_FEATURE_KIND_CHECK, &kc), DLOCK_OK);
	CU_ASSERT_EQUAL(kc, 0);
	dlock_lock *s1 = sem(a, "mixed", 2), *s2 = sem(b, "mixed", 2);
	dlock_lock *m = dlock_test_new_lock(d, "mixed"), *rw = NULL;
	CU_ASSERT_PTR_NOT_NULL_FATAL(m);
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(r, "mixed", &rw), DLOCK_OK);
	dlock_acquire_options shared = DLOCK_ACQUIRE_OPTIONS_INIT;
	shared.wait_ms = 0;
	shared.mode = DLOCK_MODE_SHARED;

	/* Semaphore first. */
	CU_ASSERT_EQUAL_FATAL(sem_acquire(s1, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(m, 0, 0, -1, NULL, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_acquire(rw, &shared), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_test_acquire(rw, 0, 0, -1, NULL, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(s2, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(s1), DLOCK_OK);
	dlock_test_waiter mw;
	dlock_test_waiter_start(&mw, m, LONG_WAIT_MS, 0); /* queued (fair=1) behind the permits */
	dlock_test_sleep_ms(200);
	CU_ASSERT_EQUAL(atomic_load(&mw.done), 0);
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(s2), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&mw, LONG_WAIT_MS), DLOCK_OK);
	printf("\n    a queued mutex held %lld ms after the last permit's release", (long long)(mw.at_ms - released));
	CU_ASSERT(mw.at_ms - released < PROMPT_MS);

	/* Mutex first. */
	CU_ASSERT_EQUAL(sem_acquire(s1, 0, 0, -1), DLOCK_EBUSY);
	dlock_test_waiter sw;
	dlock_test_waiter_start(&sw, s2, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(200);
	CU_ASSERT_EQUAL(atomic_load(&sw.done), 0);
	/* The permit waiting behind the mutex keeps the name's N. */
	dlock_client *e = open_prefixed(prefix, "");
	dlock_lock *s3 = sem(e, "mixed", 3);
	CU_ASSERT_EQUAL(sem_acquire(s3, 0, 0, -1), DLOCK_EKIND);
	dlock_lock_free(s3);
	dlock_client_close(e);
	released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&sw, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(sw.at_ms - released < PROMPT_MS);
	CU_ASSERT_EQUAL(dlock_release(s2), DLOCK_OK);

	/* Readers first. */
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(rw, &shared), DLOCK_OK);
	CU_ASSERT_EQUAL(sem_acquire(s1, 0, 0, -1), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(rw), DLOCK_OK);
	CU_ASSERT_EQUAL(sem_acquire(s1, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(s1), DLOCK_OK);

	dlock_lock_free(s1);
	dlock_lock_free(s2);
	dlock_lock_free(m);
	dlock_lock_free(rw);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_client_close(d);
	dlock_client_close(r);
}

/* ------------------------------------------------------------ renewals */

#define RENEW_NAMES 4
#define RENEW_PERMITS 3
#define RENEW_LEASE_MS 600

/*
 * Permits renewed by the renewal thread (in batches: one pipeline of each
 * lock's own extend script), several of each name in one client, stay held
 * past many leases beside a mutex in the same batches.
 */
static void test_permits_renewed(void)
{
	char prefix[64], name[32];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c = open_prefixed(prefix, "");
	dlock_lock *l[RENEW_NAMES][RENEW_PERMITS];
	dlock_test_lost lost = { 0, 0 };
	for (int i = 0; i < RENEW_NAMES; i++) {
		snprintf(name, sizeof name, "renew-%d", i);
		for (int k = 0; k < RENEW_PERMITS; k++) {
			l[i][k] = sem(c, name, RENEW_PERMITS);
			CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l[i][k], 0, RENEW_LEASE_MS, 1, dlock_test_on_lost, &lost),
			                      DLOCK_OK);
		}
	}
	dlock_lock *m = dlock_test_new_lock(c, "renew-m");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(m, 0, RENEW_LEASE_MS, 1, NULL, NULL), DLOCK_OK);
	dlock_test_count renewals = { c, 4 * (RENEW_NAMES * RENEW_PERMITS + 1) }; /* four of each lease */
	CU_ASSERT(dlock_test_await(dlock_test_renewed, &renewals, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	for (int i = 0; i < RENEW_NAMES; i++) {
		for (int k = 0; k < RENEW_PERMITS; k++) {
			CU_ASSERT_EQUAL(dlock_check(l[i][k]), DLOCK_OK);
			CU_ASSERT_EQUAL(dlock_release(l[i][k]), DLOCK_OK);
			dlock_lock_free(l[i][k]);
		}
	}
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	dlock_lock_free(m);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ contention */

#define BUSY_N 2
#define BUSY_CLIENTS 4
#define BUSY_THREADS 12
#define BUSY_ROUNDS 10

/* The server's count of `cmd` calls (INFO commandstats). */
static long long command_calls(const char *cmd)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "INFO commandstats");
	char field[64];
	snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
	const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
	long long calls = at ? atoll(at + strlen(field)) : 0;
	freeReplyObject(r);
	redisFree(ctx);
	return calls;
}

struct busy {
	dlock_lock *lock;
	atomic_int *holding, *most;
	pthread_t thread;
	int failures;
};

static void *busy_main(void *arg)
{
	struct busy *b = arg;
	for (int i = 0; i < BUSY_ROUNDS; i++) {
		if (sem_acquire(b->lock, LONG_WAIT_MS, 0, -1) != DLOCK_OK) {
			b->failures++;
			continue;
		}
		int now = atomic_fetch_add(b->holding, 1) + 1;
		for (int most = atomic_load(b->most); now > most && !atomic_compare_exchange_weak(b->most, &most, now);)
			;
		dlock_test_sleep_ms(5);
		atomic_fetch_sub(b->holding, 1);
		if (dlock_release(b->lock) != DLOCK_OK)
			b->failures++;
	}
	return NULL;
}

/*
 * Many threads of several clients contend for two permits: never more than
 * two hold at once, and every one gets its turns; half the clients queue
 * (a release wakes the first of them), half do not (fair=0: every release
 * wakes them all).  The scripts per acquisition: printed, not bounded here.
 */
static void test_contended(void)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c[BUSY_CLIENTS];
	struct busy b[BUSY_THREADS];
	atomic_int holding, most;
	atomic_init(&holding, 0);
	atomic_init(&most, 0);
	for (int k = 0; k < BUSY_CLIENTS; k++)
		c[k] = open_prefixed(prefix, k % 2 ? "fair=0" : "");
	long long scripts = command_calls("evalsha");
	int64_t t0 = dlock_test_now_ms();
	for (int i = 0; i < BUSY_THREADS; i++) {
		b[i] = (struct busy){ .lock = sem(c[i % BUSY_CLIENTS], "busy", BUSY_N), .holding = &holding, .most = &most };
		CU_ASSERT_FATAL(pthread_create(&b[i].thread, NULL, busy_main, &b[i]) == 0);
	}
	for (int i = 0; i < BUSY_THREADS; i++) {
		pthread_join(b[i].thread, NULL);
		CU_ASSERT_EQUAL(b[i].failures, 0);
		dlock_lock_free(b[i].lock);
	}
	int64_t took = dlock_test_now_ms() - t0;
	scripts = command_calls("evalsha") - scripts;
	int total = BUSY_THREADS * BUSY_ROUNDS;
	printf("\n    %d acquisitions of %d permits by %d threads in %lld ms (%.1f ms each, 5 ms held), "
	       "%.1f scripts each (server-wide count)",
	       total, BUSY_N, BUSY_THREADS, (long long)took, (double)took / total * BUSY_N, (double)scripts / total);
	CU_ASSERT(atomic_load(&most) <= BUSY_N);
	CU_ASSERT_EQUAL(atomic_load(&most), BUSY_N); /* both permits were used at once */
	for (int k = 0; k < BUSY_CLIENTS; k++)
		dlock_client_close(c[k]);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1);
}

/* ------------------------------------------------------------ one waiter woken per release */

#define FLAT_ROUNDS 6
#define FLAT_N 2

struct flat_waiter {
	dlock_client *c;
	dlock_lock *lock;
	pthread_t thread;
	int got, failures;
};

static void *flat_main(void *arg)
{
	struct flat_waiter *f = arg;
	for (int i = 0; i < FLAT_ROUNDS; i++) {
		if (sem_acquire(f->lock, LONG_WAIT_MS, 0, 0) != DLOCK_OK) {
			f->failures++;
			continue;
		}
		f->got++;
		dlock_test_sleep_ms(2);
		if (dlock_release(f->lock) != DLOCK_OK)
			f->failures++;
	}
	return NULL;
}

/* `n` clients, one waiter each, on a semaphore of FLAT_N: the scripts the server ran per acquisition. */
static double scripts_per_acquisition(int n)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	struct flat_waiter f[16];
	for (int i = 0; i < n; i++) {
		f[i] = (struct flat_waiter){ .c = open_prefixed(prefix, "") };
		f[i].lock = sem(f[i].c, "flat", FLAT_N);
	}
	long long scripts = command_calls("evalsha");
	for (int i = 0; i < n; i++)
		CU_ASSERT_FATAL(pthread_create(&f[i].thread, NULL, flat_main, &f[i]) == 0);
	for (int i = 0; i < n; i++) {
		pthread_join(f[i].thread, NULL);
		CU_ASSERT_EQUAL(f[i].failures, 0);
		CU_ASSERT_EQUAL(f[i].got, FLAT_ROUNDS); /* every waiter served */
	}
	scripts = command_calls("evalsha") - scripts;
	for (int i = 0; i < n; i++) {
		dlock_lock_free(f[i].lock);
		dlock_client_close(f[i].c);
	}
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1);
	return (double)scripts / (n * FLAT_ROUNDS);
}

/*
 * A release wakes the first queued waiter, not all of them: the scripts
 * per acquisition (attempts and releases, a server-wide count) stay about
 * the same from 4 to 16 waiters, where waking every waiter would make them
 * grow with the waiters (at 16: some 8 attempts per release).
 */
static void test_wakes_one(void)
{
	double four = scripts_per_acquisition(4), sixteen = scripts_per_acquisition(16);
	printf("\n    scripts per acquisition: %.2f with 4 waiters, %.2f with 16", four, sixteen);
	CU_ASSERT(sixteen < four * 1.5 + 1);
}

/* The server's time in ms now. */
static long long server_ms(void)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	long long ms = dlock_testredis_server_ms(ctx);
	redisFree(ctx);
	return ms;
}

static long long raw_zcard(const char *key)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	long long n = dlock_testredis_integer(ctx, "ZCARD %s", key);
	redisFree(ctx);
	return n;
}

struct zcard_is {
	const char *key;
	long long want;
};

static int zcard_reached(void *arg)
{
	const struct zcard_is *z = arg;
	return raw_zcard(z->key) >= z->want;
}

/* Someone subscribes to the channel `arg` (PUBSUB NUMSUB). */
static int channel_heard(void *arg)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "PUBSUB NUMSUB %s", (const char *)arg);
	int heard = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER &&
	            r->element[1]->integer > 0;
	if (r)
		freeReplyObject(r);
	redisFree(ctx);
	return heard;
}

/*
 * A queued waiter that died while still counted live (written here as its
 * scripts would: first in the queue, live for seconds) is woken by the
 * release and promised the permit for its claim window only: it claims
 * nothing, and the live waiter behind it gets the permit within that
 * window and one look, not after the holder's 30 s lease.
 */
static void test_dead_queued_waiter(void)
{
	char prefix[64], pqueue[256], pwaiters[256], pwoken[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(pqueue, sizeof pqueue, prefix, "dead", "pqueue");
	dlock_testredis_key(pwaiters, sizeof pwaiters, prefix, "dead", "pwaiters");
	dlock_testredis_key(pwoken, sizeof pwoken, prefix, "dead", "pwoken");
	dlock_client *h = open_prefixed(prefix, ""), *wc = open_prefixed(prefix, "");
	dlock_lock *a = sem(h, "dead", 1), *b = sem(wc, "dead", 1);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(a, 0, 30000, 0), DLOCK_OK);
	long long now = server_ms();
	redisContext *ctx = dlock_testredis_raw(redis_port);
	freeReplyObject(redisCommand(ctx, "ZADD %s %lld deadwaiter", pwaiters, now + 20000));
	freeReplyObject(redisCommand(ctx, "ZADD %s %lld deadwaiter", pqueue, now - 1000));
	redisFree(ctx);
	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, b, LONG_WAIT_MS, 0);
	struct zcard_is queued = { pqueue, 2 };
	CU_ASSERT(dlock_test_await(zcard_reached, &queued, AWAIT_MS));
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(a), DLOCK_OK);
	CU_ASSERT_EQUAL(raw_zcard(pwoken), 1); /* the dead one, first in the queue, was promised the permit */
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	printf("\n    the live waiter got the permit %lld ms after the release", (long long)(wt.at_ms - released));
	CU_ASSERT(wt.at_ms - released < 1000 + 2000 + PROMPT_MS);
	CU_ASSERT_EQUAL(raw_zcard(pqueue), 0); /* the dead one was dropped when its window passed */
	CU_ASSERT_EQUAL(dlock_release(b), DLOCK_OK);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_client_close(h);
	dlock_client_close(wc);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1);
}

/*
 * What a client of the previous release does to a semaphore of N: its
 * permit (a slot without the trailing space), its release (publishing on
 * the lock's channel only) and its waiter (subscribed to that channel,
 * counted in pwaiters).  KEYS lock, permits, slots, holders, npermits;
 * ARGV "acquire" owner N | "release" owner channel.
 */
static const char old_client_lua[] =
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"if ARGV[1] == 'acquire' then\n"
	"  redis.call('SET', KEYS[1], 'semaphore', 'PX', 30000)\n"
	"  redis.call('ZADD', KEYS[2], string.format('%d', now + 30000), ARGV[2])\n"
	"  redis.call('HSET', KEYS[3], ARGV[2], '0')\n"
	"  redis.call('HSET', KEYS[4], ARGV[2], string.format('0 %d old', now))\n"
	"  redis.call('SET', KEYS[5], ARGV[3])\n"
	"  return 1\n"
	"end\n"
	"redis.call('ZREM', KEYS[2], ARGV[2])\n"
	"redis.call('HDEL', KEYS[3], ARGV[2])\n"
	"redis.call('HDEL', KEYS[4], ARGV[2])\n"
	"if redis.call('ZCARD', KEYS[2]) == 0 then redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4]) end\n"
	"redis.call('PUBLISH', ARGV[3], '1')\n"
	"return 1\n";

static void old_client(const char *prefix, const char *what, const char *owner, const char *arg)
{
	char k[5][256];
	const char *suffix[5] = { "lock", "permits", "slots", "holders", "npermits" };
	for (int i = 0; i < 5; i++)
		dlock_testredis_key(k[i], sizeof k[i], prefix, "mix", suffix[i]);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "EVAL %s 5 %s %s %s %s %s %s %s %s", old_client_lua, k[0], k[1], k[2], k[3],
	                             k[4], what, owner, arg);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	redisFree(ctx);
}

/*
 * A rolling upgrade: a holder of the previous release, whose release
 * publishes only on the lock's channel, wakes a queued waiter of this one
 * (which watches that channel while such a holder is live); and this
 * release's release wakes a waiter of the previous one, subscribed to the
 * lock's channel.  They exclude each other throughout.
 */
static void test_previous_release_mix(void)
{
	char prefix[64], chan[256], pwaiters[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(chan, sizeof chan, prefix, "mix", "released");
	dlock_testredis_key(pwaiters, sizeof pwaiters, prefix, "mix", "pwaiters");
	dlock_client *c = open_prefixed(prefix, "");
	dlock_lock *l = sem(c, "mix", 1);

	old_client(prefix, "acquire", "oldholder", "1");
	CU_ASSERT_EQUAL(sem_acquire(l, 0, 0, 0), DLOCK_EBUSY); /* the old permit counts */
	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, l, LONG_WAIT_MS, 0);
	struct zcard_is listed = { pwaiters, 1 };
	CU_ASSERT(dlock_test_await(zcard_reached, &listed, AWAIT_MS));
	CU_ASSERT(dlock_test_await(channel_heard, chan, AWAIT_MS)); /* its subscription made */
	int64_t released = dlock_test_now_ms();
	old_client(prefix, "release", "oldholder", chan);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	printf("\n    woken by the previous release's message in %lld ms", (long long)(wt.at_ms - released));
	CU_ASSERT(wt.at_ms - released < 1000); /* the message, not its next look (2 s) */

	/* A waiter of the previous release, subscribed to the lock's channel, hears this release's release. */
	redisContext *sub = dlock_testredis_raw(redis_port);
	struct timeval tv = { 10, 0 };
	redisSetTimeout(sub, tv);
	redisReply *r = redisCommand(sub, "SUBSCRIBE %s", chan);
	freeReplyObject(r);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	freeReplyObject(redisCommand(ctx, "ZADD %s %lld oldwaiter", pwaiters, server_ms() + 20000));
	redisFree(ctx);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	void *msg = NULL;
	CU_ASSERT_EQUAL(redisGetReply(sub, &msg), REDIS_OK);
	r = msg;
	CU_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
	freeReplyObject(r);
	redisFree(sub);
	ctx = dlock_testredis_raw(redis_port);
	freeReplyObject(redisCommand(ctx, "ZREM %s oldwaiter", pwaiters));
	redisFree(ctx);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ topologies */

/*
 * On `base`: two clients hold both permits (distinct slots, increasing
 * tokens), a third waits and is woken by a release, another N is refused.
 */
static void acquire_wait_release(const char *what, const char *base)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_on(base, prefix, ""), *b = open_on(base, prefix, ""), *w = open_on(base, prefix, "");
	dlock_lock *la = sem(a, "topo", 2), *lb = sem(b, "topo", 2), *lw = sem(w, "topo", 2), *l3 = sem(w, "topo3", 3);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(la, 0, 30000, 0), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(sem_acquire(lb, 0, 30000, 0), DLOCK_OK);
	CU_ASSERT_NOT_EQUAL(slot_of(la), slot_of(lb));
	CU_ASSERT(dlock_test_token(lb) > dlock_test_token(la));
	CU_ASSERT_EQUAL(sem_acquire(lw, 0, 0, -1), DLOCK_EBUSY);
	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, lw, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(300);
	CU_ASSERT_EQUAL(atomic_load(&wt.done), 0);
	uint32_t freed = slot_of(la);
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	printf("\n    %s: handoff in %lld ms after the release", what, (long long)(wt.at_ms - released));
	CU_ASSERT(wt.at_ms - released < PROMPT_MS);
	CU_ASSERT_EQUAL(slot_of(lw), freed);
	CU_ASSERT(wt.token > dlock_test_token(lb));
	CU_ASSERT_EQUAL(dlock_check(lw), DLOCK_OK);
	dlock_lock *other_n = sem(a, "topo", 3);
	CU_ASSERT_EQUAL(sem_acquire(other_n, 0, 0, -1), DLOCK_EKIND);
	CU_ASSERT_EQUAL(dlock_extend(lb, 20000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lw), DLOCK_OK);
	CU_ASSERT_EQUAL(sem_acquire(l3, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l3), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_lock_free(lw);
	dlock_lock_free(l3);
	dlock_lock_free(other_n);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_client_close(w);
}

/* The URI in $DLOCK_TEST_URIS whose scheme is `scheme` ("rediss://..."), into out; 0 when there is none. */
static int uri_of_scheme(const char *scheme, char *out, size_t len)
{
	const char *all = dlock_test_env("DLOCK_TEST_URIS");
	size_t n = strlen(scheme);
	for (const char *p = all; p && *p;) {
		while (*p == ' ')
			p++;
		size_t w = strcspn(p, " ");
		if (w > n && strncmp(p, scheme, n) == 0 && w < len) {
			memcpy(out, p, w);
			out[w] = '\0';
			return 1;
		}
		p += w;
	}
	return 0;
}

static void on_env_uri(const char *what, const char *var)
{
	const char *uri = dlock_test_env(var);
	if (!uri) {
		char why[128];
		snprintf(why, sizeof why, "%s unset", var);
		dlock_test_skip_part(why);
		return;
	}
	acquire_wait_release(what, uri);
}

static void on_scheme_uri(const char *what, const char *scheme)
{
	char uri[1024];
	if (!uri_of_scheme(scheme, uri, sizeof uri)) {
		char why[128];
		snprintf(why, sizeof why, "no %s URI in DLOCK_TEST_URIS", scheme);
		dlock_test_skip_part(why);
		return;
	}
	acquire_wait_release(what, uri);
}

static void test_unix(void)
{
	on_env_uri("redis+unix", "DLOCK_TEST_REDIS_UNIX_URI");
}

static void test_tls(void)
{
	on_scheme_uri("rediss", "rediss://");
}

static void test_sentinel(void)
{
	on_scheme_uri("redis+sentinel", "redis+sentinel://");
}

static void test_cluster(void)
{
	on_env_uri("redis+cluster", "DLOCK_TEST_CLUSTER_URI");
}

static void test_cluster_tls(void)
{
	on_env_uri("rediss+cluster", "DLOCK_TEST_CLUSTER_TLS_URI");
}

/* RedLock has no semaphores, and says so. */
static void test_redlock_enotsup(void)
{
	const char *uri = dlock_test_env("DLOCK_TEST_REDLOCK_URI");
	if (!uri) {
		dlock_test_skip_part("DLOCK_TEST_REDLOCK_URI unset");
		return;
	}
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_SEMAPHORE, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_SEMAPHORE_NONE);
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, "sem", 2, &l), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(l);
	dlock_client_close(c);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis semaphores", NULL, NULL);
	CU_add_test(s, "keys, values, TTLs, slots and tokens", test_keys_slots_tokens);
	CU_add_test(s, "two handles of one client", test_one_client_two_handles);
	CU_add_test(s, "a release's message wakes the waiter", test_waiter_woken);
	CU_add_test(s, "the longest prefix: every name a command sends", test_longest_prefix);
	CU_add_test(s, "a lease that runs out: lost, and taken by a waiter", test_lease_runs_out);
	CU_add_test(s, "the server's clock decides a permit's expiry", test_server_clock_decides);
	CU_add_test(s, "N agreed across clients, holders and waiters", test_n_agreed);
	CU_add_test(s, "mutexes, read-write locks and semaphores of one name", test_kinds_across_clients);
	CU_add_test(s, "permits renewed in batches stay held", test_permits_renewed);
	CU_add_test(s, "contended: never more than N, every thread served", test_contended);
	CU_add_test(s, "a release wakes one waiter: scripts per acquisition flat in the waiters", test_wakes_one);
	CU_add_test(s, "a dead queued waiter holds the others back by its window only", test_dead_queued_waiter);
	CU_add_test(s, "the previous release's clients and this one's wake each other", test_previous_release_mix);
	CU_add_test(s, "redis+unix: acquire, wait, release", test_unix);
	CU_add_test(s, "rediss: acquire, wait, release", test_tls);
	CU_add_test(s, "redis+sentinel: acquire, wait, release", test_sentinel);
	CU_add_test(s, "redis+cluster: acquire, wait, release", test_cluster);
	CU_add_test(s, "rediss+cluster: acquire, wait, release", test_cluster_tls);
	CU_add_test(s, "RedLock answers DLOCK_ENOTSUP", test_redlock_enotsup);
}

int main(void)
{
	redis_uri = dlock_test_env("DLOCK_TEST_REDIS_URI");
	const char *port = dlock_test_env("DLOCK_TEST_REDIS_PORT");
	if (!redis_uri || !port)
		return dlock_test_skip("no redis server (DLOCK_TEST_REDIS_URI unset)");
	redis_port = atoi(port);
	return dlock_test_main(add_suites);
}
