/*
 * Conformance suite driver: one CUnit suite per backend URI, each holding
 * every conformance test, plus the helpers the tests share.
 *
 * URIs: mem://conformance-<pid>, a temporary file:/// directory, and every
 * whitespace-separated URI in DLOCK_TEST_URIS (in loop mode,
 * conformance_loop, in DLOCK_CONFORMANCE_LOOP_URIS instead when that is
 * set: CI's sanitizer builds name a few there).  A backend that cannot be
 * reached (DLOCK_ECONNECT) or is not compiled in (DLOCK_ENOBACKEND) is
 * skipped with a loud line, and fails its suite when DLOCK_TEST_REQUIRE_ALL=1.
 * DLOCK_TEST_SCALE multiplies the iteration counts (default 1).  Each
 * URI's suite runs in a process of its own, DLOCK_TEST_CONFORMANCE_JOBS
 * (default 3; 1: all in one process) at a time, its output shown in order
 * when all are done.
 */
#include "conformance.h"
#ifdef DLOCK_CONFORMANCE_V1PROXY
#include "dlock/sys/driver.h"
#include "driver_v1/v1proxy.h"
#endif
#ifdef DLOCK_CONFORMANCE_KV
#include "../examples/kv_driver.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define CONF_MAX_BACKENDS 32
#define CONF_TEXT_MAX 512

typedef struct conf_backend {
	CU_pSuite suite;
	char uri[2048];
	char masked[2048];
	char problem[CONF_TEXT_MAX + 64]; /* non-empty: the backend is unavailable */
	dlock_capabilities caps;
} conf_backend;

static conf_backend backends[CONF_MAX_BACKENDS];
static size_t nbackends;
static const conf_backend *current;
static char run_prefix[80];
static unsigned name_counter;

/* ------------------------------------------------------- the backend */

const char *conf_uri(void)
{
	return current ? current->uri : "";
}

const dlock_capabilities *conf_caps(void)
{
	return &current->caps;
}

/*
 * Loop mode runs the cases counted with conf_scaled() (exclusion,
 * coalescing and the loads: thousands of acquisitions) at a quarter of
 * their count: there every call is two hand-offs between threads (to the
 * loop thread, then to a worker of the client), and blocking mode runs them
 * at full count against the same servers.
 */
#ifdef DLOCK_CONFORMANCE_LOOP
#define CONF_MODE_SCALE 0.25
#else
#define CONF_MODE_SCALE 1.0
#endif

size_t conf_scaled(size_t base)
{
	const char *env = getenv("DLOCK_TEST_SCALE");
	double scale = env && *env ? strtod(env, NULL) : 1.0;
	if (!(scale > 0))
		scale = 1.0;
	double n = (double)base * scale * CONF_MODE_SCALE;
	return n < 1 ? 1 : (size_t)n;
}

/* ------------------------------------------------------- assertions */

int conf_assert_status(dlock_status got, dlock_status want, dlock_status or_want,
                       const char *expr, const char *file, unsigned line)
{
	int ok = got == want || got == or_want;
	if (!ok) {
		if (want == or_want)
			printf("\n    %s:%u: %s gave %s, expected %s", file, line, expr,
			       dlock_status_name(got), dlock_status_name(want));
		else
			printf("\n    %s:%u: %s gave %s, expected %s or %s", file, line, expr,
			       dlock_status_name(got), dlock_status_name(want), dlock_status_name(or_want));
	}
	CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line, expr, file, "", CU_FALSE);
	return ok;
}

/* ------------------------------------------------------- clients, locks */

dlock_client *conf_open(void)
{
	dlock_client *client = dlock_test_open(conf_uri(), NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(client);
	return client;
}

void conf_close(dlock_client *client)
{
	if (client)
		CONF_ASSERT_ST(dlock_client_close(client), DLOCK_OK);
}

dlock_lock *conf_lock(dlock_client *client, const char *name)
{
	dlock_lock *lock = dlock_test_new_lock(client, name);
	if (client)
		CU_ASSERT_PTR_NOT_NULL(lock);
	return lock;
}

void conf_name(char *out, size_t outlen, const char *tag)
{
	snprintf(out, outlen, "%s-%u-%s", run_prefix, ++name_counter, tag);
}

static char *out_dir; /* the groups' output, apart from file://'s directory (a listing reads that one) */

/* An flock() on a file of the run's output directory, which every group shares; -1 when groups are not parallel. */
int conf_shared_names_begin(void)
{
	if (!out_dir)
		return -1;
	char path[4200];
	snprintf(path, sizeof path, "%s/shared-names.lock", out_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_FATAL(flock(fd, LOCK_EX) == 0);
	return fd;
}

void conf_shared_names_end(int token)
{
	if (token >= 0)
		close(token);
}

dlock_status conf_acquire(dlock_lock *lock, int64_t wait_ms)
{
	return dlock_test_acquire(lock, wait_ms, 0, -1, NULL, NULL);
}

dlock_client_stats conf_stats(dlock_client *client)
{
	dlock_client_stats stats;
	memset(&stats, 0, sizeof stats);
	if (client)
		CONF_ASSERT_ST(dlock_client_get_stats(client, &stats), DLOCK_OK);
	return stats;
}

/* ------------------------------------------------------- waiter thread */

static void *waiter_run(void *arg)
{
	conf_waiter *w = arg;
	atomic_store(&w->started, 1);
	w->status = conf_acquire(w->lock, w->wait_ms);
	if (w->status == DLOCK_OK && w->order)
		w->ticket = atomic_fetch_add(w->order, 1);
	if (w->status == DLOCK_OK && w->release)
		w->release_status = dlock_release(w->lock);
	atomic_store(&w->done, 1);
	return NULL;
}

void conf_waiter_start(conf_waiter *w, dlock_lock *lock, int64_t wait_ms, int release,
                       atomic_uint *order)
{
	memset(w, 0, sizeof *w);
	w->lock = lock;
	w->wait_ms = wait_ms;
	w->release = release;
	w->order = order;
	w->status = DLOCK_STATUS_COUNT_;
	w->release_status = DLOCK_STATUS_COUNT_;
	if (pthread_create(&w->thread, NULL, waiter_run, w) != 0)
		abort();
}

static int waiter_started(void *arg)
{
	return atomic_load(&((conf_waiter *)arg)->started);
}

typedef struct acquires_seen {
	dlock_client *client;
	uint64_t base;
} acquires_seen;

static int server_acquire_seen(void *arg)
{
	acquires_seen *seen = arg;
	dlock_client_stats stats;
	if (dlock_client_get_stats(seen->client, &stats) != DLOCK_OK)
		return 1;
	return stats.server_acquires > seen->base;
}

void conf_waiter_await_blocked(conf_waiter *w, dlock_client *client, uint64_t base_server_acquires)
{
	CU_ASSERT(dlock_test_await(waiter_started, w, CONF_AWAIT_MS));
	acquires_seen seen = { client, base_server_acquires };
	if (client)
		dlock_test_await(server_acquire_seen, &seen, 300);
	dlock_test_sleep_ms(50);
	CU_ASSERT(!conf_waiter_done(w));
}

int conf_waiter_done(const conf_waiter *w)
{
	return atomic_load(&((conf_waiter *)w)->done);
}

static int waiter_done_cond(void *arg)
{
	return conf_waiter_done(arg);
}

static int cancel_until_done(void *arg)
{
	conf_waiter *w = arg;
	if (conf_waiter_done(w))
		return 1;
	dlock_cancel(w->lock);
	return 0;
}

dlock_status conf_waiter_join(conf_waiter *w, int64_t timeout_ms)
{
	if (!dlock_test_await(waiter_done_cond, w, timeout_ms)) {
		printf("\n    acquire still blocked after %lld ms: cancelling it", (long long)timeout_ms);
		CU_FAIL("waiter did not return in time");
		if (!dlock_test_await(cancel_until_done, w, CONF_AWAIT_MS)) {
			printf("\nFATAL: a cancelled acquire never returned; stopping the suite\n");
			abort();
		}
	}
	pthread_join(w->thread, NULL);
	return w->status;
}

/* ------------------------------------------------------- watchdog */

static int watchdog_stopped(void *arg)
{
	return atomic_load(&((conf_watchdog *)arg)->stop);
}

static void *watchdog_run(void *arg)
{
	conf_watchdog *d = arg;
	if (dlock_test_await(watchdog_stopped, d, d->after_ms))
		return NULL;
	atomic_store(&d->fired, 1);
	while (!atomic_load(&d->stop)) {
		dlock_cancel(d->lock);
		dlock_test_sleep_ms(20);
	}
	return NULL;
}

/* Threads of this process, from /proc (0 where it cannot tell). */
static int process_threads(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

static int one_thread_left(void *arg)
{
	(void)arg;
	return process_threads() <= 1;
}

void conf_children_start(int children, int (*child)(int index, void *arg), void *arg, pid_t *pids)
{
	CU_ASSERT_FATAL(children > 0 && children <= 64);
	/*
	 * A joined thread may still be counted for a moment: pthread_join()
	 * returns when the thread has let go of its stack, before the kernel
	 * has taken it off the process.  So a thread left over is awaited a
	 * little before it counts as one a closed client left running.
	 */
	if (!CONF_TSAN) /* ThreadSanitizer runs threads of its own */
		dlock_test_await(one_thread_left, NULL, 1000);
	int threads = process_threads();
	if (threads > 1 && !CONF_TSAN) {
		printf("\n    forking with %d threads running: close the clients first", threads);
		CU_FAIL_FATAL("a test forked while other threads ran");
	}
	fflush(NULL);
	for (int i = 0; i < children; i++) {
		pids[i] = fork();
		CU_ASSERT(pids[i] >= 0);
		if (pids[i] == 0)
			_exit(child(i, arg));
	}
}

void conf_children_wait(int children, const pid_t *pids)
{
	for (int i = 0; i < children; i++) {
		int status = 0;
		if (pids[i] <= 0)
			continue;
		CU_ASSERT_EQUAL(waitpid(pids[i], &status, 0), pids[i]);
		CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

void conf_run_children(int children, int (*child)(int index, void *arg), void *arg)
{
	pid_t pids[64];
	conf_children_start(children, child, arg, pids);
	conf_children_wait(children, pids);
}

void conf_watchdog_start(conf_watchdog *d, dlock_lock *lock, int64_t after_ms)
{
	memset(d, 0, sizeof *d);
	d->lock = lock;
	d->after_ms = after_ms;
	if (pthread_create(&d->thread, NULL, watchdog_run, d) != 0)
		abort();
}

int conf_watchdog_stop(conf_watchdog *d)
{
	atomic_store(&d->stop, 1);
	pthread_join(d->thread, NULL);
	return atomic_load(&d->fired);
}

/* ------------------------------------------------------- suites */

static int suite_init(void)
{
	CU_pSuite suite = CU_get_current_suite();
	for (size_t i = 0; i < nbackends; i++) {
		if (backends[i].suite == suite) {
			current = &backends[i];
			return 0;
		}
	}
	return 1;
}

static int suite_cleanup(void)
{
	current = NULL;
	return 0;
}

static void test_backend_available(void)
{
	printf("\n    backend %s is not available: %s", current->masked, current->problem);
	CU_FAIL("backend not available (DLOCK_TEST_REQUIRE_ALL=1 or not a connection failure)");
}

/* Every test of `tests`, or only those whose name holds DLOCK_TEST_MATCH when it is set (to run a
 * part of the suite while working on it). */
static void add_table(CU_pSuite suite, const conf_test *tests)
{
	const char *match = getenv("DLOCK_TEST_MATCH");
	for (const conf_test *t = tests; t->name; t++)
		if (!match || !*match || strstr(t->name, match))
			CU_add_test(suite, t->name, t->fn);
}

static int require_all(void)
{
	const char *env = getenv("DLOCK_TEST_REQUIRE_ALL");
	return env && strcmp(env, "1") == 0;
}

/* Open a client once to learn the masked URI and the capabilities. */
static dlock_status probe_backend(conf_backend *b)
{
	dlock_client *client = NULL;
	char err[CONF_TEXT_MAX] = "";
	dlock_status st = dlock_client_open(&client, b->uri, NULL, err, sizeof err);
	if (st != DLOCK_OK) {
		dlock_test_mask_uri(b->uri, b->masked, sizeof b->masked);
		snprintf(b->problem, sizeof b->problem, "%s: %s", dlock_status_name(st), err);
		return st;
	}
	snprintf(b->masked, sizeof b->masked, "%s", dlock_client_uri(client));
	dlock_status cst = dlock_client_capabilities(client, &b->caps);
	if (cst != DLOCK_OK)
		snprintf(b->problem, sizeof b->problem, "capabilities: %s", dlock_status_name(cst));
	dlock_client_close(client);
	return cst;
}

static void add_backend(const char *uri)
{
	size_t len = strlen(uri);
	if (nbackends == CONF_MAX_BACKENDS || len >= sizeof backends[0].uri) {
		printf("SKIPPED backend (too many or too long a URI)\n");
		return;
	}
	conf_backend *b = &backends[nbackends];
	memcpy(b->uri, uri, len + 1); /* fits: checked above */
	dlock_status st = probe_backend(b);
	int unreachable = st == DLOCK_ECONNECT || st == DLOCK_ENOBACKEND;
	if (unreachable) {
		printf("\n*** SKIPPED backend %s: %s ***\n", b->masked, b->problem);
		fflush(stdout);
		if (!require_all())
			return;
	}
	b->suite = CU_add_suite(b->masked, suite_init, suite_cleanup);
	if (!b->suite) {
		printf("SKIPPED backend %s: cannot add suite (listed twice?)\n", b->masked);
		return;
	}
	nbackends++;
	if (st != DLOCK_OK) {
		CU_add_test(b->suite, "backend_available", test_backend_available);
		return;
	}
	add_table(b->suite, conf_excl_tests);
	add_table(b->suite, conf_wait_tests);
	add_table(b->suite, conf_lease_tests);
	add_table(b->suite, conf_names_tests);
	add_table(b->suite, conf_rw_tests);
	add_table(b->suite, conf_sem_tests);
	add_table(b->suite, conf_hold_tests);
	add_table(b->suite, conf_inspect_tests);
	add_table(b->suite, conf_elect_tests);
#ifdef DLOCK_CONFORMANCE_LOOP
	add_table(b->suite, conf_loop_tests);
#endif
}

/*
 * Parallel runs: the suite of each URI of DLOCK_TEST_URIS may run in a
 * process of its own, DLOCK_TEST_CONFORMANCE_JOBS (default 3) at a time,
 * since most of its time is spent waiting on servers and leases.  Group 0
 * is the URI-independent suite with mem:// and file://, group g > 0 the
 * g-th URI.  -1: every group, in this process.  The zk:// groups start
 * first: their sessions make them the longest (about twice the others), and
 * one started last would finish alone.
 */
static int only_group = -1;

/* The URIs of the groups after the first. */
static const char *env_uris(void)
{
#ifdef DLOCK_CONFORMANCE_LOOP
	const char *loop = getenv("DLOCK_CONFORMANCE_LOOP_URIS");
	if (loop)
		return loop;
#endif
	return getenv("DLOCK_TEST_URIS");
}

static void add_env_backends(void)
{
	const char *env = env_uris();
	if (!env)
		return;
	char *copy = strdup(env);
	if (!copy)
		abort();
	char *save = NULL;
	int g = 1;
	for (char *uri = strtok_r(copy, " \t\r\n", &save); uri; uri = strtok_r(NULL, " \t\r\n", &save), g++)
		if (only_group < 0 || only_group == g)
			add_backend(uri);
	free(copy);
}

static int env_uri_count(void)
{
	const char *env = env_uris();
	int n = 0;
	for (const char *p = env; p && *p;) {
		p += strspn(p, " \t\r\n");
		size_t w = strcspn(p, " \t\r\n");
		n += w > 0;
		p += w;
	}
	return n;
}

static char *file_dir;

static void add_suites(void)
{
	char uri[4200];
#ifdef DLOCK_CONFORMANCE_V1PROXY
	/* conformance_v1: the suite on a driver built against the version-1 contract, alone. */
	dlock_status st = dlock_register_driver((const dlock_driver *)(const void *)&v1proxy_driver);
	if (st != DLOCK_OK) {
		printf("cannot register v1proxy://: %s\n", dlock_strerror(st));
		exit(1);
	}
	snprintf(uri, sizeof uri, "v1proxy://conformance-%ld", (long)getpid());
	add_backend(uri);
	return;
#endif
#ifdef DLOCK_CONFORMANCE_KV
	/* conformance_kv: the suite on the example network driver (examples/kv_driver.c), on the test Redis. */
	const char *redis = getenv("DLOCK_TEST_REDIS_URI");
	if (!redis || strncmp(redis, "redis://", 8) != 0) {
		exit(dlock_test_skip("kv:// needs a Redis server (DLOCK_TEST_REDIS_URI unset)"));
	}
	dlock_status st = dlock_register_driver(&example_kv_driver);
	if (st != DLOCK_OK) {
		printf("cannot register kv://: %s\n", dlock_strerror(st));
		exit(1);
	}
	snprintf(uri, sizeof uri, "kv://%s?prefix=conf-kv-%ld", redis + 8, (long)getpid());
	add_backend(uri);
	return;
#endif
	if (only_group <= 0) {
		CU_pSuite uri_suite = CU_add_suite("uri", NULL, NULL);
		if (uri_suite) {
			add_table(uri_suite, conf_uri_tests);
			add_table(uri_suite, conf_scheme_tests);
		}
		snprintf(uri, sizeof uri, "mem://conformance-%ld", (long)getpid());
		add_backend(uri);
		snprintf(uri, sizeof uri, "file://%s/", file_dir);
		add_backend(uri);
	}
	if (only_group != 0)
		add_env_backends();
}

/* Run group `g` in a child whose output goes to DIR/out.G; its pid, or -1. */
static pid_t start_group(int g)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/out.%d", out_dir, g);
	fflush(stdout);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	FILE *out = freopen(path, "w", stdout);
	if (!out || dup2(fileno(stdout), 2) < 0)
		_exit(2);
	setvbuf(stdout, NULL, _IOLBF, 0);
	only_group = g;
	/* Names of their own: groups may share a server (redis:// and rediss:// of one Redis). */
	size_t len = strlen(run_prefix);
	snprintf(run_prefix + len, sizeof run_prefix - len, "g%d", g);
	_exit(dlock_test_main(add_suites));
}

/* Whether group g (> 0) is a zk:// URI. */
static int group_is_zk(int g)
{
	const char *p = env_uris();
	for (int i = 1; p && *p; i++) {
		p += strspn(p, " \t\r\n");
		if (i == g)
			return strncmp(p, "zk://", 5) == 0;
		p += strcspn(p, " \t\r\n");
	}
	return 0;
}

/* Every group, `jobs` at a time (the zk:// ones first); then each one's output in order.  1 when one failed. */
static int run_groups(int groups, int jobs)
{
	pid_t *pids = calloc((size_t)groups, sizeof *pids);
	int *rcs = calloc((size_t)groups, sizeof *rcs);
	int *order = calloc((size_t)groups, sizeof *order);
	if (!pids || !rcs || !order)
		abort();
	int norder = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int g = 0; g < groups; g++)
			if ((g > 0 && group_is_zk(g)) == (pass == 0))
				order[norder++] = g;
	int next = 0, running = 0, failed = 0;
	while (next < groups || running > 0) {
		if (next < groups && running < jobs) {
			int g = order[next++];
			pids[g] = start_group(g);
			if (pids[g] < 0)
				rcs[g] = 2;
			else
				running++;
			continue;
		}
		int status;
		pid_t done = wait(&status);
		if (done < 0)
			break;
		running--;
		for (int g = 0; g < groups; g++)
			if (pids[g] == done)
				rcs[g] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	}
	for (int g = 0; g < groups; g++) {
		char path[4200], buf[4096];
		snprintf(path, sizeof path, "%s/out.%d", out_dir, g);
		FILE *in = fopen(path, "r");
		size_t n;
		while (in && (n = fread(buf, 1, sizeof buf, in)) > 0)
			fwrite(buf, 1, n, stdout);
		if (in)
			fclose(in);
		if (rcs[g] != 0) {
			printf("\n*** conformance group %d exited with %d ***\n", g, rcs[g]);
			failed = 1;
		}
	}
	free(pids);
	free(rcs);
	free(order);
	return failed;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(run_prefix, sizeof run_prefix, "conf%ld.%lx", (long)getpid(), (unsigned long)time(NULL));
	file_dir = dlock_test_mkdtemp();
	const char *jobs_env = getenv("DLOCK_TEST_CONFORMANCE_JOBS");
	int jobs = jobs_env && *jobs_env ? atoi(jobs_env) : 3;
	int groups = 1 + env_uri_count();
	int rc;
#if defined(DLOCK_CONFORMANCE_V1PROXY) || defined(DLOCK_CONFORMANCE_KV)
	jobs = 1; /* one backend: nothing to share out */
#endif
	if (jobs > 1 && groups > 1) {
		out_dir = dlock_test_mkdtemp();
		rc = run_groups(groups, jobs);
		dlock_test_rmtree(out_dir);
		free(out_dir);
	} else {
		rc = dlock_test_main(add_suites);
	}
	dlock_test_rmtree(file_dir);
	free(file_dir);
	return rc;
}
