/*
 * PostgreSQL: what a least-privileged role needs, and what dlock creates.
 * Each test makes a role of its own that may create nothing (no CREATE on
 * the schema, nothing on dlock_fence), grants it exactly what README.md
 * lists for a mode, and checks that this is enough, and that one grant
 * less gives DLOCK_EPERM with the GRANT to run:
 *
 *   advisory, fencing off:  nothing
 *   advisory, fencing on:   USAGE on the sequence dlock_fence
 *   row, fencing off:       SELECT, INSERT, UPDATE on the lock table
 *   row, fencing on:        both
 *   dlock gc in row mode:   DELETE on the lock table besides
 *
 * Environment (ci/servers/postgres.sh): DLOCK_TEST_PG_URI (role dlock, owner
 * of the database: it owns the objects and grants on them) and
 * DLOCK_TEST_PG_CTL (SQL as the superuser: roles are made and dropped with
 * it).  Without them the program says SKIPPED.  The server trusts every
 * role but dlock_pw on 127.0.0.1, so the test's roles log in without a
 * password.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testsupport.h"

static char role[64];      /* the least-privileged role of the test running now */
static PGconn *owner;      /* role dlock: owns the database and the objects dlock made */

/* ------------------------------------------------------------ helpers */

/* SQL as the superuser (DLOCK_TEST_PG_CTL sql ...); no single quotes in `sql`. */
static int su_sql(const char *sql)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s sql '%s' >/dev/null", dlock_test_env("DLOCK_TEST_PG_CTL"), sql);
	int rc = system(cmd);
	if (rc != 0)
		printf("\n    superuser SQL failed (%d): %s", rc, sql);
	return rc == 0;
}

/* SQL as the owner (role dlock). */
static void owner_sql(const char *sql)
{
	PGresult *r = PQexec(owner, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		printf("\n    %s: %s", sql, PQresultErrorMessage(r));
	CU_ASSERT_EQUAL(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
}

/* 1 when the owner's query returns true. */
static int owner_true(const char *sql)
{
	PGresult *r = PQexec(owner, sql);
	int t = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		printf("\n    %s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
	return t;
}

/* DLOCK_TEST_PG_URI as role `user`, with `params` ("" for none). */
static void uri_as(char *out, size_t len, const char *user, const char *params)
{
	const char *base = dlock_test_env("DLOCK_TEST_PG_URI");
	const char *host = strchr(base, '@') + 1;
	snprintf(out, len, "postgres://%s@%s%s%s", user, host, params[0] ? "?" : "", params);
}

/* Make this test's role; drop it again with drop_role(). */
static int make_role(const char *tag)
{
	char sql[256];
	snprintf(role, sizeof role, "dlock_min_%s_%ld", tag, (long)getpid());
	snprintf(sql, sizeof sql, "CREATE ROLE %s LOGIN", role);
	return su_sql(sql);
}

static void drop_role(void)
{
	char sql[256];
	snprintf(sql, sizeof sql, "DROP OWNED BY %s; DROP ROLE %s", role, role);
	CU_ASSERT(su_sql(sql));
}

static void grant_to(const char *what)
{
	char sql[256];
	snprintf(sql, sizeof sql, "GRANT %s TO %s", what, role);
	owner_sql(sql);
}

static void revoke_from(const char *what)
{
	char sql[256];
	snprintf(sql, sizeof sql, "REVOKE %s FROM %s", what, role);
	owner_sql(sql);
}

/* Open `uri`: its status, the message in err. */
static dlock_status try_open(const char *uri, dlock_client **c, char *err, size_t errlen)
{
	*c = NULL;
	err[0] = '\0';
	return dlock_client_open(c, uri, NULL, err, errlen);
}

/* Acquire `l` (wait_ms: 0 try once), asking for a token (1), none (0) or the URI's (-1). */
static dlock_status acquire(dlock_lock *l, int64_t wait_ms, int fencing)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.fence = dlock_test_switch(fencing);
	return dlock_acquire(l, &o);
}

/*
 * On a client that opened: a try-once and a waiting acquisition with the
 * URI's fencing (`token`: whether that gives one), released each time.
 */
static void locks_work(dlock_client *c, const char *tag, int token)
{
	char name[128];
	snprintf(name, sizeof name, "privtest-%ld-%s", (long)getpid(), tag);
	dlock_lock *l = dlock_test_new_lock(c, name);
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	for (int64_t wait_ms = 0; wait_ms <= 2000; wait_ms += 2000) {
		dlock_status st = acquire(l, wait_ms, -1);
		if (st != DLOCK_OK)
			printf("\n    %s (wait %lld ms): %s: %s", name, (long long)wait_ms, dlock_status_name(st),
			       dlock_client_errmsg(c));
		CU_ASSERT_EQUAL_FATAL(st, DLOCK_OK);
		uint64_t t = 0;
		CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &t), token ? DLOCK_OK : DLOCK_ENOTSUP);
		CU_ASSERT(!token || t > 0);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	dlock_lock_free(l);
}

/* An acquisition that asks for a token: EPERM and the GRANT; the client still works without one. */
static void token_refused(dlock_client *c, const char *tag)
{
	char name[128], want[160];
	snprintf(name, sizeof name, "privtest-%ld-%s", (long)getpid(), tag);
	snprintf(want, sizeof want, "GRANT USAGE ON SEQUENCE dlock_fence TO \"%s\";", role);
	dlock_lock *l = dlock_test_new_lock(c, name);
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	for (int64_t wait_ms = 0; wait_ms <= 2000; wait_ms += 2000) {
		CU_ASSERT_EQUAL(acquire(l, wait_ms, 1), DLOCK_EPERM);
		const char *msg = dlock_client_errmsg(c);
		if (!strstr(msg, want))
			printf("\n    token refused: %s", msg);
		CU_ASSERT(strstr(msg, want) != NULL);
	}
	CU_ASSERT_EQUAL(acquire(l, 0, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
}

/* Open must fail with EPERM and a message containing `want`. */
static void open_refused(const char *uri, const char *want)
{
	dlock_client *c;
	char err[1024];
	CU_ASSERT_EQUAL(try_open(uri, &c, err, sizeof err), DLOCK_EPERM);
	printf("\n    refused as it should: %s", err);
	CU_ASSERT(strstr(err, want) != NULL);
	dlock_client_close(c);
}

static dlock_client *open_ok(const char *uri)
{
	dlock_client *c;
	char err[1024];
	dlock_status st = try_open(uri, &c, err, sizeof err);
	if (st != DLOCK_OK)
		printf("\n    %s: %s", dlock_status_name(st), err);
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	return c;
}

/* ------------------------------------------------------------ tests */

/* Advisory mode: fencing off needs no privilege; fencing on needs USAGE on dlock_fence. */
static void test_advisory(void)
{
	char uri[1024], want[160];
	dlock_client_close(dlock_test_open(dlock_test_env("DLOCK_TEST_PG_URI"), NULL, NULL)); /* makes dlock_fence */
	CU_ASSERT_FATAL(make_role("adv"));
	snprintf(want, sizeof want, "GRANT USAGE ON SEQUENCE dlock_fence TO \"%s\";", role);

	uri_as(uri, sizeof uri, role, "fencing=off");
	dlock_client *c = open_ok(uri);
	if (c) {
		locks_work(c, "adv-off", 0);
		token_refused(c, "adv-off-token");
		dlock_client_close(c);
	}
	uri_as(uri, sizeof uri, role, "");
	open_refused(uri, want);

	grant_to("USAGE ON SEQUENCE dlock_fence");
	c = open_ok(uri);
	if (c) {
		locks_work(c, "adv-on", 1);
		dlock_client_close(c);
	}
	uri_as(uri, sizeof uri, role, "fencing=off");
	c = open_ok(uri);
	if (c) {
		dlock_lock *l = dlock_test_new_lock(c, "privtest-adv-off-asks");
		CU_ASSERT_EQUAL(acquire(l, 0, 1), DLOCK_OK);
		CU_ASSERT(dlock_test_token(l) > 0);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		dlock_lock_free(l);
		/* Taken away while the client is open: the token statement fails, the message says what to grant. */
		revoke_from("USAGE ON SEQUENCE dlock_fence");
		token_refused(c, "adv-revoked");
		dlock_client_close(c);
	}
	/* nextval needs USAGE or UPDATE: UPDATE alone will do. */
	grant_to("UPDATE ON SEQUENCE dlock_fence");
	uri_as(uri, sizeof uri, role, "");
	c = open_ok(uri);
	if (c) {
		locks_work(c, "adv-update", 1);
		dlock_client_close(c);
	}
	revoke_from("UPDATE ON SEQUENCE dlock_fence");
	drop_role();
}

/* Row mode: SELECT, INSERT, UPDATE on the lock table; USAGE on dlock_fence only with fencing on. */
static void test_row(void)
{
	char uri[1024], params[256], table[64], table_grant[128], want[256];
	snprintf(table, sizeof table, "dlock_min_t%ld", (long)getpid());
	snprintf(params, sizeof params, "mode=row&table=%s", table);
	uri_as(uri, sizeof uri, "dlock", params);
	dlock_client_close(dlock_test_open(uri, NULL, NULL)); /* the owner makes the table */
	CU_ASSERT_FATAL(make_role("row"));
	snprintf(table_grant, sizeof table_grant, "SELECT, INSERT, UPDATE ON %s", table);

	snprintf(params, sizeof params, "mode=row&table=%s&fencing=off", table);
	uri_as(uri, sizeof uri, role, params);
	snprintf(want, sizeof want, "GRANT SELECT, INSERT, UPDATE ON \"%s\" TO \"%s\";", table, role);
	open_refused(uri, want);
	/* Any two of the three are not enough. */
	static const char *const two[] = { "SELECT, INSERT", "SELECT, UPDATE", "INSERT, UPDATE" };
	for (size_t i = 0; i < sizeof two / sizeof two[0]; i++) {
		char what[128];
		snprintf(what, sizeof what, "%s ON %s", two[i], table);
		grant_to(what);
		open_refused(uri, want);
		revoke_from(what);
	}

	grant_to(table_grant);
	dlock_client *c = open_ok(uri);
	if (c) {
		locks_work(c, "row-off", 0);
		token_refused(c, "row-off-token");
		dlock_client_close(c);
	}
	snprintf(params, sizeof params, "mode=row&table=%s", table);
	uri_as(uri, sizeof uri, role, params);
	snprintf(want, sizeof want, "GRANT USAGE ON SEQUENCE dlock_fence TO \"%s\";", role);
	open_refused(uri, want);

	grant_to("USAGE ON SEQUENCE dlock_fence");
	c = open_ok(uri);
	if (c) {
		locks_work(c, "row-on", 1);
		/* dlock gc needs DELETE besides, and says so. */
		char del[128];
		size_t n = 0;
		snprintf(del, sizeof del, "DELETE ON %s", table);
		CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &n), DLOCK_EPERM);
		printf("\n    gc refused as it should: %s", dlock_client_errmsg(c));
		CU_ASSERT(strstr(dlock_client_errmsg(c), "GRANT DELETE ON") != NULL);
		grant_to(del);
		CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &n), DLOCK_OK);
		CU_ASSERT_EQUAL(n, 3); /* the rows of row-off, row-off-token and row-on */
		revoke_from(del);
		revoke_from("USAGE ON SEQUENCE dlock_fence");
		token_refused(c, "row-revoked");
		dlock_client_close(c);
	}
	snprintf(want, sizeof want, "DROP TABLE %s", table);
	owner_sql(want);
	drop_role();
}

/* fencing=off creates no sequence; the first acquisition that asks for a token does. */
static void test_sequence_on_demand(void)
{
	char uri[1024], params[256], schema[64], sql[256];
	snprintf(schema, sizeof schema, "dlock_s%ld", (long)getpid());
	snprintf(sql, sizeof sql, "CREATE SCHEMA %s", schema);
	owner_sql(sql);
	for (int row = 0; row < 2; row++) {
		snprintf(params, sizeof params, "options=-c%%20search_path%%3D%s&fencing=off%s", schema,
		         row ? "&mode=row" : "");
		uri_as(uri, sizeof uri, "dlock", params);
		dlock_client *c = open_ok(uri);
		if (!c)
			continue;
		snprintf(sql, sizeof sql, "SELECT to_regclass('%s.dlock_fence') IS NULL", schema);
		CU_ASSERT(owner_true(sql)); /* open made none */
		snprintf(sql, sizeof sql, "SELECT to_regclass('%s.dlock_locks') IS %sNULL", schema, row ? "NOT " : "");
		CU_ASSERT(owner_true(sql));
		dlock_lock *l = dlock_test_new_lock(c, "privtest-on-demand");
		CU_ASSERT_EQUAL(acquire(l, 0, 0), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		snprintf(sql, sizeof sql, "SELECT to_regclass('%s.dlock_fence') IS NULL", schema);
		CU_ASSERT(owner_true(sql));
		CU_ASSERT_EQUAL(acquire(l, 2000, 1), DLOCK_OK);
		CU_ASSERT(dlock_test_token(l) > 0);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		snprintf(sql, sizeof sql, "SELECT to_regclass('%s.dlock_fence') IS NOT NULL", schema);
		CU_ASSERT(owner_true(sql));
		dlock_lock_free(l);
		dlock_client_close(c);
		snprintf(sql, sizeof sql, "DROP SEQUENCE %s.dlock_fence", schema);
		owner_sql(sql);
	}
	snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", schema);
	owner_sql(sql);
}

/* ------------------------------------------------------------ suites */

static void quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

static int init(void)
{
	owner = PQconnectdb(dlock_test_env("DLOCK_TEST_PG_URI"));
	if (PQstatus(owner) != CONNECTION_OK) {
		printf("\n    owner connection: %s", PQerrorMessage(owner));
		return 1;
	}
	PQsetNoticeProcessor(owner, quiet, NULL);
	return 0;
}

static int fini(void)
{
	PQfinish(owner);
	owner = NULL;
	return 0;
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("pg_privileges", init, fini);
	CU_add_test(s, "advisory", test_advisory);
	CU_add_test(s, "row", test_row);
	CU_add_test(s, "sequence_on_demand", test_sequence_on_demand);
}

int main(void)
{
	if (!dlock_test_env("DLOCK_TEST_PG_URI") || !dlock_test_env("DLOCK_TEST_PG_CTL"))
		return dlock_test_skip("no PostgreSQL server (DLOCK_TEST_PG_URI, DLOCK_TEST_PG_CTL unset)");
	return dlock_test_main(add_suites);
}
