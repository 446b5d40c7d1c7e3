/*
 * redis://, rediss:// and redis+unix:// — the driver objects, the entry of
 * the Redis backend (the files beneath: redis_client.h): open and close,
 * the backend's facts, and the driver's lock methods.  Open chooses the client's
 * two modes: the transport from the scheme (redis_transport.h) and the
 * lock algorithm from the URI (redis_lock.h) — several hosts: RedLock
 * (redlock.c); one server: the fair queue (redis_fair.c), unless fair=0 or
 * replicas=N ask for one instance's plain SET NX with pub/sub wake-ups
 * (redis_lock.c).  Each lock method then
 * checks what is common and makes one call through the algorithm's table,
 * the only dispatch after the driver table; inspection, elections and
 * batched renewals are driver methods of their own files.
 *
 *   redis://[[user]:password@]host[:port][/db][?common parameters]
 *   redis://h1:p1,h2:p2,h3:p3[/db][?...]      RedLock over independent instances
 *   redis+unix:///path/to/socket[?db=N&...]
 *   rediss://...                              as redis://, every connection over TLS
 *                                             (tls_ parameters: redis_tls.c)
 *   redis+sentinel://s1,s2,s3/MASTER[?db=N...] the master the sentinels name (redis_sentinel.c);
 *   rediss+sentinel://...                     and over TLS
 *   redis+cluster://seed1[,seed2...][/]        a Redis Cluster: each lock on its slot's master
 *   rediss+cluster://...                      (redis_cluster.c), and over TLS
 *
 * The port defaults to 6379 and the database to 0.  The URI's `prefix`
 * (default "dlock") starts every key and channel name.  The queue (`fair`,
 * on by default where it works: one server, no replicas=N) keeps waiters
 * in Redis and has each release grant the lock to the first of them
 * (redis_fair.c): a release wakes one waiter, not all of them.
 *
 * Read-write locks (one server, not RedLock): a writer is a mutex holder,
 * readers run their own scripts (redis_scripts.c) through the same single
 * instance functions (redis_lock.c), and their waiters always wait in the
 * core's loop with pub/sub wake-ups, fair=1 or not (waiting_algo()).
 * Semaphores likewise (one server, not RedLock): permits run their own
 * scripts (redis_sem.c), hold the mutex's key while any is live, and wait
 * in the core's loop.
 *
 * A loop client (dlock/loop.h) of redis://, redis+unix:// or rediss://
 * whose mode is one server with algorithm "single" (fair=0, replicas=N
 * too: dlock_redis_loop_fits()) makes its lock calls on its loop
 * (redis_loop.c, driver contract 9: DLOCK_FACT_LOOP_IO), every kind of
 * lock alike; its other calls, and every other mode's, run on the core's
 * worker threads.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_cluster.h"
#include "redis_elect.h"
#include "redis_inspect.h"
#include "redis_key.h"
#include "redis_lock.h"
#include "redis_loop.h"
#include "redis_renew.h"
#include "redis_sentinel.h"

/* ------------------------------------------------------------ open, close */

#define REDIS_REPLICAS_MAX 100
#define REDIS_REPLICAS_TIMEOUT_MS 1000

/*
 * replicas=N (0..REDIS_REPLICAS_MAX) and replicas_timeout (a duration, bare
 * numbers in ms, default 1s): one instance with replicas, not RedLock (its
 * instances are independent) nor fair=1 (a grant is written by the
 * releaser's connection, whose WAIT the waiter cannot make).
 */
static dlock_status parse_replicas(const dlock_uri *uri, size_t servers, int fair, int *replicas,
                                   int64_t *timeout_ms, dlock_error *err)
{
	const char *n = dlock_uri_get(uri, "replicas"), *t = dlock_uri_get(uri, "replicas_timeout");
	if (n) {
		char *end = NULL;
		long v = strtol(n, &end, 10);
		if (!*n || *end || v < 0 || v > REDIS_REPLICAS_MAX || strspn(n, "0123456789") != strlen(n))
			return dlock_error_set(err, DLOCK_EURI, "redis: replicas must be a number of replicas, 0 to %d: %s",
			                       REDIS_REPLICAS_MAX, uri->masked);
		*replicas = (int)v;
	}
	if (t && (dlock_duration_parse(t, 1, timeout_ms) != DLOCK_OK || *timeout_ms <= 0))
		return dlock_error_set(err, DLOCK_EURI, "redis: replicas_timeout must be a positive duration: %s",
		                       uri->masked);
	if (t && !n)
		return dlock_error_set(err, DLOCK_EURI, "redis: replicas_timeout needs replicas=N: %s", uri->masked);
	if (*replicas > 0 && servers > 1)
		return dlock_error_set(err, DLOCK_EURI,
		                       "redis: replicas= waits for one server's replicas; RedLock's instances are "
		                       "independent: %s",
		                       uri->masked);
	if (*replicas > 0 && fair)
		return dlock_error_set(err, DLOCK_EURI, "redis: replicas= does not work with fair=1 (a grant is written "
		                       "by the releaser's connection): %s",
		                       uri->masked);
	return DLOCK_OK;
}

static void client_free(struct redis_client *c)
{
	if (!c)
		return;
	dlock_redis_loop_close(c); /* a loop client's: on its loop's thread, where open and close run */
	dlock_redis_sentinel_free(c->sentinel); /* first: its watcher may call into the subscriber */
	c->sentinel = NULL;
	dlock_redis_cluster_free(c->cluster);
	dlock_redis_sub_free(c->sub);
	for (size_t i = 0; c->pools && i < c->npools; i++)
		dlock_redis_pool_destroy(&c->pools[i]);
	free(c->pools);
	if (c->fair)
		dlock_redis_pool_destroy(&c->waits);
	dlock_redis_tls_free(c->tls);
	dlock_redis_elect_fini(c);
	free(c);
}

/* The sentinels named a new master: waiters subscribe there (the pools drop old connections themselves). */
static void master_moved(void *arg)
{
	struct redis_client *c = arg;
	dlock_redis_sub_reconnect(c->sub);
}

/* First contact with one server: prove the URI works, warn about eviction, load the scripts. */
static dlock_status greet(struct redis_client *c, struct redis_pool *p, int *scripts_loaded, dlock_error *err)
{
	struct redis_conn *ctx = NULL;
	dlock_status st = dlock_redis_pool_get(p, &ctx, err);
	if (st != DLOCK_OK)
		return st;
	dlock_redis_check_eviction(ctx, &p->ep, c->cfg.host);
	if (!ctx->err && !*scripts_loaded) {
		st = dlock_redis_scripts_load(ctx, &p->ep, &c->scripts, err);
		*scripts_loaded = st == DLOCK_OK;
	}
	if (ctx->err && st == DLOCK_OK)
		st = dlock_redis_io_error(ctx, &p->ep, err);
	dlock_redis_pool_put(p, ctx);
	return st;
}

/*
 * One instance must answer.  RedLock opens when a majority answers: the
 * others may be down for now.  A server that answers with a configuration
 * problem (wrong password, no such database) fails the open even then.
 */
static dlock_status greet_all(struct redis_client *c, dlock_error *err)
{
	int loaded = 0;
	size_t up = 0;
	dlock_error down = { "" };
	for (size_t i = 0; i < c->npools; i++) {
		dlock_error one = { "" };
		dlock_status st = greet(c, &c->pools[i], &loaded, &one);
		if (st == DLOCK_OK) {
			up++;
			continue;
		}
		if (st != DLOCK_ECONNECT || c->npools == 1)
			return dlock_error_set(err, st, "%s", one.msg);
		dlock_host_log(c->cfg.host, DLOCK_LOG_WARN, "%s", one.msg);
		down = one;
	}
	if (up < c->quorum)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis: %zu of %zu instances answer, %zu needed (%s)", up,
		                       c->npools, c->quorum, down.msg);
	return DLOCK_OK;
}

/*
 * A cluster: the seeds, then the slot map from one of them (which must
 * answer, as one instance must), then that node greeted.  Each master has
 * its pools and subscriber (redis_cluster.c); the client has none of its own.
 */
static dlock_status open_cluster(struct redis_client *c, const dlock_uri *uri, const struct redis_transport *via,
                                 int fair, dlock_error *err)
{
	dlock_status st = dlock_redis_cluster_new(uri, via, &c->cfg, &c->cluster, err);
	if (st != DLOCK_OK)
		return st;
	c->label = dlock_redis_cluster_label(c->cluster);
	c->npools = 0;
	c->quorum = 1;
	c->fair = fair;
	if (fair) /* unused: each master has its own */
		dlock_redis_pool_init(&c->waits, &c->cfg);
	c->algo = fair ? &dlock_redis_fair : &dlock_redis_single;
	struct redis_node *answered = NULL;
	st = dlock_redis_cluster_discover(c->cluster, &answered, err);
	int loaded = 0;
	return st != DLOCK_OK ? st : greet(c, &answered->pool, &loaded, err);
}

static dlock_status redis_open_common(const dlock_uri *uri, dlock_host *host, const struct redis_transport *via,
                                      void **backend, dlock_error *err)
{
	dlock_status st = DLOCK_ENOMEM;
	if (uri->nhosts > REDIS_REDLOCK_MAX)
		return dlock_error_set(err, DLOCK_EURI, "redis://: at most %d hosts in one URI: %s", REDIS_REDLOCK_MAX,
		                       uri->masked);
	/* The hash tag is built from the name's digest; braces in the prefix
	 * would make Redis Cluster hash on them instead ("{}" even splits one
	 * lock's keys over several slots). */
	if (strpbrk(uri->prefix, "{}"))
		return dlock_error_set(err, DLOCK_EURI, "redis: 'prefix' must not contain '{' or '}': %s",
		                       uri->masked);
	/* Each command builds its key names into its arguments, whose room is bounded. */
	if (strlen(uri->prefix) > REDIS_PREFIX_MAX)
		return dlock_error_set(err, DLOCK_EURI, "redis: 'prefix' is at most %d bytes: %s", REDIS_PREFIX_MAX,
		                       uri->masked);
	/* The servers that hold locks: the URI's hosts, or the one master its sentinels name, or
	 * (a cluster) the master of each lock's slot, one at a time. */
	size_t servers = via->sentinel || via->cluster ? 1 : uri->nhosts;
	if (servers == 0) /* the URI parser requires a host; said here for the allocations below */
		return dlock_error_set(err, DLOCK_EURI, "redis: no host in %s", uri->masked);
	/* The queue (fair=1) by default, where it works: one server (not RedLock), no replicas=N. */
	int fair = 0, fair_given = dlock_uri_get(uri, "fair") != NULL;
	if (fair_given && dlock_uri_get_bool(uri, "fair", &fair, err) != DLOCK_OK)
		return DLOCK_EURI;
	if (fair && servers > 1)
		return dlock_error_set(err, DLOCK_EURI, "redis: fair=1 needs one instance, not RedLock: %s", uri->masked);
	int replicas = 0;
	int64_t replicas_timeout_ms = REDIS_REPLICAS_TIMEOUT_MS;
	st = parse_replicas(uri, servers, fair, &replicas, &replicas_timeout_ms, err);
	if (st != DLOCK_OK)
		return st;
	if (!fair_given)
		fair = servers == 1 && replicas == 0;
	st = DLOCK_ENOMEM;
	struct redis_client *c = calloc(1, sizeof *c);
	if (c)
		dlock_redis_elect_init(c);
	if (!c || (!via->cluster && !(c->pools = calloc(servers, sizeof *c->pools)))) {
		dlock_error_set(err, st, "redis: out of memory");
		goto fail;
	}
	c->cfg = (struct redis_cfg){
		.user = uri->user,
		.password = uri->password,
		.connect_timeout_ms = uri->connect_timeout_ms,
		.io_timeout_ms = uri->io_timeout_ms,
		.host = host,
	};
	if (via->tls) {
		st = dlock_redis_tls_new(uri, host, &c->tls, err);
		if (st != DLOCK_OK)
			goto fail;
		c->cfg.tls = c->tls;
	}
	c->replicas = replicas;
	c->replicas_timeout_ms = replicas_timeout_ms;
	c->prefix = uri->prefix;
	c->prefixlen = strlen(uri->prefix);
	c->record = dlock_host_owner(host, &c->recordlen);
	memcpy(c->rw_record, c->record, c->recordlen);
	memcpy(c->rw_record + c->recordlen, REDIS_RWLOCK_FIELD, sizeof REDIS_RWLOCK_FIELD);
	c->rw_recordlen = c->recordlen + strlen(REDIS_RWLOCK_FIELD);
	c->publish = via->cluster ? "SPUBLISH" : "PUBLISH";
	if (via->cluster) {
		st = open_cluster(c, uri, via, fair, err);
		if (st != DLOCK_OK)
			goto fail;
		*backend = c;
		return DLOCK_OK;
	}
	c->npools = servers;
	c->quorum = servers / 2 + 1;
	for (size_t i = 0; i < c->npools; i++)
		dlock_redis_pool_init(&c->pools[i], &c->cfg);
	c->algo = fair ? &dlock_redis_fair : c->npools > 1 ? &dlock_redis_redlock : &dlock_redis_single;
	struct redis_endpoint eps[REDIS_REDLOCK_MAX];
	memset(eps, 0, sizeof eps);
	if (!via->sentinel)
		st = via->endpoints(uri, eps, &c->cfg.db, err);
	else if ((st = dlock_redis_sentinel_new(uri, via, &c->cfg, &c->sentinel, &c->cfg.db, err)) == DLOCK_OK)
		dlock_redis_sentinel_endpoint(c->sentinel, &eps[0]);
	if (st != DLOCK_OK)
		goto fail;
	for (size_t i = 0; i < c->npools; i++)
		c->pools[i].ep = eps[i];
	c->label = c->pools[0].ep.label;
	if (fair) {
		c->fair = 1;
		dlock_redis_pool_init(&c->waits, &c->cfg);
		c->waits.ep = c->pools[0].ep;
	}
	if (c->sentinel) {
		c->pools[0].generation = dlock_redis_sentinel_generation(c->sentinel);
		c->waits.generation = c->pools[0].generation;
	}
	st = greet_all(c, err);
	if (st == DLOCK_OK && c->npools == 1)
		st = dlock_redis_sub_new(&c->sub, &c->pools[0].ep, &c->cfg, 0, NULL, NULL, err);
	if (st == DLOCK_OK && c->sentinel)
		st = dlock_redis_sentinel_watch(c->sentinel, master_moved, c, err);
	dlock_io *io = dlock_host_io(host); /* a loop client's loop, opening us on its thread */
	if (st == DLOCK_OK && io && dlock_redis_loop_fits(c))
		st = dlock_redis_loop_open(c, io, err);
	if (st != DLOCK_OK)
		goto fail;
	*backend = c;
	return DLOCK_OK;
fail:
	client_free(c);
	return st;
}

/* The transport of each scheme: the first axis of the mode table. */
static const struct redis_transport *const transports[] = {
	&dlock_redis_tcp,      &dlock_redis_unix,    &dlock_redis_tls,         &dlock_redis_sentinel,
	&dlock_redis_sentinel_tls, &dlock_redis_cluster, &dlock_redis_cluster_tls,
};

static dlock_status redis_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++)
		if (strcmp(uri->scheme, transports[i]->scheme) == 0)
			return redis_open_common(uri, host, transports[i], backend, err);
	return dlock_error_set(err, DLOCK_ENOBACKEND, "redis: no transport for %s://", uri->scheme);
}

static void redis_close(void *backend)
{
	client_free(backend);
}

/* The algorithms' parameter, and the transport's own. */
static int algorithm_param(const char *key)
{
	return strcmp(key, "fair") == 0 || strcmp(key, "replicas") == 0 || strcmp(key, "replicas_timeout") == 0;
}

static int redis_knows_param(const char *key)
{
	return algorithm_param(key) || dlock_redis_tcp.knows_param(key);
}

static int redis_unix_knows_param(const char *key)
{
	return algorithm_param(key) || dlock_redis_unix.knows_param(key);
}

static int rediss_knows_param(const char *key)
{
	return algorithm_param(key) || dlock_redis_tls.knows_param(key);
}

static int redis_sentinel_knows_param(const char *key)
{
	return algorithm_param(key) || dlock_redis_sentinel.knows_param(key);
}

static int rediss_sentinel_knows_param(const char *key)
{
	return algorithm_param(key) || dlock_redis_sentinel_tls.knows_param(key);
}

static int redis_cluster_knows_param(const char *key)
{
	return algorithm_param(key) || dlock_redis_cluster.knows_param(key);
}

static int rediss_cluster_knows_param(const char *key)
{
	return algorithm_param(key) || dlock_redis_cluster_tls.knows_param(key);
}

/* ------------------------------------------------------------ locks */

/*
 * A handle keeps the digest of its name, not the names of its keys: each
 * command builds those it sends (dlock_redis_arg_key), so that a client
 * holding 10,000 locks keeps no key name at all.  The kind changes what a
 * shared acquisition does (dlock_wait_mode), which scripts a semaphore's
 * permits run (redis_sem.c), and that the queue is not used.
 */
static dlock_status redis_lock_init_kind(void *backend, void *lkp, const char *name, size_t len,
                                         const dlock_kind_spec *spec, dlock_error *err)
{
	struct redis_lock *lk = lkp;
	(void)backend;
	(void)err;
	lk->kind = spec->kind;
	lk->permits_n = spec->permits;
	dlock_redis_lock_name(lk, name, len);
	return DLOCK_OK;
}

/*
 * The backend's facts: AP; the algorithm's tokens and wake-ups; what
 * inspection sees (redis_inspect.c), deleting breaks, nothing to collect.
 *
 * Read-write locks on one server (any transport, Sentinel, Cluster), not
 * RedLock.  A writer takes the key a mutex takes, and readers keep it
 * "shared" while they hold (redis_scripts.c), so the kinds exclude each
 * other and mixing them is safe: nothing to refuse.  A waiting writer is
 * not kept in Redis, so it does not hold back new readers (no preference).
 * Readers read the counter of the writers' tokens: conditional, as the
 * tokens are.  Waiters of a read-write lock subscribe and try again in the
 * core's loop, also with fair=1, whose queue serves mutexes only.
 *
 * Semaphores: the same servers.  While permits are held the mutex's key
 * says "semaphore" (redis_sem.c), so the kinds still exclude each other
 * (a mutex waits for the last permit, a permit for the mutex), and only
 * another N is refused (DLOCK_EKIND).  Waiters try again in the core's
 * loop, whoever tries first after a release wins (unordered); a permit has
 * a slot and a token from the name's counter (conditional, as a mutex's).
 */
static dlock_status redis_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	if (!backend) /* asked before open() (DLOCK_FACT_INLINE): not a local backend */
		return DLOCK_ENOTSUP;
	struct redis_client *c = backend;
	int redlock = c->algo == &dlock_redis_redlock; /* mutexes only, no token, no listing */
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "redis"; break;
	case DLOCK_FEATURE_CONSISTENCY: out->value = DLOCK_CONSISTENCY_AP; break;
	case DLOCK_FEATURE_FENCING:
	case DLOCK_FEATURE_READ_FENCING:
	case DLOCK_FEATURE_PERMIT_FENCING: out->value = c->algo->fencing; break;
	case DLOCK_FACT_FENCING_NOTE:
		out->text = c->algo->fencing == DLOCK_FENCING_NONE
		                    ? ""
		                    : "tokens come from a per-name counter kept at least at the server's clock in "
		                      "microseconds; they go back only if that counter is lost (restart without "
		                      "persistence, failover to a replica that missed it, eviction) and the "
		                      "server's clock is then behind the last token";
		break;
	case DLOCK_FEATURE_FAIR: out->value = c->fair; break;
	case DLOCK_FEATURE_LEASE: out->value = DLOCK_LEASE_TTL; break;
	case DLOCK_FEATURE_WAKEUP: out->value = c->algo->wakeup; break;
	case DLOCK_FEATURE_SCOPE: out->value = DLOCK_SCOPE_NETWORK; break;
	case DLOCK_FEATURE_RWLOCK: out->value = redlock ? DLOCK_RWLOCK_NONE : DLOCK_RWLOCK_NO_PREFERENCE; break;
	case DLOCK_FEATURE_SEMAPHORE: out->value = redlock ? DLOCK_SEMAPHORE_NONE : DLOCK_SEMAPHORE_UNORDERED; break;
	case DLOCK_FACT_SLOTS: out->value = 1; break;
	case DLOCK_FEATURE_KIND_CHECK: out->value = 0; break;
	case DLOCK_FACT_CORE_WAITS: out->value = kind != DLOCK_KIND_MUTEX; break;
	case DLOCK_FEATURE_INSPECT: /* redis_inspect.c */
		out->value = DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_LEASE |
		             (redlock ? 0 : DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_TOKEN | DLOCK_INSPECT_LIST) |
		             (c->fair ? DLOCK_INSPECT_WAITERS : 0);
		break;
	case DLOCK_FEATURE_BREAK: out->value = DLOCK_BREAK_DELETE; break;
	case DLOCK_FEATURE_GC: out->value = 0; break; /* every key expires (dlock_redis_gc) */
	case DLOCK_FEATURE_ELECTION: out->value = redlock ? -1 : DLOCK_WAKEUP_NOTIFY; break; /* RedLock: no term */
	default: return DLOCK_ENOTSUP;
	}
	return DLOCK_OK;
}

/*
 * The drivers whose clients may run on a loop (redis://, redis+unix://,
 * rediss://): asked before open (DLOCK_FACT_LOOP_IO, `backend` NULL) they
 * say yes, and after it, yes only for a client whose mode runs there
 * (redis_loop.c: a loop client's calls, and what a loop client of a
 * blocking client's URI would do, which DLOCK_FEATURE_LOOP_RENEWS tells);
 * every other code as redis_feature().
 */
static dlock_status redis_feature_loop(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	if (code != DLOCK_FACT_LOOP_IO)
		return redis_feature(backend, kind, code, out);
	const struct redis_client *c = backend;
	out->value = !c || dlock_redis_loop_fits(c);
	return DLOCK_OK;
}

static dlock_status check_lease(int64_t lease_ms, dlock_error *err)
{
	if (lease_ms <= 0)
		return dlock_error_set(err, DLOCK_EINVAL, "redis: the lease must be positive, not %" PRId64 " ms",
		                       lease_ms);
	return DLOCK_OK;
}

/* The algorithm's blocking acquire: only fair=1 has one (its capabilities say SERVER_QUEUE). */
static dlock_status redis_acquire(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                                  dlock_error *err)
{
	struct redis_client *c = backend;
	dlock_status st = check_lease(lease_ms, err);
	if (st == DLOCK_OK && !c->algo->acquire)
		st = dlock_error_set(err, DLOCK_ENOTSUP, "redis: the %s algorithm waits in the core's loop",
		                     c->algo->name);
	return st != DLOCK_OK ? st : c->algo->acquire(c, lk, lease_ms, w, out, err);
}

/* Who waits for lk: the algorithm, or, for a read-write lock or a semaphore on a client whose queue serves mutexes only,
 * one instance's attempts in the core's loop (the release and the rest stay the algorithm's). */
static const struct redis_algorithm *waiting_algo(const struct redis_client *c, const struct redis_lock *lk)
{
	return lk->kind != DLOCK_KIND_MUTEX && !c->algo->try_acquire ? &dlock_redis_single : c->algo;
}

/* One attempt, the waiting being the core's; an algorithm whose server queues waits in it instead. */
static dlock_status redis_try_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                      dlock_acquired *out, dlock_error *err)
{
	struct redis_client *c = backend;
	const struct redis_algorithm *algo = waiting_algo(c, lkp);
	((struct redis_lock *)lkp)->on_loop = 0; /* a blocking acquisition: its disarm() blocks too */
	dlock_status st = check_lease(lease_ms, err);
	if (st != DLOCK_OK)
		return st;
	if (!algo->try_acquire)
		return algo->acquire(c, lkp, lease_ms, w, out, err);
	return algo->try_acquire(c, lkp, lease_ms, w, retry, out, err);
}

static void redis_disarm(void *backend, void *lkp, dlock_wait *w)
{
	struct redis_client *c = backend;
	struct redis_lock *lk = lkp;
	const struct redis_algorithm *algo = waiting_algo(c, lk);
	(void)w;
	if (lk->on_loop) /* its attempts were made on the loop, where this is called too */
		dlock_redis_loop_disarm(c, lk);
	else if (algo->disarm)
		algo->disarm(c, lk);
}

static dlock_status redis_release(void *backend, void *lk, dlock_error *err)
{
	struct redis_client *c = backend;
	return c->algo->release(c, lk, err);
}

static dlock_status redis_extend(void *backend, void *lk, int64_t lease_ms, dlock_error *err)
{
	struct redis_client *c = backend;
	dlock_status st = check_lease(lease_ms, err);
	return st != DLOCK_OK ? st : c->algo->extend(c, lk, lease_ms, err);
}

static void redis_extend_many(void *backend, void *const *lks, const int64_t *lease_ms, size_t n, dlock_status *out,
                              dlock_error *err)
{
	dlock_redis_extend_many(backend, (struct redis_lock *const *)lks, lease_ms, n, out, err);
}

static dlock_status redis_check(void *backend, void *lk, dlock_error *err)
{
	struct redis_client *c = backend;
	return c->algo->check(c, lk, err);
}

/* The non-blocking forms (driver contract 9): only a client whose mode runs on its loop gets these calls. */
static dlock_status redis_try_acquire_start(void *backend, void *lk, int64_t lease_ms, dlock_wait *w,
                                            dlock_retry *retry, dlock_acquired *out, dlock_error *err,
                                            dlock_call *call)
{
	dlock_status st = check_lease(lease_ms, err);
	return st != DLOCK_OK ? st : dlock_redis_loop_try_acquire(backend, lk, lease_ms, w, retry, out, err, call);
}

static dlock_status redis_release_start(void *backend, void *lk, dlock_error *err, dlock_call *call)
{
	return dlock_redis_loop_release(backend, lk, err, call);
}

static dlock_status redis_extend_start(void *backend, void *lk, int64_t lease_ms, dlock_error *err, dlock_call *call)
{
	dlock_status st = check_lease(lease_ms, err);
	return st != DLOCK_OK ? st : dlock_redis_loop_extend(backend, lk, lease_ms, err, call);
}

static dlock_status redis_check_start(void *backend, void *lk, dlock_error *err, dlock_call *call)
{
	return dlock_redis_loop_check(backend, lk, err, call);
}

/* One driver per scheme: they differ only in the parameters they take (redis_open picks the transport), and
 * those of one server in their lock calls on a loop client's loop (the ABI version 9 block). */
#define REDIS_DRIVER_BODY(scheme_, knows_param_)                                                                \
	.abi_version = DLOCK_DRIVER_ABI_VERSION, .scheme = (scheme_), .lock_size = sizeof(struct redis_lock),  \
	.open = redis_open, .close = redis_close, .knows_param = (knows_param_), .acquire = redis_acquire,     \
	.try_acquire = redis_try_acquire, .disarm = redis_disarm, .release = redis_release,                   \
	.extend = redis_extend, .check = redis_check, .extend_many = redis_extend_many,                       \
	.lock_init_kind = redis_lock_init_kind, .inspect = dlock_redis_inspect, .list = dlock_redis_list,       \
	.break_lock = dlock_redis_break, .proclaim = dlock_redis_proclaim, .watch = dlock_redis_watch,          \
	.unwatch = dlock_redis_unwatch, .gc = dlock_redis_gc
#define REDIS_DRIVER(scheme_, knows_param_) { REDIS_DRIVER_BODY(scheme_, knows_param_), .feature = redis_feature }
#define REDIS_LOOP_DRIVER(scheme_, knows_param_)                                                               \
	{                                                                                                      \
		REDIS_DRIVER_BODY(scheme_, knows_param_), .feature = redis_feature_loop,                            \
		.try_acquire_start = redis_try_acquire_start, .release_start = redis_release_start,                \
		.extend_start = redis_extend_start, .check_start = redis_check_start,                              \
	}

const dlock_driver dlock_redis_driver = REDIS_LOOP_DRIVER("redis", redis_knows_param);
const dlock_driver dlock_redis_unix_driver = REDIS_LOOP_DRIVER("redis+unix", redis_unix_knows_param);
const dlock_driver dlock_rediss_driver = REDIS_LOOP_DRIVER("rediss", rediss_knows_param);
const dlock_driver dlock_redis_sentinel_driver = REDIS_DRIVER("redis+sentinel", redis_sentinel_knows_param);
const dlock_driver dlock_rediss_sentinel_driver = REDIS_DRIVER("rediss+sentinel", rediss_sentinel_knows_param);
const dlock_driver dlock_redis_cluster_driver = REDIS_DRIVER("redis+cluster", redis_cluster_knows_param);
const dlock_driver dlock_rediss_cluster_driver = REDIS_DRIVER("rediss+cluster", rediss_cluster_knows_param);
