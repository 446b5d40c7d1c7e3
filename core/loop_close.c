/*
 * The close of a loop client whose driver runs on the loop
 * (DLOCK_FACT_LOOP_IO), on the loop, with no worker thread: what
 * dlock_client_close_now() does for the others, in three steps, each on a
 * later turn of the loop.
 *
 *   waiting    until no operation is at work (ops_working: the workers'
 *              operations, the acquisitions and calls on the loop, the
 *              background's calls), which dlock_async_work_done_locked()
 *              says when it falls to zero;
 *   releasing  the client is closing (its tick starts nothing more), and
 *              each held lock's release_start() goes out at once
 *              (dlock_locks_shutdown_start_locked()); waiting again for
 *              their answers;
 *   finishing  each handle's lock_fini() and its hold dropped, then the
 *              close's callback, whose end closes the driver (async.c).
 *
 * Every handle is pinned (async_refs) from the first step to the last, so
 * that one freed meanwhile is finished here first.  A client that has
 * observed an election closes on a worker as before: stopping the
 * observer's thread, or disarming its watches, may wait for a server.
 *
 * Ownership: the close's state is allocated at its start and freed when
 * it calls `done`.  Threads: the loop's, but for
 * dlock_async_work_done_locked() (any thread, c->mu held).  Errors: none
 * of its own; a release that fails is logged, and its lease ends it.
 */
#include "async.h"
#include "reactor.h"

#include <stdlib.h>

struct dlock_loop_close {
	struct dlock_reactor_item item; /* first member */
	struct dlock_client *c;
	void (*done)(void *arg, dlock_status st);
	void *arg;
	int releasing; /* past the first wait: the releases are out */
	int posted; /* item is posted (c->mu) */
};

/* Post the next step; c->mu held. */
static void post_locked(struct dlock_loop_close *lc)
{
	if (!lc->posted) {
		lc->posted = 1;
		dlock_reactor_post(lc->c->reactor, &lc->item);
	}
}

void dlock_async_work_done_locked(struct dlock_client *c)
{
	c->ops_working--;
	pthread_cond_broadcast(&c->cond);
	if (c->ops_working == 0 && c->loop_close)
		post_locked(c->loop_close);
}

/* Unpin every handle the close pinned (shut 1 -> 2, so each once); c->mu held, dropped inside. */
static void unpin_locked(struct dlock_client *c)
{
	struct dlock_lock *l = c->locks;
	while (l) {
		if (l->shut != 1) {
			l = l->next;
			continue;
		}
		l->shut = 2;
		pthread_mutex_unlock(&c->mu);
		c->seam->unref(l); /* may free it */
		pthread_mutex_lock(&c->mu);
		l = c->locks;
	}
}

static void close_step(struct dlock_reactor_item *item)
{
	struct dlock_loop_close *lc = (struct dlock_loop_close *)item;
	struct dlock_client *c = lc->c;
	pthread_mutex_lock(&c->mu);
	lc->posted = 0;
	if (c->ops_working > 0) { /* dlock_async_work_done_locked() posts it again */
		pthread_mutex_unlock(&c->mu);
		return;
	}
	if (!lc->releasing) {
		lc->releasing = 1;
		c->closing = 1;
		pthread_mutex_unlock(&c->mu);
		dlock_observer_stop(c); /* no thread, no watch: it only marks the client */
		pthread_mutex_lock(&c->mu);
		for (struct dlock_lock *l = c->locks; l; l = l->next)
			if (!l->shut)
				l->async_refs++;
		dlock_locks_shutdown_start_locked(c); /* each release counts in ops_working */
		if (c->ops_working == 0)
			post_locked(lc);
		pthread_mutex_unlock(&c->mu);
		return;
	}
	dlock_locks_shutdown_finish_locked(c);
	c->loop_close = NULL;
	c->closed = 1;
	unpin_locked(c);
	pthread_mutex_unlock(&c->mu);
	lc->done(lc->arg, DLOCK_OK);
	free(lc);
}

int dlock_loop_close_start(struct dlock_client *c, void (*done)(void *arg, dlock_status st), void *arg)
{
	pthread_mutex_lock(&c->mu);
	int on_worker = c->observe_started || c->observed || c->closing;
	pthread_mutex_unlock(&c->mu);
	struct dlock_loop_close *lc = on_worker ? NULL : calloc(1, sizeof *lc);
	if (!lc)
		return 0;
	lc->item.run = close_step;
	lc->c = c;
	lc->done = done;
	lc->arg = arg;
	pthread_mutex_lock(&c->mu);
	c->loop_close = lc;
	post_locked(lc); /* on the next turn, after what the close's cancels posted */
	pthread_mutex_unlock(&c->mu);
	return 1;
}
