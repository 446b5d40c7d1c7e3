/*
 * The lock recipes, as Apache Curator's InterProcessMutex and
 * InterProcessReadWriteLock do them, in one queue per name (the
 * semaphore's internal mutex is this recipe too, in its "locks" child):
 *
 *   1. Create PARENT/_c_GUID-lock- (a mutex), PARENT/_c_GUID-__WRIT__ (a
 *      writer) or PARENT/_c_GUID-__READ__ (a reader) as
 *      EPHEMERAL_SEQUENTIAL, GUID fresh per acquisition, across a missing
 *      parent and lost answers (the protected create, zk_attempt.c); a
 *      second node with our GUID that a look finds later is deleted.
 *   2. List the children (the first time in the same round trip as the
 *      create: zk_pipe.c).  A mutex or a writer holds the lock when its
 *      node is the lowest of all; a reader when no mutex or writer node is
 *      lower than its own.  Otherwise watch only the node that blocks us
 *      (exists with a watch): a mutex or a writer the node just before its
 *      own, of any kind; a reader the nearest mutex or writer node before
 *      its own.  One release wakes only the waiters it can let in, not the
 *      whole queue.  When that node goes, or if it is already gone, list
 *      again; unless nothing before it was in our way and our own node is
 *      known to be there (handed_over()): the lock is then ours at once.
 *
 * So the order is the queue's: a writer waits for everyone before it, and
 * a reader that comes after a waiting writer waits for that writer (no
 * writer starves: DLOCK_RWLOCK_WRITER_FIRST).  A mutex node counts as a
 * writer and the mutex recipe sees readers and writers, so a name used as
 * a mutex by one client and as a read-write lock by another is still
 * exclusive: these kinds need no refusal across clients.  A semaphore's
 * nodes are elsewhere (zk_sem.c): the first look at the queue that shows
 * a "leases" child lists it, and a lease node there refuses the name
 * (DLOCK_EKIND); the semaphore looks for our nodes after making its own.
 *   3. Give up (deadline, cancel, try-once) by deleting our node with the
 *      version it was created with (zk_attempt.c).
 *
 * From the create on, our own node is watched (zk_own.c): a holder whose
 * node another client deletes is told the lock is lost; a contender whose
 * node goes looks again and starts over.
 *
 * Every node carries the client's owner record as its data (zk_path.c),
 * written by the create itself, so that inspection can name the holder.
 *
 * The fencing token of a mutex or a writer is the node's czxid: zxids
 * order every change of the ensemble, so successive holders get strictly
 * larger tokens even when the parent was deleted and created again in
 * between (sequence numbers would start again).  A reader gets none
 * (read fencing NONE): the writer before it has left no node whose czxid
 * it could give.
 *
 * If the session dies during an attempt, its node dies with it; the
 * acquire starts again on the next session while the wait allows
 * (zk_acquire.c).
 */
#include <stdio.h>
#include <string.h>

#include "zookeeper_internal.h"

/* ------------------------------------------------------------ queue */

/* A second node of ours (a create that went through after all): remove it. */
static void delete_duplicate(struct zk_attempt *a, const char *child)
{
	char path[ZK_PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", a->parent, child);
	int rc = zoo_delete(a->s->zh, path, -1);
	if (rc != ZOK && rc != ZNONODE)
		dlock_host_log(a->c->host, DLOCK_LOG_WARN, "zk: could not delete a duplicate lock node: %s", zerror(rc));
}

/*
 * One look at the queue.  ZOK with pred[0] == '\0': the lock is ours.  ZOK
 * with pred set: the name of the node that blocks us.  ZNONODE: our node is
 * gone.  *sem: 1 when a semaphore's "leases" child is among the children.
 * The first look of an acquisition may have come with the create (zk_pipe.c).
 */
static int scan(struct zk_attempt *a, struct zk_look *look)
{
	if (a->have_look) {
		a->have_look = 0;
		*look = a->look;
		return look->found ? ZOK : ZNONODE;
	}
	struct String_vector kids = { 0, NULL };
	/* The child watch tells of our node's deletion (zk_own.c): set by the look that finds us first, and
	 * by every later look until our node has a watch of its own; after that it would only cost the
	 * server a notification to this client at each change of the queue. */
	watcher_fn watcher = dlock_zk_own_unwatched(a->c, a->lk) ? dlock_zk_own_watcher : NULL;
	int64_t sent = dlock_monotonic_ns();
	int rc = dlock_zk_answered(a, zoo_wget_children(a->s->zh, a->parent, watcher, a->lk->slot, &kids), sent);
	if (rc != ZOK)
		return rc;
	dlock_zk_look_at(a, &kids, look);
	for (int32_t i = 0; look->dups && i < kids.count; i++) {
		int32_t seq;
		if (strcmp(kids.data[i], a->own) != 0 && dlock_zk_child_has_guid(kids.data[i], a->guid) &&
		    dlock_zk_child_seq(kids.data[i], &seq))
			delete_duplicate(a, kids.data[i]);
	}
	deallocate_String_vector(&kids);
	return look->found ? ZOK : ZNONODE;
}

/*
 * Watch the node that blocks us; 1 if it is still there (sleep), 0 if gone
 * (look again), -1 (err set) when it is a semaphore's waiter with another N.
 * In a semaphore's internal queue the watch reads the node's data too: the
 * N of the waiter ahead, at no extra request.
 */
static int watch_pred(struct zk_attempt *a, const char *pred, int *rc_out)
{
	char path[ZK_PATH_MAX], data[ZK_PERMITS_DATA_MAX];
	int datalen = (int)sizeof data;
	struct Stat st;
	int n = snprintf(path, sizeof path, "%s/%s", a->parent, pred);
	if (n < 0 || (size_t)n >= sizeof path) { /* never watch a cut path: it would look "gone" */
		*rc_out = ZBADARGUMENTS;
		return 0;
	}
	dlock_zk_slot_await(a->lk->slot, path); /* before the watch is set: its event may come at once */
	int64_t sent = dlock_monotonic_ns();
	int rc = a->sem_queue ? zoo_wget(a->s->zh, path, dlock_zk_slot_watcher, a->lk->slot, data, &datalen, &st)
	                      : zoo_wexists(a->s->zh, path, dlock_zk_slot_watcher, a->lk->slot, &st);
	rc = dlock_zk_answered(a, rc, sent);
	*rc_out = rc == ZNONODE ? ZOK : rc;
	uint32_t other;
	if (rc == ZOK && a->sem_queue && dlock_zk_permits_parse(data, datalen, &other) && other != a->lk->permits) {
		dlock_error_set(a->err, DLOCK_EKIND, "zk://: the name is in use as a semaphore of %lu permits, not %lu",
		                (unsigned long)other, (unsigned long)a->lk->permits);
		return -1;
	}
	if (rc == ZOK) /* node names are ours or the server's: no part of the lock's name */
		dlock_host_log(a->c->host, DLOCK_LOG_DEBUG, "zk: %s waits for %s", a->own, pred);
	return rc == ZOK;
}

/*
 * One kind per name: is it in use as a semaphore?  Asked once, after our
 * node is made (and only when the name has a "leases" child): a semaphore's
 * acquirer makes its lease node, then looks for ours, so of two racing
 * acquirers at least the later one sees the other.
 */
static dlock_status refuse_semaphore(struct zk_attempt *a)
{
	char path[ZK_PATH_MAX];
	snprintf(path, sizeof path, "%s/" ZK_SEM_LEASES, a->lk->parent);
	for (;;) {
		struct String_vector kids = { 0, NULL };
		int64_t sent = dlock_monotonic_ns();
		int rc = dlock_zk_answered(a, zoo_get_children(a->s->zh, path, 0, &kids), sent);
		if (rc == ZNONODE)
			return DLOCK_OK;
		if (rc == ZOK) {
			int leases = 0;
			for (int32_t i = 0; i < kids.count; i++) {
				int32_t seq;
				leases += dlock_zk_child_kind(kids.data[i], &seq) == ZK_NODE_LEASE;
			}
			deallocate_String_vector(&kids);
			if (!leases)
				return DLOCK_OK;
			return dlock_error_set(a->err, DLOCK_EKIND, "zk://: the name is in use as a semaphore, not as a %s",
			                       a->kind == ZK_NODE_MUTEX ? "mutex" : "read-write lock");
		}
		if (!dlock_zk_rc_connection(rc))
			return dlock_zk_attempt_failed(a, rc, "looking for a semaphore's leases");
		if (!dlock_zk_reconnected(a))
			return DLOCK_OK;
	}
}

/*
 * Woken: is the lock ours without looking again?  Yes when the node we
 * waited for was deleted, nothing before it was in our way (the look that
 * chose it saw every node that can be: later ones come after ours), and
 * our node is still there.  That last is known only once our node has an
 * exists-watch the server answered: its deletion would then have been told
 * before the deletion we were woken for, on the same connection, and
 * dlock_zk_hold() refuses a node seen gone.  Otherwise look again.
 */
static int handed_over(struct zk_attempt *a, const struct zk_look *look)
{
	if (!look->pred_first || !dlock_zk_slot_awaited_gone(a->lk->slot) || !dlock_zk_own_watched(a->c, a->lk))
		return 0;
	dlock_host_log(a->c->host, DLOCK_LOG_DEBUG, "zk: %s leads: the node it waited for is gone", a->own);
	return 1;
}

dlock_status dlock_zk_queue_wait(struct zk_attempt *a)
{
	struct zk_look look;
	const char *pred = look.pred;
	look.pred[0] = '\0';
	look.sem = look.pred_first = 0;
	int first = a->check_leases;
	for (;;) {
		int rc = scan(a, &look);
		if (rc == ZOK && first) {
			first = 0;
			dlock_status st = look.sem ? refuse_semaphore(a) : DLOCK_OK;
			if (st != DLOCK_OK || a->again)
				return st;
		}
		if (rc == ZOK && !pred[0])
			return DLOCK_OK;
		if (rc == ZOK && dlock_wait_try_once(a->w))
			return dlock_error_set(a->err, DLOCK_EBUSY, "zk://: the lock is held by another owner");
		int blocked = rc == ZOK ? watch_pred(a, pred, &rc) : 0;
		if (blocked < 0)
			return DLOCK_EKIND;
		if (blocked) {
			dlock_status st = dlock_wait_sleep(a->w, -1);
			if (st != DLOCK_OK)
				return st;
			if (handed_over(a, &look))
				return DLOCK_OK;
			continue;
		}
		if (rc == ZOK)
			continue;
		if (rc == ZNONODE) { /* our node is gone: its session ended, or someone deleted it */
			a->again = 1;
			return DLOCK_OK;
		}
		if (dlock_zk_rc_connection(rc)) {
			if (!dlock_zk_reconnected(a))
				return DLOCK_OK;
			continue;
		}
		return dlock_zk_attempt_failed(a, rc, "looking at the lock queue");
	}
}

/* ------------------------------------------------------------ attempt */

dlock_status dlock_zk_mutex_attempt(struct zk_attempt *a, dlock_acquired *out)
{
	dlock_status st = dlock_zk_new_guid(a);
	if (st != DLOCK_OK)
		return st;
	st = dlock_zk_create_and_look(a); /* our node, watched as ours, and the first look at the queue */
	if (st != DLOCK_OK || a->again)
		return st;
	st = dlock_zk_queue_wait(a);
	if (a->again)
		return st;
	if (st != DLOCK_OK)
		return dlock_zk_give_up(a, st);
	if (!dlock_zk_hold(a->c, a->s, a->lk)) {
		a->again = 1; /* the session died just now, and the node with it, or the node was deleted */
		return DLOCK_OK;
	}
	*out = (dlock_acquired){ .token = a->kind == ZK_NODE_READ ? 0 : (uint64_t)a->lk->czxid, .sent_ns = 0 };
	return DLOCK_OK;
}
