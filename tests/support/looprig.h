/*
 * Two small event loops that drive loop clients (dlock/loop.h) on the
 * test's own thread, and records of what every callback saw, for the tests
 * of the loop API's contract (test_loop.c, test_loop_servers.c).
 *
 *   - pull mode (LR_PULL): a poll() loop over each client's dlock_loop_fd()
 *     with dlock_loop_timeout_ms(); dlock_loop_run() is called only for a
 *     client whose descriptor was readable or whose timeout was due.
 *   - push mode (LR_PUSH): an epoll loop behind dlock_loop_hooks whose hooks
 *     record every call and check the contract: a removal (`events` 0) comes
 *     while the descriptor is still open (fcntl(F_GETFD)), no descriptor is
 *     closed while watched, `*slot` is NULL on the first call for a
 *     descriptor and the hook's own pointer after, no descriptor is left
 *     watched after the close's callback, `cleanup` is called exactly once and
 *     every hook runs on the loop's thread.  dlock_loop_ready() and
 *     dlock_loop_timer_fired() are called only for what is ready or due
 *     (the timer up to lr_client::timer_early_ms early, as libevent's
 *     coarse clock and libuv's cached time make it).
 *
 * A loop serves any number of clients of its mode.  A client is "gone" for
 * the loop once its close completed (its callback ran, or
 * dlock_client_close() returned): the loop never touches it again.
 *
 * Ownership: lr_loop_free() frees the loop and every lr_client it opened
 * (each must be gone by then: it closes the ones that are not, blocking).
 * An lr_op belongs to the test; lr_op_clear() frees what a callback handed
 * over (inspection, listing, leader).
 * Threads: everything here runs on the loop's thread (the one that called
 * lr_loop_new()), except that callbacks and hooks record the thread they
 * ran on.  Errors: CUnit assertions, or counters the test asserts.
 */
#ifndef DLOCK_LOOPRIG_H
#define DLOCK_LOOPRIG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"
#include "dlock/loop.h"

/* Bound for awaiting a completion that must come, so a hang becomes a failure. */
#define LR_AWAIT_MS 20000

typedef enum lr_mode { LR_PULL = 0, LR_PUSH = 1 } lr_mode;

typedef struct lr_loop lr_loop;

struct lr_client;

/* What one callback saw: how many times it ran, where, and what it was given. */
typedef struct lr_op {
	struct lr_client *tc;  /* the client of the operation (its loop, its error text during the call) */
	int calls;
	int in_start;          /* calls made while a start call (LR_START) was running */
	int off_loop;          /* calls made on another thread than the loop's */
	int64_t seq;           /* the loop's count of callbacks when it (last) ran: their order */
	int64_t at_ms;         /* dlock_test_now_ms() when it (first) ran */
	dlock_status status;
	char msg[512];         /* dlock_client_errmsg() during the call, or a lost lock's detail */
	dlock_lost_reason reason;   /* on_lost */
	uint64_t term;              /* campaign */
	size_t broken;              /* break */
	dlock_lock_info *info;      /* inspect (the op's, freed by lr_op_clear()) */
	dlock_lock_list *list;      /* list */
	dlock_leader *leader;       /* election_leader */
	/* Run at the end of the callback, once (to free a handle or close a client from inside it). */
	void (*then)(void *arg);
	void *then_arg;
} lr_op;

/* One loop client and what its hooks saw (push mode). */
typedef struct lr_client {
	lr_loop *lp;
	dlock_client *client; /* NULL when its open failed at the start call */
	int gone;             /* its close completed: the loop no longer drives it */
	int opened_ok;        /* its open's start call returned DLOCK_OK */
	int fail_watch;       /* set before lr_open(): the `watch` hook fails (returns -1) */
	int timer_early_ms;   /* push mode: the timer fires this much before it is due, as coarse-clocked loops do */
	lr_op opened;         /* the open's callback */
	lr_op closed;         /* the close's callback (lr_close_async()) */
	/* Push mode: what the hooks saw. */
	int watch_calls;
	int watched;           /* descriptors watched now */
	int removed_closed;    /* removals (`events` 0) of a descriptor that was already closed */
	int closed_watched;    /* descriptors found closed while still watched */
	int slot_errors;       /* `*slot` not what the contract says */
	int bad_events;        /* `events` other than READ, WRITE or both (or 0) */
	int hooks_off_loop;    /* hook calls on another thread than the loop's */
	int hooks_after_cleanup;
	int watched_at_close;  /* descriptors still watched when the close's callback ran (shown, not asserted) */
	int64_t timer_at_ns;   /* when its timer is due (monotonic ns); -1 disarmed */
	int timer_calls;
	int timer_armed_at_cleanup;
	int cleanups;          /* `cleanup` calls */
	/* Pull mode. */
	int no_fd;             /* turns where dlock_loop_fd() was -1 */
	struct lr_client *next;
} lr_client;

/** A loop of `mode` on the calling thread. */
lr_loop *lr_loop_new(lr_mode mode);
/** Close (blocking) every client not gone yet, then free them and the loop.  NULL is a no-op. */
void lr_loop_free(lr_loop *lp);
lr_mode lr_loop_mode(const lr_loop *lp);
/** Callbacks recorded so far (every lr_op callback counts one). */
int64_t lr_loop_seq(const lr_loop *lp);

/* Around a start call: its callbacks must not run inside it.  LR_START(lp, dlock_acquire_async(...)). */
void lr_begin(lr_loop *lp);
dlock_status lr_end(lr_loop *lp, dlock_status st);
#define LR_START(lp, call) (lr_begin(lp), lr_end((lp), (call)))

/** A new client record of `lp`, not open yet (to set fail_watch first); freed with the loop. */
lr_client *lr_client_new(lr_loop *lp);
/**
 * dlock_client_open_async() of `uri` (`opts` may be NULL) on `tc`, with the
 * loop's hooks in push mode; its callback is recorded in tc->opened.  The
 * start call's status; on an error `errbuf` (may be NULL) has the message.
 */
dlock_status lr_open(lr_client *tc, const char *uri, const dlock_client_options *opts, char *errbuf, size_t errlen);
/** The identity (dlock_client_options::identity) of the clients of lr_open_ready(). */
#define LR_IDENTITY "loop-client"
/**
 * lr_client_new() and lr_open() with the identity LR_IDENTITY, then run the
 * loop until the open's callback: the client, or NULL (asserted).
 */
lr_client *lr_open_ready(lr_loop *lp, const char *uri);
/** dlock_client_close_async() of `tc`, its callback recorded in tc->closed: the start call's status. */
dlock_status lr_close_async(lr_client *tc);
/** Close `tc` and run the loop until that completes; asserts the callback and lr_assert_clean(). */
void lr_close(lr_client *tc);
/** dlock_client_close() of `tc` (blocking, on the loop's thread): its status. */
dlock_status lr_close_blocking(lr_client *tc);

/**
 * One turn of the loop: wait at most `max_ms` (0: do not wait) for a
 * descriptor or a timer, then hand what is ready or due to its clients.
 */
void lr_turn(lr_loop *lp, int64_t max_ms);
/**
 * Wait at most `max_ms` for descriptors alone (timers and timeouts left
 * aside), and hand those ready to their clients: how many were ready.
 */
int lr_wait_io(lr_loop *lp, int64_t max_ms);
/**
 * Turn the loop until `cond(arg)` holds (checked between turns) or
 * `bound_ms` passes; each turn waits at most 10 ms so that conditions set
 * by other threads are seen.  1 when it held.
 */
int lr_run_until(lr_loop *lp, int (*cond)(void *arg), void *arg, int64_t bound_ms);
/** lr_run_until() the callback of `op` ran. */
int lr_run_done(lr_loop *lp, lr_op *op, int64_t bound_ms);
/** Turn the loop for `ms` whatever happens (to see that nothing does). */
void lr_run_for(lr_loop *lp, int64_t ms);
/** For lr_run_until(): the callback of `arg`, a lr_op, ran. */
int lr_op_done(void *arg);

/** A fresh record for a callback of an operation of client `tc`. */
void lr_op_init(lr_op *op, lr_client *tc);
/** Free what a callback handed over to `op`. */
void lr_op_clear(lr_op *op);

/* Callbacks that record into their userdata, a lr_op. */
void lr_on_open(dlock_client *client, dlock_status status, void *userdata);
void lr_on_close(dlock_status status, void *userdata);
void lr_on_lock(dlock_lock *lock, dlock_status status, void *userdata);
void lr_on_inspect(dlock_client *client, dlock_status status, dlock_lock_info *info, void *userdata);
void lr_on_list(dlock_client *client, dlock_status status, dlock_lock_list *list, void *userdata);
void lr_on_break(dlock_client *client, dlock_status status, size_t broken, void *userdata);
void lr_on_election(dlock_election *e, dlock_status status, uint64_t term, void *userdata);
void lr_on_leader(dlock_election *e, dlock_status status, dlock_leader *leader, void *userdata);
void lr_on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata);

/**
 * Assert that `op`'s callback ran exactly once, not inside its start call,
 * on the loop's thread, with status `want`.
 */
#define LR_ASSERT_ONCE(op, want) lr_assert_once((op), (want), #op, __FILE__, __LINE__)
int lr_assert_once(const lr_op *op, dlock_status want, const char *what, const char *file, unsigned line);
/** Assert that `op`'s callback never ran. */
#define LR_ASSERT_NEVER(op) lr_assert_never((op), #op, __FILE__, __LINE__)
int lr_assert_never(const lr_op *op, const char *what, const char *file, unsigned line);
/** Assert that `tc` is gone and that its hooks (push mode) or descriptor (pull mode) saw nothing against the contract. */
#define LR_ASSERT_CLEAN(tc) lr_assert_clean((tc), __FILE__, __LINE__)
void lr_assert_clean(const lr_client *tc, const char *file, unsigned line);

/**
 * dlock_acquire_async() of `lock` (its client: done->tc) with a wait bound
 * (DLOCK_WAIT_FOREVER; 0: try once), a lease (0: the URI's), renewal (-1:
 * the URI's, 0 off, 1 on), `mode`, and `lost` (may be NULL) recording the
 * lost-lock callback; the completion goes to `done`.  The start call's status.
 */
dlock_status lr_acquire(dlock_lock *lock, int64_t wait_ms, int64_t lease_ms, int renew, dlock_lock_mode mode,
                        lr_op *lost, lr_op *done);
/**
 * Run until `op`, started with status `started`, completes, and assert the
 * contract (once, not inside the start, on the loop's thread): its status,
 * or `started` when that is an error.
 */
dlock_status lr_finish(lr_op *op, dlock_status started);
/** Acquire `lock` of `tc` (exclusive, bound `wait_ms`) and run until done: its status. */
dlock_status lr_acquire_now(lr_client *tc, dlock_lock *lock, int64_t wait_ms);
/** dlock_release_async() of `lock` and run until done: its status. */
dlock_status lr_release_now(lr_client *tc, dlock_lock *lock);
/** dlock_check_async() of `lock` and run until done: its status. */
dlock_status lr_check_now(lr_client *tc, dlock_lock *lock);

/* ------------------------------------------------------------ threads */

/*
 * A thread of the test's that does one thing, after waiting on a barrier
 * when `start` is set: an acquisition of `lock` (of an ordinary client)
 * with `wait_ms`, its release, dlock_cancel(lock), or dlock_loop_wake() of
 * `client`.  It never calls CUnit; the test joins it.
 */
typedef struct lr_thread {
	int action;               /* LR_DO_* */
	dlock_lock *lock;
	dlock_client *client;     /* LR_DO_WAKE */
	int64_t wait_ms;          /* LR_DO_ACQUIRE */
	pthread_barrier_t *start; /* when set: wait on it, then act */
	pthread_t thread;
	dlock_status status;
	atomic_int done;          /* it acted */
} lr_thread;

enum { LR_DO_ACQUIRE = 1, LR_DO_RELEASE = 2, LR_DO_CANCEL = 3, LR_DO_WAKE = 4 };

/** Start `t`, filled in by the caller (asserted, fatally). */
void lr_thread_start(lr_thread *t);
/** For lr_run_until(): `arg`, a lr_thread, has acted. */
int lr_thread_done(void *arg);
/** Join it: its status. */
dlock_status lr_thread_join(lr_thread *t);

/** A name no other test or run uses: "loop-PID-N-tag". */
void lr_name(char *out, size_t len, const char *tag);

#endif
