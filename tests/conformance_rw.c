/*
 * Conformance: read-write locks (dlock_rwlock_new()).  Readers overlap, a
 * writer never overlaps anyone, a waiting writer holds back new readers
 * as the backend's policy says, reentrancy and the refused upgrade, the
 * lost-lock callback of a read lock, fencing of readers and writers, one
 * kind per name, bad input, and load across threads and processes.
 *
 * A backend without read-write locks (DLOCK_FEATURE_RWLOCK is NONE) must
 * answer DLOCK_ENOTSUP from dlock_rwlock_new(); every test then says
 * SKIPPED and checks only that answer.
 */
#include "conformance.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Acquisitions in total of the load test, before DLOCK_TEST_SCALE. */
#define RW_LOAD_TOTAL 1200
#define RW_CHILDREN 2
#define RW_CLIENTS_PER_CHILD 2
#define RW_READERS_PER_CLIENT 2 /* and one writer per client */
#define RW_THREADS_PER_CLIENT (RW_READERS_PER_CLIENT + 1)
#define RW_SHORT_LEASE_MS 300

/* ------------------------------------------------------- helpers */

static int64_t feature_of(dlock_client *client, dlock_feature f)
{
	int64_t v = -1;
	CONF_ASSERT_ST(dlock_client_feature(client, f, &v), DLOCK_OK);
	return v;
}

/* 1 (and a SKIPPED line) when the backend has no read-write locks; checks that it says so consistently. */
static int rw_unsupported(dlock_client *client)
{
	if (!client)
		return 1;
	if (feature_of(client, DLOCK_FEATURE_RWLOCK) != DLOCK_RWLOCK_NONE)
		return 0;
	dlock_lock *l = NULL;
	CONF_ASSERT_ST(dlock_rwlock_new(client, "rw-unsupported", &l), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(l);
	CU_ASSERT_EQUAL(feature_of(client, DLOCK_FEATURE_READ_FENCING), DLOCK_FENCING_NONE);
	dlock_test_skip_part("no read-write locks on this backend (DLOCK_FEATURE_RWLOCK is none: DLOCK_ENOTSUP)");
	return 1;
}

static dlock_lock *rw_lock(dlock_client *client, const char *name)
{
	dlock_lock *l = NULL;
	if (client)
		CONF_ASSERT_ST(dlock_rwlock_new(client, name, &l), DLOCK_OK);
	return l;
}

static dlock_status rw_acquire(dlock_lock *l, dlock_lock_mode mode, int64_t wait_ms)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.mode = mode;
	return dlock_acquire(l, &o);
}

/* One acquire of `lock` in `mode` on a thread of its own; releases at once when asked to. */
typedef struct rw_waiter {
	dlock_lock *lock;
	dlock_lock_mode mode;
	int64_t wait_ms;
	int release;
	pthread_t thread;
	atomic_int done;
	dlock_status status;
} rw_waiter;

static void *rw_waiter_run(void *arg)
{
	rw_waiter *w = arg;
	w->status = rw_acquire(w->lock, w->mode, w->wait_ms);
	if (w->status == DLOCK_OK && w->release)
		dlock_release(w->lock);
	atomic_store(&w->done, 1);
	return NULL;
}

static void rw_waiter_start(rw_waiter *w, dlock_lock *lock, dlock_lock_mode mode, int64_t wait_ms, int release)
{
	memset(w, 0, sizeof *w);
	*w = (rw_waiter){ .lock = lock, .mode = mode, .wait_ms = wait_ms, .release = release };
	if (pthread_create(&w->thread, NULL, rw_waiter_run, w) != 0)
		abort();
}

static int rw_waiter_done(void *arg)
{
	return atomic_load(&((rw_waiter *)arg)->done);
}

static dlock_status rw_waiter_join(rw_waiter *w)
{
	if (!dlock_test_await(rw_waiter_done, w, CONF_LONG_WAIT_MS))
		CU_FAIL("acquire did not return in time");
	pthread_join(w->thread, NULL);
	return w->status;
}

/* ------------------------------------------------------- tests */

/* The features agree with each other and with what dlock_rwlock_new() does. */
static void test_rw_capabilities(void)
{
	dlock_client *client = conf_open();
	if (!rw_unsupported(client)) {
		int64_t policy = feature_of(client, DLOCK_FEATURE_RWLOCK);
		CU_ASSERT(policy == DLOCK_RWLOCK_WRITER_FIRST || policy == DLOCK_RWLOCK_NO_PREFERENCE);
		int64_t rf = feature_of(client, DLOCK_FEATURE_READ_FENCING);
		CU_ASSERT(rf >= DLOCK_FENCING_NONE && rf <= DLOCK_FENCING_CONDITIONAL);
		int64_t kc = feature_of(client, DLOCK_FEATURE_KIND_CHECK);
		CU_ASSERT(kc == 0 || kc == 1);
		printf("\n    rwlock %s, read fencing %s, kind check %lld",
		       dlock_rwlock_policy_name((dlock_rwlock_policy)policy), dlock_fencing_name((dlock_fencing)rf),
		       (long long)kc);
		dlock_lock *l = rw_lock(client, "rw-caps");
		CU_ASSERT_EQUAL(dlock_lock_get_kind(l), DLOCK_KIND_RWLOCK);
		dlock_lock_free(l);
	}
	conf_close(client);
}

/* Readers of two clients hold the name at once; a writer waits for both. */
static void test_rw_readers_overlap(void)
{
	dlock_client *a = conf_open(), *b = conf_open(), *w = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-overlap");
	if (rw_unsupported(a) || !b || !w)
		goto done;
	dlock_lock *ra = rw_lock(a, name), *rb = rw_lock(b, name), *wl = rw_lock(w, name);
	CONF_ASSERT_ST(rw_acquire(ra, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(rb, DLOCK_MODE_SHARED, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(wl, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(ra), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(wl, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(rb), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(wl, DLOCK_MODE_EXCLUSIVE, CONF_LONG_WAIT_MS), DLOCK_OK);
	/* The writer is alone: no reader, no other writer. */
	CONF_ASSERT_ST(rw_acquire(ra, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(rw_acquire(rb, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(wl), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(ra, DLOCK_MODE_SHARED, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(ra), DLOCK_OK);
	dlock_lock_free(ra);
	dlock_lock_free(rb);
	dlock_lock_free(wl);
done:
	conf_close(a);
	conf_close(b);
	conf_close(w);
}

/* Two handles of one client, on two threads, read at once (a shared acquire beside a local reader). */
static void test_rw_local_readers(void)
{
	dlock_client *a = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-local");
	if (rw_unsupported(a))
		goto done;
	dlock_lock *r1 = rw_lock(a, name), *r2 = rw_lock(a, name);
	rw_waiter t;
	CONF_ASSERT_ST(rw_acquire(r1, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	rw_waiter_start(&t, r2, DLOCK_MODE_SHARED, 0, 1);
	CONF_ASSERT_ST(rw_waiter_join(&t), DLOCK_OK);
	/* The same thread through another handle: refused, as for a mutex. */
#ifdef DLOCK_CONFORMANCE_LOOP
	/* Loop mode: no thread holds r1 (reentrancy is per handle, dlock/loop.h): r2 reads beside it, as above. */
	CONF_ASSERT_ST(rw_acquire(r2, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(r2), DLOCK_OK);
#else
	CONF_ASSERT_ST(rw_acquire(r2, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(rw_acquire(r2, DLOCK_MODE_SHARED, 1000), DLOCK_EDEADLK);
#endif
	/* A local writer waits, and holds back the local readers that come after it. */
	dlock_lock *w = rw_lock(a, name);
	conf_waiter tw;
	rw_waiter tr;
	conf_waiter_start(&tw, w, CONF_LONG_WAIT_MS, 1, NULL); /* exclusive: the default mode */
	conf_waiter_await_blocked(&tw, NULL, 0);
	rw_waiter_start(&tr, r2, DLOCK_MODE_SHARED, 0, 1);
	CONF_ASSERT_ST(rw_waiter_join(&tr), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(r1), DLOCK_OK);
	CONF_ASSERT_ST(conf_waiter_join(&tw, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(tw.release_status, DLOCK_OK);
	dlock_lock_free(r1);
	dlock_lock_free(r2);
	dlock_lock_free(w);
done:
	conf_close(a);
}

/* A writer waits for a reader of another client; a new reader then goes first or not as the policy says. */
static void test_rw_writer_preference(void)
{
	dlock_client *a = conf_open(), *b = conf_open(), *c = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-pref");
	if (rw_unsupported(a) || !b || !c)
		goto done;
	int64_t policy = feature_of(a, DLOCK_FEATURE_RWLOCK);
	dlock_lock *ra = rw_lock(a, name), *wb = rw_lock(b, name), *rc = rw_lock(c, name);
	conf_waiter wt;
	CONF_ASSERT_ST(rw_acquire(ra, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	uint64_t base = conf_stats(b).server_acquires;
	conf_waiter_start(&wt, wb, CONF_LONG_WAIT_MS, 1, NULL); /* exclusive: the default mode */
	conf_waiter_await_blocked(&wt, b, base);
	dlock_status st = rw_acquire(rc, DLOCK_MODE_SHARED, 0);
	if (policy == DLOCK_RWLOCK_WRITER_FIRST)
		CONF_ASSERT_ST(st, DLOCK_EBUSY);
	else
		CONF_ASSERT_ST(st, DLOCK_OK);
	if (st == DLOCK_OK)
		CONF_ASSERT_ST(dlock_release(rc), DLOCK_OK);
	CU_ASSERT(!conf_waiter_done(&wt));
	CONF_ASSERT_ST(dlock_release(ra), DLOCK_OK);
	CONF_ASSERT_ST(conf_waiter_join(&wt, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(wt.release_status, DLOCK_OK);
	dlock_lock_free(ra);
	dlock_lock_free(wb);
	dlock_lock_free(rc);
done:
	conf_close(a);
	conf_close(b);
	conf_close(c);
}

/* Reentrancy in the mode held; a reader asking to write is refused, a writer may read. */
static void test_rw_reentrancy(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-reentry");
	if (rw_unsupported(a) || !b)
		goto done;
	dlock_lock *r = rw_lock(a, name), *other = rw_lock(b, name);
	CONF_ASSERT_ST(rw_acquire(r, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	uint64_t server = conf_stats(a).server_acquires;
	CONF_ASSERT_ST(rw_acquire(r, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(conf_stats(a).server_acquires, server);
	CONF_ASSERT_ST(rw_acquire(r, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EDEADLK);
	CONF_ASSERT_ST(rw_acquire(r, DLOCK_MODE_EXCLUSIVE, 1000), DLOCK_EDEADLK);
	CONF_ASSERT_ST(dlock_release(r), DLOCK_OK);
	/* Still read-held at one level: another client can read, not write. */
	CONF_ASSERT_ST(rw_acquire(other, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(r), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(r), DLOCK_ENOTHELD);

	/* A writer's read is one more level of its exclusive hold. */
	CONF_ASSERT_ST(rw_acquire(r, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(r, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(r, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(r), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(r), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(other, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(r), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(other, DLOCK_MODE_SHARED, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
	dlock_lock_free(r);
	dlock_lock_free(other);
done:
	conf_close(a);
	conf_close(b);
}

/* Writers' tokens strictly increase; a reader gets the latest writer's. */
static void test_rw_fencing(void)
{
	dlock_client *a = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-fence");
	if (rw_unsupported(a))
		goto done;
	int64_t rf = feature_of(a, DLOCK_FEATURE_READ_FENCING);
	dlock_lock *l = rw_lock(a, name);
	uint64_t t1 = 0, t2 = 0, tr = 0;
	if (conf_caps()->fencing == DLOCK_FENCING_NONE) {
		CONF_ASSERT_ST(rw_acquire(l, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
		CONF_ASSERT_ST(dlock_lock_fencing_token(l, &t1), DLOCK_ENOTSUP);
		CONF_ASSERT_ST(dlock_release(l), DLOCK_OK);
		dlock_lock_free(l);
		goto done;
	}
	CONF_ASSERT_ST(rw_acquire(l, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	t1 = dlock_test_token(l);
	CONF_ASSERT_ST(dlock_release(l), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(l, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	if (rf == DLOCK_FENCING_NONE) {
		CONF_ASSERT_ST(dlock_lock_fencing_token(l, &tr), DLOCK_ENOTSUP);
	} else {
		CONF_ASSERT_ST(dlock_lock_fencing_token(l, &tr), DLOCK_OK);
		CU_ASSERT_EQUAL(tr, t1);
	}
	CONF_ASSERT_ST(dlock_release(l), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(l, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	t2 = dlock_test_token(l);
	CU_ASSERT(t2 > t1);
	CONF_ASSERT_ST(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
done:
	conf_close(a);
}

static void lost_cb(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	dlock_test_on_lost(lock, reason, detail, userdata);
}

/* A read lock whose lease runs out is reported lost once, and a writer then gets the name. */
static void test_rw_lost_reader(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-lost");
	if (rw_unsupported(a) || !b)
		goto done;
	if (conf_caps()->lease != DLOCK_LEASE_TTL) {
		dlock_test_skip_part("held by session: a read lock is lost only with its session");
		goto done;
	}
	dlock_lock *r = rw_lock(a, name), *w = rw_lock(b, name);
	dlock_test_lost lost;
	memset(&lost, 0, sizeof lost);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.mode = DLOCK_MODE_SHARED;
	o.lease_ms = RW_SHORT_LEASE_MS;
	o.renewal = DLOCK_OFF;
	o.on_lost = lost_cb;
	o.lost_userdata = &lost;
	CONF_ASSERT_ST(dlock_acquire(r, &o), DLOCK_OK);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, RW_SHORT_LEASE_MS + CONF_AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_EXPIRED);
	CONF_ASSERT_ST(rw_acquire(w, DLOCK_MODE_EXCLUSIVE, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(r), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_release(w), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	dlock_lock_free(r);
	dlock_lock_free(w);
done:
	conf_close(a);
	conf_close(b);
}

/* A name in use as a mutex is refused to a read-write lock (in one client always; across where the
 * backend can tell), and usable as one once free. */
static void test_rw_kind(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-kind");
	if (rw_unsupported(a) || !b)
		goto done;
	int64_t checked = feature_of(a, DLOCK_FEATURE_KIND_CHECK);
	dlock_lock *m = conf_lock(a, name), *same = rw_lock(a, name), *other = rw_lock(b, name);
	CU_ASSERT_EQUAL(dlock_lock_get_kind(m), DLOCK_KIND_MUTEX);
	CONF_ASSERT_ST(conf_acquire(m, 0), DLOCK_OK);
	CONF_ASSERT_ST(rw_acquire(same, DLOCK_MODE_SHARED, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "kind"));
	CONF_ASSERT_ST(rw_acquire(other, DLOCK_MODE_SHARED, 0), checked ? DLOCK_EKIND : DLOCK_EBUSY);
	CONF_ASSERT_ST(rw_acquire(other, DLOCK_MODE_EXCLUSIVE, 0), checked ? DLOCK_EKIND : DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(m), DLOCK_OK);
	/* Free again: now a read-write lock, and the mutex is the other kind. */
	CONF_ASSERT_ST(rw_acquire(other, DLOCK_MODE_SHARED, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(m, 0), checked ? DLOCK_EKIND : DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(m, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(m), DLOCK_OK);
	dlock_lock_free(m);
	dlock_lock_free(same);
	dlock_lock_free(other);
done:
	conf_close(a);
	conf_close(b);
}

/* NULL arguments, a mode out of range, shared on a mutex, and the old options versions (exclusive). */
static void test_rw_bad_input(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "rw-input");
	dlock_lock *l = NULL;
	CONF_ASSERT_ST(dlock_rwlock_new(NULL, name, &l), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_lock_get_kind(NULL), DLOCK_KIND_MUTEX);
	if (rw_unsupported(a) || !b)
		goto done;
	CONF_ASSERT_ST(dlock_rwlock_new(a, NULL, &l), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_rwlock_new(a, name, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_rwlock_new(a, "", &l), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(l);
	l = rw_lock(a, name);
	dlock_lock *m = conf_lock(b, name), *other = rw_lock(b, name);
	CONF_ASSERT_ST(rw_acquire(l, (dlock_lock_mode)2, 0), DLOCK_EINVAL);
	CONF_ASSERT_ST(rw_acquire(l, (dlock_lock_mode)-1, 0), DLOCK_EINVAL);
	CONF_ASSERT_ST(rw_acquire(m, DLOCK_MODE_SHARED, 0), DLOCK_EINVAL);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.version = 99;
	CONF_ASSERT_ST(dlock_acquire(l, &o), DLOCK_EVERSION);
	o.version = 0;
	CONF_ASSERT_ST(dlock_acquire(l, &o), DLOCK_EVERSION);
	/* Versions 1 and 2 end before `mode`: their acquisitions are exclusive, whatever follows. */
	for (unsigned v = 1; v <= 2; v++) {
		o.version = v;
		o.mode = DLOCK_MODE_SHARED; /* past the struct of that version: never read */
		CONF_ASSERT_ST(dlock_acquire(l, &o), DLOCK_OK);
		CONF_ASSERT_ST(rw_acquire(other, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
		CONF_ASSERT_ST(dlock_release(l), DLOCK_OK);
	}
	dlock_lock_free(l);
	dlock_lock_free(m);
	dlock_lock_free(other);
done:
	conf_close(a);
	conf_close(b);
}

/* ------------------------------------------------------- load */

/*
 * Who is inside, in memory shared with the children: a writer that finds
 * anyone inside, or a reader that finds a writer, is a violation.  The
 * sequentially consistent counters make sure that of two holders that
 * overlap, at least one sees the other.
 */
typedef struct rw_record {
	atomic_int readers, writers;
	atomic_int most_readers;
	atomic_uint violations;
	atomic_uint reads, writes;
	atomic_int ready;
	int children;      /* set before the fork, as the two below */
	const char *name;
	size_t per_thread;
	atomic_int failed; /* a dlock_status + 1 of the first failure, 0 if none */
} rw_record;

static void record_enter(rw_record *rec, int writer)
{
	if (writer) {
		if (atomic_fetch_add(&rec->writers, 1) != 0 || atomic_load(&rec->readers) != 0)
			atomic_fetch_add(&rec->violations, 1);
	} else {
		int n = atomic_fetch_add(&rec->readers, 1) + 1;
		if (atomic_load(&rec->writers) != 0)
			atomic_fetch_add(&rec->violations, 1);
		int most = atomic_load(&rec->most_readers);
		while (n > most && !atomic_compare_exchange_weak(&rec->most_readers, &most, n))
			;
	}
	sched_yield(); /* widen the window an overlap would show in */
}

static void record_leave(rw_record *rec, int writer)
{
	atomic_fetch_add(writer ? &rec->writes : &rec->reads, 1);
	atomic_fetch_sub(writer ? &rec->writers : &rec->readers, 1);
}

typedef struct rw_worker {
	dlock_client *client;
	const char *name;
	int writer;
	size_t iterations;
	rw_record *rec;
	pthread_t thread;
} rw_worker;

static void rw_fail(rw_record *rec, dlock_status st)
{
	int none = 0;
	atomic_compare_exchange_strong(&rec->failed, &none, (int)st + 1);
}

static void *rw_worker_run(void *arg)
{
	rw_worker *w = arg;
	dlock_lock *l = NULL;
	dlock_status st = dlock_rwlock_new(w->client, w->name, &l);
	if (st != DLOCK_OK) {
		rw_fail(w->rec, st);
		return NULL;
	}
	dlock_lock_mode mode = w->writer ? DLOCK_MODE_EXCLUSIVE : DLOCK_MODE_SHARED;
	for (size_t i = 0; i < w->iterations; i++) {
		st = rw_acquire(l, mode, CONF_LONG_WAIT_MS);
		if (st != DLOCK_OK)
			break;
		record_enter(w->rec, w->writer);
		record_leave(w->rec, w->writer);
		st = dlock_release(l);
		if (st != DLOCK_OK)
			break;
	}
	if (st != DLOCK_OK)
		rw_fail(w->rec, st);
	dlock_lock_free(l);
	return NULL;
}

static int rw_all_ready(void *arg)
{
	rw_record *rec = arg;
	return atomic_load(&rec->ready) >= rec->children;
}

/* A child: RW_CLIENTS_PER_CHILD clients, each with one writer and some readers, on threads. */
static int rw_child(int index, void *arg)
{
	rw_record *rec = arg;
	const char *name = rec->name;
	size_t per_thread = rec->per_thread;
	(void)index;
	dlock_client *clients[RW_CLIENTS_PER_CHILD] = { NULL };
	rw_worker workers[RW_CLIENTS_PER_CHILD * RW_THREADS_PER_CLIENT];
	int rc = 0;
	for (int c = 0; c < RW_CLIENTS_PER_CHILD; c++) {
		dlock_status st = dlock_client_open(&clients[c], conf_uri(), NULL, NULL, 0);
		if (st != DLOCK_OK) {
			rw_fail(rec, st);
			rc = 1;
		}
	}
	atomic_fetch_add(&rec->ready, 1);
	if (rc)
		goto out;
	dlock_test_await(rw_all_ready, rec, CONF_AWAIT_MS);
	for (int i = 0; i < RW_CLIENTS_PER_CHILD * RW_THREADS_PER_CLIENT; i++) {
		workers[i] = (rw_worker){ .client = clients[i / RW_THREADS_PER_CLIENT], .name = name,
		                          .writer = i % RW_THREADS_PER_CLIENT == 0, .iterations = per_thread,
		                          .rec = rec };
		if (pthread_create(&workers[i].thread, NULL, rw_worker_run, &workers[i]) != 0)
			abort();
	}
	for (int i = 0; i < RW_CLIENTS_PER_CHILD * RW_THREADS_PER_CLIENT; i++)
		pthread_join(workers[i].thread, NULL);
out:
	for (int c = 0; c < RW_CLIENTS_PER_CHILD; c++)
		if (clients[c] && dlock_client_close(clients[c]) != DLOCK_OK)
			rc = 1;
	return rc || atomic_load(&rec->failed) ? 1 : 0;
}

/* Processes and threads read and write one name; a writer is never seen beside anyone. */
static void test_rw_load(void)
{
	dlock_client *probe = conf_open();
	int unsupported = rw_unsupported(probe);
	conf_close(probe);
	if (unsupported)
		return;
	char name[128];
	conf_name(name, sizeof name, "rw-load");
	/* Clients of two processes contend only where the scope is wider than one process. */
	int children = conf_caps()->scope == DLOCK_SCOPE_PROCESS ? 1 : RW_CHILDREN;
	size_t threads = (size_t)children * RW_CLIENTS_PER_CHILD * RW_THREADS_PER_CLIENT;
	size_t per_thread = conf_scaled(RW_LOAD_TOTAL) / threads + 1;
	rw_record *rec = dlock_test_shared_alloc(sizeof *rec);
	rec->children = children;
	rec->name = name;
	rec->per_thread = per_thread;
	conf_run_children(children, rw_child, rec);
	int failed = atomic_load(&rec->failed);
	if (failed)
		printf("\n    a worker failed: %s", dlock_status_name(failed - 1));
	CU_ASSERT_EQUAL(failed, 0);
	unsigned reads = atomic_load(&rec->reads), writes = atomic_load(&rec->writes);
	printf("\n    %u reads, %u writes, at most %d readers at once, %u violations", reads, writes,
	       atomic_load(&rec->most_readers), atomic_load(&rec->violations));
	CU_ASSERT_EQUAL(atomic_load(&rec->violations), 0);
	CU_ASSERT_EQUAL(reads + writes, (unsigned)(per_thread * threads));
	dlock_test_shared_free(rec, sizeof *rec);
}

const conf_test conf_rw_tests[] = {
	{ "rw_capabilities", test_rw_capabilities },
	{ "rw_readers_overlap", test_rw_readers_overlap },
	{ "rw_local_readers", test_rw_local_readers },
	{ "rw_writer_preference", test_rw_writer_preference },
	{ "rw_reentrancy", test_rw_reentrancy },
	{ "rw_fencing", test_rw_fencing },
	{ "rw_lost_reader", test_rw_lost_reader },
	{ "rw_kind", test_rw_kind },
	{ "rw_bad_input", test_rw_bad_input },
	{ "rw_load", test_rw_load },
	{ NULL, NULL },
};
