/*
 * The client's connections (the rule is in pg_backend.h).  A connection
 * is in exactly one place:
 *
 *   LIST_IDLE    holds nothing, nobody uses it; kept up to DLOCK_PG_IDLE_MAX
 *   LIST_SHARED  advisory mode: holds locks, open to more try-once locks
 *   LIST_NONE    in use by an acquire, or pinned by its locks in row mode,
 *                or broken and waiting for its last lock to be released
 *
 * pool_settle() decides the place after every change, under pool->mu; a
 * connection is closed once nothing refers to it (no lock, no user) and it
 * is broken or the idle list is full.  Whoever finds a connection dead
 * (c->dead, set by pg_exec.c under c->mu) calls dlock_pg_pool_broken()
 * before letting go of c->mu, so the pool itself only reads `broken`.
 *
 * Work on a connection of its own (dlock_pg_pool_run, _use, _query) runs
 * with c->mu held and pool->mu free, so it may hold a lock on c or report
 * c broken itself; a connection it leaves dead is reported broken after
 * it, with the message in its `err`.  A reused connection that broke
 * (DLOCK_ECONNECT) is worth one more try on a fresh one; any other status
 * is the work's answer, and so is the failure to connect.
 */
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pg_backend.h"

enum { LIST_NONE = 0, LIST_IDLE = 1, LIST_SHARED = 2 };

void dlock_pg_conn_close(struct dlock_pg_conn *c)
{
	if (!c)
		return;
	PQfreeCancel(c->cancel);
	PQfinish(c->pg);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

dlock_status dlock_pg_conn_open(const struct dlock_pg_backend *b, struct dlock_pg_conn **out, dlock_error *err)
{
	*out = NULL;
	struct dlock_pg_conn *c = calloc(1, sizeof *c);
	if (!c)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->idle_set_ms = -1;
	pthread_mutex_init(&c->mu, NULL);
	dlock_status st = DLOCK_EIO;
	if (c->wake_fd < 0) {
		dlock_error_set(err, st, "eventfd: out of descriptors");
		goto fail;
	}
	st = dlock_pg_connect(b, &c->pg, err);
	if (st != DLOCK_OK)
		goto fail;
	c->cancel = PQgetCancel(c->pg);
	*out = c;
	return DLOCK_OK;
fail:
	dlock_pg_conn_close(c);
	return st;
}

void dlock_pg_pool_init(struct dlock_pg_pool *p)
{
	*p = (struct dlock_pg_pool){ .nidle = 0 };
	pthread_mutex_init(&p->mu, NULL);
}

void dlock_pg_pool_destroy(struct dlock_pg_pool *p)
{
	for (struct dlock_pg_conn *c = p->idle, *next; c; c = next) {
		next = c->next;
		dlock_pg_conn_close(c);
	}
	for (struct dlock_pg_conn *c = p->shared, *next; c; c = next) {
		next = c->next;
		dlock_pg_conn_close(c);
	}
	pthread_mutex_destroy(&p->mu);
}

/* ------------------------------------------------------------ lists */

static struct dlock_pg_conn **list_of(struct dlock_pg_pool *p, int which)
{
	return which == LIST_IDLE ? &p->idle : &p->shared;
}

static void unlist(struct dlock_pg_pool *p, struct dlock_pg_conn *c)
{
	if (c->listed == LIST_NONE)
		return;
	struct dlock_pg_conn **pp = list_of(p, c->listed);
	while (*pp != c)
		pp = &(*pp)->next;
	*pp = c->next;
	if (c->listed == LIST_IDLE)
		p->nidle--;
	c->listed = LIST_NONE;
	c->next = NULL;
}

static void enlist(struct dlock_pg_pool *p, struct dlock_pg_conn *c, int which)
{
	c->next = *list_of(p, which);
	*list_of(p, which) = c;
	c->listed = which;
	if (which == LIST_IDLE) {
		p->nidle++;
		c->idle_since_ns = dlock_monotonic_ns();
	}
}

/*
 * An idle advisory session keeps the idle_session_timeout of its last
 * lease (setting it back to 0 on every release would cost a statement's
 * worth of server work), so the server ends it after that long without a
 * statement.  Reuse it only well before then; an older one is closed here,
 * by us, rather than found dead or killed under a new statement.
 */
static int idle_too_long(const struct dlock_pg_conn *c, int64_t now)
{
	return c->idle_set_ms > 0 && now - c->idle_since_ns > c->idle_set_ms * 1000000LL / 2;
}

/* Put `c` where it belongs; returns it if it must be closed (outside mu). */
static struct dlock_pg_conn *pool_settle(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	struct dlock_pg_pool *p = &b->pool;
	unlist(p, c);
	if (c->nlocks == 0 && c->users == 0) {
		if (c->broken || p->nidle >= DLOCK_PG_IDLE_MAX)
			return c;
		enlist(p, c, LIST_IDLE);
	} else if (c->nlocks > 0 && c->users == 0 && !c->broken && b->mode == &dlock_pg_advisory_mode) {
		enlist(p, c, LIST_SHARED);
	}
	return NULL;
}

/* ------------------------------------------------------------ use */

/*
 * An idle connection the server has closed is readable (an error message
 * and EOF); anything else unread is consumed by libpq.  One that went idle
 * less than RECHECK_NS ago is taken on trust, which spares the system call
 * in the loop of a lock acquired and released again and again: if its
 * session did end meanwhile, the statement fails with DLOCK_ECONNECT and
 * dlock_pg_pool_run() tries once more on a new connection.
 */
#define RECHECK_NS 1000000000LL

static int conn_seems_alive(struct dlock_pg_conn *c, int64_t now)
{
	if (now - c->idle_since_ns < RECHECK_NS && PQstatus(c->pg) == CONNECTION_OK)
		return 1;
	struct pollfd pfd = { .fd = PQsocket(c->pg), .events = POLLIN };
	if (pfd.fd < 0)
		return 0;
	if (poll(&pfd, 1, 0) == 0)
		return 1;
	return PQconsumeInput(c->pg) && PQstatus(c->pg) == CONNECTION_OK && !PQisBusy(c->pg);
}

dlock_status dlock_pg_pool_take(struct dlock_pg_backend *b, int *reused, struct dlock_pg_conn **out,
                                dlock_error *err)
{
	struct dlock_pg_pool *p = &b->pool;
	int fresh = !*reused;
	*reused = 0;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		struct dlock_pg_conn *c = fresh ? NULL : p->idle;
		if (c) {
			unlist(p, c);
			c->users = 1;
		}
		pthread_mutex_unlock(&p->mu);
		if (!c)
			break;
		int64_t now = dlock_monotonic_ns();
		if (!idle_too_long(c, now) && conn_seems_alive(c, now)) {
			*out = c;
			*reused = 1;
			return DLOCK_OK;
		}
		c->users = 0;
		dlock_pg_conn_close(c); /* unlisted and unused: ours alone */
	}
	dlock_status st = dlock_pg_conn_open(b, out, err);
	if (st == DLOCK_OK)
		(*out)->users = 1;
	return st;
}

/* 1 when a lock held on `c` has advisory key `key` (pool->mu held). */
static int conn_holds_key(const struct dlock_pg_conn *c, int64_t key)
{
	for (const struct dlock_pg_lock *lk = c->locks; lk; lk = lk->next_on_conn)
		if (lk->key == key)
			return 1;
	return 0;
}

struct dlock_pg_conn *dlock_pg_pool_share(struct dlock_pg_backend *b, int64_t lease_ms, int64_t key)
{
	struct dlock_pg_pool *p = &b->pool;
	pthread_mutex_lock(&p->mu);
	/* Share only when no idle connection is left, and never one that another
	 * thread is using: we would wait for its statement.  Threads that acquire
	 * at once then each get a session, and the sessions are still bounded by
	 * those threads, not by the locks held.  Never one that holds the key
	 * (a reader beside the client's readers): see pg_backend.h. */
	struct dlock_pg_conn *c = p->idle ? NULL : p->shared;
	while (c && (c->lease_ms != lease_ms || c->users > 0 || c->nlocks >= DLOCK_PG_SESSION_LOCKS_MAX ||
	             conn_holds_key(c, key)))
		c = c->next;
	if (c)
		c->users++; /* stays listed: others may share it too */
	pthread_mutex_unlock(&p->mu);
	return c;
}

void dlock_pg_pool_put(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	pthread_mutex_lock(&b->pool.mu);
	c->users--;
	struct dlock_pg_conn *doomed = pool_settle(b, c);
	pthread_mutex_unlock(&b->pool.mu);
	dlock_pg_conn_close(doomed);
}

void dlock_pg_pool_hold(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk)
{
	pthread_mutex_lock(&b->pool.mu);
	lk->conn = c;
	lk->next_on_conn = c->locks;
	c->locks = lk;
	c->nlocks++;
	if (lk->lease_ms > c->lease_ms || c->nlocks == 1)
		c->lease_ms = lk->lease_ms;
	pthread_mutex_unlock(&b->pool.mu);
}

void dlock_pg_pool_unhold(struct dlock_pg_backend *b, struct dlock_pg_lock *lk)
{
	struct dlock_pg_conn *c = lk->conn;
	pthread_mutex_lock(&b->pool.mu);
	struct dlock_pg_lock **pp = &c->locks;
	while (*pp && *pp != lk)
		pp = &(*pp)->next_on_conn;
	if (*pp) {
		*pp = lk->next_on_conn;
		c->nlocks--;
	}
	lk->next_on_conn = NULL;
	lk->conn = NULL;
	c->lease_ms = dlock_pg_conn_lease(c, 0);
	c->users++;
	unlist(&b->pool, c); /* settled again by the caller's put */
	pthread_mutex_unlock(&b->pool.mu);
}

int64_t dlock_pg_conn_lease(const struct dlock_pg_conn *c, int64_t with_ms)
{
	int64_t max = with_ms;
	for (const struct dlock_pg_lock *lk = c->locks; lk; lk = lk->next_on_conn)
		if (lk->lease_ms > max)
			max = lk->lease_ms;
	return max;
}

void dlock_pg_pool_broken(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *detail)
{
	pthread_mutex_lock(&b->pool.mu);
	for (struct dlock_pg_lock *lk = c->locks; lk && !c->broken; lk = lk->next_on_conn)
		dlock_report_lost(b->host, lk, DLOCK_LOST_SESSION, detail); /* once: a broken one takes no lock */
	c->broken = 1;
	c->dead = 1;
	unlist(&b->pool, c);
	pthread_mutex_unlock(&b->pool.mu);
}

/* ------------------------------------------------------------ work */

dlock_status dlock_pg_pool_use(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_pg_work_fn *work,
                               void *arg, dlock_error *err)
{
	pthread_mutex_lock(&c->mu);
	dlock_status st = work(b, c, arg, err);
	if (c->dead)
		dlock_pg_pool_broken(b, c, err->msg);
	pthread_mutex_unlock(&c->mu);
	dlock_pg_pool_put(b, c);
	return st;
}

dlock_status dlock_pg_pool_run(struct dlock_pg_backend *b, dlock_pg_work_fn *work, void *arg, dlock_error *err)
{
	for (int reused = 1;; reused = 0) {
		struct dlock_pg_conn *c;
		dlock_status st = dlock_pg_pool_take(b, &reused, &c, err);
		if (st != DLOCK_OK)
			return st;
		st = dlock_pg_pool_use(b, c, work, arg, err);
		if (st != DLOCK_ECONNECT || !reused)
			return st;
	}
}

dlock_status dlock_pg_query_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	const struct dlock_pg_query *q = arg;
	return dlock_pg_exec(b, c, q->s, dlock_pg_io_deadline(b), q->res, q->sqlstate, err);
}

dlock_status dlock_pg_pool_query(struct dlock_pg_backend *b, const struct dlock_pg_stmt *s, PGresult **res,
                                 char sqlstate[6], dlock_error *err)
{
	struct dlock_pg_query q = { .s = s, .res = res, .sqlstate = sqlstate };
	return dlock_pg_pool_run(b, dlock_pg_query_on, &q, err);
}
