/*
 * postgres:// and postgresql:// — locks held by a PostgreSQL server.
 *
 *   postgres://[user[:password]@]host[:port][,host[:port]...]/dbname[?params]
 *
 * Parameters: dlock's common ones (ttl, wait, renew, prefix, open_timeout,
 * io_timeout; fencing off needs no fencing sequence: pg_setup.c),
 * `mode=advisory` (default: session advisory locks, pg_advisory.c) or
 * `mode=row` (row locks in a lock table, pg_row.c),
 * `table=NAME` (row mode's table, default dlock_locks: letters, digits and
 * '_', not starting with a digit, at most 63 bytes),
 * `fencing_durability=none|commit` (advisory mode: with `commit` an
 * acquisition returns its token only once a commit after it is durable,
 * DLOCK_PG_DURABLE in pg_backend.h; a parameter of this backend, as the
 * core's `fencing` is on or off for every backend), and every libpq
 * connection keyword except the five the URI itself carries (host, port,
 * user, password, dbname) — see pg_conn.c.
 *
 * Both schemes are the same driver.  How connections, leases and names
 * work is in pg_backend.h and the files it lists.
 */
#include <stdlib.h>
#include <string.h>

#include "dlock/sys/postgres.h"
#include "pg_backend.h"
#include "pg_loop.h"

/* ------------------------------------------------------------ open */

static dlock_status read_mode(const dlock_uri *uri, struct dlock_pg_backend *b, const char **table,
                              dlock_error *err)
{
	const char *mode = dlock_uri_get(uri, "mode");
	*table = dlock_uri_get(uri, "table");
	if (!mode || strcmp(mode, "advisory") == 0)
		b->mode = &dlock_pg_advisory_mode;
	else if (strcmp(mode, "row") == 0)
		b->mode = &dlock_pg_row_mode;
	else
		return dlock_error_set(err, DLOCK_EURI, "bad value for 'mode' in %s: expected advisory or row",
		                       uri->masked);
	if (*table && b->mode != &dlock_pg_row_mode)
		return dlock_error_set(err, DLOCK_EURI, "'table' needs mode=row in %s", uri->masked);
	if (!*table)
		*table = b->mode == &dlock_pg_row_mode ? DLOCK_PG_TABLE_DEFAULT : NULL;
	const char *durability = dlock_uri_get(uri, "fencing_durability");
	if (durability && strcmp(durability, "commit") != 0 && strcmp(durability, "none") != 0)
		return dlock_error_set(err, DLOCK_EURI,
		                       "bad value for 'fencing_durability' in %s: expected none or commit", uri->masked);
	b->durable = durability && strcmp(durability, "commit") == 0;
	if (b->durable && !b->mode->prepare_durable[DLOCK_PG_SET_TOKEN])
		return dlock_error_set(err, DLOCK_EURI,
		                       "'fencing_durability=commit' needs mode=advisory in %s: a row lock's token is "
		                       "taken in the transaction that holds the row, which commits only at release",
		                       uri->masked);
	return DLOCK_OK;
}

static int identifier_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63 || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == n;
}

static void pg_close(void *backend)
{
	struct dlock_pg_backend *b = backend;
	if (!b)
		return;
	dlock_pg_loop_close(b); /* a loop client's: on its loop's thread, where open and close run */
	dlock_pg_listener_free(b->listener);
	pthread_mutex_destroy(&b->watch_mu);
	dlock_pg_pool_destroy(&b->pool);
	dlock_pg_params_free(&b->params);
	dlock_pg_names_free(b);
	pthread_mutex_destroy(&b->names_mu);
	PQfreemem(b->table);
	free(b->sql_row_insert);
	free(b->sql_row_try);
	free(b->sql_row_wait);
	free(b->sql_row_try_token);
	free(b->sql_row_wait_token);
	free(b->sql_row_try_shared);
	free(b->sql_row_wait_shared);
	for (int i = 0; i < 4; i++)
		free(b->sql_row_prepare[i]);
	for (int i = 0; i < DLOCK_PG_ROW_SEM_SQL; i++)
		free(b->sql_row_sem[i]);
	free(b);
}

/*
 * Whether `c` is a server session of its own.  A pooler in between
 * (PgBouncer) answers the startup with its own backend key, so the PID
 * libpq was told differs from the server's pg_backend_pid().
 */
static dlock_status direct_session(struct dlock_pg_backend *b, struct dlock_pg_conn *c, int *direct,
                                   dlock_error *err)
{
	struct dlock_pg_stmt s = { .sql = "SELECT pg_backend_pid()" };
	PGresult *res;
	char sqlstate[6];
	dlock_status st = dlock_pg_exec(b, c, &s, dlock_pg_io_deadline(b), &res, sqlstate, err);
	if (st != DLOCK_OK)
		return st;
	*direct = strtol(PQgetvalue(res, 0, 0), NULL, 10) == (long)PQbackendPID(c->pg);
	PQclear(res);
	return DLOCK_OK;
}

/*
 * Advisory locks belong to a server session, so advisory mode needs its
 * connection to be one: behind transaction pooling, a lock would be taken
 * on one server session and released on another.  Refuse, rather than
 * hand out locks that exclude nobody.  Row mode works behind a pooler; it
 * prepares its statements only without one.
 */
static dlock_status session_kind(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_error *err)
{
	int direct = 0;
	dlock_status st = direct_session(b, c, &direct, err);
	if (st != DLOCK_OK)
		return st;
	if (b->mode == &dlock_pg_row_mode) {
		for (int i = 0; i < 4 && direct; i++)
			b->prepare[i] = b->sql_row_prepare[i];
		return DLOCK_OK;
	}
	for (int i = 0; i < 4; i++)
		b->prepare[i] = b->durable ? b->mode->prepare_durable[i] : b->mode->prepare[i];
	if (direct)
		return DLOCK_OK;
	return dlock_error_set(err, DLOCK_ENOTSUP,
	                       "postgres: a connection pooler sits between dlock and the server (%s): advisory locks "
	                       "need a server session of their own; use mode=row, which works behind transaction "
	                       "pooling, or connect to the server directly",
	                       b->masked);
}

/* The first connection: proves the URI, quotes the table, learns the session kind, sets up. */
static dlock_status first_connection(struct dlock_pg_backend *b, const char *table, dlock_error *err)
{
	struct dlock_pg_conn *c = NULL;
	int reused = 0;
	dlock_status st = dlock_pg_pool_take(b, &reused, &c, err);
	if (st != DLOCK_OK)
		return st;
	if (table) {
		b->table = PQescapeIdentifier(c->pg, table, strlen(table));
		st = b->table ? dlock_pg_row_prepare(b, err) : dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	}
	pthread_mutex_lock(&c->mu);
	if (st == DLOCK_OK)
		st = session_kind(b, c, err);
	pthread_mutex_unlock(&c->mu);
	if (st == DLOCK_OK)
		st = dlock_pg_setup(b, c, table, err);
	if (st == DLOCK_OK && b->mode == &dlock_pg_advisory_mode)
		st = dlock_pg_names_setup(b, c);
	if (st == DLOCK_OK && b->mode == &dlock_pg_advisory_mode)
		st = dlock_pg_leaders_setup(b, c);
	pthread_mutex_lock(&c->mu);
	if (st != DLOCK_OK || c->dead)
		dlock_pg_pool_broken(b, c, "");
	pthread_mutex_unlock(&c->mu);
	dlock_pg_pool_put(b, c);
	return st;
}

static dlock_status pg_open(const dlock_uri *uri, dlock_host *host, void **out, dlock_error *err)
{
	const char *table = NULL;
	struct dlock_pg_backend *b = calloc(1, sizeof *b);
	if (!b)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	*b = (struct dlock_pg_backend){ .host = host, .masked = uri->masked, .prefix = uri->prefix,
		                        .open_timeout_ms = uri->connect_timeout_ms,
		                        .io_timeout_ms = uri->io_timeout_ms, .fencing = uri->fencing };
	dlock_pg_pool_init(&b->pool);
	pthread_mutex_init(&b->names_mu, NULL);
	pthread_mutex_init(&b->watch_mu, NULL);
	dlock_status st = read_mode(uri, b, &table, err);
	if (st == DLOCK_OK && table && !identifier_ok(table))
		st = dlock_error_set(err, DLOCK_EURI,
		                     "bad 'table' in %s: letters, digits and '_' (not first), at most 63", uri->masked);
	size_t olen = 0;
	const char *owner = dlock_host_owner(host, &olen);
	char app[DLOCK_PG_APP_NAME_SIZE];
	if (owner)
		dlock_pg_app_name(owner, olen, app);
	if (st == DLOCK_OK)
		st = dlock_pg_params_build(uri, owner ? app : NULL, &b->params, err);
	if (st == DLOCK_OK)
		st = first_connection(b, table, err);
	dlock_io *io = dlock_host_io(host); /* a loop client's loop, opening us on its thread */
	b->loop_client = io != NULL;
	if (st == DLOCK_OK && io && dlock_pg_loop_fits(b))
		st = dlock_pg_loop_open(b, io, err);
	if (st != DLOCK_OK)
		goto fail;
	*out = b;
	return DLOCK_OK;
fail:
	pg_close(b);
	return st;
}

/*
 * Tokens are nextval of one sequence, which writes WAL once per 33 values,
 * and only the caller whose nextval wrote it waits for its commit (README,
 * "PostgreSQL failover"; test_pg_failover): they can come again after a
 * crash or a failover, so CONDITIONAL, with the conditions.  fencing_durability=commit narrows them
 * to those under which a committed transaction is lost; that is still not
 * every configuration (an asynchronous standby promoted), hence not STRICT.
 */
static const char *fencing_note(const struct dlock_pg_backend *b)
{
	if (b->mode == &dlock_pg_row_mode)
		return "tokens come from the sequence dlock_fence, taken in the transaction that holds the row, which "
		       "commits at release: after a crash of the server or a failover to a standby, a token handed "
		       "out (up to 33 of them) can come again, synchronous replication or not";
	if (b->durable)
		return "fencing_durability=commit: an acquisition returns its token only once a commit after it "
		       "(synchronous_commit at least on) is flushed, and with synchronous replication flushed by the "
		       "synchronous standbys; a token goes back only where such a commit is lost: a failover to a "
		       "standby that had not flushed it (asynchronous replication, or one that "
		       "synchronous_standby_names did not make the commit wait for), or a crash of a server that "
		       "runs with fsync off";
	return "tokens come from the sequence dlock_fence, whose state reaches the WAL once per 33 values; only "
	       "the acquisition that writes it waits for that commit: after a crash of the server or a failover "
	       "to a standby, up to 33 tokens handed out can come again (with asynchronous replication, and with "
	       "synchronous replication for the 32 tokens after a record not yet on the standby); "
	       "fencing_durability=commit makes each token as durable as a commit";
}

/* ------------------------------------------------------------ locks */

/* A mutex or read-write lock: the name's key or row, each acquisition's mode decides; a semaphore:
 * its N slot keys (pg_sem.c). */
static dlock_status pg_lock_init_kind(void *backend, void *lkp, const char *name, size_t len,
                                      const dlock_kind_spec *spec, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	size_t n;
	char *ns = dlock_pg_namespaced(b->prefix, name, len, &n);
	if (!ns)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	lk->key = dlock_pg_key(ns, n);
	dlock_pg_sem_keys(ns, n, &lk->sem_hi, &lk->sem_base);
	lk->row_name = ns; /* row mode's row; advisory mode writes it to dlock_names once (pg_names.c) */
	lk->row_len = n;
	lk->permits = spec->kind == DLOCK_KIND_SEMAPHORE ? spec->permits : 0;
	lk->rwlock = spec->kind == DLOCK_KIND_RWLOCK;
	return DLOCK_OK;
}

static void pg_lock_fini(void *backend, void *lkp)
{
	struct dlock_pg_lock *lk = lkp;
	(void)backend;
	free(lk->row_name);
	lk->row_name = NULL;
	dlock_pg_loop_op_free(lk);
}

static dlock_status pg_acquire(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                               dlock_error *err)
{
	return ((struct dlock_pg_backend *)backend)->mode->acquire(backend, lk, lease_ms, w, out, err);
}

static dlock_status pg_release(void *backend, void *lk, dlock_error *err)
{
	return ((struct dlock_pg_backend *)backend)->mode->release(backend, lk, err);
}

static dlock_status pg_extend(void *backend, void *lk, int64_t lease_ms, dlock_error *err)
{
	return ((struct dlock_pg_backend *)backend)->mode->extend(backend, lk, lease_ms, err);
}

/* The mode's batched renewal, or its extend() per lock (row mode: a session per lock anyway). */
static void pg_extend_many(void *backend, void *const *lks, const int64_t *lease_ms, size_t n, dlock_status *out,
                           dlock_error *err)
{
	const struct dlock_pg_mode *m = ((struct dlock_pg_backend *)backend)->mode;
	if (m->extend_many) {
		m->extend_many(backend, lks, lease_ms, n, out, err);
		return;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = m->extend(backend, lks[i], lease_ms[i], err);
}

static dlock_status pg_check(void *backend, void *lk, dlock_error *err)
{
	return ((struct dlock_pg_backend *)backend)->mode->check(backend, lk, err);
}

/*
 * The backend's facts.  CP, fair: the server queues the waiters.
 *
 * Read-write locks in both modes, on the same server resource as the
 * mutex of that name (the key, the row), so the kinds exclude each other
 * and nothing needs refusing (KIND_CHECK 0).  Advisory mode is
 * WRITER_FIRST (pg_advisory.c says why); in row mode a FOR SHARE request
 * is granted beside the FOR SHARE holders even while a FOR UPDATE waits,
 * so readers that keep overlapping can starve a writer (NO_PREFERENCE).
 * Readers get no fencing token in either mode (pg_advisory.c).
 *
 * Semaphores: N slot keys (pg_sem.c, waiters woken by NOTIFY or a
 * bounded poll) or N slot rows (pg_row_sem.c, a bounded poll), in no
 * order; a permit has its slot and a token of the sequence.  Its holders
 * hold the mutex's key (row) shared, so a mutex or a writer cannot
 * hold beside them; a semaphore beside a mutex, a reader, or a semaphore
 * of another N is refused (KIND_CHECK 1 for semaphores).
 *
 * What inspection, breaking, collection and elections do depends on the
 * mode and on what the server has shown so far: dlock_pg_feature().
 */
static dlock_status pg_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	if (!backend) /* asked before open() (DLOCK_FACT_INLINE): not a local backend */
		return DLOCK_ENOTSUP;
	struct dlock_pg_backend *b = backend;
	int row = b->mode == &dlock_pg_row_mode;
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "postgres"; break;
	case DLOCK_FEATURE_CONSISTENCY: out->value = DLOCK_CONSISTENCY_CP; break;
	case DLOCK_FEATURE_FENCING:
	case DLOCK_FEATURE_PERMIT_FENCING: out->value = DLOCK_FENCING_CONDITIONAL; break; /* a permit's: a mutex's */
	case DLOCK_FACT_FENCING_NOTE: out->text = fencing_note(b); break;
	case DLOCK_FEATURE_READ_FENCING: out->value = DLOCK_FENCING_NONE; break;
	case DLOCK_FEATURE_FAIR: out->value = !b->loop; break; /* a loop client polls (pg_loop.c) */
	case DLOCK_FEATURE_LEASE: out->value = DLOCK_LEASE_SESSION; break;
	case DLOCK_FEATURE_WAKEUP: out->value = b->loop ? DLOCK_WAKEUP_POLL : DLOCK_WAKEUP_SERVER_QUEUE; break;
	case DLOCK_FEATURE_SCOPE: out->value = DLOCK_SCOPE_NETWORK; break;
	case DLOCK_FEATURE_RWLOCK: /* a loop client's writer never waits in the server's queue (pg_loop.c) */
		out->value = row || b->loop ? DLOCK_RWLOCK_NO_PREFERENCE : DLOCK_RWLOCK_WRITER_FIRST;
		break;
	case DLOCK_FEATURE_SEMAPHORE: out->value = DLOCK_SEMAPHORE_UNORDERED; break;
	case DLOCK_FACT_SLOTS: out->value = 1; break;
	case DLOCK_FEATURE_KIND_CHECK: out->value = kind == DLOCK_KIND_SEMAPHORE; break;
	default: return dlock_pg_feature(b, code, &out->value);
	}
	return DLOCK_OK;
}

/*
 * A loop client (dlock/loop.h) in advisory mode of one host makes its lock
 * calls on its loop (pg_loop.c, driver contract 9: DLOCK_FACT_LOOP_IO);
 * asked before open (`backend` NULL) the driver says it may, and after
 * open each client answers for itself: mode=row, fencing_durability=commit
 * and several hosts run on the core's worker threads (pg_loop.c says why).
 */
static dlock_status pg_feature_loop(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	if (code != DLOCK_FACT_LOOP_IO)
		return pg_feature(backend, kind, code, out);
	/* A blocking client answers for a loop client of its URI (DLOCK_FEATURE_LOOP_RENEWS asks any client). */
	const struct dlock_pg_backend *b = backend;
	out->value = !b || b->loop != NULL || (!b->loop_client && dlock_pg_loop_mode_fits(b));
	return DLOCK_OK;
}

/*
 * One attempt without waiting (the blocking form of try_acquire_start,
 * which the contract asks for beside it): the core calls it only where
 * acquire() does not serve, as every client says DLOCK_WAKEUP_SERVER_QUEUE
 * and no kind DLOCK_FACT_CORE_WAITS.  Advisory mode's mutexes and
 * read-write locks try once, as acquire() does for a try-once wait; what
 * else would call it waits on the server, through acquire().
 */
static dlock_status pg_try_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                   dlock_acquired *out, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	struct dlock_pg_lock *lk = lkp;
	(void)retry;
	if (b->mode != &dlock_pg_advisory_mode || lk->permits)
		return dlock_error_set(err, DLOCK_ENOTSUP, "postgres: this acquisition waits on the server (acquire)");
	return dlock_pg_adv_try_once(b, lk, lease_ms, w, out, err);
}

/* The non-blocking forms (driver contract 9): only a client whose mode runs on its loop gets these calls. */
static dlock_status pg_try_acquire_start(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                         dlock_acquired *out, dlock_error *err, dlock_call *call)
{
	return dlock_pg_loop_try_acquire(backend, lk, lease_ms, w, retry, out, err, call);
}

static dlock_status pg_release_start(void *backend, void *lk, dlock_error *err, dlock_call *call)
{
	return dlock_pg_loop_release(backend, lk, err, call);
}

static dlock_status pg_extend_start(void *backend, void *lk, int64_t lease_ms, dlock_error *err, dlock_call *call)
{
	return dlock_pg_loop_extend(backend, lk, lease_ms, err, call);
}

static dlock_status pg_check_start(void *backend, void *lk, dlock_error *err, dlock_call *call)
{
	return dlock_pg_loop_check(backend, lk, err, call);
}

/* Operations of dlock/sys/postgres.h. */
static dlock_status pg_control(void *backend, void *lkp, int op, void *arg, dlock_error *err)
{
	(void)backend, (void)err;
	if (op != DLOCK_PG_CTL_ADVISORY_KEY || !lkp)
		return DLOCK_ENOTSUP;
	*(int64_t *)arg = ((struct dlock_pg_lock *)lkp)->key;
	return DLOCK_OK;
}

#define PG_DRIVER(SCHEME)                                     \
	{                                                     \
		.abi_version = DLOCK_DRIVER_ABI_VERSION,      \
		.scheme = (SCHEME),                           \
		.lock_size = sizeof(struct dlock_pg_lock),    \
		.open = pg_open,                              \
		.close = pg_close,                            \
		.knows_param = dlock_pg_knows_param,          \
		.lock_fini = pg_lock_fini,                    \
		.acquire = pg_acquire,                        \
		.release = pg_release,                        \
		.extend = pg_extend,                          \
		.check = pg_check,                            \
		.control = pg_control,                        \
		.lock_init_kind = pg_lock_init_kind,          \
		.extend_many = pg_extend_many,                \
		.inspect = dlock_pg_inspect,                  \
		.list = dlock_pg_list,                        \
		.break_lock = dlock_pg_break,                 \
		.proclaim = dlock_pg_proclaim,                \
		.watch = dlock_pg_watch,                      \
		.unwatch = dlock_pg_unwatch,                  \
		.gc = dlock_pg_gc,                            \
		.feature = pg_feature_loop,                   \
		.try_acquire = pg_try_acquire,                \
		.try_acquire_start = pg_try_acquire_start,    \
		.release_start = pg_release_start,            \
		.extend_start = pg_extend_start,              \
		.check_start = pg_check_start,                \
	}

const dlock_driver dlock_postgres_driver = PG_DRIVER("postgres");
const dlock_driver dlock_postgresql_driver = PG_DRIVER("postgresql");
