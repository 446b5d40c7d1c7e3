/*
 * What the backend needs in the database, created on first use when the
 * role may (checked once per client, at open):
 *
 *   CREATE SEQUENCE dlock_fence;                   -- fencing tokens, both modes
 *   CREATE TABLE dlock_locks (                     -- row mode; name: `table=`
 *       name    bytea PRIMARY KEY,                 -- prefix ":" lock name
 *       created timestamptz NOT NULL DEFAULT now());
 *
 * Both names are unqualified, so they live in the first schema of the
 * role's search_path.  PostgreSQL 15 took CREATE on schema public away
 * from ordinary roles: when the objects are missing and the role may not
 * create them, open fails with DLOCK_EPERM and a message giving the SQL
 * for the schema's owner to run; when they exist but the role may not use
 * them, it fails the same way with the GRANT to run.  Two clients creating them at once are
 * serialised by a transaction advisory lock in the two-key space
 * (classid 'dloc', objid 1), which never meets the one-key locks of
 * advisory mode.
 */
#include <stdio.h>
#include <string.h>

#include "pg_internal.h"

#define SETUP_LOCK "SELECT pg_advisory_xact_lock(1684828003, 1)"

/* What is missing, and whether the role may use what exists. */
struct state {
	int seq_missing, table_missing, seq_denied, table_denied;
};

static dlock_status inspect(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *table,
                            struct state *out, dlock_error *err)
{
	struct dlock_pg_stmt s = {
		.sql = "SELECT to_regclass($1) IS NULL, $2::text IS NOT NULL AND to_regclass($2) IS NULL, "
		       "CASE WHEN to_regclass($1) IS NULL THEN false "
		       "ELSE NOT has_sequence_privilege($1, 'USAGE') END, "
		       "CASE WHEN to_regclass($2) IS NULL THEN false "
		       "ELSE NOT has_table_privilege($2, 'SELECT, INSERT, UPDATE') END",
		.n = 2,
		.values = { DLOCK_PG_SEQUENCE, table },
		.lengths = { -1, -1 },
	};
	PGresult *res;
	char sqlstate[6];
	dlock_status st = dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), &res, sqlstate, err);
	if (st != DLOCK_OK)
		return st;
	*out = (struct state){
		.seq_missing = strcmp(PQgetvalue(res, 0, 0), "t") == 0,
		.table_missing = strcmp(PQgetvalue(res, 0, 1), "t") == 0,
		.seq_denied = strcmp(PQgetvalue(res, 0, 2), "t") == 0,
		.table_denied = strcmp(PQgetvalue(res, 0, 3), "t") == 0,
	};
	PQclear(res);
	return DLOCK_OK;
}

static dlock_status run(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *sql, char sqlstate[6],
                        dlock_error *err)
{
	struct dlock_pg_stmt s = { .sql = sql };
	return dlock_pg_run(b, c, &s, sqlstate, err);
}

static dlock_status no_privilege(struct dlock_pg_conn *c, const char *table, const char *table_raw,
                                 dlock_error *err)
{
	const char *role = PQuser(c->pg);
	if (!table)
		return dlock_error_set(err, DLOCK_EPERM,
		                       "the fencing sequence " DLOCK_PG_SEQUENCE " is missing and role \"%s\" may not "
		                       "create it; have the schema's owner run: CREATE SEQUENCE " DLOCK_PG_SEQUENCE
		                       "; GRANT USAGE ON SEQUENCE " DLOCK_PG_SEQUENCE " TO \"%s\";",
		                       role, role);
	return dlock_error_set(err, DLOCK_EPERM,
	                       "the lock table \"%s\" is missing and role \"%s\" may not create it; have the "
	                       "schema's owner run: CREATE SEQUENCE IF NOT EXISTS " DLOCK_PG_SEQUENCE
	                       "; CREATE TABLE %s (name bytea PRIMARY KEY, created timestamptz NOT NULL "
	                       "DEFAULT now()); GRANT USAGE ON SEQUENCE " DLOCK_PG_SEQUENCE
	                       " TO \"%s\"; GRANT SELECT, INSERT, UPDATE ON %s TO \"%s\";",
	                       table_raw, role, table, role, table, role);
}

static dlock_status create(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *table,
                           const char *table_raw, dlock_error *err)
{
	char sqlstate[6], sql[256];
	dlock_status st = run(b, c, "BEGIN", sqlstate, err);
	if (st == DLOCK_OK)
		st = run(b, c, SETUP_LOCK, sqlstate, err);
	if (st == DLOCK_OK)
		st = run(b, c, "CREATE SEQUENCE IF NOT EXISTS " DLOCK_PG_SEQUENCE, sqlstate, err);
	if (st == DLOCK_OK && table) {
		snprintf(sql, sizeof sql,
		         "CREATE TABLE IF NOT EXISTS %s (name bytea PRIMARY KEY, "
		         "created timestamptz NOT NULL DEFAULT now())",
		         table);
		st = run(b, c, sql, sqlstate, err);
	}
	if (st == DLOCK_OK)
		return run(b, c, "COMMIT", sqlstate, err);
	if (!c->dead) {
		dlock_error ignored;
		char state2[6];
		run(b, c, "ROLLBACK", state2, &ignored);
	}
	if (st == DLOCK_EPERM)
		return no_privilege(c, table, table_raw, err);
	return st;
}

static dlock_status denied(struct dlock_pg_conn *c, const struct state *st, const char *table, dlock_error *err)
{
	const char *role = PQuser(c->pg);
	if (st->seq_denied)
		return dlock_error_set(err, DLOCK_EPERM,
		                       "role \"%s\" may not use the fencing sequence " DLOCK_PG_SEQUENCE
		                       "; have its owner run: GRANT USAGE ON SEQUENCE " DLOCK_PG_SEQUENCE " TO \"%s\";",
		                       role, role);
	return dlock_error_set(err, DLOCK_EPERM,
	                       "role \"%s\" may not lock rows of the lock table %s; have its owner run: "
	                       "GRANT SELECT, INSERT, UPDATE ON %s TO \"%s\";",
	                       role, table, table, role);
}

dlock_status dlock_pg_setup(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *table_raw,
                            dlock_error *err)
{
	struct state s;
	dlock_status st = inspect(b, c, b->table, &s, err);
	if (st != DLOCK_OK)
		return st;
	if (s.seq_missing || s.table_missing)
		st = create(b, c, b->table, table_raw, err);
	if (st == DLOCK_OK && (s.seq_denied || s.table_denied))
		st = denied(c, &s, b->table, err);
	return st;
}
