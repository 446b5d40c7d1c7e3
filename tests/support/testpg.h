/*
 * Helpers for the PostgreSQL test programs (test_pg_elect, test_pg_inspect):
 * names of their own, clients of the advisory URI ($DLOCK_TEST_PG_URI) with
 * parameters added, and a libpq connection of the test's own to look at the
 * server.  Single-threaded: call them from the test's thread.  Failures are
 * printed; only dlock_testpg_monitor() asserts (not fatally).
 */
#ifndef DLOCK_TESTPG_H
#define DLOCK_TESTPG_H

#include <libpq-fe.h>
#include <stddef.h>

#include "dlock/dlock.h"

/** A name no other test or run uses: "PREFIX-PID-TIME-N-TAG" into out[len]. */
void dlock_testpg_name(char *out, size_t len, const char *prefix, const char *tag);

/** A client of $DLOCK_TEST_PG_URI with `params` ("k=v&k=v", or "") added to its query; NULL when it fails (printed). */
dlock_client *dlock_testpg_open_with(const char *params);

/** A libpq connection of the test's own to $DLOCK_TEST_PG_URI (asserted, not fatally); the caller PQfinish()es it. */
PGconn *dlock_testpg_monitor(void);

/** One value of a query with at most one parameter (`param`, text; NULL: none), as a number; -1 on error. */
long long dlock_testpg_num(PGconn *pg, const char *sql, const char *param);

/** Run `body` on $DLOCK_TEST_PG_ROW_URI, then on $DLOCK_TEST_PG_BOUNCER_URI when it is set. */
void dlock_testpg_each_row_uri(void (*body)(const char *uri));

/**
 * main() of a PostgreSQL test program: SKIPPED (dlock_test_skip()) without
 * $DLOCK_TEST_PG_URI and $DLOCK_TEST_PG_ROW_URI, else dlock_test_main().
 */
int dlock_testpg_main(void (*add_suites)(void));

#endif
