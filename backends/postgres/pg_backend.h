/*
 * postgres:// and postgresql:// — shared declarations of the PostgreSQL
 * backend (libpq).  One job per file:
 *
 *   pg.c           the driver objects and their methods
 *   pg_error.c     libpq's failures: a SQLSTATE's status, a message on one line
 *   pg_conn.c      URI -> libpq keywords, connecting, connection errors
 *   pg_exec.c      one statement with a deadline and cancellation
 *   pg_pool.c      the client's connections: idle, shared, pinned; work on one, tried again once
 *   pg_setup.c     the fencing sequence and the lock table, and who may use them
 *   pg_advisory.c  mode=advisory (default): session advisory locks
 *   pg_row.c       mode=row: SELECT ... FOR UPDATE in an open transaction
 *   pg_sem.c       mode=advisory: semaphores (N slot keys in the two-int key space)
 *   pg_row_sem.c   mode=row: semaphores (N slot rows)
 *   pg_hash.c      the 64-bit advisory key of a name
 *   pg_owner.c     the owner of a session, in its application_name
 *   pg_names.c     advisory mode: the names behind the keys, for listing
 *   pg_inspect.c   who holds a name, listing, breaking (advisory mode)
 *   pg_elect.c     elections (advisory mode): the leaders' table, proclaim, the channel of a name
 *   pg_watch.c     elections: the client's LISTEN connection and its thread (watch, unwatch)
 *   pg_nbconn.c    a loop client's connection on its loop (non-blocking libpq)
 *   pg_loop.c      a loop client's lock calls on its loop (driver contract 9), advisory mode
 *
 * Connections and locks.  A lock belongs to the connection (the server
 * session) that took it, so the client keeps a small pool:
 *
 *   - A connection that holds a lock is pinned: it stays with its locks
 *     until the last of them is released, and only statements about those
 *     locks run on it (release, heartbeat, check), one at a time.
 *   - In advisory mode a pinned connection also takes further try-once
 *     locks of the same lease, up to DLOCK_PG_SESSION_LOCKS_MAX, so a
 *     client holding many locks needs few connections, and none of them
 *     so many locks that each statement on it slows down.  An acquire that may wait runs on a connection of its
 *     own (an idle one, or a new one), because a waiting statement blocks
 *     its connection; once it gets the lock that connection is pinned too.
 *     Before it waits, a waiting acquire tries once on a pinned connection
 *     (a free lock then costs no extra connection).
 *   - In row mode every held lock is an open transaction, and a
 *     transaction cannot give back one row lock and keep the others: each
 *     held lock has its connection to itself.
 *   - A connection that holds nothing goes back to the idle list (a few
 *     are kept, the rest closed).
 *   - No session ever takes an advisory key it holds already, so
 *     PostgreSQL's per-session reentrancy never comes into play.  The core
 *     never asks for a name this client holds or is acquiring, except a
 *     reader beside the client's own readers (read-write locks); a session
 *     that holds the key in any mode is then never offered for the attempt
 *     (dlock_pg_pool_share), so each reader holds on a session of its own.
 *     On one session a second shared lock of a key would be granted at
 *     once even while another client's writer waits (breaking
 *     writer-first), and an exclusive one beside the session's own shared
 *     lock would be granted at once (breaking exclusion).  A semaphore's
 *     acquisition always runs on a session that holds nothing (pg_sem.c,
 *     pg_row_sem.c), so no session holds two permits of one name.
 *
 * Lease.  The server enforces it: a holding session gets
 * idle_session_timeout (advisory) or idle_in_transaction_session_timeout
 * (row) equal to the longest lease of its locks, and the core's renewal
 * (extend) sends a heartbeat statement on that connection at a third of
 * the lease, which resets the server's idle timer.  A session that stops
 * talking is ended by the server and its locks freed.  Any connection
 * failure makes every lock of that connection lost (dlock_report_lost).
 *
 * A loop client (driver contract 9) of advisory mode and one host keeps
 * a second pool of its own, on its loop (pg_loop.c, pg_nbconn.c): the same
 * rules on non-blocking connections, whose struct dlock_pg_conn says
 * on_loop; the blocking methods reach those only through
 * dlock_pg_loop_blocking().
 *
 * Locking inside the backend: pool->mu guards the lists and the fields
 * marked below; conn->mu serialises the statements of one connection.
 * Order: conn->mu before pool->mu; nothing else is taken under pool->mu
 * except the core's own lock inside dlock_report_lost().
 */
#ifndef DLOCK_PG_BACKEND_H
#define DLOCK_PG_BACKEND_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/sys/driver.h"

#define DLOCK_PG_SEQUENCE "dlock_fence"
#define DLOCK_PG_TABLE_DEFAULT "dlock_locks"
#define DLOCK_PG_NAMES "dlock_names" /* advisory mode: key -> name, for listing (pg_names.c) */
#define DLOCK_PG_NAMES_FRESH_S 600   /* a client writes a name again after this long; gc waits twice that */
#define DLOCK_PG_IDLE_MAX 4
/* Most locks one advisory session takes on by sharing: every statement on a session costs more the
 * more locks it holds (a SELECT 1 took 133 us with none, 866 us with 10,000), so a client holding
 * many spreads them over sessions of at most this many. */
#define DLOCK_PG_SESSION_LOCKS_MAX 1000
#define DLOCK_PG_ROW_SEM_SQL 5 /* insert, enter, enter with a token, retry, retry with a token */
#define DLOCK_PG_ROW_SEM_ARGS "(bytea, int4, int4, int4, text)"
#define DLOCK_PG_ROW_SEM_ARGS4 "(bytea, int4, int4, int4)"

/*
 * Prepared statements come in two sets, so that a session never prepares
 * a statement naming the fencing sequence unless a token is wanted (a role
 * that may not use the sequence, or a database without it, then never
 * meets it): PLAIN, the statements without a token; TOKEN, those that
 * call nextval.  A statement of the TOKEN set prepares the PLAIN set along
 * in the same round trip (release needs it anyway).
 */
#define DLOCK_PG_SET_PLAIN 1u
#define DLOCK_PG_SET_TOKEN 2u

/*
 * fencing_durability=commit (pg.c): the token expression `seq` (a nextval)
 * in a statement whose commit is durable before its answer leaves the
 * server.  nextval writes WAL once per 33 values and only then makes its
 * transaction wait at commit; a transaction that merely has an id (as
 * txid_current() gives) but wrote no WAL commits without flushing or
 * waiting either.  So the statement writes a small transactional WAL record
 * of its own, pg_logical_emit_message(true, 'dlock', '') (a logical
 * decoding client sees it, with prefix "dlock" and no content): its
 * transaction then has an id and WAL, and its commit record, which comes
 * after the sequence's latest record in the WAL, is flushed and, with
 * synchronous replication, waited for on the synchronous standbys.
 * synchronous_commit is raised to `on` for this transaction only (SET
 * LOCAL; `remote_apply` kept).  The server sends the statement's result
 * only with ReadyForQuery, after the commit, so the token reaches the
 * caller only once it is that durable; a cancelled wait (whose commit
 * PostgreSQL reports as done, with a warning) never returns a token
 * (pg_advisory.c, pg_sem.c: a cancelled acquisition ends its session).
 */
#define DLOCK_PG_DURABLE(seq)                                                                             \
	"CASE WHEN set_config('synchronous_commit', CASE current_setting('synchronous_commit') "            \
	"WHEN 'remote_apply' THEN 'remote_apply' ELSE 'on' END, true) IS NULL THEN NULL "                   \
	"WHEN pg_logical_emit_message(true, 'dlock', '') IS NULL THEN NULL ELSE " seq " END"

struct dlock_pg_lock;

/* One libpq connection of a client. */
struct dlock_pg_conn {
	PGconn *pg;
	PGcancel *cancel;
	int wake_fd;               /* eventfd: a cancelled wait wakes the statement's poll */
	atomic_int interrupted;    /* the acquire waiting on this connection was cancelled */
	pthread_mutex_t mu;        /* one statement at a time */
	int dead;                  /* (mu) libpq lost the connection or a statement timed out */
	unsigned prepared;         /* (mu) DLOCK_PG_SET_* bits: the sets prepared in this session */
	int64_t idle_set_ms;       /* (mu) advisory: the session's idle_session_timeout; -1 unknown */

	/* Guarded by pool->mu (the lock list: by both mutexes to change it). */
	struct dlock_pg_conn *next; /* in the idle or shared list */
	int listed;                 /* which list: see pg_pool.c */
	unsigned users;             /* threads using it besides its locks */
	int broken;                 /* its locks were reported lost; never reused */
	struct dlock_pg_lock *locks;
	unsigned nlocks;
	int64_t lease_ms;           /* the longest lease of its locks (shared: of the last) */
	int64_t idle_since_ns;      /* when it went on the idle list */
	int on_loop;                /* a loop client's (pg_nbconn.c): never used by the blocking methods */
};

/* Per-lock state (the driver's lock_size bytes). */
struct dlock_pg_lock {
	struct dlock_pg_conn *conn;       /* while held */
	struct dlock_pg_lock *next_on_conn;
	int64_t lease_ms;                 /* of the current acquisition */
	int fencing;                      /* row mode: the current acquisition wants a token */
	int shared;                       /* the current acquisition is a reader's (DLOCK_MODE_SHARED) */
	int rwlock;                       /* a read-write lock's handle: its writers hold DLOCK_PG_RW_WRITER too */
	int64_t key;                      /* advisory key */
	int32_t sem_hi, sem_base;         /* the name's two-int keys (pg_hash.c): classid, objid of slot 0 */
	uint32_t permits;                 /* a semaphore's N; 0 for a mutex or read-write lock */
	uint32_t slot;                    /* a semaphore: the held permit's slot */
	char *row_name;                   /* prefix ":" name (bytes): row mode's key, advisory mode's dlock_names */
	size_t row_len;
	int row_exists;                   /* row mode: the row was seen */
	uint64_t token;                   /* advisory: the current acquisition's token (0 none): a leader's term */
	int proclaimed;                   /* advisory: the current acquisition wrote its row to dlock_leaders */
	struct dlock_pg_loop_op *loop_op; /* a loop client's: its call on the loop (pg_loop.c), or NULL */
};

struct dlock_pg_pool {
	pthread_mutex_t mu;
	struct dlock_pg_conn *idle;   /* holding nothing */
	struct dlock_pg_conn *shared; /* advisory: pinned, open to more try-once locks */
	size_t nidle;
};

/* libpq keyword/value arrays for PQconnectStartParams (NULL-terminated). */
struct dlock_pg_params {
	const char **keys;
	const char **values;
	size_t n;
	char *text; /* storage for the values built here */
};

struct dlock_pg_backend;

/* What differs between the modes. */
struct dlock_pg_mode {
	const char *name;
	/* The mode's PREPAREs, indexed by DLOCK_PG_SET_* bits (see
	 * dlock_pg_backend.prepare); NULLs: built when the client opens. */
	const char *prepare[4];
	/* The same with fencing_durability=commit (pg.c), or NULLs: the mode cannot have it. */
	const char *prepare_durable[4];
	dlock_driver_acquire_fn *acquire;
	dlock_driver_release_fn *release;
	dlock_driver_extend_fn *extend;
	dlock_driver_check_fn *check;
	dlock_driver_extend_many_fn *extend_many; /* or NULL: extend() per lock */
};

struct dlock_pg_backend {
	dlock_host *host;
	const struct dlock_pg_mode *mode;
	const char *masked;        /* the URI, password masked (the core's string) */
	const char *prefix;
	int64_t open_timeout_ms;   /* for one whole connection attempt over every host */
	int64_t io_timeout_ms;
	struct dlock_pg_params params;
	int fencing;               /* the URI's `fencing`: open sets the sequence up */
	int durable;               /* fencing_durability=commit: a token returns once its commit did (pg.c) */
	atomic_int fence_ready;    /* the sequence exists and this role may use it (seen once) */
	char *table;               /* row mode: quoted identifier */
	char *sql_row_insert, *sql_row_try, *sql_row_wait, *sql_row_try_token, *sql_row_wait_token;
	char *sql_row_try_shared, *sql_row_wait_shared; /* row mode: a reader's FOR SHARE */
	char *sql_row_prepare[4];  /* row mode: its PREPAREs by DLOCK_PG_SET_* bits */
	char *sql_row_sem[DLOCK_PG_ROW_SEM_SQL]; /* row mode: a semaphore's statements (pg_row_sem.c) */
	/* What a session runs before its first prepared statement of a set
	 * (simple protocol, several statements), indexed by the DLOCK_PG_SET_*
	 * bits of the sets it lacks; prepare[1] NULL: statements go unnamed.
	 * Set while the client opens, read-only after. */
	const char *prepare[4];
	struct dlock_pg_pool pool;
	atomic_int names_ready;    /* advisory: dlock_names exists and this role may insert (pg_names.c) */
	atomic_int names_listed;   /* advisory: dlock_names exists (listing joins it) */
	atomic_int names_fresh;    /* advisory: dlock_names has `seen`, which writes move (gc may collect) */
	atomic_int names_upsert;   /* advisory: this role may move `seen` (UPDATE): writes are upserts */
	pthread_mutex_t names_mu;  /* guards the cache of keys whose name is written */
	int64_t *names_seen;
	size_t names_cap, names_n;
	int64_t names_since_ns;    /* when the cache started (monotonic); forgotten DLOCK_PG_NAMES_FRESH_S later */
	atomic_int leaders;        /* advisory: DLOCK_PG_LEADERS_* bits of dlock_leaders (pg_elect.c) */
	pthread_mutex_t watch_mu;  /* guards `listener` being made */
	struct dlock_pg_listener *listener; /* elections: the LISTEN connection's thread, once watched (pg_watch.c) */
	struct dlock_pg_loop *loop; /* a loop client's lock calls on its loop (pg_loop.c), or NULL: blocking */
	int loop_client;            /* opened by a loop client, on the loop or not (DLOCK_FACT_LOOP_IO) */
};

/* pg_hash.c */
/** prefix ":" name, malloc'd (NUL-terminated, length in *outlen); NULL when out of memory. */
char *dlock_pg_namespaced(const char *prefix, const char *name, size_t len, size_t *outlen);
/** The advisory key of a namespaced name: first 8 bytes of its SHA-256, big-endian. */
int64_t dlock_pg_key(const char *namespaced, size_t len);
/** Its two-int keys (bytes 8..15 of the SHA-256): classid `hi`, and `base`, the objid of slot 0. */
void dlock_pg_sem_keys(const char *namespaced, size_t len, int32_t *hi, int32_t *base);

/* pg_owner.c */
#define DLOCK_PG_APP_NAME_SIZE 64 /* NAMEDATALEN: 63 bytes and the NUL */
/** The application_name of the client whose owner record (dlock_host_owner) is `record`. */
void dlock_pg_app_name(const char *record, size_t len, char out[DLOCK_PG_APP_NAME_SIZE]);
/**
 * Back from a session's application_name to an owner record (for
 * dlock_info_holder) in rec (cap >= 3 * DLOCK_PG_APP_NAME_SIZE); the
 * client's address as the server sees it stands for the host when the
 * name does not carry it.  Its length, 0 when `app` is not dlock's.
 */
size_t dlock_pg_app_owner(const char *app, const char *client_host, char *rec, size_t cap);

/* pg_error.c */
/** The status of a SQLSTATE (28P01 -> EAUTH, 3D000 -> ENOTFOUND, 55P03 -> EBUSY ...). */
dlock_status dlock_pg_sqlstate_status(const char *sqlstate);
/** libpq's text (several lines, tab-indented) on one line into `out`: lines joined by "; ", every
 *  run of blanks one space, LOCATION lines dropped. */
void dlock_pg_one_line(const char *msg, char *out, size_t outlen);

/* pg_conn.c */
int dlock_pg_knows_param(const char *key);
/** Build the libpq keywords of `uri`, with `app_name` (pg_owner.c; NULL: none) unless the URI gives
 *  application_name; DLOCK_EURI for a bad value. */
dlock_status dlock_pg_params_build(const dlock_uri *uri, const char *app_name, struct dlock_pg_params *p,
                                   dlock_error *err);
void dlock_pg_params_free(struct dlock_pg_params *p);
/** Connect within open_timeout; maps the failure (EAUTH, ENOTFOUND, ECONNECT ...). */
dlock_status dlock_pg_connect(const struct dlock_pg_backend *b, PGconn **out, dlock_error *err);
/** PQconnectStartParams with `p`, verbose errors and quiet notices (pg_nbconn.c polls it too); NULL: no memory. */
PGconn *dlock_pg_connect_start(const struct dlock_pg_params *p);
/** A connection attempt failed: its status (EAUTH, ENOTFOUND, ECONNECT ...) and message; PQfinish(pg). */
dlock_status dlock_pg_connect_failed(const struct dlock_pg_backend *b, PGconn *pg, dlock_error *err);
/** A connection just made: refused when it is a hot standby (the caller closes it); else errors back to default. */
dlock_status dlock_pg_connected(const struct dlock_pg_backend *b, PGconn *pg, dlock_error *err);
/** How many hosts the keywords list (1 without `host`). */
size_t dlock_pg_params_hosts(const struct dlock_pg_params *p);
/** The value of keyword `key`, or NULL. */
const char *dlock_pg_params_get(const struct dlock_pg_params *p, const char *key);
/** `p` with hostaddr=`addr` added (NULL: none), into *out, which refers to p's strings: free *out first. */
dlock_status dlock_pg_params_hostaddr(const struct dlock_pg_params *p, const char *addr, struct dlock_pg_params *out);

/* pg_exec.c */
/**
 * A statement: its text, or the name of one of the statements of
 * b->prepare (used when that is set; sql may then be NULL), of the TOKEN
 * set when `token`; then up to 8 parameters (binary when len >= 0, text
 * when -1; NULL values are SQL NULL).  With `begin`, a BEGIN goes first in
 * the same round trip (libpq's pipeline mode) and the transaction stays
 * open after the statement, also when it failed.
 */
struct dlock_pg_stmt {
	const char *sql;
	const char *prepared;
	int token;
	int begin;
	int unsynced;     /* its own transaction, committed without waiting for a synchronous standby (a write
	                     whose loss in a failover costs nothing, which must not stall on a standby) */
	int n;
	const Oid *types; /* of the parameters of an unnamed statement; NULL: the server infers them */
	const char *values[8];
	int lengths[8];
	int formats[8];
};
/**
 * Run `s` on `c` (c->mu held) and wait for its result until `deadline_ns`
 * (INT64_MAX: no limit), sending the server a cancel request while
 * c->interrupted is set.  DLOCK_OK with *res (tuples or command ok; the
 * caller clears it); DLOCK_ESERVER (or the status of its SQLSTATE) with
 * `sqlstate` filled; DLOCK_ECONNECT with c->dead set when the connection is
 * gone or the deadline passed.
 */
dlock_status dlock_pg_exec(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_stmt *s,
                           int64_t deadline_ns, PGresult **res, char sqlstate[6], dlock_error *err);
/** Same with the deadline io_timeout from now, the result dropped. */
dlock_status dlock_pg_run(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_stmt *s,
                          char sqlstate[6], dlock_error *err);
/** Connection `c` failed: c->dead set, DLOCK_ECONNECT and libpq's message in `err`. */
dlock_status dlock_pg_lost(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_error *err);
/** Sort out a statement's result `r` (owned): DLOCK_OK with *res = r, else its error, as dlock_pg_exec. */
dlock_status dlock_pg_outcome(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, PGresult *r,
                              PGresult **res, char sqlstate[6], dlock_error *err);
/** Of the results of one statement, the one to keep, `keep` or the next `r` (the first error wins). */
PGresult *dlock_pg_keep_result(PGresult *keep, PGresult *r);
/** Send `s` (PQsendQuery*), by name when the session prepares statements: libpq's answer (1 sent). */
int dlock_pg_send_stmt(const struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_stmt *s);
/** The DLOCK_PG_SET_* sets `s` needs (when b->prepare is set and s->prepared) that `c` lacks. */
unsigned dlock_pg_sets_missing(const struct dlock_pg_conn *c, const struct dlock_pg_stmt *s);
/** Deadline io_timeout from now. */
int64_t dlock_pg_io_deadline(const struct dlock_pg_backend *b);
/** Deadline of a waiting statement: the wait's, plus io_timeout (INT64_MAX stays). */
int64_t dlock_pg_wait_deadline(const struct dlock_pg_backend *b, const dlock_wait *w);
/** DLOCK_EINVAL for a lease the server's timeouts cannot hold (over INT_MAX ms). */
dlock_status dlock_pg_lease_ok(int64_t lease_ms, dlock_error *err);
/** Arm cancellation of the statement about to wait on `c` (see dlock_wait_set_interrupt). */
void dlock_pg_interrupt_arm(struct dlock_pg_conn *c, dlock_wait *w);
/** Disarm it; returns 1 if the acquire was cancelled meanwhile. */
int dlock_pg_interrupt_disarm(struct dlock_pg_conn *c, dlock_wait *w);
/** Milliseconds as a decimal string for a GUC (clamped to 1..INT_MAX, 0 stays 0). */
void dlock_pg_ms_text(int64_t ms, char out[24]);
/** The decimal integer `text` (a server's int8 column; 0 for anything else), without scanf's cost. */
int64_t dlock_pg_text_int(const char *text);
/** The first integer column of the first row (0 if NULL); *isnull set. */
int64_t dlock_pg_int_value(const PGresult *res, int *isnull);

/* pg_pool.c */
void dlock_pg_pool_init(struct dlock_pg_pool *p);
void dlock_pg_pool_destroy(struct dlock_pg_pool *p);
/** Close a connection made by dlock_pg_conn_open() that is in no pool (NULL is fine). */
void dlock_pg_conn_close(struct dlock_pg_conn *c);
/** Make a connection (not pooled yet: use dlock_pg_pool_put). */
dlock_status dlock_pg_conn_open(const struct dlock_pg_backend *b, struct dlock_pg_conn **out, dlock_error *err);
/**
 * An idle connection that seems alive (only when *reused is 1 on entry),
 * or a new one; the caller is its user.  *reused says which it got.
 */
dlock_status dlock_pg_pool_take(struct dlock_pg_backend *b, int *reused, struct dlock_pg_conn **out,
                                dlock_error *err);
/**
 * A pinned connection set for `lease_ms` that no thread is using now and that holds no lock of
 * advisory key `key`, to share; NULL if none.
 */
struct dlock_pg_conn *dlock_pg_pool_share(struct dlock_pg_backend *b, int64_t lease_ms, int64_t key);
/** Stop using `c`: it goes where it belongs (idle, shared, kept by its locks, or closed). */
void dlock_pg_pool_put(struct dlock_pg_backend *b, struct dlock_pg_conn *c);
/** `lk` is now held on `c` (c->mu held). */
void dlock_pg_pool_hold(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk);
/** `lk` no longer held (c->mu held); the caller becomes a user of its connection. */
void dlock_pg_pool_unhold(struct dlock_pg_backend *b, struct dlock_pg_lock *lk);
/** The connection is unusable: report every lock on it lost, never reuse it. */
void dlock_pg_pool_broken(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *detail);
/** The longest lease of the locks on `c`, at least `with_ms` (c->mu held). */
int64_t dlock_pg_conn_lease(const struct dlock_pg_conn *c, int64_t with_ms);
/** The acquisition of `lk` as a work function's `arg` (pg_advisory.c, pg_row.c, pg_sem.c, pg_row_sem.c). */
struct dlock_pg_attempt {
	struct dlock_pg_lock *lk;
	dlock_wait *w;  /* NULL: try once */
	int fencing;    /* take a token */
	dlock_acquired *out;
};
/** Work on connection `c` with c->mu held: its status; it may leave c->dead set (see dlock_pg_pool_use). */
typedef dlock_status dlock_pg_work_fn(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg,
                                      dlock_error *err);
/**
 * Run `work` on `c`, a connection the caller is a user of (from dlock_pg_pool_take or _share), with
 * c->mu held; if it leaves c->dead, report c broken with err->msg; then put c back.  Returns its status.
 */
dlock_status dlock_pg_pool_use(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_pg_work_fn *work,
                               void *arg, dlock_error *err);
/**
 * Run `work` on a connection that holds nothing (an idle one, or a new one), as dlock_pg_pool_use does;
 * once more on a new connection when a reused one broke (DLOCK_ECONNECT).  The status of the last try,
 * or of the failure to connect.
 */
dlock_status dlock_pg_pool_run(struct dlock_pg_backend *b, dlock_pg_work_fn *work, void *arg, dlock_error *err);
/** One statement, its result and its SQLSTATE: the `arg` of dlock_pg_query_on. */
struct dlock_pg_query {
	const struct dlock_pg_stmt *s;
	PGresult **res;
	char *sqlstate; /* [6] */
};
/** The work of dlock_pg_pool_query: dlock_pg_exec of the dlock_pg_query `arg` with the deadline io_timeout. */
dlock_status dlock_pg_query_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err);
/** One statement run as dlock_pg_pool_run runs work, with the deadline io_timeout; answers as dlock_pg_exec. */
dlock_status dlock_pg_pool_query(struct dlock_pg_backend *b, const struct dlock_pg_stmt *s, PGresult **res,
                                 char sqlstate[6], dlock_error *err);

/* pg_setup.c */
/** At open, on `c`: the lock table (row mode) and, when the URI's fencing is on, the sequence. */
dlock_status dlock_pg_setup(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *table_raw,
                            dlock_error *err);
/** Before a statement that takes a token, on `c` (c->mu held): the sequence, once per client. */
dlock_status dlock_pg_fence(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_error *err);
/**
 * After a statement that took a token failed with `sqlstate`: when the
 * role may not use (or create) the sequence, `err` gets the GRANT to run
 * and the result is DLOCK_EPERM; otherwise `st` and `err` are kept.
 */
dlock_status dlock_pg_fence_failed(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                   const char *sqlstate, dlock_error *err);

/* pg_names.c */
/** At open (advisory mode), on `c`: dlock_names created if missing and the role may; never fails but
 *  for a lost connection. */
/**
 * Create optional objects, the statements ddl[0..n) (CREATE ... IF NOT
 * EXISTS), in one transaction serialised with other clients' setup; rolled
 * back on failure (a role that may not create them), quietly: the caller
 * then does without.  c->mu held.
 */
dlock_status dlock_pg_create_optional(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const char *const *ddl,
                                      size_t n);
dlock_status dlock_pg_names_setup(struct dlock_pg_backend *b, struct dlock_pg_conn *c);
/** Before `lk` is taken on `c` (c->mu held): its name written, once per name per client.  Only
 *  DLOCK_ECONNECT (c->dead) fails. */
dlock_status dlock_pg_names_write(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_lock *lk,
                                  dlock_error *err);
void dlock_pg_names_free(struct dlock_pg_backend *b);
struct dlock_pg_args;
/** The write of lk's name when one is due (1; 0: none), `folded` for one statement with no pipeline
 *  (pg_loop.c); then dlock_pg_names_written() with its answer. */
int dlock_pg_names_stmt(struct dlock_pg_backend *b, const struct dlock_pg_lock *lk, int folded,
                        struct dlock_pg_args *a, struct dlock_pg_stmt *s);
void dlock_pg_names_written(struct dlock_pg_backend *b, const struct dlock_pg_lock *lk, dlock_status st,
                            const char *sqlstate);

/* pg_elect.c */
#define DLOCK_PG_LEADERS "dlock_leaders"
#define DLOCK_PG_LEADERS_READ 1u  /* the table exists and the role may SELECT it: inspection shows values */
#define DLOCK_PG_LEADERS_WRITE 2u /* ... and INSERT, UPDATE, DELETE: this client may proclaim */
#define DLOCK_PG_CHANNEL_SIZE 32
/** At open (advisory mode), on `c`: dlock_leaders created if missing and the role may; never fails but for a
 *  lost connection. */
dlock_status dlock_pg_leaders_setup(struct dlock_pg_backend *b, struct dlock_pg_conn *c);
/** The driver's proclaim(). */
dlock_status dlock_pg_proclaim(void *backend, void *lk, const char *value, size_t len, dlock_error *err);
/** The NOTIFY channel of the advisory key `key` ("dlock_leader_" and 16 hex digits: never the name). */
void dlock_pg_leader_channel(int64_t key, char out[DLOCK_PG_CHANNEL_SIZE]);
/** The release of a lock that proclaimed: $1 key, $2 idle timeout or NULL, $3 channel; answers as dlock_unlock. */
extern const char dlock_pg_sql_resign[];
/** Tell the observers of `key` that it may have changed (after a break): one statement on `c` (c->mu held). */
dlock_status dlock_pg_leader_notify(struct dlock_pg_backend *b, struct dlock_pg_conn *c, int64_t key,
                                    dlock_error *err);

/* pg_watch.c */
dlock_status dlock_pg_watch(void *backend, const char *name, size_t len, void (*changed)(void *arg), void *arg,
                            void **watch, dlock_error *err);
void dlock_pg_unwatch(void *backend, void *watch);
/** Stop the LISTEN thread and close its connection (closing the client; every watch already disarmed). */
void dlock_pg_listener_free(struct dlock_pg_listener *l);

/* pg_inspect.c */
dlock_status dlock_pg_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err);
dlock_status dlock_pg_list(void *backend, dlock_info *info, dlock_error *err);
dlock_status dlock_pg_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err);
/** DLOCK_FEATURE_INSPECT, _BREAK, _GC and _ELECTION of the client (they change as the server shows what it
 *  allows); DLOCK_ENOTSUP for another feature. */
dlock_status dlock_pg_feature(struct dlock_pg_backend *b, int feature, int64_t *value);

/* pg_gc.c */
dlock_status dlock_pg_gc(void *backend, const char *prefix, size_t len, unsigned flags, dlock_gc_removed_fn *removed,
                         void *arg, size_t *count, dlock_error *err);

/* pg_sem.c */
/** A semaphore's permit (lk->permits > 0), advisory mode: the mode's methods hand over to these. */
dlock_status dlock_pg_sem_acquire(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                  dlock_wait *w, dlock_acquired *out, dlock_error *err);
/** The same, trying once unless `waits` (then within w's deadline). */
dlock_status dlock_pg_sem_acquire_as(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                     dlock_wait *w, int waits, dlock_acquired *out, dlock_error *err);
dlock_status dlock_pg_sem_release(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err);
dlock_status dlock_pg_sem_check(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err);
/** Sleep until a notification, `ms`, the wait's deadline (DLOCK_ETIMEDOUT) or cancellation (c->mu held). */
dlock_status dlock_pg_sem_sleep(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_wait *w, int64_t ms,
                                dlock_error *err);
/* pg_row_sem.c */
dlock_status dlock_pg_row_sem_prepare(struct dlock_pg_backend *b, dlock_error *err);
dlock_status dlock_pg_row_sem_acquire(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                      dlock_wait *w, dlock_acquired *out, dlock_error *err);
/** The two-int objid offsets from sem_base: slots 0..1023, a marker per N, the semaphores' common key. */
#define DLOCK_PG_SEM_MARK 1023 /* + N: held shared by holders and waiters of a semaphore of N */
#define DLOCK_PG_SEM_ANY 2048  /* held shared by every holder and waiter of a semaphore of the name */
#define DLOCK_PG_SEM_READER 2049 /* row mode: held shared by every reader of a read-write lock */
#define DLOCK_PG_RW_WRITER 2050  /* advisory mode: held shared by a read-write lock's writer beside the name's
                                    key, which alone cannot tell it from a mutex (pg_inspect.c) */

/* pg_advisory.c: each statement built, and its result read, by one function for the blocking
 * methods and the loop's (pg_loop.c) alike.  The parameters' text lives in struct dlock_pg_args. */
struct dlock_pg_args {
	char key[24], lease[24], wait[24], hi[24], base[24];
	char channel[DLOCK_PG_CHANNEL_SIZE];
	const char *idle;  /* the idle timeout to send, or NULL */
	int64_t idle_ms;
};
/** An attempt of `lk` (lk->lease_ms, lk->shared set) on `c`: try once when `wait_ms` < 0, else wait so long. */
void dlock_pg_adv_attempt_stmt(const struct dlock_pg_conn *c, const struct dlock_pg_lock *lk, int fencing,
                               int64_t wait_ms, struct dlock_pg_args *a, struct dlock_pg_stmt *s);
/** The attempt's answer `st` (`res` when DLOCK_OK; sent at `sent`): held on `c` (*out filled), EBUSY, or a
 *  failure after which the caller undoes it (dlock_pg_adv_undo_stmt) unless EBUSY or c->dead. */
dlock_status dlock_pg_adv_settle(struct dlock_pg_backend *b, struct dlock_pg_conn *c, struct dlock_pg_lock *lk,
                                 dlock_status st, const PGresult *res, int64_t sent, dlock_acquired *out,
                                 int64_t idle_ms, dlock_error *err);
/** One try-once acquisition of a mutex or read-write lock `lk`, as acquire() makes it (the blocking try_acquire). */
dlock_status dlock_pg_adv_try_once(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                   dlock_wait *w, dlock_acquired *out, dlock_error *err);
/** The unlock of an attempt that failed after it may have locked. */
void dlock_pg_adv_undo_stmt(const struct dlock_pg_lock *lk, struct dlock_pg_args *a, struct dlock_pg_stmt *s);
/** The release of `lk`, already unheld from `c` (dlock_pg_pool_unhold), and its answer. */
void dlock_pg_adv_release_stmt(const struct dlock_pg_conn *c, struct dlock_pg_lock *lk, struct dlock_pg_args *a,
                               struct dlock_pg_stmt *s);
dlock_status dlock_pg_adv_release_result(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                         const PGresult *res, const struct dlock_pg_args *a, dlock_error *err);
/** The heartbeat of `c`'s session (its idle timeout: the longest lease of its locks), and its answer. */
void dlock_pg_adv_beat_stmt(const struct dlock_pg_conn *c, struct dlock_pg_args *a, struct dlock_pg_stmt *s);
dlock_status dlock_pg_adv_beat_result(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                      const struct dlock_pg_args *a, dlock_error *err);
/** Whether the session holds `lk`, and its answer. */
void dlock_pg_adv_check_stmt(const struct dlock_pg_lock *lk, struct dlock_pg_args *a, struct dlock_pg_stmt *s);
dlock_status dlock_pg_adv_check_result(struct dlock_pg_backend *b, struct dlock_pg_conn *c, dlock_status st,
                                       const PGresult *res, dlock_error *err);

/* pg_advisory.c, pg_row.c */
extern const struct dlock_pg_mode dlock_pg_advisory_mode;
extern const struct dlock_pg_mode dlock_pg_row_mode;
/** Build the row-mode statements for the quoted table b->table, and their PREPAREs by set. */
dlock_status dlock_pg_row_prepare(struct dlock_pg_backend *b, dlock_error *err);

#endif
