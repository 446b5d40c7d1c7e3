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
 * going back, even after every client that used the name has closed, and
 * so dlock_gc() collects nothing here (DLOCK_ENOTSUP, saying why).
 *
 * Per name: the exclusive holder (an acquisition id that is never reused)
 * and the end of its lease on the monotonic clock, the shared holders
 * (readers of a read-write lock, each with its own id and lease), the
 * fencing counter, the kind of lock the name is in use as, and a FIFO of
 * waiting acquisitions.  A writer (or a mutex) may take the name only when
 * it is the oldest waiter and nobody holds it; a reader when no writer
 * holds it and no writer waits before it.  So waiters of different clients
 * acquire in arrival order, a newcomer never overtakes them, and a waiting
 * writer holds back new readers (writer-first: writers never starve).
 * A waiter's place in the FIFO is the wake-up its try_acquire() arms, and
 * the core's loop sleeps for it: a waiter that only leases stand in the
 * way of sleeps until it is woken or the first of those leases runs out,
 * the others until they are woken.  Whoever changes the holders or the
 * FIFO wakes the waiters that may now go: the oldest, and the readers
 * after it up to the first writer.
 *
 * Semaphores: the permits are kept like readers (each with its own id,
 * lease and slot, the lowest free one); a permit may be taken by the
 * oldest waiter while fewer than N live permits are held, so permits go in
 * arrival order (FIFO).  Each permit takes the next token.
 *
 * Kinds: a name in use (held, or waited for) as one kind, or as a
 * semaphore of another N, refuses the other with DLOCK_EKIND, so code that
 * mixes them fails here, as it would break on a server backend.  Fencing:
 * a writer takes the next token; a reader gets the current one (the latest
 * writer's) without taking one.
 *
 * Inspection sees everything but a session: each holder's owner record
 * (its client's, kept at open), the wall-clock time and token of its
 * acquisition, its lease left, and the waiters in the FIFO; a listing walks
 * the namespace's names.  Inspection is read-only and creates no record
 * for a name never used.  Breaking removes every holder (DLOCK_BREAK_DELETE)
 * and tells each at once through dlock_report_lost(DLOCK_LOST_TAKEN): the
 * holder need not wait for a renewal to learn of it.  The fencing counter
 * stays.  Every fact of the backend is stated in mem_feature().
 *
 * Elections: a holder's value (proclaim()) is kept on its name until the
 * name changes hands; observers' watches hang off the name and are called
 * when the holder or its value changes (an expiry is only seen when
 * someone looks: observers read once per lease anyway).
 *
 * Locking: one mutex per namespace guards all of it.  Under it the driver
 * calls only dlock_wait_wake() and dlock_report_lost(), which take nothing
 * but short-lived core locks and never call back into a driver.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlock/sys/driver.h"

#define MEM_BUCKETS_MIN 64

/* One acquisition waiting for a name; lives in its lock state (mem_lock) until disarmed. */
struct mem_waiter {
	struct mem_waiter *prev, *next;
	dlock_wait *w;
	int shared; /* a reader: may go beside other readers */
};

struct mem_lock;

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
	struct mem_lock *readers;        /* shared holders and permits (list by rnext); expired ones until removed */
	dlock_lock_kind kind;            /* of the holders and waiters, while there are any */
	uint32_t permits;                /* N of a semaphore's holders and waiters, while there are any */
	char *value;                     /* the holder's proclaimed value (elections); NULL none */
	struct mem_watch *watches;       /* observers of the name (list by next) */
	size_t len;
	char bytes[];                    /* the name (not NUL-terminated) */
};

/* An observer's notification (watch()): called under ns->mu when the holder or its value changes. */
struct mem_watch {
	struct mem_watch *next;
	struct mem_name *name;
	void (*changed)(void *arg);
	void *arg;
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
	const char *owner; /* the client's owner record (dlock_host_owner), shown by inspection */
	size_t owner_len;
};

struct mem_lock {
	struct mem_name *name;
	struct mem_client *client;
	dlock_lock_kind kind;
	uint32_t permits;         /* N of a semaphore; 1 otherwise */
	uint64_t owner;           /* our acquisition id while held, else 0 */
	int shared;               /* held as a reader or a permit: in name->readers while `reading` */
	uint32_t slot;            /* a permit's slot */
	int reading;
	struct mem_lock *rprev, *rnext;
	int64_t r_expiry_ns;      /* end of our lease as a reader (monotonic) */
	int64_t acquired_ms;      /* wall clock of our acquisition, for inspection */
	uint64_t token;           /* its fencing token (a reader's: the latest writer's) */
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

/* Wake the waiters that may go now: the oldest, and the readers after it up to the first writer. */
static void wake_oldest(struct mem_name *n)
{
	for (struct mem_waiter *m = n->head; m; m = m->next) {
		dlock_wait_wake(m->w);
		if (!m->shared || (m->next && !m->next->shared))
			break;
	}
}

static void reader_unlink(struct mem_name *n, struct mem_lock *r)
{
	if (!r->reading)
		return;
	if (r->rprev)
		r->rprev->rnext = r->rnext;
	else
		n->readers = r->rnext;
	if (r->rnext)
		r->rnext->rprev = r->rprev;
	r->rprev = r->rnext = NULL;
	r->reading = 0;
	wake_oldest(n);
}

/* 1 when a reader's lease is still running; *first gets the earliest end among them. */
static int live_readers(const struct mem_name *n, int64_t now, int64_t *first)
{
	int live = 0;
	for (const struct mem_lock *r = n->readers; r; r = r->rnext) {
		if (now < r->r_expiry_ns) {
			live = 1;
			if (r->r_expiry_ns < *first)
				*first = r->r_expiry_ns;
		}
	}
	return live;
}

/* 1 when a writer waits before `me` (for a newcomer, `me` NULL: anywhere in the FIFO). */
static int writer_ahead(const struct mem_name *n, const struct mem_waiter *me)
{
	for (const struct mem_waiter *m = n->head; m && m != me; m = m->next)
		if (!m->shared)
			return 1;
	return 0;
}

/* 1 when someone holds (a lease still running) or waits for the name. */
static int name_in_use(const struct mem_name *n, int64_t now)
{
	int64_t first = INT64_MAX;
	return (n->owner != 0 && now < n->expiry_ns) || live_readers(n, now, &first) || n->head != NULL;
}

/* Tell the name's observers that its holder or value changed.  ns->mu held. */
static void notify_watches(const struct mem_name *n)
{
	for (const struct mem_watch *w = n->watches; w; w = w->next)
		w->changed(w->arg);
}

static void clear_owner(struct mem_name *n)
{
	n->owner = 0;
	n->owner_client = NULL;
	n->owner_lk = NULL;
	free(n->value);
	n->value = NULL;
	notify_watches(n);
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
	c->owner = dlock_host_owner(host, &c->owner_len);
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

static dlock_status mem_lock_init_kind(void *backend, void *lkp, const char *name, size_t len,
                                       const dlock_kind_spec *spec, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	lk->client = c;
	lk->kind = spec->kind;
	lk->permits = spec->permits ? spec->permits : 1;
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
	reader_unlink(lk->name, lk);
	lk->owner = 0;
	pthread_mutex_unlock(&c->ns->mu);
}

/* Drop the holders whose leases ran out, telling each client of its loss.  ns->mu held. */
static void drop_expired(struct mem_name *n, int64_t now)
{
	if (n->owner != 0 && now >= n->expiry_ns) {
		dlock_report_lost(n->owner_client->host, n->owner_lk, DLOCK_LOST_EXPIRED,
		                  "the lease ran out and another client took the lock");
		n->owner = 0;
		n->owner_client = NULL;
		n->owner_lk = NULL;
		free(n->value);
		n->value = NULL;
		notify_watches(n);
	}
	for (struct mem_lock *r = n->readers, *next; r; r = next) {
		next = r->rnext;
		if (now >= r->r_expiry_ns) {
			dlock_report_lost(r->client->host, r, DLOCK_LOST_EXPIRED,
			                  r->kind == DLOCK_KIND_SEMAPHORE
			                          ? "the permit's lease ran out and another holder took it"
			                          : "the read lease ran out and a writer took the lock");
			reader_unlink(n, r);
		}
	}
}

/* The lowest slot that no live permit of `n` has.  ns->mu held, expired permits dropped. */
static uint32_t free_slot(const struct mem_name *n, uint32_t permits)
{
	for (uint32_t slot = 0; slot < permits; slot++) {
		const struct mem_lock *r = n->readers;
		while (r && r->slot != slot)
			r = r->rnext;
		if (!r)
			return slot;
	}
	return permits; /* never: the caller saw fewer than `permits` live ones */
}

/* Make `lk` a holder: the writer (taking the next token), one more reader (with the current
 * token), or one more permit (a slot and the next token).  Holders in the way had let their
 * leases run out.  ns->mu held. */
static void grant(struct mem_client *c, struct mem_lock *lk, int shared, int64_t now, int64_t lease_ms,
                  dlock_acquired *out)
{
	struct mem_name *n = lk->name;
	int permit = lk->kind == DLOCK_KIND_SEMAPHORE;
	drop_expired(n, now);
	n->kind = lk->kind;
	n->permits = lk->permits;
	lk->owner = ++c->ns->last_owner;
	lk->shared = shared || permit;
	if (permit) {
		lk->slot = free_slot(n, lk->permits);
		n->fence++;
	}
	if (shared || permit) {
		lk->r_expiry_ns = lease_end(now, lease_ms);
		lk->rprev = NULL;
		lk->rnext = n->readers;
		if (n->readers)
			n->readers->rprev = lk;
		n->readers = lk;
		lk->reading = 1;
	} else {
		n->owner = lk->owner;
		n->expiry_ns = lease_end(now, lease_ms);
		n->fence++;
		free(n->value); /* a new holder proclaims its own */
		n->value = NULL;
		n->owner_client = c;
		n->owner_lk = lk;
	}
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	lk->acquired_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
	lk->token = n->fence;
	*out = (dlock_acquired){ .token = n->fence, .sent_ns = now, .slot = permit ? lk->slot : 0 };
}

/* Live permits of `n`; *first gets the earliest end among them. */
static uint32_t live_permits(const struct mem_name *n, int64_t now, int64_t *first)
{
	uint32_t live = 0;
	for (const struct mem_lock *r = n->readers; r; r = r->rnext) {
		if (now < r->r_expiry_ns) {
			live++;
			if (r->r_expiry_ns < *first)
				*first = r->r_expiry_ns;
		}
	}
	return live;
}

/* Whether `lk` may take the name now; else *until gets the end of the first lease in its way
 * (INT64_MAX when waiters before it are in the way).  ns->mu held. */
static int may_take(const struct mem_name *n, const struct mem_lock *lk, int shared, int64_t now, int64_t *until)
{
	const struct mem_waiter *me = lk->queued ? &lk->waiter : NULL;
	int64_t first = INT64_MAX;
	*until = INT64_MAX;
	if (shared ? writer_ahead(n, me) : (n->head != NULL && n->head != me))
		return 0;
	if (lk->kind == DLOCK_KIND_SEMAPHORE) {
		if (live_permits(n, now, &first) < lk->permits)
			return 1;
		*until = first;
		return 0;
	}
	int owner_live = n->owner != 0 && now < n->expiry_ns;
	if (owner_live)
		first = n->expiry_ns;
	int readers = !shared && live_readers(n, now, &first);
	*until = first;
	return !owner_live && !readers;
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
	int shared = dlock_wait_mode(w) == DLOCK_MODE_SHARED;
	int64_t until;
	pthread_mutex_lock(&c->ns->mu);
	int64_t now = dlock_monotonic_ns();
	if (!lk->queued && (n->kind != lk->kind || n->permits != lk->permits) && name_in_use(n, now)) {
		dlock_lock_kind kind = n->kind;
		uint32_t permits = n->permits;
		pthread_mutex_unlock(&c->ns->mu);
		if (kind == DLOCK_KIND_SEMAPHORE && lk->kind == DLOCK_KIND_SEMAPHORE)
			return dlock_error_set(err, DLOCK_EKIND,
			                       "mem://%s: the name is in use as a semaphore of %" PRIu32
			                       " permits, not %" PRIu32,
			                       c->ns->id, permits, lk->permits);
		return dlock_error_set(err, DLOCK_EKIND, "mem://%s: the name is in use as %s", c->ns->id,
		                       kind == DLOCK_KIND_MUTEX    ? "a mutex"
		                       : kind == DLOCK_KIND_RWLOCK ? "a read-write lock"
		                                                   : "a semaphore");
	}
	if (may_take(n, lk, shared, now, &until)) {
		if (lk->queued)
			waiter_remove(n, &lk->waiter);
		lk->queued = 0;
		grant(c, lk, shared, now, lease_ms, out);
		pthread_mutex_unlock(&c->ns->mu);
		return DLOCK_OK;
	}
	size_t ahead = lk->queued ? 0 : n->nwaiters;
	if (!dlock_wait_try_once(w)) {
		if (!lk->queued) {
			lk->waiter.w = w;
			lk->waiter.shared = shared;
			waiter_push(n, &lk->waiter);
			n->kind = lk->kind;
			n->permits = lk->permits;
			lk->queued = 1;
		}
		retry->armed = 1;
		/* Only leases are in the way: wake up when the first of them runs out. */
		if (until != INT64_MAX)
			retry->after_ms = (until - now + 999999) / 1000000;
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
	if (lk->shared) {
		const char *what = lk->kind == DLOCK_KIND_SEMAPHORE ? "permit" : "read lock";
		if (lk->owner == 0 || !lk->reading)
			return dlock_error_set(err, DLOCK_ENOTHELD, "mem://%s: the %s is no longer ours", c->ns->id,
			                       what);
		if (dlock_monotonic_ns() >= lk->r_expiry_ns) {
			reader_unlink(n, lk);
			return dlock_error_set(err, DLOCK_ENOTHELD, "mem://%s: the %s's lease ran out", c->ns->id,
			                       what);
		}
		return DLOCK_OK;
	}
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
	if (st == DLOCK_OK && lk->shared)
		reader_unlink(lk->name, lk);
	else if (st == DLOCK_OK)
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
	if (st == DLOCK_OK && lk->shared)
		lk->r_expiry_ns = lease_end(dlock_monotonic_ns(), lease_ms);
	else if (st == DLOCK_OK)
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
	int64_t now = dlock_monotonic_ns();
	if (lk->shared ? (lk->owner == 0 || !lk->reading || now >= lk->r_expiry_ns)
	               : (lk->owner == 0 || n->owner != lk->owner || now >= n->expiry_ns))
		st = dlock_error_set(err, DLOCK_ENOTHELD, "mem://%s: the lock is no longer ours", c->ns->id);
	pthread_mutex_unlock(&c->ns->mu);
	return st;
}

/* ------------------------------------------------------------ inspection */

/* What inspection sees here: everything but a session (there is none). */
#define MEM_INSPECT                                                                                    \
	(DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_LEASE |      \
	 DLOCK_INSPECT_TOKEN | DLOCK_INSPECT_WAITERS | DLOCK_INSPECT_LIST | DLOCK_INSPECT_NAMES)

/* The record of `bytes`, or NULL when the name was never used (inspection creates none).  ns->mu held. */
static struct mem_name *name_find(const struct mem_ns *ns, const char *bytes, size_t len)
{
	uint64_t h = name_hash(bytes, len);
	struct mem_name *n = ns->buckets[h % ns->nbuckets];
	while (n && !(n->hash == h && n->len == len && memcmp(n->bytes, bytes, len) == 0))
		n = n->next_in_bucket;
	return n;
}

/* One holder, its lease running until `expiry_ns` (after `now`). */
static dlock_status describe_holder(dlock_info *info, const struct mem_lock *lk, int64_t expiry_ns, int64_t now)
{
	dlock_holder h = DLOCK_HOLDER_INIT;
	if (!lk->shared && lk->name->owner_lk == lk && lk->name->value)
		h.value = lk->name->value;
	h.acquired_ms = lk->acquired_ms;
	h.lease_left_ms = expiry_ns == INT64_MAX ? INT64_MAX / 1000000 : (expiry_ns - now + 999999) / 1000000;
	h.token = lk->token;
	h.mode = lk->shared && lk->kind != DLOCK_KIND_SEMAPHORE ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
	h.slot = lk->kind == DLOCK_KIND_SEMAPHORE ? (int64_t)lk->slot : -1;
	return dlock_info_holder(info, &h, lk->client->owner, lk->client->owner_len);
}

/* `n` as it is now: its holders whose leases still run, and its waiters.  ns->mu held. */
static dlock_status describe(dlock_info *info, const struct mem_ns *ns, const char *bytes, size_t len,
                             const struct mem_name *n, int64_t now)
{
	char component[DLOCK_COMPONENT_MAX + 1], resource[DLOCK_COMPONENT_MAX + 320];
	dlock_name_component(bytes, len, component);
	snprintf(resource, sizeof resource, "mem://%.300s/%s", ns->id, component);
	int in_use = n && name_in_use(n, now);
	dlock_status st = dlock_info_lock(info, bytes, len, resource, in_use ? n->kind : DLOCK_KIND_MUTEX,
	                                  in_use ? n->permits : 1, n ? (int64_t)n->nwaiters : 0);
	if (st == DLOCK_OK && n && n->owner != 0 && now < n->expiry_ns)
		st = describe_holder(info, n->owner_lk, n->expiry_ns, now);
	for (const struct mem_lock *r = n ? n->readers : NULL; r && st == DLOCK_OK; r = r->rnext)
		if (now < r->r_expiry_ns)
			st = describe_holder(info, r, r->r_expiry_ns, now);
	return st;
}

static dlock_status mem_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err)
{
	struct mem_client *c = backend;
	pthread_mutex_lock(&c->ns->mu);
	const struct mem_name *n = name_find(c->ns, name, len);
	dlock_status st = describe(info, c->ns, name, len, n, dlock_monotonic_ns());
	pthread_mutex_unlock(&c->ns->mu);
	if (st != DLOCK_OK)
		return dlock_error_set(err, st, "mem://%s: out of memory describing a lock", c->ns->id);
	return DLOCK_OK;
}

/* Every name of the namespace held now. */
static dlock_status mem_list(void *backend, dlock_info *info, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_ns *ns = c->ns;
	dlock_status st = DLOCK_OK;
	pthread_mutex_lock(&ns->mu);
	int64_t now = dlock_monotonic_ns(), first = INT64_MAX;
	for (size_t i = 0; i < ns->nbuckets && st == DLOCK_OK; i++)
		for (const struct mem_name *n = ns->buckets[i]; n && st == DLOCK_OK; n = n->next_in_bucket)
			if ((n->owner != 0 && now < n->expiry_ns) || live_readers(n, now, &first))
				st = describe(info, ns, n->bytes, n->len, n, now);
	pthread_mutex_unlock(&ns->mu);
	if (st != DLOCK_OK)
		return dlock_error_set(err, st, "mem://%s: out of memory listing locks", ns->id);
	return DLOCK_OK;
}

/*
 * Take the name from every holder: each is told at once (DLOCK_LOST_TAKEN)
 * and the oldest waiters are woken.  The fencing counter stays, so the
 * next holder's token is larger.
 */
static dlock_status mem_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	static const char detail[] = "the lock was broken (dlock_break) by an administrator";
	struct mem_client *c = backend;
	(void)err;
	*broken = 0;
	pthread_mutex_lock(&c->ns->mu);
	struct mem_name *n = name_find(c->ns, name, len);
	if (n) {
		drop_expired(n, dlock_monotonic_ns());
		if (n->owner != 0) {
			dlock_report_lost(n->owner_client->host, n->owner_lk, DLOCK_LOST_TAKEN, detail);
			clear_owner(n);
			++*broken;
		}
		while (n->readers) {
			struct mem_lock *r = n->readers;
			dlock_report_lost(r->client->host, r, DLOCK_LOST_TAKEN, detail);
			reader_unlink(n, r);
			++*broken;
		}
	}
	pthread_mutex_unlock(&c->ns->mu);
	return DLOCK_OK;
}

/* ------------------------------------------------------------ elections */

/* Keep a leader's value beside its lock, and tell the observers. */
static dlock_status mem_proclaim(void *backend, void *lkp, const char *value, size_t len, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_lock *lk = lkp;
	struct mem_name *n = lk->name;
	pthread_mutex_lock(&c->ns->mu);
	dlock_status st = holder_check(c, lk, err);
	if (st == DLOCK_OK && lk->shared)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "mem://%s: a shared holder does not lead", c->ns->id);
	char *copy = st == DLOCK_OK ? strndup(value, len) : NULL;
	if (st == DLOCK_OK && !copy)
		st = dlock_error_set(err, DLOCK_ENOMEM, "mem://%s: out of memory", c->ns->id);
	if (st == DLOCK_OK) {
		free(n->value);
		n->value = copy;
		notify_watches(n);
	}
	pthread_mutex_unlock(&c->ns->mu);
	return st;
}

static dlock_status mem_watch(void *backend, const char *name, size_t len, void (*changed)(void *arg), void *arg,
                              void **out, dlock_error *err)
{
	struct mem_client *c = backend;
	struct mem_watch *w = calloc(1, sizeof *w);
	if (!w)
		return dlock_error_set(err, DLOCK_ENOMEM, "mem://%s: out of memory", c->ns->id);
	pthread_mutex_lock(&c->ns->mu);
	w->name = name_get(c->ns, name, len);
	if (w->name) {
		w->changed = changed;
		w->arg = arg;
		w->next = w->name->watches;
		w->name->watches = w;
	}
	pthread_mutex_unlock(&c->ns->mu);
	if (!w->name) {
		free(w);
		return dlock_error_set(err, DLOCK_ENOMEM, "mem://%s: out of memory", c->ns->id);
	}
	*out = w;
	return DLOCK_OK;
}

static void mem_unwatch(void *backend, void *watch)
{
	struct mem_client *c = backend;
	struct mem_watch *w = watch;
	pthread_mutex_lock(&c->ns->mu);
	struct mem_watch **pp = &w->name->watches;
	while (*pp && *pp != w)
		pp = &(*pp)->next;
	if (*pp)
		*pp = w->next;
	pthread_mutex_unlock(&c->ns->mu);
	free(w);
}

/* Every kind, natively, told apart (DLOCK_EKIND); FIFO waiters with wake-ups; each acquisition a token. */
static dlock_status mem_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	(void)backend, (void)kind;
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "mem"; break;
	case DLOCK_FACT_INLINE: out->value = 1; break; /* in-process state: nothing waits on a network */
	case DLOCK_FEATURE_CONSISTENCY: out->value = DLOCK_CONSISTENCY_LOCAL; break;
	case DLOCK_FEATURE_FENCING:
	case DLOCK_FEATURE_READ_FENCING:
	case DLOCK_FEATURE_PERMIT_FENCING: out->value = DLOCK_FENCING_STRICT; break;
	case DLOCK_FEATURE_FAIR: out->value = 1; break;
	case DLOCK_FEATURE_LEASE: out->value = DLOCK_LEASE_TTL; break;
	case DLOCK_FEATURE_WAKEUP: out->value = DLOCK_WAKEUP_NOTIFY; break;
	case DLOCK_FEATURE_SCOPE: out->value = DLOCK_SCOPE_PROCESS; break;
	case DLOCK_FEATURE_RWLOCK: out->value = DLOCK_RWLOCK_WRITER_FIRST; break;
	case DLOCK_FEATURE_SEMAPHORE: out->value = DLOCK_SEMAPHORE_FIFO; break;
	case DLOCK_FACT_SLOTS:
	case DLOCK_FEATURE_KIND_CHECK: out->value = 1; break;
	case DLOCK_FEATURE_INSPECT: out->value = MEM_INSPECT; break;
	case DLOCK_FEATURE_BREAK: out->value = DLOCK_BREAK_DELETE; break;
	case DLOCK_FEATURE_GC: out->value = 0; break;
	default: return DLOCK_ENOTSUP;
	}
	return DLOCK_OK;
}

/* Collection: never here.  A method of its own only to say why, after the core's checks. */
static dlock_status mem_gc(void *backend, const char *prefix, size_t len, unsigned flags,
                           dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err)
{
	(void)backend, (void)prefix, (void)len, (void)flags, (void)removed, (void)arg;
	*count = 0;
	return dlock_error_set(err, DLOCK_ENOTSUP,
	                       "mem:// collects nothing: a name's record (a few dozen bytes in this process) keeps "
	                       "its fencing counter, and goes when the process exits");
}

const dlock_driver dlock_mem_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "mem",
	.lock_size = sizeof(struct mem_lock),
	.open = mem_open,
	.close = mem_close,
	.knows_param = NULL,
	.lock_init_kind = mem_lock_init_kind,
	.lock_fini = mem_lock_fini,
	.try_acquire = mem_try_acquire,
	.disarm = mem_disarm,
	.release = mem_release,
	.extend = mem_extend,
	.check = mem_check,
	.inspect = mem_inspect,
	.list = mem_list,
	.proclaim = mem_proclaim,
	.watch = mem_watch,
	.unwatch = mem_unwatch,
	.break_lock = mem_break,
	.gc = mem_gc,
	.feature = mem_feature,
};
