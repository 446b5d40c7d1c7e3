/*
 * The create of a lock node and the first look at the queue, sent
 * together: one round trip where Curator's recipe takes two.
 *
 * ZooKeeper answers the requests of a session in the order they were sent,
 * and a read waits for the session's earlier writes: the get-children sent
 * right behind the create sees our node.  So an acquisition that finds the
 * lock free costs the create, this look and (later) the delete, and waits
 * for two answers in one round trip instead of two.
 *
 * The look sets the child watch that tells of our node's deletion
 * (zk_own.c), so our node must be known as ours before any event of that
 * watch arrives: the create's completion records it (dlock_zk_own_start),
 * on the completion thread, which runs completions and watch events in the
 * order the server sent them.
 *
 * Anything but a plain success (the parent missing, a lost connection,
 * duplicates of our node) goes the slow way: dlock_zk_protected_create()
 * takes over from the create's answer, and the queue wait looks again.
 *
 * Threads: the acquiring thread sends and waits; the completions run on
 * the library's completion thread and touch only `struct pipe` (its own
 * mutex) and the slot (through dlock_zk_own_start, under `mu`).
 */
#include <stdio.h>
#include <string.h>

#include "zookeeper_internal.h"

struct pipe {
	struct zk_attempt *a;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int pending;    /* completions still to come */
	int create_rc;
	int look_rc;
	struct Stat st;
};

static void done_locked(struct pipe *p)
{
	if (--p->pending == 0)
		pthread_cond_signal(&p->cond);
}

static void created(int rc, const char *path, const struct Stat *st, const void *data)
{
	struct pipe *p = (struct pipe *)data;
	struct zk_attempt *a = p->a;
	dlock_zk_log_enter(a->c); /* the completion thread of one of the client's handles */
	if (rc == ZOK && path && st) {
		snprintf(a->lk->node, sizeof a->lk->node, "%s", path);
		a->own = strrchr(a->lk->node, '/') + 1;
		dlock_zk_own_start(a->c, a->lk); /* before any event of the look's watch */
	} else if (rc == ZOK) {
		rc = ZSYSTEMERROR; /* never: a created node comes with its name and stat */
	}
	pthread_mutex_lock(&p->mu);
	p->create_rc = rc;
	if (rc == ZOK)
		p->st = *st;
	done_locked(p);
	pthread_mutex_unlock(&p->mu);
}

static void listed(int rc, const struct String_vector *kids, const void *data)
{
	struct pipe *p = (struct pipe *)data;
	struct zk_attempt *a = p->a;
	pthread_mutex_lock(&p->mu);
	/* The create's completion came first: a->own is set when it made our node. */
	if (rc == ZOK && p->create_rc == ZOK && kids) {
		dlock_zk_look_at(a, kids, &a->look);
		a->have_look = a->look.found && !a->look.dups;
	}
	p->look_rc = rc;
	done_locked(p);
	pthread_mutex_unlock(&p->mu);
}

dlock_status dlock_zk_create_and_look(struct zk_attempt *a)
{
	char prefix[ZK_PATH_MAX];
	struct pipe p = { .a = a, .create_rc = ZK_CREATE_UNSENT, .look_rc = ZK_CREATE_UNSENT };
	dlock_zk_node_prefix(a, prefix, sizeof prefix);
	a->have_look = 0;
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cond, NULL);
	/* Counted before sending: a completion may run before the call that sent its request returns. */
	p.pending = 2;
	int64_t sent = dlock_monotonic_ns();
	int rc = zoo_acreate2(a->s->zh, prefix, a->data, a->data ? a->datalen : -1, dlock_zk_acl(a->c),
	                      ZOO_EPHEMERAL_SEQUENTIAL, created, &p);
	if (rc == ZOK) {
		int sent_look = zoo_awget_children(a->s->zh, a->parent, dlock_zk_own_watcher, a->lk->slot, listed, &p);
		pthread_mutex_lock(&p.mu);
		if (sent_look != ZOK)
			p.pending--; /* no completion of it will come */
		while (p.pending > 0)
			pthread_cond_wait(&p.cond, &p.mu);
		rc = p.create_rc;
		pthread_mutex_unlock(&p.mu);
		if (p.look_rc != ZK_CREATE_UNSENT)
			dlock_zk_answered(a, p.look_rc, sent);
	}
	pthread_cond_destroy(&p.cond);
	pthread_mutex_destroy(&p.mu);
	rc = dlock_zk_answered(a, rc, sent);
	if (rc == ZOK) {
		a->lk->czxid = p.st.czxid;
		a->lk->version = p.st.version;
		return DLOCK_OK;
	}
	a->have_look = 0;
	dlock_status st = dlock_zk_protected_create(a, rc);
	if (st != DLOCK_OK || a->again)
		return st;
	a->own = strrchr(a->lk->node, '/') + 1;
	dlock_zk_own_start(a->c, a->lk);
	return DLOCK_OK;
}
