/*
 * The driver contract of ABI version 3, seen from a driver: "kinds://", a
 * driver that records what reaches it and grants every acquisition.
 *
 *   - lock_init_kind() is called for every handle, mutexes included, with
 *     the handle's kind, and lock_init() never;
 *   - the mode of each acquisition arrives through dlock_wait_mode();
 *   - the core never sends an acquisition that conflicts with the client's
 *     own holders: a shared one only beside shared holders, an exclusive
 *     one only when the client holds nothing (the driver counts what it
 *     granted and flags a conflict);
 *   - a driver whose kind_capabilities() leaves read-write locks
 *     unsupported makes dlock_rwlock_new() DLOCK_ENOTSUP;
 *   - a reader gets no fencing token where the read fencing is NONE,
 *     while writers still get theirs;
 *   - on a client whose server queues the waiters (acquire()), a kind that
 *     says core_waits goes through try_acquire() and the core's loop.
 *
 * kinds://rw supports read-write locks with no token for readers,
 * kinds://rwfence with the writer's token for readers, kinds://norw does
 * not support them; kinds://queue has them and queues mutex waiters.  The
 * driver's counters are read through its control door.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/sys/driver.h"
#include "testsupport.h"

#define OP_COUNTS 0x7e570001
#define THREADS 6
#define ITERATIONS 300

struct kinds_counts {
	int lock_inits, kind_inits[2], shared_sent, exclusive_sent, conflicts;
	int acquire_calls[2]; /* per kind: through acquire() (the server's queue), not try_acquire() */
};

struct kinds_backend {
	int rw, read_fencing;
	int queue; /* kinds://queue: the server queues mutex waiters (acquire()), read-write locks say core_waits */
	pthread_mutex_t mu;
	int exclusive_held, shared_held;
	struct kinds_counts counts;
};

struct kinds_lock {
	dlock_lock_kind kind;
	dlock_lock_mode mode; /* of the current acquisition */
};

static dlock_status kinds_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	(void)host;
	struct kinds_backend *b = calloc(1, sizeof *b);
	if (!b)
		return dlock_error_set(err, DLOCK_ENOMEM, "kinds: out of memory");
	b->read_fencing = strcmp(uri->hosts[0].host, "rwfence") == 0;
	b->queue = strcmp(uri->hosts[0].host, "queue") == 0;
	b->rw = b->read_fencing || b->queue || strcmp(uri->hosts[0].host, "rw") == 0;
	pthread_mutex_init(&b->mu, NULL);
	*backend = b;
	return DLOCK_OK;
}

static void kinds_close(void *backend)
{
	struct kinds_backend *b = backend;
	pthread_mutex_destroy(&b->mu);
	free(b);
}

static void kinds_caps(void *backend, dlock_capabilities *caps)
{
	struct kinds_backend *b = backend;
	*caps = (dlock_capabilities){ .backend = "kinds", .fencing = DLOCK_FENCING_STRICT, .fencing_note = "" };
	if (b->queue)
		caps->wakeup = DLOCK_WAKEUP_SERVER_QUEUE;
}

static void kinds_kind_caps(void *backend, dlock_lock_kind kind, dlock_kind_caps *caps)
{
	struct kinds_backend *b = backend;
	caps->supported = kind == DLOCK_KIND_MUTEX || (kind == DLOCK_KIND_RWLOCK && b->rw);
	if (kind == DLOCK_KIND_RWLOCK && b->rw) {
		caps->policy = DLOCK_RWLOCK_WRITER_FIRST;
		caps->read_fencing = b->read_fencing ? DLOCK_FENCING_STRICT : DLOCK_FENCING_NONE;
		caps->core_waits = b->queue;
	}
}

static dlock_status kinds_init(void *backend, void *lk, const char *name, size_t len, dlock_error *err)
{
	struct kinds_backend *b = backend;
	(void)lk, (void)name, (void)len, (void)err;
	pthread_mutex_lock(&b->mu);
	b->counts.lock_inits++;
	pthread_mutex_unlock(&b->mu);
	return DLOCK_OK;
}

static dlock_status kinds_init_kind(void *backend, void *lkp, const char *name, size_t len,
                                    const dlock_kind_spec *spec, dlock_error *err)
{
	struct kinds_backend *b = backend;
	struct kinds_lock *lk = lkp;
	(void)name, (void)len;
	if (spec->kind != DLOCK_KIND_MUTEX && spec->kind != DLOCK_KIND_RWLOCK)
		return dlock_error_set(err, DLOCK_EINVAL, "kinds: unknown kind %d", (int)spec->kind);
	lk->kind = spec->kind;
	pthread_mutex_lock(&b->mu);
	b->counts.kind_inits[spec->kind]++;
	pthread_mutex_unlock(&b->mu);
	return DLOCK_OK;
}

static dlock_status kinds_try(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                              dlock_acquired *out, dlock_error *err)
{
	struct kinds_backend *b = backend;
	struct kinds_lock *lk = lkp;
	(void)lease_ms, (void)retry, (void)err;
	lk->mode = dlock_wait_mode(w);
	pthread_mutex_lock(&b->mu);
	if (lk->mode == DLOCK_MODE_SHARED) {
		b->counts.shared_sent++;
		b->counts.conflicts += b->exclusive_held != 0 || lk->kind != DLOCK_KIND_RWLOCK;
		b->shared_held++;
	} else {
		b->counts.exclusive_sent++;
		b->counts.conflicts += b->exclusive_held != 0 || b->shared_held != 0;
		b->exclusive_held++;
	}
	pthread_mutex_unlock(&b->mu);
	*out = (dlock_acquired){ .token = 1, .sent_ns = 0 };
	return DLOCK_OK;
}

/* kinds://queue's blocking acquire: counted, then granted as an attempt is. */
static dlock_status kinds_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                                  dlock_error *err)
{
	struct kinds_backend *b = backend;
	struct kinds_lock *lk = lkp;
	dlock_retry retry = { -1, 0, 0 };
	pthread_mutex_lock(&b->mu);
	b->counts.acquire_calls[lk->kind]++;
	pthread_mutex_unlock(&b->mu);
	return kinds_try(backend, lkp, lease_ms, w, &retry, out, err);
}

static dlock_status kinds_release(void *backend, void *lkp, dlock_error *err)
{
	struct kinds_backend *b = backend;
	struct kinds_lock *lk = lkp;
	(void)err;
	pthread_mutex_lock(&b->mu);
	if (lk->mode == DLOCK_MODE_SHARED)
		b->shared_held--;
	else
		b->exclusive_held--;
	pthread_mutex_unlock(&b->mu);
	return DLOCK_OK;
}

static dlock_status kinds_control(void *backend, void *lk, int op, void *arg, dlock_error *err)
{
	struct kinds_backend *b = backend;
	(void)lk, (void)err;
	if (op != OP_COUNTS)
		return DLOCK_ENOTSUP;
	pthread_mutex_lock(&b->mu);
	*(struct kinds_counts *)arg = b->counts;
	pthread_mutex_unlock(&b->mu);
	return DLOCK_OK;
}

static const dlock_driver kinds_driver = {
	.abi_version = 3,
	.scheme = "kinds",
	.lock_size = sizeof(struct kinds_lock),
	.open = kinds_open,
	.close = kinds_close,
	.capabilities = kinds_caps,
	.lock_init = kinds_init,
	.release = kinds_release,
	.control = kinds_control,
	.acquire = kinds_acquire,
	.try_acquire = kinds_try,
	.kind_capabilities = kinds_kind_caps,
	.lock_init_kind = kinds_init_kind,
};

static struct kinds_counts counts_of(dlock_client *c)
{
	struct kinds_counts k;
	memset(&k, 0, sizeof k);
	CU_ASSERT_EQUAL(dlock_client_control(c, OP_COUNTS, &k), DLOCK_OK);
	return k;
}

/* ------------------------------------------------------------ tests */

static void test_init_and_mode(void)
{
	dlock_client *c = dlock_test_open("kinds://rw", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *m = NULL, *r = NULL;
	CU_ASSERT_EQUAL(dlock_lock_new(c, "a", &m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "b", &r), DLOCK_OK);
	struct kinds_counts k = counts_of(c);
	CU_ASSERT_EQUAL(k.lock_inits, 0);
	CU_ASSERT_EQUAL(k.kind_inits[DLOCK_KIND_MUTEX], 1);
	CU_ASSERT_EQUAL(k.kind_inits[DLOCK_KIND_RWLOCK], 1);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	CU_ASSERT_EQUAL(dlock_acquire(m, &o), DLOCK_OK);
	o.mode = DLOCK_MODE_SHARED;
	CU_ASSERT_EQUAL(dlock_acquire(r, &o), DLOCK_OK);
	k = counts_of(c);
	CU_ASSERT_EQUAL(k.exclusive_sent, 1);
	CU_ASSERT_EQUAL(k.shared_sent, 1);
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(r), DLOCK_OK);
	dlock_lock_free(m);
	dlock_lock_free(r);
	dlock_client_close(c);
}

static void test_unsupported(void)
{
	dlock_client *c = dlock_test_open("kinds://norw", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *r = NULL;
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "b", &r), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(r);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_RWLOCK, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_RWLOCK_NONE);
	CU_ASSERT_EQUAL(counts_of(c).kind_inits[DLOCK_KIND_RWLOCK], 0);
	dlock_client_close(c);
}

/* A reader's token follows DLOCK_FEATURE_READ_FENCING; a writer's, and a writer's read level, the fencing. */
static void test_read_fencing(void)
{
	static const char *uris[] = { "kinds://rw", "kinds://rwfence" };
	for (int i = 0; i < 2; i++) {
		dlock_client *c = dlock_test_open(uris[i], NULL, NULL);
		CU_ASSERT_PTR_NOT_NULL_FATAL(c);
		int64_t rf = -1;
		CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_READ_FENCING, &rf), DLOCK_OK);
		CU_ASSERT_EQUAL(rf, i == 0 ? DLOCK_FENCING_NONE : DLOCK_FENCING_STRICT);
		dlock_lock *l = NULL;
		uint64_t t = 0;
		CU_ASSERT_EQUAL(dlock_rwlock_new(c, "f", &l), DLOCK_OK);
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = 0;
		CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
		o.mode = DLOCK_MODE_SHARED;
		CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK); /* a writer's read level: still exclusive */
		CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &t), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &t), i == 0 ? DLOCK_ENOTSUP : DLOCK_OK);
		if (i == 0)
			CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "readers"));
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		dlock_lock_free(l);
		dlock_client_close(c);
	}
}

struct worker {
	dlock_client *client;
	int writer;
	pthread_t thread;
	dlock_status error;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	dlock_lock *l = NULL;
	w->error = dlock_rwlock_new(w->client, "x", &l);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 30000;
	o.mode = w->writer ? DLOCK_MODE_EXCLUSIVE : DLOCK_MODE_SHARED;
	for (int i = 0; i < ITERATIONS && w->error == DLOCK_OK; i++) {
		w->error = dlock_acquire(l, &o);
		if (w->error == DLOCK_OK)
			w->error = dlock_release(l);
	}
	dlock_lock_free(l);
	return NULL;
}

/* Threads of one client read and write one name: the driver never sees a conflicting acquisition. */
static void test_no_local_conflict(void)
{
	dlock_client *c = dlock_test_open("kinds://rw", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	struct worker w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .client = c, .writer = i % 3 == 0 };
		CU_ASSERT_FATAL(pthread_create(&w[i].thread, NULL, worker_main, &w[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(w[i].thread, NULL);
		CU_ASSERT_EQUAL(w[i].error, DLOCK_OK);
	}
	struct kinds_counts k = counts_of(c);
	CU_ASSERT_EQUAL(k.conflicts, 0);
	CU_ASSERT_EQUAL(k.shared_sent + k.exclusive_sent, THREADS * ITERATIONS);
	printf("\n    %d shared and %d exclusive acquisitions sent, %d conflicts", k.shared_sent, k.exclusive_sent,
	       k.conflicts);
	dlock_client_close(c);
}

/*
 * A server that queues mutex waiters (acquire(), SERVER_QUEUE) but not the
 * waiters of read-write locks (core_waits): mutexes go to acquire(), read-write
 * locks, in either mode, to try_acquire() and the core's loop.
 */
static void test_core_waits(void)
{
	dlock_client *c = dlock_test_open("kinds://queue", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *m = NULL, *r = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &m), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(c, "b", &r), DLOCK_OK);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 1000;
	CU_ASSERT_EQUAL(dlock_acquire(m, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_acquire(r, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(r), DLOCK_OK);
	o.mode = DLOCK_MODE_SHARED;
	CU_ASSERT_EQUAL(dlock_acquire(r, &o), DLOCK_OK);
	struct kinds_counts k = counts_of(c);
	CU_ASSERT_EQUAL(k.acquire_calls[DLOCK_KIND_MUTEX], 1);
	CU_ASSERT_EQUAL(k.acquire_calls[DLOCK_KIND_RWLOCK], 0);
	CU_ASSERT_EQUAL(k.exclusive_sent, 2);
	CU_ASSERT_EQUAL(k.shared_sent, 1);
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(r), DLOCK_OK);
	dlock_lock_free(m);
	dlock_lock_free(r);
	dlock_client_close(c);
}

static void add_suites(void)
{
	if (dlock_register_driver(&kinds_driver) != DLOCK_OK) {
		fprintf(stderr, "test_kinds: cannot register kinds://\n");
		exit(1);
	}
	CU_pSuite s = CU_add_suite("kinds", NULL, NULL);
	CU_add_test(s, "lock_init_kind for every handle, the mode through the wait", test_init_and_mode);
	CU_add_test(s, "read-write locks left unsupported are ENOTSUP", test_unsupported);
	CU_add_test(s, "a reader's token follows the read fencing", test_read_fencing);
	CU_add_test(s, "the core sends no acquisition that conflicts with its own holders", test_no_local_conflict);
	CU_add_test(s, "core_waits: a kind the server does not queue goes through try_acquire", test_core_waits);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
