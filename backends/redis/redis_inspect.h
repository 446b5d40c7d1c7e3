/*
 * Redis backend: who holds a lock (redis_inspect.c), the driver's inspect,
 * list, break_lock and gc methods (dlock/sys/driver.h).
 * Never included outside backends/redis/.
 *
 * Threads and errors: see redis_inspect.c.
 */
#ifndef DLOCK_REDIS_INSPECT_H
#define DLOCK_REDIS_INSPECT_H

#include "dlock/sys/driver.h"

dlock_status dlock_redis_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err);
dlock_status dlock_redis_list(void *backend, dlock_info *info, dlock_error *err);
dlock_status dlock_redis_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err);
/** dlock_gc(): nothing to collect (every key expires); DLOCK_ENOTSUP saying why. */
dlock_status dlock_redis_gc(void *backend, const char *prefix, size_t len, unsigned flags,
                            dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err);

#endif
