/*
 * Loop clients (dlock/loop.h), as the rest of the core sees them: the
 * calls that the blocking paths make when their client is a loop client.
 * async.c starts operations and calls them back; async_client.c opens and
 * closes loop clients and frees their handles; loop_api.c is the public
 * face of the reactor.
 *
 * Threads: as each function says.  Errors: through the client's error
 * text, as the public calls.
 */
#ifndef DLOCK_CORE_ASYNC_H
#define DLOCK_CORE_ASYNC_H

#include "dlock/loop.h"
#include "internal.h"
#include "reactor.h"

/**
 * DLOCK_EDEADLK, with a message naming `call`, when the caller is the loop
 * thread of loop client `c` (a blocking call would stall the loop); else
 * DLOCK_OK.  Any thread, c->mu not held.
 */
dlock_status dlock_loop_refuse_blocking(struct dlock_client *c, const char *call);

/**
 * For the calls that need the driver open (making a handle, a feature):
 * DLOCK_EINVAL while a loop client's open has not completed, the open's
 * status after it failed, else DLOCK_OK.  Any thread, c->mu not held.
 */
dlock_status dlock_loop_refuse_unopened(struct dlock_client *c, const char *call);

/** 1 when `c` is a loop client whose worker threads still run (its close has not finished). */
int dlock_async_live(const struct dlock_client *c);

/**
 * dlock_lock_free() of a loop client's handle from any thread but a
 * worker: cancel what it waits for, and free it once the callbacks that
 * hold it have run (the release and free on a worker).  Returns 1 when it
 * took the handle over, 0 when the caller frees it as on any client.
 * `e`: the election whose handle this is (freed with it), or NULL.
 */
int dlock_async_lock_free(struct dlock_lock *l, struct dlock_election *e);

/**
 * A loss to deliver (background.c): post the handle's lost-lock callback
 * to the loop, which runs it, then clears l->callback_running.  c->mu held.
 */
void dlock_async_post_lost_locked(struct dlock_client *c, struct dlock_lock *l);

/**
 * An observer's news (observe.c): post `fn` with who leads per `info`
 * (taken over, freed after the call) to the loop, which calls it if the
 * election is still observed by `fn`.  c->mu held.
 */
void dlock_async_post_observed_locked(struct dlock_client *c, struct dlock_election *e, dlock_leader_fn fn,
                                      void *userdata, dlock_lock_info *info);

/**
 * dlock_client_close() of a loop client: from a callback of the client it
 * starts the close (as dlock_client_close_async() without a callback) and
 * returns; otherwise it closes and returns when every callback has run.
 * On the loop's thread.
 */
dlock_status dlock_async_close_blocking(struct dlock_client *c);

/** The reactor's posted work, then the end of a finished close: dlock_loop_run()'s body. */
void dlock_async_run(struct dlock_client *c);

/* loop_native.c: a native loop client's background work, on its loop. */
/** Instead of the background threads: the tick on the loop's timer. */
dlock_status dlock_loop_native_start(struct dlock_client *c);
/** Work comes due at `due_ns` (0: now): bring the tick forward if it is later.  Any thread, c->mu held;
 *  nothing for a client that is not a native loop client. */
void dlock_loop_native_soon_locked(struct dlock_client *c, int64_t due_ns);

/* loop_io.c: a driver of contract 9 on the loop. */
/** One non-blocking driver call in progress (dlock_call of sys/driver.h), embedded in what started it. */
struct dlock_call {
	struct dlock_reactor_item item; /* first member: posted by dlock_call_done() */
	struct dlock_client *c;
	void (*finish)(struct dlock_call *call, dlock_status status); /* on the loop, after the driver's callback */
	dlock_status status;
	int done;
};
/** Ready `call` for one _start method; `finish` runs on the loop once the driver ends it. */
void dlock_call_init(struct dlock_call *call, struct dlock_client *c,
                     void (*finish)(struct dlock_call *call, dlock_status status));

/* loop_close.c */
/** Close a client whose driver runs on the loop, on the loop: once no operation is at work, every held
 *  lock is released through release_start(), then each handle is finished; `done` runs on a later turn
 *  with the close's status (the driver itself is closed by the close's callback, async.c).  0 when the
 *  close must run on a worker instead (an election's observer thread to stop).  The loop's thread. */
int dlock_loop_close_start(struct dlock_client *c, void (*done)(void *arg, dlock_status st), void *arg);
/** An operation at work ended (ops_working falls by one); wakes a close that waits for none.  Any
 *  thread, c->mu held. */
void dlock_async_work_done_locked(struct dlock_client *c);

/* loop_renew.c */
/** The seam's bg_call_locked: the background's call `what` on `l` through the driver's _start method, when
 *  the driver runs on the loop (1), else 0.  The loop's thread, c->mu held, dropped inside. */
int dlock_loop_bg_call_locked(struct dlock_lock *l, enum dlock_bg_call what, uint64_t generation, int64_t lease_ns);

/* loop_acquire.c */
/** Post a step of the acquisitions waiting for their turn (the loop's thread, c->mu not held). */
void dlock_loop_kick(struct dlock_client *c);
/** The same from any thread, c->mu held (the seam's kick_locked). */
void dlock_loop_kick_locked(struct dlock_client *c);
/** Start acquiring `l` on the loop; `cb` runs once, from a later turn of the loop. */
dlock_status dlock_loop_acquire_start(struct dlock_lock *l, const dlock_acquire_options *opts, uint64_t cancel_seq,
                                      void (*cb)(void *arg, dlock_status st, const char *msg), void *arg);

/* ---------------------------------------- between async.c and async_client.c */

/* Operation kinds that async_client.c makes (the others are async.c's own). */
#define DLOCK_OP_OPEN 0
#define DLOCK_OP_CLOSE 12

/** A new operation of `kind` on `c`, `text` copied (NULL out of memory: the client's error says so). */
struct dlock_op *dlock_async_op_new(struct dlock_client *c, int kind, const char *text);
/** Its callback, for an open or a close. */
void dlock_async_op_set_open(struct dlock_op *op, dlock_open_fn done, void *userdata);
void dlock_async_op_set_close(struct dlock_op *op, dlock_close_fn done, void *userdata);
/** Hand it to a worker (or keep it until the open completes); frees nothing on failure. */
dlock_status dlock_async_submit(struct dlock_op *op);
/** Call `op` back with `st` on the loop's next turn, without running it. */
void dlock_async_complete_later(struct dlock_op *op, dlock_status st);
/** The seam's call_ended_locked: the releases, extends and checks that waited on the loop for `l`'s loop
 *  call go on, in the order they came.  The loop's thread, c->mu held. */
void dlock_async_call_ended_locked(struct dlock_lock *l);
/** Free the handle `l` (or its election) on a worker; no callback. */
dlock_status dlock_async_free_submit(struct dlock_lock *l);
/** The open completed: let the operations that waited for it go, or fail them with `open_st`, `why`. */
void dlock_async_release_waiters(struct dlock_client *c, dlock_status open_st, const char *why);

/** On a worker (or the loop, for a native client): wait for the other operations, then close the client
 *  as a blocking one. */
dlock_status dlock_async_close_run(struct dlock_client *c);
/** On the loop: drop an operation's reference on `l`, freeing it when that was the last one wanted. */
void dlock_async_unref(struct dlock_lock *l);
/** Free `l` (or its election) now: on a worker, or inline for a native client. */
void dlock_async_free_now(struct dlock_lock *l);

#endif /* DLOCK_CORE_ASYNC_H */
