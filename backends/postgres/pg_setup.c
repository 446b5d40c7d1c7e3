/*
 * What the backend needs in the database, created on first use when the
 * role may:
 *
 *   CREATE SEQUENCE dlock_fence;                   -- fencing tokens, both modes
 *   CREATE TABLE dlock_locks (                     -- row mode; name: `table=`
 *       name    bytea PRIMARY KEY,                 -- prefix ":" lock name
 *       created timestamptz NOT NULL DEFAULT now());
 *
 * The lock table is checked when the client opens (row mode).  The
 * sequence only when a token may be wanted: at open when the URI's
 * `fencing` is on (the default), else before the first acquisition that
 * asks for a token (dlock_pg_fence), so that with fencing off a role needs
 * no privilege on it and the database no sequence at all.
 *
 * Both names are unqualified, so they live in the first schema of the
 * role's search_path.  PostgreSQL 15 took CREATE on schema public away
 * from ordinary roles: when an object is missing and the role may not
 * create it, the status is DLOCK_EPERM with a message giving the SQL for
 * the schema's owner to run; when it exists but the role may not use it,
 * DLOCK_EPERM with the GRANT to run.  What a role needs:
 *
 *   sequence:    USAGE (nextval)
 *   lock table:  INSERT (a name's first row), SELECT and UPDATE (FOR UPDATE)
 *
 * Two clients creating them at once are serialised by a transaction
 * advisory lock in the two-key space (classid 'dloc', objid 1), which
 * never meets the one-key locks of advisory mode.
 */
#include <stdio.h>
#include <string.h>

#include "pg_backend.h"

#define SETUP_LOCK "SELECT pg_advisory_xact_lock(1684828003, 1)"
#define TABLE_GRANT "GRANT SELECT, INSERT, UPDATE ON %s TO %s;"
#define SEQ_GRANT "GRANT USAGE ON SEQUENCE " DLOCK_PG_SEQUENCE " TO %s;"

/* What to look at (NULL: not this one), what is missing, what the role may not use. */
struct state {
	const char *seq, *table, *table_raw;
	int seq_missing, table_missing, seq_denied, table_denied;
};

static int is_true(const PGresult *res, int col)
{
	return strcmp(PQgetvalue(res, 0, col), "t") == 0;
}

static dlock_status inspect(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct state *s,
                            dlock_error *err)
{
	/* A privilege list means any of them: right for the sequence (nextval
	 * needs USAGE or UPDATE), wrong for the table, whose three are each
	 * asked on their own. */
	struct dlock_pg_stmt q = {
		.sql = "SELECT $1::text IS NOT NULL AND to_regclass($1) IS NULL, "
		       "$2::text IS NOT NULL AND to_regclass($2) IS NULL, "
		       "CASE WHEN to_regclass($1) IS NULL THEN false "
		       "ELSE NOT has_sequence_privilege($1, 'USAGE, UPDATE') END, "
		       "CASE WHEN to_regclass($2) IS NULL THEN false "
		       "ELSE NOT (has_table_privilege($2, 'SELECT') AND has_table_privilege($2, 'INSERT') "
		       "AND has_table_privilege($2, 'UPDATE')) END",
		.n = 2,
		.values = { s->seq, s->table },
		.lengths = { -1, -1 },
	};
	PGresult *res;
	char sqlstate[6];
	dlock_status st = dlock_pg_exec(b, c, &q, dlock_pg_io_deadline(b), &res, sqlstate, err);
	if (st != DLOCK_OK)
		return st;
	s->seq_missing = is_true(res, 0);
	s->table_missing = is_true(res, 1);
	s->seq_denied = is_true(res, 2);
	s->table_denied = is_true(res, 3);
	PQclear(res);
	return DLOCK_OK;
}

/* The connection's role as an SQL identifier ("name", quotes doubled). */
static void role_ident(struct dlock_pg_conn *c, char *out, size_t len)
{
	const char *role = PQuser(c->pg);
	char *q = PQescapeIdentifier(c->pg, role, strlen(role));
	snprintf(out, len, "%s", q ? q : "the_role");
	PQfreemem(q);
}

static dlock_status run(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *sql, char sqlstate[6],
                        dlock_error *err)
{
	struct dlock_pg_stmt s = { .sql = sql };
	return dlock_pg_run(b, c, &s, sqlstate, err);
}

/* The role may not create what is missing: the SQL for the schema's owner. */
static dlock_status no_privilege(struct dlock_pg_conn *c, const struct state *s, dlock_error *err)
{
	char role[160], table_sql[512] = "", seq_sql[320] = "";
	role_ident(c, role, sizeof role);
	if (s->seq)
		snprintf(seq_sql, sizeof seq_sql, "CREATE SEQUENCE IF NOT EXISTS " DLOCK_PG_SEQUENCE "; " SEQ_GRANT,
		         role);
	if (!s->table_missing)
		return dlock_error_set(err, DLOCK_EPERM,
		                       "the fencing sequence " DLOCK_PG_SEQUENCE " is missing and role %s may not "
		                       "create it; have the schema's owner run: %s",
		                       role, seq_sql);
	snprintf(table_sql, sizeof table_sql,
	         "CREATE TABLE IF NOT EXISTS %s (name bytea PRIMARY KEY, created timestamptz NOT NULL "
	         "DEFAULT now()); " TABLE_GRANT,
	         s->table, s->table, role);
	return dlock_error_set(err, DLOCK_EPERM,
	                       "the lock table \"%s\" is missing and role %s may not create it; have the "
	                       "schema's owner run: %s%s%s",
	                       s->table_raw, role, table_sql, seq_sql[0] ? " " : "", seq_sql);
}

static dlock_status create(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct state *s,
                           dlock_error *err)
{
	char sqlstate[6], sql[256];
	dlock_status st = run(b, c, "BEGIN", sqlstate, err);
	if (st == DLOCK_OK)
		st = run(b, c, SETUP_LOCK, sqlstate, err);
	if (st == DLOCK_OK && s->seq_missing)
		st = run(b, c, "CREATE SEQUENCE IF NOT EXISTS " DLOCK_PG_SEQUENCE, sqlstate, err);
	if (st == DLOCK_OK && s->table_missing) {
		snprintf(sql, sizeof sql,
		         "CREATE TABLE IF NOT EXISTS %s (name bytea PRIMARY KEY, "
		         "created timestamptz NOT NULL DEFAULT now())",
		         s->table);
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
		return no_privilege(c, s, err);
	return st;
}

/* The objects exist but the role may not use them: the GRANTs for their owner. */
static dlock_status denied(struct dlock_pg_conn *c, const struct state *s, dlock_error *err)
{
	char role[160], seq_sql[320] = "";
	role_ident(c, role, sizeof role);
	if (s->seq_denied)
		snprintf(seq_sql, sizeof seq_sql, SEQ_GRANT, role);
	if (!s->table_denied)
		return dlock_error_set(err, DLOCK_EPERM,
		                       "role %s may not use the fencing sequence " DLOCK_PG_SEQUENCE
		                       ", which fencing tokens need (fencing=off takes none); have its owner run: %s",
		                       role, seq_sql);
	return dlock_error_set(err, DLOCK_EPERM,
	                       "role %s may not lock rows of the lock table %s; have its owner run: " TABLE_GRANT
	                       "%s%s",
	                       role, s->table, s->table, role, seq_sql[0] ? " " : "", seq_sql);
}

static dlock_status ensure(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct state *s, dlock_error *err)
{
	dlock_status st = inspect(b, c, s, err);
	if (st != DLOCK_OK)
		return st;
	if (s->seq_missing || s->table_missing)
		st = create(b, c, s, err);
	if (st == DLOCK_OK && (s->seq_denied || s->table_denied))
		st = denied(c, s, err);
	if (st == DLOCK_OK && s->seq)
		atomic_store(&b->fence_ready, 1);
	return st;
}

dlock_status dlock_pg_setup(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *table_raw,
                            dlock_error *err)
{
	struct state s = { .seq = b->fencing ? DLOCK_PG_SEQUENCE : NULL, .table = b->table, .table_raw = table_raw };
	if (!s.seq && !s.table)
		return DLOCK_OK; /* advisory mode without fencing needs nothing */
	return ensure(b, c, &s, err);
}

dlock_status dlock_pg_fence(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_error *err)
{
	if (atomic_load(&b->fence_ready))
		return DLOCK_OK;
	struct state s = { .seq = DLOCK_PG_SEQUENCE };
	return ensure(b, c, &s, err);
}

dlock_status dlock_pg_fence_failed(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                   const char *sqlstate, dlock_error *err)
{
	/* 42501 insufficient_privilege, 42P01 undefined_table: revoked or dropped
	 * since it was seen.  Looked at again only on a session no other lock
	 * holds (setting the sequence up again is a transaction); the next
	 * token taken on a session of its own does it. */
	if (c->dead || (strcmp(sqlstate, "42501") != 0 && strcmp(sqlstate, "42P01") != 0))
		return st;
	if (c->nlocks > 0) {
		atomic_store(&b->fence_ready, 0);
		return st;
	}
	atomic_store(&b->fence_ready, 0);
	dlock_error why;
	if (dlock_pg_fence(b, c, &why) != DLOCK_EPERM)
		return st;
	return dlock_error_set(err, DLOCK_EPERM, "%s", why.msg);
}

dlock_status dlock_pg_create_optional(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *const *ddl,
                                      size_t n)
{
	char sqlstate[6];
	dlock_error ignored;
	dlock_status st = run(b, c, "BEGIN", sqlstate, &ignored);
	if (st == DLOCK_OK)
		st = run(b, c, SETUP_LOCK, sqlstate, &ignored);
	for (size_t i = 0; st == DLOCK_OK && i < n; i++)
		st = run(b, c, ddl[i], sqlstate, &ignored);
	if (st == DLOCK_OK)
		st = run(b, c, "COMMIT", sqlstate, &ignored);
	else if (!c->dead)
		run(b, c, "ROLLBACK", sqlstate, &ignored);
	return st;
}
