/*
 * Worker threads of a loop client (worker.c): where the blocking calls of
 * a backend that cannot run on the loop go, one job per thread at a time.
 * A job is intrusive (its owner keeps it alive until it has run) and runs
 * once.  Threads are made when a job finds none idle, so that a job that
 * waits long (an acquisition) never holds up another; idle ones are kept
 * for the next jobs and all are joined by dlock_workers_destroy().
 *
 * Threads: submit from any thread; destroy from a thread that is not a
 * worker, once no job will be submitted again.  Errors: submit returns
 * DLOCK_ENOMEM when no thread can be made (the job does not run).
 */
#ifndef DLOCK_CORE_WORKER_H
#define DLOCK_CORE_WORKER_H

#include "dlock/dlock.h"

struct dlock_workers;

struct dlock_job {
	struct dlock_job *next;
	void (*run)(struct dlock_job *job);   /* the blocking part */
	void (*after)(struct dlock_job *job); /* may be NULL: called once the thread counts as free again (so that
	                                         what it sets off — the loop submitting the next job — finds it
	                                         free); may free the job */
};

/** A pool with no thread yet; NULL when out of memory. */
struct dlock_workers *dlock_workers_new(void);

/** Run `job` on a worker thread. */
dlock_status dlock_workers_submit(struct dlock_workers *w, struct dlock_job *job);

/** Let the jobs finish, join every thread and free the pool (NULL is fine). */
void dlock_workers_destroy(struct dlock_workers *w);

#endif /* DLOCK_CORE_WORKER_H */
