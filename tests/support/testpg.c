/* Helpers for the PostgreSQL test programs (testpg.h). */
#include "testpg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testsupport.h"

static unsigned counter;

void dlock_testpg_name(char *out, size_t len, const char *prefix, const char *tag)
{
	snprintf(out, len, "%s-%ld-%ld-%u-%s", prefix, (long)getpid(), (long)time(NULL), ++counter, tag);
}

dlock_client *dlock_testpg_open_with(const char *params)
{
	char uri[1024];
	const char *base = dlock_test_env("DLOCK_TEST_PG_URI");
	snprintf(uri, sizeof uri, "%s%s%s", base, params[0] ? (strchr(base, '?') ? "&" : "?") : "", params);
	return dlock_test_open(uri, NULL, NULL);
}

PGconn *dlock_testpg_monitor(void)
{
	PGconn *pg = PQconnectdb(dlock_test_env("DLOCK_TEST_PG_URI"));
	if (PQstatus(pg) != CONNECTION_OK)
		printf("\n    monitor: %s", PQerrorMessage(pg));
	CU_ASSERT_EQUAL(PQstatus(pg), CONNECTION_OK);
	return pg;
}

long long dlock_testpg_num(PGconn *pg, const char *sql, const char *param)
{
	const char *values[1] = { param };
	PGresult *r = PQexecParams(pg, sql, param ? 1 : 0, NULL, values, NULL, NULL, 0);
	long long v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	else if (PQresultStatus(r) != PGRES_TUPLES_OK)
		printf("\n    %s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
	return v;
}

void dlock_testpg_each_row_uri(void (*body)(const char *uri))
{
	body(dlock_test_env("DLOCK_TEST_PG_ROW_URI"));
	if (dlock_test_env("DLOCK_TEST_PG_BOUNCER_URI"))
		body(dlock_test_env("DLOCK_TEST_PG_BOUNCER_URI"));
}

int dlock_testpg_main(void (*add_suites)(void))
{
	if (!dlock_test_env("DLOCK_TEST_PG_URI") || !dlock_test_env("DLOCK_TEST_PG_ROW_URI"))
		return dlock_test_skip("no PostgreSQL server (DLOCK_TEST_PG_URI unset)");
	return dlock_test_main(add_suites);
}
