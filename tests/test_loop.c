/*
 * Loop clients (include/dlock/loop.h) on mem:// and file://, driven by the
 * test's own poll() loop (pull mode) and epoll loop (push mode, recording
 * hooks): the contract of loop_cases.h on both backends in both modes, and
 * what needs no server at all: start calls that fail and never call back,
 * blocking calls refused on the loop's thread (DLOCK_EDEADLK), opens that
 * fail at the start or later (a closed port), and dlock_loop_wake().
 * The loop tests on Redis and PostgreSQL are test_loop_servers.c.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loop_cases.h"

#define SHORT_LEASE_MS 300

static char mem_uri[128];
static char file_uri[4200];
static char *file_dir;

/* ------------------------------------------------------------ start calls that fail */

/*
 * Start calls that return an error never call back: NULL lock or client,
 * bad options, shared mode on a mutex.  A later operation completes and
 * the refused ones still have not called back.
 */
static void test_start_errors(void)
{
	lc t;
	if (!lc_begin(&t, "errors"))
		return;
	enum { N = 24 };
	lr_op op[N];
	for (int i = 0; i < N; i++)
		lr_op_init(&op[i], t.tc);
	lr_loop *lp = t.lp;
	dlock_client *c = t.tc->client;
	dlock_lock *h = lc_lock(&t, t.name);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	int i = 0;
#define REFUSED(call, want)                               \
	do {                                              \
		CU_ASSERT_EQUAL(LR_START(lp, call), want); \
		i++;                                      \
	} while (0)
	REFUSED(dlock_acquire_async(NULL, &o, lr_on_lock, &op[i]), DLOCK_EINVAL);
	o.version = 0;
	REFUSED(dlock_acquire_async(h, &o, lr_on_lock, &op[i]), DLOCK_EVERSION);
	o.version = 999;
	REFUSED(dlock_acquire_async(h, &o, lr_on_lock, &op[i]), DLOCK_EVERSION);
	o = (dlock_acquire_options)DLOCK_ACQUIRE_OPTIONS_INIT;
	o.mode = DLOCK_MODE_SHARED; /* on a mutex */
	REFUSED(dlock_acquire_async(h, &o, lr_on_lock, &op[i]), DLOCK_EINVAL);
	o = (dlock_acquire_options)DLOCK_ACQUIRE_OPTIONS_INIT;
	o.renewal = 7;
	REFUSED(dlock_acquire_async(h, &o, lr_on_lock, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_release_async(NULL, lr_on_lock, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_extend_async(NULL, 1000, lr_on_lock, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_check_async(NULL, lr_on_lock, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_inspect_async(NULL, t.name, lr_on_inspect, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_inspect_async(c, NULL, lr_on_inspect, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_list_async(NULL, NULL, lr_on_list, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_break_async(NULL, t.name, lr_on_break, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_break_async(c, NULL, lr_on_break, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_campaign_async(NULL, "v", NULL, lr_on_election, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_proclaim_async(NULL, "v", lr_on_election, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_resign_async(NULL, lr_on_election, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_election_leader_async(NULL, lr_on_leader, &op[i]), DLOCK_EINVAL);
	REFUSED(dlock_client_close_async(NULL, lr_on_close, &op[i]), DLOCK_EINVAL);
#undef REFUSED
	CU_ASSERT_FATAL(i <= N);

	/* An empty name: refused at the start, or called back once with EINVAL. */
	lr_op empty;
	lr_op_init(&empty, t.tc);
	LC_ASSERT_ENDS(&empty, LR_START(lp, dlock_inspect_async(c, "", lr_on_inspect, &empty)), DLOCK_EINVAL);

	/* A later operation completes, and none of the refused ones has called back by then. */
	lr_op later;
	lr_op_init(&later, t.tc);
	CU_ASSERT_EQUAL(lr_finish(&later, lr_acquire(h, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &later)), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
	for (int k = 0; k < N; k++)
		LR_ASSERT_NEVER(&op[k]);
	dlock_lock_free(h);
	lc_end(&t);
}

/*
 * Blocking calls on the loop's thread of a loop client: DLOCK_EDEADLK with
 * a message, and nothing done (the held lock stays held, the name taken by
 * no one).
 */
static void test_blocking_refused(void)
{
	lc t;
	if (!lc_begin(&t, "deadlk"))
		return;
	char other[160];
	snprintf(other, sizeof other, "%s-2", t.name);
	dlock_client *c = t.tc->client;
	dlock_lock *h = lc_lock(&t, t.name), *h2 = lc_lock(&t, other);
	CU_ASSERT_EQUAL_FATAL(lr_acquire_now(t.tc, h, 0), DLOCK_OK);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	CU_ASSERT_EQUAL(dlock_acquire(h2, &o), DLOCK_EDEADLK);
	printf("\n    dlock_acquire: %s", dlock_client_errmsg(c));
	CU_ASSERT(dlock_client_errmsg(c)[0] != '\0');
	dlock_lock_info *info = NULL;
	CU_ASSERT_EQUAL(dlock_inspect(c, t.name, &info), DLOCK_EDEADLK);
	CU_ASSERT(dlock_client_errmsg(c)[0] != '\0');
	CU_ASSERT_PTR_NULL(info);
	dlock_lock_info_free(info);
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL(dlock_list(c, NULL, &list), DLOCK_EDEADLK);
	CU_ASSERT(dlock_client_errmsg(c)[0] != '\0');
	dlock_lock_list_free(list);
	CU_ASSERT_EQUAL(dlock_check(h), DLOCK_EDEADLK);
	CU_ASSERT_EQUAL(dlock_release(h), DLOCK_EDEADLK);
	CU_ASSERT(dlock_client_errmsg(c)[0] != '\0');

	CU_ASSERT_EQUAL(lr_check_now(t.tc, h), DLOCK_OK); /* still held */
	CU_ASSERT_EQUAL(dlock_test_probe(t.other, other), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
	dlock_lock_free(h);
	dlock_lock_free(h2);
	lc_end(&t);
}

/* ------------------------------------------------------------ wake */

/* Hand over what is ready until nothing is (a client that keeps its descriptor ready would spin a loop). */
static int quiet(lr_loop *lp)
{
	for (int i = 0; i < 100; i++)
		if (lr_wait_io(lp, 0) == 0)
			return 1;
	return 0;
}

/* dlock_loop_wake() from another thread makes the loop's wait for descriptors return. */
static void test_wake(void)
{
	lc t;
	if (!lc_begin(&t, "wake"))
		return;
	CU_ASSERT(quiet(t.lp));
	for (int round = 0; round < 3; round++) {
		pthread_barrier_t go;
		pthread_barrier_init(&go, NULL, 2);
		lr_thread th = { .action = LR_DO_WAKE, .client = t.tc->client, .start = &go };
		lr_thread_start(&th);
		pthread_barrier_wait(&go);
		int ready = lr_wait_io(t.lp, LR_AWAIT_MS); /* a descriptor turns ready, well before the bound */
		CU_ASSERT(ready >= 1);
		lr_thread_join(&th);
		pthread_barrier_destroy(&go);
		CU_ASSERT(quiet(t.lp)); /* the wake was taken */
	}
	dlock_lock *h = lc_lock(&t, t.name);
	CU_ASSERT_EQUAL(lr_acquire_now(t.tc, h, 0), DLOCK_OK); /* and the client works on */
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
	dlock_lock_free(h);
	lc_end(&t);
}

/* ------------------------------------------------------------ opens */

static void never_open(dlock_client *client, dlock_status status, void *userdata)
{
	(void)client, (void)status;
	(*(int *)userdata)++;
}

/* Opens refused at the start call: no client, a message, no callback, no cleanup. */
static void test_open_refused(void)
{
	int calls = 0;
	char err[512];
	dlock_client *c = NULL;
	dlock_loop_hooks h = { .version = DLOCK_LOOP_HOOKS_VERSION };
	dlock_loop_hooks bad = h;
	bad.version = 0;
	struct {
		const char *uri;
		const dlock_loop_hooks *hooks;
		dlock_status want;
	} cases[] = {
		{ mem_uri, &bad, DLOCK_EVERSION },          /* hooks of version 0 */
		{ mem_uri, &h, DLOCK_EINVAL },              /* no watch and timer hooks */
		{ "not a uri", NULL, DLOCK_EURI },
		{ "nosuch://x", NULL, DLOCK_ENOBACKEND },
		{ NULL, NULL, DLOCK_EINVAL },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		err[0] = '\0';
		c = (dlock_client *)&calls; /* must be set to NULL */
		dlock_status st = dlock_client_open_async(&c, cases[i].uri, NULL, cases[i].hooks, never_open, &calls, err,
		                                          sizeof err);
		printf("\n    %s: %s: %s", cases[i].uri ? cases[i].uri : "(null)", dlock_status_name(st), err);
		CU_ASSERT_EQUAL(st, cases[i].want);
		CU_ASSERT_PTR_NULL(c);
		CU_ASSERT(err[0] != '\0');
	}
	bad.version = 999;
	CU_ASSERT_EQUAL(dlock_client_open_async(&c, mem_uri, NULL, &bad, never_open, &calls, NULL, 0), DLOCK_EVERSION);
	CU_ASSERT_EQUAL(dlock_client_open_async(NULL, mem_uri, NULL, NULL, never_open, &calls, NULL, 0), DLOCK_EINVAL);

	/* A watch hook that fails: EIO, and every descriptor it did watch is let go again. */
	lr_loop *lp = lr_loop_new(LR_PUSH);
	lr_client *tc = lr_client_new(lp);
	tc->fail_watch = 1;
	err[0] = '\0';
	CU_ASSERT_EQUAL(lr_open(tc, mem_uri, NULL, err, sizeof err), DLOCK_EIO);
	printf("\n    failing watch hook: %s", err);
	CU_ASSERT(tc->watch_calls >= 1);
	lr_run_for(lp, 20);
	LR_ASSERT_NEVER(&tc->opened);
	LR_ASSERT_CLEAN(tc);
	lr_loop_free(lp);
	CU_ASSERT_EQUAL(calls, 0);
}

/*
 * An open that fails later (nothing listens on the port): the open's
 * callback says ECONNECT with a message, operations started meanwhile
 * complete with the same status after it, a handle is refused before the
 * open completed (EINVAL) and after it failed (its status), and the client
 * closes.
 */
static void open_fails(const char *uri, lr_mode mode)
{
	lr_loop *lp = lr_loop_new(mode);
	lr_client *tc = lr_client_new(lp);
	char err[512] = "";
	dlock_status st = lr_open(tc, uri, NULL, err, sizeof err);
	if (st == DLOCK_ENOBACKEND) {
		dlock_test_skip_part(err);
		lr_loop_free(lp);
		return;
	}
	CU_ASSERT_EQUAL_FATAL(st, DLOCK_OK);
	dlock_lock *h = NULL;
	CU_ASSERT_EQUAL(dlock_lock_new(tc->client, "never", &h), DLOCK_EINVAL);
	lr_op seen, listed;
	lr_op_init(&seen, tc);
	lr_op_init(&listed, tc);
	CU_ASSERT_EQUAL(LR_START(lp, dlock_inspect_async(tc->client, "never", lr_on_inspect, &seen)), DLOCK_OK);
	CU_ASSERT_EQUAL(LR_START(lp, dlock_list_async(tc->client, NULL, lr_on_list, &listed)), DLOCK_OK);
	CU_ASSERT(lr_run_done(lp, &tc->opened, LR_AWAIT_MS));
	CU_ASSERT(lr_run_done(lp, &seen, LR_AWAIT_MS));
	CU_ASSERT(lr_run_done(lp, &listed, LR_AWAIT_MS));
	printf("\n    %s: %s", uri, tc->opened.msg);
	LR_ASSERT_ONCE(&tc->opened, DLOCK_ECONNECT);
	CU_ASSERT(tc->opened.msg[0] != '\0');
	LR_ASSERT_ONCE(&seen, DLOCK_ECONNECT);
	LR_ASSERT_ONCE(&listed, DLOCK_ECONNECT);
	CU_ASSERT(tc->opened.seq < seen.seq && tc->opened.seq < listed.seq);
	CU_ASSERT_EQUAL(dlock_lock_new(tc->client, "never", &h), DLOCK_ECONNECT);
	CU_ASSERT_PTR_NULL(h);
	lr_op_clear(&seen);
	lr_op_clear(&listed);
	if (mode == LR_PULL) {
		CU_ASSERT_EQUAL(lr_close_blocking(tc), DLOCK_OK);
		LR_ASSERT_CLEAN(tc);
	} else {
		lr_close(tc);
	}
	lr_loop_free(lp);
}

static void test_open_fails(void)
{
	const char *uris[] = { "redis://127.0.0.1:1", "postgres://dlock@127.0.0.1:1/dlock_test" };
	for (int mode = LR_PULL; mode <= LR_PUSH; mode++)
		for (size_t i = 0; i < sizeof uris / sizeof *uris; i++)
			open_fails(uris[i], (lr_mode)mode);
}

/* dlock_loop_fd() answers -1 for a push-mode client and for NULL. */
static void test_loop_fd(void)
{
	CU_ASSERT_EQUAL(dlock_loop_fd(NULL), -1);
	lr_loop *lp = lr_loop_new(LR_PUSH);
	lr_client *tc = lr_open_ready(lp, mem_uri);
	if (tc) {
		CU_ASSERT_EQUAL(dlock_loop_fd(tc->client), -1);
		lr_close(tc);
	}
	lr_loop_free(lp);
}

/* ------------------------------------------------------------ suites */

static int mem_pull(void)
{
	return lc_set_target(&(lc_target){ .uri = mem_uri, .mode = LR_PULL, .short_lease_ms = SHORT_LEASE_MS });
}

static int mem_push(void)
{
	return lc_set_target(&(lc_target){ .uri = mem_uri, .mode = LR_PUSH, .short_lease_ms = SHORT_LEASE_MS });
}

static int file_pull(void)
{
	return lc_set_target(&(lc_target){ .uri = file_uri, .mode = LR_PULL, .short_lease_ms = SHORT_LEASE_MS });
}

static int file_push(void)
{
	return lc_set_target(&(lc_target){ .uri = file_uri, .mode = LR_PUSH, .short_lease_ms = SHORT_LEASE_MS });
}

static void add_suites(void)
{
	struct {
		const char *name;
		CU_InitializeFunc init;
	} suites[] = {
		{ "mem:// pull", mem_pull },
		{ "mem:// push", mem_push },
		{ "file:// pull", file_pull },
		{ "file:// push", file_push },
	};
	for (size_t i = 0; i < sizeof suites / sizeof *suites; i++) {
		CU_pSuite s = CU_add_suite(suites[i].name, suites[i].init, NULL);
		lc_add_all(s);
		CU_add_test(s, "start calls that fail never call back", test_start_errors);
		CU_add_test(s, "blocking calls on the loop's thread: EDEADLK", test_blocking_refused);
		CU_add_test(s, "dlock_loop_wake() from another thread", test_wake);
	}
	CU_pSuite s = CU_add_suite("open", mem_pull, NULL);
	CU_add_test(s, "refused at the start call: no callback", test_open_refused);
	CU_add_test(s, "fails later (closed port): ECONNECT, operations too", test_open_fails);
	CU_add_test(s, "dlock_loop_fd() of a push-mode client: -1", test_loop_fd);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(mem_uri, sizeof mem_uri, "mem://looptest-%ld", (long)getpid());
	file_dir = dlock_test_mkdtemp();
	snprintf(file_uri, sizeof file_uri, "file://%s", file_dir);
	int rc = dlock_test_main(add_suites);
	dlock_test_rmtree(file_dir);
	free(file_dir);
	return rc;
}
