/*
 * Redis backend: a loop client's lock calls on its loop (redis_loop.c),
 * the non-blocking methods of driver contract 9 (include/dlock/sys/driver.h,
 * "the loop").  Above the single instance's functions (redis_lock.h),
 * whose commands they send and whose answers they read, on the client's
 * connection of the loop (redis_nbconn.h).  Never included outside
 * backends/redis/.
 *
 * Which clients: one server (redis://host:port, redis+unix://,
 * rediss://host:port) with algorithm "single" (fair=0, replicas=N too):
 * dlock_redis_loop_fits().  Every other mode (the fair queue, RedLock,
 * Sentinel, Cluster) runs its calls on the core's worker threads, as
 * before.
 *
 * Threads: the loop's only (open and close of such a client run there
 * too).  Errors: what the blocking forms return, with their messages.
 */
#ifndef DLOCK_REDIS_LOOP_H
#define DLOCK_REDIS_LOOP_H

#include "redis_lock.h"

/** 1 when the client's mode runs its lock calls on a loop (see above). */
int dlock_redis_loop_fits(const struct redis_client *c);
/** The client's connection on the loop `io` (c->loop): its server's address resolved now.  In open(). */
dlock_status dlock_redis_loop_open(struct redis_client *c, dlock_io *io, dlock_error *err);
/** End every call in progress (DLOCK_ECONNECT), close and free c->loop (NULL: nothing).  In close(). */
void dlock_redis_loop_close(struct redis_client *c);

/* The driver's non-blocking methods (the driver's checks done: a positive lease). */
dlock_status dlock_redis_loop_try_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                          dlock_wait *w, dlock_retry *retry, dlock_acquired *out, dlock_error *err,
                                          dlock_call *call);
dlock_status dlock_redis_loop_release(struct redis_client *c, struct redis_lock *lk, dlock_error *err,
                                      dlock_call *call);
dlock_status dlock_redis_loop_extend(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                     dlock_error *err, dlock_call *call);
dlock_status dlock_redis_loop_check(struct redis_client *c, struct redis_lock *lk, dlock_error *err,
                                    dlock_call *call);
/** disarm() of an acquisition whose attempts ran on the loop (lk->on_loop): the wake-up given up, and a
 *  semaphore's waiter withdrawn without waiting for it. */
void dlock_redis_loop_disarm(struct redis_client *c, struct redis_lock *lk);

#endif
