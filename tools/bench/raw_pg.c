/*
 * The raw PostgreSQL client: what a careful hand-written lock does, with
 * statements prepared once per connection (as dlock's are).
 *   advisory (default)  pg_advisory_lock($1) / pg_advisory_unlock($1): the
 *                       server queues waiters, one round trip each way
 *   mode=row            BEGIN and SELECT 1 ... WHERE name = $1 FOR UPDATE in
 *                       one round trip (libpq's pipeline mode) / COMMIT, on
 *                       a table of its own
 * With fencing, the lock statement also takes nextval() of a sequence of its
 * own once the lock is held (a CASE orders the two), as dlock's does.
 * A reader (read-mostly) takes the same key shared: pg_advisory_lock_shared($1)
 * / pg_advisory_unlock_shared($1), or SELECT ... FOR SHARE in row mode, and
 * no token (dlock's readers on PostgreSQL take none).
 * The connection string is the URI without its query (the query holds
 * dlock's parameters, which libpq would refuse).  A worker keeps one name:
 * its key (or name) is made into a parameter once.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "bench.h"

#define SEQ "dlock_bench_raw_fence"

/* $1: the key (advisory) or the name (row). */
static const char *const lock_sql[2][2] = {
	/* advisory: without, with a token */
	{ "SELECT pg_advisory_lock($1::int8)",
	  "SELECT CASE WHEN pg_advisory_lock($1::int8) IS NULL THEN NULL ELSE nextval('" SEQ "') END" },
	/* row */
	{ "SELECT 1 FROM dlock_bench_raw WHERE name = $1 FOR UPDATE",
	  "SELECT CASE WHEN EXISTS (SELECT 1 FROM dlock_bench_raw WHERE name = $1 FOR UPDATE) "
	  "THEN nextval('" SEQ "') END" },
};

/* $1 as above: a reader's lock, advisory and row. */
static const char *const lock_shared_sql[2] = {
	"SELECT pg_advisory_lock_shared($1::int8)",
	"SELECT 1 FROM dlock_bench_raw WHERE name = $1 FOR SHARE",
};

struct pconn {
	PGconn *pg;
	int row, fencing;
	char name[160]; /* the last name, and its parameter */
	char param[160];
};

static void pconn_close(void *p)
{
	struct pconn *c = p;
	PQfinish(c->pg);
	free(c);
}

/* Run `sql`; 0 when it ended as `want`. */
static int run(struct pconn *c, const char *sql, ExecStatusType want)
{
	PGresult *r = PQexec(c->pg, sql);
	int ok = PQresultStatus(r) == want;
	PQclear(r);
	return ok ? 0 : -1;
}

/* Workers connect at once, and concurrent CREATE ... IF NOT EXISTS can still collide: a few tries. */
static int create(struct pconn *c, const char *sql)
{
	for (int i = 0; i < 5; i++) {
		if (run(c, sql, PGRES_COMMAND_OK) == 0)
			return 0;
		bench_sleep_ns(20 * BENCH_NS_PER_MS);
	}
	return -1;
}

static int prepare(struct pconn *c, const char *stmt, const char *sql)
{
	PGresult *r = PQprepare(c->pg, stmt, sql, 0, NULL);
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	return ok ? 0 : -1;
}

/* The server's notices ("already exists, skipping" of every connection's setup) are no result: not printed. */
static void no_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

static void *pconn_connect(const char *uri, int fencing, char *err, size_t errlen)
{
	char conninfo[1024], mode[16] = "";
	struct pconn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	snprintf(conninfo, sizeof conninfo, "%.*s", (int)strcspn(uri, "?"), uri);
	c->row = bench_uri_param(uri, "mode", mode, sizeof mode) == 0 && strcmp(mode, "row") == 0;
	c->fencing = fencing;
	c->pg = PQconnectdb(conninfo);
	if (PQstatus(c->pg) != CONNECTION_OK) {
		/* libpq's message names host and database, never the password */
		snprintf(err, errlen, "postgres: %s", PQerrorMessage(c->pg));
		pconn_close(c);
		return NULL;
	}
	fcntl(PQsocket(c->pg), F_SETFD, FD_CLOEXEC);
	PQsetNoticeProcessor(c->pg, no_notice, NULL);
	if ((c->row && create(c, "CREATE TABLE IF NOT EXISTS dlock_bench_raw (name text PRIMARY KEY)") != 0) ||
	    (fencing && create(c, "CREATE SEQUENCE IF NOT EXISTS " SEQ) != 0) ||
	    prepare(c, "lock", lock_sql[c->row][fencing]) != 0 ||
	    prepare(c, "lock_shared", lock_shared_sql[c->row]) != 0 ||
	    (!c->row && prepare(c, "unlock", "SELECT pg_advisory_unlock($1::int8)") != 0) ||
	    (!c->row && prepare(c, "unlock_shared", "SELECT pg_advisory_unlock_shared($1::int8)") != 0) ||
	    (c->row && prepare(c, "insert", "INSERT INTO dlock_bench_raw VALUES ($1) ON CONFLICT DO NOTHING") != 0)) {
		snprintf(err, errlen, "postgres: cannot set up: %s", PQerrorMessage(c->pg));
		pconn_close(c);
		return NULL;
	}
	return c;
}

static long long key_of(const char *name)
{
	uint64_t h = 1469598103934665603ULL;
	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	return (long long)(h >> 1);
}

/* The parameter of `name`: its key, or itself in row mode. */
static const char *param_of(struct pconn *c, const char *name)
{
	if (strcmp(c->name, name) != 0) {
		snprintf(c->name, sizeof c->name, "%s", name);
		if (c->row)
			snprintf(c->param, sizeof c->param, "%s", name);
		else
			snprintf(c->param, sizeof c->param, "%lld", key_of(name));
	}
	return c->param;
}

static int failed(struct pconn *c, char *err, size_t errlen)
{
	snprintf(err, errlen, "postgres: %s", PQerrorMessage(c->pg));
	return -1;
}

/* One prepared statement returning one row: 1 when its value is not false, 0 false, -1 error. */
static int exec_one(struct pconn *c, const char *stmt, const char *param)
{
	PGresult *r = PQexecPrepared(c->pg, stmt, 1, &param, NULL, NULL, 0);
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	int is_true = ok && strcmp(PQgetvalue(r, 0, 0), "f") != 0;
	PQclear(r);
	return ok ? is_true : -1;
}

/*
 * BEGIN and the row lock (prepared statement `stmt`) in one round trip
 * (pipeline mode); the lock's results: 1 locked, 0 no row (nothing locked,
 * transaction open), -1 error.
 */
static int row_pipeline(struct pconn *c, const char *stmt, const char *param)
{
	int locked = -1, begun = 0;
	if (!PQenterPipelineMode(c->pg))
		return -1;
	if (PQsendQueryParams(c->pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) &&
	    PQsendQueryPrepared(c->pg, stmt, 1, &param, NULL, NULL, 0) && PQpipelineSync(c->pg)) {
		PGresult *r;
		/* BEGIN's result, the lock's, each followed by NULL, then the sync. */
		for (int step = 0; step < 3; step++) {
			while ((r = PQgetResult(c->pg)) != NULL) {
				ExecStatusType st = PQresultStatus(r);
				if (step == 0)
					begun = st == PGRES_COMMAND_OK;
				else if (step == 1 && st == PGRES_TUPLES_OK)
					locked = PQntuples(r) == 1 && !PQgetisnull(r, 0, 0);
				PQclear(r);
				if (st == PGRES_PIPELINE_SYNC)
					break;
			}
		}
	}
	if (!PQexitPipelineMode(c->pg) || !begun)
		return -1;
	return locked;
}

static int row_lock(struct pconn *c, const char *stmt, const char *name, char *err, size_t errlen)
{
	const char *param = param_of(c, name);
	for (int tries = 0; tries < 2; tries++) {
		int locked = row_pipeline(c, stmt, param);
		if (locked == 1)
			return 1;
		if (run(c, "ROLLBACK", PGRES_COMMAND_OK) != 0 || locked < 0)
			break;
		PGresult *r = PQexecPrepared(c->pg, "insert", 1, &param, NULL, NULL, 0); /* the row, once */
		PQclear(r);
	}
	return failed(c, err, errlen);
}

/* The server queues the wait (`stop` unused): holders keep releasing until every worker is out. */
static int lock_with(struct pconn *c, const char *stmt, const char *name, char *err, size_t errlen)
{
	if (c->row)
		return row_lock(c, stmt, name, err, errlen);
	return exec_one(c, stmt, param_of(c, name)) >= 0 ? 1 : failed(c, err, errlen);
}

static int unlock_with(struct pconn *c, const char *stmt, const char *name, char *err, size_t errlen)
{
	if (c->row)
		return run(c, "COMMIT", PGRES_COMMAND_OK) == 0 ? 0 : failed(c, err, errlen);
	int rc = exec_one(c, stmt, param_of(c, name));
	if (rc == 0)
		snprintf(err, errlen, "postgres: pg_advisory_%s: not held", stmt);
	return rc == 1 ? 0 : rc == 0 ? -1 : failed(c, err, errlen);
}

static int pconn_acquire(void *p, const char *name, const _Atomic int *stop, char *err, size_t errlen)
{
	(void)stop;
	return lock_with(p, "lock", name, err, errlen);
}

static int pconn_release(void *p, const char *name, char *err, size_t errlen)
{
	return unlock_with(p, "unlock", name, err, errlen);
}

static int pconn_acquire_shared(void *p, const char *name, const _Atomic int *stop, char *err, size_t errlen)
{
	(void)stop;
	return lock_with(p, "lock_shared", name, err, errlen);
}

static int pconn_release_shared(void *p, const char *name, char *err, size_t errlen)
{
	return unlock_with(p, "unlock_shared", name, err, errlen);
}

static int pconn_ping(void *p)
{
	return run(p, "SELECT 1", PGRES_TUPLES_OK);
}

/*
 * Only the holders: sessions of dlock that hold an advisory lock or sit in a transaction (row mode).
 * dlock names its sessions "dlock:PID:OWNER" (pg_owner.c), or "dlock" when it has no owner to show.
 */
static int pconn_cut(void *p, char *msg, size_t msglen)
{
	struct pconn *c = p;
	PGresult *r = PQexec(c->pg, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
	                            "WHERE (application_name = 'dlock' OR application_name LIKE 'dlock:%') "
	                            "AND pid <> pg_backend_pid() "
	                            "AND (state LIKE 'idle in transaction%' OR pid IN "
	                            "(SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted))");
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	if (ok)
		snprintf(msg, msglen, "pg_terminate_backend: %s holder session(s)", PQgetvalue(r, 0, 0));
	PQclear(r);
	return ok ? 0 : -1;
}

/*
 * inflight: max_connections, and what is left of it to a role without
 * superuser rights now (less superuser_reserved_connections and the
 * client sessions open, this one included).
 */
static int pconn_sessions(void *p, long *max, long *room)
{
	struct pconn *c = p;
	PGresult *r = PQexec(c->pg, "SELECT current_setting('max_connections')::int, "
	                            "current_setting('superuser_reserved_connections')::int, "
	                            "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')");
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	if (ok) {
		*max = atol(PQgetvalue(r, 0, 0));
		*room = *max - atol(PQgetvalue(r, 0, 1)) - atol(PQgetvalue(r, 0, 2));
	}
	PQclear(r);
	return ok ? 0 : -1;
}

static const char *const schemes[] = { "postgres", "postgresql", NULL };

const struct bench_raw bench_raw_postgres = {
	.name = "postgres",
	.schemes = schemes,
	.what = "prepared pg_advisory_lock($1)/pg_advisory_unlock($1) (mode=row: BEGIN and prepared SELECT FOR UPDATE "
	        "in one pipeline / COMMIT); with fencing, nextval() of a sequence once held, in the lock statement; "
	        "readers: pg_advisory_lock_shared($1)/pg_advisory_unlock_shared($1) (mode=row: FOR SHARE)",
	.connect = pconn_connect,
	.acquire = pconn_acquire,
	.release = pconn_release,
	.ping = pconn_ping,
	.cut = pconn_cut,
	.close = pconn_close,
	.acquire_shared = pconn_acquire_shared,
	.release_shared = pconn_release_shared,
	.sessions = pconn_sessions,
};
