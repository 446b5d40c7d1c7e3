/*
 * The worker loops of the uncontended and contended scenarios, once
 * through dlock and once through the raw client, with the same
 * bookkeeping so that both sides are measured the same way.
 *
 * uncontended: each worker has a name of its own; acquire, release, again.
 * contended:   every worker uses one name; acquire, a short critical
 *              section, release.  scale is the same with many waiters.  Before releasing, the holder writes the
 *              time and its id to the shared region; the next holder reads
 *              them right after its acquire returns (the lock orders the
 *              write before the read), which gives the handoff latency
 *              across processes on the one monotonic clock.
 */
#include <stdio.h>

#include "bench.h"

#define ERROR_BACKOFF_NS (20 * BENCH_NS_PER_MS)
#define CONTENDED_WAIT_MS 30000

void bench_critical_section(int cs_us)
{
	if (cs_us <= 0)
		return;
	/* Busy, not asleep: a sleeping holder would measure the scheduler's wake-up too. */
	int64_t until = bench_now_ns() + (int64_t)cs_us * 1000;
	while (bench_now_ns() < until)
		;
}

void bench_note_acquired(struct bench_worker *w, int64_t t_call, int64_t t_acq)
{
	struct bench_shared *sh = w->ph->sh;
	int last = atomic_load_explicit(&sh->last_releaser, memory_order_acquire);
	int64_t released = atomic_load_explicit(&sh->last_release_ns, memory_order_acquire);
	if (t_acq > atomic_load(&sh->stop_ns))
		return;
	if (last == w->id)
		w->slot->reacquired++;
	else if (last >= 0 && released >= t_call) /* we were waiting when it was released */
		bench_hist_add(&w->slot->handoff, t_acq - released);
}

void bench_note_releasing(struct bench_worker *w, int64_t t_end)
{
	struct bench_shared *sh = w->ph->sh;
	atomic_store_explicit(&sh->last_release_ns, t_end, memory_order_release);
	atomic_store_explicit(&sh->last_releaser, w->id, memory_order_release);
}

void bench_count_cycle(struct bench_worker *w, int64_t acquire_ns, int64_t release_ns, int64_t t2)
{
	if (t2 > atomic_load(&w->ph->sh->stop_ns))
		return;
	bench_hist_add(&w->slot->acq, acquire_ns);
	bench_hist_add(&w->slot->rel, release_ns);
	atomic_fetch_add_explicit(&w->slot->ops, 1, memory_order_relaxed);
}

static void lock_name(const struct bench_worker *w, char *out, size_t len)
{
	if (w->ph->sc == BENCH_UNCONTENDED)
		snprintf(out, len, "%s-%d", w->ph->name, w->id);
	else
		snprintf(out, len, "%s", w->ph->name);
}

/* One dlock cycle; 0, or -1 after an error (noted). */
static int dlock_cycle(struct bench_worker *w, dlock_lock *lock, const dlock_acquire_options *opts)
{
	int contended = bench_one_name(w->ph->sc);
	int64_t t0 = bench_now_ns();
	dlock_status st = dlock_acquire(lock, opts);
	int64_t t1 = bench_now_ns();
	if (st != DLOCK_OK) {
		if (!atomic_load(&w->ph->sh->stop))
			bench_slot_error(w->slot, "acquire: %s: %s", dlock_status_name(st),
			                 dlock_client_errmsg(w->client));
		return -1;
	}
	int64_t t_end = t1;
	if (contended) {
		bench_note_acquired(w, t0, t1);
		bench_critical_section(w->ph->o->cs_us);
		t_end = bench_now_ns();
		bench_interval_add(w->ph->sh, w->id, t1, t_end, 0);
		bench_note_releasing(w, t_end);
	}
	st = dlock_release(lock);
	int64_t t2 = bench_now_ns();
	if (st != DLOCK_OK) {
		bench_slot_error(w->slot, "release: %s: %s", dlock_status_name(st), dlock_client_errmsg(w->client));
		return -1;
	}
	bench_count_cycle(w, t1 - t0, t2 - t_end, t2);
	return 0;
}

void bench_work_dlock(struct bench_worker *w)
{
	char name[160];
	dlock_lock *lock = NULL;
	lock_name(w, name, sizeof name);
	if (dlock_lock_new(w->client, name, &lock) != DLOCK_OK) {
		bench_slot_error(w->slot, "dlock_lock_new: %s", dlock_client_errmsg(w->client));
		return;
	}
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	opts.wait_ms = CONTENDED_WAIT_MS;
	opts.fence = w->ph->o->fencing ? DLOCK_ON : DLOCK_OFF;
	while (!atomic_load(&w->ph->sh->stop))
		if (dlock_cycle(w, lock, &opts) != 0 && !atomic_load(&w->ph->sh->stop))
			bench_sleep_ns(ERROR_BACKOFF_NS);
	dlock_lock_free(lock);
}

/* One raw cycle, measured exactly as dlock_cycle(). */
static int raw_cycle(struct bench_worker *w, const char *name)
{
	const struct bench_raw *raw = w->ph->raw;
	char err[200];
	int64_t t0 = bench_now_ns();
	int rc = raw->acquire(w->raw_conn, name, &w->ph->sh->stop, err, sizeof err);
	int64_t t1 = bench_now_ns();
	if (rc <= 0) {
		if (rc < 0)
			bench_slot_error(w->slot, "raw acquire: %s", err);
		return -1;
	}
	int64_t t_end = t1;
	if (bench_one_name(w->ph->sc)) {
		bench_note_acquired(w, t0, t1);
		bench_critical_section(w->ph->o->cs_us);
		t_end = bench_now_ns();
		bench_interval_add(w->ph->sh, w->id, t1, t_end, 0);
		bench_note_releasing(w, t_end);
	}
	rc = raw->release(w->raw_conn, name, err, sizeof err);
	int64_t t2 = bench_now_ns();
	if (rc != 0) {
		bench_slot_error(w->slot, "raw release: %s", err);
		return -1;
	}
	bench_count_cycle(w, t1 - t0, t2 - t_end, t2);
	return 0;
}

void bench_work_raw(struct bench_worker *w)
{
	char name[160];
	lock_name(w, name, sizeof name);
	while (!atomic_load(&w->ph->sh->stop))
		if (raw_cycle(w, name) != 0 && !atomic_load(&w->ph->sh->stop))
			bench_sleep_ns(ERROR_BACKOFF_NS);
}
