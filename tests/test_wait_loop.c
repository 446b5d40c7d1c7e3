/*
 * The core's waiting loop (core/retry.c) through a scripted version-2
 * driver, "loop://", whose try_acquire() answers what the test says:
 * backoff and its cap, after_ms, armed wake-ups (also one that fires
 * before the core sleeps), transient failures, the deadline, cancellation
 * and client close, and disarm() once on every way out.  Also which method
 * the core calls for a driver with both, and registration of try-only
 * drivers.  Timing is only ever asserted from below (a sleep never ends
 * early unless woken) or against generous bounds.
 */
#include "dlock/dlock.h"
#include "dlock/sys/driver.h"
#include "testsupport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ATTEMPTS 4096

/* What try_acquire() answers. */
enum answer {
	BUSY_POLL,      /* EBUSY, after_ms -1: the core's backoff */
	BUSY_AFTER,     /* EBUSY, after_ms = after_ms */
	BUSY_ARMED,     /* EBUSY, armed (after_ms -1) */
	BUSY_WOKEN,     /* EBUSY, armed, and the wake-up fires before the core sleeps */
	ARM_THEN_NOW,   /* first attempt: EBUSY, armed, after_ms 0; later ones: BUSY_ARMED */
	FAIL_TRANSIENT, /* ECONNECT, transient */
	FAIL_HARD       /* ESERVER */
};

struct loop {
	pthread_mutex_t mu;
	enum answer answer;
	int64_t after_ms;
	int grant_at;              /* the attempt (1-based) that acquires; 0: never */
	int attempts, disarms, acquires;
	int64_t at_ns[MAX_ATTEMPTS]; /* when each attempt came */
	dlock_wait *armed_w;       /* the wait of the armed acquisition, for the test to wake */
	int queue_caps;            /* capabilities say SERVER_QUEUE */
};

struct loop_lock {
	int held;
};

static struct loop *last_loop;
static atomic_int disarms_total; /* also counted after a client (and its backend) is gone */

static dlock_status loop_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	(void)uri;
	(void)host;
	(void)err;
	struct loop *b = calloc(1, sizeof *b);
	if (!b)
		return DLOCK_ENOMEM;
	pthread_mutex_init(&b->mu, NULL);
	b->queue_caps = strcmp(uri->scheme, "loopq") == 0;
	*backend = last_loop = b;
	return DLOCK_OK;
}

static void loop_close(void *backend)
{
	struct loop *b = backend;
	pthread_mutex_destroy(&b->mu);
	free(b);
}

static void loop_caps(void *backend, dlock_capabilities *caps)
{
	struct loop *b = backend;
	*caps = (dlock_capabilities){ .backend = "loop", .consistency = DLOCK_CONSISTENCY_LOCAL,
		                      .fencing = DLOCK_FENCING_STRICT, .fencing_note = "", .lease = DLOCK_LEASE_SESSION,
		                      .wakeup = b->queue_caps ? DLOCK_WAKEUP_SERVER_QUEUE : DLOCK_WAKEUP_POLL,
		                      .scope = DLOCK_SCOPE_PROCESS };
}

static dlock_status loop_init(void *backend, void *lk, const char *name, size_t len, dlock_error *err)
{
	(void)backend, (void)lk, (void)name, (void)len, (void)err;
	return DLOCK_OK;
}

static dlock_status loop_try(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                             dlock_acquired *out, dlock_error *err)
{
	struct loop *b = backend;
	(void)lease_ms;
	pthread_mutex_lock(&b->mu);
	int n = ++b->attempts;
	if (n <= MAX_ATTEMPTS)
		b->at_ns[n - 1] = dlock_monotonic_ns();
	enum answer a = b->answer;
	if (a == ARM_THEN_NOW && n > 1)
		a = BUSY_ARMED;
	if (a == BUSY_ARMED || a == BUSY_WOKEN || a == ARM_THEN_NOW)
		b->armed_w = w;
	int64_t after = b->after_ms;
	int grant = b->grant_at == n;
	pthread_mutex_unlock(&b->mu);
	if (grant) {
		((struct loop_lock *)lk)->held = 1;
		*out = (dlock_acquired){ .token = (uint64_t)n, .sent_ns = 0 };
		return DLOCK_OK;
	}
	switch (a) {
	case FAIL_TRANSIENT:
		retry->transient = 1;
		return dlock_error_set(err, DLOCK_ECONNECT, "loop: unreachable at attempt %d", n);
	case FAIL_HARD:
		return dlock_error_set(err, DLOCK_ESERVER, "loop: refused at attempt %d", n);
	case BUSY_AFTER:
		retry->after_ms = after;
		break;
	case BUSY_WOKEN:
		dlock_wait_wake(w); /* a release between the answer and the sleep */
		retry->armed = 1;
		break;
	case ARM_THEN_NOW:
		retry->armed = 1;
		retry->after_ms = 0;
		break;
	case BUSY_ARMED:
		retry->armed = 1;
		break;
	case BUSY_POLL:
		break;
	}
	return dlock_error_set(err, DLOCK_EBUSY, "loop: busy at attempt %d", n);
}

static void loop_disarm(void *backend, void *lk, dlock_wait *w)
{
	struct loop *b = backend;
	(void)lk;
	atomic_fetch_add(&disarms_total, 1);
	pthread_mutex_lock(&b->mu);
	b->disarms++;
	if (b->armed_w == w)
		b->armed_w = NULL;
	pthread_mutex_unlock(&b->mu);
}

/* Only for the driver with both methods: acquire() grants at once. */
static dlock_status loop_acquire(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                                 dlock_error *err)
{
	struct loop *b = backend;
	(void)lease_ms, (void)w, (void)err;
	pthread_mutex_lock(&b->mu);
	b->acquires++;
	pthread_mutex_unlock(&b->mu);
	((struct loop_lock *)lk)->held = 1;
	*out = (dlock_acquired){ .token = 1, .sent_ns = 0 };
	return DLOCK_OK;
}

static dlock_status loop_release(void *backend, void *lk, dlock_error *err)
{
	(void)backend, (void)err;
	((struct loop_lock *)lk)->held = 0;
	return DLOCK_OK;
}

static const dlock_driver loop_driver = {
	.abi_version = 2,
	.scheme = "loop",
	.lock_size = sizeof(struct loop_lock),
	.open = loop_open,
	.close = loop_close,
	.capabilities = loop_caps,
	.lock_init = loop_init,
	.release = loop_release,
	.try_acquire = loop_try,
	.disarm = loop_disarm,
};

/* Both methods, and capabilities that say the server queues: the core must call acquire(). */
static const dlock_driver loopq_driver = {
	.abi_version = 2,
	.scheme = "loopq",
	.lock_size = sizeof(struct loop_lock),
	.open = loop_open,
	.close = loop_close,
	.capabilities = loop_caps,
	.lock_init = loop_init,
	.acquire = loop_acquire,
	.release = loop_release,
	.try_acquire = loop_try,
	.disarm = loop_disarm,
};

/* ------------------------------------------------------------ helpers */

struct fixture {
	dlock_client *c;
	dlock_lock *l;
	struct loop *b;
};

static int open_fixture(struct fixture *f, const char *uri, enum answer a, int grant_at)
{
	f->c = dlock_test_open(uri, NULL, NULL);
	f->l = f->c ? dlock_test_new_lock(f->c, "n") : NULL;
	f->b = last_loop;
	if (!f->l)
		return 0;
	f->b->answer = a;
	f->b->grant_at = grant_at;
	return 1;
}

static void close_fixture(struct fixture *f)
{
	if (f->l)
		dlock_lock_free(f->l);
	if (f->c)
		dlock_client_close(f->c);
}

static int get_int(struct loop *b, const int *field)
{
	pthread_mutex_lock(&b->mu);
	int v = *field;
	pthread_mutex_unlock(&b->mu);
	return v;
}

/* The first attempt armed a wake-up. */
static int armed_once(void *arg)
{
	struct fixture *f = arg;
	pthread_mutex_lock(&f->b->mu);
	int armed = f->b->attempts >= 1 && f->b->armed_w != NULL;
	pthread_mutex_unlock(&f->b->mu);
	return armed;
}

static dlock_status acquire(dlock_lock *l, int64_t wait_ms)
{
	return dlock_test_acquire(l, wait_ms, 0, 0, NULL, NULL);
}

/* ------------------------------------------------------------ tests */

/* Polling: the sleeps grow from 1 ms, doubled, and stop growing at 50 ms; the deadline is ETIMEDOUT. */
static void test_backoff_grows_and_is_capped(void)
{
	struct fixture f;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", BUSY_POLL, 0));
	CU_ASSERT_EQUAL(acquire(f.l, 700), DLOCK_ETIMEDOUT);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(f.c), "loop: busy at attempt"));
	int n = f.b->attempts;
	CU_ASSERT(n >= 8); /* 1+2+4+8+16+32 ms, then 50 ms steps: about 18 in 700 ms */
	int64_t longest = 0;
	for (int i = 1; i < n && i < MAX_ATTEMPTS; i++) {
		int64_t gap = f.b->at_ns[i] - f.b->at_ns[i - 1];
		int64_t step = (int64_t)1000000 << (i - 1 < 6 ? i - 1 : 6);
		if (step > 50000000)
			step = 50000000;
		CU_ASSERT(gap >= step * 3 / 4); /* a sleep never ends early */
		if (i < n - 1 && gap > longest)
			longest = gap;
	}
	CU_ASSERT(longest < 400000000); /* capped (generously: a loaded machine adds delay, not 8x) */
	printf("\n    %d attempts in 700 ms, longest sleep %lld ms", n, (long long)(longest / 1000000));
	close_fixture(&f);
}

/* after_ms bounds a sleep from above: the holder's lease ends then. */
static void test_after_ms_bounds_the_sleep(void)
{
	struct fixture f;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", BUSY_AFTER, 0));
	f.b->after_ms = 2;
	CU_ASSERT_EQUAL(acquire(f.l, 600), DLOCK_ETIMEDOUT);
	/* 50 ms steps would give about 18; 2 ms ones up to 300. */
	CU_ASSERT(f.b->attempts > 40);
	close_fixture(&f);
}

/* Armed: the core sleeps until the driver wakes it, not polling meanwhile; then disarms once. */
static void test_armed_sleeps_until_woken(void)
{
	struct fixture f;
	dlock_test_waiter w;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", BUSY_ARMED, 2));
	dlock_test_waiter_start(&w, f.l, 30000, 0);
	CU_ASSERT_FATAL(dlock_test_await(armed_once, &f, 10000));
	dlock_test_sleep_ms(200); /* time in which a poller would have tried again: it must not */
	CU_ASSERT_EQUAL(get_int(f.b, &f.b->attempts), 1);
	pthread_mutex_lock(&f.b->mu);
	dlock_wait_wake(f.b->armed_w);
	pthread_mutex_unlock(&f.b->mu);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(f.b->attempts, 2);
	CU_ASSERT_EQUAL(f.b->disarms, 1);
	CU_ASSERT_EQUAL(dlock_release(f.l), DLOCK_OK);
	close_fixture(&f);
}

/* A wake-up that fires before the core sleeps is not lost. */
static void test_early_wake_not_lost(void)
{
	struct fixture f;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", BUSY_WOKEN, 2));
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(acquire(f.l, 20000), DLOCK_OK);
	CU_ASSERT(dlock_test_now_ms() - t0 < 10000); /* not the 20 s deadline */
	CU_ASSERT_EQUAL(f.b->attempts, 2);
	CU_ASSERT_EQUAL(f.b->disarms, 1);
	dlock_release(f.l);
	close_fixture(&f);
}

/* Armed after a first busy answer, with after_ms 0: tried again at once. */
static void test_arm_then_now(void)
{
	struct fixture f;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", ARM_THEN_NOW, 2));
	CU_ASSERT_EQUAL(acquire(f.l, 20000), DLOCK_OK);
	CU_ASSERT_EQUAL(f.b->attempts, 2);
	CU_ASSERT(f.b->at_ns[1] - f.b->at_ns[0] < 1000000000LL);
	CU_ASSERT_EQUAL(f.b->disarms, 1);
	dlock_release(f.l);
	close_fixture(&f);
}

/* disarm() once on every way out when armed; never when nothing was armed. */
static void test_disarm_on_every_exit(void)
{
	struct fixture f;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", BUSY_ARMED, 0));
	CU_ASSERT_EQUAL(acquire(f.l, 0), DLOCK_EBUSY); /* try once, armed: disarmed */
	CU_ASSERT_EQUAL(f.b->attempts, 1);
	CU_ASSERT_EQUAL(f.b->disarms, 1);
	CU_ASSERT_EQUAL(acquire(f.l, 50), DLOCK_ETIMEDOUT); /* the deadline, asleep until it */
	CU_ASSERT_EQUAL(f.b->attempts, 2);
	CU_ASSERT_EQUAL(f.b->disarms, 2);
	f.b->grant_at = 4;
	CU_ASSERT_EQUAL(acquire(f.l, 50), DLOCK_ETIMEDOUT); /* not woken, so never tried again */
	f.b->answer = BUSY_WOKEN;
	f.b->grant_at = 6;
	CU_ASSERT_EQUAL(acquire(f.l, 10000), DLOCK_OK); /* acquired, after an armed busy answer */
	CU_ASSERT_EQUAL(f.b->disarms, 4);
	dlock_release(f.l);
	f.b->answer = BUSY_POLL; /* nothing armed: no disarm */
	CU_ASSERT_EQUAL(acquire(f.l, 20), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(f.b->disarms, 4);
	f.b->answer = FAIL_HARD;
	CU_ASSERT_EQUAL(acquire(f.l, 1000), DLOCK_ESERVER);
	CU_ASSERT_EQUAL(f.b->disarms, 4);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(f.c), "loop: refused at attempt"));
	close_fixture(&f);
}

/* Cancelled while asleep on an armed wake-up: ECANCELED, disarmed once. */
static void test_cancel_while_armed(void)
{
	struct fixture f;
	dlock_test_waiter w;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", BUSY_ARMED, 0));
	dlock_test_waiter_start(&w, f.l, 30000, 0);
	CU_ASSERT_FATAL(dlock_test_await(armed_once, &f, 10000));
	CU_ASSERT_EQUAL(dlock_cancel(f.l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, 10000), DLOCK_ECANCELED);
	CU_ASSERT_EQUAL(f.b->disarms, 1);
	close_fixture(&f);
}

/* The client closes while an acquisition sleeps armed: cancelled, disarmed before close returns. */
static void test_close_while_armed(void)
{
	struct fixture f;
	dlock_test_waiter w;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", BUSY_ARMED, 0));
	dlock_test_waiter_start(&w, f.l, 30000, 0);
	CU_ASSERT_FATAL(dlock_test_await(armed_once, &f, 10000));
	int before = atomic_load(&disarms_total);
	CU_ASSERT_EQUAL(dlock_client_close(f.c), DLOCK_OK); /* frees the backend, after the acquire returned */
	CU_ASSERT_EQUAL(atomic_load(&disarms_total), before + 1);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, 10000), DLOCK_ECANCELED);
	dlock_lock_free(f.l);
}

/* A transient failure is tried again within the deadline and is the answer when it passes. */
static void test_transient_failure(void)
{
	struct fixture f;
	CU_ASSERT_FATAL(open_fixture(&f, "loop://", FAIL_TRANSIENT, 0));
	CU_ASSERT_EQUAL(acquire(f.l, 200), DLOCK_ECONNECT);
	CU_ASSERT(f.b->attempts > 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(f.c), "loop: unreachable at attempt"));
	f.b->attempts = 0;
	f.b->grant_at = 3; /* and it may pass */
	CU_ASSERT_EQUAL(acquire(f.l, 10000), DLOCK_OK);
	CU_ASSERT_EQUAL(f.b->attempts, 3);
	dlock_release(f.l);
	CU_ASSERT_EQUAL(acquire(f.l, 0), DLOCK_ECONNECT); /* try once: one attempt */
	close_fixture(&f);
}

/* A driver with both methods whose server queues gets acquire(); otherwise the loop. */
static void test_server_queue_gets_acquire(void)
{
	struct fixture f;
	CU_ASSERT_FATAL(open_fixture(&f, "loopq://", BUSY_POLL, 0));
	CU_ASSERT_EQUAL(acquire(f.l, 1000), DLOCK_OK);
	CU_ASSERT_EQUAL(f.b->acquires, 1);
	CU_ASSERT_EQUAL(f.b->attempts, 0);
	dlock_release(f.l);
	close_fixture(&f);
}

/* Registration: try_acquire alone is enough from version 2; a version-1 driver still needs acquire. */
static void test_registration(void)
{
	dlock_driver d = loop_driver;
	d.scheme = "loop-none";
	d.try_acquire = NULL;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	d.abi_version = 1;
	d.scheme = "loop-v1";
	d.try_acquire = loop_try; /* past a version-1 driver's struct: never read */
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
}

static void add_suites(void)
{
	if (dlock_register_driver(&loop_driver) != DLOCK_OK || dlock_register_driver(&loopq_driver) != DLOCK_OK) {
		fprintf(stderr, "test_wait_loop: cannot register the scripted drivers\n");
		exit(1);
	}
	CU_pSuite s = CU_add_suite("core waiting loop", NULL, NULL);
	CU_add_test(s, "polling: the backoff grows and is capped", test_backoff_grows_and_is_capped);
	CU_add_test(s, "after_ms bounds a sleep", test_after_ms_bounds_the_sleep);
	CU_add_test(s, "armed: sleeps until woken, then disarms", test_armed_sleeps_until_woken);
	CU_add_test(s, "a wake before the sleep is not lost", test_early_wake_not_lost);
	CU_add_test(s, "armed after a busy answer: tried again at once", test_arm_then_now);
	CU_add_test(s, "disarm once on every way out, never unarmed", test_disarm_on_every_exit);
	CU_add_test(s, "cancelled while armed: ECANCELED, disarmed", test_cancel_while_armed);
	CU_add_test(s, "client closed while armed: ECANCELED", test_close_while_armed);
	CU_add_test(s, "transient failure: retried, its status at the deadline", test_transient_failure);
	CU_add_test(s, "both methods and a server queue: acquire()", test_server_queue_gets_acquire);
	CU_add_test(s, "registration of try-only and version-1 drivers", test_registration);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
