/*
 * PostgreSQL backend: a loop client's lock calls on its loop (pg_loop.c,
 * driver contract 9), mode=advisory.  Never included outside
 * backends/postgres/.
 *
 * Ownership: the backend's struct dlock_pg_loop (b->loop) is made by
 * dlock_pg_loop_open() and freed by dlock_pg_loop_close(); a lock's call
 * state (lk->loop_op) by dlock_pg_loop_op_free().  Threads: the loop's
 * only.  Errors: the blocking forms' statuses and messages.
 */
#ifndef DLOCK_PG_LOOP_H
#define DLOCK_PG_LOOP_H

#include "pg_backend.h"

/** 1 when the client's mode and URI run on the loop (pg_loop.c says what does not). */
int dlock_pg_loop_fits(const struct dlock_pg_backend *b);
/** The same without the fencing sequence, which only a loop client sets up at open: what a blocking client
 *  of the URI answers for a loop client of it. */
int dlock_pg_loop_mode_fits(const struct dlock_pg_backend *b);
/** Make b->loop for the loop `io`: the host resolved now (blocking, at open).  DLOCK_ECONNECT, DLOCK_ENOMEM. */
dlock_status dlock_pg_loop_open(struct dlock_pg_backend *b, dlock_io *io, dlock_error *err);
/** Close every connection of the loop (watches removed first) and free b->loop; NULL b->loop is fine. */
void dlock_pg_loop_close(struct dlock_pg_backend *b);
/** The driver's _start methods for a client on its loop. */
dlock_status dlock_pg_loop_try_acquire(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                       dlock_wait *w, dlock_retry *retry, dlock_acquired *out, dlock_error *err,
                                       dlock_call *call);
dlock_status dlock_pg_loop_release(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err,
                                   dlock_call *call);
dlock_status dlock_pg_loop_extend(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, int64_t lease_ms,
                                  dlock_error *err, dlock_call *call);
dlock_status dlock_pg_loop_check(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_error *err,
                                 dlock_call *call);
/** A blocking method's `work` on the loop's connection of held `lk`, from a worker (pg_loop.c says when). */
dlock_status dlock_pg_loop_blocking(struct dlock_pg_backend *b, struct dlock_pg_lock *lk, dlock_pg_work_fn *work,
                                    void *arg, dlock_error *err);
/** Free lk's call state (lock_fini). */
void dlock_pg_loop_op_free(struct dlock_pg_lock *lk);

#endif
