/*
 * mem:// — locks inside one process, for testing code that uses dlock.
 *
 * mem://NAMESPACE: the clients of one process that open the same namespace
 * contend for the same names; other namespaces are unrelated ("" is a
 * namespace too).  The namespaces hang off this driver's process-wide
 * object, which the registry keeps (dlock_host_shared), so the driver has
 * no globals.
 *
 * Memory: namespaces are never freed, and a namespace keeps one small
 * record per name ever used in it (the name, its fencing counter and an
 * empty queue).  That record is what keeps the fencing counter from ever
 * going back, even after every client that used the name has closed.
 *
 * Per name: the holder (an acquisition id that is never reused), the end
 * of its lease on the monotonic clock, the fencing counter and a FIFO of
 * waiting acquisitions.  Only the oldest waiter may take a free name, so
 * waiters of different clients acquire in arrival order and a newcomer
 * never overtakes them.  A waiter's place in the FIFO is the wake-up its
 * try_acquire() arms, and the core's loop sleeps for it: the oldest waiter
 * until it is woken or the holder's lease runs out, the others until they
 * are woken, because they could not take the name anyway.  Whoever changes the holder or the
 * oldest waiter wakes the (new) oldest waiter.
 *
 * Locking: one mutex per namespace guards all of it.  Under it the driver
 * calls only dlock_wait_wake() and dlock_report_lost(), which take nothing
 * but short-lived core locks and never call back into a driver.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/sys/driver.h"

#define MEM_BUCKETS_MIN 64

/* One acquisition waiting for a name; lives in its lock state (mem_lock) until disarmed. */
struct mem_waiter {
	struct mem_waiter *prev, *next;
	dlock_wait *w;
};

struct mem_client;

/* One name of a namespace.  Never freed (see the top of the file). */
struct mem_name {
	struct mem_name *next_in_bucket;
	uint64_t hash;
	uint64_t owner;                  /* acquisition id of the holder; 0 when free */
	int64_t expiry_ns;               /* end of the holder's lease (monotonic) */
	uint64_t fence;                  /* last fencing token handed out */
	struct mem_client *owner_client; /* the holder, to tell its client of a takeover */
	void *owner_lk;
	struct mem_waiter *head, *tail;  /* waiters, oldest first */
	size_t nwaiters;
	size_t len;
	char bytes[];                    /* the name (not NUL-terminated) */
};

struct mem_ns {
	struct mem_ns *next;
	pthread_mutex_t mu;  /* guards everything below and every name */
	uint64_t last_owner; /* acquisition ids are never reused */
	struct mem_name **buckets;
	size_t nbuckets, nnames;
	char id[];           /* the namespace, NUL-terminated */
};

/* The driver's process-wide object, created once by the registry. */
struct mem_table {
	pthread_mutex_t mu; /* guards `list` */
	struct mem_ns *list;
};

struct mem_client {
	struct mem_ns *ns;
	dlock_host *host;
};

struct mem_lock {
	struct mem_name *name;
	uint64_t owner;           /* our acquisition id while held, else 0 */
	struct mem_waiter waiter; /* our place in the name's FIFO while `queued` (the armed wake-up) */
	int queued;
};

/* ------------------------------------------------------------ namespaces */

static void *mem_table_create(void)
{
	struct mem_table *t = calloc(1, sizeof *t);
	if (t)
		pthread_mutex_init(&t->mu, NULL);
	return t;
}

static struct mem_ns *ns_new(const char *id)
{
	size_t len = strlen(id);
	struct mem_ns *ns = calloc(1, sizeof *ns + len + 1);
	if (!ns)
		return NULL;
	ns->buckets = calloc(MEM_BUCKETS_MIN, sizeof *ns->buckets);
	if (!ns->buckets) {
		free(ns);
		return NULL;
	}
	ns->nbuckets = MEM_BUCKETS_MIN;
	pthread_mutex_init(&ns->mu, NULL);
	memcpy(ns->id, id, len + 1);
	return ns;
}

/* The namespace `id`, created on first use; NULL when out of memory. */
static struct mem_ns *ns_get(struct mem_table *t, const char *id)
{
	struct mem_ns *ns;
	pthread_mutex_lock(&t->mu);
	for (ns = t->list; ns; ns = ns->next)
		if (strcmp(ns->id, id) == 0)
			break;
	if (!ns) {
		ns = ns_new(id);
		if (ns) {
			ns->next = t->list;
			t->list = ns;
		}
	}
	pthread_mutex_unlock(&t->mu);
	return ns;
}

/* ----------------------------------------------------------------- names */

/* FNV-1a: names are arbitrary bytes, and this is only for bucketing. */
static uint64_t name_hash(const char *bytes, size_t len)
{
	uint64_t h = 14695981039346656037u;
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)bytes[i];
		h *= 1099511628211u;
	}
	return h;
}

/* Double the bucket array when it is full; on failure keep the old one (slower, still right). */
static void ns_grow(struct mem_ns *ns)
{
	size_t nb = ns->nbuckets * 2;
	struct mem_name **b = calloc(nb, sizeof *b);
	if (!b)
		return;
	for (size_t i = 0; i < ns->nbuckets; i++) {
		struct mem_name *n = ns->buckets[i], *next;
		for (; n; n = next) {
			next = n->next_in_bucket;
			n->next_in_bucket = b[n->hash % nb];
			b[n->hash % nb] = n;
		}
	}
	free(ns->buckets);
	ns->buckets = b;
	ns->nbuckets = nb;
}

/* The record of `bytes`, created on first use; NULL when out of memory.  ns->mu held. */
static struct mem_name *name_get(struct mem_ns *ns, const char *bytes, size_t len)
{
	uint64_t h = name_hash(bytes, len);
	struct mem_name *n;
	for (n = ns->buckets[h % ns->nbuckets]; n; n = n->next_in_bucket)
		if (n->hash == h && n->len == len && memcmp(n->bytes, bytes, len) == 0)
			return n;
	n = calloc(1, sizeof *n + len);
	if (!n)
		return NULL;
	n->hash = h;
	n->len = len;
	memcpy(n->bytes, bytes, len);
	n->next_in_bucket = ns->buckets[h % ns->nbuckets];
	ns->buckets[h % ns->nbuckets] = n;
	if (++ns->nnames > ns->nbuckets)
		ns_grow(ns);
	return n;
}

/* A lock whose lease has run out is free for others, even before anyone removes it. */
static int name_free(const struct mem_name *n, int64_t now)
{
	return n->owner == 0 || now >= n->expiry_ns;
}

static void wake_oldest(struct mem_name *n)
{
	if (n->head)
		dlock_wait_wake(n->head->w);
}

static void clear_owner(struct mem_name *n)
{
	n->owner = 0;
	n->owner_client = NULL;
	n->owner_lk = NULL;
	wake_oldest(n);
}

static void waiter_push(struct mem_name *n, struct mem_waiter *me)
{
	me->prev = n->tail;
	me->next = NULL;
	if (n->tail)
		n->tail->next = me;
	else
		n->head = me;
	n->tail = me;
	n->nwaiters++;
}

/* Unlink `me`; if it was the oldest, the next one now is and must look again. */
static void waiter_remove(struct mem_name *n, struct mem_waiter *me)
{
	int was_oldest = n->head == me;
	if (me->prev)
		me->prev->next = me->next;
	else
		n->head = me->next;
	if (me->next)
		me->next->prev = me->prev;
	else
		n->tail = me->prev;
	n->nwaiters--;
	if (was_oldest)
		wake_oldest(n);
}

static int64_t lease_end(int64_t now, int64_t lease_ms)
{
	if (lease_ms > (INT64_MAX - now) / 1000000)
		return INT64_MAX;
	return now + lease_ms * 1000000;
}

/* ------------------------------------------------------------ the driver */

static dlock_status mem_check_uri(const dlock_uri *uri, dlock_error *err)
{
	if (uri->nhosts != 1)
		return dlock_error_set(err, DLOCK_EURI, "mem:// takes one namespace, not a list of hosts: %s",
		                       uri->masked);
	if (uri->hosts[0].port != 0)
		return dlock_error_set(err, DLOCK_EURI, "mem:// takes no port: %s", uri->masked);
	if (uri->path[0] != '\0')
		return dlock_error_set(err, DLOCK_EURI, "mem:// takes no path (use mem://NAMESPACE): %s",
		                       uri->masked);
	if (uri->user || uri->password)
		return dlock_error_set(err, DLOCK_EURI, "mem:// takes no user or password: %s", uri->masked);
	if (uri->nparams != 0)
		return dlock_error_set(err, DLOCK_EURI, "mem:// has no parameter '%s': %s", uri->params[0].key,
		                       uri->masked);
	if (uri->prefix_given)
		return dlock_error_set(err, DLOCK_EURI,
		                       "mem:// takes no 'prefix' (use another namespace, mem://NAMESPACE, to "
		                       "separate applications): %s",
		                       uri->masked);
	return DLOCK_OK;
}

static dlock_status mem_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	dlock_status st = mem_check_uri(uri, err);
	if (st != DLOCK_OK)
		return st;
	struct mem_table *t = dlock_host_shared(host, mem_table_create);
	struct mem_ns *ns = t ? ns_get(t, uri->hosts[0].host) : NULL;
	struct mem_client *c = ns ? calloc(1, sizeof *c) : NULL;
	if (!c)
		return dlock_error_set(err, DLOCK_ENOMEM, "mem://: out of memory");
	c->ns = ns;
	c->host = host;
	*backend = c;
	return DLOCK_OK;
}

/* Locks still held by this client are released: here the driver is the server. */
static void mem_close(void *backend)
{
	struct mem_client *c = backend;
	struct mem_ns *ns = c->ns;
	pthread_mutex_lock(&ns->mu);
	for (size_t i = 0; i < ns->nbuckets; i++)
		for (struct mem_name *n = ns->buckets[i]; n; n = n->next_in_bucket)
			if (n->owner != 0 && n->owner_client == c)
				clear_owner(n);
	pthread_mutex_unlock(&ns->mu);
	free(c);
}

static void mem_capabilities(void *backend, dlock_capabilities *caps)
{
	(void)backend;
	*caps = (dlock_capabilities){
		.backend = "mem",
		.consistency = DLOCK_CONSISTENCY_LOCAL,
		.fencing = DLOCK_FENCING_STRICT,
		.fencing_note = "",
		.fair = 1,
		.lease = DLOCK_LEASE_TTL,
		.wakeup = DLOCK_WAKEUP_NOTIFY,
		.scope = DLOCK_SCOPE_PROCESS,
	};
}

static dlock_status mem_lock_init(void *backend, void *lkp, const char *name, size_t len,
                                  dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	pthread_mutex_lock(&c->ns->mu);
	lk->name = name_get(c->ns, name, len);
	pthread_mutex_unlock(&c->ns->mu);
	if (!lk->name)
		return dlock_error_set(err, DLOCK_ENOMEM, "mem://%s: out of memory", c->ns->id);
	return DLOCK_OK;
}

/*
 * Called only when the core no longer counts the lock as held.  If we are
 * still the holder (a lease the core gave up on), nobody can release it
 * after this, so release it now.
 */
static void mem_lock_fini(void *backend, void *lkp)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	pthread_mutex_lock(&c->ns->mu);
	if (lk->owner != 0 && lk->name->owner == lk->owner)
		clear_owner(lk->name);
	lk->owner = 0;
	pthread_mutex_unlock(&c->ns->mu);
}

/* Make `lk` the holder.  The previous holder, if any, had let its lease run out.  ns->mu held. */
static void grant(struct mem_client *c, struct mem_lock *lk, int64_t now, int64_t lease_ms,
                  dlock_acquired *out)
{
	struct mem_name *n = lk->name;
	if (n->owner != 0)
		dlock_report_lost(n->owner_client->host, n->owner_lk, DLOCK_LOST_EXPIRED,
		                  "the lease ran out and another client took the lock");
	n->owner = ++c->ns->last_owner;
	n->expiry_ns = lease_end(now, lease_ms);
	n->fence++;
	n->owner_client = c;
	n->owner_lk = lk;
	lk->owner = n->owner;
	*out = (dlock_acquired){ .token = n->fence, .sent_ns = now };
}

/*
 * One attempt.  Busy, the acquisition keeps (or takes) its place in the
 * name's FIFO: that place is its armed wake-up, and only the oldest waiter
 * may take the name.  The oldest also sleeps no longer than the holder's
 * lease; the others sleep until woken.
 */
static dlock_status mem_try_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                    dlock_acquired *out, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	struct mem_name *n = lk->name;

	if (lease_ms <= 0)
		return dlock_error_set(err, DLOCK_EINVAL, "mem://: the lease must be positive, not %" PRId64 " ms",
		                       lease_ms);
	pthread_mutex_lock(&c->ns->mu);
	int64_t now = dlock_monotonic_ns();
	if (name_free(n, now) && (n->head == NULL || n->head == &lk->waiter)) {
		if (lk->queued)
			waiter_remove(n, &lk->waiter);
		lk->queued = 0;
		grant(c, lk, now, lease_ms, out);
		pthread_mutex_unlock(&c->ns->mu);
		return DLOCK_OK;
	}
	size_t ahead = lk->queued ? 0 : n->nwaiters;
	if (!dlock_wait_try_once(w)) {
		if (!lk->queued) {
			lk->waiter.w = w;
			waiter_push(n, &lk->waiter);
			lk->queued = 1;
		}
		retry->armed = 1;
		/* Not free and we are the oldest: the holder's lease is still running. */
		if (n->head == &lk->waiter && !name_free(n, now))
			retry->after_ms = (n->expiry_ns - now + 999999) / 1000000;
	}
	pthread_mutex_unlock(&c->ns->mu);
	return dlock_error_set(err, DLOCK_EBUSY,
	                       "mem://%s: the lock is held by another client or promised to an earlier waiter "
	                       "(queued behind %zu)",
	                       c->ns->id, ahead);
}

/* Leave the FIFO (the acquisition ended, acquired or not). */
static void mem_disarm(void *backend, void *lkp, dlock_wait *w)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	(void)w;
	pthread_mutex_lock(&c->ns->mu);
	if (lk->queued)
		waiter_remove(lk->name, &lk->waiter);
	lk->queued = 0;
	pthread_mutex_unlock(&c->ns->mu);
}

/*
 * Ours and still leased: DLOCK_OK.  Not ours: DLOCK_ENOTHELD.  Ours but
 * expired: DLOCK_ENOTHELD too, and the stale hold is removed.  ns->mu held.
 */
static dlock_status holder_check(struct mem_client *c, struct mem_lock *lk, dlock_error *err)
{
	struct mem_name *n = lk->name;
	if (lk->owner == 0 || n->owner != lk->owner)
		return dlock_error_set(err, DLOCK_ENOTHELD, "mem://%s: the lock is no longer ours", c->ns->id);
	if (dlock_monotonic_ns() >= n->expiry_ns) {
		clear_owner(n);
		return dlock_error_set(err, DLOCK_ENOTHELD, "mem://%s: the lease ran out", c->ns->id);
	}
	return DLOCK_OK;
}

static dlock_status mem_release(void *backend, void *lkp, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	pthread_mutex_lock(&c->ns->mu);
	dlock_status st = holder_check(c, lk, err);
	if (st == DLOCK_OK)
		clear_owner(lk->name);
	lk->owner = 0;
	pthread_mutex_unlock(&c->ns->mu);
	return st;
}

static dlock_status mem_extend(void *backend, void *lkp, int64_t lease_ms, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	if (lease_ms <= 0)
		return dlock_error_set(err, DLOCK_EINVAL, "mem://: the lease must be positive, not %" PRId64 " ms",
		                       lease_ms);
	pthread_mutex_lock(&c->ns->mu);
	dlock_status st = holder_check(c, lk, err);
	/* No wake needed: the oldest waiter wakes at the old expiry, sees the new one and sleeps again. */
	if (st == DLOCK_OK)
		lk->name->expiry_ns = lease_end(dlock_monotonic_ns(), lease_ms);
	pthread_mutex_unlock(&c->ns->mu);
	return st;
}

static dlock_status mem_check(void *backend, void *lkp, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	struct mem_name *n = lk->name;
	dlock_status st = DLOCK_OK;
	pthread_mutex_lock(&c->ns->mu);
	if (lk->owner == 0 || n->owner != lk->owner || dlock_monotonic_ns() >= n->expiry_ns)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "mem://%s: the lock is no longer ours", c->ns->id);
	pthread_mutex_unlock(&c->ns->mu);
	return st;
}

const dlock_driver dlock_mem_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "mem",
	.lock_size = sizeof(struct mem_lock),
	.open = mem_open,
	.close = mem_close,
	.capabilities = mem_capabilities,
	.knows_param = NULL,
	.lock_init = mem_lock_init,
	.lock_fini = mem_lock_fini,
	.try_acquire = mem_try_acquire,
	.disarm = mem_disarm,
	.release = mem_release,
	.extend = mem_extend,
	.check = mem_check,
};
