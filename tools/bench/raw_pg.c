/*
 * The raw PostgreSQL client: what a careful hand-written lock does.
 *   advisory (default)  SELECT pg_advisory_lock(key) / pg_advisory_unlock(key):
 *                       the server queues waiters, one round trip each way
 *   mode=row            BEGIN; SELECT ... FOR UPDATE (one round trip, sent
 *                       together) / COMMIT, on a table of its own
 * The connection string is the URI without its query (the query holds
 * dlock's parameters, which libpq would refuse).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "bench.h"

struct pconn {
	PGconn *pg;
	int row;
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

static int row_setup(struct pconn *c)
{
	const char *sql = "CREATE TABLE IF NOT EXISTS dlock_bench_raw (name text PRIMARY KEY)";
	/* Workers connect at once, and concurrent CREATE ... IF NOT EXISTS can still collide. */
	for (int i = 0; i < 5; i++) {
		if (run(c, sql, PGRES_COMMAND_OK) == 0)
			return 0;
		bench_sleep_ns(20 * BENCH_NS_PER_MS);
	}
	return -1;
}

static void *pconn_connect(const char *uri, char *err, size_t errlen)
{
	char conninfo[1024], mode[16] = "";
	struct pconn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	snprintf(conninfo, sizeof conninfo, "%.*s", (int)strcspn(uri, "?"), uri);
	c->row = bench_uri_param(uri, "mode", mode, sizeof mode) == 0 && strcmp(mode, "row") == 0;
	c->pg = PQconnectdb(conninfo);
	if (PQstatus(c->pg) != CONNECTION_OK) {
		/* libpq's message names host and database, never the password */
		snprintf(err, errlen, "postgres: %s", PQerrorMessage(c->pg));
		pconn_close(c);
		return NULL;
	}
	fcntl(PQsocket(c->pg), F_SETFD, FD_CLOEXEC);
	if (c->row && row_setup(c) != 0) {
		snprintf(err, errlen, "postgres: cannot create dlock_bench_raw: %s", PQerrorMessage(c->pg));
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

static int failed(struct pconn *c, char *err, size_t errlen)
{
	snprintf(err, errlen, "postgres: %s", PQerrorMessage(c->pg));
	return -1;
}

static int advisory(struct pconn *c, const char *fn, const char *name, char *err, size_t errlen)
{
	char sql[96];
	snprintf(sql, sizeof sql, "SELECT %s(%lld)", fn, key_of(name));
	PGresult *r = PQexec(c->pg, sql);
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	int is_true = ok && strcmp(PQgetvalue(r, 0, 0), "f") != 0;
	PQclear(r);
	if (!ok)
		return failed(c, err, errlen);
	return is_true ? 0 : -1;
}

/* BEGIN and the row lock in one round trip; a missing row is inserted first. */
static int row_lock(struct pconn *c, const char *name, char *err, size_t errlen)
{
	char *lit = PQescapeLiteral(c->pg, name, strlen(name));
	char sql[512];
	int rc = -1;
	if (!lit)
		return failed(c, err, errlen);
	for (int tries = 0; tries < 2 && rc < 0; tries++) {
		snprintf(sql, sizeof sql, "BEGIN; SELECT 1 FROM dlock_bench_raw WHERE name = %s FOR UPDATE", lit);
		PGresult *r = PQexec(c->pg, sql);
		int st = PQresultStatus(r), n = PQntuples(r);
		PQclear(r);
		if (st == PGRES_TUPLES_OK && n == 1)
			rc = 0;
		else if (run(c, "ROLLBACK", PGRES_COMMAND_OK) != 0 || st != PGRES_TUPLES_OK)
			break;
		else {
			snprintf(sql, sizeof sql, "INSERT INTO dlock_bench_raw VALUES (%s) ON CONFLICT DO NOTHING", lit);
			run(c, sql, PGRES_COMMAND_OK);
		}
	}
	PQfreemem(lit);
	return rc == 0 ? 1 : failed(c, err, errlen);
}

static int pconn_acquire(void *p, const char *name, const _Atomic int *stop, char *err, size_t errlen)
{
	struct pconn *c = p;
	(void)stop; /* the server queues the wait; holders keep releasing until every worker is out */
	if (c->row)
		return row_lock(c, name, err, errlen);
	return advisory(c, "pg_advisory_lock", name, err, errlen) == 0 ? 1 : -1;
}

static int pconn_release(void *p, const char *name, char *err, size_t errlen)
{
	struct pconn *c = p;
	if (c->row)
		return run(c, "COMMIT", PGRES_COMMAND_OK) == 0 ? 0 : failed(c, err, errlen);
	return advisory(c, "pg_advisory_unlock", name, err, errlen);
}

static int pconn_ping(void *p)
{
	return run(p, "SELECT 1", PGRES_TUPLES_OK);
}

/* Only the holders: sessions of dlock that hold an advisory lock or sit in a transaction (row mode). */
static int pconn_cut(void *p, char *msg, size_t msglen)
{
	struct pconn *c = p;
	PGresult *r = PQexec(c->pg, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
	                            "WHERE application_name = 'dlock' AND pid <> pg_backend_pid() "
	                            "AND (state LIKE 'idle in transaction%' OR pid IN "
	                            "(SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted))");
	int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
	if (ok)
		snprintf(msg, msglen, "pg_terminate_backend: %s holder session(s)", PQgetvalue(r, 0, 0));
	PQclear(r);
	return ok ? 0 : -1;
}

static const char *const schemes[] = { "postgres", "postgresql", NULL };

const struct bench_raw bench_raw_postgres = {
	.name = "postgres",
	.schemes = schemes,
	.what = "pg_advisory_lock/pg_advisory_unlock (mode=row: BEGIN; SELECT FOR UPDATE / COMMIT)",
	.connect = pconn_connect,
	.acquire = pconn_acquire,
	.release = pconn_release,
	.ping = pconn_ping,
	.cut = pconn_cut,
	.close = pconn_close,
};
