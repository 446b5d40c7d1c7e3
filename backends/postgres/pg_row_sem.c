/*
 * mode=row: semaphores of N permits as N slot rows of the lock table,
 * beside the name's own row: prefix ":" name, then a zero byte (never in
 * a name) and the slot in decimal.  A permit is an open transaction (as
 * every lock of row mode, pg_row.c) that holds:
 *
 *   - its slot row FOR UPDATE, the first free one of the N found by one
 *     SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1 (no round trip per slot);
 *   - the name's row FOR SHARE, so that a mutex or a writer (FOR UPDATE)
 *     and a semaphore exclude each other on the server; a semaphore that
 *     finds the row held FOR UPDATE for ROW_LOCK_GRACE is DLOCK_EKIND (a
 *     shorter lock is dlock_gc()'s, pg_gc.c, which then deletes the row:
 *     ENTER inserts it again);
 *   - transaction advisory locks on the two-int keys of pg_sem.c, shared:
 *     the marker of its N and ANY.  A reader of row mode holds the READER
 *     key (base + 2049) shared and checks ANY (pg_row.c); a semaphore
 *     checks READER and the markers of other N, by a momentary exclusive
 *     try of ANY and READER (session locks unlocked in the same statement,
 *     so they never outlive it, also behind a pooler), and pg_locks only
 *     when one of them is taken: DLOCK_EKIND naming both N.
 *
 * The rows are inserted once per handle (in autocommit, as pg_row.c does),
 * the statement runs behind BEGIN in one round trip (prepared once per
 * session on a direct connection, as pg_row.c's), and the transaction
 * is rolled back on any outcome but a permit.  A waiter keeps its
 * transaction (and so its N) open and tries the slots again after a poll
 * that starts at 10 ms and doubles up to 500 ms (at most a third of the
 * lease): no NOTIFY, because LISTEN takes effect only at commit and does
 * not work behind transaction pooling, where row mode is meant to run.
 * Release and heartbeat are pg_row.c's: COMMIT, and the transaction's
 * idle timeout set again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"

/* How long ENTER waits for the name's row FOR SHARE before it says the name is a mutex's: dlock_gc()
 * locks a free row for the moment of its statement (pg_gc.c), a mutex or writer for its hold. */
#define ROW_LOCK_GRACE "100ms"
#define ROW_GONE_MAX 100 /* inserts of rows that gc keeps deleting before ESERVER */
#define POLL_FIRST_MS 10
#define POLL_MAX_MS 500
#define ELAPSED ", (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::int8"
#define SEQ "nextval('" DLOCK_PG_SEQUENCE "')"

/* $1 the name's row (bytea), $2 hi, $3 base, $4 N, $5 lease (idle in transaction); %s the table. */
#define HI "$2::int4"
#define BASE "$3::int4"
#define NPERM "$4::int4"
#define SLOT_NAME(s) "$1::bytea || '\\x00'::bytea || convert_to((" s ")::text, 'UTF8')"

/* Momentarily, key (HI, BASE + off) free of other sessions: a session lock taken and let go. */
#define FREE(off) "(CASE WHEN pg_try_advisory_lock(" HI ", " BASE " + " off ") THEN " \
	"pg_advisory_unlock(" HI ", " BASE " + " off ") ELSE false END)"

/* A reader (-3), or a marker of another N (-10000 - N), held by another session; else NULL. */
#define CONFLICT                                                                                         \
	"(WITH a AS MATERIALIZED (SELECT objid::int8 AS o FROM pg_locks WHERE locktype = 'advisory' "       \
	"AND granted AND pid <> pg_backend_pid() AND objsubid = 2 AND classid::int8 = " HI " "              \
	"AND ((objid::int8 = " BASE " + 2049 AND mode = 'ShareLock') OR (objid::int8 BETWEEN " BASE         \
	" + 1024 AND " BASE " + 2047 AND objid::int8 <> " BASE " + 1023 + " NPERM "))) "                    \
	"SELECT CASE WHEN bool_or(o = " BASE " + 2049) THEN -3 ELSE -10000 - max(o - " BASE " - 1023) END " \
	"FROM a HAVING count(*) > 0)"

/* The first free slot, kept in dlock.s; true when none is free. */
#define SLOTS                                                                                           \
	"set_config('dlock.s', COALESCE((SELECT convert_from(substr(name, length($1::bytea) + 2), 'UTF8') " \
	"FROM %s WHERE name = ANY (ARRAY(SELECT " SLOT_NAME("s") " FROM generate_series(0, " NPERM         \
	" - 1) s)) FOR UPDATE SKIP LOCKED LIMIT 1), '-1'), true) = '-1'"

#define ENTER(tail)                                                                                      \
	"SELECT CASE WHEN pg_advisory_xact_lock_shared(" HI ", " BASE " + 2048) IS NULL THEN NULL "          \
	"WHEN pg_advisory_xact_lock_shared(" HI ", " BASE " + 1023 + " NPERM ") IS NULL THEN NULL "         \
	"WHEN set_config('lock_timeout', '" ROW_LOCK_GRACE "', true) IS NULL THEN NULL "                    \
	"WHEN NOT EXISTS (SELECT 1 FROM %s WHERE name = $1::bytea FOR SHARE) THEN ARRAY[-5]::int8[] "        \
	"WHEN set_config('lock_timeout', '0', true) IS NULL THEN NULL "                                      \
	"WHEN set_config('idle_in_transaction_session_timeout', $5::text, true) IS NULL THEN NULL "          \
	"WHEN set_config('dlock.c', COALESCE(CASE WHEN " FREE("2048") " AND " FREE("2049") " THEN NULL::int8 " \
	"ELSE " CONFLICT " END, 0)::text, true) <> '0' THEN ARRAY[current_setting('dlock.c')::int8] "        \
	"WHEN " SLOTS " THEN ARRAY[-2]::int8[] "                                                             \
	"ELSE ARRAY[current_setting('dlock.s')::int8, " tail "] END" ELAPSED

#define RETRY(tail)                                                                                      \
	"SELECT CASE WHEN " SLOTS " THEN ARRAY[-2]::int8[] "                                                 \
	"ELSE ARRAY[current_setting('dlock.s')::int8, " tail "] END" ELAPSED

#define INSERT                                                                                           \
	"INSERT INTO %s (name) SELECT $1::bytea UNION ALL SELECT " SLOT_NAME("s") " FROM generate_series(0, " \
	NPERM " - 1) s ON CONFLICT DO NOTHING"

static const Oid types[5] = { 17, 23, 23, 23, 25 };

enum { SQL_INSERT, SQL_ENTER, SQL_ENTER_TOKEN, SQL_RETRY, SQL_RETRY_TOKEN };

dlock_status dlock_pg_row_sem_prepare(struct dlock_pg_backend *b, dlock_error *err)
{
	static const char *const fmt[DLOCK_PG_ROW_SEM_SQL] = { INSERT, ENTER("0"), ENTER(SEQ), RETRY("0"),
		                                               RETRY(SEQ) };
	for (int i = 0; i < DLOCK_PG_ROW_SEM_SQL; i++) {
		const char *t = b->table;
		int n = i == SQL_ENTER || i == SQL_ENTER_TOKEN
		                ? asprintf(&b->sql_row_sem[i], fmt[i], t, t)
		                : asprintf(&b->sql_row_sem[i], fmt[i], t);
		if (n < 0) {
			b->sql_row_sem[i] = NULL;
			return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
		}
	}
	return DLOCK_OK;
}

struct args {
	char hi[16], base[16], n[16], lease[24];
};

static dlock_status run_stmt(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                             const struct args *a, int which, int begin, PGresult **res, char sqlstate[6],
                             dlock_error *err)
{
	static const char *const names[DLOCK_PG_ROW_SEM_SQL] = { "dlock_row_sem_insert", "dlock_row_sem_enter",
		                                                 "dlock_row_sem_enter_token", "dlock_row_sem_retry",
		                                                 "dlock_row_sem_retry_token" };
	struct dlock_pg_stmt s = { .sql = b->sql_row_sem[which], .prepared = names[which],
		                   .token = which == SQL_ENTER_TOKEN || which == SQL_RETRY_TOKEN,
		                   .types = types, .begin = begin,
		                   .n = which == SQL_INSERT ? 4 : 5,
		                   .values = { lk->row_name, a->hi, a->base, a->n, a->lease },
		                   .lengths = { (int)lk->row_len, -1, -1, -1, -1 }, .formats = { 1 } };
	return dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), res, sqlstate, err);
}

static void rollback(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	struct dlock_pg_stmt s = { .sql = "ROLLBACK" };
	dlock_error ignored;
	char sqlstate[6];
	if (!c->dead && dlock_pg_run(b, c, &s, sqlstate, &ignored) != DLOCK_OK)
		c->dead = 1;
}

/* See pg_advisory.c. */
static int64_t acquired_at(int64_t sent, const PGresult *res)
{
	int64_t now = dlock_monotonic_ns();
	long long us = 0;
	if (!PQgetisnull(res, 0, 1))
		sscanf(PQgetvalue(res, 0, 1), "%lld", &us);
	int64_t at = sent + (us > 0 ? us * 1000 : 0);
	return at < now ? at : now;
}

/* One statement: ENTER behind BEGIN, or RETRY in the open transaction; *code as in pg_sem.c. */
static dlock_status attempt(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                            const struct args *a, int entered, int fencing, dlock_acquired *out, long long *code,
                            dlock_error *err)
{
	PGresult *res = NULL;
	char sqlstate[6];
	int which = entered ? (fencing ? SQL_RETRY_TOKEN : SQL_RETRY) : (fencing ? SQL_ENTER_TOKEN : SQL_ENTER);
	int64_t sent = dlock_monotonic_ns();
	dlock_status st = run_stmt(b, c, lk, a, which, !entered, &res, sqlstate, err);
	if (st == DLOCK_EBUSY && strcmp(sqlstate, "55P03") == 0 && !entered)
		return dlock_error_set(err, DLOCK_EKIND,
		                       "%s: the name is in use as a mutex or a read-write lock, not a semaphore",
		                       b->masked);
	if (st != DLOCK_OK)
		return fencing ? dlock_pg_fence_failed(b, c, st, sqlstate, err) : st;
	long long v[2] = { 0, 0 };
	int got = PQgetisnull(res, 0, 0) ? 0 : sscanf(PQgetvalue(res, 0, 0), "{%lld,%lld}", &v[0], &v[1]);
	if (got == 2 && v[0] >= 0 && v[0] < (long long)lk->permits) {
		*out = (dlock_acquired){ .token = (uint64_t)v[1], .slot = (uint32_t)v[0],
			                 .sent_ns = acquired_at(sent, res) };
		lk->slot = (uint32_t)v[0];
		*code = v[0];
	} else if (got == 1 && v[0] < 0) {
		*code = v[0];
	} else {
		st = dlock_error_set(err, DLOCK_ESERVER, "%s: the semaphore statement returned %s", b->masked,
		                     PQgetisnull(res, 0, 0) ? "NULL" : PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	return st;
}

/* Rows in place, then ENTER, and RETRY while waiting (c->mu held); the transaction stays open only
 * with a permit. */
static dlock_status run(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                        dlock_wait *w, int fencing, dlock_acquired *out, dlock_error *err)
{
	struct args a;
	long long code = -1;
	int entered = 0;
	int64_t poll = POLL_FIRST_MS, most = lk->lease_ms / 3;
	if (most > POLL_MAX_MS)
		most = POLL_MAX_MS;
	if (most < POLL_FIRST_MS)
		most = POLL_FIRST_MS;
	snprintf(a.hi, sizeof a.hi, "%ld", (long)lk->sem_hi);
	snprintf(a.base, sizeof a.base, "%ld", (long)lk->sem_base);
	snprintf(a.n, sizeof a.n, "%lu", (unsigned long)lk->permits);
	dlock_pg_ms_text(lk->lease_ms, a.lease);
	dlock_status st = DLOCK_OK;
	for (int pass = 0;; pass++) {
		if (!lk->row_exists) {
			PGresult *res = NULL;
			char sqlstate[6];
			st = run_stmt(b, c, lk, &a, SQL_INSERT, 0, &res, sqlstate, err);
			PQclear(res);
			if (st != DLOCK_OK)
				return st;
			lk->row_exists = 1;
		}
		st = attempt(b, c, lk, &a, entered, fencing, out, &code, err);
		if (st == DLOCK_OK && code == -5 && pass < ROW_GONE_MAX) { /* a row went (gc): insert again */
			rollback(b, c);
			lk->row_exists = 0;
			continue;
		}
		if (st != DLOCK_OK || code >= 0)
			break;
		if (code == -2 && w) {
			entered = 1;
			st = dlock_pg_sem_sleep(b, c, w, poll, err);
			poll = poll * 2 > most ? most : poll * 2;
			if (st == DLOCK_ETIMEDOUT)
				st = dlock_error_set(err, DLOCK_EBUSY, "all %lu permits stayed held", (unsigned long)lk->permits);
			if (st != DLOCK_OK)
				break;
			continue;
		}
		if (code == -2)
			st = dlock_error_set(err, DLOCK_EBUSY, "all %lu permits are held", (unsigned long)lk->permits);
		else if (code == -3)
			st = dlock_error_set(err, DLOCK_EKIND, "%s: the name is in use as a read-write lock, not a semaphore",
			                     b->masked);
		else if (code <= -10000)
			st = dlock_error_set(err, DLOCK_EKIND, "%s: the name is in use as a semaphore of %lld permits, not %lu",
			                     b->masked, -10000 - code, (unsigned long)lk->permits);
		else
			st = dlock_error_set(err, DLOCK_ESERVER, "%s: the lock's row keeps disappearing", b->masked);
		break;
	}
	if (st != DLOCK_OK)
		rollback(b, c);
	return st;
}

/* One acquisition on `c`, a connection that holds nothing (c->mu held). */
static dlock_status acquire_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	struct dlock_pg_attempt *a = arg;
	dlock_status st = a->fencing ? dlock_pg_fence(b, c, err) : DLOCK_OK;
	if (st == DLOCK_OK) {
		if (a->w)
			dlock_pg_interrupt_arm(c, a->w);
		st = run(b, c, a->lk, a->w, a->fencing, a->out, err);
		if (a->w && dlock_pg_interrupt_disarm(c, a->w)) {
			c->dead = 1; /* a cancel request may still be on its way: never reuse */
			st = dlock_error_set(err, DLOCK_ECANCELED, "acquire cancelled");
		}
	}
	if (st == DLOCK_OK) /* then never c->dead: the permit's statement answered */
		dlock_pg_pool_hold(b, c, a->lk);
	return st;
}

dlock_status dlock_pg_row_sem_acquire(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                      dlock_wait *w, dlock_acquired *out, dlock_error *err)
{
	int waits = !dlock_wait_try_once(w) && dlock_wait_remaining_ms(w) != 0;
	int fencing = dlock_wait_wants_token(w);
	dlock_status st = dlock_pg_lease_ok(lease_ms, err);
	if (st != DLOCK_OK)
		return st;
	lk->lease_ms = lease_ms;
	lk->shared = 0;
	lk->fencing = fencing;
	struct dlock_pg_attempt a = { .lk = lk, .w = waits ? w : NULL, .fencing = fencing, .out = out };
	return dlock_pg_pool_run(b, acquire_on, &a, err);
}
