/*
 * Redis backend: the subscriber that turns release messages into wake-ups
 * (redis_sub.c), one per single-server client (one per master of a
 * cluster) with its own connection and thread; a loop client has a second
 * one for its loop's acquisitions, on its loop, with no thread.  Never
 * included outside backends/redis/.
 */
#ifndef DLOCK_REDIS_SUB_H
#define DLOCK_REDIS_SUB_H

#include "redis_conn.h"

/* ------------------------------------------------------------ subscriber */

struct redis_sub;
struct redis_chan;

/* One acquisition watching a channel; lives in its lock state (redis_lock.h) until unwatched.  An observer's
 * watch (redis_elect.c) has no `w`: its on_message is also called when the channel's slot moves away. */
struct redis_watch {
	struct redis_watch *prev, *next;
	struct redis_chan *chan; /* NULL: not watching (polling instead) */
	dlock_wait *w;           /* or NULL: an observer's */
	void (*on_message)(void *arg); /* or NULL: called for each message, besides waking w */
	void *on_message_arg;
};

enum redis_watch_state {
	REDIS_WATCH_POLL = -1,   /* no subscription possible now: poll */
	REDIS_WATCH_PENDING = 0, /* SUBSCRIBE not confirmed yet: a wake-up follows its confirmation */
	REDIS_WATCH_ACTIVE = 1   /* confirmed: every release wakes the watcher */
};

/**
 * A subscriber for the server at `ep` (no thread, no connection until the
 * first watch).  `sharded`: SSUBSCRIBE on a Redis Cluster node, and
 * `moved(moved_arg)` (from the subscriber's thread, no lock held) each time
 * the server says a channel's slot is served elsewhere; its watchers then
 * poll (REDIS_WATCH_POLL) until they watch it anew.
 */
dlock_status dlock_redis_sub_new(struct redis_sub **out, const struct redis_endpoint *ep,
                                 const struct redis_cfg *cfg, int sharded, void (*moved)(void *arg),
                                 void *moved_arg, dlock_error *err);
/**
 * A loop client's subscriber for the server at `ep`: no thread; its
 * connection and its rounds are the loop's (`io`), and it is used only on
 * the loop's thread (its watchers are the loop's acquisitions).  Not
 * sharded.  The server's addresses are resolved now.  DLOCK_OK,
 * DLOCK_ENOMEM, DLOCK_ECONNECT (no address), DLOCK_EURI.
 */
dlock_status dlock_redis_sub_new_loop(struct redis_sub **out, dlock_io *io, const struct redis_endpoint *ep,
                                      const struct redis_cfg *cfg, dlock_error *err);
/** Stop the thread and free everything.  No watch may remain.  NULL is a no-op. */
void dlock_redis_sub_free(struct redis_sub *s);
/** Drop the connection and make a new one (the master moved): every waiter retries, then watches again. */
void dlock_redis_sub_reconnect(struct redis_sub *s);
/**
 * Watch channel `chan`: `w` is woken by its messages and by subscription
 * changes.  `on_message` (or NULL) is also called for each message and
 * when the subscription is confirmed (a message before it was missed),
 * from the subscriber's thread with the subscriber's mutex held: it must
 * not block nor call back into the subscriber.
 */
enum redis_watch_state dlock_redis_sub_watch(struct redis_sub *s, struct redis_watch *wt, const char *chan,
                                             size_t len, dlock_wait *w, void (*on_message)(void *arg),
                                             void *on_message_arg);
enum redis_watch_state dlock_redis_sub_state(struct redis_sub *s, const struct redis_watch *wt);
void dlock_redis_sub_unwatch(struct redis_sub *s, struct redis_watch *wt);

#endif
