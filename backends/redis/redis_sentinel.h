/*
 * redis+sentinel:// and rediss+sentinel:// (redis_sentinel.c): the
 * sentinels of a client and the endpoint of the master they name, whose
 * address is asked anew at each connect.  Above redis_conn.c (it connects
 * to sentinels like to any server), below the algorithms, which see only
 * an endpoint.  Never included outside backends/redis/.
 */
#ifndef DLOCK_REDIS_SENTINEL_H
#define DLOCK_REDIS_SENTINEL_H

#include "redis_conn.h"

struct redis_sentinel;

/**
 * The sentinels of `uri` (transport `via`), the master's name, and the
 * database into *db.  `data` is how the master is spoken to (its password,
 * TLS, timeouts), which the sentinels share except for their credentials
 * (sentinel_user, sentinel_password).  DLOCK_EURI for a bad URI.  Contacts
 * no server.
 */
dlock_status dlock_redis_sentinel_new(const dlock_uri *uri, const struct redis_transport *via,
                                      const struct redis_cfg *data, struct redis_sentinel **out, long *db,
                                      dlock_error *err);
void dlock_redis_sentinel_free(struct redis_sentinel *s);
/** The master's endpoint (for a pool): each connect asks the sentinels, then checks ROLE. */
void dlock_redis_sentinel_endpoint(struct redis_sentinel *s, struct redis_endpoint *ep);
/** Goes up each time the master moves: for the pools (redis_pool.generation). */
const atomic_uint *dlock_redis_sentinel_generation(struct redis_sentinel *s);
/**
 * Start the watcher thread, which listens to the sentinels' +switch-master;
 * `on_switch(arg)` is called (from any thread that learns of it) after each
 * move of the master.  Stopped by dlock_redis_sentinel_free().
 */
dlock_status dlock_redis_sentinel_watch(struct redis_sentinel *s, void (*on_switch)(void *arg), void *arg,
                                        dlock_error *err);

#endif
