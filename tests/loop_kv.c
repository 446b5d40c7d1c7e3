/*
 * kv://, the example driver, on a loop client: what its part on the loop
 * (examples/kv_driver_loop.c, driver contract 9) does beyond the contract
 * cases that test_loop_servers.c runs on it as on every server backend.
 *
 *   - Acquisitions waiting on the loop hold no thread: N = 50 of them wait
 *     at once for names another client holds, and the process keeps the
 *     handful of threads it had (5 here: the test's, the two clients'
 *     subscribers, the blocking client's two background threads), where a
 *     loop client of a driver without the non-blocking methods holds a
 *     worker thread per waiting acquisition (57).
 *   - Held locks renew on the loop: a loop client holding 20 of them for
 *     three leases adds no thread (its renewals are the loop's calls), and
 *     its close releases those still held on the loop too, each reported
 *     DLOCK_LOST_CLOSED once, the names free on the server.
 *   - A call the server does not answer ends with DLOCK_ECONNECT once the
 *     URI's io_timeout has passed, naming the server; the next call
 *     connects again (a blackhole of the fault proxy).
 *   - An acquisition whose answer is lost removes what its script took, as
 *     the blocking try_acquire() does: the name is free at once, not at the
 *     end of the lease.
 *   - With a password, every connection authenticates first, reconnections
 *     too (the password-protected primary of the sentinel set-up, when
 *     DLOCK_TEST_SENTINEL_DATA_PORTS names it).
 *
 * The target (lc_get_target()) is a kv:// URI of the test Redis; faults go
 * through a proxy of the test's own, never to the shared server.
 * Threads: the test's, which drives the loop.  Errors: CUnit assertions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faultproxy.h"
#include "faults.h"
#include "loop_cases.h"
#include "threadcount.h"

#define KV_WAITERS 50     /* acquisitions waiting at once */
#define KV_THREADS_MORE 2 /* threads they may add to the clients' few (with a worker each: KV_WAITERS more) */
#define KV_IO_TIMEOUT_MS 500
#define KV_HELD 20        /* locks held through three leases */

/* N acquisitions wait on the loop, for names the other client holds, with a handful of threads. */
static void test_kv_waiters_hold_no_thread(void)
{
	static lr_op ops[KV_WAITERS];
	dlock_lock *h[KV_WAITERS] = { NULL }, *o[KV_WAITERS] = { NULL };
	lc t;
	if (!lc_begin(&t, "kv-waiters"))
		return;
	int before = dlock_test_threads_now();
	for (int i = 0; i < KV_WAITERS; i++) {
		char name[160];
		snprintf(name, sizeof name, "%s-%d", t.name, i);
		h[i] = lc_lock(&t, name);
		o[i] = lc_other_lock(&t, name);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o[i], 0, 0, -1, NULL, NULL), DLOCK_OK);
	}
	lc_progress p = { t.tc, lc_attempts(t.tc) + KV_WAITERS, ops, KV_WAITERS };
	for (int i = 0; i < KV_WAITERS; i++) {
		lr_op_init(&ops[i], t.tc);
		CU_ASSERT_EQUAL(lr_acquire(h[i], LR_AWAIT_MS, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &ops[i]), DLOCK_OK);
	}
	CU_ASSERT(lr_run_until(t.lp, lc_attempted, &p, LR_AWAIT_MS)); /* each asked the server once: all wait */
	lr_run_for(t.lp, 200);
	int waiting = dlock_test_threads_now();
	printf("\n    threads: %d before, %d while %d acquisitions wait", before, waiting, KV_WAITERS);
	CU_ASSERT(before > 0 && waiting <= before + KV_THREADS_MORE);
	int early = 0;
	for (int i = 0; i < KV_WAITERS; i++)
		early += ops[i].calls != 0;
	CU_ASSERT_EQUAL(early, 0); /* each waits for its holder */
	for (int i = 0; i < KV_WAITERS; i++)
		CU_ASSERT_EQUAL(dlock_release(o[i]), DLOCK_OK);
	CU_ASSERT(lr_run_until(t.lp, lc_all_done, &p, LR_AWAIT_MS)); /* woken by the releases */
	for (int i = 0; i < KV_WAITERS; i++) {
		if (LR_ASSERT_ONCE(&ops[i], DLOCK_OK))
			CU_ASSERT_EQUAL(lr_release_now(t.tc, h[i]), DLOCK_OK);
		dlock_lock_free(h[i]);
		dlock_lock_free(o[i]);
	}
	lc_end(&t);
}

/*
 * Locks held on the loop renew there: a new loop client holds KV_HELD locks
 * through three leases of 1 s with no thread of the library's (kv's own
 * subscriber, which only a waiting acquisition starts, may add one), renews
 * each (the client's statistics), loses none, and says so
 * (DLOCK_FEATURE_LOOP_RENEWS); its releases are the loop's calls too.
 */
static void test_kv_holds_renew_on_loop(void)
{
	dlock_lock *h[KV_HELD] = { NULL };
	lr_op lost[KV_HELD];
	char uri[2200];
	ft_uri_with(uri, sizeof uri, lc_get_target()->uri, "ttl=1000ms");
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	int before = dlock_test_threads_now();
	long started = dlock_test_threads_started();
	lr_client *tc = lr_open_ready(lp, uri);
	if (!tc) {
		lr_loop_free(lp);
		return;
	}
	int64_t renews = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(tc->client, DLOCK_FEATURE_LOOP_RENEWS, &renews), DLOCK_OK);
	CU_ASSERT_EQUAL(renews, 1);
	for (int i = 0; i < KV_HELD; i++) {
		char name[160];
		lr_name(name, sizeof name, "kv-held");
		h[i] = ft_lock(tc->client, name);
		lr_op_init(&lost[i], tc);
		lr_op got;
		lr_op_init(&got, tc);
		CU_ASSERT_EQUAL_FATAL(lr_finish(&got, lr_acquire(h[i], 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost[i], &got)),
		                      DLOCK_OK);
	}
	lr_run_for(lp, 3000); /* three leases */
	int holding = dlock_test_threads_now();
	dlock_client_stats st;
	CU_ASSERT_EQUAL(dlock_client_get_stats(tc->client, &st), DLOCK_OK);
	printf("\n    threads: %d before the client, %d after holding %d locks for 3 s; %llu renewals", before,
	       holding, KV_HELD, (unsigned long long)st.renewals);
	CU_ASSERT(before > 0 && holding <= before + 1);
	CU_ASSERT(st.renewals >= 2 * KV_HELD);
	for (int i = 0; i < KV_HELD; i += 2) { /* half released, half left to the close */
		CU_ASSERT_EQUAL(lost[i].calls, 0);
		CU_ASSERT_EQUAL(lr_release_now(tc, h[i]), DLOCK_OK);
	}
	/* The close releases the rest on the loop, reports each as closed, and starts no thread. */
	int most = dlock_test_threads_now();
	CU_ASSERT_EQUAL(lr_close_async(tc), DLOCK_OK);
	while (tc->closed.calls == 0 && lr_run_until(lp, lr_op_done, &tc->closed, 10) == 0) {
		int now = dlock_test_threads_now();
		most = now > most ? now : most;
	}
	started = dlock_test_threads_started() - started;
	printf("; at most %d while closing; %ld started in all", most, started);
	CU_ASSERT(most <= before + 1);
	CU_ASSERT(started <= 1); /* kv's own subscriber */
	CU_ASSERT_EQUAL(tc->closed.calls, 1);
	dlock_client *other = ft_open(lc_get_target()->uri);
	for (int i = 0; i < KV_HELD; i++) {
		CU_ASSERT_EQUAL(lost[i].calls, i % 2); /* those the close took: told so, once */
		if (i % 2)
			CU_ASSERT_EQUAL(lost[i].reason, DLOCK_LOST_CLOSED);
		if (other) /* and released on the server */
			CU_ASSERT_EQUAL(dlock_test_probe(other, dlock_lock_name(h[i])), DLOCK_OK);
		dlock_lock_free(h[i]);
	}
	dlock_client_close(other);
	lr_loop_free(lp);
}

/* ------------------------------------------------------------ through a fault proxy */

/* Unanswered, a call ends with ECONNECT after io_timeout; then the client connects again and works on. */
static void test_kv_unanswered_call(void)
{
	char name[128];
	faultproxy *px;
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lc_open_via_proxy(lp, lc_get_target()->uri, "io_timeout=500ms", &px);
	dlock_client *other = ft_open(lc_get_target()->uri);
	lr_name(name, sizeof name, "kv-unanswered");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	dlock_status st = h && other ? lr_acquire_now(tc, h, 0) : DLOCK_EINVAL;
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	if (st != DLOCK_OK)
		goto out;
	faultproxy_blackhole(px, FP_BOTH);
	lr_op op;
	lr_op_init(&op, tc);
	int64_t t0 = dlock_test_now_ms();
	st = LR_START(lp, dlock_extend_async(h, 0, lr_on_lock, &op));
	CU_ASSERT_EQUAL(lr_finish(&op, st), DLOCK_ECONNECT);
	int64_t took = dlock_test_now_ms() - t0;
	printf("\n    extend: %s after %lld ms: %s", dlock_status_name(op.status), (long long)took, op.msg);
	CU_ASSERT(took >= KV_IO_TIMEOUT_MS - 5 && took < KV_IO_TIMEOUT_MS + FT_SLACK_MS);
	CU_ASSERT_PTR_NOT_NULL(strstr(op.msg, "kv://127.0.0.1:"));
	CU_ASSERT_PTR_NOT_NULL(strstr(op.msg, "no answer within 500 ms"));
	faultproxy_pass(px);
	CU_ASSERT_EQUAL(lr_check_now(tc, h), DLOCK_OK); /* a new connection; the lock is still ours */
	CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(other, name), DLOCK_OK);
out:
	dlock_lock_free(h);
	dlock_client_close(other);
	lr_loop_free(lp);
	faultproxy_stop(px);
}

/* The answers lost, not the requests: each attempt's script runs, and its undo frees the name again. */
static void test_kv_lost_answer_undone(void)
{
	char name[128];
	faultproxy *px;
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lc_open_via_proxy(lp, lc_get_target()->uri, "io_timeout=500ms", &px);
	dlock_client *other = ft_open(lc_get_target()->uri);
	lr_name(name, sizeof name, "kv-undone");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	if (!h || !other)
		goto out;
	faultproxy_blackhole(px, FP_DOWN);
	lr_op op;
	lr_op_init(&op, tc);
	dlock_status st = lr_acquire(h, 3 * KV_IO_TIMEOUT_MS, 0, 0, DLOCK_MODE_EXCLUSIVE, NULL, &op);
	st = lr_finish(&op, st);
	printf("\n    acquire: %s: %s", dlock_status_name(op.status), op.msg);
	CU_ASSERT(st == DLOCK_ECONNECT || st == DLOCK_ETIMEDOUT);
	/* Still blackholed: without the undo the name would stay held for the whole lease (30 s). */
	CU_ASSERT_EQUAL(dlock_test_probe(other, name), DLOCK_OK);
	faultproxy_pass(px);
	CU_ASSERT_EQUAL(lr_acquire_now(tc, h, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
out:
	dlock_lock_free(h);
	dlock_client_close(other);
	lr_loop_free(lp);
	faultproxy_stop(px);
}

/* With a password: the loop's connection authenticates, and again after every connection was cut. */
static void test_kv_password(void)
{
	const char *ports = dlock_test_env("DLOCK_TEST_SENTINEL_DATA_PORTS");
	const char *pw = dlock_test_env("DLOCK_TEST_SENTINEL_DATA_PASSWORD");
	if (!ports || !pw) {
		dlock_test_skip_part("no password-protected Redis (DLOCK_TEST_SENTINEL_DATA_PORTS, _PASSWORD unset)");
		return;
	}
	char uri[512], name[128];
	snprintf(uri, sizeof uri, "kv://:%s@127.0.0.1:%d?prefix=loop-kv", pw, atoi(ports)); /* the primary */
	faultproxy *px;
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lc_open_via_proxy(lp, uri, "io_timeout=500ms", &px);
	lr_name(name, sizeof name, "kv-auth");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	dlock_status st = h ? lr_acquire_now(tc, h, 0) : DLOCK_EINVAL;
	CU_ASSERT_EQUAL(st, DLOCK_OK); /* a call before AUTH would meet NOAUTH: DLOCK_ESERVER */
	if (st == DLOCK_OK) {
		faultproxy_reset(px);
		/* On a new connection, or on the cut one if the loop has not seen the cut yet: cannot tell. */
		st = lr_check_now(tc, h);
		CU_ASSERT(st == DLOCK_OK || st == DLOCK_EUNCERTAIN);
		CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK); /* connected and authenticated again */
	}
	dlock_lock_free(h);
	lr_loop_free(lp);
	faultproxy_stop(px);
}

const lc_case lc_kv_cases[] = {
	{ "kv: acquisitions waiting on the loop hold no thread", test_kv_waiters_hold_no_thread },
	{ "kv: held locks renew on the loop, with no thread", test_kv_holds_renew_on_loop },
	{ "kv: an unanswered call ends at io_timeout, the next connects again", test_kv_unanswered_call },
	{ "kv: an acquisition whose answer is lost leaves the name free", test_kv_lost_answer_undone },
	{ "kv: a password authenticates every connection", test_kv_password },
	{ NULL, NULL },
};
