/*
 * Semaphores on one Redis server (any transport, Sentinel, Cluster; not
 * RedLock): the arguments of the permit scripts (redis_scripts.c) and what
 * their replies mean.  The attempts, releases, renewals and checks run
 * through the single instance's functions (redis_lock.c), which pick these
 * for a handle of kind DLOCK_KIND_SEMAPHORE.
 *
 * A permit is the entry of its owner value in PREFIX:{D}:permits, a sorted
 * set scored by the server's time at which its lease ends, with its slot in
 * PREFIX:{D}:slots; PREFIX:{D}:lock holds "semaphore" while any permit is
 * live, so mutexes and read-write locks of the name wait for the last
 * permit and a permit waits for them (the kinds exclude each other).  The
 * name's N is kept in PREFIX:{D}:npermits for as long as a holder or a
 * waiter is live; waiters are kept in PREFIX:{D}:pwaiters, each under the
 * id its handle made once, refreshed by every attempt.  All keys share the
 * name's {D}, so a cluster keeps them in one slot.
 *
 * Waiting is the core's loop (core_waits).  A waiter that queues (fair=1,
 * the default) joins PREFIX:{D}:pqueue in arrival order, and a release
 * promises each permit it frees to the first live queued waiter
 * (PREFIX:{D}:pwoken, for a claim window) and publishes on that waiter's
 * own channel, PREFIX:{D}:pwake:WAITER, which its attempt watched: one
 * waiter woken per permit, whatever the number of waiters (see
 * redis_scripts.c).  A waiter behind another kind, behind a holder of the
 * previous release (which publishes only on the name's channel) or with
 * fair=0 watches the name's channel, where every release still publishes.
 * The core also looks again when the first permit's lease or claim window
 * ends (at most RETRY_MAX_MS, or QUEUED_LOOK_MS for a queued waiter),
 * polling when no subscription can be made.
 *
 * Threads: as the lock functions: one acquisition per handle at a time,
 * the client shared.
 */
#include <stdio.h>

#include "redis_key.h"
#include "redis_route.h"
#include "redis_sem.h"

/* KEYS 1..5: every permit script but the check reads them. */
static void permit_keys(const struct redis_client *c, const struct redis_lock *lk, struct redis_args *a)
{
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_arg_key(a, c, lk, "permits", NULL);
	dlock_redis_arg_key(a, c, lk, "slots", NULL);
	dlock_redis_arg_key(a, c, lk, "pwaiters", NULL);
	dlock_redis_arg_key(a, c, lk, "npermits", NULL);
}

/* The wake-up queue's two keys, then the holders' records (last): the acquire, release and withdraw scripts. */
static void queue_keys(const struct redis_client *c, const struct redis_lock *lk, struct redis_args *a)
{
	dlock_redis_arg_key(a, c, lk, "pqueue", NULL);
	dlock_redis_arg_key(a, c, lk, "pwoken", NULL);
	dlock_redis_arg_key(a, c, lk, "holders", NULL);
}

enum redis_script_id dlock_redis_sem_acquire_args(const struct redis_client *c, const struct redis_lock *lk,
                                                  int64_t lease_ms, int wants_token, int listed, char bufs[][24],
                                                  struct redis_args *a, int *nkeys)
{
	*a = (struct redis_args){ 0 };
	permit_keys(c, lk, a);
	dlock_redis_arg_key(a, c, lk, "fence", NULL);
	queue_keys(c, lk, a);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_argi(a, bufs[0], lease_ms);
	dlock_redis_argi(a, bufs[1], lk->permits_n);
	dlock_redis_arg(a, listed ? lk->waiter : "");
	dlock_redis_argi(a, bufs[2], wants_token ? dlock_redis_fence_ttl_ms(lease_ms) : 0);
	dlock_redis_argn(a, c->record, c->recordlen);
	dlock_redis_arg(a, c->fair ? "1" : "0");
	*nkeys = 9;
	return REDIS_SCRIPT_SEM_ACQUIRE;
}

enum redis_script_id dlock_redis_sem_release_args(const struct redis_client *c, const struct redis_lock *lk,
                                                  char n[24], struct redis_args *a, int *nkeys)
{
	*a = (struct redis_args){ 0 };
	permit_keys(c, lk, a);
	queue_keys(c, lk, a);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_arg_key(a, c, lk, "released", NULL);
	dlock_redis_arg(a, c->publish);
	dlock_redis_argi(a, n, lk->permits_n);
	dlock_redis_arg_key(a, c, lk, "pwake:", NULL); /* the stem of each waiter's channel */
	*nkeys = 8;
	return REDIS_SCRIPT_SEM_RELEASE;
}

enum redis_script_id dlock_redis_sem_extend_args(const struct redis_client *c, const struct redis_lock *lk,
                                                 int64_t lease_ms, char lease[24], struct redis_args *a, int *nkeys)
{
	*a = (struct redis_args){ 0 };
	permit_keys(c, lk, a);
	dlock_redis_arg_key(a, c, lk, "holders", NULL);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_argi(a, lease, lease_ms);
	*nkeys = 6;
	return REDIS_SCRIPT_SEM_EXTEND;
}

enum redis_script_id dlock_redis_sem_check_args(const struct redis_client *c, const struct redis_lock *lk,
                                                struct redis_args *a, int *nkeys)
{
	*a = (struct redis_args){ 0 };
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_arg_key(a, c, lk, "permits", NULL);
	dlock_redis_arg(a, lk->owner);
	*nkeys = 2;
	return REDIS_SCRIPT_SEM_CHECK;
}

dlock_status dlock_redis_sem_reply(const struct redis_client *c, struct redis_lock *lk, const redisReply *r,
                                   dlock_acquired *out, int64_t *retry_ms, dlock_error *err)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
		goto odd;
	for (size_t i = 0; i < 3; i++)
		if (r->element[i]->type != REDIS_REPLY_INTEGER)
			goto odd;
	long long what = r->element[0]->integer, value = r->element[1]->integer, slot = r->element[2]->integer;
	if (what == 1 && slot >= 0 && slot < (long long)lk->permits_n) {
		*out = (dlock_acquired){ .token = (uint64_t)value, .slot = (uint32_t)slot };
		return DLOCK_OK;
	}
	if (what == 0) {
		*retry_ms = value;
		lk->wake_own = slot == 1;
		return DLOCK_EBUSY;
	}
	if (what == -1)
		return dlock_error_set(err, DLOCK_EKIND, "redis %s: the name is in use as a semaphore of %lld permits, not %lu",
		                       c->label, value, (unsigned long)lk->permits_n);
odd:
	return dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to the semaphore's acquire script",
	                       c->label);
}

enum redis_script_id dlock_redis_sem_withdraw_args(const struct redis_client *c, const struct redis_lock *lk,
                                                   char n[24], struct redis_args *a, int *nkeys)
{
	*a = (struct redis_args){ 0 };
	permit_keys(c, lk, a);
	queue_keys(c, lk, a);
	dlock_redis_arg(a, lk->waiter);
	dlock_redis_arg(a, c->publish);
	dlock_redis_argi(a, n, lk->permits_n);
	dlock_redis_arg_key(a, c, lk, "pwake:", NULL);
	*nkeys = 8;
	return REDIS_SCRIPT_SEM_WITHDRAW;
}

void dlock_redis_sem_unlist(struct redis_client *c, struct redis_lock *lk)
{
	if (!lk->listed)
		return;
	lk->listed = 0;
	struct redis_args a;
	char n[24];
	struct redis_call call = { .a = &a, .what = "give up waiting" };
	call.id = dlock_redis_sem_withdraw_args(c, lk, n, &a, &call.nkeys);
	redisReply *r = NULL;
	int maybe_ran;
	dlock_error ignored = { "" };
	(void)dlock_redis_call(c, lk, &call, NULL, &r, &maybe_ran, &ignored);
	freeReplyObject(r);
}
