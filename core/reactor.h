/*
 * The reactor of a loop client (reactor.c): what the application's loop
 * drives.  It owns an eventfd through which any thread posts work to the
 * loop's thread, and, in pull mode, the one epoll descriptor the
 * application watches.  Posted items are intrusive (the poster owns their
 * memory and keeps it alive until the item has run) and run in the order
 * they were posted, on the loop's thread, inside dlock_loop_run() and the
 * push-mode entry points.
 *
 * It also watches the descriptors of a driver that runs on the loop
 * (driver contract 9) and keeps their timers among its own.
 *
 * Threads: dlock_reactor_post() and dlock_loop_wake() from any thread;
 * everything else on the loop's thread.  Errors: dlock_reactor_create()
 * returns DLOCK_ENOMEM, DLOCK_EIO (descriptors) or DLOCK_EVERSION (hooks)
 * with a message; nothing else fails.
 */
#ifndef DLOCK_CORE_REACTOR_H
#define DLOCK_CORE_REACTOR_H

#include <stdint.h>

#include "dlock/loop.h"
#include "dlock/sys/driver.h"

struct dlock_reactor;

/** One piece of work posted to the loop: `run(item)` is called once on the loop's thread. */
struct dlock_reactor_item {
	struct dlock_reactor_item *next;
	void (*run)(struct dlock_reactor_item *item);
};

/**
 * A timer of the reactor (loop thread only): `run(timer)` is called once
 * when `due_ns` (dlock_monotonic_ns()) has passed, after which it is no
 * longer set.  Intrusive, as items; `pos` is the reactor's (0: not set).
 */
struct dlock_reactor_timer {
	int64_t due_ns;
	size_t pos;
	void (*run)(struct dlock_reactor_timer *timer);
};

/** Set `t` to run at `due_ns`, replacing its earlier time (the loop's thread; DLOCK_ENOMEM). */
dlock_status dlock_reactor_timer_set(struct dlock_reactor *r, struct dlock_reactor_timer *t, int64_t due_ns);

/** Unset `t` (nothing if it is not set). */
void dlock_reactor_timer_clear(struct dlock_reactor *r, struct dlock_reactor_timer *t);

/** Milliseconds until the first timer is due (0 if it is), -1 with none: pull mode's timeout. */
int64_t dlock_reactor_timeout_ms(const struct dlock_reactor *r);

/** Run the timers that are due; 1 if any ran. */
int dlock_reactor_run_timers(struct dlock_reactor *r);
/**
 * Push mode: the application's one-shot timer has fired, maybe before the
 * first timer is due (loops with a coarse or cached clock fire early); the
 * next dlock_reactor_run_timers() arms it again, whatever it ran.
 */
void dlock_reactor_hook_timer_fired(struct dlock_reactor *r);

/**
 * A reactor for the client `c` (handed back to the hooks), with the loop's
 * `hooks` (copied; NULL: pull mode), whose thread is the caller's.
 */
dlock_status dlock_reactor_create(dlock_client *c, const dlock_loop_hooks *hooks, struct dlock_reactor **out,
                                  dlock_error *err);

/**
 * Stop watching every descriptor (push mode: the hooks hear of it before
 * the descriptors close), close them, call the hooks' cleanup and free the
 * reactor.  Items still posted are dropped: their owners must be done.
 * On the loop's thread.
 */
void dlock_reactor_destroy(struct dlock_reactor *r);

/** Post `item` to the loop (any thread; never blocks for long). */
void dlock_reactor_post(struct dlock_reactor *r, struct dlock_reactor_item *item);

/** Run what was posted until now (the loop's thread); 1 if anything ran. */
int dlock_reactor_run(struct dlock_reactor *r);

/** 1 when the calling thread is the reactor's loop thread. */
int dlock_reactor_is_loop_thread(const struct dlock_reactor *r);

/** The pull-mode descriptor (-1 in push mode). */
int dlock_reactor_fd(const struct dlock_reactor *r);

/** The eventfd that is readable while work is posted (for a thread that drives the loop itself). */
int dlock_reactor_wake_fd(const struct dlock_reactor *r);

/** Push mode: 1 when `fd` is the reactor's own descriptor (its eventfd). */
int dlock_reactor_owns_fd(const struct dlock_reactor *r, int fd);

/**
 * A driver's descriptor (driver contract 9, dlock_io_watch()): watch `fd`
 * for `events` (DLOCK_IO_READ | DLOCK_IO_WRITE; 0 stops watching it)
 * through the application's hooks (push mode) or the pull-mode epoll set,
 * and call `ready` on the loop when it is.  DLOCK_OK, DLOCK_EINVAL,
 * DLOCK_ENOMEM, or DLOCK_EIO when the loop refuses it.
 */
dlock_status dlock_reactor_watch(struct dlock_reactor *r, int fd, unsigned events,
                                 void (*ready)(void *arg, int fd, unsigned events), void *arg);

/** Push mode: the loop found `fd` ready; 1 if it is a driver's (its callback ran), else 0. */
int dlock_reactor_dispatch(struct dlock_reactor *r, int fd, unsigned events);

/** Pull mode: call the callbacks of the drivers' descriptors that are ready now (never waits). */
void dlock_reactor_poll_io(struct dlock_reactor *r);

/**
 * Be the loop for a moment, on its thread, without the application's: wait
 * (poll()) until work is posted, a driver's descriptor is ready (its
 * callback is called) or the first timer is due.  The caller then runs
 * the timers and what was posted.  For a close that must finish inside a
 * blocking call.
 */
void dlock_reactor_wait(struct dlock_reactor *r);

/** Make the loop turn (any thread, async-signal-safe: one write to an eventfd). */
void dlock_reactor_wake(struct dlock_reactor *r);

#endif /* DLOCK_CORE_REACTOR_H */
