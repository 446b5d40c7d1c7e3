/*
 * Redis backend: a loop client's connection on its loop (redis_nbconn.c),
 * beside the blocking connections (redis_conn.h), on the same bytes
 * (struct redis_conn: hiredis's reader, our formatter, TLS) with a
 * non-blocking socket whose readiness the loop watches (dlock_io_watch())
 * and one timer of the loop for the oldest request.  Requests are
 * pipelined and answered in order; each ends once, with its reply or with
 * the failure of its connection.  Never included outside backends/redis/.
 *
 * Ownership: the client owns its struct redis_nbconn (made at open, freed
 * at close); a request is its caller's, lent from dlock_redis_nbconn_send()
 * until its `answer` is called.  Threads: the loop's only, as everything
 * of dlock_io.  Errors: statuses and messages as the blocking connections
 * give them (redis_conn.h), naming the server by its label, never a
 * password.
 */
#ifndef DLOCK_REDIS_NBCONN_H
#define DLOCK_REDIS_NBCONN_H

#include <stdint.h>

#include "redis_conn.h"

struct redis_nbreq;

/**
 * How a request ends, once: with its reply `r` (any type, error replies
 * too; the callback's, to free), or, `r` NULL, with the failure of its
 * connection, `st` and `why` (DLOCK_ECONNECT, DLOCK_EAUTH...);
 * `maybe_ran` then says whether its command may have reached the server.
 * It may send requests again (they go to a new connection after a
 * failure).
 */
typedef void redis_nbreq_fn(struct redis_nbreq *rq, redisReply *r, dlock_status st, const dlock_error *why,
                            int maybe_ran);

/* One command on the connection, from its send to its answer. */
struct redis_nbreq {
	struct redis_nbreq *next; /* the connection's requests, in the order of their answers */
	redis_nbreq_fn *answer;
	int64_t deadline_ns;      /* io_timeout after it was sent (INT64_MAX: io_timeout 0, none) */
	uint64_t start;           /* bytes the connection had queued before its command */
};

struct redis_nbconn;

/**
 * A connection to the fixed endpoint `ep` (copied; its strings must outlive
 * it) for the loop `io`, with `cfg`'s AUTH, SELECT, TLS and io_timeout: its
 * addresses resolved now (blocking, at open), no socket yet.  DLOCK_OK,
 * DLOCK_ENOMEM, DLOCK_ECONNECT (the host has no address), DLOCK_EURI.
 */
dlock_status dlock_redis_nbconn_new(dlock_io *io, const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                    struct redis_nbconn **out, dlock_error *err);
/** End every request (DLOCK_ECONNECT, "the client closed"), stop watching, close and free.  NULL is fine. */
void dlock_redis_nbconn_free(struct redis_nbconn *nb);
/**
 * Send one command for `rq` (its `answer` set): `append(conn, arg)` writes
 * it on the connection (REDIS_OK, or REDIS_ERR when memory ran out),
 * connecting first, without waiting, when there is none.  DLOCK_OK: `rq`
 * gets its answer later, never inside this call; otherwise never
 * (DLOCK_ECONNECT: no address takes a connection now; DLOCK_ENOMEM).
 */
dlock_status dlock_redis_nbconn_send(struct redis_nbconn *nb, struct redis_nbreq *rq,
                                     int (*append)(struct redis_conn *conn, void *arg), void *arg, dlock_error *err);
/*
 * A subscriber's connection (redis_sub.c): besides the answered requests
 * (AUTH and SELECT), what the server pushes — confirmations and messages
 * of SUBSCRIBE, sent with dlock_redis_nbconn_append() — goes to
 * `on_push(arg, r)` (`r` freed after it returns), and each drop of a
 * connection (not the one of dlock_redis_nbconn_free()) to `on_drop(arg,
 * why)`.  Either may drop the connection itself (dlock_redis_nbconn_reset).
 */
void dlock_redis_nbconn_set_push(struct redis_nbconn *nb, void (*on_push)(void *arg, redisReply *r),
                                 void (*on_drop)(void *arg, const dlock_error *why), void *arg);
/** Write a command whose answer is pushed (connecting first when there is none): as dlock_redis_nbconn_send(). */
dlock_status dlock_redis_nbconn_append(struct redis_nbconn *nb, int (*append)(struct redis_conn *conn, void *arg),
                                       void *arg, dlock_error *err);
/** Drop the connection, if any, without calling on_drop; the next command connects again. */
void dlock_redis_nbconn_reset(struct redis_nbconn *nb);
/** The server's label ("host:port" or the socket's path), for messages. */
const char *dlock_redis_nbconn_label(const struct redis_nbconn *nb);

#endif
