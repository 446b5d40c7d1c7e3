/*
 * mem:// read-write locks: the order of waiting readers and writers across
 * clients (writer-first, FIFO), readers released together, a name in use
 * by a waiter of the other kind, and a reader's lease (extend, check).
 *
 * A waiter is known to be queued in the backend when its client logs the
 * driver's "waiting" message (emitted after it joined the queue); tests
 * await that instead of sleeping.  Every test uses its own namespace.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "dlock/dlock.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000 /* an acquire that must succeed: a hang becomes a failure */
#define AWAIT_MS 10000     /* awaiting a condition that must come true */

/* ------------------------------------------------------------ helpers */

/* A client whose log says when one of its acquisitions joined the backend's queue. */
struct probe {
	dlock_client *client;
	atomic_int queued;
};

static void probe_log(void *userdata, dlock_log_level level, const char *msg)
{
	struct probe *p = userdata;
	(void)level;
	if (strstr(msg, "waiting"))
		atomic_fetch_add(&p->queued, 1);
}

static int probe_open(struct probe *p, const char *uri)
{
	atomic_init(&p->queued, 0);
	p->client = dlock_test_open(uri, probe_log, p);
	return p->client != NULL;
}

static int probe_queued(void *arg)
{
	return atomic_load(&((struct probe *)arg)->queued) > 0;
}

static dlock_status acquire(dlock_lock *l, dlock_lock_mode mode, int64_t wait_ms)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.mode = mode;
	return dlock_acquire(l, &o);
}

static dlock_lock *rwlock(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, name, &l), DLOCK_OK);
	return l;
}

/* A thread that acquires in a mode and takes a ticket while holding; releases when told. */
struct waiter {
	dlock_lock *lock;
	dlock_lock_mode mode;
	atomic_int *order;
	atomic_int *inside;  /* holders of the name now, among these waiters */
	atomic_int most;     /* `inside` seen on entry */
	atomic_int go;       /* 1: release */
	pthread_t thread;
	dlock_status status;
	int ticket;
	atomic_int holding;
	atomic_int done;
};

static int waiter_told(void *arg)
{
	return atomic_load(&((struct waiter *)arg)->go);
}

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	w->status = acquire(w->lock, w->mode, LONG_WAIT_MS);
	if (w->status == DLOCK_OK) {
		w->ticket = atomic_fetch_add(w->order, 1);
		atomic_store(&w->most, atomic_fetch_add(w->inside, 1) + 1);
		atomic_store(&w->holding, 1);
		dlock_test_await(waiter_told, w, LONG_WAIT_MS);
		atomic_fetch_sub(w->inside, 1);
		dlock_release(w->lock);
	}
	atomic_store(&w->done, 1);
	return NULL;
}

static void waiter_start(struct waiter *w, dlock_lock *lock, dlock_lock_mode mode, atomic_int *order,
                         atomic_int *inside)
{
	memset(w, 0, sizeof *w);
	w->lock = lock;
	w->mode = mode;
	w->order = order;
	w->inside = inside;
	w->ticket = -1;
	CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, waiter_main, w) == 0);
}

static int waiter_holding(void *arg)
{
	return atomic_load(&((struct waiter *)arg)->holding);
}

/* Let it release, and join it. */
static dlock_status waiter_finish(struct waiter *w)
{
	atomic_store(&w->go, 1);
	pthread_join(w->thread, NULL);
	return w->status;
}

/* ------------------------------------------------------------ tests */

/*
 * Holder H writes; W1 (writer), R1 and R2 (readers), W2 (writer) queue in
 * that order, each from its own client.  After H: W1 alone, then R1 and R2
 * together (readers after a writer go as one group), and W2 only once both
 * have left.  A newcomer reader while W2 waits is held back (writer-first).
 */
static void test_order(void)
{
	const char *uri = "mem://rw_order";
	enum { W1, R1, R2, W2, N };
	const dlock_lock_mode modes[N] = { DLOCK_MODE_EXCLUSIVE, DLOCK_MODE_SHARED, DLOCK_MODE_SHARED,
		                           DLOCK_MODE_EXCLUSIVE };
	struct probe p[N];
	dlock_lock *l[N];
	struct waiter w[N];
	atomic_int order, inside;
	atomic_init(&order, 0);
	atomic_init(&inside, 0);
	dlock_client *h = dlock_test_open(uri, NULL, NULL), *n = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_FATAL(h && n);
	dlock_lock *lh = rwlock(h, "x"), *ln = rwlock(n, "x");
	CU_ASSERT_FATAL(lh && ln);
	CU_ASSERT_EQUAL_FATAL(acquire(lh, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	for (int i = 0; i < N; i++) {
		CU_ASSERT_FATAL(probe_open(&p[i], uri));
		l[i] = rwlock(p[i].client, "x");
		CU_ASSERT_FATAL(l[i] != NULL);
		waiter_start(&w[i], l[i], modes[i], &order, &inside);
		CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p[i], AWAIT_MS));
	}
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_OK);

	CU_ASSERT_FATAL(dlock_test_await(waiter_holding, &w[W1], AWAIT_MS));
	CU_ASSERT_EQUAL(w[W1].ticket, 0);
	CU_ASSERT_EQUAL(acquire(ln, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(waiter_finish(&w[W1]), DLOCK_OK);

	CU_ASSERT_FATAL(dlock_test_await(waiter_holding, &w[R1], AWAIT_MS));
	CU_ASSERT_FATAL(dlock_test_await(waiter_holding, &w[R2], AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&inside), 2); /* both readers hold it at once */
	CU_ASSERT(w[R1].ticket >= 1 && w[R1].ticket <= 2 && w[R2].ticket >= 1 && w[R2].ticket <= 2);
	/* W2 waits for them, and holds back a new reader. */
	CU_ASSERT_EQUAL(atomic_load(&w[W2].holding), 0);
	CU_ASSERT_EQUAL(acquire(ln, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(waiter_finish(&w[R1]), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&w[W2].holding), 0); /* R2 still reads */
	CU_ASSERT_EQUAL(waiter_finish(&w[R2]), DLOCK_OK);

	CU_ASSERT_FATAL(dlock_test_await(waiter_holding, &w[W2], AWAIT_MS));
	CU_ASSERT_EQUAL(w[W2].ticket, 3);
	CU_ASSERT_EQUAL(atomic_load(&w[W2].most), 1); /* alone */
	CU_ASSERT_EQUAL(waiter_finish(&w[W2]), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(ln, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(ln), DLOCK_OK);

	for (int i = 0; i < N; i++) {
		dlock_lock_free(l[i]);
		dlock_client_close(p[i].client);
	}
	dlock_lock_free(lh);
	dlock_lock_free(ln);
	dlock_client_close(h);
	dlock_client_close(n);
}

/* A name held or waited for as a mutex is in use: a read-write lock of another client gets DLOCK_EKIND. */
static void test_kind_of_waiter(void)
{
	const char *uri = "mem://rw_kind_waiter";
	struct probe p;
	dlock_client *h = dlock_test_open(uri, NULL, NULL), *r = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_FATAL(h && r && probe_open(&p, uri));
	dlock_lock *lh = dlock_test_new_lock(h, "x"), *lw = dlock_test_new_lock(p.client, "x");
	dlock_lock *lr = rwlock(r, "x");
	CU_ASSERT_FATAL(lh && lw && lr);
	CU_ASSERT_EQUAL_FATAL(acquire(lh, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	atomic_int order, inside;
	atomic_init(&order, 0);
	atomic_init(&inside, 0);
	struct waiter w;
	waiter_start(&w, lw, DLOCK_MODE_EXCLUSIVE, &order, &inside);
	CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p, AWAIT_MS));
	CU_ASSERT_EQUAL(acquire(lr, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EKIND);
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_OK);
	CU_ASSERT_FATAL(dlock_test_await(waiter_holding, &w, AWAIT_MS));
	CU_ASSERT_EQUAL(acquire(lr, DLOCK_MODE_SHARED, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(r), "in use as a mutex"));
	CU_ASSERT_EQUAL(waiter_finish(&w), DLOCK_OK);
	/* Nobody holds or waits any more: the name may change kind. */
	CU_ASSERT_EQUAL(acquire(lr, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(lh, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(h), "in use as a read-write lock"));
	CU_ASSERT_EQUAL(dlock_release(lr), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(lh, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_OK);
	dlock_lock_free(lh);
	dlock_lock_free(lw);
	dlock_lock_free(lr);
	dlock_client_close(h);
	dlock_client_close(r);
	dlock_client_close(p.client);
}

/* A reader has a lease of its own: extend and check answer for it, release ends only it. */
static void test_reader_lease(void)
{
	const char *uri = "mem://rw_lease";
	dlock_client *a = dlock_test_open(uri, NULL, NULL), *b = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *ra = rwlock(a, "x"), *rb = rwlock(b, "x"), *wb = rwlock(b, "x");
	CU_ASSERT_FATAL(ra && rb && wb);
	CU_ASSERT_EQUAL(acquire(ra, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(rb, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(ra, 60000), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(ra), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(rb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(ra), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(wb, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(ra), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(ra), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_extend(ra, 1000), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(acquire(wb, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(wb), DLOCK_OK);
	dlock_lock_free(ra);
	dlock_lock_free(rb);
	dlock_lock_free(wb);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("mem rwlock", NULL, NULL);
	CU_add_test(s, "writer-first FIFO: readers after a writer go together", test_order);
	CU_add_test(s, "a name held or waited for as the other kind is refused", test_kind_of_waiter);
	CU_add_test(s, "a reader's own lease: extend, check, release", test_reader_lease);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
