/*
 * Watch contexts.  A ZooKeeper watch keeps its context pointer until it
 * fires on its node, which may be long after the acquire that set it has
 * given up, and it is also called (and kept) on every session event.  So
 * the context is never a stack object or a lock handle: it is a slot that
 * lives until the client closes.  Each lock handle takes a slot for its
 * life and attaches the acquire in progress to it; a watch that fires
 * wakes whatever acquire is attached now, if any.  A late watch from an
 * earlier acquisition can wake a later one: that costs it one look at the
 * children, never a wrong answer.
 *
 * The watcher runs on the library's completion thread and only wakes: it
 * never makes a ZooKeeper call (a synchronous call there would wait for the
 * thread it runs on).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zookeeper_internal.h"

struct zk_slot *dlock_zk_slot_take(struct zk_client *c, struct zk_lock *lk)
{
	pthread_mutex_lock(&c->mu);
	struct zk_slot *slot = c->slots;
	while (slot && slot->in_use)
		slot = slot->next;
	if (!slot && (slot = calloc(1, sizeof *slot)) != NULL) {
		slot->c = c;
		slot->next = c->slots;
		c->slots = slot;
	}
	if (slot) {
		slot->in_use = 1;
		slot->lk = lk;
	}
	pthread_mutex_unlock(&c->mu);
	return slot;
}

void dlock_zk_slot_give(struct zk_slot *slot)
{
	struct zk_client *c = slot->c;
	pthread_mutex_lock(&c->mu);
	slot->w = NULL;
	slot->lk = NULL;
	slot->own[0] = '\0';
	slot->pred[0] = '\0';
	slot->pred_gone = 0;
	slot->in_use = 0;
	pthread_mutex_unlock(&c->mu);
}

void dlock_zk_slot_attach(struct zk_slot *slot, dlock_wait *w)
{
	pthread_mutex_lock(&slot->c->mu);
	slot->w = w;
	pthread_mutex_unlock(&slot->c->mu);
}

void dlock_zk_slot_await(struct zk_slot *slot, const char *path)
{
	pthread_mutex_lock(&slot->c->mu);
	snprintf(slot->pred, sizeof slot->pred, "%s", path ? path : "");
	slot->pred_gone = 0;
	pthread_mutex_unlock(&slot->c->mu);
}

int dlock_zk_slot_awaited_gone(struct zk_slot *slot)
{
	pthread_mutex_lock(&slot->c->mu);
	int gone = slot->pred[0] && slot->pred_gone;
	pthread_mutex_unlock(&slot->c->mu);
	return gone;
}

void dlock_zk_slots_wake_locked(struct zk_client *c)
{
	for (struct zk_slot *slot = c->slots; slot; slot = slot->next)
		if (slot->w)
			dlock_wait_wake(slot->w);
}

void dlock_zk_slot_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct zk_slot *slot = ctx;
	struct zk_client *c = slot->c;
	(void)zh;
	(void)state;
	(void)path;
	dlock_zk_log_enter(c); /* this is the completion thread of one of c's handles */
	pthread_mutex_lock(&c->mu);
	if (type == ZOO_DELETED_EVENT && path && slot->pred[0] && strcmp(path, slot->pred) == 0)
		slot->pred_gone = 1;
	int woke = slot->w != NULL;
	if (woke)
		dlock_wait_wake(slot->w);
	pthread_mutex_unlock(&c->mu);
	/* Session events reach every watch; only node events say the queue moved. */
	if (woke && type != ZOO_SESSION_EVENT)
		dlock_host_log(c->host, DLOCK_LOG_DEBUG, "zk: watch event %d on the node it waits for woke a waiter", type);
}

void dlock_zk_slots_free(struct zk_client *c)
{
	while (c->slots) {
		struct zk_slot *next = c->slots->next;
		free(c->slots);
		c->slots = next;
	}
}
