/*
 * The watch on our own lock node.  Without credentials anyone who can reach
 * the server may delete any lock node; the next contender then holds the
 * lock at once.  The holder learns of it from an exists-watch on its own
 * node and reports the lock lost (DLOCK_LOST_TAKEN) when the node's
 * deletion event comes, without waiting for a check().
 *
 * Cost: one exists request per acquisition, sent asynchronously right
 * before the first look at the queue (get-children), so both go out
 * together and the acquire waits no longer.  The create cannot carry the
 * watch: the node's name is only known from its answer.  Before the
 * acquire returns, the exists answer must have confirmed the watch (its
 * czxid is the node's); if it did not (a connection was lost in between),
 * the watch is set again synchronously.  The library sets watches again
 * on every reconnection within the session, and a node deleted meanwhile
 * fires its event then.
 *
 * Which acquisition: the slot remembers the path of the node being watched
 * now (paths carry a GUID fresh per acquisition).  An event for another
 * path (an earlier acquisition, released or abandoned) changes nothing;
 * release and giving up forget the path before deleting the node, so our
 * own delete reports nothing.  A deletion seen before the lock is held
 * makes the acquire look again (and start over: its node is gone).
 *
 * Threads: the watcher and completions run on the library's completion
 * thread and take only `mu`; they make no synchronous call.  Everything
 * here is guarded by `mu`.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zk_internal.h"

#define NS_PER_MS 1000000LL
/* The exists answer came before the get-children answer; its completion is at most a thread hop away. */
#define CONFIRM_WAIT_NS (1000 * NS_PER_MS)
#define DELETED_MSG "zk://: the lock node was deleted (by another client)"

static void note_answer_locked(struct zk_slot *slot, int rc, const struct Stat *stat)
{
	/* czxids only grow: an answer for an earlier node never hides the newest one's. */
	if (rc == ZOK && stat && stat->czxid > slot->own_czxid)
		slot->own_czxid = stat->czxid;
	else if (rc != ZOK)
		slot->own_failed++;
	pthread_cond_broadcast(&slot->c->cond);
}

/* Completion of the exists that sets the watch at acquire. */
static void own_set_done(int rc, const struct Stat *stat, const void *data)
{
	struct zk_slot *slot = (struct zk_slot *)data;
	struct zk_client *c = slot->c;
	dlock_zk_log_enter(c); /* the completion thread of one of c's handles */
	pthread_mutex_lock(&c->mu);
	note_answer_locked(slot, rc, stat);
	pthread_mutex_unlock(&c->mu);
}

/* Completion of the exists sent again after our node's data changed (which used up the watch). */
static void own_reset_done(int rc, const struct Stat *stat, const void *data)
{
	struct zk_slot *slot = (struct zk_slot *)data;
	struct zk_client *c = slot->c;
	dlock_zk_log_enter(c);
	pthread_mutex_lock(&c->mu);
	note_answer_locked(slot, rc, stat);
	if (rc == ZNONODE && slot->own_resetting && slot->own[0] && !slot->own_gone) {
		slot->own_gone = 1; /* deleted between the change and this answer */
		if (slot->lk && slot->lk->held)
			dlock_report_lost(c->host, slot->lk, DLOCK_LOST_TAKEN, DELETED_MSG);
		else if (slot->w)
			dlock_wait_wake(slot->w);
	}
	slot->own_resetting = 0;
	pthread_mutex_unlock(&c->mu);
}

static void own_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk_slot *slot = ctx;
	struct zk_client *c = slot->c;
	int reset = 0;
	(void)state;
	dlock_zk_log_enter(c); /* the completion thread of one of c's handles */
	if (type == ZOO_SESSION_EVENT || !path)
		return; /* the session's own watcher looks after the session */
	pthread_mutex_lock(&c->mu);
	if (slot->own[0] && strcmp(path, slot->own) == 0 && !slot->own_gone) {
		if (type == ZOO_DELETED_EVENT) {
			slot->own_gone = 1;
			/* The core logs the loss and tells the holder. */
			if (slot->lk && slot->lk->held)
				dlock_report_lost(c->host, slot->lk, DLOCK_LOST_TAKEN, DELETED_MSG);
			else if (slot->w)
				dlock_wait_wake(slot->w); /* acquiring: look again, and start over */
		} else if (type == ZOO_CHANGED_EVENT) {
			reset = slot->own_resetting = 1;
		}
	}
	pthread_mutex_unlock(&c->mu);
	/* Asynchronous: this thread must not wait for an answer it delivers itself. */
	if (reset && zoo_awexists(zh, path, own_watcher, slot, own_reset_done, slot) != ZOK)
		dlock_host_log(c->host, DLOCK_LOG_WARN,
		               "zk: could not watch the lock node again after its data changed; "
		               "a deletion will be seen at the next check");
}

int dlock_zk_own_arm(struct zk_session *s, struct zk_lock *lk, struct zk_own_mark *mark)
{
	struct zk_client *c = s->c;
	struct zk_slot *slot = lk->slot;
	pthread_mutex_lock(&c->mu);
	snprintf(slot->own, sizeof slot->own, "%s", lk->node);
	slot->own_gone = 0;
	slot->own_resetting = 0;
	mark->failed = slot->own_failed;
	pthread_mutex_unlock(&c->mu);
	int rc = zoo_awexists(s->zh, lk->node, own_watcher, slot, own_set_done, slot);
	mark->sent = rc == ZOK;
	return rc;
}

int dlock_zk_own_confirm(struct zk_session *s, struct zk_lock *lk, struct zk_own_mark *mark)
{
	struct zk_client *c = s->c;
	struct zk_slot *slot = lk->slot;
	int64_t deadline = dlock_monotonic_ns() + CONFIRM_WAIT_NS;
	pthread_mutex_lock(&c->mu);
	while (mark->sent && slot->own_czxid != lk->czxid && slot->own_failed == mark->failed && !slot->own_gone &&
	       dlock_zk_cond_wait_until(&c->cond, &c->mu, deadline) != ETIMEDOUT)
		;
	int gone = slot->own_gone, ok = slot->own_czxid == lk->czxid;
	pthread_mutex_unlock(&c->mu);
	if (gone)
		return ZNONODE;
	if (ok)
		return ZOK;
	/* Not confirmed (a lost connection, or a stray answer): set it again and wait for the answer. */
	mark->sent = 0; /* from now on, only this way */
	struct Stat st;
	int64_t sent = dlock_monotonic_ns();
	int rc = zoo_wexists(s->zh, lk->node, own_watcher, slot, &st);
	if (dlock_zk_rc_answered(rc))
		dlock_zk_session_answered(s, sent);
	if (rc == ZOK && st.czxid != lk->czxid)
		rc = ZNONODE; /* not the node we created */
	return rc;
}

void dlock_zk_own_forget_locked(struct zk_lock *lk)
{
	lk->slot->own[0] = '\0';
	lk->slot->own_gone = 0;
	lk->slot->own_resetting = 0;
}

void dlock_zk_own_forget(struct zk_client *c, struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	dlock_zk_own_forget_locked(lk);
	pthread_mutex_unlock(&c->mu);
}

int dlock_zk_own_gone_locked(const struct zk_lock *lk)
{
	return lk->slot->own_gone && strcmp(lk->slot->own, lk->node) == 0;
}
