/*
 * dlock_gc() on postgres://: row mode deletes the rows of names nobody
 * holds or waits for (a semaphore's slot rows with its row), keeps the
 * rows of a held mutex, reader and permit; advisory mode deletes only the
 * dlock_names rows that no client wrote for two periods and whose keys
 * nobody holds; --dry-run removes nothing; and the race of gc against
 * processes that take the same names in row mode (gc_race.c).
 *
 * Needs $DLOCK_TEST_PG_URI and $DLOCK_TEST_PG_ROW_URI (ci/servers/postgres.sh);
 * every test uses a prefix of its own, and only gc's name prefix within it.
 */
#include <CUnit/CUnit.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/dlock.h"
#include "gc_race.h"
#include "testpg.h"
#include "testsupport.h"


/* A client of `base` (a URI with a query already, or none) with the prefix `prefix`. */
static dlock_client *open_prefixed(const char *base, const char *prefix)
{
	char uri[1024];
	snprintf(uri, sizeof uri, "%s%sprefix=%s", base, strchr(base, '?') ? "&" : "?", prefix);
	return dlock_test_open(uri, NULL, NULL);
}

static void once(dlock_client *c, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(c, name);
	CU_ASSERT_EQUAL(gc_try(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
}

static void sem_once(dlock_client *c, const char *name, uint32_t n)
{
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, name, n, &l), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
}

/* Rows of `table` whose name starts with PREFIX ":". */
static long long rows_under(PGconn *pg, const char *table, const char *prefix)
{
	char sql[256], pat[128];
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s WHERE substr(name, 1, length(convert_to($1, 'UTF8'))) = "
	         "convert_to($1, 'UTF8')", table);
	snprintf(pat, sizeof pat, "%s:", prefix);
	return dlock_testpg_num(pg, sql, pat);
}

/* Held: a mutex, a reader, a permit; free: two mutexes and a semaphore of 3 (its row and 3 slot rows). */
static void test_row_mode(void)
{
	char prefix[96];
	dlock_testpg_name(prefix, sizeof prefix, "gcrow", "p");
	dlock_client *c = open_prefixed(dlock_test_env("DLOCK_TEST_PG_ROW_URI"), prefix);
	PGconn *pg = dlock_testpg_monitor();
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_GC, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 1);
	once(c, "free-a");
	once(c, "free-b");
	sem_once(c, "free-sem", 3);
	dlock_lock *m = dlock_test_new_lock(c, "held-mutex"), *rw = NULL, *sem = NULL;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "held-reader", &rw), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, "held-permit", 2, &sem), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(m, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(rw, 1), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(sem, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_locks", prefix), 2 + 4 + 1 + 1 + 3);

	struct gc_seen s = { "", 0 };
	size_t count = 0;
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, DLOCK_GC_DRY_RUN, gc_seen_removed, &s, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 3);
	CU_ASSERT(strstr(s.names, "free-a") && strstr(s.names, "free-b") && strstr(s.names, "free-sem"));
	CU_ASSERT(strstr(s.names, "held") == NULL);
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_locks", prefix), 11);

	struct gc_seen s2 = { "", 0 };
	CU_ASSERT_EQUAL(dlock_gc(c, "free-", 0, gc_seen_removed, &s2, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 3);
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_locks", prefix), 5); /* the held ones' rows, slot rows too */
	CU_ASSERT_EQUAL(dlock_check(m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(rw), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(sem), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "held-mutex"), DLOCK_EBUSY);
	/* a removed name is taken again as before */
	once(c, "free-a");
	sem_once(c, "free-sem", 3);

	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(rw), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(sem), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 5);
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_locks", prefix), 0);
	dlock_lock_free(m);
	dlock_lock_free(rw);
	dlock_lock_free(sem);
	dlock_client_close(c);
	PQfinish(pg);
}

/* Advisory mode: a name's dlock_names row goes only once no client wrote it for two periods, and its
 * key is free. */
static void test_advisory_names(void)
{
	char prefix[96], pat[128];
	dlock_testpg_name(prefix, sizeof prefix, "gcadv", "p");
	snprintf(pat, sizeof pat, "%s:", prefix);
	dlock_client *c = open_prefixed(dlock_test_env("DLOCK_TEST_PG_URI"), prefix);
	PGconn *pg = dlock_testpg_monitor();
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_GC, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 1);
	once(c, "a");
	once(c, "b");
	sem_once(c, "s", 2);
	dlock_lock *held = dlock_test_new_lock(c, "held");
	CU_ASSERT_EQUAL(gc_try(held, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_names", prefix), 4);

	/* written just now: a live client may count them as written, nothing goes */
	size_t count = 9;
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 0);
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_names", prefix), 4);

	/* not written for an hour: the free ones go, the held one stays */
	CU_ASSERT_EQUAL(dlock_testpg_num(pg, "WITH u AS (UPDATE dlock_names SET seen = now() - interval '1 hour' "
	                                     "WHERE substr(name, 1, length(convert_to($1, 'UTF8'))) = "
	                                     "convert_to($1, 'UTF8') RETURNING 1) SELECT count(*) FROM u", pat), 4);
	struct gc_seen s = { "", 0 };
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, DLOCK_GC_DRY_RUN, gc_seen_removed, &s, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 3);
	CU_ASSERT(strstr(s.names, "a") && strstr(s.names, "b") && strstr(s.names, "s") && !strstr(s.names, "held"));
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_names", prefix), 4);
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 3);
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_names", prefix), 1);
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL(dlock_list(c, "held", &list), DLOCK_OK);
	CU_ASSERT(list && list->count == 1 && list->items[0]->name && strcmp(list->items[0]->name, "held") == 0);
	dlock_lock_list_free(list);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	dlock_lock_free(held);
	dlock_client_close(c);
	/* a client that never wrote them takes the names again and writes them */
	c = open_prefixed(dlock_test_env("DLOCK_TEST_PG_URI"), prefix);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	once(c, "a");
	CU_ASSERT_EQUAL(rows_under(pg, "dlock_names", prefix), 2);
	dlock_client_close(c);
	PQfinish(pg);
}

static void test_row_race(void)
{
	char prefix[96], uri[1024];
	dlock_testpg_name(prefix, sizeof prefix, "gcrace", "p");
	snprintf(uri, sizeof uri, "%s&prefix=%s", dlock_test_env("DLOCK_TEST_PG_ROW_URI"), prefix);
	gc_race(uri, "race-");
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("pg_gc", NULL, NULL);
	CU_add_test(s, "row mode", test_row_mode);
	CU_add_test(s, "advisory names", test_advisory_names);
	CU_add_test(s, "row mode race with holders", test_row_race);
}

int main(void)
{
	return dlock_testpg_main(add_suites);
}
