/*
 * One attempt to acquire, on one session: what every recipe does with it
 * (the mutex and read-write recipes, zk_recipe.c; the semaphore's,
 * zk_sem.c; the create sent with the first look, zk_pipe.c).
 *
 *   - Answers: a request the server answered (any code but a lost
 *     connection) shows that the session lived when it was sent
 *     (dlock_zk_answered), which the monitor times the session by.
 *   - The protected create, as Curator's: our node is
 *     PARENT/_c_GUID-MARK, ephemeral sequential, GUID fresh per
 *     acquisition.  If the parent is missing (never made, or an empty
 *     container the server just reaped), make it and create again.  If the
 *     connection drops during the create, the node may or may not exist:
 *     after reconnecting, look for a child carrying our GUID and adopt it,
 *     else create again; a second node with our GUID found later is
 *     deleted by the recipe that sees it.  So no node of ours is ever left
 *     behind to block everyone until the session ends.
 *   - Where our node stands in the children of its parent
 *     (dlock_zk_look_at), without a request: the look that the recipe or
 *     the pipe made.
 *   - Giving up (deadline, cancel, try-once): our node is deleted with the
 *     version it was created with, and the failure said.
 *   - The session dying during an attempt sets `again`: its node died with
 *     it, and zk_acquire.c starts over on the next session.
 *
 * Threads: the acquiring thread only; dlock_zk_look_at() also on the
 * completion thread (zk_pipe.c), reading the attempt only.
 */
#include <stdio.h>
#include <string.h>

#include "zookeeper_internal.h"

int dlock_zk_answered(struct zk_attempt *a, int rc, int64_t sent)
{
	if (dlock_zk_rc_answered(rc))
		dlock_zk_session_answered(a->s, sent);
	return rc;
}

dlock_status dlock_zk_attempt_failed(struct zk_attempt *a, int rc, const char *what)
{
	if (dlock_zk_rc_session_gone(rc)) {
		a->again = 1;
		return DLOCK_OK;
	}
	return dlock_zk_fail(a->err, rc, what);
}

int dlock_zk_reconnected(struct zk_attempt *a)
{
	if (dlock_zk_session_await(a->s, 1))
		return 1;
	a->again = 1;
	return 0;
}

dlock_status dlock_zk_new_guid(struct zk_attempt *a)
{
	unsigned char raw[ZK_GUID_HEX / 2];
	if (dlock_random_bytes(raw, sizeof raw) != DLOCK_OK)
		return dlock_error_set(a->err, DLOCK_EIO, "zk://: no random bytes for the node's GUID");
	dlock_hex(raw, sizeof raw, a->guid);
	return DLOCK_OK;
}

/* ------------------------------------------------------------ create */

static int adopt(struct zk_attempt *a, const char *child)
{
	struct Stat st;
	snprintf(a->lk->node, sizeof a->lk->node, "%s/%s", a->parent, child);
	int64_t sent = dlock_monotonic_ns();
	int rc = dlock_zk_answered(a, zoo_exists(a->s->zh, a->lk->node, 0, &st), sent);
	if (rc == ZOK) {
		a->lk->czxid = st.czxid;
		a->lk->version = st.version;
	}
	return rc;
}

/* Did a create whose answer was lost make our node?  ZOK with *found set or not. */
static int find_by_guid(struct zk_attempt *a, int *found)
{
	struct String_vector kids = { 0, NULL };
	int64_t sent = dlock_monotonic_ns();
	int rc = dlock_zk_answered(a, zoo_get_children(a->s->zh, a->parent, 0, &kids), sent);
	*found = 0;
	if (rc == ZNONODE)
		return ZOK;
	for (int32_t i = 0; rc == ZOK && i < kids.count && !*found; i++) {
		int32_t seq;
		if (dlock_zk_child_has_guid(kids.data[i], a->guid) && dlock_zk_child_seq(kids.data[i], &seq)) {
			rc = adopt(a, kids.data[i]);
			*found = rc == ZOK;
			if (rc == ZNONODE)
				rc = ZOK;
		}
	}
	deallocate_String_vector(&kids);
	return rc;
}

void dlock_zk_node_prefix(const struct zk_attempt *a, char *out, size_t len)
{
	const char *mark = dlock_zk_node_mark(a->kind);
	snprintf(out, len, "%s/" ZK_NODE_PREFIX "%s%s%s", a->parent, a->guid, mark[0] == '-' ? "" : "-", mark);
}

dlock_status dlock_zk_protected_create(struct zk_attempt *a, int rc)
{
	char prefix[ZK_PATH_MAX];
	dlock_zk_node_prefix(a, prefix, sizeof prefix);
	for (int tries = 0; tries < 20; tries++) {
		if (tries > 0 || rc == ZK_CREATE_UNSENT) {
			struct Stat st;
			int64_t sent = dlock_monotonic_ns();
			rc = dlock_zk_answered(a,
			                       zoo_create2(a->s->zh, prefix, a->data, a->data ? a->datalen : -1,
			                                   dlock_zk_acl(a->c), ZOO_EPHEMERAL_SEQUENTIAL, a->lk->node,
			                                   sizeof a->lk->node, &st),
			                       sent);
			if (rc == ZOK) {
				a->lk->czxid = st.czxid;
				a->lk->version = st.version;
			}
		}
		if (rc == ZOK)
			return DLOCK_OK;
		if (rc == ZNONODE)
			rc = dlock_zk_ensure_parent(a->s, a->parent, a->lk);
		while (dlock_zk_rc_connection(rc)) {
			if (!dlock_zk_reconnected(a))
				return DLOCK_OK;
			int found;
			rc = find_by_guid(a, &found);
			if (rc == ZOK && found)
				return DLOCK_OK;
		}
		if (rc != ZOK)
			return dlock_zk_attempt_failed(a, rc, "creating the lock node");
	}
	return dlock_error_set(a->err, DLOCK_ESERVER, "zk://: the lock node could not be created (parent keeps vanishing)");
}

/* ------------------------------------------------------------ queue */

void dlock_zk_look_at(const struct zk_attempt *a, const struct String_vector *kids, struct zk_look *out)
{
	out->sem = out->dups = 0;
	for (int32_t i = 0; i < kids->count; i++) {
		int32_t seq;
		out->sem |= strcmp(kids->data[i], ZK_SEM_LEASES) == 0;
		out->dups += strcmp(kids->data[i], a->own) != 0 && dlock_zk_child_has_guid(kids->data[i], a->guid) &&
		             dlock_zk_child_seq(kids->data[i], &seq);
	}
	int32_t at;
	out->found = dlock_zk_queue_place(kids->data, kids->count, a->own, a->guid, &at);
	out->pred[0] = '\0';
	out->pred_first = 0;
	if (!out->found || at < 0)
		return;
	snprintf(out->pred, sizeof out->pred, "%s", kids->data[at]);
	/* Is anything before `pred` in our way?  Nodes made later come after ours: only these can be. */
	int32_t mine, before;
	enum zk_node_kind ours = dlock_zk_child_kind(a->own, &mine);
	dlock_zk_child_kind(kids->data[at], &before);
	out->pred_first = 1;
	for (int32_t i = 0; i < kids->count && out->pred_first; i++) {
		int32_t seq;
		enum zk_node_kind k = dlock_zk_child_kind(kids->data[i], &seq);
		if (k == ZK_NODE_NONE || k == ZK_NODE_LEASE || dlock_zk_child_has_guid(kids->data[i], a->guid))
			continue; /* not in the queue, or ours */
		if ((ours != ZK_NODE_READ || k != ZK_NODE_READ) && dlock_zk_seq_before(seq, before))
			out->pred_first = 0;
	}
}

/* ------------------------------------------------------------ giving up */

dlock_status dlock_zk_give_up(struct zk_attempt *a, dlock_status st)
{
	dlock_zk_own_forget(a->c, a->lk); /* our own delete is no loss */
	int rc = dlock_zk_delete_own(a->s, a->lk->node, a->lk->version);
	if (rc != ZOK && rc != ZNONODE && !dlock_zk_rc_session_gone(rc))
		dlock_host_log(a->c->host, DLOCK_LOG_WARN,
		               "zk: could not delete an abandoned lock node (%s); it goes when the session ends",
		               zerror(rc));
	if (st == DLOCK_ETIMEDOUT)
		return dlock_error_set(a->err, DLOCK_EBUSY,
		                       a->lk->kind == DLOCK_KIND_SEMAPHORE ? "zk://: every permit stayed held"
		                                                           : "zk://: the lock stayed held by another owner");
	if (st == DLOCK_ECANCELED)
		return dlock_error_set(a->err, st, "zk://: acquire cancelled");
	return st;
}
