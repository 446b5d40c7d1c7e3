/**
 * @file
 * @brief dlock from an event loop: a client that never blocks its caller.
 *
 * A *loop client* is opened with dlock_client_open_async() and is driven by
 * the application's event loop, in one of two ways:
 *
 *   - push mode (hooks given): the library tells the loop which descriptors
 *     to watch, for reading or writing, and when its one timer should fire,
 *     through dlock_loop_hooks; the loop reports readiness with
 *     dlock_loop_ready() and the timer with dlock_loop_timer_fired().  This
 *     is how libuv, libevent and epoll loops use it (dlock/adapters/libuv.h,
 *     dlock/adapters/libevent.h do the mapping in a few lines).
 *   - pull mode (no hooks): the client has one descriptor to watch for
 *     reading (dlock_loop_fd()) and a timeout (dlock_loop_timeout_ms()); when
 *     either is due the loop calls dlock_loop_run(), which does what is due
 *     and returns at once.  This suits a bare poll() loop.
 *
 * Every operation that talks to the server has a form that starts it and
 * returns at once: dlock_acquire_async(), dlock_release_async(), ... Its
 * callback contract:
 *   - A start call that returns an error never calls back (its detail is in
 *     dlock_client_errmsg()).  One that returns DLOCK_OK calls back exactly
 *     once, later, from the loop (inside dlock_loop_ready(),
 *     dlock_loop_timer_fired() or dlock_loop_run()), never inside the start
 *     call.  Inside the callback, dlock_client_errmsg() gives the failure's
 *     detail.
 *   - dlock_cancel() (from any thread) has no callback of its own: the
 *     acquisition completes with DLOCK_ECANCELED, or with DLOCK_OK when the
 *     grant won the race — and then the caller holds the lock.
 *   - Freeing a handle (dlock_lock_free(), dlock_election_free()) or closing
 *     the client (dlock_client_close_async()) from inside a callback is safe:
 *     the memory goes once the callbacks that still need it have run.
 *   - Lost-lock callbacks (dlock_acquire_options::on_lost) and observers
 *     (dlock_observe()) run on the loop too.  A client closed while it holds
 *     locks reports each of them lost with DLOCK_LOST_CLOSED before its close
 *     completes.
 *
 * Threads: a loop client is used only from its loop's thread — the thread
 * that called dlock_client_open_async(); dlock_cancel() and
 * dlock_loop_wake() are the exceptions and may come from any thread.  The
 * blocking forms of server operations (dlock_acquire(), dlock_inspect(), ...)
 * would stall the loop, so on the loop's thread they return DLOCK_EDEADLK;
 * dlock_lock_new() and the other calls that do not talk to the server work as
 * on any client.
 *
 * Reentrancy is per handle in loop mode (there is one thread): an acquisition
 * on a handle that already holds the lock raises its hold count; another
 * handle of the same name waits for its turn, as another thread's would.
 *
 * Threads of the library: whether a backend runs on the loop alone, with no
 * thread created, is the feature DLOCK_FEATURE_LOOP_NATIVE.  Where it is 0,
 * the library runs that backend's blocking calls on worker threads of the
 * client and delivers every result on the loop the same way.  Host names
 * are resolved at open, blocking the caller; give numeric addresses to
 * avoid that.
 */
#ifndef DLOCK_LOOP_H
#define DLOCK_LOOP_H

#include <stdint.h>

#include "dlock/dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What a descriptor is watched for, or was found ready for (OR-ed). */
typedef enum dlock_io_events {
	DLOCK_IO_READ = 1,  /**< readable (or closed by the peer) */
	DLOCK_IO_WRITE = 2, /**< writable */
	DLOCK_IO_ERROR = 4  /**< only in dlock_loop_ready(): the loop saw an error or hang-up on it */
} dlock_io_events;

/** Current value of dlock_loop_hooks::version. */
#define DLOCK_LOOP_HOOKS_VERSION 1

/**
 * The application's loop, as a loop client in push mode sees it.  The
 * hooks are called on the loop's thread, from inside dlock calls (the
 * first ones inside dlock_client_open_async(), before it returns: hence
 * the `client` argument), and must not call back into dlock.
 */
typedef struct dlock_loop_hooks {
	unsigned version; /**< DLOCK_LOOP_HOOKS_VERSION; 0 or a version this library does not know: DLOCK_EVERSION */
	void *userdata;   /**< passed to every hook as is */
	/**
	 * Watch `fd` for `events` (DLOCK_IO_READ, DLOCK_IO_WRITE, both), replacing
	 * what was asked for it before; `events` 0: stop watching it.  dlock
	 * always asks to stop watching a descriptor *before* it closes it (libuv
	 * forbids closing a polled descriptor; epoll keeps a closed one's
	 * registration).  `*slot` is the application's own pointer for this
	 * descriptor: NULL on the first call for `fd`, then whatever the hook
	 * stored there, until the call with `events` 0, after which dlock forgets
	 * it (free what it points to then).  When it is ready, call
	 * dlock_loop_ready(client, fd, ...).  Returns 0, or -1 when the loop
	 * cannot watch it: the operations that needed it fail with DLOCK_EIO.
	 */
	int (*watch)(dlock_client *client, void *userdata, int fd, unsigned events, void **slot);
	/**
	 * Arm the client's one timer to fire once, `ms` milliseconds from now
	 * (0: on the loop's next turn), replacing the time asked before; `ms` -1:
	 * disarm it.  When it fires, call dlock_loop_timer_fired(client).
	 * Returns 0 or -1 (as `watch`).
	 */
	int (*timer)(dlock_client *client, void *userdata, int64_t ms);
	/**
	 * The client is gone: no hook will be called again for it, every
	 * descriptor has had its `watch` call with 0 and the timer its -1; free
	 * what the hooks keep for it.  Called once per client whose open
	 * returned DLOCK_OK, at the end of its close (after the close's
	 * callback).  May be NULL.
	 */
	void (*cleanup)(void *userdata);
} dlock_loop_hooks;

/** Called when an asynchronous open completes: DLOCK_OK, or why the client could not open. */
typedef void (*dlock_open_fn)(dlock_client *client, dlock_status status, void *userdata);

/**
 * Open a loop client for `uri` (copied) with the application's loop
 * `hooks` (copied; NULL: pull mode).  On DLOCK_OK, *out is the client at
 * once, so that its descriptors can be watched, and `done` is called once
 * the client is connected, or has failed to connect (its detail in
 * dlock_client_errmsg() during the call).  The client's operations
 * (dlock_inspect_async(), ...) started before then wait for the open and
 * fail with its status if it fails; handles and elections are made, and
 * features read, once it has completed (from its callback on): before,
 * those calls return DLOCK_EINVAL, and after a failed open, its status.
 * Close the client in either case (dlock_client_close_async() or
 * dlock_client_close()).
 * On an error return (DLOCK_EURI, DLOCK_ENOBACKEND, DLOCK_EINVAL,
 * DLOCK_EVERSION for hooks of an unknown version, DLOCK_ENOMEM, DLOCK_EIO
 * when a hook failed), *out is NULL, `done` is never called and `errbuf`
 * (may be NULL) gets the message.  The calling thread becomes the client's
 * loop thread.
 */
DLOCK_API dlock_status dlock_client_open_async(dlock_client **out, const char *uri,
                                               const dlock_client_options *opts, const dlock_loop_hooks *hooks,
                                               dlock_open_fn done, void *userdata, char *errbuf, size_t errlen);

/** Called when an asynchronous close completes; the client is gone by then. */
typedef void (*dlock_close_fn)(dlock_status status, void *userdata);

/**
 * Close a loop client without blocking: acquisitions in progress complete
 * with DLOCK_ECANCELED, locks still held are reported lost with
 * DLOCK_LOST_CLOSED and released, every other operation in progress
 * completes, and then `done` (may be NULL) is called.  Once `done` has
 * returned the client's descriptors are no longer watched (push mode: each
 * gets its `watch` call with 0 right after `done`, then `cleanup` is
 * called; pull mode: stop watching dlock_loop_fd() inside `done`).
 * Handles must still be freed.  Safe from inside any
 * callback of the client.  DLOCK_ECLOSED when it is already closing,
 * DLOCK_EINVAL for NULL.  dlock_client_close() on a loop client, from the
 * loop's thread, does the same and returns when it is done, every
 * callback having run inside it; from inside a callback of the client it
 * only starts the close, which the loop finishes after that callback.
 */
DLOCK_API dlock_status dlock_client_close_async(dlock_client *client, dlock_close_fn done, void *userdata);

/* ---------------------------------------------------------------- driving */

/** Push mode: the loop found `fd` ready for `events` (DLOCK_IO_*).  A descriptor dlock no longer watches is ignored. */
DLOCK_API void dlock_loop_ready(dlock_client *client, int fd, unsigned events);

/**
 * Push mode: the client's timer (dlock_loop_hooks::timer) fired.  Early is
 * fine (loops with a coarse or cached clock fire a few milliseconds
 * early): dlock then does what is due, nothing else, and arms it again.
 */
DLOCK_API void dlock_loop_timer_fired(dlock_client *client);

/** Pull mode: the one descriptor to watch for reading; -1 for a push-mode client or NULL. */
DLOCK_API int dlock_loop_fd(const dlock_client *client);

/**
 * Pull mode: milliseconds until dlock_loop_run() has work that is due even
 * without the descriptor turning readable; -1: none (wait for the
 * descriptor alone); 0: call it now.
 */
DLOCK_API int64_t dlock_loop_timeout_ms(dlock_client *client);

/**
 * Do whatever is due (either mode): read what the descriptors have, fire
 * due timers, run completed operations' callbacks.  Never waits.  Callbacks
 * run inside it.
 */
DLOCK_API void dlock_loop_run(dlock_client *client);

/**
 * Make the loop turn: the client's descriptor becomes readable (pull mode),
 * or its internal one does (push mode), so that a loop blocked in poll()
 * comes back and calls dlock_loop_run() / dlock_loop_ready().  Any thread,
 * also a signal handler's (it only writes to an eventfd).
 */
DLOCK_API void dlock_loop_wake(dlock_client *client);

/* ------------------------------------------------------------- operations */

/** Completion of an operation on a lock handle: acquire, release, extend, check. */
typedef void (*dlock_lock_done_fn)(dlock_lock *lock, dlock_status status, void *userdata);

/** dlock_acquire() without blocking; `opts` is copied.  Statuses in the callback as dlock_acquire(). */
DLOCK_API dlock_status dlock_acquire_async(dlock_lock *lock, const dlock_acquire_options *opts,
                                           dlock_lock_done_fn done, void *userdata);

/** dlock_release() without blocking. */
DLOCK_API dlock_status dlock_release_async(dlock_lock *lock, dlock_lock_done_fn done, void *userdata);

/** dlock_extend() without blocking. */
DLOCK_API dlock_status dlock_extend_async(dlock_lock *lock, int64_t lease_ms, dlock_lock_done_fn done,
                                          void *userdata);

/** dlock_check() without blocking. */
DLOCK_API dlock_status dlock_check_async(dlock_lock *lock, dlock_lock_done_fn done, void *userdata);

/** Completion of dlock_inspect_async(): `info` (NULL on failure) is the callee's, to free with dlock_lock_info_free(). */
typedef void (*dlock_inspect_fn)(dlock_client *client, dlock_status status, dlock_lock_info *info,
                                 void *userdata);

/** dlock_inspect() without blocking; `name` is copied. */
DLOCK_API dlock_status dlock_inspect_async(dlock_client *client, const char *name, dlock_inspect_fn done,
                                           void *userdata);

/** Completion of dlock_list_async(): `list` (NULL on failure) is the callee's, to free with dlock_lock_list_free(). */
typedef void (*dlock_list_fn)(dlock_client *client, dlock_status status, dlock_lock_list *list, void *userdata);

/** dlock_list() without blocking; `name_prefix` (may be NULL) is copied. */
DLOCK_API dlock_status dlock_list_async(dlock_client *client, const char *name_prefix, dlock_list_fn done,
                                        void *userdata);

/** Completion of dlock_break_async(): how many holders were broken. */
typedef void (*dlock_break_fn)(dlock_client *client, dlock_status status, size_t broken, void *userdata);

/** dlock_break() without blocking; `name` is copied. */
DLOCK_API dlock_status dlock_break_async(dlock_client *client, const char *name, dlock_break_fn done,
                                         void *userdata);

/** Completion of an operation on an election: campaign (with the term on DLOCK_OK; else 0), proclaim, resign. */
typedef void (*dlock_election_done_fn)(dlock_election *e, dlock_status status, uint64_t term, void *userdata);

/** dlock_campaign() without blocking; `value` and `opts` are copied.  Cancel with dlock_cancel(dlock_election_lock(e)). */
DLOCK_API dlock_status dlock_campaign_async(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                                            dlock_election_done_fn done, void *userdata);

/** dlock_proclaim() without blocking; `value` is copied. */
DLOCK_API dlock_status dlock_proclaim_async(dlock_election *e, const char *value, dlock_election_done_fn done,
                                            void *userdata);

/** dlock_resign() without blocking. */
DLOCK_API dlock_status dlock_resign_async(dlock_election *e, dlock_election_done_fn done, void *userdata);

/** Completion of dlock_election_leader_async(): `leader` (NULL on failure) is the callee's, to free with dlock_leader_free(). */
typedef void (*dlock_leader_done_fn)(dlock_election *e, dlock_status status, dlock_leader *leader, void *userdata);

/** dlock_election_leader() without blocking. */
DLOCK_API dlock_status dlock_election_leader_async(dlock_election *e, dlock_leader_done_fn done, void *userdata);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_LOOP_H */
