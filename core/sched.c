/*
 * The background threads' timetables: two binary min-heaps of a client's
 * handles, so that finding what is due costs O(log n) in the handles held,
 * never a walk over all of them (a client may hold ten thousand locks).
 *
 *   DLOCK_SCHED_WATCH   held, not lost, with a lease (tracked) or a
 *                       maximum hold: keyed on the earlier of valid_until
 *                       and max_at, when the watch thread declares the
 *                       loss if no renewal came first.
 *   DLOCK_SCHED_RENEW   held and not busy, and either renewed (tracked,
 *                       renew on, not lost: keyed on next_renew), lost
 *                       and not cleaned up yet (keyed on when the cleanup
 *                       is due), or lingering (keyed on its minimum hold,
 *                       or its renewal if sooner; see linger.c).
 *
 * Which heap a handle is in, and where, follows from its fields alone:
 * every change of held, busy, lost, loss_cleaned, next_renew,
 * valid_until or the hold bounds is followed by dlock_sched_update(), which puts the handle
 * where those fields say.  Each handle keeps its position (1-based, 0:
 * absent) and key per heap; the arrays are grown when a handle is made
 * (dlock_sched_reserve()), so updating never allocates and cannot fail.
 * Everything here runs with c->mu held.
 */
#include "internal.h"

#include <stdlib.h>

static int64_t key_of(const struct dlock_lock *l, int which)
{
	return l->sched_key[which];
}

static void place(struct dlock_sched_heap *h, int which, size_t i, struct dlock_lock *l)
{
	h->v[i] = l;
	l->sched_pos[which] = i + 1;
}

static void sift_up(struct dlock_sched_heap *h, int which, size_t i)
{
	struct dlock_lock *l = h->v[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (key_of(h->v[parent], which) <= key_of(l, which))
			break;
		place(h, which, i, h->v[parent]);
		i = parent;
	}
	place(h, which, i, l);
}

static void sift_down(struct dlock_sched_heap *h, int which, size_t i)
{
	struct dlock_lock *l = h->v[i];
	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= h->n)
			break;
		if (child + 1 < h->n && key_of(h->v[child + 1], which) < key_of(h->v[child], which))
			child++;
		if (key_of(l, which) <= key_of(h->v[child], which))
			break;
		place(h, which, i, h->v[child]);
		i = child;
	}
	place(h, which, i, l);
}

static void heap_remove(struct dlock_sched_heap *h, int which, struct dlock_lock *l)
{
	size_t i = l->sched_pos[which] - 1;
	l->sched_pos[which] = 0;
	struct dlock_lock *last = h->v[--h->n];
	if (i == h->n)
		return;
	place(h, which, i, last);
	sift_down(h, which, i);
	sift_up(h, which, last->sched_pos[which] - 1);
}

/* Put `l` in heap `which` with `key` when `member`, else take it out. */
static void heap_set(struct dlock_sched_heap *h, int which, struct dlock_lock *l, int member, int64_t key)
{
	if (!member) {
		if (l->sched_pos[which])
			heap_remove(h, which, l);
		return;
	}
	if (!l->sched_pos[which]) {
		l->sched_key[which] = key;
		place(h, which, h->n++, l);
		sift_up(h, which, h->n - 1);
		return;
	}
	int64_t old = l->sched_key[which];
	l->sched_key[which] = key;
	if (key < old)
		sift_up(h, which, l->sched_pos[which] - 1);
	else if (key > old)
		sift_down(h, which, l->sched_pos[which] - 1);
}

dlock_status dlock_sched_reserve(struct dlock_client *c, size_t handles)
{
	for (int which = 0; which < DLOCK_SCHEDS; which++) {
		struct dlock_sched_heap *h = &c->sched[which];
		if (h->cap >= handles)
			continue;
		size_t cap = h->cap ? h->cap : 16;
		while (cap < handles)
			cap *= 2;
		struct dlock_lock **v = realloc(h->v, cap * sizeof *v);
		if (!v)
			return DLOCK_ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	return DLOCK_OK;
}

void dlock_sched_free(struct dlock_client *c)
{
	for (int which = 0; which < DLOCK_SCHEDS; which++) {
		free(c->sched[which].v);
		c->sched[which] = (struct dlock_sched_heap){ NULL, 0, 0 };
	}
}

/* When the cleanup of a lost acquisition is due: a lease that the client saw run out is still the
 * server's until its end (the holder's time to act on the news first); any other loss, now. */
static int64_t cleanup_due(const struct dlock_lock *l)
{
	return l->lost_reason == DLOCK_LOST_EXPIRED && l->tracked ? l->lease_end : INT64_MIN;
}

void dlock_sched_update(struct dlock_lock *l)
{
	struct dlock_client *c = l->client;
	/* A handle not held is in neither timetable (each needs `held`): nothing to compute. */
	if (!l->held && !l->sched_pos[DLOCK_SCHED_WATCH] && !l->sched_pos[DLOCK_SCHED_RENEW])
		return;
	/* Hold bounds (hold.c, linger.c): a maximum is watched like a lease; a lease already cut to end at the
	 * maximum is not renewed; a lingering handle is released at its minimum. */
	int64_t max_at = l->lingering ? INT64_MAX : l->max_at;
	int64_t watch_key = l->tracked && l->valid_until < max_at ? l->valid_until : max_at;
	int watched = l->held && !l->lost && !l->linger_ttl && (l->tracked || max_at != INT64_MAX);
	heap_set(&c->sched[DLOCK_SCHED_WATCH], DLOCK_SCHED_WATCH, l, watched, watch_key);
	int cleanup = l->held && l->lost && !l->loss_cleaned;
	int lingering = l->held && l->lingering && !l->lost;
	int capped = max_at != INT64_MAX && l->lease_end + 2000000 >= max_at;
	int renewing = l->held && l->tracked && l->renew && !l->lost && !l->linger_ttl && !capped;
	int64_t due = cleanup ? cleanup_due(l) : l->next_renew;
	if (!cleanup && lingering && (!renewing || l->min_until < due))
		due = l->min_until;
	heap_set(&c->sched[DLOCK_SCHED_RENEW], DLOCK_SCHED_RENEW, l,
	         !l->busy && !l->loop_call && (cleanup || renewing || lingering), due);
	/* Wake a thread that would otherwise sleep past the new due time. */
	if (watched && watch_key < c->bg_sleep_until)
		pthread_cond_signal(&c->bg_cond);
	if (l->sched_pos[DLOCK_SCHED_RENEW] && due < c->renew_sleep_until)
		pthread_cond_signal(&c->renew_cond);
	if (c->loop_bg) { /* the loop's tick does both threads' work */
		if (watched)
			dlock_seam_soon_locked(c, watch_key);
		if (l->sched_pos[DLOCK_SCHED_RENEW])
			dlock_seam_soon_locked(c, due);
	}
}

void dlock_sched_wake(struct dlock_client *c)
{
	pthread_cond_signal(&c->bg_cond);
	pthread_cond_signal(&c->renew_cond);
	dlock_seam_soon_locked(c, 0);
}

void dlock_sched_forget(struct dlock_lock *l)
{
	for (int which = 0; which < DLOCK_SCHEDS; which++)
		heap_set(&l->client->sched[which], which, l, 0, 0);
}

struct dlock_lock *dlock_sched_first(struct dlock_client *c, int which)
{
	return c->sched[which].n ? c->sched[which].v[0] : NULL;
}
