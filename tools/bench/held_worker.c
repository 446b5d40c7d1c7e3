/*
 * The worker of the held scenario (held.c is its controller): one dlock
 * client, in a child process like every worker, acquires N distinct
 * names, says so in the shared region, holds them until the controller
 * says the hold is over while its renewals run, then releases them.  Its
 * slot gets what it saw: the acquisitions and their latency, the
 * renewals, the locks lost (a lost-lock callback, or a release that said
 * DLOCK_ENOTHELD: each lock counted once) and its RSS before the first
 * acquisition and at the end of the hold.
 *
 * Threads: the worker's own; the lost-lock callback (the client's
 * background thread) only sets the lock's flag.  Errors: in the slot
 * (bench_slot_error) and the region's `failed`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"

#define HELD_WAIT_MS 10000

/* Resident set size of this process in bytes; -1 when /proc cannot say. */
static int64_t rss_bytes(void)
{
	long size, resident;
	FILE *f = fopen("/proc/self/statm", "re");
	int ok = f && fscanf(f, "%ld %ld", &size, &resident) == 2;
	if (f)
		fclose(f);
	return ok ? (int64_t)resident * sysconf(_SC_PAGESIZE) : -1;
}

/* On the client's background thread, at most once per acquisition: the lock's own flag. */
static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	(void)lock;
	(void)reason;
	(void)detail;
	atomic_store((_Atomic int *)userdata, 1);
}

static uint64_t renewals(dlock_client *c)
{
	dlock_client_stats st;
	return dlock_client_get_stats(c, &st) == DLOCK_OK ? st.renewals : 0;
}

/* Release every lock: its latency, and whether it had been lost (told, or ENOTHELD). */
static void release_all(struct bench_worker *w, dlock_lock **locks, _Atomic int *lost, int n)
{
	struct bench_slot *s = w->slot;
	for (int i = 0; i < n; i++) {
		int64_t t0 = bench_now_ns();
		dlock_status st = dlock_release(locks[i]);
		bench_hist_add(&s->rel, bench_now_ns() - t0);
		if (st == DLOCK_ENOTHELD)
			s->release_notheld++;
		else if (st != DLOCK_OK)
			bench_slot_error(s, "release: %s: %s", dlock_status_name(st), dlock_client_errmsg(w->client));
		int told = atomic_load(&lost[i]); /* no callback comes after the release has returned */
		s->lost_reported += (uint64_t)told;
		s->locks_lost += told || st == DLOCK_ENOTHELD;
		atomic_fetch_add(&s->released, 1);
	}
}

void bench_work_held(struct bench_worker *w)
{
	struct bench_shared *sh = w->ph->sh;
	struct bench_slot *s = w->slot;
	int n = w->ph->locks, got = 0, ok = 0;
	dlock_lock **locks = malloc((size_t)n * sizeof *locks);
	_Atomic int *lost = malloc((size_t)n * sizeof *lost);
	if (!locks || !lost) {
		bench_slot_error(s, "out of memory for %d locks", n);
		goto done;
	}
	/* Written now, so that the RSS before counts these arrays: the difference is dlock's alone. */
	for (int i = 0; i < n; i++) {
		locks[i] = NULL;
		atomic_init(&lost[i], 0);
	}
	s->rss_before = rss_bytes();
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	opts.wait_ms = HELD_WAIT_MS;
	opts.lease_ms = w->ph->lease_ms;
	opts.fence = w->ph->o->fencing ? DLOCK_ON : DLOCK_OFF;
	opts.on_lost = on_lost;
	int64_t t0 = bench_now_ns();
	for (; got < n && !atomic_load(&sh->stop); got++) {
		char name[160];
		snprintf(name, sizeof name, "%s-%d", w->ph->name, got);
		if (dlock_lock_new(w->client, name, &locks[got]) != DLOCK_OK) {
			bench_slot_error(s, "dlock_lock_new: %s", dlock_client_errmsg(w->client));
			goto done;
		}
		opts.lost_userdata = &lost[got];
		int64_t a = bench_now_ns();
		dlock_status st = dlock_acquire(locks[got], &opts);
		if (st != DLOCK_OK) {
			bench_slot_error(s, "acquire %d of %d: %s: %s", got + 1, n, dlock_status_name(st),
			                 dlock_client_errmsg(w->client));
			dlock_lock_free(locks[got]);
			goto done;
		}
		bench_hist_add(&s->acq, bench_now_ns() - a);
		atomic_fetch_add(&s->ops, 1);
	}
	s->acquire_ns = bench_now_ns() - t0;
	uint64_t renewed = renewals(w->client);
	int64_t held = bench_now_ns();
	bench_state_set(&sh->held_state, BENCH_HELD_HOLDING);
	for (int state; (state = atomic_load(&sh->held_state)) < BENCH_HELD_RELEASE && !atomic_load(&sh->stop);)
		bench_state_wait(&sh->held_state, state, BENCH_HELD_LOOK_NS);
	s->hold_ns = bench_now_ns() - held;
	s->renewals = renewals(w->client) - renewed;
	s->rss_held = rss_bytes();
	release_all(w, locks, lost, got);
	bench_state_set(&sh->held_state, BENCH_HELD_DONE);
	ok = 1;
done:
	if (!ok)
		atomic_store(&sh->failed, 1);
	for (int i = 0; locks && i < got; i++)
		dlock_lock_free(locks[i]); /* releases first what is still held (a failure half way) */
	free(locks);
	free(lost);
}
