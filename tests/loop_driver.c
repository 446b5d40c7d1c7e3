/*
 * The cases of a driver whose lock calls run on a loop client's loop
 * (driver contract 9), stated once for each such driver's test program
 * (loop_kv.c's kv:// in test_loop_servers.c, test_redis_loop.c): what the
 * loop contract (loop_cases.h) does not ask, and every such driver owes.
 *
 *   - Acquisitions waiting on the loop hold no thread: N = 50 (or the
 *     target's `waiters`) wait at once
 *     for names another client holds, woken by the releases, and no thread
 *     is started for them (where the core's workers would add one per
 *     waiting acquisition, and a subscriber thread would wake them).
 *   - Held locks renew on the loop, and the close releases them there: 20
 *     held through three leases, then half of them left to the close, each
 *     told DLOCK_LOST_CLOSED once and free on the server, with no thread
 *     started from the open to the close (but the driver's own, at open:
 *     lc_target.driver_threads); DLOCK_FEATURE_LOOP_RENEWS says so.
 *   - Through a fault proxy of the test's own (TCP targets; a unix socket
 *     skips, said so), for a driver whose locks outlive a connection
 *     (lc_driver_conn_cases; not PostgreSQL's, whose sessions hold them):
 *     a call the server does not answer ends with
 *     DLOCK_ECONNECT once io_timeout has passed, naming the server, and the
 *     next call connects again; a connection cut while a call waits ends
 *     it at once, and the next connects again; an acquisition whose answer
 *     is lost leaves the name free (the driver's undo), not held for its
 *     lease.
 *
 * The target is lc_get_target(); the program links support/threadcount.c
 * with -Wl,--wrap=pthread_create.  Threads: the test's, which drives the
 * loops.  Errors: CUnit assertions.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "faultproxy.h"
#include "faults.h"
#include "loop_cases.h"
#include "threadcount.h"

#define IO_TIMEOUT_MS 500  /* the faulty clients' io_timeout */
#define CUT_IO_TIMEOUT_MS 20000 /* io_timeout while a cut is awaited: its answer comes long before */
#define URI_MAX 2300

/* 1 when the target is reached over TCP (a proxy can stand between); else the case is skipped, said so. */
static int tcp_target(void)
{
	if (lc_uri_port(lc_get_target()->uri) > 0)
		return 1;
	dlock_test_skip_part("a unix socket: no fault proxy between");
	return 0;
}

/* ------------------------------------------------------------ no thread per waiter */

/* N acquisitions wait on the loop, for names the other client holds, with the threads one waiter had. */
static void test_waiters_hold_no_thread(void)
{
	static lr_op ops[LC_WAITERS_MAX];
	dlock_lock *h[LC_WAITERS_MAX] = { NULL }, *o[LC_WAITERS_MAX] = { NULL };
	const int waiters = lc_get_target()->waiters > 0 ? lc_get_target()->waiters : LC_WAITERS_MAX;
	lc t;
	if (!lc_begin(&t, "drv-waiters"))
		return;
	for (int i = 0; i < waiters; i++) {
		char name[160];
		snprintf(name, sizeof name, "%s-%d", t.name, i);
		h[i] = lc_lock(&t, name);
		o[i] = lc_other_lock(&t, name);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o[i], 0, 0, -1, NULL, NULL), DLOCK_OK);
	}
	/* Nothing is started for them: not a worker each, not a subscriber once something waits. */
	int before = dlock_test_threads_now();
	long started = dlock_test_threads_started();
	lc_progress p = { t.tc, lc_attempts(t.tc) + (uint64_t)waiters, ops, (size_t)waiters };
	for (int i = 0; i < waiters; i++) {
		lr_op_init(&ops[i], t.tc);
		CU_ASSERT_EQUAL(lr_acquire(h[i], LR_AWAIT_MS, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &ops[i]), DLOCK_OK);
	}
	CU_ASSERT(lr_run_until(t.lp, lc_attempted, &p, LR_AWAIT_MS)); /* each asked the server once: all wait */
	uint64_t asked = lc_attempts(t.tc);
	lr_run_for(t.lp, 200);
	/* Armed, they wait to be woken: at most one more attempt each (its wake-up's subscription confirmed), where
	 * polling would ask again and again. */
	uint64_t idle_asks = lc_attempts(t.tc) - asked;
	if (!lc_get_target()->waiters_poll)
		CU_ASSERT(idle_asks <= (uint64_t)waiters);
	int waiting = dlock_test_threads_now();
	started = dlock_test_threads_started() - started;
	printf("\n    threads: %d before, %d while %d acquisitions wait (%ld started); %llu attempts in 200 ms of waiting",
	       before, waiting, waiters, started, (unsigned long long)idle_asks);
	CU_ASSERT(before > 0 && waiting <= before);
	CU_ASSERT_EQUAL(started, 0);
	int early = 0;
	for (int i = 0; i < waiters; i++)
		early += ops[i].calls != 0;
	CU_ASSERT_EQUAL(early, 0); /* each waits for its holder */
	for (int i = 0; i < waiters; i++)
		CU_ASSERT_EQUAL(dlock_release(o[i]), DLOCK_OK);
	CU_ASSERT(lr_run_until(t.lp, lc_all_done, &p, LR_AWAIT_MS)); /* woken by the releases */
	for (int i = 0; i < waiters; i++) {
		if (LR_ASSERT_ONCE(&ops[i], DLOCK_OK))
			CU_ASSERT_EQUAL(lr_release_now(t.tc, h[i]), DLOCK_OK);
		dlock_lock_free(h[i]);
		dlock_lock_free(o[i]);
	}
	lc_end(&t);
}

/* ------------------------------------------------------------ renewals on the loop */

#define HELD 20            /* locks a loop client holds through three leases */
#define HELD_LEASE_MS 1000

/*
 * Held locks renew on the loop, and its close releases them there: a loop
 * client holds HELD locks through three leases, each renewed and none
 * lost, releases half, and closes with the other half held (each told
 * DLOCK_LOST_CLOSED once, and free on the server); from its open to its
 * close no thread is started (pthread_create() counted).  Its URI says so
 * to any client (DLOCK_FEATURE_LOOP_RENEWS), a blocking one's too.
 */
static void test_renewals_hold_no_thread(void)
{
	dlock_lock *held[HELD] = { NULL };
	lr_op lost[HELD];
	char uri[URI_MAX + 32], params[32];
	snprintf(params, sizeof params, "ttl=%dms", HELD_LEASE_MS);
	ft_uri_with(uri, sizeof uri, lc_get_target()->uri, params);
	int64_t renews = -1, blocking_says = -1;
	dlock_client *plain = ft_open(uri);
	CU_ASSERT(plain && dlock_client_feature(plain, DLOCK_FEATURE_LOOP_RENEWS, &blocking_says) == DLOCK_OK);
	long started = dlock_test_threads_started();
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lr_open_ready(lp, uri);
	CU_ASSERT(tc && dlock_client_feature(tc->client, DLOCK_FEATURE_LOOP_RENEWS, &renews) == DLOCK_OK);
	CU_ASSERT(renews == 1 && blocking_says == 1);
	for (int i = 0; tc && i < HELD; i++) {
		char name[128];
		lr_name(name, sizeof name, "drv-held");
		held[i] = ft_lock(tc->client, name);
		lr_op done;
		lr_op_init(&done, tc);
		lr_op_init(&lost[i], tc);
		dlock_status st = lr_acquire(held[i], 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost[i], &done);
		CU_ASSERT_EQUAL_FATAL(lr_finish(&done, st), DLOCK_OK);
	}
	lr_run_for(lp, 3 * HELD_LEASE_MS);
	dlock_client_stats stats = { 0 };
	if (tc)
		dlock_client_get_stats(tc->client, &stats);
	CU_ASSERT(stats.renewals >= 2 * HELD);
	for (int i = 0; tc && i < HELD; i += 2) { /* the odd ones are left to the close */
		CU_ASSERT_EQUAL(lost[i].calls, 0);
		CU_ASSERT_EQUAL(lr_release_now(tc, held[i]), DLOCK_OK);
	}
	if (tc) { /* on the loop: the rest released there */
		CU_ASSERT_EQUAL(lr_close_async(tc), DLOCK_OK);
		CU_ASSERT(lr_run_done(lp, &tc->closed, LR_AWAIT_MS));
	}
	started = dlock_test_threads_started() - started;
	printf("\n    %d locks held for %d ms: %llu renewals; %ld threads started from the open to the close", HELD,
	       3 * HELD_LEASE_MS, (unsigned long long)stats.renewals, started);
	CU_ASSERT_EQUAL(started, lc_get_target()->driver_threads);
	for (int i = 0; i < HELD; i++) {
		CU_ASSERT_EQUAL(lost[i].calls, i % 2);
		if (i % 2 && lost[i].calls)
			CU_ASSERT_EQUAL(lost[i].reason, DLOCK_LOST_CLOSED);
		if (plain && held[i])
			CU_ASSERT_EQUAL(dlock_test_probe(plain, dlock_lock_name(held[i])), DLOCK_OK);
		dlock_lock_free(held[i]);
	}
	dlock_client_close(plain);
	lr_loop_free(lp);
}

/* ------------------------------------------------------------ through a fault proxy */

/* A loop client through a fault proxy of the test's own, an ordinary client beside, a handle of a fresh name. */
typedef struct proxied {
	lr_loop *lp;
	lr_client *tc;
	faultproxy *px;
	dlock_client *other;
	dlock_lock *h;
	char name[128];
} proxied;

/* 1 when the cast is ready (its handle holding the name when `hold`); else 0, asserted or said skipped. */
static int proxied_begin(proxied *p, const char *tag, int io_timeout_ms, int hold)
{
	char params[64];
	*p = (proxied){ .lp = NULL };
	if (!tcp_target())
		return 0;
	snprintf(params, sizeof params, "io_timeout=%dms", io_timeout_ms);
	p->lp = lr_loop_new(lc_get_target()->mode);
	p->tc = lc_open_via_proxy(p->lp, lc_get_target()->uri, params, &p->px);
	p->other = ft_open(lc_get_target()->uri);
	lr_name(p->name, sizeof p->name, tag);
	p->h = p->tc ? ft_lock(p->tc->client, p->name) : NULL;
	if (!p->h || !p->other)
		return 0;
	if (!hold)
		return 1;
	dlock_status st = lr_acquire_now(p->tc, p->h, 0);
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	return st == DLOCK_OK;
}

static void proxied_end(proxied *p)
{
	dlock_lock_free(p->h);
	dlock_client_close(p->other);
	if (p->lp)
		lr_loop_free(p->lp);
	if (p->px)
		faultproxy_stop(p->px);
}

/* Unanswered, a call ends with ECONNECT after io_timeout; then the client connects again and works on. */
static void test_unanswered_call(void)
{
	proxied p;
	if (proxied_begin(&p, "drv-unanswered", IO_TIMEOUT_MS, 1)) {
		faultproxy_blackhole(p.px, FP_BOTH);
		lr_op op;
		int64_t t0 = dlock_test_now_ms();
		dlock_status st = lc_extend_start(p.lp, p.tc, p.h, &op);
		CU_ASSERT_EQUAL(lr_finish(&op, st), DLOCK_ECONNECT);
		int64_t took = dlock_test_now_ms() - t0;
		printf("\n    extend: %s after %lld ms: %s", dlock_status_name(op.status), (long long)took, op.msg);
		CU_ASSERT(took >= IO_TIMEOUT_MS - 5 && took < IO_TIMEOUT_MS + FT_SLACK_MS);
		CU_ASSERT_PTR_NOT_NULL(strstr(op.msg, "127.0.0.1:"));
		CU_ASSERT_PTR_NOT_NULL(strstr(op.msg, "no answer within 500 ms"));
		faultproxy_pass(p.px);
		CU_ASSERT_EQUAL(lr_check_now(p.tc, p.h), DLOCK_OK); /* a new connection; the lock is still ours */
		CU_ASSERT_EQUAL(lr_release_now(p.tc, p.h), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_probe(p.other, p.name), DLOCK_OK);
	}
	proxied_end(&p);
}

/* Cut while calls wait for their answers: they end at once (not at io_timeout), and the next call connects. */
static void test_cut_ends_calls(void)
{
	proxied p;
	if (proxied_begin(&p, "drv-cut", CUT_IO_TIMEOUT_MS, 1)) {
		faultproxy_blackhole(p.px, FP_DOWN); /* the extend reaches the server; its answer waits in the proxy */
		lr_op op;
		dlock_status st = lc_extend_start(p.lp, p.tc, p.h, &op);
		CU_ASSERT_EQUAL(st, DLOCK_OK);
		lr_run_for(p.lp, 100);
		CU_ASSERT_EQUAL(op.calls, 0);
		int64_t t0 = dlock_test_now_ms();
		faultproxy_reset(p.px);
		CU_ASSERT_EQUAL(lr_finish(&op, st), DLOCK_ECONNECT);
		int64_t took = dlock_test_now_ms() - t0;
		printf("\n    extend: %s %lld ms after the cut: %s", dlock_status_name(op.status), (long long)took, op.msg);
		CU_ASSERT(took < CUT_IO_TIMEOUT_MS);
		CU_ASSERT_PTR_NOT_NULL(strstr(op.msg, "127.0.0.1:"));
		faultproxy_pass(p.px);
		CU_ASSERT_EQUAL(lr_check_now(p.tc, p.h), DLOCK_OK); /* connected again */
		CU_ASSERT_EQUAL(lr_release_now(p.tc, p.h), DLOCK_OK);
	}
	proxied_end(&p);
}

/* The answers lost, not the requests: each attempt's script runs, and its undo frees the name again. */
static void test_lost_answer_undone(void)
{
	proxied p;
	if (proxied_begin(&p, "drv-undone", IO_TIMEOUT_MS, 0)) {
		faultproxy_blackhole(p.px, FP_DOWN);
		lr_op op;
		lr_op_init(&op, p.tc);
		dlock_status st = lr_acquire(p.h, 3 * IO_TIMEOUT_MS, 0, 0, DLOCK_MODE_EXCLUSIVE, NULL, &op);
		st = lr_finish(&op, st);
		printf("\n    acquire: %s: %s", dlock_status_name(op.status), op.msg);
		CU_ASSERT(st == DLOCK_ECONNECT || st == DLOCK_ETIMEDOUT);
		/* Still blackholed: without the undo the name would stay held for the whole lease (30 s). */
		CU_ASSERT_EQUAL(dlock_test_probe(p.other, p.name), DLOCK_OK);
		faultproxy_pass(p.px);
		CU_ASSERT_EQUAL(lr_acquire_now(p.tc, p.h, 0), DLOCK_OK);
		CU_ASSERT_EQUAL(lr_release_now(p.tc, p.h), DLOCK_OK);
	}
	proxied_end(&p);
}

const lc_case lc_driver_cases[] = {
	{ "acquisitions waiting on the loop hold no thread", test_waiters_hold_no_thread },
	{ "held locks renew on the loop, with no thread", test_renewals_hold_no_thread },
	{ NULL, NULL },
};

const lc_case lc_driver_conn_cases[] = {
	{ "an unanswered call ends at io_timeout, the next connects again", test_unanswered_call },
	{ "a cut ends the calls waiting at once, the next connects again", test_cut_ends_calls },
	{ "an acquisition whose answer is lost leaves the name free", test_lost_answer_undone },
	{ NULL, NULL },
};
