/*
 * A loop client's lock calls on its loop (driver contract 9), mode=advisory:
 * the non-blocking forms of try_acquire, release, extend and check for
 * mutexes and read-write locks, which the core calls on the application's
 * loop thread.  Each sends the statement its blocking form sends
 * (pg_advisory.c builds it and reads its answer for both) on a
 * connection of the loop (pg_nbconn.c), and ends with dlock_call_done()
 * when the answer comes, or when its connection fails (DLOCK_ECONNECT,
 * its locks reported lost once, by dlock_pg_pool_broken).
 *
 *   try_acquire   the try-once statement (pg_try_advisory_lock...), after
 *                 the name's row (pg_names.c, once per name, folded into
 *                 one statement), on a connection chosen as pg_pool.c
 *                 chooses: an idle one, else a pinned one of the same lease
 *                 that holds fewer than DLOCK_PG_SESSION_LOCKS_MAX locks,
 *                 not this key, and has no attempt in progress, else a new
 *                 one; a reused connection that failed is worth one more
 *                 try on a new one.  A failure after which the session may
 *                 hold the key is undone (dlock_pg_adv_undo_stmt) or, on a
 *                 session that holds nothing else, the connection closed.
 *                 The core polls a busy lock with its backoff (no wait on
 *                 the server yet).
 *   release, extend (the heartbeat), check: on the lock's connection.
 *
 * The pool of the loop: every connection of the loop is on one list;
 * those that hold nothing and run nothing are idle (up to
 * DLOCK_PG_IDLE_MAX kept, each retired at half its session's idle
 * timeout, as pg_pool.c does); a dead one is freed once its last lock is
 * released.
 *
 * Not on the loop (dlock_pg_loop_fits() answers 0 and the client runs on
 * the core's workers): mode=row, fencing_durability=commit, several hosts
 * (the order of a host list, target_session_attrs).
 *
 * Not yet non-blocking, on a client that is on the loop (LOOP_IO is per
 * client): a semaphore's attempt (several statements, pg_sem.c) runs its
 * blocking try-once form on a worker of the client (dlock_call_offload()),
 * and a lock taken by a blocking acquire (a campaign's, on a worker) or by
 * that attempt keeps its blocking connection of pg_pool.c, so its release,
 * extend and check run their blocking forms on a worker too: the loop
 * never waits on them.  The other way round, a
 * blocking method on a lock held on the loop's connection (the core
 * releases a held handle that is freed on a worker) runs there through
 * dlock_pg_loop_blocking().
 *
 * Ownership: the backend owns its struct dlock_pg_loop (made at open,
 * freed at close); a lock's call lives in its dlock_pg_loop_op (lk->op,
 * made at its first call, freed in lock_fini).  Threads: the loop's only;
 * the blocking methods that may run beside (inspection, listing, breaking,
 * gc on workers) use pg_pool.c's own connections.  Errors: as the blocking
 * forms.
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pg_loop.h"
#include "pg_nbconn.h"

#define NS_PER_MS 1000000LL

enum { OP_NAMES, OP_ATTEMPT, OP_UNDO, OP_RELEASE, OP_EXTEND, OP_CHECK };

struct dlock_pg_loop {
	struct dlock_pg_nbloop nbloop; /* first member */
	struct dlock_pg_backend *b;
	struct dlock_pg_nbconn *conns;
	size_t nidle;
	int closing;
};

/* A lock's call. */
struct dlock_pg_loop_op {
	struct dlock_pg_nbreq rq; /* first member */
	struct dlock_pg_backend *b;
	struct dlock_pg_lock *lk;
	struct dlock_pg_nbconn *nb;
	int kind;
	int fencing, reused;
	dlock_status failed;    /* an attempt being undone: its status */
	dlock_call *call;
	dlock_error *err;
	dlock_retry *retry;
	dlock_acquired *out;
	struct dlock_pg_args a;
	dlock_error scratch;    /* the undo's and the name's messages, never the caller's */
};

static struct dlock_pg_nbconn *nb_of(struct dlock_pg_conn *c)
{
	return (struct dlock_pg_nbconn *)c;
}

/* ------------------------------------------------------------ the pool */

static void unlink_conn(struct dlock_pg_loop *pl, struct dlock_pg_nbconn *nb)
{
	struct dlock_pg_nbconn **pp = &pl->conns;
	while (*pp && *pp != nb)
		pp = &(*pp)->next;
	if (*pp)
		*pp = nb->next;
	if (nb->idle_listed)
		pl->nidle--;
}

/* Where `nb` belongs now: kept, idle, or freed (nothing holds or runs on it, and it is dead or one too many). */
static void settle(struct dlock_pg_nbloop *loop, struct dlock_pg_nbconn *nb)
{
	struct dlock_pg_loop *pl = (struct dlock_pg_loop *)loop;
	int unused = nb->c.nlocks == 0 && nb->users == 0 && dlock_pg_nbconn_quiet(nb);
	if (!unused) {
		if (nb->idle_listed)
			pl->nidle--;
		nb->idle_listed = 0;
		return;
	}
	if (nb->idle_listed)
		return;
	if (nb->c.dead || nb->failed || pl->nidle >= DLOCK_PG_IDLE_MAX) {
		unlink_conn(pl, nb);
		dlock_pg_nbconn_free(nb);
		return;
	}
	nb->idle_listed = 1;
	nb->idle_since_ns = dlock_monotonic_ns();
	pl->nidle++;
}

static int holds_key(const struct dlock_pg_conn *c, int64_t key)
{
	for (const struct dlock_pg_lock *lk = c->locks; lk; lk = lk->next_on_conn)
		if (lk->key == key)
			return 1;
	return 0;
}

/* An idle session keeps its last idle timeout: reused only well before the server would end it (pg_pool.c). */
static int idle_too_long(const struct dlock_pg_nbconn *nb, int64_t now)
{
	return nb->c.idle_set_ms > 0 && now - nb->idle_since_ns > nb->c.idle_set_ms * NS_PER_MS / 2;
}

/* A connection for an attempt of `lk` into *out (*reused: not a new one), its user; or the failure to make one. */
static dlock_status pick(struct dlock_pg_loop *pl, const struct dlock_pg_lock *lk, int fresh, int *reused,
                         struct dlock_pg_nbconn **out, dlock_error *err)
{
	int64_t now = dlock_monotonic_ns();
	struct dlock_pg_nbconn *nb, *next, *shared = NULL;
	*reused = 0;
	for (nb = fresh ? NULL : pl->conns; nb; nb = next) {
		next = nb->next;
		if (!nb->idle_listed && nb->c.nlocks == 0 && nb->users == 0 && dlock_pg_nbconn_quiet(nb) &&
		    (nb->c.dead || nb->failed || nb->c.broken)) { /* left by a worker's release (dlock_pg_loop_blocking) */
			unlink_conn(pl, nb);
			dlock_pg_nbconn_free(nb);
			continue;
		}
		if (nb->idle_listed && !nb->failed && !nb->c.dead) {
			if (idle_too_long(nb, now)) {
				unlink_conn(pl, nb);
				dlock_pg_nbconn_free(nb);
				continue;
			}
			nb->idle_listed = 0;
			pl->nidle--;
			nb->users++;
			*reused = 1;
			*out = nb;
			return DLOCK_OK;
		}
		if (!shared && nb->c.nlocks > 0 && !nb->c.dead && !nb->failed && nb->users == 0 &&
		    nb->c.lease_ms == lk->lease_ms && nb->c.nlocks < DLOCK_PG_SESSION_LOCKS_MAX &&
		    !holds_key(&nb->c, lk->key))
			shared = nb;
	}
	if (shared) {
		shared->users++;
		*reused = 1;
		*out = shared;
		return DLOCK_OK;
	}
	dlock_status st = dlock_pg_nbconn_new(pl->b, &pl->nbloop, out, err);
	if (st != DLOCK_OK)
		return st;
	(*out)->next = pl->conns;
	pl->conns = *out;
	(*out)->users = 1;
	return DLOCK_OK;
}

/* ------------------------------------------------------------ calls */

static void answered(struct dlock_pg_nbreq *rq, dlock_status st, PGresult *res, const char *sqlstate);

static struct dlock_pg_loop_op *op_of(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int kind,
                                      dlock_error *err, dlock_call *call)
{
	if (!lk->loop_op && !(lk->loop_op = calloc(1, sizeof *lk->loop_op)))
		return NULL;
	struct dlock_pg_loop_op *op = lk->loop_op;
	*op = (struct dlock_pg_loop_op){ .b = b, .lk = lk, .kind = kind, .err = err, .call = call };
	op->rq.done = answered;
	op->rq.err = err;
	return op;
}

/* Send op's statement (op->rq.s) of `kind` on op->nb; DLOCK_OK: answered() comes. */
static dlock_status op_send(struct dlock_pg_loop_op *op, int kind)
{
	op->kind = kind;
	op->rq.err = kind == OP_NAMES || kind == OP_UNDO ? &op->scratch : op->err;
	return dlock_pg_nbconn_send(op->nb, &op->rq, op->rq.err);
}

/* Send the attempt itself on op->nb. */
static dlock_status attempt_send(struct dlock_pg_loop_op *op)
{
	dlock_pg_adv_attempt_stmt(&op->nb->c, op->lk, op->fencing, -1, &op->a, &op->rq.s);
	return op_send(op, OP_ATTEMPT);
}

/* Begin the attempt on a connection (the name's row first when due); DLOCK_OK: answered() comes. */
static dlock_status attempt_begin(struct dlock_pg_loop_op *op, int fresh)
{
	struct dlock_pg_loop *pl = op->b->loop;
	op->nb = NULL;
	dlock_status st = pick(pl, op->lk, fresh, &op->reused, &op->nb, op->err);
	if (st != DLOCK_OK)
		return st;
	st = dlock_pg_names_stmt(op->b, op->lk, 1, &op->a, &op->rq.s) ? op_send(op, OP_NAMES)
	                                                                         : attempt_send(op);
	if (st != DLOCK_OK) {
		op->nb->users--;
		settle(&pl->nbloop, op->nb);
	}
	return st;
}

/* The attempt ends with `st`. */
static void attempt_end(struct dlock_pg_loop_op *op, dlock_status st)
{
	struct dlock_pg_nbconn *nb = op->nb;
	nb->users--;
	if (st != DLOCK_OK && st != DLOCK_EBUSY)
		op->retry->transient = st == DLOCK_ECONNECT;
	dlock_call_done(op->call, st);
}

/* The attempt's connection failed: once more on a new one when it was a reused one (pg_pool.c). */
static int attempt_again(struct dlock_pg_loop_op *op, dlock_status st)
{
	if (st != DLOCK_ECONNECT || !op->reused || op->b->loop->closing)
		return 0;
	op->nb->users--;
	dlock_status again = attempt_begin(op, 1);
	if (again == DLOCK_OK)
		return 1;
	op->retry->transient = again == DLOCK_ECONNECT;
	dlock_call_done(op->call, again);
	return 1;
}

static void attempt_answered(struct dlock_pg_loop_op *op, dlock_status st, PGresult *res)
{
	struct dlock_pg_backend *b = op->b;
	struct dlock_pg_nbconn *nb = op->nb;
	if (op->kind == OP_NAMES) {
		dlock_pg_names_written(b, op->lk, st, op->rq.sqlstate);
		if (!nb->c.dead && (st = attempt_send(op)) == DLOCK_OK)
			return;
		if (nb->c.dead)
			st = dlock_error_set(op->err, DLOCK_ECONNECT, "%s", op->scratch.msg);
		if (!attempt_again(op, st))
			attempt_end(op, st);
		return;
	}
	if (op->kind == OP_UNDO) { /* done or not, the attempt's failure stands */
		if (st != DLOCK_OK) /* unsure whether it is unlocked: the session ends, and its locks with it */
			dlock_pg_pool_broken(b, &nb->c, op->scratch.msg);
		attempt_end(op, op->failed);
		return;
	}
	st = dlock_pg_adv_settle(b, &nb->c, op->lk, st, res, op->rq.sent_ns, op->out, op->a.idle_ms, op->err);
	if (st == DLOCK_OK || st == DLOCK_EBUSY || nb->c.dead) {
		if (!attempt_again(op, st))
			attempt_end(op, st);
		return;
	}
	if (nb->c.nlocks > 0) { /* the session may hold the key: unlock it, keeping the others */
		op->failed = st;
		dlock_pg_adv_undo_stmt(op->lk, &op->a, &op->rq.s);
		if (op_send(op, OP_UNDO) == DLOCK_OK)
			return;
	}
	dlock_pg_pool_broken(b, &nb->c, op->err->msg); /* nothing else held, or the undo not sent: it ends */
	attempt_end(op, st);
}

static void answered(struct dlock_pg_nbreq *rq, dlock_status st, PGresult *res, const char *sqlstate)
{
	struct dlock_pg_loop_op *op = (struct dlock_pg_loop_op *)rq;
	struct dlock_pg_conn *c = &op->nb->c;
	(void)sqlstate;
	switch (op->kind) {
	case OP_NAMES:
	case OP_ATTEMPT:
	case OP_UNDO: attempt_answered(op, st, res); break;
	case OP_RELEASE: st = dlock_pg_adv_release_result(op->b, c, st, res, &op->a, op->err); break;
	case OP_EXTEND: st = dlock_pg_adv_beat_result(op->b, c, st, &op->a, op->err); break;
	case OP_CHECK: st = dlock_pg_adv_check_result(op->b, c, st, res, op->err); break;
	}
	PQclear(res);
	if (op->kind >= OP_RELEASE)
		dlock_call_done(op->call, st);
}

/* ------------------------------------------------------------ the methods */

/*
 * A call with no non-blocking form yet (a semaphore's attempt, a call on a
 * lock taken by a blocking attempt): its blocking form on a worker of the
 * client (dlock_call_offload()), on pg_pool.c's own connections, so that
 * the loop never waits on it.  Its arguments are copied; the pointers are
 * the core's, valid until the call ends.
 */
struct offloaded {
	struct dlock_pg_backend *b;
	struct dlock_pg_lock *lk;
	int kind;
	int64_t lease_ms;
	dlock_wait *w;
	dlock_retry *retry;
	dlock_acquired *out;
	dlock_error *err;
};

static dlock_status offloaded_run(void *arg)
{
	struct offloaded *o = arg;
	const struct dlock_pg_mode *m = o->b->mode;
	dlock_status st;
	switch (o->kind) {
	case OP_ATTEMPT:
		st = dlock_pg_sem_acquire_as(o->b, o->lk, o->lease_ms, o->w, 0, o->out, o->err);
		o->retry->transient = st == DLOCK_ECONNECT;
		break;
	case OP_RELEASE: st = m->release(o->b, o->lk, o->err); break;
	case OP_EXTEND: st = m->extend(o->b, o->lk, o->lease_ms, o->err); break;
	default: st = m->check(o->b, o->lk, o->err); break;
	}
	free(o);
	return st;
}

static dlock_status offload(const struct offloaded *args, dlock_call *call)
{
	struct offloaded *o = malloc(sizeof *o);
	if (!o)
		return dlock_error_set(args->err, DLOCK_ENOMEM, "out of memory");
	*o = *args;
	dlock_status st = dlock_call_offload(call, offloaded_run, o);
	if (st != DLOCK_OK) {
		free(o);
		return dlock_error_set(args->err, st, "%s: no worker thread for a blocking call", args->b->masked);
	}
	return DLOCK_OK;
}

static dlock_status try_acquire(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                dlock_wait *w, dlock_retry *retry, dlock_acquired *out, dlock_error *err,
                                dlock_call *call)
{
	if (lk->permits) /* not on the loop yet: the blocking attempt, on a worker */
		return offload(&(struct offloaded){ .b = b, .lk = lk, .kind = OP_ATTEMPT, .lease_ms = lease_ms, .w = w,
		                                    .retry = retry, .out = out, .err = err },
		               call);
	lk->shared = dlock_wait_mode(w) == DLOCK_MODE_SHARED;
	int fencing = dlock_wait_wants_token(w) && !lk->shared;
	dlock_status st = dlock_pg_lease_ok(lease_ms, err);
	if (st != DLOCK_OK)
		return st;
	if (fencing && !atomic_load(&b->fence_ready))
		return dlock_error_set(err, DLOCK_EPERM, "%s: the fencing sequence %s is not usable by this role; a "
		                       "loop client sets it up when it opens: grant it, then open the client again",
		                       b->masked, DLOCK_PG_SEQUENCE);
	lk->lease_ms = lease_ms;
	struct dlock_pg_loop_op *op = op_of(b, lk, OP_ATTEMPT, err, call);
	if (!op)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	op->fencing = fencing;
	op->retry = retry;
	op->out = out;
	st = attempt_begin(op, 0);
	if (st == DLOCK_ECONNECT)
		retry->transient = 1;
	return st;
}

/* A call on the lock's connection, already dead: the blocking form's answer at once (ENOTHELD). */
static dlock_status on_dead(struct dlock_pg_loop_op *op)
{
	dlock_error_set(op->err, DLOCK_ECONNECT, "%s: connection lost earlier", op->b->masked);
	dlock_status st = DLOCK_ECONNECT;
	switch (op->kind) {
	case OP_RELEASE: st = dlock_pg_adv_release_result(op->b, &op->nb->c, st, NULL, &op->a, op->err); break;
	case OP_EXTEND: st = dlock_pg_adv_beat_result(op->b, &op->nb->c, st, &op->a, op->err); break;
	default: st = dlock_pg_adv_check_result(op->b, &op->nb->c, st, NULL, op->err); break;
	}
	return st;
}

/* Send op's call on its lock's connection, or answer it at once when that connection is dead. */
static dlock_status lock_call(struct dlock_pg_loop_op *op)
{
	if (!op->nb->c.on_loop) /* taken by a blocking attempt: its calls are blocking too, on a worker */
		return offload(&(struct offloaded){ .b = op->b, .lk = op->lk, .kind = op->kind,
		                                    .lease_ms = op->lk->lease_ms, .err = op->err },
		               op->call);
	if (op_send(op, op->kind) == DLOCK_OK)
		return DLOCK_OK;
	dlock_status st = on_dead(op);
	dlock_call_done(op->call, st);
	settle(&op->b->loop->nbloop, op->nb);
	return DLOCK_OK;
}

static dlock_status release(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err, dlock_call *call)
{
	struct dlock_pg_loop_op *op = op_of(b, lk, OP_RELEASE, err, call);
	if (!op)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	op->nb = nb_of(lk->conn);
	if (!op->nb->c.on_loop)
		return lock_call(op);
	dlock_pg_pool_unhold(b, lk);
	op->nb->c.users--; /* pg_pool.c's count: the loop counts its own */
	dlock_pg_adv_release_stmt(&op->nb->c, lk, &op->a, &op->rq.s);
	return lock_call(op);
}

static dlock_status extend(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                           dlock_error *err, dlock_call *call)
{
	if (dlock_pg_lease_ok(lease_ms, err) != DLOCK_OK)
		return DLOCK_EINVAL;
	struct dlock_pg_loop_op *op = op_of(b, lk, OP_EXTEND, err, call);
	if (!op)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	op->nb = nb_of(lk->conn);
	lk->lease_ms = lease_ms;
	if (!op->nb->c.on_loop)
		return lock_call(op);
	dlock_pg_adv_beat_stmt(&op->nb->c, &op->a, &op->rq.s);
	return lock_call(op);
}

static dlock_status check(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err, dlock_call *call)
{
	struct dlock_pg_loop_op *op = op_of(b, lk, OP_CHECK, err, call);
	if (!op)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	op->nb = nb_of(lk->conn);
	dlock_pg_adv_check_stmt(lk, &op->a, &op->rq.s);
	return lock_call(op);
}

/* The methods under the loop's mutex (a worker may be in dlock_pg_loop_blocking). */
#define LOCKED(b, expr)                                          \
	do {                                                     \
		pthread_mutex_lock(&(b)->loop->nbloop.mu);        \
		dlock_status st_ = (expr);                       \
		pthread_mutex_unlock(&(b)->loop->nbloop.mu);      \
		return st_;                                      \
	} while (0)

dlock_status dlock_pg_loop_try_acquire(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                       dlock_wait *w, dlock_retry *retry, dlock_acquired *out, dlock_error *err,
                                       dlock_call *call)
{
	LOCKED(b, try_acquire(b, lk, lease_ms, w, retry, out, err, call));
}

dlock_status dlock_pg_loop_release(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err,
                                   dlock_call *call)
{
	LOCKED(b, release(b, lk, err, call));
}

dlock_status dlock_pg_loop_extend(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                  dlock_error *err, dlock_call *call)
{
	LOCKED(b, extend(b, lk, lease_ms, err, call));
}

dlock_status dlock_pg_loop_check(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err,
                                 dlock_call *call)
{
	LOCKED(b, check(b, lk, err, call));
}

/*
 * A blocking method on a lock the loop holds, from a worker: the core
 * releases a held lock on a worker when its handle is freed
 * (dlock_lock_free).  The lock's session is the loop's connection, so the
 * statement runs there, with the loop kept out meanwhile (its mutex: the
 * loop's thread waits at most this one statement, io_timeout) once the
 * connection has nothing of the loop's in flight, as a blocking statement
 * (PQsetnonblocking 0 for its time).
 */
dlock_status dlock_pg_loop_blocking(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_pg_work_fn *work,
                                    void *arg, dlock_error *err)
{
	struct dlock_pg_loop *pl = b->loop;
	struct dlock_pg_nbconn *nb = nb_of(lk->conn);
	int64_t deadline = dlock_pg_io_deadline(b);
	dlock_status st = DLOCK_OK;
	pthread_mutex_lock(&pl->nbloop.mu);
	while (!dlock_pg_nbconn_quiet(nb) && !nb->c.dead)
		if (dlock_cond_wait_until(&pl->nbloop.quiet, &pl->nbloop.mu, deadline) == ETIMEDOUT) {
			st = dlock_error_set(err, DLOCK_ECONNECT, "%s: the connection stayed busy for %lld ms", b->masked,
			                     (long long)b->io_timeout_ms);
			break;
		}
	if (st == DLOCK_OK) {
		int nonblocking = nb->c.pg && !nb->c.dead && PQisnonblocking(nb->c.pg);
		if (nonblocking)
			PQsetnonblocking(nb->c.pg, 0);
		st = work(b, &nb->c, arg, err);
		if (nonblocking && !nb->c.dead)
			PQsetnonblocking(nb->c.pg, 1);
		nb->c.users = 0; /* pg_pool.c's count: the loop counts its own */
		if (nb->c.nlocks == 0 && nb->users == 0 && !nb->idle_listed && !nb->c.dead && pl->nidle < DLOCK_PG_IDLE_MAX) {
			nb->idle_listed = 1; /* freed only by the loop's thread (pick, settle): its watch is the loop's */
			nb->idle_since_ns = dlock_monotonic_ns();
			pl->nidle++;
		}
	}
	pthread_mutex_unlock(&pl->nbloop.mu);
	return st;
}

void dlock_pg_loop_op_free(struct dlock_pg_lock *lk)
{
	free(lk->loop_op);
	lk->loop_op = NULL;
}

/* ------------------------------------------------------------ open, close */

int dlock_pg_loop_mode_fits(const struct dlock_pg_backend *b)
{
	return b->mode == &dlock_pg_advisory_mode && !b->durable && dlock_pg_params_hosts(&b->params) == 1;
}

int dlock_pg_loop_fits(const struct dlock_pg_backend *b)
{
	return dlock_pg_loop_mode_fits(b) && (!b->fencing || atomic_load(&b->fence_ready));
}

/* The numeric address of the URI's one host, resolved now (NULL: a socket directory, or hostaddr given). */
static dlock_status resolve(const struct dlock_pg_backend *b, char *addr, size_t cap, int *have, dlock_error *err)
{
	const char *host = dlock_pg_params_get(&b->params, "host");
	*have = 0;
	if (!host || !host[0] || host[0] == '/' || host[0] == '@' || dlock_pg_params_get(&b->params, "hostaddr"))
		return DLOCK_OK;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int rc = getaddrinfo(host, NULL, &hints, &ai);
	if (rc != 0 || !ai)
		return dlock_error_set(err, DLOCK_ECONNECT, "%s: cannot resolve the host: %s", b->masked,
		                       gai_strerror(rc));
	rc = getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, (socklen_t)cap, NULL, 0, NI_NUMERICHOST);
	freeaddrinfo(ai);
	if (rc != 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "%s: cannot resolve the host: %s", b->masked,
		                       gai_strerror(rc));
	*have = 1;
	return DLOCK_OK;
}

static dlock_status fence_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	(void)arg;
	return dlock_pg_fence(b, c, err);
}

dlock_status dlock_pg_loop_open(struct dlock_pg_backend *b, dlock_io *io, dlock_error *err)
{
	/* The sequence is set up (a transaction, several statements) on the loop only by this blocking open:
	 * also with fencing off, quietly, for the acquisitions that ask a token anyway; where the role may not
	 * create or use it, such an acquisition is refused (try_acquire). */
	if (!atomic_load(&b->fence_ready)) {
		dlock_error ignored;
		dlock_pg_pool_run(b, fence_on, NULL, &ignored);
	}
	char addr[NI_MAXHOST];
	int have = 0;
	dlock_status st = resolve(b, addr, sizeof addr, &have, err);
	if (st != DLOCK_OK)
		return st;
	struct dlock_pg_loop *pl = calloc(1, sizeof *pl);
	if (!pl)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	pl->b = b;
	pl->nbloop.io = io;
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE); /* a call's end may start another call */
	pthread_mutex_init(&pl->nbloop.mu, &attr);
	pthread_mutexattr_destroy(&attr);
	dlock_cond_init_monotonic(&pl->nbloop.quiet);
	pl->nbloop.settle = settle;
	if (dlock_pg_params_hostaddr(&b->params, have ? addr : NULL, &pl->nbloop.params) != DLOCK_OK) {
		pthread_mutex_destroy(&pl->nbloop.mu);
		pthread_cond_destroy(&pl->nbloop.quiet);
		free(pl);
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	}
	b->loop = pl;
	return DLOCK_OK;
}

void dlock_pg_loop_close(struct dlock_pg_backend *b)
{
	struct dlock_pg_loop *pl = b->loop;
	if (!pl)
		return;
	pl->closing = 1;
	for (struct dlock_pg_nbconn *nb = pl->conns, *next; nb; nb = next) {
		next = nb->next;
		dlock_pg_nbconn_free(nb);
	}
	dlock_pg_params_free(&pl->nbloop.params);
	pthread_mutex_destroy(&pl->nbloop.mu);
	pthread_cond_destroy(&pl->nbloop.quiet);
	free(pl);
	b->loop = NULL;
}
