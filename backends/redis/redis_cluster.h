/*
 * redis+cluster:// and rediss+cluster:// (redis_cluster.c): the nodes of a
 * Redis Cluster and the map of which master serves which hash slot.  Above
 * redis_conn.c and redis_sub.c (each master has a pool, a pool for
 * blocking waits and a subscriber), below the lock algorithms, which ask
 * it for the node of a lock's slot.  Never included outside backends/redis/.
 *
 * Threads: any.  The map and the node list are under a mutex held only to
 * read or write them; at most one thread at a time asks the cluster for a
 * new map, the others keep using the old one meanwhile.  Nodes are never
 * freed before the cluster is: a pointer to one stays valid.
 */
#ifndef DLOCK_REDIS_CLUSTER_H
#define DLOCK_REDIS_CLUSTER_H

#include "redis_conn.h"
#include "redis_sub.h"

#define REDIS_CLUSTER_SLOTS 16384

/* One node the client talks to: a master serving slots, or a seed. */
struct redis_node {
	struct redis_pool pool;   /* commands; its endpoint is the node's address */
	struct redis_pool waits;  /* fair=1: connections blocked in BLPOP */
	struct redis_sub *sub;    /* sharded pub/sub of its slots' channels; made on first use */
	char host[256];           /* pool.ep.host points here */
};

struct redis_cluster;

/**
 * The seeds of `uri` (transport `via`) and how every node is spoken to
 * (`cfg`: password, TLS, timeouts; it must outlive the cluster).  Contacts
 * no server.  DLOCK_EURI for a bad URI.
 */
dlock_status dlock_redis_cluster_new(const dlock_uri *uri, const struct redis_transport *via,
                                     const struct redis_cfg *cfg, struct redis_cluster **out, dlock_error *err);
void dlock_redis_cluster_free(struct redis_cluster *cl);
/** "cluster HOST:PORT", naming the first seed, for messages. */
const char *dlock_redis_cluster_label(const struct redis_cluster *cl);

/**
 * Ask the nodes (the one that answered last first, then the others and the
 * seeds) for the slot map with CLUSTER SLOTS.  DLOCK_ECONNECT when none
 * answers, DLOCK_ESERVER (naming redis://) when a node is not in cluster
 * mode, DLOCK_EAUTH...  *answered: the node that gave the map.
 */
dlock_status dlock_redis_cluster_discover(struct redis_cluster *cl, struct redis_node **answered, dlock_error *err);

/**
 * The master serving `slot`.  The map is asked for again first when it is
 * marked stale, or has no master for the slot; a failed refresh keeps the
 * old map when it knows one.
 */
dlock_status dlock_redis_cluster_node(struct redis_cluster *cl, unsigned slot, struct redis_node **out,
                                      dlock_error *err);
/**
 * A redirection: -MOVED (`moved` 1: `slot` is now served at `addr`, which
 * the map records at once, and is marked stale so that the next lookup asks
 * for the whole map) or -ASK (`moved` 0: the node at `addr` answers one
 * command, after ASKING).  *out: that node.
 */
dlock_status dlock_redis_cluster_redirect(struct redis_cluster *cl, unsigned slot, int moved, const char *addr,
                                          size_t len, struct redis_node **out, dlock_error *err);
/**
 * The masters that serve slots in the map now (asked for first when it is
 * stale or empty), at most `max` of them into out[]; their number into *n.
 * For what runs on every master (a listing's SCAN).
 */
dlock_status dlock_redis_cluster_masters(struct redis_cluster *cl, struct redis_node **out, size_t max, size_t *n,
                                         dlock_error *err);
/** Something changed (a node unreachable, a channel moved): ask for the map before the next lookup. */
void dlock_redis_cluster_stale(struct redis_cluster *cl);
/** The node's subscriber (sharded: SSUBSCRIBE), made on first use; NULL when it cannot be made (poll). */
struct redis_sub *dlock_redis_cluster_sub(struct redis_cluster *cl, struct redis_node *node);

/** The hash slot of key `key` (CRC16 of its hash tag, as Redis Cluster computes it). */
unsigned dlock_redis_key_slot(const char *key, size_t len);

#endif
