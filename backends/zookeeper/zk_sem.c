/*
 * The semaphore recipe, as Apache Curator's InterProcessSemaphoreV2 does
 * it, under the name's node P (BASE/NAME):
 *
 *   1. Take the internal mutex P/locks: the mutex recipe of zk_recipe.c,
 *      its nodes "_c_GUID-lock-N".  It serialises the acquirers.  A waiter
 *      in that queue reads the data of the node ahead with the request that
 *      watches it, and is refused (DLOCK_EKIND) when that node's N differs.
 *   2. Holding it, create P/leases/_c_GUID-lease-N (ephemeral sequential,
 *      a fresh GUID, across lost answers as every node of ours), then:
 *      - one kind per name: list P; a mutex, reader or writer node there
 *        refuses us (DLOCK_EKIND).  The mutex and read-write recipes, once
 *        their node is made, look at P/leases in the same way, so of two
 *        racing acquirers of different kinds the later sees the earlier
 *        (zxids order the two creates; each client reads after its own);
 *      - N: read the data of the other lease nodes until one carries an N
 *        (a node of Curator's carries none); another N refuses us.  Every
 *        live lease was admitted after that check, so one is enough;
 *      - list P/leases with a watch: at most N lease nodes, ours among
 *        them, and ours is a permit; else sleep until the children change
 *        (the watch, no polling), keeping the internal mutex, so that the
 *        next acquirers queue behind us: waiters get permits in FIFO order.
 *   3. Delete our lock node, whether we got a permit or gave up.
 *
 * Both kinds of node carry "dlock:permits=N" as data (zk_path.c), a
 * lease node the owner record after it (for inspection), so N is
 * compared with the holders (their leases), the waiter holding the
 * internal mutex (its lease) and the waiters queued for it (lock nodes).
 *
 * At most N holders: a lease is a permit only if its holder, after making
 * it, counted at most N leases.  Of N+1 live permits, the one counted last
 * would have seen all N+1 (each made before that count, none gone since).
 * So a try-once acquisition, which must not wait for the internal mutex
 * (another acquirer may hold it for a moment), skips step 1 and counts at
 * once: it never takes a permit that a waiter is owed (the waiter's lease
 * counts), though two that race for the last free permit may both give up.
 *
 * A permit has no slot and no fencing token (the lease nodes' sequence
 * numbers say nothing about slots).  Release deletes the lease node with
 * its version (zk_hold.c); the session's end deletes it too, and a lost
 * session is reported for every permit it held, as for a mutex.
 */
#include <stdio.h>
#include <string.h>

#include "zookeeper_internal.h"

#define REFUSED 1 /* not a ZooKeeper code (those are 0 or negative): another N, err set */

/* The child watch on P/leases: wakes the waiter, and tells of our lease's deletion (zk_own.c). */
static void leases_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	dlock_zk_slot_watcher(zh, type, state, path, ctx);
	dlock_zk_own_watcher(zh, type, state, path, ctx);
}

/* One kind per name: a mutex, reader or writer node beside our lease refuses us. */
static dlock_status refuse_other_kinds(struct zk_attempt *a)
{
	for (;;) {
		struct String_vector kids = { 0, NULL };
		int64_t sent = dlock_monotonic_ns();
		int rc = dlock_zk_answered(a, zoo_get_children(a->s->zh, a->lk->parent, 0, &kids), sent);
		if (rc == ZOK) {
			enum zk_node_kind other = ZK_NODE_NONE;
			for (int32_t i = 0; i < kids.count; i++) {
				int32_t seq;
				enum zk_node_kind k = dlock_zk_child_kind(kids.data[i], &seq);
				if (k == ZK_NODE_MUTEX || k == ZK_NODE_READ || k == ZK_NODE_WRITE)
					other = k;
			}
			deallocate_String_vector(&kids);
			if (other == ZK_NODE_NONE)
				return DLOCK_OK;
			return dlock_error_set(a->err, DLOCK_EKIND, "zk://: the name is in use as a %s, not as a semaphore",
			                       other == ZK_NODE_MUTEX ? "mutex" : "read-write lock");
		}
		if (rc == ZNONODE)
			return DLOCK_OK;
		if (!dlock_zk_rc_connection(rc))
			return dlock_zk_attempt_failed(a, rc, "looking for other kinds of lock");
		if (!dlock_zk_reconnected(a))
			return DLOCK_OK;
	}
}

/* 1 for a lease node other than ours and its duplicates. */
static int other_lease(const struct zk_attempt *a, const char *child)
{
	int32_t seq;
	return dlock_zk_child_kind(child, &seq) == ZK_NODE_LEASE && strcmp(child, a->own) != 0 &&
	       !dlock_zk_child_has_guid(child, a->guid);
}

/* The N of another lease into *other (0: none carries one).  A ZooKeeper code. */
static int leases_permits(struct zk_attempt *a, const struct String_vector *kids, uint32_t *other)
{
	*other = 0;
	for (int32_t i = 0; i < kids->count; i++) {
		if (!other_lease(a, kids->data[i]))
			continue;
		char path[ZK_PATH_MAX], data[ZK_PERMITS_DATA_MAX];
		int len = (int)sizeof data;
		struct Stat st;
		snprintf(path, sizeof path, "%s/%s", a->parent, kids->data[i]);
		int64_t sent = dlock_monotonic_ns();
		int rc = dlock_zk_answered(a, zoo_get(a->s->zh, path, 0, data, &len, &st), sent);
		if (rc == ZNONODE)
			continue; /* released meanwhile */
		if (rc != ZOK)
			return rc;
		if (dlock_zk_permits_parse(data, len, other))
			return ZOK;
	}
	return ZOK;
}

/* A second lease of ours (a create that went through after all): remove it. */
static void delete_duplicate(struct zk_attempt *a, const char *child)
{
	char path[ZK_PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", a->parent, child);
	int rc = zoo_delete(a->s->zh, path, -1);
	if (rc != ZOK && rc != ZNONODE)
		dlock_host_log(a->c->host, DLOCK_LOG_WARN, "zk: could not delete a duplicate lease node: %s", zerror(rc));
}

/* Count the leases: ZOK with *count (ours included) and *found, or a code; N compared on the first look. */
static int count_leases(struct zk_attempt *a, int first, int32_t *count, int *found)
{
	struct String_vector kids = { 0, NULL };
	int64_t sent = dlock_monotonic_ns();
	int rc = dlock_zk_answered(
		a, zoo_wget_children(a->s->zh, a->parent, leases_watcher, a->lk->slot, &kids), sent);
	if (rc != ZOK)
		return rc;
	*count = 0;
	*found = 0;
	for (int32_t i = 0; i < kids.count; i++) {
		int32_t seq;
		if (strcmp(kids.data[i], a->own) == 0)
			*found = 1;
		else if (dlock_zk_child_has_guid(kids.data[i], a->guid) && dlock_zk_child_seq(kids.data[i], &seq))
			delete_duplicate(a, kids.data[i]);
		*count += other_lease(a, kids.data[i]);
	}
	*count += *found;
	uint32_t other = 0;
	if (*found && first)
		rc = leases_permits(a, &kids, &other);
	deallocate_String_vector(&kids);
	if (rc == ZOK && other && other != a->lk->permits) {
		dlock_error_set(a->err, DLOCK_EKIND, "zk://: the name is in use as a semaphore of %lu permits, not %lu",
		                (unsigned long)other, (unsigned long)a->lk->permits);
		return REFUSED;
	}
	return rc;
}

/* Wait until there are at most N leases, ours included: then ours is a permit. */
static dlock_status lease_wait(struct zk_attempt *a)
{
	for (int first = 1;;) {
		int32_t count = 0;
		int found = 0;
		int rc = count_leases(a, first, &count, &found);
		if (rc == REFUSED)
			return DLOCK_EKIND;
		if (rc == ZOK && !found)
			rc = ZNONODE;
		if (rc == ZOK) {
			first = 0;
			if (count <= (int64_t)a->lk->permits)
				return DLOCK_OK;
			if (dlock_wait_try_once(a->w))
				return dlock_error_set(a->err, DLOCK_EBUSY, "zk://: all %lu permits are held",
				                       (unsigned long)a->lk->permits);
			dlock_host_log(a->c->host, DLOCK_LOG_DEBUG, "zk: %s waits for a permit (%d leases, %lu permits)",
			               a->own, (int)count, (unsigned long)a->lk->permits);
			dlock_status st = dlock_wait_sleep(a->w, -1);
			if (st != DLOCK_OK)
				return st;
			continue;
		}
		if (rc == ZNONODE) { /* our lease is gone: its session ended, or someone deleted it */
			a->again = 1;
			return DLOCK_OK;
		}
		if (!dlock_zk_rc_connection(rc))
			return dlock_zk_attempt_failed(a, rc, "looking at the semaphore's leases");
		if (!dlock_zk_reconnected(a))
			return DLOCK_OK;
	}
}

/* Step 1: the internal mutex.  On success lk->node is our lock node. */
static dlock_status take_internal_mutex(struct zk_attempt *a, const char *locks)
{
	a->parent = locks;
	a->kind = ZK_NODE_MUTEX;
	dlock_status st = dlock_zk_new_guid(a);
	if (st == DLOCK_OK)
		st = dlock_zk_protected_create(a, ZK_CREATE_UNSENT);
	if (st != DLOCK_OK || a->again)
		return st;
	a->own = strrchr(a->lk->node, '/') + 1;
	dlock_zk_own_start(a->c, a->lk);
	a->sem_queue = 1;
	st = dlock_zk_queue_wait(a);
	a->sem_queue = 0;
	if (a->again)
		return st;
	if (st != DLOCK_OK)
		return dlock_zk_give_up(a, st);
	dlock_zk_own_forget(a->c, a->lk); /* from now on our node is the lease */
	return DLOCK_OK;
}

/* Step 2: the lease, checked, then counted. */
static dlock_status take_lease(struct zk_attempt *a, const char *leases, char *data, dlock_acquired *out)
{
	a->parent = leases;
	a->kind = ZK_NODE_LEASE;
	a->datalen = dlock_zk_lease_data_format(a->lk->permits, a->c->owner, a->c->owner_len, data);
	a->data = data; /* N and the owner record (zk_path.c) */
	dlock_status st = dlock_zk_new_guid(a);
	if (st == DLOCK_OK)
		st = dlock_zk_protected_create(a, ZK_CREATE_UNSENT);
	if (st != DLOCK_OK || a->again)
		return st;
	a->own = strrchr(a->lk->node, '/') + 1;
	dlock_zk_own_start(a->c, a->lk);
	st = refuse_other_kinds(a);
	if (st == DLOCK_OK && !a->again)
		st = lease_wait(a);
	if (a->again)
		return st;
	if (st != DLOCK_OK)
		return dlock_zk_give_up(a, st);
	if (!dlock_zk_hold(a->c, a->s, a->lk)) {
		a->again = 1; /* the session died just now, and the lease with it, or the lease was deleted */
		return DLOCK_OK;
	}
	*out = (dlock_acquired){ .token = 0, .sent_ns = 0 };
	return DLOCK_OK;
}

/* Step 3: let the next acquirer in. */
static void release_internal_mutex(struct zk_attempt *a, const char *node, int32_t version)
{
	int rc = dlock_zk_delete_own(a->s, node, version);
	if (rc != ZOK && rc != ZNONODE && !dlock_zk_rc_session_gone(rc))
		dlock_host_log(a->c->host, DLOCK_LOG_WARN,
		               "zk: could not delete the semaphore's lock node (%s); it goes when the session ends",
		               zerror(rc));
}

dlock_status dlock_zk_sem_attempt(struct zk_attempt *a, dlock_acquired *out)
{
	char locks[ZK_PATH_MAX], leases[ZK_PATH_MAX], lock_node[ZK_PATH_MAX] = "", data[ZK_PERMITS_DATA_MAX];
	char lease_data[ZK_NODE_DATA_MAX];
	int32_t lock_version = 0;
	snprintf(locks, sizeof locks, "%s/" ZK_SEM_LOCKS, a->lk->parent);
	snprintf(leases, sizeof leases, "%s/" ZK_SEM_LEASES, a->lk->parent);
	a->datalen = dlock_zk_permits_format(a->lk->permits, data);
	a->data = data;
	a->check_leases = 0;
	dlock_status st = DLOCK_OK;
	if (!dlock_wait_try_once(a->w)) {
		st = take_internal_mutex(a, locks);
		if (st == DLOCK_OK && !a->again) {
			snprintf(lock_node, sizeof lock_node, "%s", a->lk->node);
			lock_version = a->lk->version;
		}
	}
	if (st == DLOCK_OK && !a->again && (lock_node[0] || dlock_wait_try_once(a->w)))
		st = take_lease(a, leases, lease_data, out);
	if (lock_node[0])
		release_internal_mutex(a, lock_node, lock_version);
	a->data = NULL; /* the buffers were this call's */
	a->datalen = 0;
	a->parent = a->lk->parent;
	a->own = NULL;
	return st;
}
