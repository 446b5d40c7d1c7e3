/*
 * Conformance: mutual exclusion between threads and processes, coalescing
 * of one client's threads, and the order in which waiters get the lock.
 */
#include "conformance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Acquisitions in total per exclusion test, before DLOCK_TEST_SCALE. */
#define EXCL_TOTAL 2000

/* ------------------------------------------------------- worker */

/* One thread doing `iterations` acquire / check / release cycles on `name`. */
typedef struct excl_worker {
	dlock_client *client;
	const char *name;
	size_t iterations;
	dlock_test_overlap *ov;
	uint64_t *tokens;       /* if set: tokens[index of the critical section] */
	pthread_barrier_t *start; /* all workers begin together */
	pthread_t thread;
	size_t completed;
	dlock_status error;     /* first failure, DLOCK_OK if none */
	const char *failed_call;
} excl_worker;

static int excl_fail(excl_worker *w, dlock_status st, const char *call)
{
	w->error = st;
	w->failed_call = call;
	return -1;
}

static int excl_cycle(excl_worker *w, dlock_lock *lock)
{
	dlock_status st = conf_acquire(lock, CONF_LONG_WAIT_MS);
	if (st != DLOCK_OK)
		return excl_fail(w, st, "acquire");
	uint64_t index = dlock_test_overlap_enter(w->ov);
	if (w->tokens)
		st = dlock_lock_fencing_token(lock, &w->tokens[index]);
	dlock_test_overlap_leave(w->ov);
	if (st != DLOCK_OK)
		return excl_fail(w, st, "fencing_token");
	st = dlock_release(lock);
	if (st != DLOCK_OK)
		return excl_fail(w, st, "release");
	w->completed++;
	return 0;
}

static void *excl_run(void *arg)
{
	excl_worker *w = arg;
	dlock_lock *lock = NULL;
	dlock_status st = dlock_lock_new(w->client, w->name, &lock);
	if (st != DLOCK_OK)
		excl_fail(w, st, "lock_new");
	pthread_barrier_wait(w->start);
	for (size_t i = 0; lock && i < w->iterations; i++)
		if (excl_cycle(w, lock) != 0)
			break;
	dlock_lock_free(lock);
	return NULL;
}

static void excl_start(excl_worker *w)
{
	w->error = DLOCK_OK;
	w->failed_call = "";
	if (pthread_create(&w->thread, NULL, excl_run, w) != 0)
		abort();
}

/* Run `n` workers that begin together, and join them. */
static void excl_run_group(excl_worker *workers, int n)
{
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)n);
	for (int i = 0; i < n; i++) {
		workers[i].start = &start;
		excl_start(&workers[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(workers[i].thread, NULL);
	pthread_barrier_destroy(&start);
}

static void excl_assert_worker(const excl_worker *w)
{
	if (w->error != DLOCK_OK)
		printf("\n    worker: %s gave %s", w->failed_call, dlock_status_name(w->error));
	CU_ASSERT_EQUAL(w->error, DLOCK_OK);
	CU_ASSERT_EQUAL(w->completed, w->iterations);
}

static void excl_assert_overlap(dlock_test_overlap *ov, uint64_t expected)
{
	uint64_t violations = dlock_test_overlap_violations(ov);
	if (violations)
		printf("\n    %llu overlapping holders", (unsigned long long)violations);
	CU_ASSERT_EQUAL(violations, 0);
	CU_ASSERT_EQUAL(dlock_test_overlap_count(ov), expected);
}

/* ------------------------------------------------------- threads */

#define THREAD_CLIENTS 3
#define THREADS_PER_CLIENT 2

static void assert_increasing(const uint64_t *tokens, size_t n);

/*
 * Threads of several clients of one process: never two holders, and where
 * the backend fences, each holder's token larger than the one before it.
 */
static void test_exclusion_threads(void)
{
	enum { N = THREAD_CLIENTS * THREADS_PER_CLIENT };
	char name[128];
	conf_name(name, sizeof name, "excl-threads");
	size_t per_thread = conf_scaled(EXCL_TOTAL) / N + 1;
	size_t total = per_thread * N;
	int fenced = conf_caps()->fencing != DLOCK_FENCING_NONE;
	dlock_client *clients[THREAD_CLIENTS] = { NULL };
	excl_worker workers[N];
	dlock_test_overlap *ov = dlock_test_overlap_new();
	uint64_t *tokens = calloc(total, sizeof *tokens);
	memset(workers, 0, sizeof workers);

	for (int c = 0; c < THREAD_CLIENTS; c++)
		if (!(clients[c] = conf_open()))
			goto out;
	if (!tokens)
		goto out;
	for (int i = 0; i < N; i++)
		workers[i] = (excl_worker){ .client = clients[i % THREAD_CLIENTS], .name = name,
		                            .iterations = per_thread, .ov = ov, .tokens = fenced ? tokens : NULL };
	excl_run_group(workers, N);
	for (int i = 0; i < N; i++)
		excl_assert_worker(&workers[i]);
	excl_assert_overlap(ov, (uint64_t)total);
	if (fenced && dlock_test_overlap_count(ov) == total)
		assert_increasing(tokens, total);
out:
	for (int c = 0; c < THREAD_CLIENTS; c++)
		conf_close(clients[c]);
	free(tokens);
	dlock_test_overlap_free(ov);
}

/* ------------------------------------------------------- processes */

#define CHILDREN 3
#define THREADS_PER_CHILD 2

/* What a child reports to the parent through shared memory. */
typedef struct child_report {
	int opened;
	dlock_status error;
	size_t completed;
} child_report;

/* Memory shared by the parent and its children. */
typedef struct children_shared {
	atomic_int ready; /* children whose client is open */
	child_report reports[CHILDREN];
} children_shared;

static int all_children_ready(void *arg)
{
	return atomic_load(&((children_shared *)arg)->ready) >= CHILDREN;
}

/* Runs in a forked child: its own client, its own threads. */
static int child_main(const char *name, size_t per_thread, dlock_test_overlap *ov,
                      children_shared *shared, child_report *report)
{
	dlock_client *client = NULL;
	report->error = dlock_client_open(&client, conf_uri(), NULL, NULL, 0);
	atomic_fetch_add(&shared->ready, 1);
	if (report->error != DLOCK_OK)
		return 1;
	report->opened = 1;
	dlock_test_await(all_children_ready, shared, CONF_AWAIT_MS);
	excl_worker workers[THREADS_PER_CHILD];
	memset(workers, 0, sizeof workers);
	for (int i = 0; i < THREADS_PER_CHILD; i++)
		workers[i] = (excl_worker){ .client = client, .name = name, .iterations = per_thread,
		                            .ov = ov };
	excl_run_group(workers, THREADS_PER_CHILD);
	for (int i = 0; i < THREADS_PER_CHILD; i++) {
		if (workers[i].error != DLOCK_OK)
			report->error = workers[i].error;
		report->completed += workers[i].completed;
	}
	dlock_status st = dlock_client_close(client);
	if (st != DLOCK_OK && report->error == DLOCK_OK)
		report->error = st;
	return report->error == DLOCK_OK ? 0 : 1;
}

static void assert_child(pid_t pid, const child_report *report, size_t expected)
{
	int status = 0;
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		printf("\n    child %ld: wait status 0x%x (exit 66: a sanitizer report in the child,"
		       " or one it inherited from the parent)", (long)pid, (unsigned)status);
	if (report->error != DLOCK_OK)
		printf("\n    child %ld: %s", (long)pid, dlock_status_name(report->error));
	CU_ASSERT(report->opened);
	CU_ASSERT_EQUAL(report->error, DLOCK_OK);
	CU_ASSERT_EQUAL(report->completed, expected);
}

static void test_exclusion_processes(void)
{
	if (conf_caps()->scope == DLOCK_SCOPE_PROCESS) {
		CU_PASS("scope is one process: no inter-process contention to test");
		return;
	}
	char name[128];
	conf_name(name, sizeof name, "excl-procs");
	size_t per_thread = conf_scaled(EXCL_TOTAL) / (CHILDREN * THREADS_PER_CHILD) + 1;
	dlock_test_overlap *ov = dlock_test_overlap_new();
	children_shared *shared = dlock_test_shared_alloc(sizeof *shared);
	pid_t pids[CHILDREN];

	fflush(NULL);
	for (int i = 0; i < CHILDREN; i++) {
		pids[i] = fork();
		CU_ASSERT(pids[i] >= 0);
		if (pids[i] == 0)
			_exit(child_main(name, per_thread, ov, shared, &shared->reports[i]));
	}
	for (int i = 0; i < CHILDREN; i++)
		if (pids[i] > 0)
			assert_child(pids[i], &shared->reports[i], per_thread * THREADS_PER_CHILD);
	excl_assert_overlap(ov, (uint64_t)per_thread * THREADS_PER_CHILD * CHILDREN);
	dlock_test_shared_free(shared, sizeof *shared);
	dlock_test_overlap_free(ov);
}

/* ------------------------------------------------------- coalescing */

#define COALESCE_THREADS 8

static void assert_coalesce_stats(dlock_client *client, uint64_t total)
{
	dlock_client_stats stats = conf_stats(client);
	CU_ASSERT_EQUAL(stats.acquired - stats.reentered, total);
	CU_ASSERT_EQUAL(stats.server_acquires, total);
	CU_ASSERT_EQUAL(stats.server_releases, total);
	CU_ASSERT_EQUAL(stats.lost, 0);
	if (stats.server_acquires != total)
		printf("\n    acquired %llu, reentered %llu, server_acquires %llu, expected %llu",
		       (unsigned long long)stats.acquired, (unsigned long long)stats.reentered,
		       (unsigned long long)stats.server_acquires, (unsigned long long)total);
}

static void assert_increasing(const uint64_t *tokens, size_t n)
{
	size_t bad = 0;
	for (size_t i = 1; i < n; i++)
		if (tokens[i] <= tokens[i - 1] && bad++ == 0)
			printf("\n    token #%zu = %llu after %llu", i, (unsigned long long)tokens[i],
			       (unsigned long long)tokens[i - 1]);
	CU_ASSERT_EQUAL(bad, 0);
}

static void test_coalescing(void)
{
	char name[128];
	conf_name(name, sizeof name, "coalesce");
	size_t per_thread = conf_scaled(EXCL_TOTAL) / COALESCE_THREADS + 1;
	size_t total = per_thread * COALESCE_THREADS;
	int fenced = conf_caps()->fencing != DLOCK_FENCING_NONE;
	dlock_test_overlap *ov = dlock_test_overlap_new();
	uint64_t *tokens = calloc(total, sizeof *tokens);
	excl_worker workers[COALESCE_THREADS];
	memset(workers, 0, sizeof workers);
	dlock_client *client = conf_open();
	if (!client || !tokens)
		goto out;

	for (int i = 0; i < COALESCE_THREADS; i++)
		workers[i] = (excl_worker){ .client = client, .name = name, .iterations = per_thread,
		                            .ov = ov, .tokens = fenced ? tokens : NULL };
	excl_run_group(workers, COALESCE_THREADS);
	for (int i = 0; i < COALESCE_THREADS; i++)
		excl_assert_worker(&workers[i]);
	excl_assert_overlap(ov, total);
	assert_coalesce_stats(client, total);
	if (fenced && dlock_test_overlap_count(ov) == total)
		assert_increasing(tokens, total);
out:
	conf_close(client);
	free(tokens);
	dlock_test_overlap_free(ov);
}

/* ------------------------------------------------------- waiting order */

#define ORDER_WAITERS 3

/*
 * The holder on its own client keeps `name` while the waiters queue one
 * after the other; after the release they must get it in that order.
 * `clients[i]` is waiter i's client.
 */
static void run_order(dlock_client *holder, dlock_client *const *clients, const char *name)
{
	dlock_lock *held = conf_lock(holder, name);
	dlock_lock *locks[ORDER_WAITERS] = { NULL };
	conf_waiter waiters[ORDER_WAITERS];
	atomic_uint order = 0;
	int started = 0;

	if (!held || !CONF_ASSERT_ST(conf_acquire(held, 0), DLOCK_OK))
		goto out;
	for (; started < ORDER_WAITERS; started++) {
		if (!(locks[started] = conf_lock(clients[started], name)))
			break;
		uint64_t base = conf_stats(clients[started]).server_acquires;
		conf_waiter_start(&waiters[started], locks[started], CONF_LONG_WAIT_MS, 1, &order);
		conf_waiter_await_blocked(&waiters[started], clients[started], base);
	}
	CONF_ASSERT_ST(dlock_release(held), DLOCK_OK);
	for (int i = 0; i < started; i++) {
		CONF_ASSERT_ST(conf_waiter_join(&waiters[i], CONF_LONG_WAIT_MS), DLOCK_OK);
		CONF_ASSERT_ST(waiters[i].release_status, DLOCK_OK);
		if (waiters[i].ticket != (unsigned)i)
			printf("\n    waiter %d got the lock in position %u", i, waiters[i].ticket);
		CU_ASSERT_EQUAL(waiters[i].ticket, (unsigned)i);
	}
out:
	for (int i = 0; i < ORDER_WAITERS; i++)
		dlock_lock_free(locks[i]);
	dlock_lock_free(held);
}

/* Threads of one client that wait for one name get it in FIFO order. */
static void test_fifo_local(void)
{
	char name[128];
	conf_name(name, sizeof name, "fifo-local");
	dlock_client *holder = conf_open();
	dlock_client *client = conf_open();
	dlock_client *clients[ORDER_WAITERS] = { client, client, client };
	if (holder && client)
		run_order(holder, clients, name);
	conf_close(client);
	conf_close(holder);
}

/* Fair backends: waiters on different clients get the lock in FIFO order. */
static void test_fifo_fair(void)
{
	if (!conf_caps()->fair) {
		CU_PASS("backend is not fair: no order between clients to test");
		return;
	}
	char name[128];
	conf_name(name, sizeof name, "fifo-fair");
	dlock_client *holder = conf_open();
	dlock_client *clients[ORDER_WAITERS] = { NULL };
	int ok = holder != NULL;
	for (int i = 0; i < ORDER_WAITERS; i++)
		ok &= (clients[i] = conf_open()) != NULL;
	if (ok)
		run_order(holder, clients, name);
	for (int i = 0; i < ORDER_WAITERS; i++)
		conf_close(clients[i]);
	conf_close(holder);
}

const conf_test conf_excl_tests[] = {
	{ "exclusion_threads", test_exclusion_threads },
	{ "exclusion_processes", test_exclusion_processes },
	{ "coalescing", test_coalescing },
	{ "fifo_local", test_fifo_local },
	{ "fifo_fair", test_fifo_fair },
	{ NULL, NULL },
};
