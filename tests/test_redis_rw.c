/*
 * redis:// read-write locks on one server: the keys a read-write lock
 * leaves (which, their values and TTLs), the server's clock deciding when
 * a reader's lease ends, a reader that dies (SIGKILL) blocking a writer no
 * longer than its lease, readers renewed in batches, the wake-up of many
 * readers by one release, and mutexes, writers and readers of one name
 * across clients (the kinds exclude each other: DLOCK_FEATURE_KIND_CHECK
 * is 0), with the queue (the default) and with fair=0.
 *
 * Several scenarios come from Redisson's RedissonReadWriteLockTest
 * (testReadLockExpiration, testReadLockLeaseTimeout, testMultiRead,
 * testWriteRead, testReadWriteTTL), with dlock's rules: no writer
 * preference here, and a lease instead of a watchdog.
 */
#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* A client of its own prefix (`extra`: more of the query, "" for none). */
static dlock_client *open_prefixed(const char *prefix, const char *extra)
{
	char uri[512];
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_lock *rwlock(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(c, name, &l), DLOCK_OK);
	return l;
}

/* One acquisition: a wait bound (0: try once), a lease (0: the URI's), renewal (-1: the URI's), the mode. */
static dlock_status rw_acquire(dlock_lock *l, dlock_lock_mode mode, int64_t wait_ms, int64_t lease_ms, int renew)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.lease_ms = lease_ms;
	o.renewal = dlock_test_switch(renew);
	o.mode = mode;
	return dlock_acquire(l, &o);
}

#define READ DLOCK_MODE_SHARED
#define WRITE DLOCK_MODE_EXCLUSIVE

/* Scores of the readers in `readers`, lowest first, into out[0..max); returns how many there are. */
static size_t reader_scores(redisContext *ctx, const char *readers, int64_t *out, size_t max)
{
	redisReply *r = redisCommand(ctx, "ZRANGE %s 0 -1 WITHSCORES", readers);
	size_t n = 0;
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_ARRAY);
	for (size_t i = 1; i < r->elements && n < max; i += 2)
		out[n++] = strtoll(r->element[i]->str, NULL, 10);
	n = r->elements / 2;
	freeReplyObject(r);
	return n;
}

/* ------------------------------------------------------------ keys and the server's clock */

/*
 * Which keys a read-write lock leaves, and their TTLs: readers keep :lock
 * at "shared" with the last reader's TTL and one entry each in :readers,
 * scored by the server's clock; a reader who leaves takes its time with it
 * (Redisson's testReadLockLeaseTimeout: the key does not keep the longer
 * lease of a reader who left); the last one out deletes both.  A writer
 * holds :lock as a mutex would, with a token; readers get that token.
 */
static void test_keys_and_ttls(void)
{
	char prefix[64], key[256], readers[256], fence[256], value[128];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_prefixed(prefix, ""), *b = open_prefixed(prefix, "fair=0");
	dlock_lock *ra = rwlock(a, "dataset"), *rb = rwlock(b, "dataset");
	dlock_testredis_key(key, sizeof key, prefix, "dataset", "lock");
	dlock_testredis_key(readers, sizeof readers, prefix, "dataset", "readers");
	dlock_testredis_key(fence, sizeof fence, prefix, "dataset", "fence");
	redisContext *ctx = dlock_testredis_raw(redis_port);

	CU_ASSERT_EQUAL_FATAL(rw_acquire(ra, READ, 0, 10000, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_token(ra), 0); /* no writer yet */
	dlock_testredis_get(ctx, key, value, sizeof value);
	CU_ASSERT_STRING_EQUAL(value, "shared");
	long long pttl = dlock_testredis_integer(ctx, "PTTL %s", key);
	CU_ASSERT(pttl > 5000 && pttl <= 10000);
	CU_ASSERT(dlock_testredis_integer(ctx, "PTTL %s", readers) > 5000);
	int64_t scores[4];
	int64_t now = dlock_testredis_server_ms(ctx);
	CU_ASSERT_EQUAL_FATAL(reader_scores(ctx, readers, scores, 4), 1);
	CU_ASSERT(scores[0] > now + 5000 && scores[0] <= now + 10000); /* the server's clock plus the lease */

	CU_ASSERT_EQUAL_FATAL(rw_acquire(rb, READ, 0, 20000, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(reader_scores(ctx, readers, scores, 4), 2);
	CU_ASSERT(dlock_testredis_integer(ctx, "PTTL %s", key) > 15000); /* the last reader's */
	CU_ASSERT_EQUAL(dlock_check(ra), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(rb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(rb), DLOCK_OK);
	pttl = dlock_testredis_integer(ctx, "PTTL %s", key);
	CU_ASSERT(pttl > 0 && pttl <= 10000); /* back to the remaining reader's */
	CU_ASSERT_EQUAL(dlock_extend(ra, 15000), DLOCK_OK);
	CU_ASSERT(dlock_testredis_integer(ctx, "PTTL %s", key) > 10000);
	CU_ASSERT_EQUAL(dlock_release(ra), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 0);

	CU_ASSERT_EQUAL_FATAL(rw_acquire(ra, WRITE, 0, 10000, 0), DLOCK_OK);
	uint64_t tw = dlock_test_token(ra);
	dlock_testredis_get(ctx, key, value, sizeof value);
	CU_ASSERT_EQUAL(strcspn(value, " "), 32); /* an owner value, then its token, time and record, as a mutex's */
	CU_ASSERT(dlock_testredis_integer(ctx, "EXISTS %s", readers) == 0);
	CU_ASSERT_EQUAL(rw_acquire(rb, READ, 0, 10000, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(ra), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(rw_acquire(rb, READ, 0, 10000, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_token(rb), tw); /* the latest writer's */
	CU_ASSERT_EQUAL(dlock_release(rb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1); /* the fence counter only */
	CU_ASSERT(dlock_testredis_integer(ctx, "PTTL %s", fence) > 6LL * 24 * 3600 * 1000);

	redisFree(ctx);
	dlock_lock_free(ra);
	dlock_lock_free(rb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/*
 * The server's clock decides when a reader's lease has ended, never the
 * client's: a reader whose entry says, by the server's TIME, that its
 * lease has passed is no longer a reader — check and extend say ENOTHELD
 * although its client still counts the lease as running, and the next
 * reader's acquire drops it, so that it holds back no writer.
 */
static void test_server_clock_decides(void)
{
	char prefix[64], readers[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_prefixed(prefix, ""), *b = open_prefixed(prefix, ""), *wc = open_prefixed(prefix, "fair=0");
	dlock_lock *ra = rwlock(a, "clock"), *rb = rwlock(b, "clock"), *w = rwlock(wc, "clock");
	dlock_testredis_key(readers, sizeof readers, prefix, "clock", "readers");
	redisContext *ctx = dlock_testredis_raw(redis_port);

	CU_ASSERT_EQUAL_FATAL(rw_acquire(ra, READ, 0, 30000, 0), DLOCK_OK);
	/* The server's clock moves past ra's lease (its entry's time, one ms ago). */
	redisReply *r = redisCommand(ctx, "ZRANGE %s 0 -1", readers);
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
	char owner[64];
	snprintf(owner, sizeof owner, "%s", r->element[0]->str);
	freeReplyObject(r);
	freeReplyObject(redisCommand(ctx, "ZADD %s XX %lld %s", readers, (long long)dlock_testredis_server_ms(ctx) - 1, owner));
	CU_ASSERT_EQUAL(dlock_check(ra), DLOCK_ENOTHELD);

	/* The next reader drops it: the key then lives for rb only. */
	CU_ASSERT_EQUAL_FATAL(rw_acquire(rb, READ, 0, 30000, 0), DLOCK_OK);
	int64_t scores[4];
	CU_ASSERT_EQUAL(reader_scores(ctx, readers, scores, 4), 1);
	CU_ASSERT_EQUAL(rw_acquire(w, WRITE, 0, 0, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(rb), DLOCK_OK);
	CU_ASSERT_EQUAL(rw_acquire(w, WRITE, 0, 0, 0), DLOCK_OK); /* ra's lease still runs on its client */
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(ra), DLOCK_ENOTHELD);

	redisFree(ctx);
	dlock_lock_free(ra);
	dlock_lock_free(rb);
	dlock_lock_free(w);
	dlock_client_close(wc);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* ------------------------------------------------------------ a reader that dies */

#define DEAD_LEASE_MS 1500

/*
 * The child: a reader with renewal, which says it holds (one byte on `fd`)
 * and then waits to be killed.  Its renewals stop with it.
 */
static void dead_reader_child(const char *prefix, int fd)
{
	char uri[512];
	dlock_testredis_uri(uri, sizeof uri, redis_uri, prefix, "");
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	dlock_lock *l = NULL;
	if (!c || dlock_rwlock_new(c, "dead", &l) != DLOCK_OK || rw_acquire(l, READ, 0, DEAD_LEASE_MS, 1) != DLOCK_OK)
		_exit(1);
	if (write(fd, "r", 1) != 1)
		_exit(1);
	for (;;)
		pause();
}

/* A reader's entry, scored when it last acquired or renewed: renewed once the score moved. */
struct reader_entry {
	redisContext *ctx;
	const char *readers;
	int64_t first;
};

static int reader_renewed(void *arg)
{
	struct reader_entry *e = arg;
	int64_t score = 0;
	return reader_scores(e->ctx, e->readers, &score, 1) == 1 && score > e->first;
}

/*
 * A reader killed with SIGKILL while it holds, just after one of its
 * renewals, blocks a waiting writer for what remained of its lease (about
 * one lease) and never longer (Redisson's
 * testReadLockExpiration: a live reader with a shorter lease that leaves
 * meanwhile changes nothing).
 */
static void test_dead_reader(void)
{
	char prefix[64];
	int fds[2];
	dlock_testredis_prefix(prefix, sizeof prefix);
	CU_ASSERT_FATAL(pipe(fds) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		dead_reader_child(prefix, fds[1]);
	}
	close(fds[1]);
	char byte = 0, readers[256];
	CU_ASSERT_FATAL(read(fds[0], &byte, 1) == 1); /* the child holds its read lock */
	close(fds[0]);
	dlock_testredis_key(readers, sizeof readers, prefix, "dead", "readers");
	struct reader_entry e = { dlock_testredis_raw(redis_port), readers, 0 };
	CU_ASSERT_EQUAL_FATAL(reader_scores(e.ctx, readers, &e.first, 1), 1);
	CU_ASSERT(dlock_test_await(reader_renewed, &e, AWAIT_MS)); /* its renewals run */
	redisFree(e.ctx);

	dlock_client *a = open_prefixed(prefix, ""), *b = open_prefixed(prefix, "fair=0");
	dlock_lock *live = rwlock(a, "dead"), *w = rwlock(b, "dead");
	CU_ASSERT_EQUAL_FATAL(rw_acquire(live, READ, 0, 500, 1), DLOCK_OK);
	kill(pid, SIGKILL);
	int64_t killed = dlock_test_now_ms();
	int status = 0;
	waitpid(pid, &status, 0);
	CU_ASSERT(WIFSIGNALED(status));

	dlock_test_waiter wt;
	dlock_test_waiter_start(&wt, w, LONG_WAIT_MS, 10000);
	CU_ASSERT_EQUAL(dlock_release(live), DLOCK_OK); /* the live reader leaves: the dead one still holds */
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&wt, LONG_WAIT_MS), DLOCK_OK);
	int64_t waited = wt.at_ms - killed;
	printf("\n    writer in %lld ms after the reader was killed (lease %d ms)", (long long)waited, DEAD_LEASE_MS);
	CU_ASSERT(waited >= DEAD_LEASE_MS / 2);           /* the dead reader did hold the writer back */
	CU_ASSERT(waited <= DEAD_LEASE_MS + SLACK_MS);   /* never past the lease */
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1); /* the fence counter only */

	dlock_lock_free(live);
	dlock_lock_free(w);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* ------------------------------------------------------------ renewals */

#define RENEW_NAMES 4
#define RENEW_CLIENTS 2
#define RENEW_LEASE_MS 600

/*
 * Readers renewed by the renewal thread (in batches: one pipeline of each
 * lock's own extend script) stay held past many leases — two clients
 * reading each of several names, and a writer of another name in the same
 * batches (Redisson's testReadWriteTTL); the key's TTL is a reader's.
 */
static void test_readers_renewed(void)
{
	char prefix[64], key[256], name[32];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c[RENEW_CLIENTS];
	dlock_lock *r[RENEW_CLIENTS][RENEW_NAMES];
	dlock_test_lost lost = { 0, 0 };
	for (int k = 0; k < RENEW_CLIENTS; k++) {
		c[k] = open_prefixed(prefix, k ? "fair=0" : "");
		for (int i = 0; i < RENEW_NAMES; i++) {
			dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
			o.wait_ms = 0;
			o.lease_ms = RENEW_LEASE_MS;
			o.renewal = DLOCK_ON;
			o.mode = READ;
			o.on_lost = dlock_test_on_lost;
			o.lost_userdata = &lost;
			snprintf(name, sizeof name, "renew-%d", i);
			r[k][i] = rwlock(c[k], name);
			CU_ASSERT_EQUAL_FATAL(dlock_acquire(r[k][i], &o), DLOCK_OK);
		}
	}
	dlock_lock *w = rwlock(c[0], "renew-w");
	CU_ASSERT_EQUAL_FATAL(rw_acquire(w, WRITE, 0, RENEW_LEASE_MS, 1), DLOCK_OK);
	for (int k = 0; k < RENEW_CLIENTS; k++) {
		dlock_test_count renewals = { c[k], 4 * (RENEW_NAMES + 1) }; /* four of each lease */
		CU_ASSERT(dlock_test_await(dlock_test_renewed, &renewals, AWAIT_MS));
	}
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	for (int k = 0; k < RENEW_CLIENTS; k++)
		for (int i = 0; i < RENEW_NAMES; i++)
			CU_ASSERT_EQUAL(dlock_check(r[k][i]), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(w), DLOCK_OK);
	dlock_testredis_key(key, sizeof key, prefix, "renew-0", "lock");
	redisContext *ctx = dlock_testredis_raw(redis_port);
	long long pttl = dlock_testredis_integer(ctx, "PTTL %s", key);
	CU_ASSERT(pttl > 0 && pttl <= RENEW_LEASE_MS);
	redisFree(ctx);
	for (int k = 0; k < RENEW_CLIENTS; k++) {
		for (int i = 0; i < RENEW_NAMES; i++) {
			CU_ASSERT_EQUAL(dlock_release(r[k][i]), DLOCK_OK);
			dlock_lock_free(r[k][i]);
		}
	}
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	dlock_lock_free(w);
	for (int k = 0; k < RENEW_CLIENTS; k++)
		dlock_client_close(c[k]);
	CU_ASSERT_EQUAL(dlock_testredis_keys_under(redis_port, prefix), 1); /* the writer's fence counter */
}

/* ------------------------------------------------------------ waking, mixing */

#define WOKEN_READERS 8

struct woken {
	dlock_lock *lock;
	atomic_int *holding;
	pthread_t thread;
	dlock_status status;
	int64_t at_ms;
};

static int all_holding(void *arg)
{
	return atomic_load((atomic_int *)arg) == WOKEN_READERS;
}

/* A reader that waits, then holds until every reader holds: they overlap. */
static void *woken_main(void *arg)
{
	struct woken *wk = arg;
	wk->status = rw_acquire(wk->lock, READ, LONG_WAIT_MS, 0, -1);
	wk->at_ms = dlock_test_now_ms();
	if (wk->status != DLOCK_OK)
		return NULL;
	atomic_fetch_add(wk->holding, 1);
	if (!dlock_test_await(all_holding, wk->holding, AWAIT_MS))
		wk->status = DLOCK_ETIMEDOUT;
	dlock_release(wk->lock);
	return NULL;
}

/*
 * A writer's release wakes every waiting reader at once, and they all hold
 * together (Redisson's testWriteRead), with the queue's client and with
 * fair=0's.
 */
static void woken_readers(const char *extra)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *wc = open_prefixed(prefix, extra), *rc = open_prefixed(prefix, extra);
	dlock_lock *w = rwlock(wc, "woken");
	atomic_int holding;
	atomic_init(&holding, 0);
	struct woken wk[WOKEN_READERS];
	CU_ASSERT_EQUAL_FATAL(rw_acquire(w, WRITE, 0, 0, -1), DLOCK_OK);
	for (int i = 0; i < WOKEN_READERS; i++) {
		wk[i] = (struct woken){ .lock = rwlock(rc, "woken"), .holding = &holding };
		CU_ASSERT_FATAL(pthread_create(&wk[i].thread, NULL, woken_main, &wk[i]) == 0);
	}
	dlock_test_count waiting = { rc, 1 }; /* the first reader waits on the server */
	CU_ASSERT(dlock_test_await(dlock_test_attempted, &waiting, AWAIT_MS));
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	int64_t last = released;
	for (int i = 0; i < WOKEN_READERS; i++) {
		pthread_join(wk[i].thread, NULL);
		CU_ASSERT_EQUAL(wk[i].status, DLOCK_OK);
		if (wk[i].at_ms > last)
			last = wk[i].at_ms;
		dlock_lock_free(wk[i].lock);
	}
	printf("\n    %s: %d readers in %lld ms after the writer's release", *extra ? extra : "fair=1", WOKEN_READERS,
	       (long long)(last - released));
	CU_ASSERT(last - released < PROMPT_MS);
	dlock_lock_free(w);
	dlock_client_close(wc);
	dlock_client_close(rc);
}

static void test_readers_woken(void)
{
	woken_readers("");
	woken_readers("fair=0");
}

/*
 * Readers of several clients overlap; a writer and a mutex of the name are
 * refused while any reader holds, and readers while a mutex holds (the
 * kinds exclude each other across clients: nothing is refused with
 * DLOCK_EKIND there); once the last reader leaves the writer gets in
 * (Redisson's testMultiRead).  A mutex waiting in the queue (fair=1) is
 * woken by the last reader's release.
 */
static void test_kinds_across_clients(void)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_prefixed(prefix, ""), *b = open_prefixed(prefix, "fair=0"), *c = open_prefixed(prefix, "");
	int64_t kc = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(a, DLOCK_FEATURE_KIND_CHECK, &kc), DLOCK_OK);
	CU_ASSERT_EQUAL(kc, 0);
	dlock_client *d = open_prefixed(prefix, ""); /* the mutex's: one client has one kind per name */
	dlock_lock *r1 = rwlock(a, "multi"), *r2 = rwlock(b, "multi"), *w = rwlock(c, "multi");
	dlock_lock *m = dlock_test_new_lock(d, "multi");
	CU_ASSERT_PTR_NOT_NULL_FATAL(m);

	CU_ASSERT_EQUAL_FATAL(rw_acquire(r1, READ, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(rw_acquire(w, WRITE, 0, 0, -1), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_test_acquire(m, 0, 0, -1, NULL, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL_FATAL(rw_acquire(r2, READ, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(r1), DLOCK_OK);
	CU_ASSERT_EQUAL(rw_acquire(w, WRITE, 0, 0, -1), DLOCK_EBUSY);

	/* A mutex queued behind the readers (fair=1) gets the name when the last one leaves. */
	dlock_client_stats before;
	dlock_client_get_stats(d, &before);
	dlock_test_count waiting = { d, before.server_acquires + 1 };
	dlock_test_waiter mw;
	dlock_test_waiter_start(&mw, m, LONG_WAIT_MS, 0);
	CU_ASSERT(dlock_test_await(dlock_test_attempted, &waiting, AWAIT_MS));
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(r2), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&mw, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(mw.at_ms - released < PROMPT_MS);
	CU_ASSERT_EQUAL(rw_acquire(r1, READ, 0, 0, -1), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(rw_acquire(w, WRITE, 0, 0, -1), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);

	CU_ASSERT_EQUAL(rw_acquire(w, WRITE, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(rw_acquire(r1, READ, 0, 0, -1), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_test_acquire(m, 0, 0, -1, NULL, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);

	dlock_lock_free(r1);
	dlock_lock_free(r2);
	dlock_lock_free(w);
	dlock_lock_free(m);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_client_close(c);
	dlock_client_close(d);
}

/* RedLock has no read-write locks, and says so. */
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
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_RWLOCK, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_RWLOCK_NONE);
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "rw", &l), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(l);
	dlock_client_close(c);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis read-write locks", NULL, NULL);
	CU_add_test(s, "keys, values and TTLs of readers and writers", test_keys_and_ttls);
	CU_add_test(s, "the server's clock decides a reader's expiry", test_server_clock_decides);
	CU_add_test(s, "a reader killed while holding blocks a writer no longer than its lease", test_dead_reader);
	CU_add_test(s, "readers renewed in batches stay held", test_readers_renewed);
	CU_add_test(s, "a writer's release wakes every waiting reader", test_readers_woken);
	CU_add_test(s, "mutexes, writers and readers of one name across clients", test_kinds_across_clients);
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
