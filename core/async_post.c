/*
 * Callbacks that the client's own threads raise, delivered on a loop
 * client's loop: lost-lock callbacks (from the watch thread,
 * background.c) and observers' news (from the observer thread,
 * observe.c).  Each is posted to the reactor with a reference on its
 * handle, and checked again when it runs: a loss is delivered only if it
 * is still the acquisition's (the handle was not released meanwhile), news
 * only to the observer still set.
 *
 * Ownership: the posted report owns what it carries (the loss's text, the
 * inspection behind the news) and frees it after running.  Threads: the
 * posting functions from the client's threads with c->mu held; the
 * reports run on the loop's thread.
 */
#include "async.h"
#include "reactor.h"

#include <stdio.h>
#include <stdlib.h>

struct dlock_async_lost {
	struct dlock_reactor_item item; /* first: the item is the report */
	struct dlock_lock *lock;
	uint64_t generation;            /* the acquisition it is about */
	dlock_lost_fn fn;
	void *ud;
	dlock_lost_reason reason;
	char detail[DLOCK_LOST_DETAIL_MAX + 1];
};

static void run_lost(struct dlock_reactor_item *item)
{
	struct dlock_async_lost *r = (struct dlock_async_lost *)item;
	struct dlock_lock *l = r->lock;
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	l->lost_post = NULL;
	int current = l->held && l->generation == r->generation;
	pthread_mutex_unlock(&c->mu);
	if (current) {
		c->callbacks_depth++;
		r->fn(l, r->reason, r->detail, r->ud);
		c->callbacks_depth--;
	}
	pthread_mutex_lock(&c->mu);
	l->callback_running = 0;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
	dlock_async_unref(l);
	free(r);
}

void dlock_async_post_lost_locked(struct dlock_client *c, struct dlock_lock *l)
{
	struct dlock_async_lost *r = calloc(1, sizeof *r);
	if (!r) {
		dlock_client_logf(c, DLOCK_LOG_ERROR, "out of memory: a lost-lock callback was not delivered");
		return;
	}
	r->item.run = run_lost;
	r->lock = l;
	r->generation = l->generation;
	r->fn = l->on_lost;
	r->ud = l->lost_userdata;
	r->reason = l->lost_reason;
	snprintf(r->detail, sizeof r->detail, "%s", dlock_lock_lost_text(l));
	l->callback_running = 1; /* a release waits until the loop has run it, as for a blocking client */
	l->lost_post = r;
	l->async_refs++;
	dlock_reactor_post(c->reactor, &r->item);
}

struct observed {
	struct dlock_reactor_item item;
	struct dlock_election *e;
	dlock_leader_fn fn;
	void *ud;
	dlock_lock_info *info;
};

static void run_observed(struct dlock_reactor_item *item)
{
	struct observed *o = (struct observed *)item;
	struct dlock_election *e = o->e;
	struct dlock_lock *l = dlock_election_lock(e);
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	int current = e->observe_fn == o->fn && e->observe_userdata == o->ud && !l->free_requested;
	pthread_mutex_unlock(&c->mu);
	if (current) {
		dlock_leader now;
		dlock_election_leader_of(o->info, &now);
		c->callbacks_depth++;
		o->fn(e, &now, o->ud);
		c->callbacks_depth--;
	}
	dlock_lock_info_free(o->info);
	dlock_async_unref(l);
	free(o);
}

void dlock_async_post_observed_locked(struct dlock_client *c, struct dlock_election *e, dlock_leader_fn fn,
                                      void *userdata, dlock_lock_info *info)
{
	struct observed *o = malloc(sizeof *o);
	if (!o) {
		dlock_client_logf(c, DLOCK_LOG_ERROR, "out of memory: an observer's news was not delivered");
		dlock_lock_info_free(info);
		return;
	}
	o->item.run = run_observed;
	o->e = e;
	o->fn = fn;
	o->ud = userdata;
	o->info = info;
	dlock_election_lock(e)->async_refs++;
	dlock_reactor_post(c->reactor, &o->item);
}
