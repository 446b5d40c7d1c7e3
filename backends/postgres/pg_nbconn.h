/*
 * PostgreSQL backend: a loop client's connection on its loop
 * (pg_nbconn.c, driver contract 9), beside the blocking connections of
 * pg_pool.c.  A struct dlock_pg_conn (its locks, lease, prepared sets,
 * `dead`, `broken` as pg_pool.c keeps them) whose libpq connection is made
 * with PQconnectStartParams and PQconnectPoll and is non-blocking
 * (PQsetnonblocking), its socket watched by the loop (dlock_io_watch()),
 * with one timer of the loop: the connection's open_timeout while it
 * connects, the io_timeout of the statement in flight after.  Statements
 * are queued and run one at a time (libpq runs one query at a time); each
 * ends once, with its result or the failure of its connection.  Never
 * included outside backends/postgres/.
 *
 * Ownership: the loop's pool (pg_loop.c) owns its connections; a request
 * is its caller's, lent from dlock_pg_nbconn_send() until its `done` is
 * called.  Threads: the loop's only, as everything of dlock_io.  Errors:
 * statuses and messages as the blocking connections give them (pg_conn.c,
 * pg_exec.c), naming the server by the masked URI, never a password.
 */
#ifndef DLOCK_PG_NBCONN_H
#define DLOCK_PG_NBCONN_H

#include "pg_backend.h"

struct dlock_pg_nbreq;

/**
 * How a request ends, once: `st` DLOCK_OK with `res` (the callback's, to
 * PQclear), or the statement's error (`sqlstate` filled when the server
 * sent one), or the failure of its connection (DLOCK_ECONNECT, the status
 * of a refused connection: DLOCK_EAUTH ...), with the message in the
 * request's `err`.  It may send requests again.
 */
typedef void dlock_pg_nbreq_fn(struct dlock_pg_nbreq *rq, dlock_status st, PGresult *res, const char *sqlstate);

/* One statement on the connection, from its send to its end. */
struct dlock_pg_nbreq {
	struct dlock_pg_nbreq *next; /* the connection's queue */
	struct dlock_pg_stmt s;      /* what to run (its values the caller's, alive until `done`) */
	dlock_pg_nbreq_fn *done;
	dlock_error *err;            /* where its message goes */
	int64_t sent_ns;             /* when its statement went out (0: not yet) */
	int phase;                   /* pg_nbconn.c: the prepared sets, their DEALLOCATE, the statement */
	dlock_status failed_st;      /* the prepared sets' failure, while DEALLOCATE runs */
	char sqlstate[6];
};

/* A connection of the loop. */
struct dlock_pg_nbconn {
	struct dlock_pg_conn c;          /* first member: locks point here (lk->conn) */
	struct dlock_pg_backend *b;
	struct dlock_pg_nbloop *loop;
	int fd;                          /* watched, -1 none */
	unsigned events;                 /* what is watched on fd */
	int connecting;
	int failed;                      /* failing: its requests end on the timer's next turn */
	dlock_status fail_st;
	char fail_msg[DLOCK_ERROR_MAX];
	dlock_io_timer *timer;
	int64_t connect_deadline_ns;
	struct dlock_pg_nbreq *head, *tail; /* head: in flight once sent */
	PGresult *keep;                  /* head's result so far */
	unsigned users;                  /* attempts in progress on it (pg_loop.c) */
	int idle_listed;                 /* on the pool's idle list */
	int64_t idle_since_ns;
	struct dlock_pg_nbconn *next;    /* the pool's list of every connection */
};

/* What the loop's connections share: the loop, the keywords (hostaddr added), and who settles them. */
struct dlock_pg_nbloop {
	dlock_io *io;
	/* Held by the loop's thread inside every handler (recursive), and by a worker that runs a blocking
	 * method on a loop's connection (pg_loop.c); `quiet` is broadcast after each handler. */
	pthread_mutex_t mu;
	pthread_cond_t quiet;
	struct dlock_pg_params params;
	/* Called once a connection's handler is done with it (requests ended, failure reported): the pool
	 * may close it now (dlock_pg_nbconn_free). */
	void (*settle)(struct dlock_pg_nbloop *loop, struct dlock_pg_nbconn *nb);
};

/** A new connection, connecting without waiting (its requests go once it is up).  DLOCK_OK, DLOCK_ENOMEM,
 *  or the failure to start (DLOCK_ECONNECT ...). */
dlock_status dlock_pg_nbconn_new(struct dlock_pg_backend *b, struct dlock_pg_nbloop *loop,
                                 struct dlock_pg_nbconn **out, dlock_error *err);
/** Queue `rq` (its `s`, `done` and `err` set): it ends later, never inside this call.  DLOCK_ECONNECT (and
 *  no end) when the connection is already gone. */
dlock_status dlock_pg_nbconn_send(struct dlock_pg_nbconn *nb, struct dlock_pg_nbreq *rq, dlock_error *err);
/** 1 when `nb` has no request queued or in flight. */
int dlock_pg_nbconn_quiet(const struct dlock_pg_nbconn *nb);
/** End every request (DLOCK_ECONNECT, "the client closed"), stop watching, PQfinish, free.  NULL is fine. */
void dlock_pg_nbconn_free(struct dlock_pg_nbconn *nb);

#endif
