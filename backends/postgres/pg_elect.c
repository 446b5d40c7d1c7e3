/*
 * mode=advisory: leader election.  The leader is the session holding the
 * name's advisory key exclusively (pg_advisory.c); its term is that
 * acquisition's token (nextval of dlock_fence) and its value is kept where
 * any session can read it:
 *
 *   CREATE TABLE dlock_leaders (
 *       key     int8 PRIMARY KEY,  -- the name's advisory key (pg_hash.c)
 *       term    int8 NOT NULL,     -- the leader's token
 *       pid     int4 NOT NULL,     -- the leader's session: backend pid,
 *       started timestamptz,       --   and that session's backend_start
 *       value   bytea NOT NULL);   -- what it proclaimed
 *
 * proclaim() upserts the row from the leader's own session, in one
 * statement that writes only while pg_locks shows that session holding the
 * key exclusively (else DLOCK_ENOTHELD), and calls pg_notify on the name's
 * channel ("dlock_leader_" and the key in hex: never the name), which the
 * server delivers when the statement commits.  It commits with the
 * session's synchronous_commit, never turned off: with a synchronous
 * standby, a campaign returns only once the standby has the row and,
 * earlier in the WAL, the sequence's record of the term, so after a
 * failover neither the row nor the sequence goes back behind a term that a
 * leader or an observer was told (with synchronous_commit off a promoted
 * standby could show an older leader's row as current and hand its term
 * out again).  The price: a proclaim waits for the standby, and without it
 * fails at io_timeout, as a lock's token does (README, PostgreSQL failover).
 *
 * Inspection (pg_inspect.c) shows a holder's term and value only from the
 * row whose pid is the holder's session and whose backend_start is that
 * session's: the row of an earlier leader whose session is gone is never
 * shown as the current one's (a session of another role, whose
 * backend_start pg_stat_activity hides, is matched on its pid alone).  A
 * holder that has not proclaimed yet shows term 0 (unknown) and no value.
 *
 * Release of a lock that proclaimed deletes its row and notifies in the
 * unlock's own statement (dlock_pg_sql_resign; synchronous_commit off for
 * it: a delete lost in a failover leaves a row that no session matches).
 * A session that ends without a release (a crash, pg_terminate_backend, the
 * server's idle timeout) notifies nobody: the next leader's proclaim does,
 * and observers read again twice per lease in any case (core/observe.c).
 * dlock_break() notifies after ending the sessions (pg_inspect.c).
 *
 * The table is created at open when missing and the role may, as
 * dlock_names (pg_names.c); without it, or without SELECT, INSERT, UPDATE
 * and DELETE on it, this client has no elections (DLOCK_FEATURE_ELECTION
 * -1, proclaim DLOCK_ENOTSUP saying why) while locking is unchanged.  Row
 * mode has none either: no inspection of row locks, and no LISTEN behind
 * a transaction pooler.
 *
 * Threads: proclaim runs on the lock's connection, c->mu held.
 */
#include <stdio.h>
#include <string.h>

#include "pg_backend.h"

#define CREATE_LEADERS                                                                                   \
	"CREATE TABLE IF NOT EXISTS " DLOCK_PG_LEADERS " (key int8 PRIMARY KEY, term int8 NOT NULL, pid int4 " \
	"NOT NULL, started timestamptz, value bytea NOT NULL)"
#define PRIV(p) "has_table_privilege('" DLOCK_PG_LEADERS "', '" p "')"

/* $1 key, $2 term, $3 value, $4 channel: the row written and the channel notified while this session
 * holds the key exclusively; answers how many rows were written (0: not held). */
static const char sql_proclaim[] =
	"WITH me AS (SELECT a.pid, a.backend_start FROM pg_stat_activity a WHERE a.pid = pg_backend_pid() "
	"AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() "
	"AND l.granted AND l.objsubid = 1 AND l.mode = 'ExclusiveLock' "
	"AND l.classid = (($1::int8 >> 32) & 4294967295)::oid AND l.objid = ($1::int8 & 4294967295)::oid)), "
	"up AS (INSERT INTO " DLOCK_PG_LEADERS " (key, term, pid, started, value) "
	"SELECT $1::int8, $2::int8, me.pid, me.backend_start, $3::bytea FROM me "
	"ON CONFLICT (key) DO UPDATE SET term = EXCLUDED.term, pid = EXCLUDED.pid, started = EXCLUDED.started, "
	"value = EXCLUDED.value RETURNING 1) "
	"SELECT count(*) FROM (SELECT pg_notify($4::text, '') FROM up) n";

const char dlock_pg_sql_resign[] =
	"WITH gone AS (DELETE FROM " DLOCK_PG_LEADERS " WHERE key = $1::int8 AND pid = pg_backend_pid()) "
	"SELECT pg_advisory_unlock($1::int8), CASE WHEN $2::text IS NULL THEN false "
	"ELSE set_config('idle_session_timeout', $2::text, false) IS NULL END, "
	"set_config('synchronous_commit', 'off', true), pg_notify($3::text, '')";

void dlock_pg_leader_channel(int64_t key, char out[DLOCK_PG_CHANNEL_SIZE])
{
	snprintf(out, DLOCK_PG_CHANNEL_SIZE, "dlock_leader_%016llx", (unsigned long long)key);
}

/* DLOCK_PG_LEADERS_* bits, -1 when the table is missing, -2 when the question failed. */
static int table_state(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	struct dlock_pg_stmt q = { .sql = "SELECT CASE WHEN to_regclass('" DLOCK_PG_LEADERS "') IS NULL THEN -1 "
		                          "ELSE CASE WHEN " PRIV("SELECT") " THEN 1 ELSE 0 END + CASE WHEN "
		                          PRIV("SELECT") " AND " PRIV("INSERT") " AND " PRIV("UPDATE") " AND "
		                          PRIV("DELETE") " THEN 2 ELSE 0 END END" };
	PGresult *res;
	char sqlstate[6];
	dlock_error ignored;
	int isnull = 1;
	if (dlock_pg_exec(b, c, &q, dlock_pg_io_deadline(b), &res, sqlstate, &ignored) != DLOCK_OK)
		return -2;
	int64_t v = dlock_pg_int_value(res, &isnull);
	PQclear(res);
	return isnull ? -2 : (int)v;
}

dlock_status dlock_pg_leaders_setup(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	int state = table_state(b, c);
	if (state == -1) {
		static const char *const ddl[] = { CREATE_LEADERS };
		dlock_status st = dlock_pg_create_optional(b, c, ddl, 1); /* may not create it: no elections */
		state = st == DLOCK_OK ? table_state(b, c) : 0;
	}
	atomic_store(&b->leaders, state < 0 ? 0 : state);
	return c->dead ? DLOCK_ECONNECT : DLOCK_OK;
}

static dlock_status no_table(const struct dlock_pg_backend *b, dlock_error *err)
{
	return dlock_error_set(err, DLOCK_ENOTSUP,
	                       "%s: no leader election for this client: the table " DLOCK_PG_LEADERS " is missing "
	                       "and the role may not create it, or the role may not write it (the schema's owner "
	                       "runs: " CREATE_LEADERS "; GRANT SELECT, INSERT, UPDATE, DELETE ON " DLOCK_PG_LEADERS
	                       " TO the role)",
	                       b->masked);
}

dlock_status dlock_pg_proclaim(void *backend, void *lkp, const char *value, size_t len, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	if (b->mode != &dlock_pg_advisory_mode)
		return dlock_error_set(err, DLOCK_ENOTSUP,
		                       "%s: mode=row has no leader election: a row lock's holder is not visible to "
		                       "others, and LISTEN does not work behind a transaction pooler (use mode=advisory)",
		                       b->masked);
	if (!(atomic_load(&b->leaders) & DLOCK_PG_LEADERS_WRITE))
		return no_table(b, err);
	if (lk->shared || lk->permits || !lk->conn)
		return dlock_error_set(err, DLOCK_ENOTHELD, "%s: only the holder of a mutex leads", b->masked);
	struct dlock_pg_conn *c = lk->conn;
	char key[24], term[24], channel[DLOCK_PG_CHANNEL_SIZE], sqlstate[6];
	snprintf(key, sizeof key, "%lld", (long long)lk->key);
	snprintf(term, sizeof term, "%llu", (unsigned long long)lk->token);
	dlock_pg_leader_channel(lk->key, channel);
	struct dlock_pg_stmt s = { .sql = sql_proclaim, .n = 4, .values = { key, term, value, channel },
		                   .lengths = { -1, -1, (int)len, -1 }, .formats = { 0, 0, 1, 0 } };
	PGresult *res = NULL;
	int isnull = 1;
	pthread_mutex_lock(&c->mu);
	dlock_status st = dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), &res, sqlstate, err);
	if (st == DLOCK_OK && dlock_pg_int_value(res, &isnull) != 1)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "%s: the server shows no such lock for this session", b->masked);
	else if (st == DLOCK_OK)
		lk->proclaimed = 1;
	else if (c->dead)
		dlock_pg_pool_broken(b, c, err->msg);
	else if (strcmp(sqlstate, "42501") == 0 || strcmp(sqlstate, "42P01") == 0) {
		atomic_store(&b->leaders, 0); /* revoked or dropped since open */
		st = no_table(b, err);
	}
	PQclear(res);
	pthread_mutex_unlock(&c->mu);
	return st;
}

dlock_status dlock_pg_leader_notify(struct dlock_pg_backend *b, struct dlock_pg_conn *c, int64_t key,
                                    dlock_error *err)
{
	char channel[DLOCK_PG_CHANNEL_SIZE], sqlstate[6];
	dlock_pg_leader_channel(key, channel);
	struct dlock_pg_stmt s = { .sql = "SELECT pg_notify($1::text, '')", .n = 1, .values = { channel },
		                   .lengths = { -1 } };
	return dlock_pg_run(b, c, &s, sqlstate, err);
}
