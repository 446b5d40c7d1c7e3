/*
 * Redis backend: where a lock's commands go, and one command sent there
 * (redis_route.c): the client's one instance, or the cluster's master of
 * the lock's slot, redirections followed.  Never included outside
 * backends/redis/.
 *
 * Threads: any (the client is shared; each call takes a pooled connection).
 * Errors: statuses and messages of redis_conn.c; error replies become
 * statuses, a cluster's refusals are followed or waited out first.
 */
#ifndef DLOCK_REDIS_ROUTE_H
#define DLOCK_REDIS_ROUTE_H

#include "redis_client.h"

struct redis_node; /* redis_cluster.h */

/* The server that holds a lock's keys: the client's one instance, or the cluster's master of its slot. */
struct redis_route {
	struct redis_pool *pool;  /* commands */
	struct redis_pool *waits; /* fair=1: connections blocked in BLPOP */
	struct redis_sub *sub;    /* one instance: the client's subscriber */
	struct redis_node *node;  /* a cluster: the node (its subscriber is made on first use); else NULL */
};

/** Where lk's commands go now (a cluster may ask for its map first: DLOCK_ECONNECT when it cannot). */
dlock_status dlock_redis_route(struct redis_client *c, const struct redis_lock *lk, struct redis_route *rt,
                               dlock_error *err);
/** The subscriber for the channel of a lock routed to `rt` (NULL: none can be made, poll). */
struct redis_sub *dlock_redis_route_sub(struct redis_client *c, const struct redis_route *rt);
/** 1 when error reply `r` says the lock's slot is served elsewhere or not now (MOVED, ASK, TRYAGAIN,
 *  CLUSTERDOWN); a cluster's map is then looked at again before the next command. */
int dlock_redis_slot_elsewhere(struct redis_client *c, const redisReply *r);
/** What the error reply `r` to `what` from the one server `ep` (not a cluster's) means: a cluster node's
 *  redirection is DLOCK_ESERVER naming the cluster scheme, anything else as dlock_redis_reply_error(). */
dlock_status dlock_redis_refusal(const struct redis_endpoint *ep, const redisReply *r, const char *what,
                                 dlock_error *err);
/** A connection to the lock's server failed: a cluster looks at its map again before the next command. */
void dlock_redis_route_failed(struct redis_client *c);

/** WAIT for the client's replicas=N within replicas_timeout (`n`, `ms` keep the numbers): after a write, on the
 *  connection that wrote it; and its answer: the replicas that have the connection's writes, -1 for none. */
void dlock_redis_wait_cmd(const struct redis_client *c, struct redis_args *a, char n[24], char ms[24]);
long long dlock_redis_wait_answer(const redisReply *r);

/* One command, or one script, for a lock. */
struct redis_call {
	enum redis_script_id id;  /* REDIS_SCRIPT_COUNT: the command `a` itself */
	int nkeys;                /* a script's keys, first in `a` */
	const struct redis_args *a;
	const char *what;         /* for messages: "acquire", "release"... */
	int (*wrote)(const redisReply *r); /* replicas=N: WAIT after a reply for which this says 1; or NULL */
	int attempt;              /* 1: an acquisition's attempt: DLOCK_ECONNECT at once where the slot is not
	                             served now (TRYAGAIN, CLUSTERDOWN), for the acquisition to wait out within its
	                             deadline; 0: wait here, up to io_timeout (see redis_route.c) */
};

/**
 * Send `call` to lk's server and read its reply into *out, following a
 * cluster's redirections.  *maybe_ran: the request may have reached a
 * server (a failure after that leaves its effect unknown).  With
 * `call->wrote` and replicas=N, *acked is WAIT's answer on the same
 * connection (-1: none).  Error replies become statuses and messages.
 */
dlock_status dlock_redis_call(struct redis_client *c, const struct redis_lock *lk, const struct redis_call *call,
                              long long *acked, redisReply **out, int *maybe_ran, dlock_error *err);

#endif
