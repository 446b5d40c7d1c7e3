/*
 * PostgreSQL on a loop client's loop (backends/postgres/pg_loop.c, driver
 * contract 9): a loop client of one host in advisory mode makes its lock
 * calls on its loop, on non-blocking connections of its own, with no
 * thread; row mode runs them on the core's worker threads.  On
 * $DLOCK_TEST_PG_URI (and $DLOCK_TEST_PG_TLS_URI: libpq's TLS, non-blocking):
 *
 *   - acquisitions waiting on the loop hold no thread: N wait at once (the
 *     core polls them) for names another client holds, and the process has
 *     no more threads than with one waiting, none started meanwhile;
 *   - held locks renew on the loop (the session's heartbeat): held through
 *     three leases, then half released and half left to the close, with no
 *     thread started from the open to the close;
 *   - the holding session ended by the server (pg_terminate_backend from a
 *     connection of the test's own): the loss is reported once;
 *   - through a fault proxy of the test's own: a server that stops
 *     answering ends the pending call with DLOCK_ECONNECT within
 *     io_timeout (an extend: DLOCK_ENOTHELD, as the blocking extend answers
 *     for a session gone; an attempt: DLOCK_ECONNECT after one more try on
 *     a new connection, as the blocking path tries), and the lock is
 *     reported lost once (its session is gone with the connection).
 *
 * And once: a wrong password is DLOCK_EAUTH ($DLOCK_TEST_PG_PW_URI); a
 * loop client of mode=row still works (declined: workers).
 *
 * Faults go through proxies of the test's own; the shared server sees
 * only a pg_terminate_backend of a session of this test.  Skipped, loudly,
 * without the URIs.  Threads: the test's, which drives the loops.  Errors:
 * CUnit assertions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/sys/postgres.h"
#include "faultproxy.h"
#include "faults.h"
#include "loop_cases.h"
#include "testpg.h"
#include "threadcount.h"

#define WAITERS 20         /* acquisitions waiting at once on the loop */
#define HELD 10            /* locks a loop client holds through three leases */
#define HELD_LEASE_MS 1500
#define IO_TIMEOUT_MS 500  /* the faulty client's io_timeout */
#define OPEN_TIMEOUT_MS 1000 /* ... and open_timeout, for a connection through the blackholed proxy */
#define URI_MAX 2300

static char plain_uri[URI_MAX], tls_uri[URI_MAX];

/* 1 when the loop client runs on its loop (DLOCK_FEATURE_LOOP_NATIVE is the core's: ask it). */
static int64_t feature(lr_client *tc, dlock_feature f)
{
	int64_t v = -2;
	if (tc)
		dlock_client_feature(tc->client, f, &v);
	return v;
}

/* ------------------------------------------------------------ no thread per waiter */

static void test_waiters_hold_no_thread(void)
{
	static lr_op ops[WAITERS];
	dlock_lock *h[WAITERS] = { NULL }, *o[WAITERS] = { NULL };
	lc t;
	if (!lc_begin(&t, "pl-waiters"))
		return;
	for (int i = 0; i < WAITERS; i++) {
		char name[160];
		snprintf(name, sizeof name, "%s-%d", t.name, i);
		h[i] = lc_lock(&t, name);
		o[i] = lc_other_lock(&t, name);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o[i], 0, 0, -1, NULL, NULL), DLOCK_OK);
	}
	lc_progress p = { t.tc, lc_attempts(t.tc) + 1, ops, WAITERS };
	lr_op_init(&ops[0], t.tc);
	CU_ASSERT_EQUAL(lr_acquire(h[0], LR_AWAIT_MS, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &ops[0]), DLOCK_OK);
	CU_ASSERT(lr_run_until(t.lp, lc_attempted, &p, LR_AWAIT_MS));
	lr_run_for(t.lp, 100);
	int one = dlock_test_threads_now();
	long started = dlock_test_threads_started();
	p.attempts = lc_attempts(t.tc) + WAITERS - 1;
	for (int i = 1; i < WAITERS; i++) {
		lr_op_init(&ops[i], t.tc);
		CU_ASSERT_EQUAL(lr_acquire(h[i], LR_AWAIT_MS, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &ops[i]), DLOCK_OK);
	}
	CU_ASSERT(lr_run_until(t.lp, lc_attempted, &p, LR_AWAIT_MS)); /* each asked the server once: all wait */
	lr_run_for(t.lp, 300);
	int waiting = dlock_test_threads_now();
	started = dlock_test_threads_started() - started;
	printf("\n    threads: %d with one waiter, %d while %d wait (%ld started)", one, waiting, WAITERS, started);
	CU_ASSERT(one > 0 && waiting <= one);
	CU_ASSERT_EQUAL(started, 0);
	int early = 0;
	for (int i = 0; i < WAITERS; i++)
		early += ops[i].calls != 0;
	CU_ASSERT_EQUAL(early, 0); /* each waits for its holder */
	for (int i = 0; i < WAITERS; i++)
		CU_ASSERT_EQUAL(dlock_release(o[i]), DLOCK_OK);
	CU_ASSERT(lr_run_until(t.lp, lc_all_done, &p, LR_AWAIT_MS)); /* the next poll finds each free */
	for (int i = 0; i < WAITERS; i++) {
		if (LR_ASSERT_ONCE(&ops[i], DLOCK_OK))
			CU_ASSERT_EQUAL(lr_release_now(t.tc, h[i]), DLOCK_OK);
		dlock_lock_free(h[i]);
		dlock_lock_free(o[i]);
	}
	lc_end(&t);
}

/* ------------------------------------------------------------ renewals on the loop */

static void test_renewals_hold_no_thread(void)
{
	dlock_lock *held[HELD] = { NULL };
	lr_op lost[HELD];
	char uri[URI_MAX + 32], params[32];
	snprintf(params, sizeof params, "ttl=%dms", HELD_LEASE_MS);
	ft_uri_with(uri, sizeof uri, lc_get_target()->uri, params);
	dlock_client *plain = ft_open(uri);
	long started = dlock_test_threads_started();
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lr_open_ready(lp, uri);
	for (int i = 0; tc && i < HELD; i++) {
		char name[128];
		lr_name(name, sizeof name, "pl-held");
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
	for (int i = 0; tc && i < HELD; i++) {
		CU_ASSERT_EQUAL(lost[i].calls, 0);
		CU_ASSERT_EQUAL(lr_check_now(tc, held[i]), DLOCK_OK); /* still this session's */
	}
	for (int i = 0; tc && i < HELD; i += 2) /* the odd ones are left to the close */
		CU_ASSERT_EQUAL(lr_release_now(tc, held[i]), DLOCK_OK);
	if (tc) {
		CU_ASSERT_EQUAL(lr_close_async(tc), DLOCK_OK);
		CU_ASSERT(lr_run_done(lp, &tc->closed, LR_AWAIT_MS));
	}
	started = dlock_test_threads_started() - started;
	printf("\n    %d locks held for %d ms: %llu renewals; %ld threads started from the open to the close", HELD,
	       3 * HELD_LEASE_MS, (unsigned long long)stats.renewals, started);
	CU_ASSERT_EQUAL(started, 0);
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

/* ------------------------------------------------------------ losses */

/* The server ends the holding session: the loss is reported once, and the name is free. */
static void test_session_killed(void)
{
	char name[128], key[32];
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lr_open_ready(lp, lc_get_target()->uri);
	PGconn *mon = PQconnectdb(lc_get_target()->uri);
	CU_ASSERT_FATAL(PQstatus(mon) == CONNECTION_OK);
	lr_name(name, sizeof name, "pl-killed");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	lr_op done, lost;
	lr_op_init(&done, tc);
	lr_op_init(&lost, tc);
	dlock_status st = h ? lr_acquire(h, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost, &done) : DLOCK_EINVAL;
	CU_ASSERT_EQUAL_FATAL(lr_finish(&done, st), DLOCK_OK);
	int64_t k = 0;
	CU_ASSERT_EQUAL(dlock_lock_control(h, DLOCK_PG_CTL_ADVISORY_KEY, &k), DLOCK_OK);
	snprintf(key, sizeof key, "%lld", (long long)k);
	long long killed = dlock_testpg_num(mon,
	                                    "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = "
	                                    "'advisory' AND objsubid = 1 AND granted "
	                                    "AND classid = (($1::int8 >> 32) & 4294967295)::oid "
	                                    "AND objid = ($1::int8 & 4294967295)::oid",
	                                    key);
	CU_ASSERT_EQUAL(killed, 1);
	CU_ASSERT(lr_run_done(lp, &lost, LR_AWAIT_MS));
	lr_run_for(lp, 300);
	printf("\n    lost: %s", lost.msg);
	CU_ASSERT_EQUAL(lost.calls, 1);
	CU_ASSERT_EQUAL(lost.reason, DLOCK_LOST_SESSION);
	st = lr_release_now(tc, h); /* the lost lock's release, on its dead connection */
	CU_ASSERT(st == DLOCK_OK || st == DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(lr_acquire_now(tc, h, 0), DLOCK_OK); /* a new session takes it again */
	CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
	dlock_lock_free(h);
	PQfinish(mon);
	lr_loop_free(lp);
}

/* Unanswered, a call ends with ECONNECT within io_timeout; the lock is lost once, with its connection. */
static void test_unanswered_call(void)
{
	char name[128], params[96];
	faultproxy *px = NULL;
	snprintf(params, sizeof params, "io_timeout=%dms&open_timeout=%dms", IO_TIMEOUT_MS, OPEN_TIMEOUT_MS);
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lc_open_via_proxy(lp, lc_get_target()->uri, params, &px);
	dlock_client *other = ft_open(lc_get_target()->uri);
	lr_name(name, sizeof name, "pl-unanswered");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	lr_name(name, sizeof name, "pl-unanswered-2");
	dlock_lock *h2 = tc ? ft_lock(tc->client, name) : NULL;
	lr_op done, lost, op, try2;
	lr_op_init(&done, tc);
	lr_op_init(&lost, tc);
	dlock_status st = h && other ? lr_acquire(h, 0, 0, 0, DLOCK_MODE_EXCLUSIVE, &lost, &done) : DLOCK_EINVAL;
	CU_ASSERT_EQUAL(lr_finish(&done, st), DLOCK_OK);
	if (done.status != DLOCK_OK)
		goto out;
	faultproxy_blackhole(px, FP_BOTH);
	lr_op_init(&op, tc);
	lr_op_init(&try2, tc);
	int64_t t0 = dlock_test_now_ms();
	st = LR_START(lp, dlock_extend_async(h, 0, lr_on_lock, &op));
	dlock_status st2 = h2 ? lr_acquire(h2, 0, 0, 0, DLOCK_MODE_EXCLUSIVE, NULL, &try2) : DLOCK_EINVAL;
	st = lr_finish(&op, st);
	int64_t took = dlock_test_now_ms() - t0;
	printf("\n    extend: %s after %lld ms: %s", dlock_status_name(op.status), (long long)took, op.msg);
	/* The blocking extend's answer: the session is gone with its connection, and the lock with it. */
	CU_ASSERT_EQUAL(st, DLOCK_ENOTHELD);
	CU_ASSERT(took >= IO_TIMEOUT_MS - 5 && took < IO_TIMEOUT_MS + FT_SLACK_MS);
	st2 = lr_finish(&try2, st2);
	took = dlock_test_now_ms() - t0;
	printf("\n    acquire: %s after %lld ms: %s", dlock_status_name(try2.status), (long long)took, try2.msg);
	CU_ASSERT_EQUAL(st2, DLOCK_ECONNECT); /* its shared connection failed: once more on a new one, unanswered */
	CU_ASSERT(took < IO_TIMEOUT_MS + OPEN_TIMEOUT_MS + FT_SLACK_MS);
	CU_ASSERT(lr_run_done(lp, &lost, LR_AWAIT_MS));
	lr_run_for(lp, 200);
	CU_ASSERT_EQUAL(lost.calls, 1);
	printf("\n    lost: %s", lost.msg);
	faultproxy_pass(px);
	st = lr_release_now(tc, h); /* the lost lock's release, on its dead connection */
	CU_ASSERT(st == DLOCK_OK || st == DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(lr_acquire_now(tc, h, 0), DLOCK_OK); /* a new connection */
	CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
out:
	dlock_lock_free(h);
	dlock_lock_free(h2);
	dlock_client_close(other);
	lr_loop_free(lp);
	faultproxy_stop(px);
}

static const lc_case pl_cases[] = {
	{ "acquisitions waiting on the loop hold no thread", test_waiters_hold_no_thread },
	{ "held locks renew on the loop, with no thread", test_renewals_hold_no_thread },
	{ "a session the server ends: its lock lost once", test_session_killed },
	{ "an unanswered call ends at io_timeout, its lock lost once", test_unanswered_call },
	{ NULL, NULL },
};

/* ------------------------------------------------------------ once */

static void test_wrong_password(void)
{
	const char *pw_uri = dlock_test_env("DLOCK_TEST_PG_PW_URI");
	if (!pw_uri) {
		dlock_test_skip_part("no DLOCK_TEST_PG_PW_URI");
		return;
	}
	char uri[URI_MAX], err[512] = "";
	snprintf(uri, sizeof uri, "%s", pw_uri);
	char *colon = strchr(uri + strlen("postgres://"), ':'), *at = strchr(uri, '@');
	CU_ASSERT_FATAL(colon && at && colon < at);
	for (char *p = colon + 1; p < at; p++)
		*p = 'W';
	lr_loop *lp = lr_loop_new(LR_PULL);
	lr_client *tc = lr_client_new(lp);
	dlock_status st = lr_open(tc, uri, NULL, err, sizeof err);
	if (st == DLOCK_OK && lr_run_done(lp, &tc->opened, LR_AWAIT_MS))
		st = tc->opened.status;
	printf("\n    open: %s: %s", dlock_status_name(st), tc->opened.msg);
	CU_ASSERT_EQUAL(st, DLOCK_EAUTH);
	CU_ASSERT_PTR_NULL(strstr(tc->opened.msg, "WWWW"));
	lr_loop_free(lp);
}

/* mode=row declines the loop (workers): its lock calls work all the same. */
static void test_row_mode_declined(void)
{
	const char *row = dlock_test_env("DLOCK_TEST_PG_ROW_URI");
	if (!row) {
		dlock_test_skip_part("no DLOCK_TEST_PG_ROW_URI");
		return;
	}
	char name[128];
	lr_loop *lp = lr_loop_new(LR_PULL);
	lr_client *tc = lr_open_ready(lp, row);
	CU_ASSERT_PTR_NOT_NULL_FATAL(tc);
	CU_ASSERT_EQUAL(feature(tc, DLOCK_FEATURE_FAIR), 1); /* the server's queue: not the loop's polling */
	lr_name(name, sizeof name, "pl-row");
	dlock_lock *h = ft_lock(tc->client, name);
	CU_ASSERT_EQUAL(lr_acquire_now(tc, h, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_check_now(tc, h), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
	dlock_lock_free(h);
	lr_loop_free(lp);
}

/* ------------------------------------------------------------ suites */

static int plain_pull(void)
{
	return lc_set_target(&(lc_target){ plain_uri, LR_PULL, 1000 });
}

static int plain_push(void)
{
	return lc_set_target(&(lc_target){ plain_uri, LR_PUSH, 1000 });
}

static int tls_pull(void)
{
	return lc_set_target(&(lc_target){ tls_uri, LR_PULL, 1000 });
}

static void add_suites(void)
{
	/* The loop contract's cases run on PostgreSQL in test_loop_servers. */
	CU_pSuite s = CU_add_suite("postgres:// advisory pull", plain_pull, NULL);
	for (const lc_case *c = pl_cases; c->name; c++)
		CU_add_test(s, c->name, c->fn);
	s = CU_add_suite("postgres:// advisory push", plain_push, NULL);
	for (const lc_case *c = pl_cases; c->name; c++)
		if (c->fn != test_unanswered_call)
			CU_add_test(s, c->name, c->fn);
	if (tls_uri[0]) {
		s = CU_add_suite("postgres:// TLS pull", tls_pull, NULL);
		CU_add_test(s, "held locks renew on the loop, with no thread", test_renewals_hold_no_thread);
		CU_add_test(s, "a session the server ends: its lock lost once", test_session_killed);
	}
	s = CU_add_suite("postgres:// on the loop, once", NULL, NULL);
	CU_add_test(s, "a wrong password: EAUTH", test_wrong_password);
	CU_add_test(s, "mode=row still works on a loop client (workers)", test_row_mode_declined);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *uri = dlock_test_env("DLOCK_TEST_PG_URI");
	if (!uri)
		return dlock_test_skip("no PostgreSQL (DLOCK_TEST_PG_URI unset)");
	snprintf(plain_uri, sizeof plain_uri, "%s", uri);
	const char *tls = dlock_test_env("DLOCK_TEST_PG_TLS_URI");
	snprintf(tls_uri, sizeof tls_uri, "%s", tls ? tls : "");
	return dlock_test_main(add_suites);
}
