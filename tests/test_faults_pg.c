/*
 * Faults between dlock and PostgreSQL, injected by the fault proxy
 * (tests/support/faultproxy.h) or by the server (pg_terminate_backend):
 * what the holder is told, and whether mutual exclusion held.  The server
 * comes from ci/servers/postgres.sh (DLOCK_TEST_PG_URI, _ROW_URI, _PORT,
 * and _BOUNCER_URI when PgBouncer runs).  A stopped (SIGSTOP) holder, the
 * row mode behind PgBouncer and a plain terminated backend are in
 * test_postgres.c; here the terminated backend is timed against its bound.
 *
 * The per-mode suites run once in advisory mode and once in row mode.
 */
#include <CUnit/CUnit.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faultproxy.h"
#include "faults.h"
#include "testsupport.h"

static const char *mode_uri; /* the URI of the suite running now */
static int pg_port;

/* The suite's URI through `px`, with `params` added. */
static void via(char *out, size_t len, const faultproxy *px, const char *params)
{
	char moved[512];
	ft_uri_port(moved, sizeof moved, mode_uri, pg_port, faultproxy_port(px));
	ft_uri_with(out, len, moved, params);
}

/* The test's own libpq connection, for pg_terminate_backend. */
static PGconn *monitor(void)
{
	PGconn *pg = PQconnectdb(dlock_test_env("DLOCK_TEST_PG_URI"));
	if (PQstatus(pg) != CONNECTION_OK)
		printf("\n    monitor: %s", PQerrorMessage(pg));
	CU_ASSERT_EQUAL(PQstatus(pg), CONNECTION_OK);
	return pg;
}

static int terminate_app(PGconn *pg, const char *app)
{
	const char *values[1] = { app };
	PGresult *r = PQexecParams(pg,
	                           "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
	                           "WHERE application_name = $1",
	                           1, NULL, values, NULL, NULL, 0);
	int n = PQresultStatus(r) == PGRES_TUPLES_OK ? atoi(PQgetvalue(r, 0, 0)) : -1;
	PQclear(r);
	return n;
}

/* ------------------------------------------------------------ terminated backend */

#define TERM_LEASE_MS 6000

/*
 * The server ends the holder's session.  The backend learns it at its next
 * statement on that connection, the heartbeat a third of the lease after
 * the acquire: the loss is reported within lease/3, once, as a session loss.
 * The server frees the lock at once, so another client may hold it before
 * then; that window is printed.
 */
static void test_terminated_bound(void)
{
	char uri[512], app[64], params[96], name[64];
	ft_name(app, sizeof app, "term");
	ft_name(name, sizeof name, "terminated");
	snprintf(params, sizeof params, "application_name=%s", app);
	ft_uri_with(uri, sizeof uri, mode_uri, params);
	ft_pair p;
	ft_pair_open(&p, uri, mode_uri, name);
	dlock_lock *la = p.lv, *lb = p.ld;
	PGconn *mon = monitor();
	ft_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(ft_acquire(la, 0, TERM_LEASE_MS, &lost), DLOCK_OK);
	int64_t acquired = dlock_test_now_ms();
	uint64_t ta = dlock_test_token(la);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, FT_LONG_WAIT_MS, 0);
	CU_ASSERT(terminate_app(mon, app) >= 1);
	int64_t killed = dlock_test_now_ms();
	CU_ASSERT(dlock_test_await(ft_lost_called, &lost, TERM_LEASE_MS + FT_AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, FT_AWAIT_MS), DLOCK_OK);
	int64_t told = atomic_load(&lost.at_ms);
	printf("\n    terminated at +%lld ms; holder told at +%lld ms (bound lease/3 = %d ms after the acquire); "
	       "next holder in at +%lld ms",
	       (long long)(killed - acquired), (long long)(told - acquired), TERM_LEASE_MS / 3,
	       (long long)(w.at_ms - acquired));
	CU_ASSERT(told - acquired <= TERM_LEASE_MS / 3 + FT_SLACK_MS);
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_SESSION);
	CU_ASSERT(w.token > ta);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_check(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.calls), 1);
	PQfinish(mon);
	ft_pair_close(&p);
}

/* ------------------------------------------------------------ blackholed holder */

#define HOLE_LEASE_MS 1500

/*
 * The holder's network goes silent: its heartbeats never arrive, so the
 * server ends its idle session after the lease and frees the lock; the
 * holder must have declared the loss first, and its token is refused
 * (ft_silent_begin()); afterwards the client works on.
 */
static void test_blackholed_holder(void)
{
	char uri[512];
	faultproxy *px = ft_proxy_to(pg_port);
	via(uri, sizeof uri, px, "io_timeout=300ms");
	ft_silent s;
	ft_silent_begin(&s, px, uri, mode_uri, "blackholed", 1, HOLE_LEASE_MS);
	ft_silent_end(&s, FT_ANY_REASON);
	faultproxy_stop(px);
}

/* ------------------------------------------------------------ open, close */

static void test_server_down_at_open(void)
{
	ft_check_open_server_down(mode_uri, pg_port, "open_timeout=1s", 1000, 0);
}

static void test_close_releases(void)
{
	ft_check_close_releases(mode_uri, pg_port, "io_timeout=5s", 30000);
}

/* ------------------------------------------------------------ PgBouncer */

/*
 * Behind PgBouncer in transaction pooling, consecutive statements of one
 * client connection may run in different server sessions, so a session
 * advisory lock cannot be held: advisory mode refuses to open
 * (DLOCK_ENOTSUP, README and pg.c), with a message that names mode=row.
 */
static void test_bouncer_advisory(void)
{
	const char *row = dlock_test_env("DLOCK_TEST_PG_BOUNCER_URI");
	char uri[512], err[512] = "";
	const char *q = row ? strstr(row, "mode=row") : NULL;
	if (!q) {
		CU_PASS("DLOCK_TEST_PG_BOUNCER_URI unset");
		printf("\n    SKIPPED: no PgBouncer (DLOCK_TEST_PG_BOUNCER_URI unset)");
		return;
	}
	snprintf(uri, sizeof uri, "%.*smode=advisory%s", (int)(q - row), row, q + strlen("mode=row"));
	dlock_client *c = NULL;
	dlock_status st = dlock_client_open(&c, uri, NULL, err, sizeof err);
	printf("\n    advisory mode behind PgBouncer: %s: %s", dlock_status_name(st), err);
	CU_ASSERT_EQUAL(st, DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(c);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "pooler"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "mode=row"));
	dlock_client_close(c);
}

/* ------------------------------------------------------------ suites */

static int init_advisory(void)
{
	mode_uri = dlock_test_env("DLOCK_TEST_PG_URI");
	return mode_uri ? 0 : 1;
}

static int init_row(void)
{
	mode_uri = dlock_test_env("DLOCK_TEST_PG_ROW_URI");
	return mode_uri ? 0 : 1;
}

static void add_mode_suite(const char *name, CU_InitializeFunc init)
{
	CU_pSuite s = CU_add_suite(name, init, NULL);
	CU_add_test(s, "terminated backend: lost within lease/3", test_terminated_bound);
	CU_add_test(s, "blackholed holder: told before the server frees it", test_blackholed_holder);
	CU_add_test(s, "server hung or refusing at open: ECONNECT in time", test_server_down_at_open);
	CU_add_test(s, "closed while holding on a slow path: released", test_close_releases);
}

static void add_suites(void)
{
	add_mode_suite("postgres faults (advisory)", init_advisory);
	add_mode_suite("postgres faults (row)", init_row);
	CU_pSuite s = CU_add_suite("pgbouncer", NULL, NULL);
	CU_add_test(s, "advisory mode behind transaction pooling is refused (DLOCK_ENOTSUP)", test_bouncer_advisory);
}

int main(void)
{
	const char *port = dlock_test_env("DLOCK_TEST_PG_PORT");
	if (!dlock_test_env("DLOCK_TEST_PG_URI") || !dlock_test_env("DLOCK_TEST_PG_ROW_URI") || !port)
		return dlock_test_skip("no PostgreSQL server (DLOCK_TEST_PG_URI unset)");
	pg_port = atoi(port);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
