/*
 * Held locks: the client's list of them (for loss reports), release and
 * check.  A lock belongs to the session that created its node: once that
 * session is dead, the lock is not ours, whatever the server still shows.
 */
#include <stdio.h>

#include "zookeeper_internal.h"

int dlock_zk_hold(struct zk_client *c, struct zk_session *s, struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	int alive = s->state != ZK_DEAD && !dlock_zk_own_gone_locked(lk);
	if (alive) {
		lk->held = 1;
		lk->prev = NULL;
		lk->next = c->held;
		if (c->held)
			c->held->prev = lk;
		c->held = lk;
	}
	pthread_mutex_unlock(&c->mu);
	return alive;
}

void dlock_zk_unhold(struct zk_client *c, struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	if (lk->held) {
		if (lk->prev)
			lk->prev->next = lk->next;
		else
			c->held = lk->next;
		if (lk->next)
			lk->next->prev = lk->prev;
		lk->held = 0;
		lk->prev = lk->next = NULL;
	}
	dlock_zk_own_forget_locked(lk); /* its deletion, ours or not, is no loss now */
	pthread_mutex_unlock(&c->mu);
}

void dlock_zk_report_lost_locked(struct zk_client *c, uint64_t gen, const char *why)
{
	for (struct zk_lock *lk = c->held; lk; lk = lk->next)
		if (lk->gen == gen)
			dlock_report_lost(c->host, lk, DLOCK_LOST_SESSION, why);
}

int dlock_zk_delete_own(struct zk_session *s, const char *node, int32_t version)
{
	for (int retried = 0;; retried = 1) {
		if (!dlock_zk_session_await(s, retried))
			return ZSESSIONEXPIRED; /* the node went (or goes) with the session */
		int64_t sent = dlock_monotonic_ns();
		int rc = zoo_delete(s->zh, node, version);
		if (dlock_zk_rc_answered(rc))
			dlock_zk_session_answered(s, sent);
		if (rc == ZNONODE && retried)
			return ZOK; /* the attempt whose answer was lost went through */
		if (!dlock_zk_rc_connection(rc))
			return rc;
	}
}

dlock_status dlock_zk_release(struct zk_client *c, struct zk_lock *lk, dlock_error *err)
{
	dlock_zk_unhold(c, lk);
	struct zk_session *s = dlock_zk_session_of(c, lk->gen);
	if (!s)
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: the session that held the lock has ended");
	int rc = dlock_zk_delete_own(s, lk->node, lk->version);
	dlock_zk_session_put(s);
	if (rc == ZOK)
		return DLOCK_OK;
	if (rc == ZNONODE || rc == ZBADVERSION)
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: the lock node is gone (deleted by another client?)");
	if (dlock_zk_rc_session_gone(rc))
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: the session that held the lock ended before release");
	return dlock_zk_fail(err, rc, "deleting the lock node");
}

static int64_t session_id(struct zk_session *s)
{
	pthread_mutex_lock(&s->c->mu);
	int64_t id = s->id;
	pthread_mutex_unlock(&s->c->mu);
	return id;
}

/* Ours: the node exists, this session owns it, and it is the node we created. */
static dlock_status check_node(struct zk_session *s, struct zk_lock *lk, dlock_error *err)
{
	struct Stat st;
	int64_t sent = dlock_monotonic_ns();
	int rc = zoo_exists(s->zh, lk->node, 0, &st);
	if (dlock_zk_rc_answered(rc))
		dlock_zk_session_answered(s, sent);
	if (rc == ZOK && st.ephemeralOwner == session_id(s) && st.czxid == lk->czxid)
		return DLOCK_OK;
	if (rc == ZOK || rc == ZNONODE)
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: the lock node is gone");
	if (dlock_zk_rc_connection(rc))
		return dlock_error_set(err, DLOCK_EUNCERTAIN, "zk://: no answer from ZooKeeper; the session may live");
	if (dlock_zk_rc_session_gone(rc))
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: the session that held the lock has ended");
	return dlock_zk_fail(err, rc, "looking at the lock node");
}

dlock_status dlock_zk_check(struct zk_client *c, struct zk_lock *lk, dlock_error *err)
{
	struct zk_session *s = dlock_zk_session_of(c, lk->gen);
	if (!s)
		return dlock_error_set(err, DLOCK_ENOTHELD, "zk://: the session that held the lock has ended");
	dlock_status st;
	if (!dlock_zk_session_connected(s))
		st = dlock_error_set(err, DLOCK_EUNCERTAIN,
		                     "zk://: disconnected from ZooKeeper; the session and the lock may still live");
	else
		st = check_node(s, lk, err);
	dlock_zk_session_put(s);
	return st;
}
