/*
 * mode=row: a row of the lock table (pg_setup.c), locked with SELECT ...
 * FOR UPDATE in a transaction that stays open while the lock is held.
 * Readers of a read-write lock lock the same row FOR SHARE, which any
 * number of transactions hold at once and FOR UPDATE excludes.  A FOR
 * SHARE request is granted beside the FOR SHARE holders even while a FOR
 * UPDATE waits (PostgreSQL queues row-lock waiters only among those that
 * must wait), so readers that keep overlapping can starve a writer
 * (policy NO_PREFERENCE).  Every held lock has its own transaction, hence
 * its own session: two readers of one client never share one.
 *
 * Acquire, on a connection of its own (pg_backend.h says why):
 *   1. INSERT ... ON CONFLICT DO NOTHING of the name, in autocommit — inside
 *      the transaction it would wait on another holder's uncommitted
 *      insert, which NOWAIT does not cover.  Skipped once this handle has
 *      seen the row (only dlock_gc() deletes rows, pg_gc.c; if one disappears
 *      the lock statement says so and the insert runs again).
 *   2. BEGIN and, in the same round trip (pg_exec.c), one statement whose
 *      CASE runs in order: lock_timeout for
 *      a bounded wait (transaction-local), the row lock (FOR UPDATE NOWAIT
 *      for try-once: SQLSTATE 55P03 is busy; FOR UPDATE under lock_timeout
 *      otherwise), lock_timeout back to 0, the lease
 *      (idle_in_transaction_session_timeout, transaction-local) and the
 *      fencing token nextval('dlock_fence') — or 0, in the statement for a
 *      caller that wants no token, which never names the sequence (with
 *      fencing off the role needs no privilege on it; pg_setup.c checks it
 *      before the first token).
 * Readers also hold a key that semaphores look for, and look for theirs
 * (READER_CHECK; semaphores are pg_row_sem.c's).
 * Release: COMMIT.  Heartbeat: the idle-in-transaction timeout set again.
 *
 * No session state outlives a transaction, so this mode works behind
 * PgBouncer in transaction pooling: the open transaction keeps the server
 * connection for as long as the lock is held.  Its statements are prepared
 * once per session only on a connection straight to the server (pg.c);
 * behind a pooler they go unnamed, parsed and planned each time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"

#define ELAPSED ", (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::int8"
/* The lease, then the token (`tail`: nextval, or 0 when none is wanted). */
#define TAIL(tail)                                                                             \
	"WHEN set_config('idle_in_transaction_session_timeout', $2, true) IS NULL THEN NULL " \
	"ELSE " tail " END" ELAPSED
#define NEXTVAL "nextval('" DLOCK_PG_SEQUENCE "')"
#define ROW_GONE_MAX 100 /* inserts of a row that gc keeps deleting before ESERVER */

static const char sql_beat[] = "SELECT set_config('idle_in_transaction_session_timeout', $1, true)";

static int build(char **out, const char *fmt, const char *table)
{
	if (asprintf(out, fmt, table) < 0)
		*out = NULL;
	return *out != NULL;
}

/* $1 name, $2 lease; the waiting one $3 wait.  `how`: "UPDATE" (a writer, a mutex) or "SHARE" (a reader). */
#define TRY_SQL(how) "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM %s WHERE name = $1 FOR " how " NOWAIT) THEN -1 "
#define WAIT_SQL(how)                                                             \
	"SELECT CASE WHEN set_config('lock_timeout', $3, true) IS NULL THEN NULL " \
	"WHEN NOT EXISTS (SELECT 1 FROM %s WHERE name = $1 FOR " how ") THEN -1 "  \
	"WHEN set_config('lock_timeout', '0', true) IS NULL THEN NULL "

/* A reader, once it holds the row FOR SHARE: the READER key shared for the transaction (pg_row_sem.c
 * looks for it), then whether a semaphore of the name holds or awaits ANY: a momentary session lock
 * says no at once, else pg_locks says; -2 then, and the transaction is rolled back. */
#define READER_CHECK(h, b)                                                                          \
	"WHEN pg_advisory_xact_lock_shared($" h "::int4, $" b "::int4 + 2049) IS NULL THEN NULL "          \
	"WHEN CASE WHEN pg_try_advisory_lock($" h "::int4, $" b "::int4 + 2048) THEN NOT "                \
	"pg_advisory_unlock($" h "::int4, $" b "::int4 + 2048) ELSE EXISTS (SELECT 1 FROM pg_locks "      \
	"WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND pid <> pg_backend_pid() "          \
	"AND mode = 'ShareLock' AND classid::int8 = $" h "::int4 AND objid::int8 = $" b "::int4 + 2048) " \
	"END THEN -2 "

dlock_status dlock_pg_row_prepare(struct dlock_pg_backend *b, dlock_error *err)
{
	const char *t = b->table;
	char **p = b->sql_row_prepare;
	if (!build(&b->sql_row_insert, "INSERT INTO %s (name) VALUES ($1) ON CONFLICT DO NOTHING", t) ||
	    !build(&b->sql_row_try, TRY_SQL("UPDATE") TAIL("0"), t) ||
	    !build(&b->sql_row_wait, WAIT_SQL("UPDATE") TAIL("0"), t) ||
	    !build(&b->sql_row_try_token, TRY_SQL("UPDATE") TAIL(NEXTVAL), t) ||
	    !build(&b->sql_row_wait_token, WAIT_SQL("UPDATE") TAIL(NEXTVAL), t) ||
	    !build(&b->sql_row_try_shared, TRY_SQL("SHARE") READER_CHECK("3", "4") TAIL("0"), t) ||
	    !build(&b->sql_row_wait_shared, WAIT_SQL("SHARE") READER_CHECK("4", "5") TAIL("0"), t))
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	if (dlock_pg_row_sem_prepare(b, err) != DLOCK_OK)
		return DLOCK_ENOMEM;
	char *const *sem = b->sql_row_sem;
	if (asprintf(&p[DLOCK_PG_SET_PLAIN],
	             "PREPARE dlock_row_insert AS %s; PREPARE dlock_row_try AS %s; PREPARE dlock_row_wait AS %s; "
	             "PREPARE dlock_row_try_shared AS %s; PREPARE dlock_row_wait_shared AS %s; "
	             "PREPARE dlock_row_sem_insert" DLOCK_PG_ROW_SEM_ARGS4 " AS %s; "
	             "PREPARE dlock_row_sem_enter" DLOCK_PG_ROW_SEM_ARGS " AS %s; "
	             "PREPARE dlock_row_sem_retry" DLOCK_PG_ROW_SEM_ARGS " AS %s",
	             b->sql_row_insert, b->sql_row_try, b->sql_row_wait, b->sql_row_try_shared,
	             b->sql_row_wait_shared, sem[0], sem[1], sem[3]) < 0)
		p[DLOCK_PG_SET_PLAIN] = NULL;
	if (asprintf(&p[DLOCK_PG_SET_TOKEN],
	             "PREPARE dlock_row_try_token AS %s; PREPARE dlock_row_wait_token AS %s; "
	             "PREPARE dlock_row_sem_enter_token" DLOCK_PG_ROW_SEM_ARGS " AS %s; "
	             "PREPARE dlock_row_sem_retry_token" DLOCK_PG_ROW_SEM_ARGS " AS %s",
	             b->sql_row_try_token, b->sql_row_wait_token, sem[2], sem[4]) < 0)
		p[DLOCK_PG_SET_TOKEN] = NULL;
	/* Both: the TOKEN set first, so that when it fails nothing after it runs. */
	if (!p[DLOCK_PG_SET_PLAIN] || !p[DLOCK_PG_SET_TOKEN] ||
	    asprintf(&p[DLOCK_PG_SET_PLAIN | DLOCK_PG_SET_TOKEN], "%s; %s", p[DLOCK_PG_SET_TOKEN],
	             p[DLOCK_PG_SET_PLAIN]) < 0) {
		p[DLOCK_PG_SET_PLAIN | DLOCK_PG_SET_TOKEN] = NULL;
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	}
	return DLOCK_OK;
}

static dlock_status simple(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *sql, dlock_error *err)
{
	struct dlock_pg_stmt s = { .sql = sql };
	char sqlstate[6];
	return dlock_pg_run(b, c, &s, sqlstate, err);
}

/* End a failed transaction; a connection that cannot is not reused. */
static void rollback(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	dlock_error ignored;
	if (!c->dead && simple(b, c, "ROLLBACK", &ignored) != DLOCK_OK)
		c->dead = 1;
}

static dlock_status insert_row(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                               dlock_error *err)
{
	struct dlock_pg_stmt s = { .sql = b->sql_row_insert, .prepared = "dlock_row_insert", .n = 1, .values = { lk->row_name },
		                   .lengths = { (int)lk->row_len }, .formats = { 1 } };
	char sqlstate[6];
	dlock_status st = dlock_pg_run(b, c, &s, sqlstate, err);
	lk->row_exists = st == DLOCK_OK;
	return st;
}

/* See pg_advisory.c: when the server's idle timer started, at the latest. */
static int64_t acquired_at(int64_t sent, const PGresult *res)
{
	int64_t now = dlock_monotonic_ns();
	long long us = 0;
	if (!PQgetisnull(res, 0, 1))
		sscanf(PQgetvalue(res, 0, 1), "%lld", &us);
	int64_t at = sent + (us > 0 ? us * 1000 : 0);
	return at < now ? at : now;
}

/* BEGIN and the lock statement; *token -1 when the row is missing. */
static dlock_status lock_row(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                             dlock_wait *w, int64_t *token, int64_t *at, dlock_error *err)
{
	char lease[24], wait[24], sqlstate[6], hi[16], base[16];
	int fencing = lk->fencing;
	dlock_pg_ms_text(lk->lease_ms, lease);
	snprintf(hi, sizeof hi, "%ld", (long)lk->sem_hi);
	snprintf(base, sizeof base, "%ld", (long)lk->sem_base);
	struct dlock_pg_stmt s = { .sql = lk->shared ? b->sql_row_try_shared : fencing ? b->sql_row_try_token : b->sql_row_try,
		                   .prepared = lk->shared ? "dlock_row_try_shared" : fencing ? "dlock_row_try_token" : "dlock_row_try",
		                   .token = fencing,
		                   .begin = 1, .n = 2, .values = { lk->row_name, lease },
		                   .lengths = { (int)lk->row_len, -1 }, .formats = { 1, 0 } };
	int64_t deadline = dlock_pg_io_deadline(b);
	if (w) {
		int64_t left = dlock_wait_remaining_ms(w);
		dlock_pg_ms_text(left < 0 ? 0 : left, wait);
		s.sql = lk->shared ? b->sql_row_wait_shared : fencing ? b->sql_row_wait_token : b->sql_row_wait; /* $3 the wait */
		s.prepared = lk->shared ? "dlock_row_wait_shared" : fencing ? "dlock_row_wait_token" : "dlock_row_wait";
		s.n = 3;
		s.values[2] = wait;
		s.lengths[2] = -1;
		deadline = dlock_pg_wait_deadline(b, w);
		dlock_pg_interrupt_arm(c, w);
	}
	if (lk->shared) { /* then the two-int key of the name's semaphores */
		s.values[s.n] = hi;
		s.values[s.n + 1] = base;
		s.lengths[s.n] = s.lengths[s.n + 1] = -1;
		s.n += 2;
	}
	PGresult *res = NULL;
	int isnull = 0;
	int64_t sent = dlock_monotonic_ns();
	dlock_status st = dlock_pg_exec(b, c, &s, deadline, &res, sqlstate, err);
	if (w && dlock_pg_interrupt_disarm(c, w)) {
		c->dead = 1; /* a cancel request may still be on its way: never reuse */
		st = dlock_error_set(err, DLOCK_ECANCELED, "acquire cancelled");
	}
	if (st == DLOCK_OK) {
		*token = dlock_pg_int_value(res, &isnull);
		*at = acquired_at(sent, res);
	}
	PQclear(res);
	if (st == DLOCK_OK && isnull)
		st = dlock_error_set(err, DLOCK_ESERVER, "the lock statement returned no token");
	if (st != DLOCK_OK || *token < 0)
		rollback(b, c);
	if (st == DLOCK_OK && *token == -2)
		st = dlock_error_set(err, DLOCK_EKIND, "%s: the name is in use as a semaphore, not a read-write lock",
		                     b->masked);
	if (st != DLOCK_OK && fencing)
		st = dlock_pg_fence_failed(b, c, st, sqlstate, err);
	return st;
}

/* Insert if needed, lock; c->mu held.  dlock_gc() may delete a free row between the insert and the lock
 * (pg_gc.c): each time, insert it again, up to ROW_GONE_MAX times in a row. */
static dlock_status row_attempt(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	struct dlock_pg_attempt *a = arg;
	struct dlock_pg_lock *lk = a->lk;
	dlock_status st = lk->fencing ? dlock_pg_fence(b, c, err) : DLOCK_OK;
	if (st != DLOCK_OK)
		return st;
	for (int pass = 0; pass < ROW_GONE_MAX; pass++) {
		st = lk->row_exists ? DLOCK_OK : insert_row(b, c, lk, err);
		int64_t token = -1, at = 0;
		if (st == DLOCK_OK)
			st = lock_row(b, c, lk, a->w, &token, &at, err);
		if (st != DLOCK_OK)
			return st;
		if (token >= 0) {
			*a->out = (dlock_acquired){ .token = (uint64_t)token, .sent_ns = at };
			dlock_pg_pool_hold(b, c, lk);
			return DLOCK_OK;
		}
		lk->row_exists = 0; /* deleted meanwhile: insert it again */
	}
	return dlock_error_set(err, DLOCK_ESERVER, "%s: the lock's row keeps disappearing", b->masked);
}

static dlock_status row_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                                dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	if (lk->permits)
		return dlock_pg_row_sem_acquire(b, lk, lease_ms, w, out, err);
	int waits = !dlock_wait_try_once(w) && dlock_wait_remaining_ms(w) != 0;
	dlock_status st = dlock_pg_lease_ok(lease_ms, err);
	if (st != DLOCK_OK)
		return st;
	lk->lease_ms = lease_ms;
	/* A reader: FOR SHARE, and no token (read fencing NONE, pg_advisory.c says why). */
	lk->shared = dlock_wait_mode(w) == DLOCK_MODE_SHARED;
	lk->fencing = dlock_wait_wants_token(w) && !lk->shared;
	/* An idle connection, or a new one when that is dead. */
	struct dlock_pg_attempt a = { .lk = lk, .w = waits ? w : NULL, .fencing = lk->fencing, .out = out };
	return dlock_pg_pool_run(b, row_attempt, &a, err);
}

static dlock_status row_release(void *backend, void *lkp, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	struct dlock_pg_conn *c = lk->conn;
	char sqlstate[6];
	PGresult *res = NULL;
	pthread_mutex_lock(&c->mu);
	dlock_pg_pool_unhold(b, lk);
	int open = !c->dead && PQtransactionStatus(c->pg) == PQTRANS_INTRANS;
	struct dlock_pg_stmt s = { .sql = open ? "COMMIT" : "ROLLBACK" };
	dlock_status st = dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), &res, sqlstate, err);
	if (st == DLOCK_OK && (!open || strcmp(PQcmdStatus(res), "COMMIT") != 0))
		st = dlock_error_set(err, DLOCK_ENOTHELD, "the lock's transaction had failed (rolled back)");
	else if (c->dead)
		st = DLOCK_ENOTHELD;
	if (c->dead || (st != DLOCK_OK && st != DLOCK_ENOTHELD))
		dlock_pg_pool_broken(b, c, err->msg);
	PQclear(res);
	pthread_mutex_unlock(&c->mu);
	dlock_pg_pool_put(b, c);
	return st;
}

/* Heartbeat; the transaction must still be open and sound. */
static dlock_status row_beat(void *backend, void *lkp, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	struct dlock_pg_conn *c = lk->conn;
	char lease[24], sqlstate[6];
	pthread_mutex_lock(&c->mu);
	dlock_pg_ms_text(lk->lease_ms, lease);
	struct dlock_pg_stmt s = { .sql = sql_beat, .n = 1, .values = { lease }, .lengths = { -1 } };
	dlock_status st = dlock_pg_run(b, c, &s, sqlstate, err);
	if (c->dead) {
		dlock_pg_pool_broken(b, c, err->msg);
		st = DLOCK_ENOTHELD;
	} else if (PQtransactionStatus(c->pg) != PQTRANS_INTRANS) {
		st = dlock_error_set(err, DLOCK_ENOTHELD, "the lock's transaction is no longer open");
	}
	pthread_mutex_unlock(&c->mu);
	return st;
}

static dlock_status row_extend(void *backend, void *lkp, int64_t lease_ms, dlock_error *err)
{
	struct dlock_pg_lock *lk = lkp;
	struct dlock_pg_conn *c = lk->conn;
	if (dlock_pg_lease_ok(lease_ms, err) != DLOCK_OK)
		return DLOCK_EINVAL;
	pthread_mutex_lock(&c->mu);
	lk->lease_ms = lease_ms;
	pthread_mutex_unlock(&c->mu);
	return row_beat(backend, lkp, err);
}

const struct dlock_pg_mode dlock_pg_row_mode = {
	.name = "row",
	.acquire = row_acquire,
	.release = row_release,
	.extend = row_extend,
	.check = row_beat,
};
