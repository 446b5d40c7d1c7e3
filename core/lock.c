/*
 * Lock handles: what every backend shares.  Reentrancy (hold counts),
 * local coalescing (threads of one client queue per name in FIFO order and
 * only the head asks the server), deadlines, cancellation and owner-only
 * release happen here; what the core keeps of a hold (lease, loss, the
 * name's holders) is held.c's, the hold bounds are hold.c's and linger.c's,
 * the waiting loop retry.c's; the driver does the server's part.
 *
 * Kinds and modes: a handle has a kind for its life (mutex, read-write
 * lock, semaphore of N permits); an acquisition has a mode (exclusive,
 * shared).  A name of one client has a list of holding handles: one
 * exclusive holder, any number of shared ones, or up to N permits.  The
 * head of the local queue asks the server when nobody of the client
 * contends and its acquisition is compatible with the holders', so a
 * local writer waiting holds back the local readers queued after it.
 * Within one client a name in use as another kind (or as a semaphore of
 * another N) is refused here (DLOCK_EKIND); across clients the driver
 * tells.
 *
 * Threads: every call may come from any thread.  c->mu guards the handles
 * and the name entries; it is dropped around every driver call, which
 * counts meanwhile as running on its handle (busy, or contending in an
 * acquisition) or on the client (inflight, while a handle is made).
 * Errors: statuses, with the text through dlock_client_errmsg(), naming
 * the lock printably.
 */
#include "internal.h"
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS 1000000LL

/* ------------------------------------------------------------ names */

static uint64_t name_hash(const char *name, size_t len)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a: a table index, not a digest */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
	return h;
}

static dlock_status lock_fail(struct dlock_lock *l, dlock_status st, const char *what)
{
	char name[96], msg[DLOCK_ERROR_MAX];
	dlock_entry_printable(l->entry, name, sizeof name);
	snprintf(msg, sizeof msg, "lock '%s': %s", name, what);
	return dlock_client_fail_locked(l->client, st, msg);
}

/* ------------------------------------------------------------ entries */

static int grow_buckets_locked(struct dlock_client *c)
{
	size_t n = c->nbuckets * 2;
	struct dlock_entry **b = calloc(n, sizeof *b);
	if (!b)
		return -1;
	for (size_t i = 0; i < c->nbuckets; i++) {
		for (struct dlock_entry *e = c->buckets[i], *next; e; e = next) {
			next = e->next_in_bucket;
			e->next_in_bucket = b[e->hash % n];
			b[e->hash % n] = e;
		}
	}
	free(c->buckets);
	c->buckets = b;
	c->nbuckets = n;
	return 0;
}

static struct dlock_entry *entry_get_locked(struct dlock_client *c, const char *name, size_t len)
{
	uint64_t h = name_hash(name, len);
	for (struct dlock_entry *e = c->buckets[h % c->nbuckets]; e; e = e->next_in_bucket) {
		if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0) {
			e->refs++;
			return e;
		}
	}
	if (c->nentries >= c->nbuckets * 2)
		grow_buckets_locked(c); /* on failure the chains just get longer */
	struct dlock_entry *e = calloc(1, sizeof *e);
	if (!e || !(e->name = malloc(len + 1))) {
		free(e);
		return NULL;
	}
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	e->len = len;
	e->hash = h;
	e->refs = 1;
	dlock_cond_init_monotonic(&e->cond);
	e->next_in_bucket = c->buckets[h % c->nbuckets];
	c->buckets[h % c->nbuckets] = e;
	c->nentries++;
	return e;
}

static void entry_put_locked(struct dlock_client *c, struct dlock_entry *e)
{
	if (--e->refs > 0)
		return;
	struct dlock_entry **pp = &c->buckets[e->hash % c->nbuckets];
	while (*pp != e)
		pp = &(*pp)->next_in_bucket;
	*pp = e->next_in_bucket;
	c->nentries--;
	pthread_cond_destroy(&e->cond);
	free(e->name);
	free(e);
}

/* ------------------------------------------------------------ handles */

/* Prepare the driver's state of a new handle: lock_init_kind() when the driver knows kinds, else lock_init(). */
static dlock_status driver_lock_init(struct dlock_client *c, struct dlock_lock *l, const char *name, size_t len,
                                     dlock_error *err)
{
	dlock_driver_lock_init_kind_fn *init_kind = dlock_driver_lock_init_kind_of(c->driver);
	if (!init_kind)
		return c->driver->lock_init(c->backend, l->lk, name, len, err);
	dlock_kind_spec spec = { .kind = l->kind, .permits = l->permits };
	return init_kind(c->backend, l->lk, name, len, &spec, err);
}

static const char *kind_noun(dlock_lock_kind kind)
{
	switch (kind) {
	case DLOCK_KIND_MUTEX: return "locks";
	case DLOCK_KIND_RWLOCK: return "read-write locks";
	case DLOCK_KIND_SEMAPHORE: return "semaphores";
	}
	return "locks of this kind";
}

static dlock_status lock_new_kind(dlock_client *c, const char *name, dlock_lock_kind kind, uint32_t permits,
                                  const char *fn, dlock_lock **out)
{
	dlock_error err = { "" };
	char msg[160];
	if (out)
		*out = NULL;
	if (!c)
		return DLOCK_EINVAL;
	if (!name || !out) {
		snprintf(msg, sizeof msg, "%s: name and out must not be NULL", fn);
		return dlock_client_fail(c, DLOCK_EINVAL, msg);
	}
	dlock_status unopened = dlock_seam_refuse_unopened(c, fn);
	if (unopened != DLOCK_OK)
		return unopened;
	if (!c->kinds[kind].supported) {
		snprintf(msg, sizeof msg, "%s: %s:// has no %s", fn, c->driver->scheme, kind_noun(kind));
		return dlock_client_fail(c, DLOCK_ENOTSUP, msg);
	}
	size_t len = strnlen(name, DLOCK_NAME_MAX + 1);
	if (len == 0 || len > DLOCK_NAME_MAX)
		return dlock_client_fail(c, DLOCK_EINVAL, len ? "lock name is longer than 1024 bytes"
		                                              : "lock name is empty");

	struct dlock_lock *l = calloc(1, DLOCK_LK_OFFSET + c->driver->lock_size);
	if (!l)
		return dlock_client_fail(c, DLOCK_ENOMEM, "out of memory");
	l->client = c;
	l->kind = kind;
	l->permits = permits;
	l->lk = (char *)l + DLOCK_LK_OFFSET;

	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		free(l);
		dlock_client_fail_locked(c, DLOCK_ECLOSED, "client is closed");
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ECLOSED;
	}
	l->entry = dlock_sched_reserve(c, c->nlocks + 1) == DLOCK_OK ? entry_get_locked(c, name, len) : NULL;
	if (!l->entry) {
		free(l);
		dlock_client_fail_locked(c, DLOCK_ENOMEM, "out of memory");
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ENOMEM;
	}
	l->next = c->locks;
	if (c->locks)
		c->locks->prev = l;
	c->locks = l;
	c->nlocks++;
	c->inflight++; /* close waits until lock_init has returned */
	pthread_mutex_unlock(&c->mu);

	dlock_status st = driver_lock_init(c, l, name, len, &err);

	pthread_mutex_lock(&c->mu);
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	l->driver_ready = st == DLOCK_OK;
	if (st != DLOCK_OK)
		dlock_client_fail_locked(c, st, err.msg);
	pthread_mutex_unlock(&c->mu);
	if (st != DLOCK_OK) {
		dlock_lock_free(l);
		return st;
	}
	*out = l;
	return DLOCK_OK;
}

dlock_status dlock_lock_new(dlock_client *c, const char *name, dlock_lock **out)
{
	return lock_new_kind(c, name, DLOCK_KIND_MUTEX, 1, "dlock_lock_new", out);
}

dlock_status dlock_rwlock_new(dlock_client *c, const char *name, dlock_lock **out)
{
	return lock_new_kind(c, name, DLOCK_KIND_RWLOCK, 1, "dlock_rwlock_new", out);
}

dlock_status dlock_semaphore_new(dlock_client *c, const char *name, uint32_t permits, dlock_lock **out)
{
	if (c && (permits == 0 || permits > DLOCK_PERMITS_MAX)) {
		if (out)
			*out = NULL;
		char msg[96];
		snprintf(msg, sizeof msg, "dlock_semaphore_new: permits must be 1 to %d, not %lu", DLOCK_PERMITS_MAX,
		         (unsigned long)permits);
		return dlock_client_fail(c, DLOCK_EINVAL, msg);
	}
	return lock_new_kind(c, name, DLOCK_KIND_SEMAPHORE, permits, "dlock_semaphore_new", out);
}

dlock_lock_kind dlock_lock_get_kind(const dlock_lock *l)
{
	return l ? l->kind : DLOCK_KIND_MUTEX;
}

uint32_t dlock_lock_permits(const dlock_lock *l)
{
	return l ? l->permits : 0;
}

uint32_t dlock_lock_get_permits(const dlock_lock *l)
{
	return dlock_lock_permits(l);
}

void dlock_lock_begin_call(struct dlock_lock *l)
{
	while (l->busy || l->loop_call)
		pthread_cond_wait(&l->client->cond, &l->client->mu);
	l->busy = 1;
	dlock_sched_update(l); /* renewals skip busy handles */
}

/* A loop call (nowait): nothing to wait for was checked by the caller. */
static void begin_loop_call(struct dlock_lock *l)
{
	l->loop_call = 1;
	dlock_sched_update(l); /* no renewal or cleanup of the background beside it */
}

void dlock_lock_end_call(struct dlock_lock *l)
{
	if (l->loop_call) { /* a loop call ends (a blocking call waited for it, so it is not one) */
		l->loop_call = 0;
		dlock_seam_call_ended_locked(l);
	} else {
		l->busy = 0;
	}
	pthread_cond_broadcast(&l->client->cond);
	dlock_sched_update(l);
}

void dlock_lock_free(dlock_lock *l)
{
	if (!l || (l->client->seam && l->client->seam->lock_free(l, NULL)))
		return;
	struct dlock_client *c = l->client;
	while (dlock_release(l) == DLOCK_OK) /* undo every reentrant level */
		;
	pthread_mutex_lock(&c->mu);
	/* The background thread still touches the handle when its lost
	 * callback returns; the callback itself must not free its lock. */
	while (l->callback_running)
		pthread_cond_wait(&c->cond, &c->mu);
	dlock_lock_begin_call(l);
	if (l->held && l->lingering) /* its bound has not passed: a lease ends there by itself */
		dlock_linger_end_locked(l, 1);
	if (l->driver_ready && !c->closing && c->driver->lock_fini) {
		pthread_mutex_unlock(&c->mu);
		c->driver->lock_fini(c->backend, l->lk);
		pthread_mutex_lock(&c->mu);
	}
	l->driver_ready = 0;
	if (l->prev)
		l->prev->next = l->next;
	else
		c->locks = l->next;
	if (l->next)
		l->next->prev = l->prev;
	c->nlocks--;
	entry_put_locked(c, l->entry);
	l->busy = 0;
	dlock_sched_forget(l);
	pthread_cond_broadcast(&c->cond);
	free(l->lost_detail);
	free(l);
	dlock_client_maybe_free_locked(c);
}

const char *dlock_lock_name(const dlock_lock *l)
{
	return l ? l->entry->name : "";
}

/* ------------------------------------------------------------ acquire */

/* A hold bound of the options (0: the URI's, DLOCK_HOLD_NONE: none) in ms, 0 for none. */
static int64_t hold_ms(int64_t opt, int64_t uri_ms)
{
	return opt == 0 ? uri_ms : opt == DLOCK_HOLD_NONE ? 0 : opt;
}

/* The acquisition's parameters from `opts` (of any version: dlock_options_read()) and the URI; on
 * failure *why says what is wrong. */
dlock_status dlock_acquire_params_resolve(const struct dlock_lock *l, const dlock_acquire_options *opts,
                                   struct dlock_acquire_params *p, const char **why)
{
	const dlock_uri *u = l->client->uri;
	dlock_acquire_options o;
	dlock_status st = dlock_options_read(opts, &o, why);
	if (st != DLOCK_OK)
		return st;
	p->mode = o.mode;
	if (p->mode != DLOCK_MODE_EXCLUSIVE && p->mode != DLOCK_MODE_SHARED) {
		*why = "dlock_acquire: mode out of range";
		return DLOCK_EINVAL;
	}
	if (p->mode == DLOCK_MODE_SHARED && l->kind != DLOCK_KIND_RWLOCK) {
		*why = l->kind == DLOCK_KIND_SEMAPHORE
		               ? "dlock_acquire: a semaphore's acquisition takes one permit: its mode is exclusive"
		               : "dlock_acquire: shared mode needs a read-write lock (dlock_rwlock_new), not a mutex";
		return DLOCK_EINVAL;
	}
	*why = "dlock_acquire: bad options (wait_ms or lease_ms out of range)";
	p->wait_ms = o.wait_ms == DLOCK_WAIT_DEFAULT ? u->wait_ms : o.wait_ms;
	p->lease_ms = o.lease_ms == 0 ? u->ttl_ms : o.lease_ms;
	p->renew = o.renewal == DLOCK_DEFAULT ? u->renew : o.renewal == DLOCK_ON;
	p->fencing = o.fence == DLOCK_DEFAULT ? u->fencing : o.fence == DLOCK_ON;
	/* A backend whose readers get no token (DLOCK_FEATURE_READ_FENCING NONE) is never asked for one:
	 * the driver spares the work, and dlock_lock_fencing_token() says why there is none.  The kinds
	 * never change once the client is handed out. */
	if (p->mode == DLOCK_MODE_SHARED && l->client->kinds[DLOCK_KIND_RWLOCK].read_fencing == DLOCK_FENCING_NONE)
		p->fencing = 0;
	if (l->kind == DLOCK_KIND_SEMAPHORE && l->client->kinds[DLOCK_KIND_SEMAPHORE].read_fencing == DLOCK_FENCING_NONE)
		p->fencing = 0;
	p->on_lost = o.on_lost;
	p->lost_userdata = o.lost_userdata;
	p->min_hold_ms = hold_ms(o.min_hold, u->min_hold_ms);
	p->max_hold_ms = hold_ms(o.max_hold, u->max_hold_ms);
	if (p->wait_ms < DLOCK_WAIT_FOREVER || p->lease_ms < 0 || p->lease_ms > INT64_MAX / NS_PER_MS / 2)
		return DLOCK_EINVAL;
	if (p->min_hold_ms > INT64_MAX / NS_PER_MS / 2 || p->max_hold_ms > INT64_MAX / NS_PER_MS / 2) {
		*why = "dlock_acquire: min_hold or max_hold is too long";
		return DLOCK_EINVAL;
	}
	if (p->max_hold_ms > 0 && p->max_hold_ms < p->min_hold_ms) {
		*why = "dlock_acquire: max_hold is less than min_hold";
		return DLOCK_EINVAL;
	}
	/* A lease never outlives the maximum hold: the server lets it go at the bound by itself. */
	if (p->max_hold_ms > 0 && p->lease_ms > p->max_hold_ms)
		p->lease_ms = p->max_hold_ms;
	if (p->wait_ms > INT64_MAX / NS_PER_MS / 2) /* a century and more: forever, not an overflow */
		p->wait_ms = DLOCK_WAIT_FOREVER;
	return DLOCK_OK;
}

void dlock_queue_push(struct dlock_entry *e, struct dlock_queued *q)
{
	q->next = NULL;
	if (e->queue_tail)
		e->queue_tail->next = q;
	else
		e->queue_head = q;
	e->queue_tail = q;
}

void dlock_queue_remove(struct dlock_entry *e, struct dlock_queued *q)
{
	struct dlock_queued **pp = &e->queue_head, *prev = NULL;
	while (*pp && *pp != q) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = q->next;
	if (e->queue_tail == q)
		e->queue_tail = prev;
	if (e->queue_head) /* only queued contenders wait on it */
		pthread_cond_broadcast(&e->cond);
}

/* The contender whose turn it is: the first in the queue whose handle is
 * free.  A handle can still count as held with nobody holding the name:
 * its loss was cleaned up and its owner has not released it yet.  The
 * threads that acquire through that handle wait for that release; the
 * other handles of the name go past them. */
static struct dlock_queued *queue_turn(const struct dlock_entry *e)
{
	struct dlock_queued *q = e->queue_head;
	while (q && q->lock->held)
		q = q->next;
	return q;
}

/* 1 when the holders of `e` leave room for `q`: nobody holds it, or only shared holders when it asks
 * for shared, or fewer than N permits of a semaphore. */
static int room_for(const struct dlock_entry *e, const struct dlock_queued *q)
{
	if (!e->holders)
		return 1;
	if (q->lock->kind == DLOCK_KIND_SEMAPHORE) {
		uint32_t held = 0;
		for (const struct dlock_lock *h = e->holders; h; h = h->next_holder)
			held++;
		return held < q->lock->permits;
	}
	return e->shared && q->mode == DLOCK_MODE_SHARED;
}

int dlock_queue_may_go(const struct dlock_entry *e, const struct dlock_queued *q)
{
	return !e->contending && queue_turn(e) == q && room_for(e, q);
}

/* Wait for this contender's turn to ask the server: first in the local
 * queue, nobody of this client contending for the name, and room among the
 * holders (room_for()).  A cancellation is seen by cancel_requested, which
 * every canceller sets under c->mu before it marks the wait cancelled
 * (dlock_lock_cancel_locked()): no need to take the wait's own mutex. */
static dlock_status wait_turn_locked(struct dlock_client *c, struct dlock_entry *e, struct dlock_queued *q,
                                     struct dlock_wait *w)
{
	for (;;) {
		if (c->closing || w->cancel_requested)
			return DLOCK_ECANCELED;
		if (dlock_queue_may_go(e, q))
			return DLOCK_OK;
		if (w->try_once)
			return DLOCK_EBUSY;
		if (dlock_cond_wait_until(&e->cond, &c->mu, w->deadline_ns) != 0 &&
		    dlock_monotonic_ns() >= w->deadline_ns)
			return DLOCK_ETIMEDOUT;
	}
}

/* Who owns an acquisition: the calling thread, or the handle itself on a loop client (its one thread is
 * the loop's, and its blocking calls run on workers). */
static uint64_t owner_id(const struct dlock_lock *l)
{
	return l->client->reactor ? (uint64_t)(uintptr_t)l : dlock_registry_thread_id();
}

void dlock_become_holder_locked(struct dlock_lock *l, const struct dlock_acquire_params *p,
                                 const dlock_acquired *acq, int64_t started_ns)
{
	struct dlock_client *c = l->client;
	l->held = 1;
	l->owner = owner_id(l);
	l->depth = 1;
	l->mode = p->mode;
	l->token = acq->token;
	l->has_token = p->fencing;
	l->slot = acq->slot;
	l->generation++;
	l->renew = p->renew;
	l->lost = l->lost_pending = l->lost_delivered = l->loss_cleaned = 0;
	l->on_lost = p->on_lost;
	l->lost_userdata = p->lost_userdata;
	dlock_hold_begin(l, p->min_hold_ms, p->max_hold_ms);
	/* A driver with extend() has a lease to keep; others hold by session. */
	l->tracked = c->driver->extend != NULL;
	l->lease_ns = p->lease_ms * NS_PER_MS;
	dlock_holder_add_locked(l);
	/* Into the timetables: lease_renewed() places it; an acquisition without a lease is placed too
	 * (its loss is cleaned up). */
	if (l->tracked)
		dlock_lock_lease_renewed(l, acq->sent_ns ? acq->sent_ns : started_ns, l->lease_ns);
	else
		dlock_sched_update(l);
	c->stats.acquired++;
	if (l->lost_early)
		dlock_lock_declare_lost(l, l->lost_reason, l->lost_detail);
}

/* One trip to the server by the head of the local queue. */
static dlock_status contend_locked(struct dlock_lock *l, const struct dlock_acquire_params *p, struct dlock_wait *w,
                                   dlock_error *err)
{
	struct dlock_client *c = l->client;
	dlock_acquired acq = { 0, 0, 0 };
	l->entry->contending = 1;
	l->contending = 1;
	l->lost_early = 0;
	c->stats.server_acquires++;
	c->stats.contending++;
	/* A kind the server does not queue (core_waits) waits in the core's loop whatever the client's rule. */
	int retry_loop = c->retry_loop || (c->kinds[l->kind].core_waits && dlock_driver_try_acquire_of(c->driver));
	pthread_mutex_unlock(&c->mu);

	int64_t started = dlock_monotonic_ns();
	dlock_status st = retry_loop ? dlock_retry_loop(c, l->lk, p->lease_ms, w, &acq, err)
	                             : c->driver->acquire(c->backend, l->lk, p->lease_ms, w, &acq, err);

	pthread_mutex_lock(&c->mu);
	l->entry->contending = 0;
	l->contending = 0;
	c->stats.contending--;
	if (st == DLOCK_OK)
		dlock_become_holder_locked(l, p, &acq, started);
	l->lost_early = 0;
	return st;
}

const char *dlock_acquire_failure_text(dlock_status st, char *buf, size_t len, int64_t wait_ms)
{
	switch (st) {
	case DLOCK_EBUSY: return "held by another owner";
	case DLOCK_ETIMEDOUT:
		snprintf(buf, len, "not acquired within %lld ms", (long long)wait_ms);
		return buf;
	case DLOCK_ECANCELED: return "acquire cancelled (dlock_cancel or client closing)";
	default: return dlock_strerror(st);
	}
}

/* Reentry, or a name this thread already holds through another handle. */
static int reentry_locked(struct dlock_lock *l, const struct dlock_acquire_params *p, dlock_status *st)
{
	uint64_t self = owner_id(l);
	if (l->held && !l->lingering && l->owner == self) {
		if (l->lost) {
			*st = lock_fail(l, DLOCK_ENOTHELD, "was lost; release it before acquiring again");
		} else if (l->mode == DLOCK_MODE_SHARED && p->mode == DLOCK_MODE_EXCLUSIVE) {
			*st = lock_fail(l, DLOCK_EDEADLK,
			                "this thread holds it shared: a reader cannot upgrade (release, then acquire "
			                "exclusive)");
		} else {
			l->depth++;
			l->client->stats.acquired++;
			l->client->stats.reentered++;
			*st = DLOCK_OK;
		}
		return 1;
	}
	/* A semaphore: a thread may hold several permits, unless it holds every permit of the client. */
	uint32_t mine = 0;
	for (const struct dlock_lock *h = l->entry->holders; h; h = h->next_holder)
		if (h != l && !h->lingering && h->owner == self)
			mine++;
	if (mine == 0 || (l->kind == DLOCK_KIND_SEMAPHORE && mine < l->permits))
		return 0;
	if (l->kind == DLOCK_KIND_SEMAPHORE)
		*st = p->wait_ms == 0 ? lock_fail(l, DLOCK_EBUSY, "this thread holds every permit of this client")
		                      : lock_fail(l, DLOCK_EDEADLK, "this thread holds every permit of this client");
	else
		*st = p->wait_ms == 0 ? lock_fail(l, DLOCK_EBUSY, "held by this thread through another handle")
		                      : lock_fail(l, DLOCK_EDEADLK, "this thread holds it through another handle");
	return 1;
}

/* The handle of the client that holds or waits for the name as another kind (or as a semaphore of
 * another N); NULL when none does.  c->mu held. */
static const struct dlock_lock *kind_conflict_locked(const struct dlock_lock *l)
{
	for (const struct dlock_lock *h = l->entry->holders; h; h = h->next_holder)
		if (h->kind != l->kind || h->permits != l->permits)
			return h;
	for (const struct dlock_queued *q = l->entry->queue_head; q; q = q->next)
		if (q->lock->kind != l->kind || q->lock->permits != l->permits)
			return q->lock;
	return NULL;
}

int dlock_acquire_admit_locked(struct dlock_lock *l, const struct dlock_acquire_params *p, dlock_status *st)
{
	const struct dlock_lock *other = kind_conflict_locked(l);
	if (other) {
		char why[160];
		if (other->kind == l->kind)
			snprintf(why, sizeof why, "another handle of this client uses the name as a semaphore of %lu "
			         "permits, not %lu", (unsigned long)other->permits, (unsigned long)l->permits);
		else
			snprintf(why, sizeof why, "another handle of this client uses the name as another kind of lock");
		*st = lock_fail(l, DLOCK_EKIND, why);
		return 1;
	}
	return reentry_locked(l, p, st);
}

dlock_status dlock_acquire_check(const struct dlock_lock *l, const dlock_acquire_options *opts,
                                 dlock_acquire_options *copy, const char **why)
{
	struct dlock_acquire_params p;
	dlock_status st = dlock_acquire_params_resolve(l, opts, &p, why);
	if (st == DLOCK_OK)
		st = dlock_options_read(opts, copy, why);
	return st;
}

uint64_t dlock_lock_cancel_seq(struct dlock_lock *l)
{
	pthread_mutex_lock(&l->client->mu);
	uint64_t seq = l->cancel_seq;
	pthread_mutex_unlock(&l->client->mu);
	return seq;
}

dlock_status dlock_acquire(dlock_lock *l, const dlock_acquire_options *opts)
{
	if (!l)
		return DLOCK_EINVAL;
	dlock_status st = dlock_seam_refuse_blocking(l->client, "dlock_acquire");
	return st == DLOCK_OK ? dlock_acquire_since(l, opts, DLOCK_CANCEL_SEQ_NOW) : st;
}

dlock_status dlock_acquire_since(dlock_lock *l, const dlock_acquire_options *opts, uint64_t cancel_seq)
{
	struct dlock_client *c = l->client;
	struct dlock_acquire_params p;
	dlock_error err; /* only its string is read: no need to clear its 512 bytes per call */
	err.msg[0] = '\0';
	const char *why = "";
	dlock_status st = dlock_acquire_params_resolve(l, opts, &p, &why);
	if (st != DLOCK_OK)
		return dlock_client_fail(c, st, why);

	/* Waiting forever needs no clock here: the lease counts from contend_locked()'s own reading. */
	int64_t deadline = p.wait_ms < 0 ? INT64_MAX : dlock_monotonic_ns() + p.wait_ms * NS_PER_MS;

	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		st = lock_fail(l, DLOCK_ECANCELED, "client is closing");
		pthread_mutex_unlock(&c->mu);
		return st;
	}
	if (cancel_seq != DLOCK_CANCEL_SEQ_NOW && cancel_seq != l->cancel_seq) {
		st = lock_fail(l, DLOCK_ECANCELED, "acquire cancelled (dlock_cancel or client closing)");
		pthread_mutex_unlock(&c->mu);
		return st;
	}
	if (dlock_acquire_admit_locked(l, &p, &st)) {
		pthread_mutex_unlock(&c->mu);
		return st;
	}

	struct dlock_wait w;
	struct dlock_queued q;
	dlock_wait_init(&w, deadline, p.wait_ms == 0, p.fencing, p.mode);
	w.next = l->waits;
	l->waits = &w;
	c->inflight++;
	q.lock = l;
	q.mode = p.mode;
	dlock_queue_push(l->entry, &q);

	st = wait_turn_locked(c, l->entry, &q, &w);
	if (st == DLOCK_OK)
		st = contend_locked(l, &p, &w, &err);
	if (st == DLOCK_EBUSY && p.wait_ms != 0)
		st = DLOCK_ETIMEDOUT;

	dlock_queue_remove(l->entry, &q);
	struct dlock_wait **pp = &l->waits;
	while (*pp != &w)
		pp = &(*pp)->next;
	*pp = w.next;
	while (w.pins > 0)
		pthread_cond_wait(&c->cond, &c->mu);
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	if (st != DLOCK_OK) {
		char buf[64];
		lock_fail(l, st, err.msg[0] ? err.msg : dlock_acquire_failure_text(st, buf, sizeof buf, p.wait_ms));
	}
	pthread_mutex_unlock(&c->mu);
	dlock_wait_destroy(&w);
	return st;
}

void dlock_lock_cancel_locked(struct dlock_lock *l)
{
	struct dlock_client *c = l->client;
	l->cancel_seq++;
	for (;;) {
		struct dlock_wait *w = l->waits;
		while (w && w->cancel_requested)
			w = w->next;
		if (!w)
			break;
		w->cancel_requested = 1;
		w->pins++; /* keeps the waiter from leaving while we use its wait */
		pthread_mutex_unlock(&c->mu);
		dlock_wait_cancel(w);
		pthread_mutex_lock(&c->mu);
		w->pins--;
		pthread_cond_broadcast(&l->entry->cond);
		pthread_cond_broadcast(&c->cond);
	}
}

dlock_status dlock_cancel(dlock_lock *l)
{
	if (!l)
		return DLOCK_EINVAL;
	pthread_mutex_lock(&l->client->mu);
	dlock_lock_cancel_locked(l);
	pthread_mutex_unlock(&l->client->mu);
	return DLOCK_OK;
}

/* ------------------------------------------------------------ release */

static dlock_status not_held_locked(struct dlock_lock *l)
{
	if (l->client->closing)
		return lock_fail(l, DLOCK_ENOTHELD, "client is closed; its locks were released");
	return lock_fail(l, DLOCK_ENOTHELD, "not held by this handle");
}

enum dlock_step dlock_release_begin(struct dlock_lock *l, int nowait, dlock_status *st, int *was_lost)
{
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	if (!l->held || l->lingering || c->closing) {
		*st = not_held_locked(l);
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_DONE;
	}
	if (l->depth > 1 && !l->lost) {
		l->depth--;
		pthread_mutex_unlock(&c->mu);
		*st = DLOCK_OK;
		return DLOCK_STEP_DONE;
	}
	/* What would wait (a lost callback running, another call on the handle) or make a driver call of
	 * its own (a minimum hold's linger) is not for a caller that must not wait. */
	if (nowait && ((l->callback_running && !dlock_background_is_self(c)) || l->busy || l->loop_call ||
	               (!l->lost && !l->loss_cleaned && l->min_until && dlock_monotonic_ns() < l->min_until))) {
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_ELSEWHERE;
	}
	/* Never return while this acquisition's lost callback runs elsewhere. */
	while (l->callback_running && !dlock_background_is_self(c))
		pthread_cond_wait(&c->cond, &c->mu);
	if (nowait)
		begin_loop_call(l);
	else
		dlock_lock_begin_call(l);
	if (!l->held || l->lingering) { /* another thread released it meanwhile */
		dlock_lock_end_call(l);
		*st = not_held_locked(l);
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_DONE;
	}
	if (l->loss_cleaned) { /* the background thread released it on the server */
		dlock_lock_drop_hold_locked(l);
		dlock_lock_end_call(l);
		*st = lock_fail(l, DLOCK_ENOTHELD, l->lost_detail ? l->lost_detail : "lock was lost");
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_DONE;
	}
	if (!l->lost && dlock_linger_begin_locked(l)) { /* its minimum hold keeps it until the bound */
		dlock_lock_end_call(l);
		pthread_mutex_unlock(&c->mu);
		*st = DLOCK_OK;
		return DLOCK_STEP_DONE;
	}
	*was_lost = l->lost; /* the linger's driver call may have found it gone */
	pthread_mutex_unlock(&c->mu);
	/* Even a lock declared lost is released on the server: the driver's
	 * release is owner-only, so it only removes what is still ours. */
	return DLOCK_STEP_DRIVER;
}

dlock_status dlock_release_end(struct dlock_lock *l, int was_lost, dlock_status st, const char *msg)
{
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	c->stats.server_releases++;
	dlock_lock_drop_hold_locked(l);
	dlock_lock_end_call(l);
	if (was_lost)
		st = lock_fail(l, DLOCK_ENOTHELD, l->lost_detail ? l->lost_detail : "lock was lost before release");
	else if (st == DLOCK_ENOTHELD) {
		c->stats.lost++;
		lock_fail(l, st, msg[0] ? msg : "no longer ours on the server (expired or taken)");
	} else if (st != DLOCK_OK)
		lock_fail(l, st, msg);
	pthread_mutex_unlock(&c->mu);
	return st;
}

dlock_status dlock_release(dlock_lock *l)
{
	if (!l)
		return DLOCK_EINVAL;
	struct dlock_client *c = l->client;
	dlock_status st = dlock_seam_refuse_blocking(c, "dlock_release");
	int was_lost = 0;
	if (st != DLOCK_OK || dlock_release_begin(l, 0, &st, &was_lost) == DLOCK_STEP_DONE)
		return st;
	dlock_error err; /* only its string is read */
	err.msg[0] = '\0';
	st = c->driver->release(c->backend, l->lk, &err);
	return dlock_release_end(l, was_lost, st, err.msg);
}

/* ------------------------------------------------------------ extend, check */

/* Start a driver call on a held, not-lost handle (`loop`: a loop call, which the caller made sure
 * need not wait); c->mu held. */
static dlock_status begin_held_call_locked(struct dlock_lock *l, int loop)
{
	if (!l->held || l->lingering || l->client->closing)
		return not_held_locked(l);
	if (l->lost)
		return lock_fail(l, DLOCK_ENOTHELD, l->lost_detail ? l->lost_detail : "lock was lost");
	if (loop)
		begin_loop_call(l);
	else
		dlock_lock_begin_call(l);
	if (!l->held || l->lost || l->lingering) {
		dlock_lock_end_call(l);
		return not_held_locked(l);
	}
	return DLOCK_OK;
}

enum dlock_step dlock_extend_begin(struct dlock_lock *l, int64_t lease_ms, int nowait, dlock_status *st,
                                   int64_t *lease_ns)
{
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	if (lease_ms < 0 || lease_ms > INT64_MAX / NS_PER_MS / 2)
		*st = lock_fail(l, DLOCK_EINVAL, "extend: lease_ms out of range");
	else if (!c->driver->extend)
		*st = lock_fail(l, DLOCK_ENOTSUP, "this backend has no lease to extend (held by session)");
	else if (nowait && (l->busy || l->loop_call)) {
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_ELSEWHERE;
	} else
		*st = begin_held_call_locked(l, nowait);
	if (*st != DLOCK_OK) {
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_DONE;
	}
	*lease_ns = lease_ms ? lease_ms * NS_PER_MS : l->lease_ns;
	pthread_mutex_unlock(&c->mu);
	return DLOCK_STEP_DRIVER;
}

dlock_status dlock_extend_end(struct dlock_lock *l, int64_t sent, int64_t lease_ns, dlock_status st, const char *msg)
{
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	if (st == DLOCK_OK)
		dlock_lock_lease_renewed(l, sent, lease_ns);
	else if (st == DLOCK_ENOTHELD)
		dlock_lock_declare_lost(l, dlock_lock_gone_reason(l, sent), msg[0] ? msg : "extend found the lock gone");
	dlock_lock_end_call(l);
	if (st != DLOCK_OK)
		lock_fail(l, st, msg[0] ? msg : dlock_strerror(st));
	pthread_mutex_unlock(&c->mu);
	return st;
}

dlock_status dlock_extend(dlock_lock *l, int64_t lease_ms)
{
	if (!l)
		return DLOCK_EINVAL;
	struct dlock_client *c = l->client;
	dlock_status st = dlock_seam_refuse_blocking(c, "dlock_extend");
	int64_t lease_ns = 0;
	if (st != DLOCK_OK || dlock_extend_begin(l, lease_ms, 0, &st, &lease_ns) == DLOCK_STEP_DONE)
		return st;
	dlock_error err = { "" };
	int64_t sent = dlock_monotonic_ns();
	st = c->driver->extend(c->backend, l->lk, lease_ns / NS_PER_MS, &err);
	return dlock_extend_end(l, sent, lease_ns, st, err.msg);
}

enum dlock_step dlock_check_begin(struct dlock_lock *l, int nowait, dlock_status *st)
{
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	/* An expired lease is known without asking, and without waiting for a
	 * renewal that may be stuck on the server. */
	if (l->held && l->tracked && !l->lost && dlock_monotonic_ns() >= l->valid_until)
		dlock_lock_declare_lost(l, DLOCK_LOST_EXPIRED, "lease ran out without a successful renewal");
	if (nowait && (l->busy || l->loop_call) && l->held && !l->lost && !l->lingering && !c->closing) {
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_ELSEWHERE;
	}
	*st = begin_held_call_locked(l, nowait);
	if (*st != DLOCK_OK || !c->driver->check) {
		if (*st == DLOCK_OK)
			dlock_lock_end_call(l);
		pthread_mutex_unlock(&c->mu);
		return DLOCK_STEP_DONE;
	}
	pthread_mutex_unlock(&c->mu);
	return DLOCK_STEP_DRIVER;
}

dlock_status dlock_check_end(struct dlock_lock *l, int64_t sent, dlock_status st, const char *msg)
{
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	if (st == DLOCK_ENOTHELD)
		dlock_lock_declare_lost(l, dlock_lock_gone_reason(l, sent), msg[0] ? msg : "the server no longer has it");
	dlock_lock_end_call(l);
	if (st != DLOCK_OK)
		lock_fail(l, st, msg[0] ? msg : dlock_strerror(st));
	pthread_mutex_unlock(&c->mu);
	return st;
}

dlock_status dlock_check(dlock_lock *l)
{
	if (!l)
		return DLOCK_EINVAL;
	struct dlock_client *c = l->client;
	dlock_status st = dlock_seam_refuse_blocking(c, "dlock_check");
	if (st != DLOCK_OK || dlock_check_begin(l, 0, &st) == DLOCK_STEP_DONE)
		return st;
	dlock_error err = { "" };
	int64_t sent = dlock_monotonic_ns();
	st = c->driver->check(c->backend, l->lk, &err);
	return dlock_check_end(l, sent, st, err.msg);
}

dlock_status dlock_lock_fencing_token(dlock_lock *l, uint64_t *token)
{
	if (!l || !token)
		return DLOCK_EINVAL;
	struct dlock_client *c = l->client;
	dlock_status st = DLOCK_OK;
	pthread_mutex_lock(&c->mu);
	if (c->caps.fencing == DLOCK_FENCING_NONE)
		st = lock_fail(l, DLOCK_ENOTSUP, "this backend gives no fencing token");
	else if (!l->held || l->lost || l->lingering || c->closing)
		st = not_held_locked(l);
	else if (l->mode == DLOCK_MODE_SHARED && c->kinds[DLOCK_KIND_RWLOCK].read_fencing == DLOCK_FENCING_NONE)
		st = lock_fail(l, DLOCK_ENOTSUP, "readers get no fencing token on this backend (read fencing: none)");
	else if (l->kind == DLOCK_KIND_SEMAPHORE && c->kinds[DLOCK_KIND_SEMAPHORE].read_fencing == DLOCK_FENCING_NONE)
		st = lock_fail(l, DLOCK_ENOTSUP, "permits get no fencing token on this backend (permit fencing: none)");
	else if (!l->has_token)
		st = lock_fail(l, DLOCK_ENOTSUP, "this acquisition asked for no fencing token (fencing off)");
	else
		*token = l->token;
	pthread_mutex_unlock(&c->mu);
	return st;
}

dlock_status dlock_lock_permit_slot(dlock_lock *l, uint32_t *slot)
{
	if (!l || !slot)
		return DLOCK_EINVAL;
	struct dlock_client *c = l->client;
	dlock_status st = DLOCK_OK;
	pthread_mutex_lock(&c->mu);
	if (l->kind != DLOCK_KIND_SEMAPHORE)
		st = lock_fail(l, DLOCK_ENOTSUP, "only a semaphore's permit has a slot");
	else if (!c->kinds[DLOCK_KIND_SEMAPHORE].slots)
		st = lock_fail(l, DLOCK_ENOTSUP, "permits have no slot on this backend (permit fencing: none)");
	else if (!l->held || l->lost || l->lingering || c->closing)
		st = not_held_locked(l);
	else
		*slot = l->slot;
	pthread_mutex_unlock(&c->mu);
	return st;
}

/* ------------------------------------------------------------ close */

/* The next handle that closing has not dealt with yet, marked busy. */
static struct dlock_lock *next_unshut_locked(struct dlock_client *c)
{
	for (struct dlock_lock *l = c->locks; l; l = l->next) {
		if (!l->shut) {
			l->shut = 1;
			dlock_lock_begin_call(l);
			return l;
		}
	}
	return NULL;
}

/* What closing releases on the server: a lingering lease ends at its bound by itself, and a session's
 * hold goes with the session. */
static int on_server(const struct dlock_lock *l)
{
	return l->held && !l->loss_cleaned && !(l->lingering && l->linger_ttl);
}

void dlock_locks_shutdown_start_locked(struct dlock_client *c)
{
	struct dlock_lock *l = c->locks;
	while (l) {
		if (l->shut) {
			l = l->next;
			continue;
		}
		l->shut = 1;
		if (on_server(l) && dlock_seam_bg_call_locked(l, DLOCK_BG_CLOSE, l->generation, 0))
			l = c->locks; /* c->mu was dropped: from the start again (the marked ones are passed) */
		else
			l = l->next; /* nothing to release (a release that could not start is left to its lease) */
	}
}

void dlock_locks_shutdown_finish_locked(struct dlock_client *c)
{
	struct dlock_lock *l = c->locks;
	while (l) {
		if (!l->shut || (!l->driver_ready && !l->held)) {
			l = l->next;
			continue;
		}
		if (l->driver_ready && c->driver->lock_fini) {
			l->driver_ready = 0;
			pthread_mutex_unlock(&c->mu);
			c->driver->lock_fini(c->backend, l->lk);
			pthread_mutex_lock(&c->mu);
		}
		if (l->held)
			dlock_lock_drop_hold_locked(l);
		l->driver_ready = 0;
		dlock_sched_update(l);
		l = c->locks;
	}
	pthread_cond_broadcast(&c->cond);
}

void dlock_locks_shutdown(struct dlock_client *c)
{
	dlock_error err = { "" };
	pthread_mutex_lock(&c->mu);
	struct dlock_lock *l;
	while ((l = next_unshut_locked(c)) != NULL) {
		int held = l->held, ready = l->driver_ready;
		int on_server_now = on_server(l);
		pthread_mutex_unlock(&c->mu);
		if (on_server_now && c->driver->release(c->backend, l->lk, &err) != DLOCK_OK)
			dlock_client_logf(c, DLOCK_LOG_WARN, "closing: a held lock could not be released: %s", err.msg);
		if (ready && c->driver->lock_fini)
			c->driver->lock_fini(c->backend, l->lk);
		pthread_mutex_lock(&c->mu);
		if (held)
			dlock_lock_drop_hold_locked(l);
		l->driver_ready = 0;
		l->busy = 0;
		dlock_sched_update(l);
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->mu);
}
