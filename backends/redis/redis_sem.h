/*
 * Redis backend: a semaphore's permits (redis_sem.c), the arguments of
 * their scripts and what their replies mean, for the single instance's
 * attempts, releases, renewals and checks (redis_lock.c).  Never included
 * outside backends/redis/.
 *
 * Threads: as the lock functions: one acquisition per handle at a time,
 * the client shared.  Errors: in the replies only (dlock_redis_sem_reply).
 */
#ifndef DLOCK_REDIS_SEM_H
#define DLOCK_REDIS_SEM_H

#include "redis_client.h"

/** The acquire script of a permit into `a` (`bufs`, three, keep the numbers); `listed`: count lk among the waiters
 *  when no permit is free.  Its number of keys into *nkeys. */
enum redis_script_id dlock_redis_sem_acquire_args(const struct redis_client *c, const struct redis_lock *lk,
                                                  int64_t lease_ms, int wants_token, int listed, char bufs[][24],
                                                  struct redis_args *a, int *nkeys);
/** A permit's release (nkeys 8; `n` keeps a number), extend (6) and check (2) scripts for lk->owner. */
enum redis_script_id dlock_redis_sem_release_args(const struct redis_client *c, const struct redis_lock *lk,
                                                  char n[24], struct redis_args *a, int *nkeys);
enum redis_script_id dlock_redis_sem_extend_args(const struct redis_client *c, const struct redis_lock *lk,
                                                 int64_t lease_ms, char lease[24], struct redis_args *a, int *nkeys);
enum redis_script_id dlock_redis_sem_check_args(const struct redis_client *c, const struct redis_lock *lk,
                                                struct redis_args *a, int *nkeys);
/**
 * The acquire script's reply: DLOCK_OK (*out: token and slot), DLOCK_EBUSY
 * (*retry_ms: when to look again; lk->wake_own: a release wakes lk on its
 * own channel PREFIX:{D}:pwake:WAITER), DLOCK_EKIND (another N, both named) or
 * DLOCK_ESERVER for a reply of another shape.
 */
dlock_status dlock_redis_sem_reply(const struct redis_client *c, struct redis_lock *lk, const redisReply *r,
                                   dlock_acquired *out, int64_t *retry_ms, dlock_error *err);
/** The withdraw script of lk->waiter (nkeys 8; `n` keeps a number): dlock_redis_sem_unlist()'s command. */
enum redis_script_id dlock_redis_sem_withdraw_args(const struct redis_client *c, const struct redis_lock *lk,
                                                   char n[24], struct redis_args *a, int *nkeys);
/** A waiter that gives up: no longer counted among the waiters nor queued, a permit promised to it passed on
 *  (best effort: its entries expire anyway). */
void dlock_redis_sem_unlist(struct redis_client *c, struct redis_lock *lk);

#endif
