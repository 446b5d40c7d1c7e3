/*
 * mode=advisory (the default): session-level advisory locks on the 64-bit
 * key of pg_hash.c.  Each acquisition is one statement whose CASE
 * evaluates its steps in order (PostgreSQL documents that CASE evaluates
 * only what it needs, in order):
 *
 *   try once:  pg_try_advisory_lock(key), then the session's lease
 *              (idle_session_timeout), then the fencing token
 *              nextval('dlock_fence') — taken while the lock is held — or,
 *              in the statement for a caller that wants no token, 0.
 *   waiting:   lock_timeout for this statement only (set_config(..., true)
 *              lasts until the end of the statement's implicit
 *              transaction), pg_advisory_lock(key) — the server queues the
 *              waiter, no polling — then lock_timeout back to 0 so that
 *              nextval never times out, the lease, the token.  The wait
 *              forever has lock_timeout 0 and is cancelled with PQcancel.
 *
 * Release is pg_advisory_unlock(key) (false: not held); the heartbeat sets
 * the idle timeout again.
 *
 * The statements are prepared once per session (no parse and plan per
 * call): those without a token when the session first runs one, the two
 * with a token only when one is first wanted (pg_backend.h), so that with
 * fencing off neither the sequence nor a privilege on it is needed.  With
 * fencing_durability=commit the statements with a token are the same but
 * for the token itself, DLOCK_PG_DURABLE (pg_backend.h: the answer only
 * once the commit is durable), under the same names.
 * Before the first token of a client, pg_setup.c checks the sequence.  The
 * idle timeout is sent only when the session's must
 * change (NULL otherwise): while locks remain, to the longest of their
 * leases; once the last is released, never — the idle session keeps it,
 * and pg_pool.c retires it before the server would end it.
 *
 * A session advisory lock survives the failure of the statement (and the
 * ROLLBACK of a transaction) that took it.  So when an acquisition fails
 * after it may have locked — any error but "lock not available" — the key
 * is unlocked again, or the connection closed, which ends the session.
 * Applications never share dlock's connections, so no user ROLLBACK can
 * touch these locks either.
 *
 * Read-write locks: a reader takes pg_advisory_lock_shared(key) (or the
 * try form) and releases with pg_advisory_unlock_shared(key); a writer, or
 * a mutex, takes the exclusive lock of the same key, so every kind of a
 * name meets on one key and mixing kinds is safe (KIND_CHECK 0).  A writer
 * also takes the name's WRITER key (DLOCK_PG_RW_WRITER) shared in the same
 * statement and lets it go with the key: the exclusive key alone cannot
 * tell inspection (pg_inspect.c) a writer from a mutex.  Shared
 * and exclusive advisory locks of one key exclude each other, and
 * PostgreSQL's lock manager makes a request that conflicts with a waiting
 * one wait behind it (the wait queue's waitMask), the try form included:
 * a waiting writer holds back the readers that come after it, and waiters
 * are granted in queue order (WRITER_FIRST, fair).  That holds only
 * between sessions — a session that holds the key gets it again at once,
 * queue or not — hence the rule of pg_backend.h: no session ever takes a
 * key it holds.  Readers take no fencing token (read fencing NONE): the
 * token of a writer is nextval of one sequence for every name, and
 * PostgreSQL keeps nothing per advisory key that another session could
 * read, so a reader could learn the latest writer's token only if every
 * writer also wrote it to a table — a row write per acquisition in a mode
 * that otherwise writes nothing.
 *
 * Semaphores: pg_sem.c, which a semaphore's handle (lk->permits) is
 * handed to; a reader checks for them (SEM_USED).
 *
 * PgBouncer: session locks need one server session per client connection,
 * so advisory mode needs session pooling (or none); behind transaction
 * pooling use mode=row.
 */
#include <string.h>

#include "pg_backend.h"
#include "pg_loop.h"
#include "pg_sem_sql.h"

#define SEQ "'" DLOCK_PG_SEQUENCE "'"
/* Microseconds this statement took on the server (see acquired_at). */
#define ELAPSED ", (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::int8"
/* The session's idle timeout, unless $n is NULL (it is already right);
 * never true, so that the CASE goes on. */
#define SET_IDLE(n) "CASE WHEN $" n " IS NULL THEN false " \
	"ELSE set_config('idle_session_timeout', $" n ", false) IS NULL END"

/* The lock (`fn`: "" exclusive, "_shared" a reader), `mark` (a writer's, or ""), the lease, then: the
 * token (TOKEN set) or 0 (PLAIN set). */
#define TRY(fn, mark, tail) "SELECT CASE WHEN NOT pg_try_advisory_lock" fn "($1) THEN NULL " mark \
	"WHEN " SET_IDLE("2") " THEN NULL ELSE " tail " END" ELAPSED
#define WAIT(fn, mark, tail) "SELECT CASE " \
	"WHEN set_config('lock_timeout', $3, true) IS NULL THEN NULL " \
	"WHEN pg_advisory_lock" fn "($1) IS NULL THEN NULL " \
	"WHEN set_config('lock_timeout', '0', true) IS NULL THEN NULL " mark \
	"WHEN " SET_IDLE("2") " THEN NULL ELSE " tail " END" ELAPSED
/* A writer of a read-write lock, once it holds the key: the name's WRITER key ($h, $b + 2050,
 * DLOCK_PG_RW_WRITER) shared, which tells inspection that the key is held as a read-write lock, not a
 * mutex.  Only writers take it, all shared: it never waits. */
#define WRITER_MARK(h, b) "WHEN pg_advisory_lock_shared($" h "::int4, $" b "::int4 + 2050) IS NULL THEN NULL "
#define WRITER_UNMARK(h, b) "pg_advisory_unlock_shared($" h "::int4, $" b "::int4 + 2050)"

/* A reader, once it holds the key shared: whether a semaphore of the name holds or awaits it too
 * (pg_sem.c: each holds the name's ANY key shared; $h, $b its two-int key).  Tried exclusive for the
 * statement first; only when that fails (a semaphore, or another reader trying at once) pg_locks
 * says which.  Then the reader lets the key go again and answers -1. */
#define SEM_USED(h, b) "CASE WHEN pg_try_advisory_xact_lock($" h "::int4, $" b "::int4 + 2048) THEN false " \
	"ELSE EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 " \
	"AND pid <> pg_backend_pid() AND mode = 'ShareLock' AND classid::int8 = $" h " " \
	"AND objid::int8 = $" b "::int4 + 2048) END"
#define SEM_REFUSED "CASE WHEN pg_advisory_unlock_shared($1) THEN -1 END"
#define TRY_SHARED "SELECT CASE WHEN NOT pg_try_advisory_lock_shared($1) THEN NULL " \
	"WHEN " SEM_USED("3", "4") " THEN " SEM_REFUSED " " \
	"WHEN " SET_IDLE("2") " THEN NULL ELSE 0 END" ELAPSED
#define WAIT_SHARED "SELECT CASE " \
	"WHEN set_config('lock_timeout', $3, true) IS NULL THEN NULL " \
	"WHEN pg_advisory_lock_shared($1) IS NULL THEN NULL " \
	"WHEN set_config('lock_timeout', '0', true) IS NULL THEN NULL " \
	"WHEN " SEM_USED("4", "5") " THEN " SEM_REFUSED " " \
	"WHEN " SET_IDLE("2") " THEN NULL ELSE 0 END" ELAPSED

/* Prepared once per session (pg_exec.c); $1 key, $2 idle timeout or NULL, $3 wait; a reader's and a
 * writer's (_w) then the name's two-int key (hi, base).  Readers take no token, so their statements are
 * all in the PLAIN set. */
#define PREPARE_PLAIN "PREPARE dlock_try(int8, text) AS " TRY("", "", "0") ";" \
	"PREPARE dlock_wait(int8, text, text) AS " WAIT("", "", "0") ";" \
	"PREPARE dlock_unlock(int8, text) AS SELECT pg_advisory_unlock($1), " SET_IDLE("2") ";" \
	"PREPARE dlock_try_w(int8, text, int4, int4) AS " TRY("", WRITER_MARK("3", "4"), "0") ";" \
	"PREPARE dlock_wait_w(int8, text, text, int4, int4) AS " WAIT("", WRITER_MARK("4", "5"), "0") ";" \
	"PREPARE dlock_unlock_w(int8, text, int4, int4) AS SELECT pg_advisory_unlock($1), " SET_IDLE("2") ", " \
	WRITER_UNMARK("3", "4") ";" \
	"PREPARE dlock_try_shared(int8, text, int4, int4) AS " TRY_SHARED ";" \
	"PREPARE dlock_wait_shared(int8, text, text, int4, int4) AS " WAIT_SHARED ";" \
	"PREPARE dlock_unlock_shared(int8, text) AS SELECT pg_advisory_unlock_shared($1), " SET_IDLE("2") ";" \
	DLOCK_PG_SEM_PREPARE_PLAIN
/* The statements that take a token, `tok` the expression that takes it: the mutex's and the writer's. */
#define PREPARE_TOKEN_WITH(tok) "PREPARE dlock_try_token(int8, text) AS " TRY("", "", tok) ";" \
	"PREPARE dlock_wait_token(int8, text, text) AS " WAIT("", "", tok) ";" \
	"PREPARE dlock_try_token_w(int8, text, int4, int4) AS " TRY("", WRITER_MARK("3", "4"), tok) ";" \
	"PREPARE dlock_wait_token_w(int8, text, text, int4, int4) AS " WAIT("", WRITER_MARK("4", "5"), tok) ";"
#define PREPARE_TOKEN PREPARE_TOKEN_WITH("nextval(" SEQ ")") DLOCK_PG_SEM_PREPARE_TOKEN
/* fencing_durability=commit: the same names, each token committed durably (pg_backend.h). */
#define PREPARE_TOKEN_DURABLE \
	PREPARE_TOKEN_WITH(DLOCK_PG_DURABLE("nextval(" SEQ ")")) DLOCK_PG_SEM_PREPARE_TOKEN_DURABLE
/* The TOKEN set first: when it fails, nothing after it runs. */
static const char sql_prepare_plain[] = PREPARE_PLAIN;
static const char sql_prepare_token[] = PREPARE_TOKEN;
static const char sql_prepare_both[] = PREPARE_TOKEN PREPARE_PLAIN;
static const char sql_prepare_token_durable[] = PREPARE_TOKEN_DURABLE;
static const char sql_prepare_both_durable[] = PREPARE_TOKEN_DURABLE PREPARE_PLAIN;
static const char sql_undo[] = "SELECT pg_advisory_unlock($1::int8)";
static const char sql_undo_shared[] = "SELECT pg_advisory_unlock_shared($1::int8)";
static const char sql_undo_writer[] = "SELECT pg_advisory_unlock($1::int8), " WRITER_UNMARK("2", "3");
static const char sql_beat[] = "SELECT set_config('idle_session_timeout', $1, false)";
static const char sql_check[] = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                "AND pid = pg_backend_pid() AND granted AND objsubid = 1 AND mode = $2 "
                                "AND classid = (($1::int8 >> 32) & 4294967295)::oid "
                                "AND objid = ($1::int8 & 4294967295)::oid";

/*
 * When the server's idle timer for the new lock started, on our clock, at
 * the latest: the statement was sent at `sent`, and spent `elapsed_us` on
 * the server (its own clock) before the lock, the lease and the token were
 * in place.  Never later than when the answer arrived.
 */
static int64_t acquired_at(int64_t sent, const PGresult *res)
{
	int64_t now = dlock_monotonic_ns();
	int64_t us = PQgetisnull(res, 0, 1) ? 0 : dlock_pg_text_int(PQgetvalue(res, 0, 1));
	int64_t at = sent + (us > 0 ? us * 1000 : 0);
	return at < now ? at : now;
}

/* The idle timeout to send for `ms` (text in buf), or NULL: the session has it already. */
static const char *idle_text(const struct dlock_pg_conn *c, int64_t ms, char buf[24])
{
	if (ms == c->idle_set_ms)
		return NULL;
	dlock_pg_ms_text(ms, buf);
	return buf;
}

/* 1 when the current acquisition of `lk` is a read-write lock's writer's: it takes WRITER_MARK too. */
static int writer(const struct dlock_pg_lock *lk)
{
	return lk->rwlock && !lk->shared;
}

/* The name's two-int key as statement parameters: s->values[s->n], [s->n + 1] (hi, base) in `hi`, `base`. */
static void add_two_int_key(const struct dlock_pg_lock *lk, struct dlock_pg_stmt *s, char hi[24], char base[24])
{
	dlock_decimal(hi, lk->sem_hi);
	dlock_decimal(base, lk->sem_base);
	s->values[s->n] = hi;
	s->values[s->n + 1] = base;
	s->lengths[s->n] = s->lengths[s->n + 1] = -1;
	s->n += 2;
}

/* The lock's connection died: every lock on it is lost. */
static dlock_status conn_gone(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_error *err)
{
	dlock_pg_pool_broken(b, c, err->msg);
	return DLOCK_ENOTHELD;
}

void dlock_pg_adv_undo_stmt(const struct dlock_pg_lock *lk, struct dlock_pg_args *a, struct dlock_pg_stmt *s)
{
	dlock_decimal(a->key, lk->key);
	*s = (struct dlock_pg_stmt){ .sql = lk->shared ? sql_undo_shared : writer(lk) ? sql_undo_writer : sql_undo,
		                     .n = 1, .values = { a->key }, .lengths = { -1 } };
	if (writer(lk))
		add_two_int_key(lk, s, a->hi, a->base);
}

/* Unlock after a failed attempt that may have locked; else drop the session. */
static void undo(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_lock *lk)
{
	struct dlock_pg_args a;
	struct dlock_pg_stmt s;
	dlock_pg_adv_undo_stmt(lk, &a, &s);
	dlock_error ignored;
	char sqlstate[6];
	if (c->dead || c->nlocks == 0 || dlock_pg_run(b, c, &s, sqlstate, &ignored) != DLOCK_OK)
		c->dead = 1;
}

dlock_status dlock_pg_adv_settle(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                                 dlock_status st, const PGresult *res, int64_t sent, dlock_acquired *out,
                                 int64_t idle_ms, dlock_error *err)
{
	int isnull = 1;
	if (st == DLOCK_OK) {
		int64_t token = dlock_pg_int_value(res, &isnull);
		if (isnull)
			return dlock_error_set(err, DLOCK_EBUSY, "held by another session");
		if (token < 0) /* a reader beside a semaphore of the name: let go already */
			return dlock_error_set(err, DLOCK_EKIND, "%s: the name is in use as a semaphore, not a "
			                       "read-write lock", b->masked);
		*out = (dlock_acquired){ .token = (uint64_t)token, .sent_ns = acquired_at(sent, res) };
		lk->token = (uint64_t)token;
		lk->proclaimed = 0;
		c->idle_set_ms = idle_ms;
		dlock_pg_pool_hold(b, c, lk);
		return DLOCK_OK;
	}
	return st;
}

void dlock_pg_adv_attempt_stmt(const struct dlock_pg_conn *c, const struct dlock_pg_lock *lk, int fencing,
                               int64_t wait_ms, struct dlock_pg_args *a, struct dlock_pg_stmt *s)
{
	static const char *const try_stmt[2][2] = { { "dlock_try", "dlock_try_token" },
		                                    { "dlock_try_w", "dlock_try_token_w" } };
	static const char *const wait_stmt[2][2] = { { "dlock_wait", "dlock_wait_token" },
		                                     { "dlock_wait_w", "dlock_wait_token_w" } };
	dlock_decimal(a->key, lk->key);
	a->idle_ms = dlock_pg_conn_lease(c, lk->lease_ms);
	a->idle = idle_text(c, a->idle_ms, a->lease);
	*s = (struct dlock_pg_stmt){ .prepared = lk->shared ? "dlock_try_shared" : try_stmt[writer(lk)][fencing != 0],
		                     .token = fencing, .n = 2, .values = { a->key, a->idle }, .lengths = { -1, -1 } };
	if (wait_ms >= 0) {
		dlock_pg_ms_text(wait_ms, a->wait);
		s->prepared = lk->shared ? "dlock_wait_shared" : wait_stmt[writer(lk)][fencing != 0];
		s->n = 3;
		s->values[2] = a->wait;
		s->lengths[2] = -1;
	}
	if (lk->shared || writer(lk))
		add_two_int_key(lk, s, a->hi, a->base);
}

/*
 * One try or wait on `c` (c->mu held), run by dlock_pg_pool_use or _run,
 * which report `c` broken when this leaves c->dead: the sequence (when not
 * known to be usable yet), the name (pg_names.c), then the lock.
 */
static dlock_status attempt(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	struct dlock_pg_attempt *a = arg;
	struct dlock_pg_lock *lk = a->lk;
	dlock_wait *w = a->w;
	int fencing = a->fencing;
	char sqlstate[6];
	if (fencing) {
		dlock_status st = dlock_pg_fence(b, c, err);
		if (st != DLOCK_OK)
			return st;
	}
	dlock_status named = dlock_pg_names_write(b, c, lk, err); /* once per name; fails only with c->dead */
	if (named != DLOCK_OK)
		return named;
	struct dlock_pg_args args;
	struct dlock_pg_stmt s;
	int64_t left = w ? dlock_wait_remaining_ms(w) : -1;
	dlock_pg_adv_attempt_stmt(c, lk, fencing, w ? (left < 0 ? 0 : left) : -1, &args, &s);
	int64_t deadline = dlock_pg_io_deadline(b);
	if (w) {
		deadline = dlock_pg_wait_deadline(b, w);
		dlock_pg_interrupt_arm(c, w);
	}
	PGresult *res = NULL;
	int64_t sent = dlock_monotonic_ns();
	dlock_status st = dlock_pg_exec(b, c, &s, deadline, &res, sqlstate, err);
	if (w && dlock_pg_interrupt_disarm(c, w)) {
		c->dead = 1; /* a cancel request may still be on its way: never reuse */
		st = dlock_error_set(err, DLOCK_ECANCELED, "acquire cancelled");
	}
	if (st != DLOCK_OK && fencing) /* before settle_attempt, which may end the session */
		st = dlock_pg_fence_failed(b, c, st, sqlstate, err);
	st = dlock_pg_adv_settle(b, c, lk, st, res, sent, a->out, args.idle_ms, err);
	if (st != DLOCK_OK && st != DLOCK_EBUSY && !c->dead)
		undo(b, c, lk);
	PQclear(res);
	return st;
}

/* An acquisition of a mutex or read-write lock: try once, or wait (`waits`) within w's deadline. */
static dlock_status adv_acquire_as(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                   dlock_wait *w, int waits, dlock_acquired *out, dlock_error *err)
{
	/* Readers take no token (read fencing NONE: the core asks none of them). */
	lk->shared = dlock_wait_mode(w) == DLOCK_MODE_SHARED;
	int fencing = dlock_wait_wants_token(w) && !lk->shared;
	dlock_status st = dlock_pg_lease_ok(lease_ms, err);
	if (st != DLOCK_OK)
		return st;
	lk->lease_ms = lease_ms;
	/* The first token of a client may have to set the sequence up (a
	 * transaction, perhaps waiting for another client's setup): never on a
	 * session that other locks hold, whose heartbeats would wait for it. */
	int setup = fencing && !atomic_load(&b->fence_ready);
	struct dlock_pg_conn *c = setup ? NULL : dlock_pg_pool_share(b, lease_ms, lk->key);
	struct dlock_pg_attempt a = { .lk = lk, .w = NULL, .fencing = fencing, .out = out };
	if (c) {
		st = dlock_pg_pool_use(b, c, attempt, &a, err);
		if (st == DLOCK_OK || (st == DLOCK_EBUSY && !waits))
			return st;
		if (st != DLOCK_EBUSY && st != DLOCK_ECONNECT)
			return st;
	}
	/* On a connection of its own: an idle one, or a new one when that is dead. */
	a.w = waits ? w : NULL;
	return dlock_pg_pool_run(b, attempt, &a, err);
}

static dlock_status adv_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                                dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	if (lk->permits)
		return dlock_pg_sem_acquire(b, lk, lease_ms, w, out, err);
	return adv_acquire_as(b, lk, lease_ms, w, !dlock_wait_try_once(w) && dlock_wait_remaining_ms(w) != 0, out, err);
}

dlock_status dlock_pg_adv_try_once(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                   dlock_wait *w, dlock_acquired *out, dlock_error *err)
{
	return adv_acquire_as(b, lk, lease_ms, w, 0, out, err);
}

void dlock_pg_adv_release_stmt(const struct dlock_pg_conn *c, struct dlock_pg_lock *lk, struct dlock_pg_args *a,
                               struct dlock_pg_stmt *s)
{
	dlock_decimal(a->key, lk->key);
	/* The last lock gone: the session keeps its timeout (pg_pool.c retires it). */
	a->idle_ms = dlock_pg_conn_lease(c, 0);
	a->idle = a->idle_ms == 0 ? NULL : idle_text(c, a->idle_ms, a->lease);
	*s = (struct dlock_pg_stmt){ .prepared = lk->shared ? "dlock_unlock_shared" : writer(lk) ? "dlock_unlock_w"
		                                                                                : "dlock_unlock",
		                     .n = 2, .values = { a->key, a->idle }, .lengths = { -1, -1 } };
	if (writer(lk))
		add_two_int_key(lk, s, a->hi, a->base);
	if (lk->proclaimed) { /* a leader resigns: its row goes and its observers are told (pg_elect.c) */
		dlock_pg_leader_channel(lk->key, a->channel);
		*s = (struct dlock_pg_stmt){ .sql = dlock_pg_sql_resign, .n = 3, .values = { a->key, a->idle, a->channel },
			                     .lengths = { -1, -1, -1 } };
		lk->proclaimed = 0;
	}
}

dlock_status dlock_pg_adv_release_result(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                         const PGresult *res, const struct dlock_pg_args *a, dlock_error *err)
{
	if (st == DLOCK_OK && a->idle)
		c->idle_set_ms = a->idle_ms;
	if (st == DLOCK_OK && strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "the server says this session does not hold the lock");
	else if (c->dead)
		st = conn_gone(b, c, err);
	else if (st != DLOCK_OK)
		dlock_pg_pool_broken(b, c, err->msg); /* unsure whether it is unlocked: end the session */
	return st;
}

/* The release of `arg`, a lock held on `c` (c->mu held, or the loop kept out: pg_loop.c). */
static dlock_status release_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	struct dlock_pg_lock *lk = arg;
	char sqlstate[6];
	PGresult *res = NULL;
	struct dlock_pg_args a;
	struct dlock_pg_stmt s;
	dlock_pg_pool_unhold(b, lk);
	dlock_pg_adv_release_stmt(c, lk, &a, &s);
	dlock_status st = dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), &res, sqlstate, err);
	st = dlock_pg_adv_release_result(b, c, st, res, &a, err);
	PQclear(res);
	return st;
}

static dlock_status adv_release(void *backend, void *lkp, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	if (lk->permits)
		return dlock_pg_sem_release(b, lk, err);
	struct dlock_pg_conn *c = lk->conn;
	if (c->on_loop)
		return dlock_pg_loop_blocking(b, lk, release_on, lk, err);
	pthread_mutex_lock(&c->mu);
	dlock_status st = release_on(b, c, lk, err);
	pthread_mutex_unlock(&c->mu);
	dlock_pg_pool_put(b, c);
	return st;
}

void dlock_pg_adv_beat_stmt(const struct dlock_pg_conn *c, struct dlock_pg_args *a, struct dlock_pg_stmt *s)
{
	a->idle_ms = dlock_pg_conn_lease(c, 0);
	dlock_pg_ms_text(a->idle_ms, a->lease);
	*s = (struct dlock_pg_stmt){ .sql = sql_beat, .n = 1, .values = { a->lease }, .lengths = { -1 } };
}

dlock_status dlock_pg_adv_beat_result(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                      const struct dlock_pg_args *a, dlock_error *err)
{
	if (st == DLOCK_OK)
		c->idle_set_ms = a->idle_ms;
	if (c->dead)
		st = conn_gone(b, c, err);
	return st;
}

/* The session's heartbeat: its idle timeout set to the longest lease of its locks; c->mu held. */
static dlock_status beat_locked(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_error *err)
{
	char sqlstate[6];
	struct dlock_pg_args a;
	struct dlock_pg_stmt s;
	dlock_pg_adv_beat_stmt(c, &a, &s);
	dlock_status st = dlock_pg_run(b, c, &s, sqlstate, err);
	return dlock_pg_adv_beat_result(b, c, st, &a, err);
}

static dlock_status beat_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	(void)arg;
	return beat_locked(b, c, err);
}

static dlock_status adv_extend(void *backend, void *lkp, int64_t lease_ms, dlock_error *err)
{
	struct dlock_pg_lock *lk = lkp;
	struct dlock_pg_conn *c = lk->conn;
	if (dlock_pg_lease_ok(lease_ms, err) != DLOCK_OK)
		return DLOCK_EINVAL;
	lk->lease_ms = lease_ms;
	if (c->on_loop)
		return dlock_pg_loop_blocking(backend, lk, beat_on, NULL, err);
	pthread_mutex_lock(&c->mu);
	dlock_status st = beat_locked(backend, c, err);
	pthread_mutex_unlock(&c->mu);
	return st;
}

/*
 * Renewals of many locks: the lease is the session's idle timeout, so one
 * heartbeat per session renews every lock of the batch that it holds (the
 * timeout set covers the longest lease among them).  A session holds many
 * of a client's locks (pg_pool.c pins it), so a batch is a few statements,
 * not one per lock.
 */
static void adv_extend_many(void *backend, void *const *lks, const int64_t *lease_ms, size_t n, dlock_status *out,
                            dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	unsigned char done[DLOCK_RENEW_BATCH_MAX] = { 0 };
	for (size_t i = 0; i < n && i < DLOCK_RENEW_BATCH_MAX; i++) {
		if (done[i])
			continue;
		struct dlock_pg_conn *c = ((struct dlock_pg_lock *)lks[i])->conn;
		pthread_mutex_lock(&c->mu);
		for (size_t j = i; j < n && j < DLOCK_RENEW_BATCH_MAX; j++) {
			struct dlock_pg_lock *lk = lks[j];
			if (done[j] || lk->conn != c)
				continue;
			out[j] = dlock_pg_lease_ok(lease_ms[j], err);
			if (out[j] == DLOCK_OK)
				lk->lease_ms = lease_ms[j];
		}
		dlock_status st = beat_locked(b, c, err);
		for (size_t j = i; j < n && j < DLOCK_RENEW_BATCH_MAX; j++) {
			if (done[j] || ((struct dlock_pg_lock *)lks[j])->conn != c)
				continue;
			done[j] = 1;
			if (out[j] == DLOCK_OK)
				out[j] = st;
		}
		pthread_mutex_unlock(&c->mu);
	}
}

void dlock_pg_adv_check_stmt(const struct dlock_pg_lock *lk, struct dlock_pg_args *a, struct dlock_pg_stmt *s)
{
	dlock_decimal(a->key, lk->key);
	*s = (struct dlock_pg_stmt){ .sql = sql_check, .n = 2,
		                     .values = { a->key, lk->shared ? "ShareLock" : "ExclusiveLock" },
		                     .lengths = { -1, -1 } };
}

dlock_status dlock_pg_adv_check_result(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                       const PGresult *res, dlock_error *err)
{
	int isnull;
	if (st == DLOCK_OK && dlock_pg_int_value(res, &isnull) != 1)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "the server shows no such lock for this session");
	else if (c->dead)
		st = conn_gone(b, c, err);
	return st;
}

static dlock_status check_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	struct dlock_pg_lock *lk = arg;
	char sqlstate[6];
	PGresult *res = NULL;
	struct dlock_pg_args a;
	struct dlock_pg_stmt s;
	dlock_pg_adv_check_stmt(lk, &a, &s);
	dlock_status st = dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), &res, sqlstate, err);
	st = dlock_pg_adv_check_result(b, c, st, res, err);
	PQclear(res);
	return st;
}

static dlock_status adv_check(void *backend, void *lkp, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	if (lk->permits)
		return dlock_pg_sem_check(b, lk, err);
	struct dlock_pg_conn *c = lk->conn;
	if (c->on_loop)
		return dlock_pg_loop_blocking(b, lk, check_on, lk, err);
	pthread_mutex_lock(&c->mu);
	dlock_status st = check_on(b, c, lk, err);
	pthread_mutex_unlock(&c->mu);
	return st;
}

const struct dlock_pg_mode dlock_pg_advisory_mode = {
	.name = "advisory",
	.prepare = { NULL, sql_prepare_plain, sql_prepare_token, sql_prepare_both },
	.prepare_durable = { NULL, sql_prepare_plain, sql_prepare_token_durable, sql_prepare_both_durable },
	.acquire = adv_acquire,
	.release = adv_release,
	.extend = adv_extend,
	.check = adv_check,
	.extend_many = adv_extend_many,
};
