/**
 * @file
 * @brief A loop client (dlock/loop.h) on a libuv loop, header-only.
 *
 *   uv_loop_t *loop = uv_default_loop();
 *   dlock_loop_hooks hooks;
 *   dlock_client *client;
 *
 *   if (dlock_libuv_hooks(loop, &hooks) != DLOCK_OK)
 *       ...
 *   if (dlock_client_open_async(&client, uri, NULL, &hooks, on_open, app, err, sizeof err) != DLOCK_OK)
 *       hooks.cleanup(hooks.userdata);    // the open failed: the state is still ours
 *   uv_run(loop, UV_RUN_DEFAULT);
 *
 * libdlock does not link libuv: these functions are compiled into the
 * application, which links libuv itself (pkg-config --libs libuv).
 * uv.h needs the POSIX declarations: with -std=c11, define
 * _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before any other header.
 *
 * What it does: dlock_libuv_hooks() fills a dlock_loop_hooks whose `watch`
 * keeps one uv_poll_t per descriptor (in the descriptor's slot), started,
 * changed and stopped as dlock asks, and whose `timer` keeps one uv_timer_t
 * per client, made at the first call.  Readiness calls dlock_loop_ready(),
 * the timer dlock_loop_timer_fired().  When dlock stops watching a
 * descriptor (`events` 0), its uv_poll_t is stopped and uv_close()d at
 * once, so dlock may close the descriptor right after, as libuv requires.
 *
 * Ownership: dlock_libuv_hooks() allocates one state per client, in
 * hooks->userdata.  Fill a new dlock_loop_hooks for every client: the state
 * holds that client's one timer.  Once dlock_client_open_async() has
 * returned DLOCK_OK the client owns the state, and frees it through
 * `cleanup` when its close completes (the timer is uv_close()d and the
 * memory freed in the close callback, on a later turn of the loop: keep
 * the loop running until uv_run() returns before uv_loop_close()).  When
 * the open fails, or the hooks are never used, call
 * hooks.cleanup(hooks.userdata) yourself.  Each uv_poll_t is freed in its
 * own close callback.  The handles keep the loop alive while dlock has
 * descriptors to watch or a timer armed, as any handle does.
 *
 * Threads: everything here runs on the loop's thread, the thread that runs
 * uv_run() and that opened the client (libuv handles are not thread-safe);
 * only dlock_cancel() and dlock_loop_wake() may come from elsewhere.
 *
 * Errors: dlock_libuv_hooks() returns DLOCK_EINVAL for a NULL argument and
 * DLOCK_ENOMEM.  A hook that cannot allocate, or that libuv refuses
 * (uv_poll_init(), uv_poll_start(), uv_timer_init(), uv_timer_start()),
 * returns -1, and dlock fails the operations that needed it with DLOCK_EIO.
 * An error libuv reports on a polled descriptor is passed on as
 * DLOCK_IO_ERROR, and the watch is started again (libuv stops it), until
 * dlock stops watching the descriptor.
 */
#ifndef DLOCK_ADAPTERS_LIBUV_H
#define DLOCK_ADAPTERS_LIBUV_H

#include <stdint.h>
#include <stdlib.h>

#include <uv.h>

#include "dlock/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The hooks' userdata: one per client. */
typedef struct dlock_libuv_state {
	uv_loop_t *loop;      /**< the application's loop */
	dlock_client *client; /**< the client the hooks serve (each hook call says it) */
	uv_timer_t timer;     /**< the client's one timer; its data is this state */
	int timer_made;       /**< 1 once uv_timer_init() has succeeded */
} dlock_libuv_state;

/** One watched descriptor, in its slot; the handle's data is this watch. */
typedef struct dlock_libuv_watch {
	uv_poll_t poll;       /**< watches `fd`; closed (and this watch freed) when dlock stops watching */
	dlock_client *client; /**< the client that watches it */
	int fd;               /**< the descriptor */
	int flags; /**< UV_READABLE | UV_WRITABLE as last started; 0: never started */
} dlock_libuv_watch;

/** Close callback of every handle here: its data is the memory to free. */
static inline void dlock_libuv_free_cb(uv_handle_t *handle)
{
	free(handle->data);
}

/** uv_poll_t callback: readiness (or an error, as DLOCK_IO_ERROR) to dlock_loop_ready(). */
static inline void dlock_libuv_poll_cb(uv_poll_t *poll, int status, int events)
{
	dlock_libuv_watch *w = (dlock_libuv_watch *)poll->data;
	unsigned ready = 0;

	if (status < 0) {
		ready = DLOCK_IO_ERROR; /* `events` means nothing then */
	} else {
		ready |= (events & UV_READABLE) ? DLOCK_IO_READ : 0;
		ready |= (events & UV_WRITABLE) ? DLOCK_IO_WRITE : 0;
	}
	dlock_loop_ready(w->client, w->fd, ready);
	/* dlock may have stopped watching it (the handle is closing then, its
	 * memory freed only in the close callback, later); libuv stops a
	 * handle on error: start it again while it is still wanted. */
	if (status < 0 && !uv_is_closing((uv_handle_t *)poll))
		(void)uv_poll_start(poll, w->flags, dlock_libuv_poll_cb);
}

/** dlock_loop_hooks::watch: start, change or (`events` 0) stop and close the descriptor's uv_poll_t. */
static inline int dlock_libuv_watch_fd(dlock_client *client, void *userdata, int fd, unsigned events,
                                       void **slot)
{
	dlock_libuv_state *s = (dlock_libuv_state *)userdata;
	dlock_libuv_watch *w = (dlock_libuv_watch *)*slot;
	int flags = ((events & DLOCK_IO_READ) ? UV_READABLE : 0) | ((events & DLOCK_IO_WRITE) ? UV_WRITABLE : 0);

	s->client = client;
	if (flags == 0) {
		if (w != NULL) {
			(void)uv_poll_stop(&w->poll);
			uv_close((uv_handle_t *)&w->poll, dlock_libuv_free_cb);
			*slot = NULL;
		}
		return 0;
	}
	if (w == NULL) {
		w = (dlock_libuv_watch *)calloc(1, sizeof *w);
		if (w == NULL)
			return -1;
		if (uv_poll_init(s->loop, &w->poll, fd) != 0) {
			free(w);
			return -1;
		}
		w->poll.data = w;
		w->client = client;
		w->fd = fd;
		*slot = w;
	}
	if (uv_poll_start(&w->poll, flags, dlock_libuv_poll_cb) != 0) {
		if (w->flags == 0) { /* new: leave the slot as it was */
			uv_close((uv_handle_t *)&w->poll, dlock_libuv_free_cb);
			*slot = NULL;
		}
		return -1;
	}
	w->flags = flags;
	return 0;
}

/** uv_timer_t callback: dlock_loop_timer_fired(). */
static inline void dlock_libuv_timer_cb(uv_timer_t *timer)
{
	dlock_libuv_state *s = (dlock_libuv_state *)timer->data;

	dlock_loop_timer_fired(s->client);
}

/** dlock_loop_hooks::timer: (re)start the client's one-shot uv_timer_t, or stop it (`ms` -1). */
static inline int dlock_libuv_timer(dlock_client *client, void *userdata, int64_t ms)
{
	dlock_libuv_state *s = (dlock_libuv_state *)userdata;

	s->client = client;
	if (ms < 0) {
		if (s->timer_made)
			(void)uv_timer_stop(&s->timer);
		return 0;
	}
	if (!s->timer_made) {
		if (uv_timer_init(s->loop, &s->timer) != 0)
			return -1;
		s->timer.data = s;
		s->timer_made = 1;
	}
	/* libuv counts from the time cached at the start of this turn: a long
	 * turn would make the timer fire early. */
	uv_update_time(s->loop);
	return uv_timer_start(&s->timer, dlock_libuv_timer_cb, (uint64_t)ms, 0) == 0 ? 0 : -1;
}

/** dlock_loop_hooks::cleanup: close the timer and free the state (in the close callback). */
static inline void dlock_libuv_cleanup(void *userdata)
{
	dlock_libuv_state *s = (dlock_libuv_state *)userdata;

	if (s == NULL)
		return;
	if (s->timer_made)
		uv_close((uv_handle_t *)&s->timer, dlock_libuv_free_cb); /* frees s */
	else
		free(s);
}

/**
 * Fill `hooks` for one loop client on `loop`: pass them to
 * dlock_client_open_async().  DLOCK_OK, DLOCK_EINVAL (NULL argument) or
 * DLOCK_ENOMEM; on an error `hooks` is left as it was.
 */
static inline dlock_status dlock_libuv_hooks(uv_loop_t *loop, dlock_loop_hooks *hooks)
{
	dlock_libuv_state *s;

	if (loop == NULL || hooks == NULL)
		return DLOCK_EINVAL;
	s = (dlock_libuv_state *)calloc(1, sizeof *s);
	if (s == NULL)
		return DLOCK_ENOMEM;
	s->loop = loop;
	hooks->version = DLOCK_LOOP_HOOKS_VERSION;
	hooks->userdata = s;
	hooks->watch = dlock_libuv_watch_fd;
	hooks->timer = dlock_libuv_timer;
	hooks->cleanup = dlock_libuv_cleanup;
	return DLOCK_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_ADAPTERS_LIBUV_H */
