/*
 * mem:// backend: namespaces, TTL leases, fencing, FIFO fairness and the
 * clean-up of waiters, through the public API.
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

/* A thread that acquires a lock and records when it got it. */
struct waiter {
	dlock_lock *lock;
	int64_t wait_ms;
	int release;               /* release at once after acquiring */
	atomic_int *order;         /* ticket dispenser, taken while holding */
	pthread_t thread;
	dlock_status status;
	int ticket;
	atomic_int done;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	w->status = acquire(w->lock, w->wait_ms, 0, -1);
	if (w->status == DLOCK_OK && w->order)
		w->ticket = atomic_fetch_add(w->order, 1);
	if (w->status == DLOCK_OK && w->release)
		dlock_release(w->lock);
	atomic_store(&w->done, 1);
	return NULL;
}

static void waiter_start(struct waiter *w, dlock_lock *lock, int64_t wait_ms, int release, atomic_int *order)
{
	w->lock = lock;
	w->wait_ms = wait_ms;
	w->release = release;
	w->order = order;
	w->ticket = -1;
	atomic_init(&w->done, 0);
	CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, waiter_main, w) == 0);
}

static dlock_status waiter_join(struct waiter *w)
{
	pthread_join(w->thread, NULL);
	return w->status;
}

/* --------------------------------------------------------------- URIs */

static void test_uri_invalid(void)
{
	static const char *const bad[] = {
		"mem://ns/path", "mem:///path", "mem://ns:5", "mem://a,b", "mem://user@ns",
		"mem://user:secret@ns", "mem://ns?foo=1",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		dlock_client *c = (dlock_client *)1;
		char errbuf[256] = "";
		dlock_status st = dlock_client_open(&c, bad[i], NULL, errbuf, sizeof errbuf);
		if (st != DLOCK_EURI)
			fprintf(stderr, "%s: %s\n", bad[i], dlock_status_name(st));
		CU_ASSERT_EQUAL(st, DLOCK_EURI);
		CU_ASSERT_PTR_NULL(c);
		CU_ASSERT(errbuf[0] != '\0');
		CU_ASSERT_PTR_NULL(strstr(errbuf, "secret"));
		dlock_client_close(st == DLOCK_OK ? c : NULL);
	}
}

/* mem:// separates by namespace; `prefix` would be ignored, so it is refused. */
static void test_uri_prefix(void)
{
	static const char *const bad[] = {
		"mem://t_prefix?prefix=a", "mem://?prefix=dlock", "mem://t_prefix?ttl=5s&prefix=b",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		dlock_client *c = NULL;
		char errbuf[512] = "";
		CU_ASSERT_EQUAL(dlock_client_open(&c, bad[i], NULL, errbuf, sizeof errbuf), DLOCK_EURI);
		CU_ASSERT_PTR_NULL(c);
		CU_ASSERT_PTR_NOT_NULL(strstr(errbuf, "prefix"));
		dlock_client_close(c);
	}
	dlock_client *c = dlock_test_open("mem://t_prefix?ttl=5s", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	dlock_client_close(c);
}

static void test_uri_valid(void)
{
	static const char *const good[] = { "mem://", "mem://t_uri", "mem://t_uri?ttl=5s&wait=1s" };
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		dlock_client *c = dlock_test_open(good[i], NULL, NULL);
		CU_ASSERT_PTR_NOT_NULL(c);
		dlock_client_close(c);
	}
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

/* Closing a client frees what it still held, for the other clients. */
static void test_close_releases(void)
{
	dlock_client *a = dlock_test_open("mem://t_close", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://t_close", NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *l = dlock_test_new_lock(a, "n");
	CU_ASSERT_FATAL(l != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(b, "n"), DLOCK_EBUSY);
	dlock_client_close(a);
	CU_ASSERT_EQUAL(dlock_test_probe(b, "n"), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	dlock_lock_free(l);
	dlock_client_close(b);
}

/* ---------------------------------------------------------------- TTL */

static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	(void)lock;
	(void)reason;
	(void)detail;
	atomic_store((atomic_int *)userdata, 1);
}

static int flag_set(void *arg)
{
	return atomic_load((atomic_int *)arg) != 0;
}

/* An expired lease lets another client in; the first one's release is then ENOTHELD. */
static void test_ttl_takeover(void)
{
	dlock_client *a = dlock_test_open("mem://t_ttl", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://t_ttl", NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = dlock_test_new_lock(a, "n"), *lb = dlock_test_new_lock(b, "n");
	CU_ASSERT_FATAL(la && lb);
	atomic_int lost;
	atomic_init(&lost, 0);

	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, 200, 0, on_lost, &lost), DLOCK_OK);
	uint64_t ta = dlock_test_token(la);
	CU_ASSERT_EQUAL(acquire(lb, 0, 0, -1), DLOCK_EBUSY);

	/* B waits and gets it when A's lease runs out, not before. */
	CU_ASSERT_EQUAL_FATAL(acquire(lb, LONG_WAIT_MS, 0, -1), DLOCK_OK);
	CU_ASSERT(dlock_test_now_ms() - t0 >= 200);
	CU_ASSERT(dlock_test_token(lb) > ta);

	/* A is told before it releases (a release would cancel the callback). */
	CU_ASSERT(dlock_test_await(flag_set, &lost, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_check(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	/* A's late release did not remove B's lock. */
	CU_ASSERT_EQUAL(dlock_check(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(a, "n"), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);

	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

static int waiter_done(void *arg)
{
	return atomic_load(&((struct waiter *)arg)->done);
}

/*
 * A lost handle lets the client's other handles of its name in at once;
 * another thread acquiring through the lost handle itself waits until the
 * handle's owner releases it, and does not hold up the others meanwhile.
 */
static void test_lost_handle_frees_name(void)
{
	dlock_client *a = dlock_test_open("mem://t_lost_local", NULL, NULL);
	CU_ASSERT_FATAL(a != NULL);
	dlock_lock *l1 = dlock_test_new_lock(a, "n"), *l2 = dlock_test_new_lock(a, "n");
	CU_ASSERT_FATAL(l1 && l2);
	atomic_int lost;
	atomic_init(&lost, 0);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l1, 0, 300, 0, on_lost, &lost), DLOCK_OK);

	struct waiter same, other;
	waiter_start(&same, l1, LONG_WAIT_MS, 0, NULL);
	dlock_test_sleep_ms(100); /* let it queue first: it must not hold up the next one */
	waiter_start(&other, l2, LONG_WAIT_MS, 0, NULL);
	CU_ASSERT(dlock_test_await(flag_set, &lost, AWAIT_MS));
	CU_ASSERT(dlock_test_await(waiter_done, &other, AWAIT_MS));
	CU_ASSERT_EQUAL(waiter_join(&other), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&same.done), 0);

	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_OK);
	CU_ASSERT(dlock_test_await(waiter_done, &same, AWAIT_MS));
	CU_ASSERT_EQUAL(waiter_join(&same), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(l1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_OK);

	dlock_lock_free(l1);
	dlock_lock_free(l2);
	dlock_client_close(a);
}

/* A lease that ran out is not ours even if nobody took the name. */
static void test_ttl_expired_untaken(void)
{
	dlock_client *a = dlock_test_open("mem://t_ttl2", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://t_ttl2", NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = dlock_test_new_lock(a, "n"), *lb = dlock_test_new_lock(b, "n");
	CU_ASSERT_FATAL(la && lb);
	CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 50, 0), DLOCK_OK);
	uint64_t ta = dlock_test_token(la);
	/* What is awaited here is time itself: the lease has to run out. */
	dlock_test_sleep_ms(100);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL_FATAL(acquire(lb, 0, 0, -1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_token(lb), ta + 1);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_extend(void)
{
	dlock_client *a = dlock_test_open("mem://t_extend", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://t_extend", NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = dlock_test_new_lock(a, "n");
	CU_ASSERT_FATAL(la != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 100, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(la, 10000), DLOCK_OK);
	/* Well past the first lease: the extension must keep B out. */
	dlock_test_sleep_ms(250);
	CU_ASSERT_EQUAL(dlock_test_probe(b, "n"), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_check(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(b, "n"), DLOCK_OK);
	dlock_lock_free(la);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* ------------------------------------------------------------ fencing */

static void test_fencing(void)
{
	dlock_client *a = dlock_test_open("mem://t_fence", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://t_fence", NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = dlock_test_new_lock(a, "n"), *lb = dlock_test_new_lock(b, "n");
	CU_ASSERT_FATAL(la && lb);
	uint64_t prev = 0;
	for (int i = 0; i < 10; i++) {
		dlock_lock *l = i % 2 ? lb : la;
		CU_ASSERT_EQUAL_FATAL(acquire(l, 0, 0, -1), DLOCK_OK);
		uint64_t t = dlock_test_token(l);
		CU_ASSERT(t > prev);
		prev = t;
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);

	/* The counter outlives every client that used the name. */
	dlock_client *c = dlock_test_open("mem://t_fence", NULL, NULL);
	dlock_lock *lc = dlock_test_new_lock(c, "n");
	CU_ASSERT_FATAL(lc != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(lc, 0, 0, -1), DLOCK_OK);
	CU_ASSERT(dlock_test_token(lc) > prev);
	CU_ASSERT_EQUAL(dlock_release(lc), DLOCK_OK);
	dlock_lock_free(lc);
	dlock_client_close(c);
}

/*
 * Acquire options of version 1 (before `fencing`) are still accepted and
 * mean the URI's fencing; an unknown version is refused.
 */
static void test_options_versions(void)
{
	dlock_client *c = dlock_test_open("mem://t_optver?fencing=off", NULL, NULL);
	dlock_lock *l = dlock_test_new_lock(c, "n");
	CU_ASSERT_FATAL(l != NULL);
	uint64_t token = 0;
	dlock_acquire_options v1 = DLOCK_ACQUIRE_OPTIONS_INIT;
	v1.version = 1;
	v1.wait_ms = 0;
	v1.fence = DLOCK_ON; /* not part of version 1: never read */
	CU_ASSERT_EQUAL(dlock_acquire(l, &v1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &token), DLOCK_ENOTSUP); /* the URI's fencing=off */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.fence = DLOCK_ON;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &token), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	o.version = DLOCK_ACQUIRE_OPTIONS_VERSION + 1;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_EVERSION);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* ------------------------------------------------------------- FIFO */

#define NWAITERS 5

/* Waiters of different clients get the lock in the order they queued. */
static void test_fifo(void)
{
	const char *uri = "mem://t_fifo";
	dlock_client *h = dlock_test_open(uri, NULL, NULL), *n = dlock_test_open(uri, NULL, NULL);
	struct probe p[NWAITERS];
	dlock_lock *l[NWAITERS];
	struct waiter w[NWAITERS];
	atomic_int order;
	atomic_init(&order, 0);
	CU_ASSERT_FATAL(h && n);
	dlock_lock *lh = dlock_test_new_lock(h, "n");
	CU_ASSERT_FATAL(lh != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(lh, 0, 0, -1), DLOCK_OK);

	for (int i = 0; i < NWAITERS; i++) {
		CU_ASSERT_FATAL(probe_open(&p[i], uri));
		l[i] = dlock_test_new_lock(p[i].client, "n");
		CU_ASSERT_FATAL(l[i] != NULL);
		/* The last one keeps the lock, so the queue cannot drain before the probe below. */
		waiter_start(&w[i], l[i], LONG_WAIT_MS, i < NWAITERS - 1, &order);
		/* Start the next one only once this one is in the queue. */
		CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p[i], AWAIT_MS));
	}
	CU_ASSERT_EQUAL(atomic_load(&order), 0);
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_OK);
	/* A newcomer never overtakes the queue, even while the name is free. */
	CU_ASSERT_EQUAL(dlock_test_probe(n, "n"), DLOCK_EBUSY);

	for (int i = 0; i < NWAITERS; i++) {
		CU_ASSERT_EQUAL(waiter_join(&w[i]), DLOCK_OK);
		CU_ASSERT_EQUAL(w[i].ticket, i);
	}
	CU_ASSERT_EQUAL(dlock_release(l[NWAITERS - 1]), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(n, "n"), DLOCK_OK);
	for (int i = 0; i < NWAITERS; i++) {
		dlock_lock_free(l[i]);
		probe_close(&p[i]);
	}
	dlock_lock_free(lh);
	dlock_client_close(h);
	dlock_client_close(n);
}

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
	waiter_start(&w, lw, LONG_WAIT_MS, 0, NULL);
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

	waiter_start(&w1, l1, LONG_WAIT_MS, 0, NULL);
	CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p1, AWAIT_MS));
	waiter_start(&w2, l2, LONG_WAIT_MS, 0, NULL);
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

/* A cancelled or timed-out waiter leaves nothing in the queue. */
static void test_waiter_cleanup(void)
{
	const char *uri = "mem://t_cleanup";
	dlock_client *h = dlock_test_open(uri, NULL, NULL), *n = dlock_test_open(uri, NULL, NULL);
	struct probe p;
	struct waiter w;
	CU_ASSERT_FATAL(h && n && probe_open(&p, uri));
	dlock_lock *lh = dlock_test_new_lock(h, "n"), *lw = dlock_test_new_lock(p.client, "n");
	CU_ASSERT_FATAL(lh && lw);

	CU_ASSERT_EQUAL_FATAL(acquire(lh, 0, 0, -1), DLOCK_OK);
	waiter_start(&w, lw, LONG_WAIT_MS, 0, NULL);
	CU_ASSERT_FATAL(dlock_test_await(probe_queued, &p, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_cancel(lw), DLOCK_OK);
	CU_ASSERT_EQUAL(waiter_join(&w), DLOCK_ECANCELED);
	CU_ASSERT_EQUAL(acquire(lw, 50, 0, -1), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(atomic_load(&p.queued), 2);
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_OK);

	/* A leftover queue entry would keep every newcomer out. */
	CU_ASSERT_EQUAL(dlock_test_probe(n, "n"), DLOCK_OK);
	dlock_lock_free(lh);
	dlock_lock_free(lw);
	dlock_client_close(h);
	dlock_client_close(n);
	probe_close(&p);
}

/* ------------------------------------------------------------ stress */

#define NSTRESS 4
#define ITERATIONS 300

struct stress {
	dlock_lock *lock;
	dlock_test_overlap *ov;
	int failures;
};

static void *stress_main(void *arg)
{
	struct stress *s = arg;
	for (int i = 0; i < ITERATIONS; i++) {
		if (acquire(s->lock, LONG_WAIT_MS, 0, -1) != DLOCK_OK) {
			s->failures++;
			continue;
		}
		/* The n-th holder of a fresh name (from 0) gets token n + 1. */
		uint64_t seq = dlock_test_overlap_enter(s->ov), t = 0;
		if (dlock_lock_fencing_token(s->lock, &t) != DLOCK_OK || t != seq + 1)
			s->failures++;
		dlock_test_overlap_leave(s->ov);
		if (dlock_release(s->lock) != DLOCK_OK)
			s->failures++;
	}
	return NULL;
}

/* Clients in several threads: never two holders, tokens in holding order. */
static void test_stress(void)
{
	dlock_client *c[NSTRESS];
	struct stress s[NSTRESS];
	pthread_t th[NSTRESS];
	dlock_test_overlap *ov = dlock_test_overlap_new();
	for (int i = 0; i < NSTRESS; i++) {
		c[i] = dlock_test_open("mem://t_stress", NULL, NULL);
		CU_ASSERT_FATAL(c[i] != NULL);
		s[i] = (struct stress){ .lock = dlock_test_new_lock(c[i], "n"), .ov = ov };
		CU_ASSERT_FATAL(s[i].lock != NULL);
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, stress_main, &s[i]) == 0);
	}
	for (int i = 0; i < NSTRESS; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(s[i].failures, 0);
		dlock_lock_free(s[i].lock);
		dlock_client_close(c[i]);
	}
	CU_ASSERT_EQUAL(dlock_test_overlap_violations(ov), 0);
	CU_ASSERT_EQUAL(dlock_test_overlap_count(ov), NSTRESS * ITERATIONS);
	dlock_test_overlap_free(ov);
}

/* ------------------------------------------------------------- main */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("mem", NULL, NULL);
	CU_add_test(s, "invalid URIs are EURI", test_uri_invalid);
	CU_add_test(s, "prefix is refused", test_uri_prefix);
	CU_add_test(s, "valid URIs open", test_uri_valid);
	CU_add_test(s, "capabilities", test_capabilities);
	CU_add_test(s, "namespaces contend only with themselves", test_namespaces);
	CU_add_test(s, "close releases held locks", test_close_releases);
	CU_add_test(s, "TTL expiry lets another client in", test_ttl_takeover);
	CU_add_test(s, "an expired lease is not held even if untaken", test_ttl_expired_untaken);
	CU_add_test(s, "a lost handle lets the client's other handles in", test_lost_handle_frees_name);
	CU_add_test(s, "extend keeps the lease", test_extend);
	CU_add_test(s, "fencing increases across clients and closes", test_fencing);
	CU_add_test(s, "acquire options of version 1 still work", test_options_versions);
	CU_add_test(s, "waiters of different clients are served FIFO", test_fifo);
	CU_add_test(s, "a newcomer does not overtake a waiter", test_no_barging);
	CU_add_test(s, "the next waiter takes over from one that leaves", test_waiter_leaves);
	CU_add_test(s, "cancelled and timed-out waiters leave no trace", test_waiter_cleanup);
	CU_add_test(s, "threads of several clients exclude each other", test_stress);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
