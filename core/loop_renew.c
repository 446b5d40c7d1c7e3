/*
 * The background's driver calls on the loop, for a loop client whose
 * driver runs there (DLOCK_FACT_LOOP_IO): the renewals, the release of
 * what is left of a lost acquisition and the release at the end of a
 * minimum hold, which background.c decides in the loop's tick
 * (loop_native.c), go out through the driver's extend_start() and
 * release_start() instead of blocking a thread, and their answers come
 * back to background.c (dlock_background_answer_locked()).  So such a
 * client holds its locks with no thread of its own.
 *
 * While its call is out, a handle is marked loop_call, as it is for the
 * application's calls on the loop: every other call on it waits for the
 * answer (the application's through async.c, which parks them), and its
 * renewal is out of the timetable, so that the driver sees one call at a
 * time on each lock.  Each call counts in ops_working, so that a close
 * waits for it before the driver closes, and holds a reference on the
 * handle, so that freeing it waits for the answer too.
 *
 * Ownership: a call is allocated when it starts and freed when its answer
 * has been applied.  Threads: the loop's only.  Errors: a call that
 * cannot be allocated is not started (the caller makes it fail as a
 * transient error); a call the driver refuses to start is answered with
 * the driver's status, as the blocking call would be.
 */
#include "async.h"

#include <stdlib.h>

struct bg_call {
	struct dlock_call call; /* first member */
	struct dlock_lock *l;
	enum dlock_bg_call what;
	uint64_t generation;
	int64_t lease_ns;
	int64_t sent;
	dlock_error err;
};

static void bg_call_ended(struct dlock_call *call, dlock_status st)
{
	struct bg_call *b = (struct bg_call *)call;
	struct dlock_lock *l = b->l;
	struct dlock_client *c = l->client;
	pthread_mutex_lock(&c->mu);
	dlock_async_work_done_locked(c);
	dlock_lock_end_call(l); /* loop_call off: the timetable and the parked calls go on */
	dlock_background_answer_locked(l, b->what, b->generation, b->lease_ns, b->sent, st, b->err.msg);
	pthread_mutex_unlock(&c->mu);
	free(b);
	dlock_loop_kick(c); /* a cleanup or a linger's end may have freed the name */
	dlock_async_unref(l);
}

int dlock_loop_bg_call_locked(struct dlock_lock *l, enum dlock_bg_call what, uint64_t generation, int64_t lease_ns)
{
	struct dlock_client *c = l->client;
	if (!c->loop_io)
		return 0;
	struct bg_call *b = calloc(1, sizeof *b);
	if (!b) { /* the caller fails a renewal as a transient error, and makes a release blocking */
		dlock_client_logf(c, DLOCK_LOG_ERROR, "out of memory: a background call on the loop was not made");
		return 0;
	}
	b->l = l;
	b->what = what;
	b->generation = generation;
	b->lease_ns = lease_ns;
	dlock_call_init(&b->call, c, bg_call_ended);
	l->busy = 0; /* the renewal timetable's mark, now the loop call's */
	l->loop_call = 1;
	l->async_refs++;
	c->ops_working++;
	dlock_sched_update(l);
	pthread_mutex_unlock(&c->mu);
	b->sent = dlock_monotonic_ns();
	dlock_status st;
	if (what == DLOCK_BG_RENEW)
		st = c->driver->extend_start(c->backend, l->lk, lease_ns / 1000000, &b->err, &b->call);
	else
		st = c->driver->release_start(c->backend, l->lk, &b->err, &b->call);
	if (st != DLOCK_OK) /* not started: its answer on the next turn, as the driver's */
		dlock_call_done(&b->call, st);
	pthread_mutex_lock(&c->mu);
	return 1;
}
