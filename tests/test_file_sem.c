/*
 * file:// semaphores: permits across clients and processes, a killed
 * holder's permit freed with its descriptor, N agreed among the users of a
 * name, semaphores and mutexes on one name excluding each other, slots
 * unique among live permits, tokens increasing.
 *
 * Every test works in its own temporary directory.  Child processes are
 * forked only while the parent has no client open (clients are not
 * fork-safe); they report through shared memory and their exit status and
 * never call CUnit.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000 /* an acquire that must succeed: a hang becomes a failure */
#define AWAIT_MS 10000     /* awaiting a condition that must come true */
#define STILL_MS 150       /* how long a waiter that must not get in is watched */

/* ------------------------------------------------------------ helpers */

static dlock_client *open_dir(const char *dir)
{
	char uri[PATH_MAX + 16];
	snprintf(uri, sizeof uri, "file://%s", dir);
	return dlock_test_open(uri, NULL, NULL);
}

static dlock_lock *new_sem(dlock_client *c, const char *name, uint32_t n)
{
	dlock_lock *l = NULL;
	dlock_status st = c ? dlock_semaphore_new(c, name, n, &l) : DLOCK_EINVAL;
	if (st != DLOCK_OK)
		fprintf(stderr, "dlock_semaphore_new(%s, %u): %s %s\n", name, (unsigned)n, dlock_status_name(st),
		        c ? dlock_client_errmsg(c) : "");
	return l;
}

static dlock_status acquire(dlock_lock *l, int64_t wait_ms)
{
	return dlock_test_acquire(l, wait_ms, 0, -1, NULL, NULL);
}

static uint32_t slot_of(dlock_lock *l)
{
	uint32_t s = UINT32_MAX;
	CU_ASSERT_EQUAL(dlock_lock_permit_slot(l, &s), DLOCK_OK);
	return s;
}

/* ----------------------------------------------------------- features */

/* What the backend says of its semaphores, and the input the core refuses. */
static void test_features(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *c = open_dir(tmp);
	CU_ASSERT_FATAL(c != NULL);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_SEMAPHORE, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_SEMAPHORE_UNORDERED);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_PERMIT_FENCING, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_FENCING_STRICT);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_KIND_CHECK, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 0);

	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, "s", 0, &l), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(l);
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, "s", DLOCK_PERMITS_MAX + 1, &l), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(l);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "permits"));

	/* The largest N works, and its permit has a slot below N. */
	l = new_sem(c, "s", DLOCK_PERMITS_MAX);
	CU_ASSERT_FATAL(l != NULL);
	CU_ASSERT_EQUAL(dlock_lock_get_permits(l), DLOCK_PERMITS_MAX);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT(slot_of(l) < DLOCK_PERMITS_MAX);
	CU_ASSERT(dlock_test_token(l) >= 1);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);

	/* A permit is taken exclusive: shared is refused. */
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.mode = DLOCK_MODE_SHARED;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_EINVAL);

	/* Without a token: a slot all the same, and no write to the file. */
	o.mode = DLOCK_MODE_EXCLUSIVE;
	o.fence = DLOCK_OFF;
	uint64_t t = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &t), DLOCK_ENOTSUP);
	CU_ASSERT(slot_of(l) < DLOCK_PERMITS_MAX);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ---------------------------------------------------------- processes */

#define NPROC 3

/* What the children report, in shared memory. */
struct sem_report {
	atomic_int state[NPROC]; /* 0: running, 1: holds a permit, -1: failed */
	atomic_int release[NPROC]; /* set by the parent: release and exit */
	uint32_t slot[NPROC];
	uint64_t token[NPROC];
};

/* In child `i`: take a permit of "s" (N = NPROC), report it, hold it until told or killed. */
static void child_permit(const char *dir, struct sem_report *r, int i)
{
	dlock_client *c = open_dir(dir);
	dlock_lock *l = new_sem(c, "s", NPROC);
	if (!l || acquire(l, LONG_WAIT_MS) != DLOCK_OK || dlock_lock_permit_slot(l, &r->slot[i]) != DLOCK_OK ||
	    dlock_lock_fencing_token(l, &r->token[i]) != DLOCK_OK) {
		atomic_store(&r->state[i], -1);
		_exit(1);
	}
	atomic_store(&r->state[i], 1);
	while (!atomic_load(&r->release[i]))
		dlock_test_sleep_ms(2);
	int ok = dlock_release(l) == DLOCK_OK;
	dlock_lock_free(l);
	dlock_client_close(c);
	_exit(ok ? 0 : 1);
}

static int all_hold(void *arg)
{
	struct sem_report *r = arg;
	for (int i = 0; i < NPROC; i++)
		if (atomic_load(&r->state[i]) != 1)
			return 0;
	return 1;
}

static int exited_ok(pid_t pid)
{
	int status = 0;
	return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/*
 * N processes hold the N permits, each its own slot; the (N+1)th waits,
 * gets in when one releases (in the freed slot) and, once a holder is
 * killed, another contender gets the killed holder's slot.
 */
static void test_processes(void)
{
	char *tmp = dlock_test_mkdtemp();
	struct sem_report *r = dlock_test_shared_alloc(sizeof *r);
	pid_t pid[NPROC];
	for (int i = 0; i < NPROC; i++) {
		pid[i] = fork();
		CU_ASSERT_FATAL(pid[i] >= 0);
		if (pid[i] == 0)
			child_permit(tmp, r, i);
	}
	int held = dlock_test_await(all_hold, r, AWAIT_MS);
	CU_ASSERT_FATAL(held);
	for (int i = 0; i < NPROC; i++)
		for (int j = i + 1; j < NPROC; j++) {
			CU_ASSERT(r->slot[i] != r->slot[j]);
			CU_ASSERT(r->token[i] != r->token[j]);
		}

	dlock_client *a = open_dir(tmp), *b = open_dir(tmp);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = new_sem(a, "s", NPROC), *lb = new_sem(b, "s", NPROC);
	CU_ASSERT_FATAL(la && lb);
	CU_ASSERT_EQUAL(acquire(la, 0), DLOCK_EBUSY);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "permits"));

	/* The (N+1)th waits, and gets child 0's slot once child 0 releases. */
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, la, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(STILL_MS);
	CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
	uint64_t max_token = 0;
	for (int i = 0; i < NPROC; i++)
		max_token = r->token[i] > max_token ? r->token[i] : max_token;
	atomic_store(&r->release[0], 1);
	CU_ASSERT(exited_ok(pid[0]));
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(la), r->slot[0]);
	CU_ASSERT(w.token > max_token);

	/* Child 1 killed while holding: its permit goes with its descriptor. */
	CU_ASSERT_EQUAL(acquire(lb, 0), DLOCK_EBUSY);
	kill(pid[1], SIGKILL);
	waitpid(pid[1], NULL, 0);
	CU_ASSERT_EQUAL_FATAL(acquire(lb, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(lb), r->slot[1]);
	CU_ASSERT(dlock_test_token(lb) > w.token);

	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	atomic_store(&r->release[2], 1);
	CU_ASSERT(exited_ok(pid[2]));
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_test_shared_free(r, sizeof *r);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ---------------------------------------------------------- one client */

/* N = 1: a second permit of one client waits (in the client) and gets in after the release. */
static void test_one_client_n1(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *c = open_dir(tmp);
	dlock_lock *l1 = new_sem(c, "s", 1), *l2 = new_sem(c, "s", 1);
	CU_ASSERT_FATAL(l1 && l2);
	CU_ASSERT_EQUAL_FATAL(acquire(l1, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(l1), 0);
	CU_ASSERT_EQUAL(acquire(l2, 0), DLOCK_EBUSY);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, l2, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(STILL_MS);
	CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
	uint64_t t1 = dlock_test_token(l1);
	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(l2), 0);
	CU_ASSERT(w.token > t1);
	CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_OK);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	dlock_client_close(c);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/*
 * N = 2: two handles of one client hold both permits in two slots (the
 * client's second acquisition reaches the file while the first holds), a
 * third client finds none free, and dlock_check() sees each permit as its
 * own beside the other.
 */
static void test_one_client_n2(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *c = open_dir(tmp), *d = open_dir(tmp);
	dlock_lock *l1 = new_sem(c, "s", 2), *l2 = new_sem(c, "s", 2), *l3 = new_sem(d, "s", 2);
	CU_ASSERT_FATAL(l1 && l2 && l3);
	CU_ASSERT_EQUAL_FATAL(acquire(l1, 0), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire(l2, 0), DLOCK_OK);
	CU_ASSERT(slot_of(l1) < 2 && slot_of(l2) < 2);
	CU_ASSERT(slot_of(l1) != slot_of(l2));
	CU_ASSERT(dlock_test_token(l2) > dlock_test_token(l1));
	CU_ASSERT_EQUAL(dlock_check(l1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(l2), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(l3, 0), DLOCK_EBUSY);
	uint32_t freed = slot_of(l2);
	CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire(l3, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(l3), freed);
	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l3), DLOCK_OK);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	dlock_lock_free(l3);
	dlock_client_close(c);
	dlock_client_close(d);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* -------------------------------------------------------------- N agreed */

/*
 * A client whose N differs from the holders' is refused with both numbers
 * named, also while it waits for a permit freed by a holder of its own N;
 * once nobody holds, its N applies.
 */
static void test_mismatch(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *a = open_dir(tmp), *b = open_dir(tmp);
	dlock_lock *l3 = new_sem(a, "s", 3), *l4 = new_sem(b, "s", 4), *l1 = new_sem(b, "s", 1);
	CU_ASSERT_FATAL(l3 && l4 && l1);
	CU_ASSERT_EQUAL_FATAL(acquire(l3, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(l4, 0), DLOCK_EKIND);
	const char *msg = dlock_client_errmsg(b);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "semaphore of 3 permits, not 4"));
	if (!strstr(msg, "semaphore of 3 permits, not 4"))
		fprintf(stderr, "message: %s\n", msg);
	CU_ASSERT_EQUAL(acquire(l4, LONG_WAIT_MS), DLOCK_EKIND); /* no waiting it out */
	CU_ASSERT_EQUAL(acquire(l1, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(b), "semaphore of 3 permits, not 1"));
	CU_ASSERT_EQUAL(dlock_release(l3), DLOCK_OK);

	/* Nobody holds: N = 4 applies, and now 3 is the one refused. */
	CU_ASSERT_EQUAL_FATAL(acquire(l4, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(l3, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "semaphore of 4 permits, not 3"));
	CU_ASSERT_EQUAL(dlock_release(l4), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(l1, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_OK);
	dlock_lock_free(l1);
	dlock_lock_free(l3);
	dlock_lock_free(l4);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_test_rmtree(tmp);
	free(tmp);
}

#define RACE_ROUNDS 300

/* Contenders of two Ns racing on one name, from a free name at each round. */
struct race {
	dlock_lock *lock;
	uint32_t n;
	atomic_int *inside; /* [0]: holders of N = 2, [1]: of N = 3 */
	atomic_int *violations;
	pthread_barrier_t *round;
	int failures, refused, got;
};

/* One try while holding: no holder of the other N inside, before or after a yield. */
static void race_hold(struct race *r)
{
	int me = r->n == 2 ? 0 : 1;
	r->got++;
	if (atomic_fetch_add(&r->inside[me], 1) + 1 > (int)r->n || atomic_load(&r->inside[1 - me]) != 0)
		atomic_fetch_add(r->violations, 1);
	sched_yield();
	if (atomic_load(&r->inside[1 - me]) != 0)
		atomic_fetch_add(r->violations, 1);
	atomic_fetch_sub(&r->inside[me], 1);
	if (dlock_release(r->lock) != DLOCK_OK)
		r->failures++;
}

static void *race_main(void *arg)
{
	struct race *r = arg;
	for (int i = 0; i < RACE_ROUNDS; i++) {
		pthread_barrier_wait(r->round); /* everyone starts the round together, on a free name */
		dlock_status st = acquire(r->lock, 0);
		if (st == DLOCK_OK)
			race_hold(r);
		else if (st == DLOCK_EKIND)
			r->refused++;
		else if (st != DLOCK_EBUSY)
			r->failures++;
		pthread_barrier_wait(r->round); /* and ends it once every holder has released */
	}
	return NULL;
}

/* Never permits of two Ns at once, however contenders of both race (each takes its marker, then looks). */
static void test_mismatch_race(void)
{
	enum { NCLIENTS = 4 };
	char *tmp = dlock_test_mkdtemp();
	dlock_client *c[NCLIENTS];
	struct race r[NCLIENTS];
	pthread_t th[NCLIENTS];
	pthread_barrier_t round;
	atomic_int inside[2], violations;
	CU_ASSERT_FATAL(pthread_barrier_init(&round, NULL, NCLIENTS) == 0);
	atomic_init(&inside[0], 0);
	atomic_init(&inside[1], 0);
	atomic_init(&violations, 0);
	for (int i = 0; i < NCLIENTS; i++) {
		c[i] = open_dir(tmp);
		uint32_t n = i % 2 ? 3 : 2;
		r[i] = (struct race){ .lock = new_sem(c[i], "s", n), .n = n, .inside = inside };
		r[i].violations = &violations;
		r[i].round = &round;
		CU_ASSERT_FATAL(r[i].lock != NULL);
	}
	for (int i = 0; i < NCLIENTS; i++)
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, race_main, &r[i]) == 0);
	int got[2] = { 0, 0 }, refused = 0;
	for (int i = 0; i < NCLIENTS; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(r[i].failures, 0);
		got[i % 2] += r[i].got;
		refused += r[i].refused;
		dlock_lock_free(r[i].lock);
		dlock_client_close(c[i]);
	}
	pthread_barrier_destroy(&round);
	CU_ASSERT_EQUAL(atomic_load(&violations), 0);
	/* Every round starts on a free name, so both Ns win rounds (two contenders that see each other's
	 * marker may both be refused, and then nobody gets in that round: never two Ns at once). */
	CU_ASSERT(got[0] > 0 && got[1] > 0);
	printf("\n    %d permits of N = 2, %d of N = 3, %d refused as another N ", got[0], got[1], refused);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ------------------------------------------------------------ other kinds */

/* A mutex (and a read-write lock) and a semaphore on one name exclude each other, in both orders. */
static void test_vs_mutex(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *a = open_dir(tmp), *b = open_dir(tmp);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *m = dlock_test_new_lock(a, "s"), *s = new_sem(b, "s", 3), *rw = NULL;
	CU_ASSERT_FATAL(dlock_rwlock_new(a, "s", &rw) == DLOCK_OK);
	CU_ASSERT_FATAL(m && s);

	/* The mutex first: the semaphore waits, and gets in once it is released. */
	CU_ASSERT_EQUAL_FATAL(acquire(m, 0), DLOCK_OK);
	uint64_t tm = dlock_test_token(m);
	CU_ASSERT_EQUAL(acquire(s, 0), DLOCK_EBUSY);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, s, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(STILL_MS);
	CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(w.token > tm); /* one counter per name, whatever the kind */

	/* The semaphore first: the mutex, a writer and a reader of another client wait. */
	CU_ASSERT_EQUAL(acquire(m, 0), DLOCK_EBUSY);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	CU_ASSERT_EQUAL(dlock_acquire(rw, &o), DLOCK_EBUSY);
	o.mode = DLOCK_MODE_SHARED;
	CU_ASSERT_EQUAL(dlock_acquire(rw, &o), DLOCK_EBUSY);
	dlock_test_waiter_start(&w, m, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(STILL_MS);
	CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
	uint64_t ts = dlock_test_token(s);
	CU_ASSERT_EQUAL(dlock_release(s), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(w.token > ts);
	CU_ASSERT_EQUAL(acquire(s, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);

	/* A reader holds: the semaphore is kept out, and gets in after. */
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(rw, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(s, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(rw), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(s, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(s), DLOCK_OK);

	dlock_lock_free(m);
	dlock_lock_free(rw);
	dlock_lock_free(s);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ---------------------------------------------------------------- stress */

#define SN 3          /* permits */
#define SCLIENTS 3    /* clients, each with SHANDLES handles in threads */
#define SHANDLES 2
#define SROUNDS 100

/* Shared by the stress threads: who holds each slot, and the last token seen per slot. */
struct stress_state {
	atomic_int owner[SN]; /* 0: free, else the holder's index + 1 */
	_Atomic uint64_t last[SN];
	atomic_int inside, most, violations;
};

struct stress {
	dlock_lock *lock;
	struct stress_state *st;
	int id, failures;
};

static void *stress_main(void *arg)
{
	struct stress *s = arg;
	struct stress_state *st = s->st;
	for (int i = 0; i < SROUNDS; i++) {
		uint32_t slot = 0;
		uint64_t t = 0;
		if (acquire(s->lock, LONG_WAIT_MS) != DLOCK_OK || dlock_lock_permit_slot(s->lock, &slot) != DLOCK_OK ||
		    dlock_lock_fencing_token(s->lock, &t) != DLOCK_OK || slot >= SN) {
			s->failures++;
			continue;
		}
		int n = atomic_fetch_add(&st->inside, 1) + 1;
		for (int m = atomic_load(&st->most); n > m && !atomic_compare_exchange_weak(&st->most, &m, n);)
			;
		int free_slot = 0;
		if (n > SN || !atomic_compare_exchange_strong(&st->owner[slot], &free_slot, s->id + 1))
			atomic_fetch_add(&st->violations, 1);
		/* The slot's owner alone writes its last token: it must only grow. */
		if (t <= atomic_load(&st->last[slot]))
			atomic_fetch_add(&st->violations, 1);
		atomic_store(&st->last[slot], t);
		sched_yield();
		atomic_store(&st->owner[slot], 0);
		atomic_fetch_sub(&st->inside, 1);
		if (dlock_release(s->lock) != DLOCK_OK)
			s->failures++;
	}
	return NULL;
}

/* Threads of several clients: at most N holders, each slot held by one at a time, tokens growing per slot. */
static void test_stress(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *c[SCLIENTS];
	struct stress s[SCLIENTS * SHANDLES];
	pthread_t th[SCLIENTS * SHANDLES];
	struct stress_state *st = calloc(1, sizeof *st);
	CU_ASSERT_FATAL(st != NULL);
	for (int i = 0; i < SCLIENTS; i++) {
		c[i] = open_dir(tmp);
		CU_ASSERT_FATAL(c[i] != NULL);
	}
	for (int i = 0; i < SCLIENTS * SHANDLES; i++) {
		s[i] = (struct stress){ .lock = new_sem(c[i / SHANDLES], "s", SN), .st = st, .id = i };
		CU_ASSERT_FATAL(s[i].lock != NULL);
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, stress_main, &s[i]) == 0);
	}
	for (int i = 0; i < SCLIENTS * SHANDLES; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(s[i].failures, 0);
		dlock_lock_free(s[i].lock);
	}
	for (int i = 0; i < SCLIENTS; i++)
		dlock_client_close(c[i]);
	CU_ASSERT_EQUAL(atomic_load(&st->violations), 0);
	CU_ASSERT(atomic_load(&st->most) <= SN);
	printf("\n    at most %d holders at once ", atomic_load(&st->most));
	free(st);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ------------------------------------------------------------------ main */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("file semaphores", NULL, NULL);
	CU_add_test(s, "features and bad input", test_features);
	CU_add_test(s, "N processes hold, the next waits, a killed holder's permit is freed", test_processes);
	CU_add_test(s, "N = 1: a client's second permit waits", test_one_client_n1);
	CU_add_test(s, "N = 2: a client's two permits have two slots", test_one_client_n2);
	CU_add_test(s, "another N is refused, naming both", test_mismatch);
	CU_add_test(s, "racing contenders of two Ns never hold together", test_mismatch_race);
	CU_add_test(s, "a mutex and a semaphore exclude each other", test_vs_mutex);
	CU_add_test(s, "threads of several clients: slots unique, tokens growing", test_stress);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
