/*
 * Redis backend: elections (redis_elect.c), the driver's proclaim, watch
 * and unwatch methods (dlock/sys/driver.h), and what inspection needs of
 * them.  Never included outside backends/redis/.
 *
 * Threads and errors: see redis_elect.c.
 */
#ifndef DLOCK_REDIS_ELECT_H
#define DLOCK_REDIS_ELECT_H

#include "redis_client.h"

dlock_status dlock_redis_proclaim(void *backend, void *lk, const char *value, size_t len, dlock_error *err);
dlock_status dlock_redis_watch(void *backend, const char *name, size_t len, void (*changed)(void *arg), void *arg,
                               void **watch, dlock_error *err);
void dlock_redis_unwatch(void *backend, void *watch);
/** The client's watch list: set up right after the client is allocated, torn down when it is freed. */
void dlock_redis_elect_init(struct redis_client *c);
void dlock_redis_elect_fini(struct redis_client *c);
/** Arm again, where the name is served now, the watches of channel `chan` whose subscription was lost
 *  (a cluster slot that moved): called by each inspection of the name. */
void dlock_redis_elect_rearm(struct redis_client *c, const char *chan, size_t len);
/** The leader's value in a holder's record (`len` bytes), decoded into `out`: 1, or 0 when it has none. */
int dlock_redis_record_value(const char *rec, size_t len, char out[DLOCK_VALUE_MAX + 1]);

#endif
