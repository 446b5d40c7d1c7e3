/*
 * mem:// backend: what is mem://'s own, through the public API: its
 * capabilities, namespaces, tokens that count the acquisitions of a name,
 * and its FIFO queue (a newcomer never overtakes a waiter; the next waiter
 * takes over from one that leaves).  The contract every backend keeps
 * (URIs, leases, fencing, exclusion, waiting, cancelling) is the
 * conformance suite's, which runs on mem:// too.
 *
 * Namespaces live as long as the process, so every test uses its own.  A
 * waiter is known to be queued in the backend when its client logs the
 * driver's "waiting" message (emitted after it joined the queue); tests
 * await that instead of sleeping.
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

/*
 * A client and what its log told us.  With `hold` set, the waiter is held
 * inside the log callback, after joining the queue and before it can look
 * at the lock again, until probe_hold(p, 0).
 */
struct probe {
	dlock_client *client;
	atomic_int queued; /* times the driver said it was waiting */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int hold;
};

static void probe_log(void *userdata, dlock_log_level level, const char *msg)
{
	struct probe *p = userdata;
	(void)level;
	if (!strstr(msg, "waiting"))
		return;
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add(&p->queued, 1);
	while (p->hold)
		pthread_cond_wait(&p->cond, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void probe_hold(struct probe *p, int hold)
{
	pthread_mutex_lock(&p->mu);
	p->hold = hold;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->mu);
}

static int probe_open(struct probe *p, const char *uri)
{
	atomic_init(&p->queued, 0);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->hold = 0;
	p->client = dlock_test_open(uri, probe_log, p);
	return p->client != NULL;
}

static void probe_close(struct probe *p)
{
	dlock_client_close(p->client);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->mu);
}

static int probe_queued(void *arg)
{
	return atomic_load(&((struct probe *)arg)->queued) > 0;
}

static dlock_status acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms, int renew)
{
	return dlock_test_acquire(l, wait_ms, lease_ms, renew, NULL, NULL);
}

/* A thread that acquires a lock. */
struct waiter {
	dlock_lock *lock;
	int64_t wait_ms;
	pthread_t thread;
	dlock_status status;
	atomic_int done;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	w->status = acquire(w->lock, w->wait_ms, 0, -1);
	atomic_store(&w->done, 1);
	return NULL;
}

static void waiter_start(struct waiter *w, dlock_lock *lock, int64_t wait_ms)
{
	w->lock = lock;
	w->wait_ms = wait_ms;
	atomic_init(&w->done, 0);
	CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, waiter_main, w) == 0);
}

static dlock_status waiter_join(struct waiter *w)
{
	pthread_join(w->thread, NULL);
	return w->status;
}

static void test_capabilities(void)
{
	dlock_client *c = dlock_test_open("mem://t_caps", NULL, NULL);
	dlock_capabilities caps;
	CU_ASSERT_FATAL(c != NULL);
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(caps.backend, "mem");
	CU_ASSERT_EQUAL(caps.consistency, DLOCK_CONSISTENCY_LOCAL);
	CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_STRICT);
	CU_ASSERT_EQUAL(caps.fair, 1);
	CU_ASSERT_EQUAL(caps.lease, DLOCK_LEASE_TTL);
	CU_ASSERT_EQUAL(caps.wakeup, DLOCK_WAKEUP_NOTIFY);
	CU_ASSERT_EQUAL(caps.scope, DLOCK_SCOPE_PROCESS);
	dlock_client_close(c);
}

/* --------------------------------------------------------- namespaces */

static void test_namespaces(void)
{
	dlock_client *a = dlock_test_open("mem://t_ns_a", NULL, NULL);
	dlock_client *a2 = dlock_test_open("mem://t_ns_a", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://t_ns_b", NULL, NULL);
	dlock_client *e = dlock_test_open("mem://", NULL, NULL);
	CU_ASSERT_FATAL(a && a2 && b && e);
	dlock_lock *l = dlock_test_new_lock(a, "name");
	CU_ASSERT_FATAL(l != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0, 0, -1), DLOCK_OK);

	/* Another namespace, and the empty one, do not see it. */
	CU_ASSERT_EQUAL(dlock_test_probe(b, "name"), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(e, "name"), DLOCK_OK);
	/* The same namespace from another client does. */
	CU_ASSERT_EQUAL(dlock_test_probe(a2, "name"), DLOCK_EBUSY);
	/* Other names of the same namespace are free. */
	CU_ASSERT_EQUAL(dlock_test_probe(a2, "name2"), DLOCK_OK);

	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(a2, "name"), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(a);
	dlock_client_close(a2);
	dlock_client_close(b);
	dlock_client_close(e);
}

/* ------------------------------------------------------------ tokens */

/*
 * A name's token counts its acquisitions: the n-th holder (from 1) gets n,
 * whichever client holds it, after every client that used the name has
 * closed, and after a lease that ran out with nobody taking the name.
 */
static void test_tokens_count(void)
{
	dlock_client *a = dlock_test_open("mem://t_count", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://t_count", NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = dlock_test_new_lock(a, "n"), *lb = dlock_test_new_lock(b, "n");
	CU_ASSERT_FATAL(la && lb);
	for (uint64_t n = 1; n <= 10; n++) {
		dlock_lock *l = n % 2 ? la : lb;
		CU_ASSERT_EQUAL_FATAL(acquire(l, 0, 0, -1), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_token(l), n);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);

	dlock_client *c = dlock_test_open("mem://t_count", NULL, NULL);
	dlock_lock *lc = dlock_test_new_lock(c, "n");
	CU_ASSERT_FATAL(lc != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(lc, 0, 50, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_token(lc), 11);
	/* What is awaited here is time itself: the lease has to run out. */
	dlock_test_sleep_ms(100);
	CU_ASSERT_EQUAL(dlock_release(lc), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL_FATAL(acquire(lc, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_token(lc), 12);
	CU_ASSERT_EQUAL(dlock_release(lc), DLOCK_OK);
	dlock_lock_free(lc);
	dlock_client_close(c);
}

/* ------------------------------------------------------------- FIFO */

/* A newcomer never takes a free name while an older waiter has not yet had its turn. */
static void test_no_barging(void)
{
	const char *uri = "mem://t_barging";
	dlock_client *h = dlock_test_open(uri, NULL, NULL), *n = dlock_test_open(uri, NULL, NULL);
	struct probe p;
	struct waiter w;
	CU_ASSERT_FATAL(h && n && probe_open(&p, uri));
	dlock_lock *lh = dlock_test_new_lock(h, "n"), *lw = dlock_test_new_lock(p.client, "n");
	dlock_lock *ln = dlock_test_new_lock(n, "n");
	CU_ASSERT_FATAL(lh && lw && ln);
	CU_ASSERT_EQUAL_FATAL(acquire(lh, 0, 0, -1), DLOCK_OK);

	/* The waiter queues, then stays held in its log callback. */
	probe_hold(&p, 1);
	waiter_start(&w, lw, LONG_WAIT_MS);
	CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_OK);
	/* The name is free now, but the waiter came first. */
	CU_ASSERT_EQUAL(acquire(ln, 0, 0, -1), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(acquire(ln, 50, 0, -1), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
	probe_hold(&p, 0);
	CU_ASSERT_EQUAL(waiter_join(&w), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lw), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(ln, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(ln), DLOCK_OK);

	dlock_lock_free(lh);
	dlock_lock_free(lw);
	dlock_lock_free(ln);
	dlock_client_close(h);
	dlock_client_close(n);
	probe_close(&p);
}

/* When the oldest waiter leaves, the next one takes over, also at the holder's expiry. */
static void test_waiter_leaves(void)
{
	const char *uri = "mem://t_leave";
	dlock_client *h = dlock_test_open(uri, NULL, NULL);
	struct probe p1, p2;
	struct waiter w1, w2;
	CU_ASSERT_FATAL(h && probe_open(&p1, uri) && probe_open(&p2, uri));
	dlock_lock *lh = dlock_test_new_lock(h, "n");
	dlock_lock *l1 = dlock_test_new_lock(p1.client, "n"), *l2 = dlock_test_new_lock(p2.client, "n");
	CU_ASSERT_FATAL(lh && l1 && l2);
	/* No release: the second waiter must wake by itself when this lease ends. */
	CU_ASSERT_EQUAL_FATAL(acquire(lh, 0, 1000, 0), DLOCK_OK);

	waiter_start(&w1, l1, LONG_WAIT_MS);
	CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p1, AWAIT_MS));
	waiter_start(&w2, l2, LONG_WAIT_MS);
	CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p2, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_cancel(l1), DLOCK_OK);
	CU_ASSERT_EQUAL(waiter_join(&w1), DLOCK_ECANCELED);
	CU_ASSERT_EQUAL(waiter_join(&w2), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_ENOTHELD);

	dlock_lock_free(lh);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	dlock_client_close(h);
	probe_close(&p1);
	probe_close(&p2);
}

/* ------------------------------------------------------------- main */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("mem", NULL, NULL);
	CU_add_test(s, "capabilities", test_capabilities);
	CU_add_test(s, "namespaces contend only with themselves", test_namespaces);
	CU_add_test(s, "a name's token counts its acquisitions, across clients and closes", test_tokens_count);
	CU_add_test(s, "a newcomer does not overtake a waiter", test_no_barging);
	CU_add_test(s, "the next waiter takes over from one that leaves", test_waiter_leaves);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
