/*
 * dlock_client_errmsg() with many threads on one client: each thread reads
 * its own last failure, however many threads share the client; the text
 * goes when the thread exits or the client is freed, whichever comes first.
 *
 * Failures are releases of handles that are not held: the core's message
 * names the lock, so each thread's text is its own.  Runs under TSan
 * (label `threads`) and ASan/LSan, which check the races and leaks that
 * the counts below cannot see.
 */
#include "dlock/dlock.h"
#include "dlock/sys/control.h" /* DLOCK_CTL_ERRMSG_RECORDS: a thread's record goes at its exit */
#include "testsupport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 200 /* well over the 64 slots that an older core shared among threads */
#define ROUNDS 4

static size_t records(dlock_client *c)
{
	size_t n = 0;
	if (dlock_client_control(c, DLOCK_CTL_ERRMSG_RECORDS, &n) != DLOCK_OK)
		return (size_t)-1; /* never equal to a count the test expects */
	return n;
}

/* Fail on `c` with a message naming `name`; returns 1 when the status is the expected one. */
static int fail_named(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	if (dlock_lock_new(c, name, &l) != DLOCK_OK)
		return 0;
	int ok = dlock_release(l) == DLOCK_ENOTHELD;
	/* dlock_lock_free() is a call on the client, but it cannot fail: the text stays. */
	dlock_lock_free(l);
	return ok;
}

/* The message names `name` and says why. */
static int names(const char *msg, const char *name)
{
	char quoted[64];
	snprintf(quoted, sizeof quoted, "'%s'", name);
	return strstr(msg, quoted) != NULL && strstr(msg, "not held") != NULL;
}

/* ------------------------------------------------ many threads, one client */

struct many {
	dlock_client *c;
	pthread_barrier_t *barrier;
	int idx;
	int failures; /* read by the main thread after the join */
};

static void *many_main(void *arg)
{
	struct many *m = arg;
	char name[32];
	for (int r = 0; r < ROUNDS; r++) {
		snprintf(name, sizeof name, "t%d-r%d", m->idx, r);
		if (!fail_named(m->c, name))
			m->failures++;
		pthread_barrier_wait(m->barrier); /* every thread has failed */
		const char *msg = dlock_client_errmsg(m->c);
		pthread_barrier_wait(m->barrier); /* every thread has asked for its text */
		if (!names(msg, name))
			m->failures++;
		/* Odd threads fail again (on other names) while even ones keep reading. */
		pthread_barrier_wait(m->barrier);
		if (m->idx % 2) {
			char other[40];
			snprintf(other, sizeof other, "%s-again", name);
			if (!fail_named(m->c, other) || !names(dlock_client_errmsg(m->c), other))
				m->failures++;
		} else {
			for (int i = 0; i < 50; i++)
				if (!names(msg, name))
					m->failures++;
		}
		pthread_barrier_wait(m->barrier);
	}
	return NULL;
}

static void test_many_threads(void)
{
	dlock_client *c = dlock_test_open("mem://errmsg_many", NULL, NULL);
	CU_ASSERT_FATAL(c != NULL);
	/* A thread that never failed reads "". */
	CU_ASSERT_STRING_EQUAL(dlock_client_errmsg(c), "");
	CU_ASSERT_EQUAL(records(c), 0);
	CU_ASSERT(fail_named(c, "main"));
	CU_ASSERT_EQUAL(records(c), 1);

	static struct many m[NTHREADS];
	static pthread_t th[NTHREADS];
	pthread_barrier_t barrier;
	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (int i = 0; i < NTHREADS; i++) {
		m[i] = (struct many){ .c = c, .barrier = &barrier, .idx = i };
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, many_main, &m[i]) == 0);
	}
	int failures = 0, failed_threads = 0;
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(th[i], NULL);
		failures += m[i].failures;
		failed_threads += m[i].failures != 0;
	}
	if (failures)
		printf("\n    %d wrong messages, in %d of %d threads", failures, failed_threads, NTHREADS);
	CU_ASSERT_EQUAL(failures, 0);
	pthread_barrier_destroy(&barrier);

	/* The client outlived the threads: their records went with them; the main thread's stays. */
	CU_ASSERT_EQUAL(records(c), 1);
	CU_ASSERT(names(dlock_client_errmsg(c), "main"));
	dlock_client_close(c);
}

/* ---------------------------------------- threads outlive clients, and back */

#define NPAIR 16
#define PAIR_ITER 100

struct pair {
	dlock_client *a, *b;
	pthread_barrier_t *barrier;
	int idx;
	int failures;
};

static void *pair_main(void *arg)
{
	struct pair *p = arg;
	char na[32], nb[32];
	snprintf(na, sizeof na, "a%d", p->idx);
	snprintf(nb, sizeof nb, "b%d", p->idx);
	if (!fail_named(p->a, na) || !names(dlock_client_errmsg(p->a), na))
		p->failures++;
	pthread_barrier_wait(p->barrier); /* the main thread now closes a, while b is used */
	for (int i = 0; i < PAIR_ITER; i++)
		if (!fail_named(p->b, nb) || !names(dlock_client_errmsg(p->b), nb))
			p->failures++;
	pthread_barrier_wait(p->barrier); /* the main thread now closes b, while threads exit */
	return NULL;
}

static void test_lifetimes(void)
{
	dlock_client *a = dlock_test_open("mem://errmsg_a", NULL, NULL);
	dlock_client *b = dlock_test_open("mem://errmsg_b", NULL, NULL);
	CU_ASSERT_FATAL(a && b);
	struct pair p[NPAIR];
	pthread_t th[NPAIR];
	pthread_barrier_t barrier;
	CU_ASSERT(fail_named(a, "main-a"));
	CU_ASSERT(fail_named(b, "main-b"));
	pthread_barrier_init(&barrier, NULL, NPAIR + 1);
	for (int i = 0; i < NPAIR; i++) {
		p[i] = (struct pair){ .a = a, .b = b, .barrier = &barrier, .idx = i };
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, pair_main, &p[i]) == 0);
	}
	pthread_barrier_wait(&barrier);
	CU_ASSERT_EQUAL(records(a), NPAIR + 1);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK); /* frees a: no handle is left */
	pthread_barrier_wait(&barrier);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	for (int i = 0; i < NPAIR; i++) {
		pthread_join(th[i], NULL);
		CU_ASSERT_EQUAL(p[i].failures, 0);
	}
	pthread_barrier_destroy(&barrier);

	/* The main thread's own records of closed clients are gone too: a new client starts empty. */
	dlock_client *c = dlock_test_open("mem://errmsg_a", NULL, NULL);
	CU_ASSERT_FATAL(c != NULL);
	CU_ASSERT_STRING_EQUAL(dlock_client_errmsg(c), "");
	dlock_client_close(c);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("errmsg", NULL, NULL);
	CU_add_test(s, "200 threads on one client each read their own message", test_many_threads);
	CU_add_test(s, "threads outlive clients and clients outlive threads", test_lifetimes);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
