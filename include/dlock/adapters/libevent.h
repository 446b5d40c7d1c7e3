/**
 * @file
 * @brief A loop client (dlock/loop.h) on a libevent event_base, header-only.
 *
 *   struct event_base *base = event_base_new();
 *   dlock_loop_hooks hooks;
 *   dlock_client *client;
 *
 *   if (dlock_libevent_hooks(base, &hooks) != DLOCK_OK)
 *       ...
 *   if (dlock_client_open_async(&client, uri, NULL, &hooks, on_open, app, err, sizeof err) != DLOCK_OK)
 *       hooks.cleanup(hooks.userdata);    // the open failed: the state is still ours
 *   event_base_dispatch(base);
 *
 * libdlock does not link libevent: these functions are compiled into the
 * application, which links libevent itself (`pkg-config --libs libevent`).
 * libevent 2 (event2/event.h).
 *
 * What it does: dlock_libevent_hooks() fills a dlock_loop_hooks whose
 * `watch` keeps one persistent struct event per descriptor (in the
 * descriptor's slot), made again when dlock changes what it waits for and
 * freed when it stops watching (`events` 0) — before dlock closes the
 * descriptor — and whose `timer` keeps one timer event per client, made at
 * the first call.  Readiness calls dlock_loop_ready(), the timer
 * dlock_loop_timer_fired().
 *
 * Ownership: dlock_libevent_hooks() allocates one state per client, in
 * hooks->userdata.  Fill a new dlock_loop_hooks for every client: the state
 * holds that client's one timer.  Once dlock_client_open_async() has
 * returned DLOCK_OK the client owns the state and frees it, with its
 * events, through `cleanup` when its close completes.  When the open fails,
 * or the hooks are never used, call hooks.cleanup(hooks.userdata) yourself.
 * Free the event_base only after that.  The events keep
 * event_base_dispatch() running while dlock has descriptors to watch or a
 * timer armed, as any pending event does.
 *
 * Threads: everything here runs on the loop's thread, the thread that runs
 * the event_base and that opened the client; only dlock_cancel() and
 * dlock_loop_wake() may come from elsewhere.
 *
 * Errors: dlock_libevent_hooks() returns DLOCK_EINVAL for a NULL argument
 * and DLOCK_ENOMEM.  A hook that cannot allocate, or that libevent refuses
 * (event_new(), event_add()), returns -1, and dlock fails the operations
 * that needed it with DLOCK_EIO.  libevent reports an error or hang-up on
 * a descriptor as readable (or writable), which is what dlock reads it as.
 */
#ifndef DLOCK_ADAPTERS_LIBEVENT_H
#define DLOCK_ADAPTERS_LIBEVENT_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>

#include <event2/event.h>

#include "dlock/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The hooks' userdata: one per client. */
typedef struct dlock_libevent_state {
	struct event_base *base; /**< the application's event_base */
	dlock_client *client; /**< the client the hooks serve (each hook call says it) */
	struct event *timer;  /**< the client's one timer; NULL until the first timer call */
} dlock_libevent_state;

/** One watched descriptor, in its slot. */
typedef struct dlock_libevent_watch {
	struct event *ev;     /**< a persistent event for `events`, made again when they change */
	dlock_client *client; /**< the client that watches the descriptor */
	unsigned events; /**< DLOCK_IO_READ | DLOCK_IO_WRITE that `ev` waits for */
} dlock_libevent_watch;

/** Event callback of a descriptor: readiness to dlock_loop_ready(). */
static inline void dlock_libevent_io_cb(evutil_socket_t fd, short what, void *arg)
{
	dlock_libevent_watch *w = (dlock_libevent_watch *)arg;
	unsigned ready = 0;

	ready |= (what & EV_READ) ? DLOCK_IO_READ : 0;
	ready |= (what & EV_WRITE) ? DLOCK_IO_WRITE : 0;
	/* May free `w` and its event (dlock stops watching): libevent allows
	 * event_free() of the event whose callback is running. */
	dlock_loop_ready(w->client, (int)fd, ready);
}

/** dlock_loop_hooks::watch: make the descriptor's event for `events`, or (`events` 0) free it. */
static inline int dlock_libevent_watch_fd(dlock_client *client, void *userdata, int fd, unsigned events,
                                          void **slot)
{
	dlock_libevent_state *s = (dlock_libevent_state *)userdata;
	dlock_libevent_watch *w = (dlock_libevent_watch *)*slot;
	short what = (short)(EV_PERSIST | ((events & DLOCK_IO_READ) ? EV_READ : 0) |
	                     ((events & DLOCK_IO_WRITE) ? EV_WRITE : 0));
	struct event *ev;

	s->client = client;
	events &= DLOCK_IO_READ | DLOCK_IO_WRITE;
	if (events == 0) {
		if (w != NULL) {
			event_free(w->ev);
			free(w);
			*slot = NULL;
		}
		return 0;
	}
	if (w != NULL && w->events == events)
		return 0;
	if (w == NULL) {
		w = (dlock_libevent_watch *)calloc(1, sizeof *w);
		if (w == NULL)
			return -1;
		w->client = client;
	}
	/* An event's flags are fixed: make a new one, then drop the old. */
	ev = event_new(s->base, (evutil_socket_t)fd, what, dlock_libevent_io_cb, w);
	if (ev == NULL || event_add(ev, NULL) != 0) {
		if (ev != NULL)
			event_free(ev);
		if (*slot == NULL) /* new: leave the slot as it was */
			free(w);
		return -1;
	}
	if (w->ev != NULL)
		event_free(w->ev);
	w->ev = ev;
	w->events = events;
	*slot = w;
	return 0;
}

/** Timer callback: dlock_loop_timer_fired(). */
static inline void dlock_libevent_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	dlock_libevent_state *s = (dlock_libevent_state *)arg;

	(void)fd;
	(void)what;
	dlock_loop_timer_fired(s->client);
}

/** dlock_loop_hooks::timer: (re)arm the client's one timer event, or delete it (`ms` -1). */
static inline int dlock_libevent_timer(dlock_client *client, void *userdata, int64_t ms)
{
	dlock_libevent_state *s = (dlock_libevent_state *)userdata;
	struct timeval tv;

	s->client = client;
	if (ms < 0) {
		if (s->timer != NULL)
			(void)event_del(s->timer);
		return 0;
	}
	if (s->timer == NULL) {
		s->timer = evtimer_new(s->base, dlock_libevent_timer_cb, s);
		if (s->timer == NULL)
			return -1;
	}
	tv.tv_sec = ms / 1000;
	tv.tv_usec = ms % 1000 * 1000;
	/* libevent counts from the time cached for this turn: a long turn
	 * would make the timer fire early. */
	(void)event_base_update_cache_time(s->base);
	return evtimer_add(s->timer, &tv) == 0 ? 0 : -1;
}

/** dlock_loop_hooks::cleanup: free the timer event and the state. */
static inline void dlock_libevent_cleanup(void *userdata)
{
	dlock_libevent_state *s = (dlock_libevent_state *)userdata;

	if (s == NULL)
		return;
	if (s->timer != NULL)
		event_free(s->timer);
	free(s);
}

/**
 * Fill `hooks` for one loop client on `base`: pass them to
 * dlock_client_open_async().  DLOCK_OK, DLOCK_EINVAL (NULL argument) or
 * DLOCK_ENOMEM; on an error `hooks` is left as it was.
 */
static inline dlock_status dlock_libevent_hooks(struct event_base *base, dlock_loop_hooks *hooks)
{
	dlock_libevent_state *s;

	if (base == NULL || hooks == NULL)
		return DLOCK_EINVAL;
	s = (dlock_libevent_state *)calloc(1, sizeof *s);
	if (s == NULL)
		return DLOCK_ENOMEM;
	s->base = base;
	hooks->version = DLOCK_LOOP_HOOKS_VERSION;
	hooks->userdata = s;
	hooks->watch = dlock_libevent_watch_fd;
	hooks->timer = dlock_libevent_timer;
	hooks->cleanup = dlock_libevent_cleanup;
	return DLOCK_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_ADAPTERS_LIBEVENT_H */
