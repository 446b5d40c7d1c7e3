/*
 * Per-thread error detail of each client (dlock_client_errmsg()), for any
 * number of threads.
 *
 * Every (thread, client) pair with a failure has one record holding the
 * message.  A record sits in two lists: its thread's (reached through the
 * registry's thread-specific key) and its client's hub.  Only the record's
 * thread writes or reads the message, so a pointer handed out stays valid
 * whatever other threads do, until that thread's next failure on the client
 * (it then holds the new text), the client is freed, or the thread exits.
 * Whichever side goes first frees the record:
 *   - thread exit: the key's destructor frees every record of the thread;
 *   - client free: dlock_errs_close() frees every record of the client.
 * The hub is reference counted apart from the client, so an exiting thread
 * may still take its mutex while the client is being freed.
 *
 * Locks: hub->mu before thread->mu; client->mu, when a caller holds it,
 * before both.  thread->mu guards the thread's list and the messages of its
 * records; hub->mu guards the hub's list.  A record is in both lists or in
 * none, and changes of either list take both locks.
 */
#include "internal.h"
#include "registry.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct err_record {
	struct dlock_errs *hub;
	struct err_thread *thread;
	struct err_record *tprev, *tnext; /* the thread's list */
	struct err_record *hprev, *hnext; /* the hub's list */
	char msg[DLOCK_ERROR_MAX];
};

/* The thread-specific value of the registry's key: one per thread. */
struct err_thread {
	pthread_mutex_t mu;
	struct err_record *list;
};

/* One per client. */
struct dlock_errs {
	pthread_mutex_t mu;
	atomic_uint refs;         /* the client's, plus one per exiting thread at work on it */
	pthread_key_t key;        /* the registry's key */
	struct err_record *list;
	size_t count;             /* records in `list` */
};

static void hub_unref(struct dlock_errs *hub)
{
	if (atomic_fetch_sub_explicit(&hub->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_mutex_destroy(&hub->mu);
	free(hub);
}

/* Take `r` out of its thread's list.  thread->mu held. */
static void unlink_thread(struct err_record *r)
{
	*(r->tprev ? &r->tprev->tnext : &r->thread->list) = r->tnext;
	if (r->tnext)
		r->tnext->tprev = r->tprev;
}

/* Take `r` out of both lists and free it.  hub->mu and thread->mu held. */
static void record_free(struct err_record *r)
{
	struct dlock_errs *hub = r->hub;
	unlink_thread(r);
	*(r->hprev ? &r->hprev->hnext : &hub->list) = r->hnext;
	if (r->hnext)
		r->hnext->hprev = r->hprev;
	hub->count--;
	free(r);
}

/* The calling thread's record for `hub`, or NULL.  t->mu held. */
static struct err_record *find_locked(struct err_thread *t, const struct dlock_errs *hub)
{
	for (struct err_record *r = t->list; r; r = r->tnext)
		if (r->hub == hub)
			return r;
	return NULL;
}

/*
 * The key's destructor, at thread exit.  Each record needs its hub's mutex,
 * which comes before t->mu: pin the hub, drop t->mu, take both in order and
 * look again (the client may have freed the record meanwhile).
 */
static void thread_exit(void *arg)
{
	struct err_thread *t = arg;
	for (;;) {
		pthread_mutex_lock(&t->mu);
		struct err_record *r = t->list;
		if (!r) {
			pthread_mutex_unlock(&t->mu);
			break;
		}
		struct dlock_errs *hub = r->hub;
		atomic_fetch_add_explicit(&hub->refs, 1, memory_order_relaxed);
		pthread_mutex_unlock(&t->mu);

		pthread_mutex_lock(&hub->mu);
		pthread_mutex_lock(&t->mu);
		r = find_locked(t, hub);
		if (r)
			record_free(r);
		pthread_mutex_unlock(&t->mu);
		pthread_mutex_unlock(&hub->mu);
		hub_unref(hub);
	}
	/* No hub lists a record of t now, so nobody else can reach it. */
	pthread_mutex_destroy(&t->mu);
	free(t);
}

dlock_status dlock_errs_open(struct dlock_errs **out)
{
	struct dlock_errs *hub = calloc(1, sizeof *hub);
	if (!hub)
		return DLOCK_ENOMEM;
	dlock_status st = dlock_registry_thread_key(thread_exit, &hub->key);
	if (st != DLOCK_OK) {
		free(hub);
		return st;
	}
	pthread_mutex_init(&hub->mu, NULL);
	atomic_init(&hub->refs, 1);
	*out = hub;
	return DLOCK_OK;
}

void dlock_errs_close(struct dlock_errs *hub)
{
	if (!hub)
		return;
	pthread_mutex_lock(&hub->mu);
	/* A thread frees its own err_thread only once no hub lists its records. */
	struct err_record *next;
	for (struct err_record *r = hub->list; r; r = next) {
		struct err_thread *t = r->thread;
		next = r->hnext;
		pthread_mutex_lock(&t->mu);
		unlink_thread(r);
		pthread_mutex_unlock(&t->mu);
		free(r);
	}
	hub->list = NULL;
	hub->count = 0;
	pthread_mutex_unlock(&hub->mu);
	hub_unref(hub);
}

/* The calling thread's err_thread, made on first use; NULL when out of memory. */
static struct err_thread *self(const struct dlock_errs *hub, int create)
{
	struct err_thread *t = pthread_getspecific(hub->key);
	if (t || !create)
		return t;
	t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	pthread_mutex_init(&t->mu, NULL);
	if (pthread_setspecific(hub->key, t) != 0) {
		pthread_mutex_destroy(&t->mu);
		free(t);
		return NULL;
	}
	return t;
}

void dlock_errs_set(struct dlock_errs *hub, const char *msg)
{
	struct err_thread *t = self(hub, 1);
	if (!t)
		return; /* out of memory: the previous text (or "") stays */
	pthread_mutex_lock(&t->mu);
	struct err_record *r = find_locked(t, hub);
	if (r) {
		snprintf(r->msg, sizeof r->msg, "%s", msg);
		pthread_mutex_unlock(&t->mu);
		return;
	}
	pthread_mutex_unlock(&t->mu);

	/* Only this thread adds records to t, so none can appear meanwhile. */
	r = malloc(sizeof *r);
	if (!r)
		return;
	*r = (struct err_record){ .hub = hub, .thread = t };
	snprintf(r->msg, sizeof r->msg, "%s", msg);
	pthread_mutex_lock(&hub->mu);
	pthread_mutex_lock(&t->mu);
	r->tnext = t->list;
	if (t->list)
		t->list->tprev = r;
	t->list = r;
	r->hnext = hub->list;
	if (hub->list)
		hub->list->hprev = r;
	hub->list = r;
	hub->count++;
	pthread_mutex_unlock(&t->mu);
	pthread_mutex_unlock(&hub->mu);
}

const char *dlock_errs_get(struct dlock_errs *hub)
{
	struct err_thread *t = self(hub, 0);
	if (!t)
		return "";
	pthread_mutex_lock(&t->mu);
	struct err_record *r = find_locked(t, hub);
	pthread_mutex_unlock(&t->mu);
	return r ? r->msg : "";
}

size_t dlock_errs_count(struct dlock_errs *hub)
{
	pthread_mutex_lock(&hub->mu);
	size_t n = hub->count;
	pthread_mutex_unlock(&hub->mu);
	return n;
}
