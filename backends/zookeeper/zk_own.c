/*
 * Watching our own lock node.  Without credentials anyone who can reach the
 * server may delete any lock node; the next contender then holds the lock
 * at once.  The holder learns of it here and reports the lock lost
 * (DLOCK_LOST_TAKEN) when the deletion is seen, without waiting for a
 * check().
 *
 * At no extra request while nobody else comes: the looks at the queue
 * (get-children, zk_recipe.c; the first one goes with the create,
 * zk_pipe.c) set a child watch on the parent with this watcher, so the look
 * that finds us first has already set the watch that will tell of our
 * node's deletion.  Once our node has a watch of its own (below), later
 * looks set none: it would only bring a notification at each change of
 * the queue.  When the children change (a contender
 * queues, or our node goes), we send one exists with a watch on our node
 * itself: ZNONODE means it is gone; otherwise that watch now reports its
 * deletion, and the parent's later changes need no answer.  The parent is
 * a container: once our node is gone the server may reap it, and a client
 * that was cut off meanwhile then hears of the parent's deletion instead
 * of its children's change; that is answered the same way.  So a lock that
 * is contended costs at most one exists per acquisition.  A data change
 * on our node uses its watch up: it is set again.  The client library sets
 * every watch again when it reconnects within the session, and the server
 * then reports what changed meanwhile; an exists that failed for a lost
 * connection is sent again once connected.
 *
 * Which acquisition: the slot remembers the path of our node now (paths
 * carry a GUID fresh per acquisition).  An event about another path (an
 * earlier acquisition) changes nothing; release and giving up forget the
 * path before deleting the node, so our own delete is no loss.  A
 * deletion seen before the lock is held makes the acquire look again (and
 * start over: its node is gone).
 *
 * Threads: the watcher and completions run on the library's completion
 * thread and take only `mu`; they send asynchronous requests only.
 */
#include <stdio.h>
#include <string.h>

#include "zookeeper_internal.h"

#define DELETED_MSG "zk://: the lock node was deleted (by another client)"

/* Our node is gone (mu held): a held lock is lost, an acquire looks again. */
static void gone_locked(struct zk_slot *slot)
{
	slot->own_gone = 1;
	/* The core logs the loss and tells the holder. */
	if (slot->lk && slot->lk->held)
		dlock_report_lost(slot->c->host, slot->lk, DLOCK_LOST_TAKEN, DELETED_MSG);
	else if (slot->w)
		dlock_wait_wake(slot->w);
}

static void check_done(int rc, const struct Stat *stat, const void *data)
{
	struct zk_slot *slot = (struct zk_slot *)data;
	struct zk_client *c = slot->c;
	char watched[ZK_PATH_MAX] = "";
	(void)stat;
	dlock_zk_log_enter(c); /* the completion thread of one of c's handles */
	pthread_mutex_lock(&c->mu);
	if (slot->own_checking && slot->own[0] && !slot->own_gone) {
		slot->own_checking = 0;
		if (rc == ZOK) {
			slot->own_watched = 1;
			snprintf(watched, sizeof watched, "%s", strrchr(slot->own, '/') + 1);
		}
		else if (rc == ZNONODE)
			gone_locked(slot);
		else if (dlock_zk_rc_connection(rc))
			slot->own_recheck = 1; /* sent again once connected */
	}
	pthread_mutex_unlock(&c->mu);
	if (watched[0]) /* node names are ours or the server's: no part of the lock's name */
		dlock_host_log(c->host, DLOCK_LOG_DEBUG, "zk: %s watches its own node", watched);
	if (rc != ZOK && rc != ZNONODE && !dlock_zk_rc_connection(rc) && !dlock_zk_rc_session_gone(rc))
		dlock_host_log(c->host, DLOCK_LOG_WARN, "zk: could not watch the lock node (%s)", zerror(rc));
}

/* Ask whether our node `path` is there, with a watch on it.  Asynchronous: this may be the completion thread. */
static void send_check(zhandle_t *zh, struct zk_slot *slot, const char *path)
{
	int rc = zoo_awexists(zh, path, dlock_zk_own_watcher, slot, check_done, slot);
	if (rc != ZOK) {
		pthread_mutex_lock(&slot->c->mu);
		slot->own_checking = 0;
		slot->own_recheck = 1;
		pthread_mutex_unlock(&slot->c->mu);
	}
}

/* 1 if `path` is the parent of our node `own`. */
static int is_parent_of(const char *path, const char *own)
{
	const char *slash = strrchr(own, '/');
	size_t n = slash ? (size_t)(slash - own) : 0;
	return slash && strlen(path) == n && strncmp(path, own, n) == 0;
}

void dlock_zk_own_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk_slot *slot = ctx;
	struct zk_client *c = slot->c;
	char own[ZK_PATH_MAX] = "";
	(void)state;
	dlock_zk_log_enter(c); /* the completion thread of one of c's handles */
	if (type == ZOO_SESSION_EVENT || !path)
		return; /* the session's own watcher looks after the session */
	pthread_mutex_lock(&c->mu);
	if (slot->own[0] && !slot->own_gone) {
		int mine = strcmp(path, slot->own) == 0;
		if (mine && type == ZOO_DELETED_EVENT) {
			gone_locked(slot);
		} else if ((mine && type == ZOO_CHANGED_EVENT) ||
		           ((type == ZOO_CHILD_EVENT || type == ZOO_DELETED_EVENT) && is_parent_of(path, slot->own) &&
		            !slot->own_watched)) {
			/* A data change used the node's watch up; a change of the children may be its deletion;
			 * the parent's own deletion (a container the server reaped once our node had gone,
			 * reported in place of the child change when we reconnect) means our node is gone. */
			if (mine)
				slot->own_watched = 0;
			if (!slot->own_checking) {
				slot->own_checking = 1;
				snprintf(own, sizeof own, "%s", slot->own);
			}
		}
	}
	pthread_mutex_unlock(&c->mu);
	if (own[0])
		send_check(zh, slot, own);
}

void dlock_zk_own_reconnected(struct zk_session *s)
{
	struct zk_client *c = s->c;
	char own[ZK_PATH_MAX];
	for (;;) {
		struct zk_slot *slot;
		pthread_mutex_lock(&c->mu);
		for (slot = c->slots; slot; slot = slot->next)
			if (slot->own_recheck && slot->own[0] && !slot->own_gone && slot->lk && slot->lk->gen == s->gen)
				break;
		if (slot) {
			slot->own_recheck = 0;
			slot->own_checking = 1;
			snprintf(own, sizeof own, "%s", slot->own);
		}
		pthread_mutex_unlock(&c->mu);
		if (!slot)
			return;
		send_check(s->zh, slot, own);
	}
}

void dlock_zk_own_start(struct zk_client *c, struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	snprintf(lk->slot->own, sizeof lk->slot->own, "%s", lk->node);
	lk->slot->own_gone = lk->slot->own_watched = lk->slot->own_checking = lk->slot->own_recheck = 0;
	pthread_mutex_unlock(&c->mu);
}

void dlock_zk_own_forget_locked(struct zk_lock *lk)
{
	lk->slot->own[0] = '\0';
	lk->slot->own_gone = lk->slot->own_watched = lk->slot->own_checking = lk->slot->own_recheck = 0;
}

void dlock_zk_own_forget(struct zk_client *c, struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	dlock_zk_own_forget_locked(lk);
	pthread_mutex_unlock(&c->mu);
}

int dlock_zk_own_unwatched(struct zk_client *c, const struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	int unwatched = !lk->slot->own_watched && !lk->slot->own_checking;
	pthread_mutex_unlock(&c->mu);
	return unwatched;
}

int dlock_zk_own_watched(struct zk_client *c, const struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	int watched = lk->slot->own_watched && !lk->slot->own_checking && !lk->slot->own_gone &&
	              strcmp(lk->slot->own, lk->node) == 0;
	pthread_mutex_unlock(&c->mu);
	return watched;
}

int dlock_zk_own_gone_locked(const struct zk_lock *lk)
{
	return lk->slot->own_gone && strcmp(lk->slot->own, lk->node) == 0;
}
