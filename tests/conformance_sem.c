/*
 * Conformance: semaphores (dlock_semaphore_new()).  At most N holders of a
 * name across clients and processes, the (N+1)th waits and gets in when
 * one leaves, permits of one client, reentrancy and the thread that holds
 * every permit, slots and tokens, the lost-lock callback of a permit, a
 * holder that dies, one N per name, one kind per name, bad input, and
 * load across threads and processes.
 *
 * A backend without semaphores (DLOCK_FEATURE_SEMAPHORE is NONE) must
 * answer DLOCK_ENOTSUP from dlock_semaphore_new(); every test then says
 * SKIPPED and checks only that answer.
 */
#include "conformance.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Acquisitions in total of the load test, before DLOCK_TEST_SCALE. */
#define SEM_LOAD_TOTAL 1600
#define SEM_LOAD_PERMITS 3
#define SEM_CHILDREN 2
#define SEM_CLIENTS_PER_CHILD 8
#define SEM_THREADS_PER_CLIENT 2
#define SEM_SHORT_LEASE_MS 300
#define SEM_DEAD_LEASE_MS 1500

/* ------------------------------------------------------- helpers */

static int64_t feature_of(dlock_client *client, dlock_feature f)
{
	int64_t v = -1;
	CONF_ASSERT_ST(dlock_client_feature(client, f, &v), DLOCK_OK);
	return v;
}

/* 1 (and a SKIPPED line) when the backend has no semaphores; checks that it says so consistently. */
static int sem_unsupported(dlock_client *client)
{
	if (!client)
		return 1;
	if (feature_of(client, DLOCK_FEATURE_SEMAPHORE) != DLOCK_SEMAPHORE_NONE)
		return 0;
	dlock_lock *l = NULL;
	CONF_ASSERT_ST(dlock_semaphore_new(client, "sem-unsupported", 2, &l), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(l);
	CU_ASSERT_EQUAL(feature_of(client, DLOCK_FEATURE_PERMIT_FENCING), DLOCK_FENCING_NONE);
	dlock_test_skip_part("no semaphores on this backend (DLOCK_FEATURE_SEMAPHORE is none: DLOCK_ENOTSUP)");
	return 1;
}

static dlock_lock *sem_lock(dlock_client *client, const char *name, uint32_t permits)
{
	dlock_lock *l = NULL;
	if (client)
		CONF_ASSERT_ST(dlock_semaphore_new(client, name, permits, &l), DLOCK_OK);
	return l;
}

/* One acquire of `lock` on a thread of its own; releases at once when asked to. */
typedef struct sem_waiter {
	dlock_lock *lock;
	int64_t wait_ms;
	int release;
	pthread_t thread;
	atomic_int started;
	atomic_int done;
	dlock_status status;
} sem_waiter;

static void *sem_waiter_run(void *arg)
{
	sem_waiter *w = arg;
	atomic_store(&w->started, 1);
	w->status = conf_acquire(w->lock, w->wait_ms);
	if (w->status == DLOCK_OK && w->release)
		dlock_release(w->lock);
	atomic_store(&w->done, 1);
	return NULL;
}

static void sem_waiter_start(sem_waiter *w, dlock_lock *lock, int64_t wait_ms, int release)
{
	memset(w, 0, sizeof *w);
	w->lock = lock;
	w->wait_ms = wait_ms;
	w->release = release;
	if (pthread_create(&w->thread, NULL, sem_waiter_run, w) != 0)
		abort();
}

static int sem_waiter_done(void *arg)
{
	return atomic_load(&((sem_waiter *)arg)->done);
}

static dlock_status sem_waiter_join(sem_waiter *w)
{
	if (!dlock_test_await(sem_waiter_done, w, CONF_LONG_WAIT_MS))
		CU_FAIL("acquire did not return in time");
	pthread_join(w->thread, NULL);
	return w->status;
}

/* Await that a waiter is inside dlock_acquire() and has asked the server, then check it still waits. */
static void sem_waiter_blocked(sem_waiter *w, dlock_client *client, uint64_t base_server_acquires)
{
	dlock_test_count count = { client, base_server_acquires + 1 };
	CU_ASSERT(dlock_test_await(dlock_test_attempted, &count, CONF_AWAIT_MS));
	dlock_test_sleep_ms(100); /* let a wrong grant show */
	CU_ASSERT_FALSE(atomic_load(&w->done));
}

/* ------------------------------------------------------- tests */

/* The features agree with each other and with what dlock_semaphore_new() makes. */
static void test_sem_capabilities(void)
{
	dlock_client *client = conf_open();
	if (!sem_unsupported(client)) {
		int64_t order = feature_of(client, DLOCK_FEATURE_SEMAPHORE);
		CU_ASSERT(order == DLOCK_SEMAPHORE_FIFO || order == DLOCK_SEMAPHORE_UNORDERED);
		int64_t pf = feature_of(client, DLOCK_FEATURE_PERMIT_FENCING);
		CU_ASSERT(pf == DLOCK_FENCING_NONE || pf == conf_caps()->fencing);
		CU_ASSERT_STRING_EQUAL(dlock_semaphore_order_name((dlock_semaphore_order)order),
		                       order == DLOCK_SEMAPHORE_FIFO ? "fifo" : "unordered");
		char name[128];
		conf_name(name, sizeof name, "sem-caps");
		dlock_lock *l = sem_lock(client, name, 5);
		CU_ASSERT_EQUAL(dlock_lock_get_kind(l), DLOCK_KIND_SEMAPHORE);
		CU_ASSERT_EQUAL(dlock_lock_permits(l), 5);
		CU_ASSERT_EQUAL(dlock_lock_get_permits(l), 5); /* the earlier name */
		dlock_lock_free(l);
	}
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_SEMAPHORE), "semaphore");
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_PERMIT_FENCING), "permit-fencing");
	CU_ASSERT_STRING_EQUAL(dlock_semaphore_order_name(DLOCK_SEMAPHORE_NONE), "none");
	CU_ASSERT_EQUAL(dlock_lock_permits(NULL), 0);
	conf_close(client);
}

/* N clients hold at once; the (N+1)th is refused, then waits and gets in when one leaves. */
static void test_sem_limit(void)
{
	enum { N = 3 };
	dlock_client *c[N + 1] = { NULL };
	dlock_lock *l[N + 1] = { NULL };
	char name[128];
	conf_name(name, sizeof name, "sem-limit");
	for (int i = 0; i <= N; i++)
		c[i] = conf_open();
	if (sem_unsupported(c[0]) || !c[N])
		goto done;
	for (int i = 0; i <= N; i++)
		l[i] = sem_lock(c[i], name, N);
	for (int i = 0; i < N; i++)
		CONF_ASSERT_ST(conf_acquire(l[i], 0), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(l[N], 0), DLOCK_EBUSY);
	uint64_t base = conf_stats(c[N]).server_acquires;
	sem_waiter w;
	sem_waiter_start(&w, l[N], CONF_LONG_WAIT_MS, 0);
	sem_waiter_blocked(&w, c[N], base);
	CONF_ASSERT_ST(dlock_release(l[1]), DLOCK_OK);
	CONF_ASSERT_ST(sem_waiter_join(&w), DLOCK_OK);
	/* Full again: N holders. */
	CONF_ASSERT_ST(conf_acquire(l[1], 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(l[N]), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(l[1], CONF_LONG_WAIT_MS), DLOCK_OK);
	for (int i = 0; i < N; i++)
		CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
done:
	for (int i = 0; i <= N; i++) {
		dlock_lock_free(l[i]);
		conf_close(c[i]);
	}
}

/* Permits of one client: several of its handles hold at once, and with N = 1 the second waits for the
 * first (a session that holds the permit must not be handed it again). */
static void test_sem_one_client(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128], one[128];
	conf_name(name, sizeof name, "sem-client");
	conf_name(one, sizeof one, "sem-one");
	if (sem_unsupported(a) || !b)
		goto done;
	dlock_lock *h1 = sem_lock(a, name, 2), *h2 = sem_lock(a, name, 2), *h3 = sem_lock(a, name, 2);
	dlock_lock *other = sem_lock(b, name, 2);
	CONF_ASSERT_ST(conf_acquire(h1, 0), DLOCK_OK);
	/* Another thread of the same client takes the second permit. */
	sem_waiter w;
	sem_waiter_start(&w, h2, 0, 0);
	CONF_ASSERT_ST(sem_waiter_join(&w), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(other, 0), DLOCK_EBUSY);
	sem_waiter_start(&w, h3, 0, 0);
	CONF_ASSERT_ST(sem_waiter_join(&w), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(h2), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(other, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(h1), DLOCK_OK);
	dlock_lock_free(h1);
	dlock_lock_free(h2);
	dlock_lock_free(h3);
	dlock_lock_free(other);

	dlock_lock *p = sem_lock(a, one, 1), *q = sem_lock(a, one, 1);
	CONF_ASSERT_ST(conf_acquire(p, 0), DLOCK_OK);
	uint64_t base = conf_stats(a).server_acquires;
	sem_waiter_start(&w, q, CONF_LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(200); /* a wrong grant would show now */
	CU_ASSERT_FALSE(atomic_load(&w.done));
	CU_ASSERT_EQUAL(conf_stats(a).server_acquires, base); /* it waits in the client, for its own permit */
	CONF_ASSERT_ST(dlock_release(p), DLOCK_OK);
	CONF_ASSERT_ST(sem_waiter_join(&w), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(q), DLOCK_OK);
	dlock_lock_free(p);
	dlock_lock_free(q);
done:
	conf_close(a);
	conf_close(b);
}

/* Reentry takes no second permit; a thread may hold several permits, not every permit of its client. */
static void test_sem_reentrancy(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-reentry");
	if (sem_unsupported(a) || !b)
		goto done;
	dlock_lock *h1 = sem_lock(a, name, 2), *h2 = sem_lock(a, name, 2), *h3 = sem_lock(a, name, 2);
	dlock_lock *other = sem_lock(b, name, 2);
	CONF_ASSERT_ST(conf_acquire(h1, 0), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(h1, 0), DLOCK_OK); /* depth 2, still one permit */
	CONF_ASSERT_ST(conf_acquire(other, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(h2, 0), DLOCK_OK); /* this thread's second permit */
	CONF_ASSERT_ST(conf_acquire(h3, 0), DLOCK_EBUSY);
#ifdef DLOCK_CONFORMANCE_LOOP
	/* Loop mode: no thread holds the permits (reentrancy is per handle, dlock/loop.h): a third handle waits. */
	CONF_ASSERT_ST(conf_acquire(h3, 200), DLOCK_ETIMEDOUT);
#else
	CONF_ASSERT_ST(conf_acquire(h3, CONF_LONG_WAIT_MS), DLOCK_EDEADLK);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "every permit"));
#endif
	CONF_ASSERT_ST(dlock_release(h1), DLOCK_OK); /* depth 1 */
	CONF_ASSERT_ST(conf_acquire(other, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(h1), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(h1), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(conf_acquire(other, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(h2), DLOCK_OK);
	dlock_lock_free(h1);
	dlock_lock_free(h2);
	dlock_lock_free(h3);
	dlock_lock_free(other);
done:
	conf_close(a);
	conf_close(b);
}

/* Live permits have distinct slots below N and tokens that only go up; without permit fencing, neither. */
static void test_sem_fencing(void)
{
	enum { N = 3 };
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-fence");
	if (sem_unsupported(a) || !b)
		goto done;
	int fenced = feature_of(a, DLOCK_FEATURE_PERMIT_FENCING) != DLOCK_FENCING_NONE;
	dlock_lock *l[N];
	for (int i = 0; i < N; i++)
		l[i] = sem_lock(i % 2 ? b : a, name, N);
	uint64_t last = 0;
	unsigned seen = 0;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < N; i++) {
			if (round > 0 && i != round % N)
				continue; /* one permit changes hands per round, the others stay */
			if (round > 0)
				CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
			CONF_ASSERT_ST(conf_acquire(l[i], 0), DLOCK_OK);
			uint64_t token = 0;
			uint32_t slot = 0;
			if (!fenced) {
				CONF_ASSERT_ST(dlock_lock_fencing_token(l[i], &token), DLOCK_ENOTSUP);
				CONF_ASSERT_ST(dlock_lock_permit_slot(l[i], &slot), DLOCK_ENOTSUP);
				continue;
			}
			CONF_ASSERT_ST(dlock_lock_fencing_token(l[i], &token), DLOCK_OK);
			CU_ASSERT(token > last);
			last = token;
		}
		if (!fenced)
			continue;
		seen = 0;
		for (int i = 0; i < N; i++) {
			uint32_t slot = N;
			CONF_ASSERT_ST(dlock_lock_permit_slot(l[i], &slot), DLOCK_OK);
			CU_ASSERT(slot < N);
			if (slot < N) {
				CU_ASSERT_FALSE(seen & (1u << slot));
				seen |= 1u << slot;
			}
		}
	}
	for (int i = 0; i < N; i++) {
		CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
		uint32_t slot;
		CONF_ASSERT_ST(dlock_lock_permit_slot(l[i], &slot), fenced ? DLOCK_ENOTHELD : DLOCK_ENOTSUP);
		dlock_lock_free(l[i]);
	}
	dlock_lock *m = conf_lock(a, name);
	uint32_t slot;
	CONF_ASSERT_ST(dlock_lock_permit_slot(m, &slot), DLOCK_ENOTSUP);
	CONF_ASSERT_ST(dlock_lock_permit_slot(m, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_lock_permit_slot(NULL, &slot), DLOCK_EINVAL);
	dlock_lock_free(m);
done:
	conf_close(a);
	conf_close(b);
}

/* A waiter gives up at its deadline, a cancelled one at once, and the handle then acquires as usual. */
static void test_sem_cancel_timeout(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-cancel");
	if (sem_unsupported(a) || !b)
		goto done;
	dlock_lock *held = sem_lock(a, name, 1), *w = sem_lock(b, name, 1);
	CONF_ASSERT_ST(conf_acquire(held, 0), DLOCK_OK);
	int64_t t0 = dlock_test_now_ms();
	CONF_ASSERT_ST(conf_acquire(w, 300), DLOCK_ETIMEDOUT);
	int64_t took = dlock_test_now_ms() - t0;
	CU_ASSERT(took >= 290 && took < 300 + CONF_SLACK_MS);
	uint64_t base = conf_stats(b).server_acquires;
	sem_waiter waiter;
	sem_waiter_start(&waiter, w, DLOCK_WAIT_FOREVER, 0);
	sem_waiter_blocked(&waiter, b, base);
	CONF_ASSERT_ST(dlock_cancel(w), DLOCK_OK);
	CONF_ASSERT_ST(sem_waiter_join(&waiter), DLOCK_ECANCELED);
	CONF_ASSERT_ST(dlock_release(held), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(w, CONF_LONG_WAIT_MS), DLOCK_OK); /* nothing of the cancelled wait is left */
	CONF_ASSERT_ST(conf_acquire(held, 0), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(w), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(held, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(held), DLOCK_OK);
	dlock_lock_free(held);
	dlock_lock_free(w);
done:
	conf_close(a);
	conf_close(b);
}

/* Many permits of one client at once, on a name of the longest length with bytes that no key, path or
 * SQL may take as they are, and the most permits a semaphore may have (madelson's high ticket count). */
static void test_sem_many_permits(void)
{
	enum { HANDLES = 20 };
	dlock_client *a = conf_open(), *b = conf_open();
	if (sem_unsupported(a) || !b)
		goto done;
	static char name[DLOCK_NAME_MAX + 1];
	char tag[128];
	conf_name(tag, sizeof tag, "sem-many");
	memset(name, 'x', DLOCK_NAME_MAX);
	memcpy(name, tag, strlen(tag));
	memcpy(name + DLOCK_NAME_MAX - 7, "/%'\"\xff:{", 7); /* 7 bytes, the NUL left out */
	name[DLOCK_NAME_MAX] = '\0';
	int fenced = feature_of(a, DLOCK_FEATURE_PERMIT_FENCING) != DLOCK_FENCING_NONE;
	dlock_lock *l[HANDLES];
	uint32_t slots[HANDLES];
	for (int i = 0; i < HANDLES; i++) {
		l[i] = sem_lock(a, name, DLOCK_PERMITS_MAX);
		CONF_ASSERT_ST(conf_acquire(l[i], 0), DLOCK_OK);
		slots[i] = DLOCK_PERMITS_MAX;
		if (fenced)
			CONF_ASSERT_ST(dlock_lock_permit_slot(l[i], &slots[i]), DLOCK_OK);
	}
	for (int i = 0; fenced && i < HANDLES; i++) {
		CU_ASSERT(slots[i] < DLOCK_PERMITS_MAX);
		for (int k = 0; k < i; k++)
			CU_ASSERT(slots[k] != slots[i]);
	}
	dlock_lock *other = sem_lock(b, name, DLOCK_PERMITS_MAX);
	CONF_ASSERT_ST(conf_acquire(other, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
	for (int i = 0; i < HANDLES; i++) {
		CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
		dlock_lock_free(l[i]);
	}
	dlock_lock_free(other);
done:
	conf_close(a);
	conf_close(b);
}

/* Closing a client gives back its permits: a waiter elsewhere gets in (Curator's client close). */
static void test_sem_close_releases(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-close");
	if (sem_unsupported(a) || !b)
		goto done;
	dlock_lock *p1 = sem_lock(a, name, 2), *p2 = sem_lock(a, name, 2), *w = sem_lock(b, name, 2);
	CONF_ASSERT_ST(conf_acquire(p1, 0), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(p2, 0), DLOCK_OK);
	uint64_t base = conf_stats(b).server_acquires;
	sem_waiter waiter;
	sem_waiter_start(&waiter, w, CONF_LONG_WAIT_MS, 0);
	sem_waiter_blocked(&waiter, b, base);
	conf_close(a); /* with both permits held */
	a = NULL;
	CONF_ASSERT_ST(sem_waiter_join(&waiter), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(p1), DLOCK_ENOTHELD);
	dlock_lock_free(p1);
	dlock_lock_free(p2);
	CONF_ASSERT_ST(dlock_release(w), DLOCK_OK);
	dlock_lock_free(w);
done:
	conf_close(a);
	conf_close(b);
}

static void lost_cb(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	dlock_test_on_lost(lock, reason, detail, userdata);
}

/* A permit whose lease runs out is reported lost once, and a waiter then gets it. */
static void test_sem_lost_permit(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-lost");
	if (sem_unsupported(a) || !b)
		goto done;
	if (conf_caps()->lease != DLOCK_LEASE_TTL) {
		dlock_test_skip_part("held by session: a permit is lost only with its session");
		goto done;
	}
	dlock_lock *p = sem_lock(a, name, 1), *w = sem_lock(b, name, 1);
	dlock_test_lost lost;
	memset(&lost, 0, sizeof lost);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.lease_ms = SEM_SHORT_LEASE_MS;
	o.renewal = DLOCK_OFF;
	o.on_lost = lost_cb;
	o.lost_userdata = &lost;
	CONF_ASSERT_ST(dlock_acquire(p, &o), DLOCK_OK);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, SEM_SHORT_LEASE_MS + CONF_AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_EXPIRED);
	CONF_ASSERT_ST(conf_acquire(w, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(p), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_release(w), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	dlock_lock_free(p);
	dlock_lock_free(w);
done:
	conf_close(a);
	conf_close(b);
}

static int flag_set(void *arg)
{
	return atomic_load((atomic_int *)arg) != 0;
}

/* A process that dies holding a permit frees it after its lease or with its session. */
static void test_sem_holder_dies(void)
{
	char name[128];
	conf_name(name, sizeof name, "sem-dies");
	dlock_client *a = conf_open();
	if (sem_unsupported(a))
		goto done;
	if (conf_caps()->scope == DLOCK_SCOPE_PROCESS) {
		dlock_test_skip_part("one process: a holder cannot die apart from its waiters");
		goto done;
	}
	/* Fork with no client open: a client's threads do not survive fork (TSan stops the child). */
	conf_close(a);
	a = NULL;
	atomic_int *holding = dlock_test_shared_alloc(sizeof *holding);
	fflush(NULL);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		dlock_client *cc = NULL;
		dlock_lock *cl = NULL;
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = CONF_LONG_WAIT_MS;
		o.lease_ms = SEM_DEAD_LEASE_MS;
		if (dlock_client_open(&cc, conf_uri(), NULL, NULL, 0) != DLOCK_OK ||
		    dlock_semaphore_new(cc, name, 1, &cl) != DLOCK_OK || dlock_acquire(cl, &o) != DLOCK_OK)
			_exit(1);
		atomic_store(holding, 1);
		for (;;)
			pause(); /* killed here, holding the permit */
	}
	CU_ASSERT(dlock_test_await(flag_set, holding, CONF_AWAIT_MS));
	a = conf_open();
	dlock_lock *l = sem_lock(a, name, 1);
	CONF_ASSERT_ST(conf_acquire(l, 0), DLOCK_EBUSY);
	kill(pid, SIGKILL);
	int status = 0;
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	int64_t t0 = dlock_test_now_ms();
	CONF_ASSERT_ST(conf_acquire(l, CONF_LONG_WAIT_MS), DLOCK_OK);
	printf("\n    the dead holder's permit was free after %lld ms", (long long)(dlock_test_now_ms() - t0));
	CONF_ASSERT_ST(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_test_shared_free(holding, sizeof *holding);
done:
	conf_close(a);
}

/* All users of a name agree on N: another N is refused while the name is in use, in one client and
 * across clients, with both numbers said; once free, a new N applies. */
static void test_sem_permits_agree(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-agree");
	if (sem_unsupported(a) || !b)
		goto done;
	dlock_lock *two = sem_lock(a, name, 2), *three_a = sem_lock(a, name, 3), *three_b = sem_lock(b, name, 3);
	CONF_ASSERT_ST(conf_acquire(two, 0), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(three_a, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "2"));
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "3"));
	CONF_ASSERT_ST(conf_acquire(three_b, 0), DLOCK_EKIND);
	printf("\n    %s", dlock_client_errmsg(b));
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(b), "2"));
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(b), "3"));
	CONF_ASSERT_ST(conf_acquire(three_b, 1000), DLOCK_EKIND); /* a waiting acquire too, at once */
	CONF_ASSERT_ST(dlock_release(two), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(three_b, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(two, 0), DLOCK_EKIND);
	CONF_ASSERT_ST(conf_acquire(three_a, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(three_a), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(three_b), DLOCK_OK);
	dlock_lock_free(two);
	dlock_lock_free(three_a);
	dlock_lock_free(three_b);
done:
	conf_close(a);
	conf_close(b);
}

/* A semaphore and a mutex (or a read-write lock) on one name never hold it together: refused with
 * DLOCK_EKIND, or excluded by the server. */
static void test_sem_kind(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-kind");
	if (sem_unsupported(a) || !b)
		goto done;
	dlock_lock *m = conf_lock(a, name), *same = sem_lock(a, name, 2), *s = sem_lock(b, name, 2);
	dlock_lock *m2 = conf_lock(b, name);
	CONF_ASSERT_ST(conf_acquire(m, 0), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(same, 0), DLOCK_EKIND);
	CONF_ASSERT_ST2(conf_acquire(s, 0), DLOCK_EKIND, DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(m), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(s, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST2(conf_acquire(m, 0), DLOCK_EKIND, DLOCK_EBUSY);
	CONF_ASSERT_ST(conf_acquire(m2, 0), DLOCK_EKIND);
	int64_t rw = feature_of(a, DLOCK_FEATURE_RWLOCK);
	if (rw != DLOCK_RWLOCK_NONE) {
		dlock_lock *r = NULL;
		CONF_ASSERT_ST(dlock_rwlock_new(a, name, &r), DLOCK_OK);
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = 0;
		o.mode = DLOCK_MODE_SHARED;
		CONF_ASSERT_ST2(dlock_acquire(r, &o), DLOCK_EKIND, DLOCK_EBUSY);
		o.mode = DLOCK_MODE_EXCLUSIVE;
		CONF_ASSERT_ST2(dlock_acquire(r, &o), DLOCK_EKIND, DLOCK_EBUSY);
		dlock_lock_free(r);
	}
	CONF_ASSERT_ST(dlock_release(s), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(m, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(m), DLOCK_OK);
	dlock_lock_free(m);
	dlock_lock_free(m2);
	dlock_lock_free(same);
	dlock_lock_free(s);
done:
	conf_close(a);
	conf_close(b);
}

/* NULL arguments, N out of range, an empty name, shared mode on a semaphore. */
static void test_sem_bad_input(void)
{
	dlock_client *a = conf_open();
	char name[128];
	conf_name(name, sizeof name, "sem-input");
	dlock_lock *l = NULL;
	CONF_ASSERT_ST(dlock_semaphore_new(NULL, name, 2, &l), DLOCK_EINVAL);
	if (sem_unsupported(a))
		goto done;
	CONF_ASSERT_ST(dlock_semaphore_new(a, NULL, 2, &l), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_semaphore_new(a, name, 2, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_semaphore_new(a, "", 2, &l), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(l);
	CONF_ASSERT_ST(dlock_semaphore_new(a, name, 0, &l), DLOCK_EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "permits"));
	CONF_ASSERT_ST(dlock_semaphore_new(a, name, DLOCK_PERMITS_MAX + 1, &l), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_semaphore_new(a, name, UINT32_MAX, &l), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(l);
	l = sem_lock(a, name, DLOCK_PERMITS_MAX);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.mode = DLOCK_MODE_SHARED;
	CONF_ASSERT_ST(dlock_acquire(l, &o), DLOCK_EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "permit"));
	o.mode = DLOCK_MODE_EXCLUSIVE;
	CONF_ASSERT_ST(dlock_acquire(l, &o), DLOCK_OK); /* the most permits a semaphore may have */
	CONF_ASSERT_ST(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
done:
	conf_close(a);
}

/* ------------------------------------------------------- load */

/*
 * Who is inside, in memory shared with the children: more than N holders
 * at once is a violation.  The sequentially consistent counter makes sure
 * that of N + 1 holders that overlap, the last to enter sees the others.
 */
typedef struct sem_record {
	atomic_int inside;
	atomic_int most;
	atomic_uint violations;
	atomic_uint acquisitions;
	atomic_int ready;
	int children;      /* set before the fork, as the two below */
	const char *name;
	size_t per_thread;
	atomic_int failed; /* a dlock_status + 1 of the first failure, 0 if none */
} sem_record;

static void sem_fail(sem_record *rec, dlock_status st)
{
	int none = 0;
	atomic_compare_exchange_strong(&rec->failed, &none, (int)st + 1);
}

typedef struct sem_worker {
	dlock_client *client;
	const char *name;
	size_t iterations;
	sem_record *rec;
	pthread_t thread;
} sem_worker;

static void *sem_worker_run(void *arg)
{
	sem_worker *w = arg;
	dlock_lock *l = NULL;
	dlock_status st = dlock_semaphore_new(w->client, w->name, SEM_LOAD_PERMITS, &l);
	if (st != DLOCK_OK) {
		sem_fail(w->rec, st);
		return NULL;
	}
	for (size_t i = 0; i < w->iterations; i++) {
		st = conf_acquire(l, CONF_LONG_WAIT_MS);
		if (st != DLOCK_OK)
			break;
		int n = atomic_fetch_add(&w->rec->inside, 1) + 1;
		if (n > SEM_LOAD_PERMITS)
			atomic_fetch_add(&w->rec->violations, 1);
		int most = atomic_load(&w->rec->most);
		while (n > most && !atomic_compare_exchange_weak(&w->rec->most, &most, n))
			;
		sched_yield(); /* widen the window an overlap would show in */
		atomic_fetch_add(&w->rec->acquisitions, 1);
		atomic_fetch_sub(&w->rec->inside, 1);
		st = dlock_release(l);
		if (st != DLOCK_OK)
			break;
	}
	if (st != DLOCK_OK)
		sem_fail(w->rec, st);
	dlock_lock_free(l);
	return NULL;
}

static int sem_all_ready(void *arg)
{
	sem_record *rec = arg;
	return atomic_load(&rec->ready) >= rec->children;
}

/* A child: SEM_CLIENTS_PER_CHILD clients, each with SEM_THREADS_PER_CLIENT threads. */
static int sem_child(int index, void *arg)
{
	sem_record *rec = arg;
	const char *name = rec->name;
	size_t per_thread = rec->per_thread;
	(void)index;
	dlock_client *clients[SEM_CLIENTS_PER_CHILD] = { NULL };
	sem_worker workers[SEM_CLIENTS_PER_CHILD * SEM_THREADS_PER_CLIENT];
	int rc = 0;
	for (int c = 0; c < SEM_CLIENTS_PER_CHILD; c++) {
		dlock_status st = dlock_client_open(&clients[c], conf_uri(), NULL, NULL, 0);
		if (st != DLOCK_OK) {
			sem_fail(rec, st);
			rc = 1;
		}
	}
	atomic_fetch_add(&rec->ready, 1);
	if (rc)
		goto out;
	dlock_test_await(sem_all_ready, rec, CONF_AWAIT_MS);
	for (int i = 0; i < SEM_CLIENTS_PER_CHILD * SEM_THREADS_PER_CLIENT; i++) {
		workers[i] = (sem_worker){ .client = clients[i / SEM_THREADS_PER_CLIENT], .name = name,
		                           .iterations = per_thread, .rec = rec };
		if (pthread_create(&workers[i].thread, NULL, sem_worker_run, &workers[i]) != 0)
			abort();
	}
	for (int i = 0; i < SEM_CLIENTS_PER_CHILD * SEM_THREADS_PER_CLIENT; i++)
		pthread_join(workers[i].thread, NULL);
out:
	for (int c = 0; c < SEM_CLIENTS_PER_CHILD; c++)
		if (clients[c] && dlock_client_close(clients[c]) != DLOCK_OK)
			rc = 1;
	return rc || atomic_load(&rec->failed) ? 1 : 0;
}

/* Processes, clients and threads take permits of one name; never more than N inside at once. */
static void test_sem_load(void)
{
	dlock_client *probe = conf_open();
	int unsupported = sem_unsupported(probe);
	conf_close(probe);
	if (unsupported)
		return;
	char name[128];
	conf_name(name, sizeof name, "sem-load");
	/* Clients of two processes contend only where the scope is wider than one process. */
	int children = conf_caps()->scope == DLOCK_SCOPE_PROCESS ? 1 : SEM_CHILDREN;
	size_t threads = (size_t)children * SEM_CLIENTS_PER_CHILD * SEM_THREADS_PER_CLIENT;
	size_t per_thread = conf_scaled(SEM_LOAD_TOTAL) / threads + 1;
	sem_record *rec = dlock_test_shared_alloc(sizeof *rec);
	rec->children = children;
	rec->name = name;
	rec->per_thread = per_thread;
	conf_run_children(children, sem_child, rec);
	int failed = atomic_load(&rec->failed);
	if (failed)
		printf("\n    a worker failed: %s", dlock_status_name(failed - 1));
	CU_ASSERT_EQUAL(failed, 0);
	unsigned n = atomic_load(&rec->acquisitions);
	printf("\n    %u acquisitions by %zu threads of %d clients, at most %d holders at once (N = %d), "
	       "%u violations",
	       n, threads, children * SEM_CLIENTS_PER_CHILD, atomic_load(&rec->most), SEM_LOAD_PERMITS,
	       atomic_load(&rec->violations));
	CU_ASSERT_EQUAL(atomic_load(&rec->violations), 0);
	CU_ASSERT(atomic_load(&rec->most) <= SEM_LOAD_PERMITS);
	CU_ASSERT_EQUAL(n, (unsigned)(per_thread * threads));
	dlock_test_shared_free(rec, sizeof *rec);
}

const conf_test conf_sem_tests[] = {
	{ "sem_capabilities", test_sem_capabilities },
	{ "sem_limit", test_sem_limit },
	{ "sem_one_client", test_sem_one_client },
	{ "sem_reentrancy", test_sem_reentrancy },
	{ "sem_fencing", test_sem_fencing },
	{ "sem_cancel_timeout", test_sem_cancel_timeout },
	{ "sem_many_permits", test_sem_many_permits },
	{ "sem_close_releases", test_sem_close_releases },
	{ "sem_lost_permit", test_sem_lost_permit },
	{ "sem_holder_dies", test_sem_holder_dies },
	{ "sem_permits_agree", test_sem_permits_agree },
	{ "sem_kind", test_sem_kind },
	{ "sem_bad_input", test_sem_bad_input },
	{ "sem_load", test_sem_load },
	{ NULL, NULL },
};
