/*
 * mode=advisory: semaphores of N permits on session advisory locks in the
 * two-int key space (pg_advisory_lock(int4, int4), objsubid 2 in pg_locks:
 * never the bigint keys of mutexes).  The keys of a name (pg_hash.c):
 *
 *   slot s      (hi, base + s), s < N: exclusive, held by the permit of slot s
 *   marker N    (hi, base + 1023 + N): shared, by every holder and waiter of N
 *   ANY         (hi, base + 2048): shared, by every holder and waiter
 *   the mutex's bigint key K: shared, by every holder and waiter, so that a
 *               mutex or a writer of the name (K exclusive) and a semaphore
 *               exclude each other on the server itself
 *
 * Acquisition (ENTER, one statement whose CASE runs in order): ANY and
 * marker N shared, then K shared with a short lock_timeout (a mutex or a
 * writer holds or waits for K: SQLSTATE 55P03, and GATE_FAIL then drops
 * the two markers and looks at what holds K), then the check — own holds
 * first, so of two acquirers that race at least one sees the other:
 *
 *   - K tried exclusive and at once unlocked again: when that succeeds no
 *     other session holds or waits for K, so there is nobody to disagree
 *     with (no pg_locks, the common case of a name used by one client);
 *   - otherwise pg_locks: a marker of another N held by another session is
 *     DLOCK_EKIND naming both numbers; a session that holds K but not ANY
 *     (a reader of a read-write lock, or a mutex) is DLOCK_EKIND too.
 *
 * then the slots, tried in order in one statement (generate_series and
 * LIMIT 1: the first free one wins, no round trip per slot), skipping
 * those this session holds (none in practice: a semaphore's acquisition
 * runs on a session that holds nothing, an idle or a new one, so a session
 * never holds two permits of one name and PostgreSQL's per-session
 * reentrancy never grants one twice); then the session's lease
 * (idle_session_timeout) and the token nextval('dlock_fence'), taken while
 * the slot is held (STRICT, and so increasing per slot too).
 *
 * No free slot: a try-once acquisition leaves (the statement unlocks the
 * markers itself); a waiting one keeps them, so its N counts while it
 * waits, LISTENs on the name's channel ("dlock_sem_" and the hex of hi and
 * base: never the name) and then tries only the slots (RETRY) each time a
 * release's pg_notify wakes it, or after a bounded poll (POLL_MS, at most a
 * third of the lease, which also keeps the waiting session's idle timer
 * from ending it).  The poll is what frees a waiter when a holder's session
 * ends without a release (nothing notifies then).  A waiter whose ENTER
 * found K taken by another kind runs ENTER again, after 5 ms doubling up to
 * POLL_MS.  Order: UNORDERED.  The statements are prepared once per
 * session (pg_sem_sql.h, with the mode's sets); advisory mode never runs
 * behind a pooler (pg.c refuses one), so LISTEN always has its session.
 *
 * Release: the slot, the markers and K unlocked, and pg_notify, in one
 * statement.  Renewal and loss are the mutex's (pg_advisory.c): the
 * session's heartbeat, and every lock of a session that fails reported lost.
 *
 * Readers of a read-write lock check the other way (pg_advisory.c): after
 * K shared, ANY tried exclusive for the statement, and on failure pg_locks
 * asked whether a session holds ANY shared.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg_backend.h"
#include "pg_sem_sql.h"

#define POLL_MS 500       /* longest sleep of a waiter between two tries without a notification */
#define POLL_MIN_MS 10
#define GATE_BACKOFF_MS 5 /* first sleep when K is taken by another kind (grows to POLL_MS) */
#define CODE_BUSY (-1)
#define CODE_WAITING (-2)
#define CODE_OTHER_KIND (-3)
#define CODE_FULL (-4) /* no free slot, and the attempt left (try once) */
#define CODE_OTHER_N (-10000) /* minus the other N */

/* A statement: its text, and its name where the session prepares them (pg_exec.c). */
struct sql {
	const char *text, *name;
	int token;
};
static const struct sql sql_enter = { ENTER("0"), "dlock_sem_enter", 0 };
static const struct sql sql_enter_token = { ENTER(SEM_SEQ), "dlock_sem_enter_token", 1 };
static const struct sql sql_retry = { RETRY("0"), "dlock_sem_retry", 0 };
static const struct sql sql_retry_token = { RETRY(SEM_SEQ), "dlock_sem_retry_token", 1 };
static const struct sql sql_gate_fail = { GATE_FAIL, "dlock_sem_gate", 0 };
static const struct sql sql_give_up = { GIVE_UP, "dlock_sem_give_up", 0 };
static const struct sql sql_release = { RELEASE, "dlock_sem_release", 0 };
static const struct sql sql_check = { CHECK, NULL, 0 };

/* int8, int4, int4, int4, text, bool, int4[], and the release's: int4 slot, text, text. */
static const Oid types_enter[8] = { 20, 23, 23, 23, 25, 16, 1007, 25 };
static const Oid types_release[8] = { 20, 23, 23, 23, 23, 25, 25, 25 };

/* The statement's values for `lk` on `c` (c->mu held). */
struct args {
	char key[24], hi[16], base[16], n[16], lease[24], slot[16], channel[40], held[96];
};

static void args_fill(const struct dlock_pg_conn *c, const struct dlock_pg_lock *lk, struct args *a)
{
	snprintf(a->key, sizeof a->key, "%lld", (long long)lk->key);
	snprintf(a->hi, sizeof a->hi, "%ld", (long)lk->sem_hi);
	snprintf(a->base, sizeof a->base, "%ld", (long)lk->sem_base);
	snprintf(a->n, sizeof a->n, "%lu", (unsigned long)lk->permits);
	snprintf(a->slot, sizeof a->slot, "%lu", (unsigned long)lk->slot);
	dlock_pg_ms_text(lk->lease_ms, a->lease);
	snprintf(a->channel, sizeof a->channel, "dlock_sem_%08lx_%08lx", (unsigned long)lk->sem_hi,
	         (unsigned long)lk->sem_base);
	/* Slots of this name that the session holds (pool->mu or c->mu guards the list). */
	size_t o = (size_t)snprintf(a->held, sizeof a->held, "{");
	for (const struct dlock_pg_lock *h = c->locks; h; h = h->next_on_conn)
		if (h->permits && h->sem_hi == lk->sem_hi && h->sem_base == lk->sem_base && o + 16 < sizeof a->held)
			o += (size_t)snprintf(a->held + o, sizeof a->held - o, "%s%lu", o > 1 ? "," : "",
			                      (unsigned long)h->slot);
	snprintf(a->held + o, sizeof a->held - o, "}");
}

static dlock_status query(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct sql *sql,
                          const Oid *types, const struct args *a, int keep, PGresult **res, char sqlstate[6],
                          dlock_error *err)
{
	int release = types == types_release;
	struct dlock_pg_stmt s = { .sql = sql->text, .prepared = sql->name, .token = sql->token, .types = types, .n = 8,
		                   .values = { a->key, a->hi, a->base, a->n } };
	for (int i = 0; i < 8; i++)
		s.lengths[i] = -1;
	if (release) {
		s.values[4] = a->slot;
		s.values[5] = c->nlocks == 0 ? NULL : a->lease; /* the last lock gone: keep the timeout */
		s.values[6] = a->channel;
	} else {
		s.values[4] = a->lease;
		s.values[5] = keep ? "t" : "f";
		s.values[6] = a->held;
	}
	return dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), res, sqlstate, err);
}

/* See pg_advisory.c: when the server's idle timer for the new permit started, at the latest. */
static int64_t acquired_at(int64_t sent, const PGresult *res)
{
	int64_t now = dlock_monotonic_ns();
	long long us = 0;
	if (!PQgetisnull(res, 0, 1))
		sscanf(PQgetvalue(res, 0, 1), "%lld", &us);
	int64_t at = sent + (us > 0 ? us * 1000 : 0);
	return at < now ? at : now;
}

/*
 * One ENTER (or RETRY, once `entered`) on `c` (c->mu held).  DLOCK_OK with
 * *code: a slot (>= 0; *out filled), or one of the CODE_ values; else a
 * failure after which the session may hold part of this attempt (the
 * caller ends it).
 */
static dlock_status try_slots(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                              int entered, int keep, int fencing, dlock_acquired *out, long long *code,
                              dlock_error *err)
{
	struct args a;
	char sqlstate[6];
	PGresult *res = NULL;
	args_fill(c, lk, &a);
	const struct sql *sql = entered ? (fencing ? &sql_retry_token : &sql_retry)
	                                : (fencing ? &sql_enter_token : &sql_enter);
	int64_t sent = dlock_monotonic_ns();
	dlock_status st = query(b, c, sql, types_enter, &a, keep, &res, sqlstate, err);
	if (st == DLOCK_EBUSY && strcmp(sqlstate, "55P03") == 0 && !entered) {
		/* K is held or awaited in exclusive mode: a mutex, a writer (or one waits behind readers). */
		st = query(b, c, &sql_gate_fail, types_enter, &a, 0, &res, sqlstate, err);
		*code = st == DLOCK_OK ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
		PQclear(res);
		return st;
	}
	if (st != DLOCK_OK)
		return st;
	c->idle_set_ms = lk->lease_ms;
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
		c->dead = 1; /* unsure what the session holds: end it */
		st = dlock_error_set(err, DLOCK_ESERVER, "%s: the semaphore statement returned %s", b->masked,
		                     PQgetisnull(res, 0, 0) ? "NULL" : PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	return st;
}

static dlock_status simple(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *sql, dlock_error *err)
{
	struct dlock_pg_stmt s = { .sql = sql };
	char sqlstate[6];
	return dlock_pg_run(b, c, &s, sqlstate, err);
}

static int drain_notifies(PGconn *pg)
{
	int any = 0;
	for (PGnotify *n; (n = PQnotifies(pg)) != NULL; any = 1)
		PQfreemem(n);
	return any;
}

/*
 * Sleep until a notification, `ms`, the wait's deadline or its
 * cancellation (c->mu held).  DLOCK_OK: try again; DLOCK_ETIMEDOUT,
 * DLOCK_ECANCELED, DLOCK_ECONNECT (c->dead).
 */
dlock_status dlock_pg_sem_sleep(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_wait *w, int64_t ms,
                                dlock_error *err)
{
	int64_t now = dlock_monotonic_ns(), deadline = dlock_wait_deadline_ns(w);
	if (now >= deadline)
		return DLOCK_ETIMEDOUT;
	if (drain_notifies(c->pg))
		return DLOCK_OK;
	int64_t until = now + ms * 1000000LL;
	if (until > deadline)
		until = deadline;
	struct pollfd pfd[2] = { { .fd = PQsocket(c->pg), .events = POLLIN }, { .fd = c->wake_fd, .events = POLLIN } };
	poll(pfd, 2, (int)((until - now) / 1000000LL) + 1);
	uint64_t drain;
	if (pfd[1].revents & POLLIN)
		while (read(c->wake_fd, &drain, sizeof drain) > 0)
			;
	if (atomic_load(&c->interrupted))
		return dlock_error_set(err, DLOCK_ECANCELED, "acquire cancelled");
	if (pfd[0].revents && (!PQconsumeInput(c->pg) || PQstatus(c->pg) != CONNECTION_OK)) {
		char text[384];
		dlock_pg_one_line(PQerrorMessage(c->pg), text, sizeof text);
		c->dead = 1;
		return dlock_error_set(err, DLOCK_ECONNECT, "%s: connection lost: %s", b->masked, text);
	}
	drain_notifies(c->pg);
	return DLOCK_OK;
}

static int64_t poll_ms(const struct dlock_pg_lock *lk)
{
	int64_t ms = lk->lease_ms / 3;
	return ms > POLL_MS ? POLL_MS : ms < POLL_MIN_MS ? POLL_MIN_MS : ms;
}

static dlock_status refused(struct dlock_pg_backend *b, const struct dlock_pg_lock *lk, long long code,
                            dlock_error *err)
{
	if (code == CODE_OTHER_KIND)
		return dlock_error_set(err, DLOCK_EKIND,
		                       "%s: the name is in use as a mutex or a read-write lock, not a semaphore",
		                       b->masked);
	return dlock_error_set(err, DLOCK_EKIND, "%s: the name is in use as a semaphore of %lld permits, not %lu",
	                       b->masked, CODE_OTHER_N - code, (unsigned long)lk->permits);
}

/*
 * Try, and while `w` says wait, listen and try again on each notification
 * or poll (c->mu held).  *code >= 0 when a slot was taken; on failure
 * nothing of the attempt stays unless c->dead (the caller ends the session).
 */
static dlock_status run(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                        dlock_wait *w, int fencing, dlock_acquired *out, long long *code, dlock_error *err)
{
	int entered = 0, listening = 0;
	int64_t backoff = GATE_BACKOFF_MS;
	char sql[64];
	dlock_status st;
	*code = CODE_BUSY;
	for (;;) {
		st = try_slots(b, c, lk, entered, w != NULL, fencing, out, code, err);
		if (st != DLOCK_OK || *code >= 0)
			break;
		if (*code == CODE_FULL) {
			st = dlock_error_set(err, DLOCK_EBUSY, "all %lu permits are held", (unsigned long)lk->permits);
			break;
		}
		if (*code != CODE_BUSY && *code != CODE_WAITING) {
			entered = 0; /* the statement left */
			st = refused(b, lk, *code, err);
			break;
		}
		entered = *code == CODE_WAITING;
		if (!w) {
			st = dlock_error_set(err, DLOCK_EBUSY, "the name is held or awaited as a mutex or a writer");
			break;
		}
		if (!listening) {
			/* Listen, then try once more at once: a release before LISTEN sent no wake-up we could see. */
			snprintf(sql, sizeof sql, "LISTEN dlock_sem_%08lx_%08lx", (unsigned long)lk->sem_hi,
			         (unsigned long)lk->sem_base);
			st = simple(b, c, sql, err);
			if (st != DLOCK_OK)
				break;
			listening = 1;
			continue;
		}
		st = dlock_pg_sem_sleep(b, c, w, entered ? poll_ms(lk) : backoff, err);
		backoff = entered ? GATE_BACKOFF_MS : backoff * 2 > POLL_MS ? POLL_MS : backoff * 2;
		if (st == DLOCK_ETIMEDOUT)
			st = dlock_error_set(err, DLOCK_EBUSY, "all %lu permits stayed held", (unsigned long)lk->permits);
		if (st != DLOCK_OK)
			break;
	}
	dlock_error ignored;
	struct args a;
	PGresult *res = NULL;
	char sqlstate[6];
	if (!c->dead && entered && *code < 0) {
		args_fill(c, lk, &a);
		if (query(b, c, &sql_give_up, types_enter, &a, 0, &res, sqlstate, &ignored) != DLOCK_OK)
			c->dead = 1;
		PQclear(res);
	}
	if (!c->dead && listening && simple(b, c, "UNLISTEN *", &ignored) != DLOCK_OK)
		c->dead = 1;
	if (c->dead && st == DLOCK_OK) /* the session, and with it the slot, is gone */
		st = dlock_error_set(err, DLOCK_ECONNECT, "%s: connection lost after the permit was granted", b->masked);
	if (listening)
		drain_notifies(c->pg);
	return st;
}

/* One acquisition on `c`, a session that holds nothing (c->mu held): a failure half way leaves c->dead. */
static dlock_status acquire_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	struct dlock_pg_attempt *a = arg;
	long long code = CODE_BUSY;
	dlock_status st = a->fencing ? dlock_pg_fence(b, c, err) : DLOCK_OK;
	if (st == DLOCK_OK)
		st = dlock_pg_names_write(b, c, a->lk, err); /* once per name (pg_names.c) */
	if (st == DLOCK_OK) {
		if (a->w)
			dlock_pg_interrupt_arm(c, a->w);
		st = run(b, c, a->lk, a->w, a->fencing, a->out, &code, err);
		if (a->w && dlock_pg_interrupt_disarm(c, a->w)) {
			c->dead = 1; /* a cancel request may still be on its way: never reuse */
			st = dlock_error_set(err, DLOCK_ECANCELED, "acquire cancelled");
		}
		if (st != DLOCK_OK && st != DLOCK_EBUSY && st != DLOCK_EKIND)
			c->dead = 1; /* it may hold part of the attempt */
	}
	if (st == DLOCK_OK) /* then never c->dead (run() says ECONNECT) */
		dlock_pg_pool_hold(b, c, a->lk);
	return st;
}

dlock_status dlock_pg_sem_acquire(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                  dlock_wait *w, dlock_acquired *out, dlock_error *err)
{
	return dlock_pg_sem_acquire_as(b, lk, lease_ms, w, !dlock_wait_try_once(w) && dlock_wait_remaining_ms(w) != 0,
	                               out, err);
}

dlock_status dlock_pg_sem_acquire_as(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                     dlock_wait *w, int waits, dlock_acquired *out, dlock_error *err)
{
	dlock_status st = dlock_pg_lease_ok(lease_ms, err);
	if (st != DLOCK_OK)
		return st;
	lk->lease_ms = lease_ms;
	lk->shared = 0;
	/* On a session that holds nothing (an idle one, or a new one): a failure half way ends it. */
	struct dlock_pg_attempt a = { .lk = lk, .w = waits ? w : NULL, .fencing = dlock_wait_wants_token(w), .out = out };
	return dlock_pg_pool_run(b, acquire_on, &a, err);
}

dlock_status dlock_pg_sem_release(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err)
{
	struct dlock_pg_conn *c = lk->conn;
	struct args a;
	char sqlstate[6];
	PGresult *res = NULL;
	pthread_mutex_lock(&c->mu);
	dlock_pg_pool_unhold(b, lk);
	int64_t idle_ms = dlock_pg_conn_lease(c, 0);
	args_fill(c, lk, &a);
	if (idle_ms > 0)
		dlock_pg_ms_text(idle_ms, a.lease);
	dlock_status st = query(b, c, &sql_release, types_release, &a, 0, &res, sqlstate, err);
	if (st == DLOCK_OK && idle_ms > 0)
		c->idle_set_ms = idle_ms;
	if (st == DLOCK_OK && strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "the server says this session does not hold the permit");
	else if (c->dead)
		st = DLOCK_ENOTHELD;
	if (c->dead || (st != DLOCK_OK && st != DLOCK_ENOTHELD))
		dlock_pg_pool_broken(b, c, err->msg); /* unsure what is unlocked: end the session */
	PQclear(res);
	pthread_mutex_unlock(&c->mu);
	dlock_pg_pool_put(b, c);
	return st;
}

dlock_status dlock_pg_sem_check(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err)
{
	struct dlock_pg_conn *c = lk->conn;
	struct args a;
	char sqlstate[6];
	PGresult *res = NULL;
	int isnull;
	pthread_mutex_lock(&c->mu);
	args_fill(c, lk, &a);
	dlock_status st = query(b, c, &sql_check, types_release, &a, 0, &res, sqlstate, err);
	if (st == DLOCK_OK && dlock_pg_int_value(res, &isnull) != 1)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "the server shows no such permit for this session");
	else if (c->dead) {
		dlock_pg_pool_broken(b, c, err->msg);
		st = DLOCK_ENOTHELD;
	}
	PQclear(res);
	pthread_mutex_unlock(&c->mu);
	return st;
}
