/*
 * PostgreSQL on a loop client's loop (backends/postgres/pg_loop.c, driver
 * contract 9): a loop client of one host in advisory mode makes its lock
 * calls on its loop, on non-blocking connections of its own, with no
 * thread; row mode runs them on the core's worker threads.  On
 * $DLOCK_TEST_PG_URI (and $DLOCK_TEST_PG_TLS_URI: libpq's TLS, non-blocking):
 *
 *   - what every driver on the loop owes (loop_driver.c): 20 acquisitions
 *     waiting at once (the core polls them) start no thread; held locks
 *     renew on the loop (the session's heartbeat) through three leases, and
 *     the close releases them, with no thread started;
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

#define WAITERS 20         /* acquisitions waiting at once on the loop */
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

/* Its waiters poll (no wake-ups on the loop yet), each attempt on a session: fewer of them. */
static int init_target(const char *uri, lr_mode mode)
{
	return lc_set_target(
		&(lc_target){ .uri = uri, .mode = mode, .short_lease_ms = 1000, .waiters = WAITERS, .waiters_poll = 1 });
}

static int plain_pull(void)
{
	return init_target(plain_uri, LR_PULL);
}

static int plain_push(void)
{
	return init_target(plain_uri, LR_PUSH);
}

static int tls_pull(void)
{
	return init_target(tls_uri, LR_PULL);
}

static void add_suites(void)
{
	/* The loop contract's cases run on PostgreSQL in test_loop_servers. */
	CU_pSuite s = CU_add_suite("postgres:// advisory pull", plain_pull, NULL);
	for (const lc_case *c = lc_driver_cases; c->name; c++) /* waiters and renewals: no thread */
		CU_add_test(s, c->name, c->fn);
	for (const lc_case *c = pl_cases; c->name; c++)
		CU_add_test(s, c->name, c->fn);
	s = CU_add_suite("postgres:// advisory push", plain_push, NULL);
	for (const lc_case *c = lc_driver_cases; c->name; c++)
		CU_add_test(s, c->name, c->fn);
	CU_add_test(s, "a session the server ends: its lock lost once", test_session_killed);
	if (tls_uri[0]) {
		s = CU_add_suite("postgres:// TLS pull", tls_pull, NULL);
		for (const lc_case *c = lc_driver_cases; c->name; c++)
			CU_add_test(s, c->name, c->fn);
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
