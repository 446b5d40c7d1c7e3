/*
 * The subscriber: one thread and one connection per client that turn
 * release messages into wake-ups of the acquires waiting for them.  A loop
 * client has a second one for the acquisitions that wait on its loop, with
 * no thread: the same channels and replies, its connection the loop's
 * (redis_nbconn.c) and its rounds a timer of the loop (section "on a
 * loop" below).
 *
 * Waiters never touch the connection.  They register a watch on a channel
 * (under the mutex) and kick the thread through a pipe; the thread sends
 * SUBSCRIBE/UNSUBSCRIBE and wakes the watchers of a channel when its
 * subscription is confirmed, when a message arrives, and when the
 * connection is lost (so every waiter retries at once).
 *
 * Why a blocking connection driven by our own poll(), and not hiredis's
 * async API: the async API needs an event-loop adapter (libevent, libev...)
 * that dlock does not want to depend on, and speaks no TLS, while the
 * backend's connection (redis_io.c) has what is needed.  The thread polls
 * the socket and the wake pipe; when the socket is readable,
 * dlock_redis_read_some() reads what is there without blocking and
 * dlock_redis_buffered_reply() yields each complete reply.  Commands are
 * queued on the connection and sent with dlock_redis_flush().  The
 * connection is made exactly like a pooled one (close-on-exec socket, TLS
 * for rediss, timeouts, AUTH, SELECT; for Sentinel, the master located).
 *
 * Channels: one per lock name, shared by every watcher of that name and
 * reference-counted.  At most one command per channel is in flight (a
 * channel's state says which), so each confirmation belongs to exactly one
 * command.  A channel nobody watches stays subscribed for LINGER_MS, so a
 * name that is contended again and again is not subscribed anew each time.
 * A SUBSCRIBE the server refuses (Redis 7 ACL users have no channels by
 * default) switches the client to polling for good, said once in the log.
 *
 * Sharded (a Redis Cluster node, redis_cluster.c): SSUBSCRIBE and
 * SUNSUBSCRIBE, whose messages reach only the node serving the channel's
 * slot (a classic PUBLISH is sent to every node of the cluster).  When the
 * slot moves away the server unsubscribes us by itself, or answers a
 * SSUBSCRIBE with a redirection: the channel is then "moved", its
 * watchers are woken and poll, and the owner is told (`moved`), so that
 * the next attempt looks up the slot's node again and watches there.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_nbconn.h"
#include "redis_sub.h"

#define LINGER_MS 2000
#define RECONNECT_MIN_MS 50
#define RECONNECT_MAX_MS 2000

enum chan_state {
	CHAN_PENDING,       /* to subscribe */
	CHAN_SUBSCRIBING,   /* SUBSCRIBE sent */
	CHAN_ACTIVE,        /* confirmed */
	CHAN_UNSUBSCRIBING, /* UNSUBSCRIBE sent */
	CHAN_MOVED          /* sharded: its slot is served elsewhere; watchers poll */
};

struct redis_chan {
	struct redis_chan *next;
	struct redis_watch *watchers;
	unsigned refs;          /* watchers in the list */
	enum chan_state state;
	int64_t idle_since_ns;  /* when refs last dropped to 0 */
	size_t len;
	char name[];
};

struct redis_sub {
	pthread_mutex_t mu;      /* guards everything but the thread-only fields */
	struct redis_chan *chans;
	int started, stop;
	int degraded;            /* cannot subscribe now (no connection): watchers poll */
	int refused;             /* the server refused SUBSCRIBE: poll from now on */
	int start_failed;        /* the thread could not be created */
	int reconnect;           /* dlock_redis_sub_reconnect(): drop the connection at the next round */
	int wake[2];             /* pipe: waiters write, the thread polls */
	pthread_t thread;
	struct redis_endpoint ep;
	const struct redis_cfg *cfg;
	int sharded;             /* SSUBSCRIBE on a cluster node */
	const char *subscribe, *unsubscribe; /* the commands, and (lowercase) their confirmations */
	const char *subscribed, *unsubscribed, *message;
	void (*moved)(void *arg); /* sharded: a channel's slot is served elsewhere */
	void *moved_arg;

	/* A loop client's (dlock_redis_sub_new_loop()): no thread; the loop's connection and timer instead. */
	dlock_io *io;
	struct redis_nbconn *nb;
	dlock_io_timer *tick;    /* the loop's round: kicked at once, or when a linger or a backoff ends */
	int nb_up;               /* commands were written on `nb` since its last drop */
	int nb_heard;            /* and it answered */
	int nb_failed;           /* a command could not be written this round: nb_err says why */
	dlock_error nb_err;

	/* Used by the thread only. */
	struct redis_conn *ctx;
	int64_t retry_at_ns, backoff_ms;
	int logged_down;
	int moved_pending;       /* a channel moved: tell `moved` once the mutex is released */
};

/* ------------------------------------------------------------ channels */

static void wake_chan_locked(struct redis_chan *ch)
{
	for (struct redis_watch *wt = ch->watchers; wt; wt = wt->next)
		if (wt->w)
			dlock_wait_wake(wt->w);
}

/* A message, or the subscription confirmed: wake every watcher, and call their on_message. */
static void notify_chan_locked(struct redis_chan *ch)
{
	wake_chan_locked(ch);
	for (struct redis_watch *wt = ch->watchers; wt; wt = wt->next)
		if (wt->on_message)
			wt->on_message(wt->on_message_arg);
}

static void wake_all_locked(struct redis_sub *s)
{
	for (struct redis_chan *ch = s->chans; ch; ch = ch->next)
		wake_chan_locked(ch);
}

static struct redis_chan *chan_find_locked(struct redis_sub *s, const char *name, size_t len)
{
	for (struct redis_chan *ch = s->chans; ch; ch = ch->next)
		if (ch->len == len && memcmp(ch->name, name, len) == 0)
			return ch;
	return NULL;
}

static void chan_remove_locked(struct redis_sub *s, struct redis_chan *ch)
{
	struct redis_chan **pp = &s->chans;
	while (*pp != ch)
		pp = &(*pp)->next;
	*pp = ch->next;
	free(ch);
}

static enum redis_watch_state state_locked(const struct redis_sub *s, const struct redis_chan *ch)
{
	if (!ch || s->refused || s->degraded || s->start_failed || ch->state == CHAN_MOVED)
		return REDIS_WATCH_POLL;
	return ch->state == CHAN_ACTIVE ? REDIS_WATCH_ACTIVE : REDIS_WATCH_PENDING;
}

static void kick(struct redis_sub *s)
{
	if (s->io) { /* the loop's round, at its next turn */
		if (s->tick)
			dlock_io_timer_set(s->tick, 0); /* out of memory: the next watch or reply kicks again */
		return;
	}
	char b = 1;
	/* A full pipe already holds a wake-up: nothing is lost when this fails. */
	if (write(s->wake[1], &b, 1) < 0 && errno != EAGAIN)
		return;
}

/* ------------------------------------------------------------ the thread's connection */

static void log_down_once(struct redis_sub *s, const char *why)
{
	if (s->logged_down)
		return;
	s->logged_down = 1;
	dlock_host_log(s->cfg->host, DLOCK_LOG_WARN,
	               "redis %s: the subscriber has no connection (%s): waiters poll until it reconnects",
	               s->ep.label, why);
}

/* Connection lost: every subscription is gone, every waiter retries. */
static void drop_connection_locked(struct redis_sub *s)
{
	dlock_redis_conn_free(s->ctx);
	s->ctx = NULL;
	if (s->nb && s->nb_up)
		dlock_redis_nbconn_reset(s->nb);
	s->nb_up = 0;
	s->nb_heard = 0;
	for (struct redis_chan *ch = s->chans, *next; ch; ch = next) {
		next = ch->next;
		if (ch->refs == 0)
			chan_remove_locked(s, ch);
		else if (ch->state != CHAN_MOVED)
			ch->state = CHAN_PENDING;
	}
	s->retry_at_ns = 0;
	wake_all_locked(s);
}

static int wanted_locked(const struct redis_sub *s)
{
	for (const struct redis_chan *ch = s->chans; ch; ch = ch->next)
		if (ch->refs > 0)
			return 1;
	return 0;
}

/* Random number in [lo, hi] from a cheap per-call source (jitter only). */
static int64_t jitter(int64_t lo, int64_t hi)
{
	uint32_t r = 0;
	if (hi <= lo || dlock_random_bytes(&r, sizeof r) != DLOCK_OK)
		return lo;
	return lo + (int64_t)(r % (uint64_t)(hi - lo + 1));
}

/* No connection can be made now: watchers poll, and the next try waits a growing backoff (its ms). */
static int backoff_locked(struct redis_sub *s, const char *why)
{
	int64_t now = dlock_monotonic_ns();
	s->degraded = 1;
	wake_all_locked(s); /* those waiting for a confirmation poll instead */
	log_down_once(s, why);
	s->retry_at_ns = now + jitter(s->backoff_ms / 2, s->backoff_ms) * REDIS_NS_PER_MS;
	s->backoff_ms = s->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : s->backoff_ms * 2;
	return (int)(s->retry_at_ns > now ? (s->retry_at_ns - now) / REDIS_NS_PER_MS + 1 : 1);
}

/* A connection that works: no backoff any more. */
static void connected_locked(struct redis_sub *s)
{
	s->degraded = 0;
	s->backoff_ms = RECONNECT_MIN_MS;
	s->logged_down = 0;
}

/* Connect when a watcher needs it and no backoff is running; *timeout_ms: when to look again. */
static void connect_locked(struct redis_sub *s, int *timeout_ms)
{
	int64_t now = dlock_monotonic_ns();
	if (s->refused || !wanted_locked(s))
		return;
	if (now < s->retry_at_ns) {
		*timeout_ms = (int)((s->retry_at_ns - now) / REDIS_NS_PER_MS) + 1;
		return;
	}
	dlock_error err = { "" };
	struct redis_conn *ctx = NULL;
	pthread_mutex_unlock(&s->mu);
	dlock_status st = dlock_redis_connect(&s->ep, s->cfg, &ctx, &err);
	pthread_mutex_lock(&s->mu);
	if (st == DLOCK_OK) {
		s->ctx = ctx;
		connected_locked(s);
		return;
	}
	*timeout_ms = backoff_locked(s, err.msg);
}

struct sub_cmd {
	const char *argv[2];
	size_t len[2];
};

static int append_cmd(struct redis_conn *conn, void *arg)
{
	struct sub_cmd *c = arg;
	return dlock_redis_append_argv(conn, 2, c->argv, c->len);
}

static void append_locked(struct redis_sub *s, const char *cmd, struct redis_chan *ch, enum chan_state next)
{
	struct sub_cmd c = { { cmd, ch->name }, { strlen(cmd), ch->len } };
	if (!s->nb) {
		if (append_cmd(s->ctx, &c) == REDIS_OK)
			ch->state = next;
		return;
	}
	if (s->nb_failed) /* this round's connection failed: loop_round() backs off */
		return;
	if (dlock_redis_nbconn_append(s->nb, append_cmd, &c, &s->nb_err) == DLOCK_OK) {
		ch->state = next;
		s->nb_up = 1;
	} else {
		s->nb_failed = 1;
	}
}

/* Queue what the channels need; *timeout_ms: when a lingering one is due. */
static void queue_commands_locked(struct redis_sub *s, int *timeout_ms)
{
	int64_t now = dlock_monotonic_ns();
	for (struct redis_chan *ch = s->chans, *next; ch; ch = next) {
		next = ch->next;
		int64_t idle_ms = (now - ch->idle_since_ns) / REDIS_NS_PER_MS;
		if (ch->refs == 0 && (ch->state == CHAN_PENDING || ch->state == CHAN_MOVED)) {
			chan_remove_locked(s, ch);
		} else if (ch->state == CHAN_PENDING) {
			append_locked(s, s->subscribe, ch, CHAN_SUBSCRIBING);
		} else if (ch->refs == 0 && ch->state == CHAN_ACTIVE && idle_ms >= LINGER_MS) {
			append_locked(s, s->unsubscribe, ch, CHAN_UNSUBSCRIBING);
		} else if (ch->refs == 0 && ch->state == CHAN_ACTIVE) {
			int left = (int)(LINGER_MS - idle_ms) + 1;
			if (*timeout_ms < 0 || left < *timeout_ms)
				*timeout_ms = left;
		}
	}
}

/* ------------------------------------------------------------ replies */

static void on_refused_locked(struct redis_sub *s, const redisReply *r)
{
	s->refused = 1;
	dlock_host_log(s->cfg->host, DLOCK_LOG_WARN,
	               "redis %s: SUBSCRIBE refused (%s): waiters poll with a bounded backoff instead of being "
	               "notified (grant the user the channels under the prefix to fix this)",
	               s->ep.label, r->str);
	drop_connection_locked(s);
}

/* A channel's slot is served elsewhere: its watchers poll until their next attempt finds the new node. */
static void chan_moved_locked(struct redis_sub *s, struct redis_chan *ch)
{
	ch->state = CHAN_MOVED;
	wake_chan_locked(ch);
	for (struct redis_watch *wt = ch->watchers; wt; wt = wt->next)
		if (!wt->w && wt->on_message) /* an observer: reads, and so watches again where the slot went */
			wt->on_message(wt->on_message_arg);
	s->moved_pending = 1;
}

/*
 * A sharded SSUBSCRIBE answered with a redirection.  RESP2 does not say
 * which channel it was for: every channel still waiting for its
 * confirmation is marked moved; those whose confirmation follows (replies
 * come in order) become active again when it arrives.
 */
static void on_redirected_locked(struct redis_sub *s)
{
	for (struct redis_chan *ch = s->chans; ch; ch = ch->next)
		if (ch->state == CHAN_SUBSCRIBING)
			chan_moved_locked(s, ch);
}

static void on_reply_locked(struct redis_sub *s, const redisReply *r)
{
	if (r->type == REDIS_REPLY_ERROR && s->sharded && dlock_redis_is_redirection(r)) {
		on_redirected_locked(s);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		on_refused_locked(s, r);
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING)
		return;
	const char *kind = r->element[0]->str;
	struct redis_chan *ch = chan_find_locked(s, r->element[1]->str, (size_t)r->element[1]->len);
	if (!ch)
		return;
	if (strcmp(kind, s->message) == 0) {
		notify_chan_locked(ch);
	} else if (strcmp(kind, s->subscribed) == 0 && (ch->state == CHAN_SUBSCRIBING || ch->state == CHAN_MOVED)) {
		ch->state = CHAN_ACTIVE;
		ch->idle_since_ns = dlock_monotonic_ns();
		notify_chan_locked(ch); /* a release before the subscription took effect was not heard */
	} else if (strcmp(kind, s->unsubscribed) == 0 && ch->state == CHAN_UNSUBSCRIBING) {
		if (ch->refs > 0)
			ch->state = CHAN_PENDING; /* watched again meanwhile: subscribe anew */
		else
			chan_remove_locked(s, ch);
	} else if (strcmp(kind, s->unsubscribed) == 0 && s->sharded && ch->state == CHAN_ACTIVE) {
		chan_moved_locked(s, ch); /* not asked for: the server says the slot moved away */
	}
}

/* Read what the socket has and handle every complete reply; -1 when the connection failed. */
static int read_replies(struct redis_sub *s)
{
	if (dlock_redis_read_some(s->ctx) != REDIS_OK)
		return -1;
	for (;;) {
		void *reply = NULL;
		if (dlock_redis_buffered_reply(s->ctx, &reply) != REDIS_OK)
			return -1;
		if (!reply)
			return 0;
		pthread_mutex_lock(&s->mu);
		on_reply_locked(s, reply);
		int gone = s->ctx == NULL, moved = s->moved_pending;
		s->moved_pending = 0;
		pthread_mutex_unlock(&s->mu);
		freeReplyObject(reply);
		if (moved && s->moved)
			s->moved(s->moved_arg);
		if (gone)
			return 0;
	}
}

/* ------------------------------------------------------------ the thread */

static void drain_pipe(int fd)
{
	char buf[64];
	while (read(fd, buf, sizeof buf) > 0)
		;
}

/* One round: connect or queue, then wait for the socket, a kick or a timeout. */
static void sub_round_locked(struct redis_sub *s)
{
	int timeout_ms = -1;
	if (s->reconnect && s->ctx)
		drop_connection_locked(s);
	s->reconnect = 0;
	if (!s->ctx)
		connect_locked(s, &timeout_ms);
	if (s->ctx)
		queue_commands_locked(s, &timeout_ms);
	struct redis_conn *ctx = s->ctx;
	pthread_mutex_unlock(&s->mu);

	int failed = ctx && dlock_redis_flush(ctx) != REDIS_OK;
	struct pollfd fds[2] = { { .fd = s->wake[0], .events = POLLIN }, { .fd = ctx ? ctx->fd : -1, .events = POLLIN } };
	if (!failed && poll(fds, 2, timeout_ms) > 0) {
		if (fds[0].revents)
			drain_pipe(s->wake[0]);
		if (fds[1].revents)
			failed = read_replies(s) != 0;
	}
	pthread_mutex_lock(&s->mu);
	if (failed && s->ctx) {
		dlock_host_log(s->cfg->host, DLOCK_LOG_INFO, "redis %s: subscriber connection lost (%s); reconnecting",
		               s->ep.label, s->ctx->errstr);
		drop_connection_locked(s);
	}
}

static void *sub_main(void *arg)
{
	struct redis_sub *s = arg;
	pthread_mutex_lock(&s->mu);
	while (!s->stop)
		sub_round_locked(s);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int ensure_thread_locked(struct redis_sub *s)
{
	if (s->io)
		return 1; /* on the loop: no thread */
	if (s->started || s->start_failed)
		return s->started;
	/* Signals go to the application's threads, never to this one. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&s->thread, NULL, sub_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		s->start_failed = 1;
		dlock_host_log(s->cfg->host, DLOCK_LOG_WARN, "redis %s: cannot start the subscriber thread: waiters poll",
		               s->ep.label);
		return 0;
	}
	s->started = 1;
	return 1;
}

/* ------------------------------------------------------------ on a loop */

/*
 * A loop client's subscriber (dlock_redis_sub_new_loop()) has no thread:
 * its connection is the loop's (redis_nbconn.c, which pushes every reply
 * after AUTH and SELECT here), and its round — subscribe what is watched,
 * unsubscribe what lingered, reconnect after a backoff — runs from a timer
 * of the loop that kick() sets to fire at the loop's next turn.  Everything
 * runs on the loop's thread; the mutex is taken as elsewhere, uncontended.
 */

/* The loop's connection failed or could not be made: the subscriptions are gone; connect again after a backoff. */
static void loop_failed_locked(struct redis_sub *s, const dlock_error *why)
{
	drop_connection_locked(s);
	dlock_io_timer_set(s->tick, backoff_locked(s, why->msg));
}

static void loop_pushed(void *arg, redisReply *r)
{
	struct redis_sub *s = arg;
	pthread_mutex_lock(&s->mu);
	connected_locked(s);
	s->nb_heard = 1;
	on_reply_locked(s, r);
	pthread_mutex_unlock(&s->mu);
}

/* The connection dropped: after a reply on it, connect again at once (as the thread does); else back off. */
static void loop_dropped(void *arg, const dlock_error *why)
{
	struct redis_sub *s = arg;
	pthread_mutex_lock(&s->mu);
	s->nb_up = 0; /* dropped already */
	if (!s->nb_heard) { /* never answered: connecting failed */
		loop_failed_locked(s, why);
	} else {
		dlock_host_log(s->cfg->host, DLOCK_LOG_INFO, "redis %s: subscriber connection lost (%s); reconnecting",
		               s->ep.label, why->msg);
		drop_connection_locked(s);
		s->degraded = 1; /* until it answers: watchers poll */
		s->retry_at_ns = 0;
		dlock_io_timer_set(s->tick, 0);
	}
	pthread_mutex_unlock(&s->mu);
}

static void loop_round(void *arg)
{
	struct redis_sub *s = arg;
	int timeout_ms = -1;
	pthread_mutex_lock(&s->mu);
	int64_t now = dlock_monotonic_ns();
	if (s->degraded && now < s->retry_at_ns)
		timeout_ms = (int)((s->retry_at_ns - now) / REDIS_NS_PER_MS) + 1;
	else if (!s->stop && !s->refused) {
		s->degraded = 0; /* trying again: watchers wait for the confirmation, or a failure wakes them */
		queue_commands_locked(s, &timeout_ms);
		if (s->nb_failed) {
			s->nb_failed = 0;
			loop_failed_locked(s, &s->nb_err);
			timeout_ms = -1; /* set by the backoff */
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (timeout_ms >= 0)
		dlock_io_timer_set(s->tick, timeout_ms);
}

/* ------------------------------------------------------------ API */

static struct redis_sub *sub_alloc(const struct redis_endpoint *ep, const struct redis_cfg *cfg, int sharded)
{
	struct redis_sub *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->wake[0] = s->wake[1] = -1;
	pthread_mutex_init(&s->mu, NULL);
	s->ep = *ep;
	s->cfg = cfg;
	s->sharded = sharded;
	s->subscribe = sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
	s->unsubscribe = sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
	s->subscribed = sharded ? "ssubscribe" : "subscribe";
	s->unsubscribed = sharded ? "sunsubscribe" : "unsubscribe";
	s->message = sharded ? "smessage" : "message";
	s->backoff_ms = RECONNECT_MIN_MS;
	return s;
}

dlock_status dlock_redis_sub_new(struct redis_sub **out, const struct redis_endpoint *ep,
                                 const struct redis_cfg *cfg, int sharded, void (*moved)(void *arg),
                                 void *moved_arg, dlock_error *err)
{
	struct redis_sub *s = sub_alloc(ep, cfg, sharded);
	if (!s)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		dlock_status st = dlock_error_set(err, DLOCK_EIO, "redis: cannot create the subscriber's pipe: %s",
		                                  strerror(errno));
		s->wake[0] = s->wake[1] = -1;
		dlock_redis_sub_free(s);
		return st;
	}
	s->moved = moved;
	s->moved_arg = moved_arg;
	*out = s;
	return DLOCK_OK;
}

dlock_status dlock_redis_sub_new_loop(struct redis_sub **out, dlock_io *io, const struct redis_endpoint *ep,
                                      const struct redis_cfg *cfg, dlock_error *err)
{
	struct redis_sub *s = sub_alloc(ep, cfg, 0);
	if (!s)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	s->io = io;
	dlock_status st = dlock_redis_nbconn_new(io, &s->ep, cfg, &s->nb, err);
	if (st == DLOCK_OK && dlock_io_timer_new(io, loop_round, s, &s->tick) != DLOCK_OK)
		st = dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	if (st != DLOCK_OK) {
		dlock_redis_sub_free(s);
		return st;
	}
	dlock_redis_nbconn_set_push(s->nb, loop_pushed, loop_dropped, s);
	*out = s;
	return DLOCK_OK;
}

void dlock_redis_sub_free(struct redis_sub *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_mutex_unlock(&s->mu);
	kick(s);
	if (s->started)
		pthread_join(s->thread, NULL);
	dlock_redis_conn_free(s->ctx);
	dlock_redis_nbconn_free(s->nb); /* stops watching its descriptor before closing it */
	dlock_io_timer_free(s->tick);
	while (s->chans)
		chan_remove_locked(s, s->chans);
	if (s->wake[0] >= 0) {
		close(s->wake[0]);
		close(s->wake[1]);
	}
	pthread_mutex_destroy(&s->mu);
	free(s);
}

enum redis_watch_state dlock_redis_sub_watch(struct redis_sub *s, struct redis_watch *wt, const char *chan,
                                             size_t len, dlock_wait *w, void (*on_message)(void *arg),
                                             void *on_message_arg)
{
	*wt = (struct redis_watch){ .w = w, .on_message = on_message, .on_message_arg = on_message_arg };
	pthread_mutex_lock(&s->mu);
	if (s->refused || !ensure_thread_locked(s)) {
		pthread_mutex_unlock(&s->mu);
		return REDIS_WATCH_POLL;
	}
	struct redis_chan *ch = chan_find_locked(s, chan, len);
	if (!ch && (ch = calloc(1, sizeof *ch + len + 1)) != NULL) {
		memcpy(ch->name, chan, len);
		ch->len = len;
		ch->state = CHAN_PENDING;
		ch->next = s->chans;
		s->chans = ch;
	}
	if (ch && ch->state == CHAN_MOVED)
		ch->state = CHAN_PENDING; /* looked up anew by the caller: try this node again */
	if (ch) {
		wt->chan = ch;
		wt->next = ch->watchers;
		if (ch->watchers)
			ch->watchers->prev = wt;
		ch->watchers = wt;
		ch->refs++;
	}
	enum redis_watch_state st = state_locked(s, ch);
	pthread_mutex_unlock(&s->mu);
	if (st != REDIS_WATCH_ACTIVE)
		kick(s);
	return st;
}

enum redis_watch_state dlock_redis_sub_state(struct redis_sub *s, const struct redis_watch *wt)
{
	pthread_mutex_lock(&s->mu);
	enum redis_watch_state st = state_locked(s, wt->chan);
	pthread_mutex_unlock(&s->mu);
	return st;
}

void dlock_redis_sub_unwatch(struct redis_sub *s, struct redis_watch *wt)
{
	struct redis_chan *ch = wt->chan;
	if (!ch)
		return;
	pthread_mutex_lock(&s->mu);
	if (wt->prev)
		wt->prev->next = wt->next;
	else
		ch->watchers = wt->next;
	if (wt->next)
		wt->next->prev = wt->prev;
	if (--ch->refs == 0)
		ch->idle_since_ns = dlock_monotonic_ns();
	pthread_mutex_unlock(&s->mu);
	wt->chan = NULL;
	kick(s); /* the thread recomputes when a lingering channel is due */
}

void dlock_redis_sub_reconnect(struct redis_sub *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->reconnect = 1;
	s->retry_at_ns = 0;
	pthread_mutex_unlock(&s->mu);
	kick(s);
}
