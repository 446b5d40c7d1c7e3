/*
 * Acquire: attempts on one session after another.  Each attempt runs a
 * recipe (zk_recipe.c for a mutex or a read-write lock, zk_sem.c for a
 * semaphore) on the current connected session.  If the session dies
 * during an attempt, its node dies with it; the attempt starts again on
 * the next session while the wait allows.
 *
 * Threads: the acquiring thread; the acquire's slot is attached for the
 * call, so that session events and watches wake it.
 */
#include "zookeeper_internal.h"

/* One attempt on session a->s: the recipe of the lock's kind. */
static dlock_status attempt(struct zk_attempt *a, dlock_acquired *out)
{
	a->lk->gen = a->s->gen;
	if (a->lk->kind == DLOCK_KIND_SEMAPHORE)
		return dlock_zk_sem_attempt(a, out);
	return dlock_zk_mutex_attempt(a, out);
}

/* After a dead session: start over on the next one, if the wait allows. */
static dlock_status may_start_over(struct zk_attempt *a)
{
	if (dlock_wait_cancelled(a->w) != DLOCK_OK)
		return dlock_error_set(a->err, DLOCK_ECANCELED, "zk://: acquire cancelled");
	if (dlock_wait_try_once(a->w) || dlock_wait_remaining_ms(a->w) == 0)
		return dlock_error_set(a->err, DLOCK_ECONNECT,
		                       "zk://: the ZooKeeper session ended during the acquire and no time is left");
	dlock_host_log(a->c->host, DLOCK_LOG_INFO, "zk: the session ended during an acquire; starting over");
	return DLOCK_OK;
}

dlock_status dlock_zk_acquire(struct zk_client *c, struct zk_lock *lk, dlock_wait *w, dlock_acquired *out,
                              dlock_error *err)
{
	/* The owner record is the data of every mutex, reader and writer node (zk_path.c). */
	struct zk_attempt a = { .c = c, .lk = lk, .w = w, .err = err, .parent = lk->parent, .check_leases = 1,
		                .data = c->owner, .datalen = (int)c->owner_len };
	if (lk->kind == DLOCK_KIND_RWLOCK)
		a.kind = dlock_wait_mode(w) == DLOCK_MODE_SHARED ? ZK_NODE_READ : ZK_NODE_WRITE;
	else
		a.kind = ZK_NODE_MUTEX;
	dlock_status st;
	dlock_zk_slot_attach(lk->slot, w);
	for (;;) {
		st = dlock_zk_session_wait(c, w, &a.s, err);
		if (st != DLOCK_OK)
			break;
		a.again = 0;
		st = attempt(&a, out);
		dlock_zk_session_put(a.s);
		if (st != DLOCK_OK || !a.again)
			break;
		st = may_start_over(&a);
		if (st != DLOCK_OK)
			break;
	}
	dlock_zk_slot_attach(lk->slot, NULL);
	if (st != DLOCK_OK)
		dlock_zk_own_forget(c, lk);
	return st;
}
