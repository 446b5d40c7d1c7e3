/*
 * zk:// — locks in ZooKeeper: ephemeral sequential nodes, each contender
 * watching only its predecessor (see zk_recipe.c), held by the client's
 * session (see zk_session.c).  URI form and parameters: zk_config.c; where
 * nodes live and their ACLs: zk_path.c.
 *
 * Capabilities: CP (the ensemble's consensus), fair (FIFO by sequence
 * number), fencing strict (the node's czxid), lease "session": a lock is
 * held while the client's session lives, which the client library keeps
 * alive by itself, so there is no extend(); check() asks the server.  A
 * node deleted by another client is reported lost at once (zk_own.c).
 *
 * Read-write locks (Curator's InterProcessReadWriteLock, zk_recipe.c):
 * writer-first in queue order, readers get no fencing token, and mutexes
 * and read-write locks of one name share one queue, so they exclude each
 * other and no kind check is needed between them across clients.
 *
 * Semaphores (Curator's InterProcessSemaphoreV2, zk_sem.c): FIFO (an
 * internal mutex queues the acquirers), a permit per lease node with
 * neither slot nor fencing token, N compared through the nodes' data.  A
 * semaphore's nodes sit in other directories than the mutex's queue, so
 * the kinds are checked: each acquirer, once its node is made, looks for
 * the other kind's nodes and refuses the name (DLOCK_EKIND).
 *
 * Inspection (zk_inspect.c): every node carries its client's owner record
 * as data, written by the create; inspection reads the queue and the
 * holders' nodes, listing the children of the base path; breaking deletes
 * the holders' nodes, which their clients see as a loss (DLOCK_LOST_TAKEN).
 *
 * Elections (zk_elect.c): the election's mutex is the recipe above, as
 * Curator's LeaderLatch (the first node leads); the term is its czxid,
 * the leader's value sits in its node's data after the owner record, and
 * observers are woken by a child watch on the name and a data watch on
 * the leader's node, armed again at each event and after reconnections.
 *
 * Layers: this file is the driver's face, above every other file of the
 * folder.  The sessions (zk_session.c, zk_monitor.c) sit beneath the
 * recipes, holds and elections and call none of them: what a session's
 * reconnection or death means to them goes through the hooks set here at
 * open (session_hooks).
 *
 * Descriptors: libzookeeper_mt 3.8 as built by Debian opens its socket and
 * its wake-up pipe without close-on-exec, and gives no way to reach them;
 * a process that execs while a zk:// client is open passes them on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/sys/zookeeper.h"
#include "zookeeper_internal.h"

/* What a session's changes mean to the layers above it: its files call nothing above them but these. */
static const struct zk_session_hooks session_hooks = {
	.reconnected_locked = dlock_zk_watches_reconnected_locked, /* zk_elect.c */
	.rearm_locked = dlock_zk_watches_rearm_locked,             /* zk_elect.c */
	.expired_locked = dlock_zk_report_lost_locked,             /* zk_hold.c */
};

/* The base path, made once the first session is connected: a server that refuses it refuses the client. */
static dlock_status make_base(struct zk_client *c, dlock_error *err)
{
	int rc = dlock_zk_ensure_base(c->cur);
	if (rc == ZOK)
		return DLOCK_OK;
	char what[ZK_PATH_MAX];
	snprintf(what, sizeof what, "creating the base path %s", c->cfg.base);
	return dlock_zk_fail(err, rc, what);
}

static dlock_status zk_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	struct zk_client *c = calloc(1, sizeof *c);
	if (!c)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	c->host = host;
	c->hooks = session_hooks;
	c->owner = dlock_host_owner(host, &c->owner_len);
	pthread_mutex_init(&c->mu, NULL);
	dlock_cond_init_monotonic(&c->cond);
	struct zk_client *prev = dlock_zk_log_enter(c);

	dlock_status st = dlock_zk_config_parse(uri, &c->cfg, err);
	if (st != DLOCK_OK)
		goto fail;
	st = dlock_zk_session_start(c, err);
	if (st != DLOCK_OK)
		goto fail;
	st = make_base(c, err);
	if (st != DLOCK_OK)
		goto fail;
	st = dlock_zk_monitor_start(c, err);
	if (st != DLOCK_OK)
		goto fail;
	dlock_zk_log_leave(prev);
	*backend = c;
	return DLOCK_OK;
fail:
	dlock_zk_sessions_close(c);
	dlock_zk_config_free(&c->cfg);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	dlock_zk_log_leave(prev);
	free(c);
	return st;
}

/* Closing the session makes the server delete every node it still owns. */
static void zk_close(void *backend)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_zk_sessions_close(c);
	dlock_zk_log_leave(prev);
	dlock_zk_slots_free(c);
	dlock_zk_watches_free(c);
	dlock_zk_config_free(&c->cfg);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static int zk_knows_param(const char *key)
{
	return strcmp(key, "session_timeout") == 0;
}

static dlock_status zk_lock_init_kind(void *backend, void *lkp, const char *name, size_t len,
                                      const dlock_kind_spec *spec, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_lock *lk = lkp;
	lk->kind = spec->kind;
	lk->permits = spec->permits;
	dlock_status st = dlock_zk_lock_paths(&c->cfg, lk, name, len, err);
	if (st != DLOCK_OK)
		return st;
	lk->slot = dlock_zk_slot_take(c, lk);
	if (!lk->slot) {
		dlock_zk_lock_paths_free(lk);
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	}
	return DLOCK_OK;
}

static void zk_lock_fini(void *backend, void *lkp)
{
	struct zk_client *c = backend;
	struct zk_lock *lk = lkp;
	dlock_zk_unhold(c, lk);
	dlock_zk_slot_give(lk->slot);
	dlock_zk_lock_paths_free(lk);
}

static dlock_status zk_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                               dlock_error *err)
{
	struct zk_client *c = backend;
	(void)lease_ms; /* the session's timeout, fixed when the client opened, is the lease */
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_acquire(c, lkp, w, out, err);
	dlock_zk_log_leave(prev);
	return st;
}

static dlock_status zk_release(void *backend, void *lkp, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_release(c, lkp, err);
	dlock_zk_log_leave(prev);
	return st;
}

static dlock_status zk_check(void *backend, void *lkp, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_check(c, lkp, err);
	dlock_zk_log_leave(prev);
	return st;
}

/*
 * The backend's facts (see the top of the file): mutexes and read-write
 * locks in one queue per name, so they exclude each other (no kind check);
 * semaphores beside it, without slot or token, checked against the other
 * kinds; what inspection sees, what breaking does, nothing to collect.
 */
static dlock_status zk_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	(void)backend;
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "zk"; break;
	case DLOCK_FEATURE_CONSISTENCY: out->value = DLOCK_CONSISTENCY_CP; break;
	case DLOCK_FEATURE_FENCING: out->value = DLOCK_FENCING_STRICT; break;
	case DLOCK_FEATURE_READ_FENCING:
	case DLOCK_FEATURE_PERMIT_FENCING: out->value = DLOCK_FENCING_NONE; break;
	case DLOCK_FEATURE_FAIR: out->value = 1; break;
	case DLOCK_FEATURE_LEASE: out->value = DLOCK_LEASE_SESSION; break;
	case DLOCK_FEATURE_WAKEUP: out->value = DLOCK_WAKEUP_NOTIFY; break;
	case DLOCK_FEATURE_SCOPE: out->value = DLOCK_SCOPE_NETWORK; break;
	case DLOCK_FEATURE_RWLOCK: out->value = DLOCK_RWLOCK_WRITER_FIRST; break;
	case DLOCK_FEATURE_SEMAPHORE: out->value = DLOCK_SEMAPHORE_FIFO; break;
	case DLOCK_FACT_SLOTS: out->value = 0; break;
	case DLOCK_FEATURE_KIND_CHECK: out->value = kind == DLOCK_KIND_SEMAPHORE; break;
	case DLOCK_FEATURE_INSPECT: out->value = ZK_INSPECT_FLAGS; break;
	case DLOCK_FEATURE_BREAK: out->value = DLOCK_BREAK_DELETE; break;
	case DLOCK_FEATURE_GC: out->value = 0; break;
	default: return DLOCK_ENOTSUP;
	}
	return DLOCK_OK;
}

/* Collection: the server's job here (zk_path.c: a name's nodes are containers).  Says why. */
static dlock_status zk_gc(void *backend, const char *prefix, size_t len, unsigned flags,
                          dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err)
{
	(void)backend, (void)prefix, (void)len, (void)flags, (void)removed, (void)arg;
	*count = 0;
	return dlock_error_set(err, DLOCK_ENOTSUP,
	                       "zk:// collects nothing: a name's nodes are containers, which the server removes by "
	                       "itself some time after their last child, and the fencing token is the zxid of the "
	                       "server, which never goes back");
}

static dlock_status zk_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_inspect(c, name, len, info, err);
	dlock_zk_log_leave(prev);
	return st;
}

static dlock_status zk_list(void *backend, dlock_info *info, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_list(c, info, err);
	dlock_zk_log_leave(prev);
	return st;
}

static dlock_status zk_proclaim(void *backend, void *lkp, const char *value, size_t len, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_proclaim(c, lkp, value, len, err);
	dlock_zk_log_leave(prev);
	return st;
}

static dlock_status zk_watch(void *backend, const char *name, size_t len, void (*changed)(void *arg), void *arg,
                             void **watch, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_watch(c, name, len, changed, arg, watch, err);
	dlock_zk_log_leave(prev);
	return st;
}

static void zk_unwatch(void *backend, void *watch)
{
	dlock_zk_unwatch(backend, watch);
}

static dlock_status zk_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	struct zk_client *c = backend;
	struct zk_client *prev = dlock_zk_log_enter(c);
	dlock_status st = dlock_zk_break(c, name, len, broken, err);
	dlock_zk_log_leave(prev);
	return st;
}

/* Operations of dlock/sys/zookeeper.h. */
static dlock_status zk_control(void *backend, void *lkp, int op, void *arg, dlock_error *err)
{
	struct zk_client *c = backend;
	dlock_status st = DLOCK_OK;
	(void)lkp; /* the session is the client's, whichever handle asks */
	if (op != DLOCK_ZK_CTL_SESSION_ID)
		return DLOCK_ENOTSUP;
	pthread_mutex_lock(&c->mu);
	if (c->cur && c->cur->zh)
		*(clientid_t *)arg = *zoo_client_id(c->cur->zh);
	else
		st = dlock_error_set(err, DLOCK_ECONNECT, "zk://: the client has no session at the moment");
	pthread_mutex_unlock(&c->mu);
	return st;
}

const dlock_driver dlock_zk_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "zk",
	.lock_size = sizeof(struct zk_lock),
	.open = zk_open,
	.close = zk_close,
	.knows_param = zk_knows_param,
	.lock_fini = zk_lock_fini,
	.acquire = zk_acquire,
	.release = zk_release,
	.extend = NULL,
	.check = zk_check,
	.control = zk_control,
	.lock_init_kind = zk_lock_init_kind,
	.inspect = zk_inspect,
	.list = zk_list,
	.break_lock = zk_break,
	.gc = zk_gc,
	.proclaim = zk_proclaim,
	.watch = zk_watch,
	.unwatch = zk_unwatch,
	.feature = zk_feature,
};
