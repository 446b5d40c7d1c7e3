/*
 * Redis backend: the renewals of many held locks at once (redis_renew.c),
 * the driver's extend_many method (dlock/sys/driver.h).  Never included
 * outside backends/redis/.
 *
 * Threads: the core's renewal thread only.  Errors: one status per lock.
 */
#ifndef DLOCK_REDIS_RENEW_H
#define DLOCK_REDIS_RENEW_H

#include "redis_client.h"

/** Renew lks[0..n) (n at most DLOCK_RENEW_BATCH_MAX), one pipeline per server; out[i] as extend. */
void dlock_redis_extend_many(struct redis_client *c, struct redis_lock *const *lks, const int64_t *lease_ms, size_t n,
                             dlock_status *out, dlock_error *err);

#endif
