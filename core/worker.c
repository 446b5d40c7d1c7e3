/*
 * Worker threads of a loop client; see worker.h.  A queue under one mutex,
 * threads that sleep on a condition while idle, and a list of every thread
 * made, for the final join.  Threads block every signal, as the client's
 * other threads do.
 */
#include "worker.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

struct worker_thread {
	struct worker_thread *next;
	pthread_t id;
};

struct dlock_workers {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct dlock_job *head, *tail;
	unsigned idle;
	int stop;
	struct worker_thread *threads;
};

struct dlock_workers *dlock_workers_new(void)
{
	struct dlock_workers *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cond, NULL);
	return w;
}

static void *worker_main(void *arg)
{
	struct dlock_workers *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct dlock_job *job = w->head;
		if (job) {
			w->head = job->next;
			if (!w->head)
				w->tail = NULL;
			pthread_mutex_unlock(&w->mu);
			void (*after)(struct dlock_job *) = job->after;
			job->run(job); /* may free it, when it has no `after` */
			pthread_mutex_lock(&w->mu);
			if (after) {
				w->idle++; /* free already for a job that `after` leads to */
				pthread_mutex_unlock(&w->mu);
				after(job);
				pthread_mutex_lock(&w->mu);
				w->idle--;
			}
			continue;
		}
		if (w->stop)
			break;
		w->idle++;
		pthread_cond_wait(&w->cond, &w->mu);
		w->idle--;
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* A new thread for the pool; w->mu held. */
static dlock_status spawn_locked(struct dlock_workers *w)
{
	struct worker_thread *t = malloc(sizeof *t);
	if (!t)
		return DLOCK_ENOMEM;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&t->id, NULL, worker_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		free(t);
		return DLOCK_ENOMEM;
	}
	t->next = w->threads;
	w->threads = t;
	return DLOCK_OK;
}

dlock_status dlock_workers_submit(struct dlock_workers *w, struct dlock_job *job)
{
	pthread_mutex_lock(&w->mu);
	/* Jobs queued ahead of this one each take an idle thread first. */
	unsigned queued = 0;
	for (struct dlock_job *j = w->head; j; j = j->next)
		queued++;
	if (w->idle <= queued) {
		dlock_status st = spawn_locked(w);
		if (st != DLOCK_OK) {
			pthread_mutex_unlock(&w->mu);
			return st;
		}
	}
	job->next = NULL;
	if (w->tail)
		w->tail->next = job;
	else
		w->head = job;
	w->tail = job;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->mu);
	return DLOCK_OK;
}

void dlock_workers_destroy(struct dlock_workers *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_broadcast(&w->cond);
	struct worker_thread *t = w->threads;
	w->threads = NULL;
	pthread_mutex_unlock(&w->mu);
	while (t) {
		struct worker_thread *next = t->next;
		pthread_join(t->id, NULL);
		free(t);
		t = next;
	}
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->mu);
	free(w);
}
