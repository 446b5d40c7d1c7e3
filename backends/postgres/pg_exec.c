/*
 * One statement on one connection, with a deadline and cancellation.
 *
 * Statements go out with PQsendQueryParams, or PQsendQueryPrepared when
 * the session prepares them (b->prepare); every value is a parameter:
 * nothing from a name or a URI is ever pasted into SQL.  The result is
 * awaited with poll(), so that io_timeout bounds every statement that
 * should answer at once.  A statement that opens a transaction is sent behind its BEGIN in
 * libpq's pipeline mode: one round trip, where two statements would take
 * two, with the parameters still parameters.
 *
 * A waiting statement (pg_advisory_lock, SELECT ... FOR UPDATE) is
 * cancelled through the core's interrupt hook: the hook only sets a flag
 * and writes to the connection's eventfd; the waiting thread then sends
 * the server a cancel request (PQcancel) and keeps sending one every
 * CANCEL_REPEAT_MS until the statement ends, because a request that
 * arrives before the statement starts is ignored by the server.  A
 * cancelled connection is never reused (pg_advisory.c, pg_row.c).
 */
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_backend.h"

#define CANCEL_REPEAT_MS 100
#define NS_PER_MS 1000000LL

int64_t dlock_pg_io_deadline(const struct dlock_pg_backend *b)
{
	return dlock_monotonic_ns() + b->io_timeout_ms * NS_PER_MS;
}

int64_t dlock_pg_wait_deadline(const struct dlock_pg_backend *b, const dlock_wait *w)
{
	int64_t d = dlock_wait_deadline_ns(w), slack = b->io_timeout_ms * NS_PER_MS;
	return d > INT64_MAX - slack ? INT64_MAX : d + slack;
}

dlock_status dlock_pg_lease_ok(int64_t lease_ms, dlock_error *err)
{
	if (lease_ms <= INT_MAX)
		return DLOCK_OK;
	return dlock_error_set(err, DLOCK_EINVAL,
	                       "a lease of more than %d ms does not fit PostgreSQL's session timeouts", INT_MAX);
}

int64_t dlock_pg_text_int(const char *text)
{
	int neg = *text == '-';
	uint64_t m = 0;
	for (const char *p = text + neg; *p >= '0' && *p <= '9'; p++)
		m = m * 10 + (uint64_t)(*p - '0');
	return neg ? (int64_t)(0 - m) : (int64_t)m;
}

void dlock_pg_ms_text(int64_t ms, char out[24])
{
	if (ms > INT_MAX)
		ms = INT_MAX;
	if (ms < 0)
		ms = 1;
	dlock_decimal(out, ms);
}

int64_t dlock_pg_int_value(const PGresult *res, int *isnull)
{
	*isnull = PQntuples(res) < 1 || PQnfields(res) < 1 || PQgetisnull(res, 0, 0);
	return *isnull ? 0 : dlock_pg_text_int(PQgetvalue(res, 0, 0));
}

/* ------------------------------------------------------------ cancel */

static void interrupt_hook(void *arg)
{
	struct dlock_pg_conn *c = arg;
	uint64_t one = 1;
	atomic_store(&c->interrupted, 1);
	if (write(c->wake_fd, &one, sizeof one) < 0) {
		/* The counter is full: a wake-up is pending anyway. */
	}
}

void dlock_pg_interrupt_arm(struct dlock_pg_conn *c, dlock_wait *w)
{
	uint64_t drain;
	/* The hook raises the flag before it writes, and has returned once disarmed. */
	if (atomic_exchange(&c->interrupted, 0))
		while (read(c->wake_fd, &drain, sizeof drain) > 0)
			;
	dlock_wait_set_interrupt(w, interrupt_hook, c);
}

int dlock_pg_interrupt_disarm(struct dlock_pg_conn *c, dlock_wait *w)
{
	dlock_wait_set_interrupt(w, NULL, NULL);
	return atomic_load(&c->interrupted);
}

static void send_cancel(struct dlock_pg_conn *c)
{
	char errbuf[256];
	if (c->cancel)
		PQcancel(c->cancel, errbuf, sizeof errbuf);
}

/* ------------------------------------------------------------ results */

dlock_status dlock_pg_lost(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_error *err)
{
	char text[384];
	dlock_pg_one_line(PQerrorMessage(c->pg), text, sizeof text);
	c->dead = 1;
	return dlock_error_set(err, DLOCK_ECONNECT, "%s: connection lost: %s", b->masked,
	                       text[0] ? text : "no detail");
}

/*
 * Wait until libpq has the whole result, or the deadline.  Reads only after
 * poll() says there is something: just after a send, a read would find
 * nothing and cost a system call per statement.
 */
static dlock_status await_result(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, int64_t deadline_ns,
                                 dlock_error *err)
{
	int64_t next_cancel = 0;
	for (;;) {
		if (!PQisBusy(c->pg))
			return DLOCK_OK;
		if (PQsocket(c->pg) < 0)
			return dlock_pg_lost(b, c, err);
		int64_t now = dlock_monotonic_ns(), until = deadline_ns;
		if (now >= deadline_ns) {
			c->dead = 1;
			return dlock_error_set(err, DLOCK_ECONNECT, "%s: no answer from the server within %lld ms",
			                       b->masked, (long long)b->io_timeout_ms);
		}
		if (atomic_load(&c->interrupted)) {
			if (now >= next_cancel) {
				send_cancel(c);
				next_cancel = now + CANCEL_REPEAT_MS * NS_PER_MS;
			}
			until = next_cancel < until ? next_cancel : until;
		}
		int64_t left_ms = (until - now) / NS_PER_MS + 1;
		int ms = until == INT64_MAX ? -1 : left_ms > 60000 ? 60000 : (int)left_ms;
		struct pollfd pfd[2] = { { .fd = PQsocket(c->pg), .events = POLLIN },
		                         { .fd = c->wake_fd, .events = POLLIN } };
		poll(pfd, 2, ms);
		uint64_t drain;
		if (pfd[1].revents & POLLIN)
			while (read(c->wake_fd, &drain, sizeof drain) > 0)
				;
		if (pfd[0].revents && !PQconsumeInput(c->pg))
			return dlock_pg_lost(b, c, err);
	}
}

PGresult *dlock_pg_keep_result(PGresult *keep, PGresult *r)
{
	if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
		PQclear(r);
		return keep;
	}
	PQclear(keep);
	return r;
}

/* Collect the statement's result: the error if any, else the last one. */
static PGresult *collect(PGconn *pg)
{
	PGresult *keep = NULL, *r;
	while ((r = PQgetResult(pg)) != NULL)
		keep = dlock_pg_keep_result(keep, r);
	return keep;
}

static dlock_status server_error(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, PGresult *res,
                                 char sqlstate[6], dlock_error *err)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	snprintf(sqlstate, 6, "%s", state ? state : "");
	if (PQstatus(c->pg) == CONNECTION_BAD)
		c->dead = 1;
	dlock_status st = c->dead ? DLOCK_ECONNECT : state ? dlock_pg_sqlstate_status(state) : DLOCK_ESERVER;
	if (!primary) {
		char text[384];
		dlock_pg_one_line(PQerrorMessage(c->pg), text, sizeof text);
		return dlock_error_set(err, st, "%s: %s", b->masked, text);
	}
	if (st == DLOCK_ELIMIT)
		return dlock_error_set(err, st,
		                       "%s: server: %s (SQLSTATE %s): the lock table is full; it holds about "
		                       "max_locks_per_transaction x (max_connections + max_prepared_transactions) "
		                       "locks for all sessions together: raise max_locks_per_transaction",
		                       b->masked, primary, sqlstate);
	return dlock_error_set(err, st, "%s: server: %s (SQLSTATE %s)", b->masked, primary, sqlstate);
}

dlock_status dlock_pg_outcome(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, PGresult *r,
                            PGresult **res, char sqlstate[6], dlock_error *err)
{
	ExecStatusType rs = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	if (rs == PGRES_TUPLES_OK || rs == PGRES_COMMAND_OK) {
		*res = r;
		return DLOCK_OK;
	}
	dlock_status st = server_error(b, c, r, sqlstate, err);
	PQclear(r);
	return st;
}

/* Await the result of what was sent on `c` and sort it out (see dlock_pg_exec). */
static dlock_status finish(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, int64_t deadline_ns,
                           PGresult **res, char sqlstate[6], dlock_error *err)
{
	dlock_status st = await_result(b, c, deadline_ns, err);
	if (st != DLOCK_OK)
		return st;
	return dlock_pg_outcome(b, c, collect(c->pg), res, sqlstate, err);
}

unsigned dlock_pg_sets_missing(const struct dlock_pg_conn *c, const struct dlock_pg_stmt *s)
{
	unsigned want = s->token ? DLOCK_PG_SET_PLAIN | DLOCK_PG_SET_TOKEN : DLOCK_PG_SET_PLAIN;
	return want & ~c->prepared;
}

/*
 * The sets of statements `s` needs that this session lacks, in one round
 * trip.  Named statements skip the parse and plan that an unnamed one pays
 * each time; they live as long as the session, which only dlock uses:
 * b->prepare is set only on a connection straight to the server (pg.c),
 * where no pooler's DISCARD or change of server session can drop them.
 * PREPARE is not transactional: when one of several fails, those before it
 * stay, so a failure deallocates them all and the session starts afresh.
 */
static dlock_status prepare(const struct dlock_pg_backend *b, struct dlock_pg_conn *c,
                            const struct dlock_pg_stmt *s, char sqlstate[6], dlock_error *err)
{
	unsigned missing = dlock_pg_sets_missing(c, s);
	PGresult *res = NULL;
	if (!missing)
		return DLOCK_OK;
	if (!PQsendQuery(c->pg, b->prepare[missing]))
		return dlock_pg_lost(b, c, err);
	dlock_status st = finish(b, c, dlock_pg_io_deadline(b), &res, sqlstate, err);
	PQclear(res);
	if (st == DLOCK_OK) {
		c->prepared |= missing;
		return DLOCK_OK;
	}
	if (!c->dead) {
		dlock_error ignored;
		char state2[6];
		if (!PQsendQuery(c->pg, "DEALLOCATE ALL") ||
		    finish(b, c, dlock_pg_io_deadline(b), &res, state2, &ignored) != DLOCK_OK)
			c->dead = 1;
		PQclear(res);
		c->prepared = 0;
	}
	return st;
}

/*
 * Await and sort the results of a pipeline of BEGIN and one statement: the
 * first error, else the statement's result; then the sync point, after
 * which the connection leaves pipeline mode.
 */
static dlock_status finish_pipeline(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, int64_t deadline_ns,
                                    PGresult **res, char sqlstate[6], dlock_error *err)
{
	PGresult *keep = NULL, *r;
	dlock_status st = DLOCK_OK;
	int ends = 0; /* NULLs in a row: one ends a statement's results, two mean nothing is due */
	for (;;) {
		st = await_result(b, c, deadline_ns, err);
		if (st != DLOCK_OK)
			break;
		if ((r = PQgetResult(c->pg)) == NULL) {
			if (++ends < 2)
				continue;
			st = dlock_pg_lost(b, c, err);
			break;
		}
		ends = 0;
		ExecStatusType rs = PQresultStatus(r);
		if (rs == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			break;
		}
		if (rs == PGRES_PIPELINE_ABORTED || (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR)) {
			PQclear(r);
			continue;
		}
		PQclear(keep);
		keep = r;
	}
	if (st == DLOCK_OK && !PQexitPipelineMode(c->pg))
		st = dlock_pg_lost(b, c, err);
	if (st != DLOCK_OK) {
		c->dead = 1; /* results still due: the connection cannot be used again */
		PQclear(keep);
		return st;
	}
	return dlock_pg_outcome(b, c, keep, res, sqlstate, err);
}

int dlock_pg_send_stmt(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_stmt *s)
{
	if (b->prepare[DLOCK_PG_SET_PLAIN] && s->prepared)
		return PQsendQueryPrepared(c->pg, s->prepared, s->n, s->values, s->lengths, s->formats, 0);
	return PQsendQueryParams(c->pg, s->sql, s->n, s->types, s->values, s->lengths, s->formats, 0);
}

static dlock_status exec_after_begin(const struct dlock_pg_backend *b, struct dlock_pg_conn *c,
                                     const struct dlock_pg_stmt *s, int64_t deadline_ns, PGresult **res,
                                     char sqlstate[6], dlock_error *err)
{
	if (!PQenterPipelineMode(c->pg))
		return dlock_pg_lost(b, c, err);
	if (!PQsendQueryParams(c->pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) || !dlock_pg_send_stmt(b, c, s) ||
	    !PQpipelineSync(c->pg))
		return dlock_pg_lost(b, c, err);
	return finish_pipeline(b, c, deadline_ns, res, sqlstate, err);
}

/* BEGIN, SET LOCAL synchronous_commit TO off, `s`, COMMIT: one round trip (a pipeline), and a transaction
 * that a failure leaves behind is rolled back. */
static dlock_status exec_unsynced(const struct dlock_pg_backend *b, struct dlock_pg_conn *c,
                                  const struct dlock_pg_stmt *s, int64_t deadline_ns, PGresult **res,
                                  char sqlstate[6], dlock_error *err)
{
	if (!PQenterPipelineMode(c->pg))
		return dlock_pg_lost(b, c, err);
	if (!PQsendQueryParams(c->pg, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) ||
	    !PQsendQueryParams(c->pg, "SET LOCAL synchronous_commit TO off", 0, NULL, NULL, NULL, NULL, 0) ||
	    !dlock_pg_send_stmt(b, c, s) || !PQsendQueryParams(c->pg, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) ||
	    !PQpipelineSync(c->pg))
		return dlock_pg_lost(b, c, err);
	dlock_status st = finish_pipeline(b, c, deadline_ns, res, sqlstate, err);
	if (!c->dead && PQtransactionStatus(c->pg) != PQTRANS_IDLE) {
		struct dlock_pg_stmt rollback = { .sql = "ROLLBACK" };
		char ignored_state[6];
		dlock_error ignored;
		PGresult *r = NULL;
		if (!dlock_pg_send_stmt(b, c, &rollback) ||
		    finish(b, c, deadline_ns, &r, ignored_state, &ignored) != DLOCK_OK)
			c->dead = 1;
		PQclear(r);
	}
	return st;
}

dlock_status dlock_pg_exec(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_stmt *s,
                           int64_t deadline_ns, PGresult **res, char sqlstate[6], dlock_error *err)
{
	*res = NULL;
	sqlstate[0] = '\0';
	if (c->dead)
		return dlock_error_set(err, DLOCK_ECONNECT, "%s: connection lost earlier", b->masked);
	if (b->prepare[DLOCK_PG_SET_PLAIN] && s->prepared) {
		dlock_status st = prepare(b, c, s, sqlstate, err);
		if (st != DLOCK_OK)
			return st;
	}
	if (s->begin)
		return exec_after_begin(b, c, s, deadline_ns, res, sqlstate, err);
	if (s->unsynced)
		return exec_unsynced(b, c, s, deadline_ns, res, sqlstate, err);
	if (!dlock_pg_send_stmt(b, c, s))
		return dlock_pg_lost(b, c, err);
	return finish(b, c, deadline_ns, res, sqlstate, err);
}

dlock_status dlock_pg_run(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_stmt *s,
                          char sqlstate[6], dlock_error *err)
{
	PGresult *res;
	dlock_status st = dlock_pg_exec(b, c, s, dlock_pg_io_deadline(b), &res, sqlstate, err);
	PQclear(res);
	return st;
}
