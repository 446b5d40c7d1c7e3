/*
 * redis+cluster:// and rediss+cluster:// — which master serves a lock.
 *
 *   redis+cluster://[[user]:password@]seed[:port][,seed[:port]...][/][?...]
 *
 * The hosts are seeds: any nodes of the cluster (port 6379), asked for the
 * slot map (CLUSTER SLOTS) when the client opens and whenever the map is
 * stale.  A lock's keys and channel share one hash tag (redis_lock.h), so
 * they live in one slot, served by one master: every command, script,
 * blocking wait and subscription of a lock goes there.
 *
 * Following the cluster:
 *   - MOVED (the slot is served elsewhere now: a migration ended, or a
 *     failover): the map records the new master at once and asks for the
 *     whole map at the next lookup.
 *   - ASK (the slot is being migrated and the key is already on the
 *     target): the target answers one command after ASKING; the map does
 *     not change.
 *   - A node that cannot be reached (killed; its replica takes over after
 *     cluster-node-timeout): the map is asked for again, from another node.
 * The callers (redis_route.c) say what to retry.
 *
 * Every command dlock sends names the keys of one lock, in one slot: no
 * script or pipeline ever spans slots.  Anything that sends the commands
 * of several locks at once (a batch of renewals) must group them by the
 * node dlock_redis_cluster_node() gives for each slot.
 *
 * Why by hand: hiredis 0.14, the Debian version, has no cluster support,
 * and hiredis-cluster is not packaged; what is needed here is a slot table,
 * CRC16 and two redirections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_cluster.h"

#define REDIS_CLUSTER_NODES_MAX 1024 /* a bound on what a broken server's map can make us allocate */

struct redis_cluster {
	pthread_mutex_t mu;          /* nodes, slots, stale, epoch, last */
	pthread_mutex_t refresh_mu;  /* one CLUSTER SLOTS at a time */
	struct redis_node **nodes;   /* seeds first, then the masters found; never freed before the cluster */
	size_t nnodes, cap;
	uint16_t slots[REDIS_CLUSTER_SLOTS]; /* index into nodes + 1; 0: no master known */
	int stale;                   /* ask for the map at the next lookup */
	unsigned epoch;              /* maps received */
	size_t last;                 /* the node that gave the last map */
	const struct redis_cfg *cfg;
	const struct redis_transport *via; /* how a node is reached: tcp or tls */
	char label[300];
};

/* ------------------------------------------------------------ slots */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the hash of the cluster specification. */
static uint16_t crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;
	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((unsigned char)buf[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

unsigned dlock_redis_key_slot(const char *key, size_t len)
{
	/* The hash tag: what is between the first '{' and the next '}', if not empty. */
	const char *open = memchr(key, '{', len);
	if (open) {
		size_t from = (size_t)(open - key) + 1;
		const char *close = memchr(open + 1, '}', len - from);
		if (close && close > open + 1) {
			key = open + 1;
			len = (size_t)(close - key);
		}
	}
	return crc16(key, len) & (REDIS_CLUSTER_SLOTS - 1);
}

/* ------------------------------------------------------------ nodes */

static void node_free(struct redis_node *n)
{
	dlock_redis_sub_free(n->sub);
	dlock_redis_pool_destroy(&n->pool);
	dlock_redis_pool_destroy(&n->waits);
	free(n);
}

/* The node at host:port, made if new; its index, or -1 (out of memory, too many). */
static long node_at_locked(struct redis_cluster *cl, const char *host, size_t hostlen, int port)
{
	for (size_t i = 0; i < cl->nnodes; i++) {
		const struct redis_endpoint *ep = &cl->nodes[i]->pool.ep;
		if (ep->port == port && strlen(ep->host) == hostlen && memcmp(ep->host, host, hostlen) == 0)
			return (long)i;
	}
	if (cl->nnodes >= REDIS_CLUSTER_NODES_MAX || hostlen >= sizeof cl->nodes[0]->host)
		return -1;
	if (cl->nnodes == cl->cap) {
		size_t cap = cl->cap ? 2 * cl->cap : 8;
		struct redis_node **grown = realloc(cl->nodes, cap * sizeof *grown);
		if (!grown)
			return -1;
		cl->nodes = grown;
		cl->cap = cap;
	}
	struct redis_node *n = calloc(1, sizeof *n);
	if (!n)
		return -1;
	memcpy(n->host, host, hostlen);
	dlock_redis_pool_init(&n->pool, cl->cfg);
	dlock_redis_pool_init(&n->waits, cl->cfg);
	n->pool.ep.via = cl->via;
	n->pool.ep.host = n->host;
	n->pool.ep.port = port;
	dlock_redis_hostport(n->pool.ep.label, sizeof n->pool.ep.label, n->host, port);
	n->waits.ep = n->pool.ep;
	cl->nodes[cl->nnodes] = n;
	return (long)cl->nnodes++;
}

/* "host:port" (the last ':' ends the host: "::1:7000" is fine) into a node; -1 when unusable. */
static long node_at_addr_locked(struct redis_cluster *cl, const char *addr, size_t len)
{
	const char *colon = NULL;
	for (size_t i = 0; i < len; i++)
		if (addr[i] == ':')
			colon = addr + i;
	if (!colon || colon == addr || colon + 1 == addr + len)
		return -1;
	int port = 0;
	for (const char *p = colon + 1; p < addr + len; p++) {
		if (*p < '0' || *p > '9' || port > 65535)
			return -1;
		port = port * 10 + (*p - '0');
	}
	if (port < 1 || port > 65535)
		return -1;
	const char *host = addr;
	size_t hostlen = (size_t)(colon - addr);
	if (hostlen >= 2 && host[0] == '[' && host[hostlen - 1] == ']') {
		host++;
		hostlen -= 2;
	}
	return node_at_locked(cl, host, hostlen, port);
}

/* ------------------------------------------------------------ new, free */

dlock_status dlock_redis_cluster_new(const dlock_uri *uri, const struct redis_transport *via,
                                     const struct redis_cfg *cfg, struct redis_cluster **out, dlock_error *err)
{
	struct redis_endpoint seeds[REDIS_REDLOCK_MAX];
	long db = 0;
	if (uri->nhosts > REDIS_REDLOCK_MAX)
		return dlock_error_set(err, DLOCK_EURI, "%s: at most %d seeds in one URI: %s", uri->scheme,
		                       REDIS_REDLOCK_MAX, uri->masked);
	memset(seeds, 0, sizeof seeds);
	dlock_status st = via->endpoints(uri, seeds, &db, err);
	if (st != DLOCK_OK)
		return st;
	if (db != 0)
		return dlock_error_set(err, DLOCK_EURI, "%s: a Redis Cluster has database 0 only: %s", uri->scheme,
		                       uri->masked);
	struct redis_cluster *cl = calloc(1, sizeof *cl);
	if (!cl)
		return dlock_error_set(err, DLOCK_ENOMEM, "%s: out of memory", uri->scheme);
	pthread_mutex_init(&cl->mu, NULL);
	pthread_mutex_init(&cl->refresh_mu, NULL);
	cl->cfg = cfg;
	cl->via = cfg->tls ? &dlock_redis_tls : &dlock_redis_tcp;
	cl->stale = 1;
	snprintf(cl->label, sizeof cl->label, "cluster %s%s", seeds[0].label, uri->nhosts > 1 ? ",..." : "");
	for (size_t i = 0; i < uri->nhosts; i++)
		if (node_at_locked(cl, seeds[i].host, strlen(seeds[i].host), seeds[i].port) < 0) {
			dlock_redis_cluster_free(cl);
			return dlock_error_set(err, DLOCK_ENOMEM, "%s: out of memory", uri->scheme);
		}
	*out = cl;
	return DLOCK_OK;
}

void dlock_redis_cluster_free(struct redis_cluster *cl)
{
	if (!cl)
		return;
	for (size_t i = 0; i < cl->nnodes; i++)
		node_free(cl->nodes[i]);
	free(cl->nodes);
	pthread_mutex_destroy(&cl->refresh_mu);
	pthread_mutex_destroy(&cl->mu);
	free(cl);
}

const char *dlock_redis_cluster_label(const struct redis_cluster *cl)
{
	return cl->label;
}

/* ------------------------------------------------------------ the map */

static int is_int(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_INTEGER;
}

/*
 * CLUSTER SLOTS's reply, from `asked`, into `map` (node index + 1 per slot):
 * each entry is {first slot, last slot, master, replicas...}, a master is
 * {host, port, id, ...}, where an empty or NULL host means "the address you
 * asked" and "?" an address the node does not know.
 */
static dlock_status parse_slots(struct redis_cluster *cl, const redisReply *r, const struct redis_node *asked,
                                uint16_t *map, dlock_error *err)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to CLUSTER SLOTS",
		                       asked->pool.ep.label);
	memset(map, 0, REDIS_CLUSTER_SLOTS * sizeof *map);
	pthread_mutex_lock(&cl->mu);
	dlock_status st = DLOCK_OK;
	for (size_t i = 0; i < r->elements && st == DLOCK_OK; i++) {
		const redisReply *e = r->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !is_int(e->element[0]) || !is_int(e->element[1]) ||
		    e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
		    !is_int(e->element[2]->element[1])) {
			st = dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected entry in CLUSTER SLOTS",
			                     asked->pool.ep.label);
			break;
		}
		long long lo = e->element[0]->integer, hi = e->element[1]->integer;
		const redisReply *h = e->element[2]->element[0];
		long long port = e->element[2]->element[1]->integer;
		const char *host = asked->pool.ep.host;
		size_t hostlen = strlen(host);
		if (h->type == REDIS_REPLY_STRING && h->len > 0) {
			host = h->str;
			hostlen = (size_t)h->len;
		}
		if (lo < 0 || hi >= REDIS_CLUSTER_SLOTS || lo > hi || port < 1 || port > 65535 ||
		    (hostlen == 1 && host[0] == '?'))
			continue; /* a range we cannot use: its slots stay unknown */
		long idx = node_at_locked(cl, host, hostlen, (int)port);
		if (idx < 0) {
			st = dlock_error_set(err, DLOCK_ENOMEM, "redis %s: cannot keep the cluster's nodes",
			                     asked->pool.ep.label);
			break;
		}
		for (long long s = lo; s <= hi; s++)
			map[s] = (uint16_t)(idx + 1);
	}
	pthread_mutex_unlock(&cl->mu);
	return st;
}

/* Ask node `n` for the map. */
static dlock_status ask_slots(struct redis_cluster *cl, struct redis_node *n, uint16_t *map, dlock_error *err)
{
	struct redis_conn *ctx = NULL;
	dlock_status st = dlock_redis_pool_get(&n->pool, &ctx, err);
	if (st != DLOCK_OK)
		return st;
	const char *argv[2] = { "CLUSTER", "SLOTS" };
	size_t len[2] = { 7, 5 };
	redisReply *r = dlock_redis_command_argv(ctx, 2, argv, len);
	if (!r)
		st = dlock_redis_io_error(ctx, &n->pool.ep, err);
	else if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "cluster support disabled"))
		st = dlock_error_set(err, DLOCK_ESERVER,
		                     "redis %s: not a Redis Cluster node (%s): use redis:// for a single server",
		                     n->pool.ep.label, r->str);
	else if (r->type == REDIS_REPLY_ERROR)
		st = dlock_redis_reply_error(r, &n->pool.ep, "CLUSTER SLOTS", err);
	else
		st = parse_slots(cl, r, n, map, err);
	dlock_redis_pool_put(&n->pool, ctx);
	freeReplyObject(r);
	return st;
}

/*
 * A new map from the first node that gives one, unless another thread got
 * one since `seen` (the epoch its caller saw).  Every node is tried, the
 * last that answered first; the reported failure is the most telling one
 * (a node that answers wrongly says more than one that does not answer).
 */
static dlock_status refresh(struct redis_cluster *cl, unsigned seen, struct redis_node **answered,
                            dlock_error *err)
{
	pthread_mutex_lock(&cl->refresh_mu);
	pthread_mutex_lock(&cl->mu);
	int done = cl->epoch != seen;
	size_t n = cl->nnodes, first = cl->last;
	if (answered)
		*answered = cl->nodes[first];
	pthread_mutex_unlock(&cl->mu);
	if (done) {
		pthread_mutex_unlock(&cl->refresh_mu);
		return DLOCK_OK;
	}
	uint16_t *map = malloc(REDIS_CLUSTER_SLOTS * sizeof *map);
	if (!map) {
		pthread_mutex_unlock(&cl->refresh_mu);
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", cl->label);
	}
	dlock_status st = DLOCK_ECONNECT, worst = DLOCK_OK;
	dlock_error one = { "" };
	for (size_t k = 0; k < n; k++) {
		size_t i = (first + k) % n;
		pthread_mutex_lock(&cl->mu);
		struct redis_node *node = cl->nodes[i];
		pthread_mutex_unlock(&cl->mu);
		st = ask_slots(cl, node, map, &one);
		if (st == DLOCK_OK) {
			pthread_mutex_lock(&cl->mu);
			memcpy(cl->slots, map, sizeof cl->slots);
			cl->stale = 0;
			cl->epoch++;
			cl->last = i;
			pthread_mutex_unlock(&cl->mu);
			if (answered)
				*answered = node;
			break;
		}
		if (worst == DLOCK_OK || worst == DLOCK_ECONNECT) {
			worst = st;
			*err = one;
		}
	}
	free(map);
	if (st != DLOCK_OK && n > 0) { /* the next refresh starts elsewhere: the first node may be the one that died */
		pthread_mutex_lock(&cl->mu);
		cl->last = (first + 1) % n;
		pthread_mutex_unlock(&cl->mu);
	}
	pthread_mutex_unlock(&cl->refresh_mu);
	if (st != DLOCK_OK && worst == DLOCK_ECONNECT) {
		char last[DLOCK_ERROR_MAX];
		snprintf(last, sizeof last, "%s", err->msg);
		dlock_error_set(err, worst, "redis %s: none of %zu nodes answers (%s)", cl->label, n, last);
	}
	return st == DLOCK_OK ? st : worst;
}

dlock_status dlock_redis_cluster_discover(struct redis_cluster *cl, struct redis_node **answered, dlock_error *err)
{
	pthread_mutex_lock(&cl->mu);
	unsigned seen = cl->epoch;
	pthread_mutex_unlock(&cl->mu);
	return refresh(cl, seen, answered, err);
}

dlock_status dlock_redis_cluster_node(struct redis_cluster *cl, unsigned slot, struct redis_node **out,
                                      dlock_error *err)
{
	slot &= REDIS_CLUSTER_SLOTS - 1;
	pthread_mutex_lock(&cl->mu);
	unsigned idx = cl->slots[slot], seen = cl->epoch;
	int stale = cl->stale;
	pthread_mutex_unlock(&cl->mu);
	if (stale || idx == 0) {
		dlock_error why = { "" };
		dlock_status st = refresh(cl, seen, NULL, &why);
		pthread_mutex_lock(&cl->mu);
		idx = cl->slots[slot];
		pthread_mutex_unlock(&cl->mu);
		if (st != DLOCK_OK && idx == 0)
			return dlock_error_set(err, st, "%s", why.msg);
	}
	if (idx == 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: no master serves hash slot %u now", cl->label,
		                       slot);
	pthread_mutex_lock(&cl->mu);
	*out = cl->nodes[idx - 1];
	pthread_mutex_unlock(&cl->mu);
	return DLOCK_OK;
}

dlock_status dlock_redis_cluster_masters(struct redis_cluster *cl, struct redis_node **out, size_t max, size_t *n,
                                         dlock_error *err)
{
	struct redis_node *first = NULL;
	dlock_status st = dlock_redis_cluster_node(cl, 0, &first, err); /* a map, asked for when stale */
	if (st != DLOCK_OK)
		return st;
	*n = 0;
	pthread_mutex_lock(&cl->mu);
	for (unsigned s = 0; s < REDIS_CLUSTER_SLOTS; s++) {
		unsigned idx = cl->slots[s];
		if (idx == 0 || (s > 0 && cl->slots[s - 1] == idx))
			continue;
		struct redis_node *node = cl->nodes[idx - 1];
		size_t i = 0;
		while (i < *n && out[i] != node)
			i++;
		if (i == *n && *n < max)
			out[(*n)++] = node;
	}
	pthread_mutex_unlock(&cl->mu);
	return DLOCK_OK;
}

dlock_status dlock_redis_cluster_redirect(struct redis_cluster *cl, unsigned slot, int moved, const char *addr,
                                          size_t len, struct redis_node **out, dlock_error *err)
{
	slot &= REDIS_CLUSTER_SLOTS - 1;
	pthread_mutex_lock(&cl->mu);
	long idx = node_at_addr_locked(cl, addr, len);
	if (idx >= 0) {
		*out = cl->nodes[idx];
		if (moved) {
			cl->slots[slot] = (uint16_t)(idx + 1);
			cl->stale = 1;
		}
	}
	pthread_mutex_unlock(&cl->mu);
	if (idx < 0)
		return dlock_error_set(err, DLOCK_ESERVER, "redis %s: cannot follow a redirection to %.*s", cl->label,
		                       (int)(len > 100 ? 100 : len), addr);
	return DLOCK_OK;
}

void dlock_redis_cluster_stale(struct redis_cluster *cl)
{
	pthread_mutex_lock(&cl->mu);
	cl->stale = 1;
	pthread_mutex_unlock(&cl->mu);
}

/* A node's channel moved (the server unsubscribed us, or answered MOVED): the map is stale. */
static void channel_moved(void *arg)
{
	dlock_redis_cluster_stale(arg);
}

struct redis_sub *dlock_redis_cluster_sub(struct redis_cluster *cl, struct redis_node *node)
{
	pthread_mutex_lock(&cl->mu);
	if (!node->sub) {
		dlock_error ignored = { "" };
		if (dlock_redis_sub_new(&node->sub, &node->pool.ep, cl->cfg, 1, channel_moved, cl, &ignored) != DLOCK_OK)
			node->sub = NULL;
	}
	struct redis_sub *s = node->sub;
	pthread_mutex_unlock(&cl->mu);
	return s;
}
