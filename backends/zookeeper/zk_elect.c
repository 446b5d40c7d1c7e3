/*
 * Elections on zk://: the leader is the holder of the election's mutex,
 * the first node of the name's queue (Curator's LeaderLatch has the same
 * shape: the lowest ephemeral sequential node leads), and its term is that
 * node's czxid, the mutex's fencing token.
 *
 * Proclaim: the leader writes its value into its own node's data, after
 * the owner record and a newline (zk_path.c), with a setData on the
 * version it knows, so that only the node's holder writes there: a
 * version that moved (an answer lost with the connection, or another
 * writer) is looked at again, and the write goes on only while the node
 * is this acquisition's (its czxid) in this session.  Inspection reads the
 * value back from the holder's data (zk_inspect.c).
 *
 * Observing (watch()): two watches per observed name, each one-shot and
 * set again as soon as it fires:
 *   - a child watch on the name's node BASE/NAME (candidates join and
 *     leave, the leader's node goes), or, while that node does not exist,
 *     an exists watch for its creation;
 *   - a data watch on the leader's node (a get with a watch): a proclaim
 *     is a data change of that node, and its deletion ends the term.
 * Every arming is asynchronous (get-children, then get on the first node
 * it lists), so watchers may set them again from the completion thread.
 * An event arms both again and calls changed() only once they are set, so
 * the core's next read comes after the watches it relies on: no change
 * between the event and that read is missed.  An event that comes while
 * an arming is on its way makes it arm once more before telling.  The
 * first arming is awaited by watch() itself (arm before read), within the
 * connect timeout.
 *
 * Connections: the client library restores a session's watches when it
 * reconnects; a new session (after an expiry) has none.  Either way the
 * session watcher marks every watch in use (zk_session.c), and the monitor
 * thread arms them again on the connected session (zk_monitor.c), calling
 * changed() once they are set: both through the sessions' hooks, which
 * zk.c points at dlock_zk_watches_reconnected_locked() and
 * dlock_zk_watches_rearm_locked().  An arming cut by a lost connection
 * waits for the same.
 *
 * Lifetime: a ZooKeeper watch keeps its context until it fires, so, as
 * the slots (zk_slot.c), watch contexts live until the client closes:
 * unwatch() marks one free, and the next watch() takes it again once no
 * arming of the earlier use is on its way.  A late event of an earlier use
 * costs the new one a spurious changed(); nothing else.  The server keeps
 * at most one child and one data watch per context and path.
 *
 * Threads: `changed` is called with `mu` held (the core's callback takes
 * only its own short lock), so after unwatch() has taken `mu` it is no
 * longer running nor called.  Completions and watchers run on the
 * library's completion thread and make asynchronous calls only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zookeeper_internal.h"

#define NS_PER_MS 1000000LL
#define PROCLAIM_TRIES 5 /* versions that moved under us (lost answers, another writer) */

/* An observer's watch on one name: a context that lives as long as the client. */
struct zk_watch {
	struct zk_client *c;
	struct zk_watch *next;      /* every watch of the client (mu) */
	int in_use;                 /* mu */
	void (*changed)(void *arg); /* mu */
	void *arg;                  /* mu */
	char parent[ZK_PATH_MAX];   /* the name's node BASE/NAME (mu; set while not arming) */
	char leader[ZK_PATH_MAX];   /* the first node seen by the arming on its way (completion thread) */
	struct zk_session *s;       /* the session the arming on its way uses (mu) */
	int arming;                 /* an arming is on its way (mu) */
	int again;                  /* an event came meanwhile: arm once more before telling (mu) */
	int need_arm;               /* wants an arming on a connected session: the monitor's (mu) */
	int waiting;                /* watch() awaits the first arming: tell it, not `changed` (mu) */
	int first_done;             /* that first arming ended (mu) */
};

/* ------------------------------------------------------------ proclaim */

static int64_t session_id_of(struct zk_session *s)
{
	pthread_mutex_lock(&s->c->mu);
	int64_t id = s->id;
	pthread_mutex_unlock(&s->c->mu);
	return id;
}

/* Is lk's node still this acquisition's, in session `s`?  ZOK with *version its version, or a code. */
static int still_ours(struct zk_session *s, struct zk_lock *lk, int32_t *version)
{
	struct Stat st;
	int64_t sent = dlock_monotonic_ns();
	int rc = zoo_exists(s->zh, lk->node, 0, &st);
	if (dlock_zk_rc_answered(rc))
		dlock_zk_session_answered(s, sent);
	if (rc == ZOK && (st.czxid != lk->czxid || st.ephemeralOwner != session_id_of(s)))
		return ZNONODE; /* a node of that name, but not ours */
	if (rc == ZOK)
		*version = st.version;
	return rc;
}

/* setData on our node with the version we know, across lost answers and moved versions; a code. */
static int write_data(struct zk_session *s, struct zk_lock *lk, const char *data, int len)
{
	int rc = ZOK;
	for (int tries = 0; tries < PROCLAIM_TRIES; tries++) {
		struct Stat st;
		int64_t sent = dlock_monotonic_ns();
		rc = zoo_set2(s->zh, lk->node, data, len, lk->version, &st);
		if (dlock_zk_rc_answered(rc))
			dlock_zk_session_answered(s, sent);
		if (rc == ZOK) {
			lk->version = st.version; /* release deletes this version */
			return ZOK;
		}
		while (dlock_zk_rc_connection(rc) && dlock_zk_session_await(s, 1))
			rc = ZBADVERSION; /* the write may have gone through: look at the version again */
		if (rc != ZBADVERSION)
			return rc;
		int32_t version = lk->version; /* set by still_ours() whenever it answers ZOK */
		rc = still_ours(s, lk, &version);
		while (dlock_zk_rc_connection(rc) && dlock_zk_session_await(s, 1))
			rc = still_ours(s, lk, &version);
		if (rc != ZOK)
			return rc;
		lk->version = version;
	}
	return rc == ZOK ? ZBADVERSION : rc;
}

dlock_status dlock_zk_proclaim(struct zk_client *c, struct zk_lock *lk, const char *value, size_t len,
                               dlock_error *err)
{
	if (lk->kind != DLOCK_KIND_MUTEX)
		return dlock_error_set(err, DLOCK_ENOTSUP, "zk://: only a mutex's holder leads an election");
	if (len > DLOCK_VALUE_MAX)
		return dlock_error_set(err, DLOCK_EINVAL, "zk://: a leader's value is at most %d bytes", DLOCK_VALUE_MAX);
	char data[ZK_LEADER_DATA_MAX];
	size_t olen = c->owner_len > DLOCK_OWNER_MAX ? DLOCK_OWNER_MAX : c->owner_len;
	memcpy(data, c->owner, olen);
	size_t n = olen;
	if (len > 0) { /* no value: the record alone, as the create wrote it */
		data[n++] = ZK_DATA_SEP;
		memcpy(data + n, value, len);
		n += len;
	}
	pthread_mutex_lock(&c->mu);
	int ours = lk->held && !dlock_zk_own_gone_locked(lk);
	pthread_mutex_unlock(&c->mu);
	struct zk_session *s = ours ? dlock_zk_session_of(c, lk->gen) : NULL;
	if (!s)
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: not the holder: the session or the node has gone");
	int rc = write_data(s, lk, data, (int)n);
	dlock_zk_session_put(s);
	if (rc == ZOK)
		return DLOCK_OK;
	if (rc == ZNONODE || dlock_zk_rc_session_gone(rc) || dlock_zk_rc_connection(rc))
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: the leader's node is gone (%s)", zerror(rc));
	if (rc == ZBADVERSION)
		return dlock_error_set(err, DLOCK_ESERVER, "zk://: the leader's node keeps being written by another client");
	return dlock_zk_fail(err, rc, "writing the leader's value");
}

/* ------------------------------------------------------------ watches */

static void arm(struct zk_watch *w, struct zk_session *s);

/* Tell the observer (mu held): the core reads again.  The first arming tells watch() instead. */
static void tell_locked(struct zk_watch *w)
{
	if (w->waiting) {
		w->first_done = 1;
		pthread_cond_broadcast(&w->c->cond);
	} else if (w->in_use && w->changed) {
		w->changed(w->arg);
	}
}

/*
 * The arming on its way ended (mu held, released inside): armed (1), or
 * cut short (0: the monitor arms again once connected).  An event that
 * came meanwhile arms once more: the session to send it on is returned,
 * referenced (the arming stays on its way); otherwise the observer is
 * told, and NULL returned.
 */
static struct zk_session *arming_done_unlock(struct zk_watch *w, int armed)
{
	struct zk_client *c = w->c;
	struct zk_session *s = NULL;
	w->arming = 0;
	w->s = NULL;
	if (!w->in_use || c->stop) {
		if (w->waiting) {
			w->first_done = 1;
			pthread_cond_broadcast(&c->cond);
		}
		pthread_mutex_unlock(&c->mu);
		return NULL;
	}
	if (!armed) {
		w->need_arm = 1;
		pthread_cond_broadcast(&c->cond); /* the monitor */
	} else if (w->again) {
		w->again = 0;
		s = c->cur;
		if (s->state == ZK_CONNECTED) {
			s->refs++;
			w->arming = 1;
			w->s = s;
		} else {
			w->need_arm = 1;
			s = NULL;
		}
	} else {
		tell_locked(w);
	}
	pthread_mutex_unlock(&c->mu);
	return s;
}

/* A completion ended the arming (mu held, released inside): arm once more if an event came meanwhile. */
static void finish_unlock(struct zk_watch *w, int armed)
{
	struct zk_session *s = arming_done_unlock(w, armed);
	if (s) {
		arm(w, s);
		dlock_zk_session_put(s);
	}
}

/* The session of the arming on its way, referenced, if it may still be used (completion thread); else NULL. */
static struct zk_session *arming_session_locked(struct zk_watch *w)
{
	struct zk_session *s = w->s;
	if (!s || s->state == ZK_DEAD || w->c->stop || !w->in_use)
		return NULL;
	s->refs++;
	return s;
}

static void watch_event(zhandle_t *zh, int type, int state, const char *path, void *ctx);

static void leader_done(int rc, const char *value, int len, const struct Stat *stat, const void *data)
{
	struct zk_watch *w = (struct zk_watch *)data;
	(void)value, (void)len, (void)stat;
	dlock_zk_log_enter(w->c); /* the completion thread of one of the client's handles */
	pthread_mutex_lock(&w->c->mu);
	/* ZNONODE: it went between the listing and the get; the child watch tells of that. */
	finish_unlock(w, rc == ZOK || rc == ZNONODE || dlock_zk_rc_answered(rc));
}

static void parent_done(int rc, const struct Stat *stat, const void *data)
{
	struct zk_watch *w = (struct zk_watch *)data;
	(void)stat;
	dlock_zk_log_enter(w->c);
	pthread_mutex_lock(&w->c->mu);
	struct zk_session *s = rc == ZOK ? arming_session_locked(w) : NULL;
	if (!s) { /* ZNONODE: the exists watch tells of its creation */
		finish_unlock(w, rc == ZNONODE || dlock_zk_rc_answered(rc));
		return;
	}
	pthread_mutex_unlock(&w->c->mu);
	arm(w, s); /* created meanwhile: list its children */
	dlock_zk_session_put(s);
}

/* The first lock node among `kids`, by sequence number; NULL when none. */
static const char *first_node(const struct String_vector *kids)
{
	const char *first = NULL;
	int32_t best = 0;
	for (int32_t i = 0; kids && i < kids->count; i++) {
		int32_t seq;
		enum zk_node_kind kind = dlock_zk_child_kind(kids->data[i], &seq);
		if (kind == ZK_NODE_NONE || kind == ZK_NODE_LEASE)
			continue;
		if (!first || dlock_zk_seq_before(seq, best)) {
			first = kids->data[i];
			best = seq;
		}
	}
	return first;
}

static void children_done(int rc, const struct String_vector *kids, const void *data)
{
	struct zk_watch *w = (struct zk_watch *)data;
	struct zk_client *c = w->c;
	dlock_zk_log_enter(c);
	pthread_mutex_lock(&c->mu);
	struct zk_session *s = rc == ZOK || rc == ZNONODE ? arming_session_locked(w) : NULL;
	if (!s) { /* an answer that sets no watch (ZNOAUTH) leaves the core's reads once per lease */
		finish_unlock(w, rc != ZOK && rc != ZNONODE && dlock_zk_rc_answered(rc));
		return;
	}
	const char *first = rc == ZOK ? first_node(kids) : NULL;
	int n = first ? snprintf(w->leader, sizeof w->leader, "%s/%s", w->parent, first) : 0;
	char parent[ZK_PATH_MAX];
	snprintf(parent, sizeof parent, "%s", w->parent);
	pthread_mutex_unlock(&c->mu);
	int sent = ZOK, done = 0;
	if (rc == ZNONODE) /* nobody campaigned yet, or the server reaped the empty node: wait for its creation */
		sent = zoo_awexists(s->zh, parent, watch_event, w, parent_done, w);
	else if (first && n > 0 && (size_t)n < sizeof w->leader)
		sent = zoo_awget(s->zh, w->leader, watch_event, w, leader_done, w);
	else
		done = 1; /* no leader: the child watch is all there is to set */
	dlock_zk_session_put(s);
	if (done || sent != ZOK) {
		pthread_mutex_lock(&c->mu);
		finish_unlock(w, done);
	}
}

/* Send the arming's first request on `s` (referenced by the caller); w->arming is set. */
static void arm(struct zk_watch *w, struct zk_session *s)
{
	char parent[ZK_PATH_MAX];
	pthread_mutex_lock(&w->c->mu);
	snprintf(parent, sizeof parent, "%s", w->parent);
	pthread_mutex_unlock(&w->c->mu);
	int rc = zoo_awget_children(s->zh, parent, watch_event, w, children_done, w);
	if (rc != ZOK) {
		pthread_mutex_lock(&w->c->mu);
		(void)arming_done_unlock(w, 0); /* cut short: never arms again itself (NULL) */
	}
}

/* Start an arming on the current session if none is on its way (mu held, released inside). */
static void arm_now_unlock(struct zk_watch *w)
{
	struct zk_client *c = w->c;
	struct zk_session *s = c->cur;
	if (w->arming) {
		w->again = 1;
		pthread_mutex_unlock(&c->mu);
		return;
	}
	if (!s || s->state != ZK_CONNECTED || c->stop) {
		w->need_arm = 1;
		pthread_mutex_unlock(&c->mu);
		return;
	}
	w->need_arm = 0;
	w->again = 0;
	w->arming = 1;
	w->s = s;
	s->refs++;
	pthread_mutex_unlock(&c->mu);
	arm(w, s);
	dlock_zk_session_put(s);
}

/* Watcher of every watch an observer sets: a node event arms again, then tells. */
static void watch_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk_watch *w = ctx;
	(void)zh, (void)state, (void)path;
	dlock_zk_log_enter(w->c);
	if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT)
		return; /* the session watcher marks every watch on reconnection */
	pthread_mutex_lock(&w->c->mu);
	if (!w->in_use) {
		pthread_mutex_unlock(&w->c->mu);
		return;
	}
	arm_now_unlock(w);
}

dlock_status dlock_zk_watch(struct zk_client *c, const char *name, size_t len, void (*changed)(void *arg),
                            void *arg, void **out, dlock_error *err)
{
	char parent[ZK_PATH_MAX];
	dlock_status st = dlock_zk_name_parent(c, name, len, parent, err);
	if (st != DLOCK_OK)
		return st;
	pthread_mutex_lock(&c->mu);
	struct zk_watch *w = c->watches;
	while (w && (w->in_use || w->arming))
		w = w->next;
	if (!w && (w = calloc(1, sizeof *w)) != NULL) {
		w->c = c;
		w->next = c->watches;
		c->watches = w;
	}
	if (!w) {
		pthread_mutex_unlock(&c->mu);
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	}
	snprintf(w->parent, sizeof w->parent, "%s", parent);
	w->changed = changed;
	w->arg = arg;
	w->in_use = 1;
	w->again = w->need_arm = 0;
	w->waiting = 1;
	w->first_done = 0;
	arm_now_unlock(w);
	/* Arm before the core reads: wait for the first arming (not connected: the monitor arms, then tells). */
	int64_t deadline = dlock_monotonic_ns() + c->cfg.connect_timeout_ms * NS_PER_MS;
	pthread_mutex_lock(&c->mu);
	while (w->arming && !w->first_done && !c->stop &&
	       dlock_cond_wait_until(&c->cond, &c->mu, deadline) != ETIMEDOUT)
		;
	w->waiting = 0; /* an arming still on its way tells `changed` when it ends */
	pthread_mutex_unlock(&c->mu);
	*out = w;
	return DLOCK_OK;
}

void dlock_zk_unwatch(struct zk_client *c, struct zk_watch *w)
{
	pthread_mutex_lock(&c->mu);
	w->in_use = 0;
	w->changed = NULL;
	w->arg = NULL;
	w->need_arm = w->again = 0;
	pthread_mutex_unlock(&c->mu);
}

void dlock_zk_watches_reconnected_locked(struct zk_client *c)
{
	for (struct zk_watch *w = c->watches; w; w = w->next)
		if (w->in_use)
			w->need_arm = 1;
}

void dlock_zk_watches_rearm_locked(struct zk_client *c)
{
	/* Each once per turn (an arming refused at once waits for the next): contexts are never freed
	 * before close and new ones go to the head, so `next` stays valid while mu is dropped. */
	for (struct zk_watch *w = c->watches, *next; w && !c->stop && c->cur->state == ZK_CONNECTED; w = next) {
		next = w->next;
		if (w->in_use && w->need_arm && !w->arming) {
			arm_now_unlock(w); /* clears need_arm on a connected session */
			pthread_mutex_lock(&c->mu);
		}
	}
}

void dlock_zk_watches_free(struct zk_client *c)
{
	while (c->watches) {
		struct zk_watch *next = c->watches->next;
		free(c->watches);
		c->watches = next;
	}
}
