/*
 * The worker loops of the semaphore and read-mostly scenarios: the
 * contended workload (every worker on one name, the same critical section)
 * on a semaphore of N permits, and on a read-write lock whose acquisitions
 * are shared with probability --read-ratio and exclusive otherwise.
 *
 * Holders are counted in the shared region as they enter and leave the
 * critical section, which gives the most seen at once and the entries that
 * found more than the lock allows: a semaphore's (N+1)th holder, a writer
 * beside a reader or another writer.  Every counter operation is
 * sequentially consistent, so of two holders that overlap, the one that
 * enters second sees the first.
 */
#include <stdio.h>

#include "bench.h"

#define ERROR_BACKOFF_NS (20 * BENCH_NS_PER_MS)
#define KIND_WAIT_MS 30000

static void raise_to(_Atomic int *most, int v)
{
	int seen = atomic_load(most);
	while (v > seen && !atomic_compare_exchange_weak(most, &seen, v))
		;
}

/* A holder enters the critical section; `shared`: a reader of the read-write lock. */
static void enter(struct bench_shared *sh, enum bench_scenario sc, uint32_t permits, int shared)
{
	if (sc == BENCH_SEMAPHORE) {
		int now = atomic_fetch_add(&sh->holders, 1) + 1;
		raise_to(&sh->most_holders, now);
		if ((uint32_t)now > permits)
			atomic_fetch_add(&sh->violations, 1);
	} else if (shared) {
		raise_to(&sh->most_readers, atomic_fetch_add(&sh->readers, 1) + 1);
		if (atomic_load(&sh->writers) > 0)
			atomic_fetch_add(&sh->violations, 1);
	} else {
		int writers = atomic_fetch_add(&sh->writers, 1) + 1;
		if (writers > 1 || atomic_load(&sh->readers) > 0)
			atomic_fetch_add(&sh->violations, 1);
	}
}

static void leave(struct bench_shared *sh, enum bench_scenario sc, int shared)
{
	atomic_fetch_sub(sc == BENCH_SEMAPHORE ? &sh->holders : shared ? &sh->readers : &sh->writers, 1);
}

/* xorshift64*: each worker's own sequence of modes, the same from run to run. */
static int next_shared(uint64_t *state, double read_ratio)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return (double)((x * 2685821657736338717ULL) >> 11) / 9007199254740992.0 < read_ratio;
}

static uint64_t seed_of(const struct bench_worker *w)
{
	return ((uint64_t)w->id + 1) * 0x9E3779B97F4A7C15ULL;
}

/* The critical section, between an acquisition that returned at t1 (the call began at t0) and its release. */
static int64_t hold(struct bench_worker *w, int shared, int64_t t0, int64_t t1)
{
	struct bench_phase *ph = w->ph;
	if (ph->sc == BENCH_SEMAPHORE)
		bench_note_acquired(w, t0, t1);
	enter(ph->sh, ph->sc, ph->o->permits, shared);
	bench_critical_section(ph->o->cs_us);
	int64_t t_end = bench_now_ns();
	leave(ph->sh, ph->sc, shared);
	if (ph->sc == BENCH_SEMAPHORE)
		bench_note_releasing(w, t_end);
	return t_end;
}

static void count(struct bench_worker *w, int shared, int64_t t0, int64_t t1, int64_t t_end, int64_t t2)
{
	if (w->ph->sc == BENCH_READ_MOSTLY && t2 <= atomic_load(&w->ph->sh->stop_ns))
		bench_hist_add(shared ? &w->slot->acq_read : &w->slot->acq_write, t1 - t0);
	bench_count_cycle(w, t1 - t0, t2 - t_end, t2);
}

static int kind_cycle(struct bench_worker *w, dlock_lock *lock, dlock_acquire_options *opts, int shared)
{
	opts->mode = shared ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
	int64_t t0 = bench_now_ns();
	dlock_status st = dlock_acquire(lock, opts);
	int64_t t1 = bench_now_ns();
	if (st != DLOCK_OK) {
		if (!atomic_load(&w->ph->sh->stop))
			bench_slot_error(w->slot, "acquire: %s: %s", dlock_status_name(st),
			                 dlock_client_errmsg(w->client));
		return -1;
	}
	int64_t t_end = hold(w, shared, t0, t1);
	st = dlock_release(lock);
	int64_t t2 = bench_now_ns();
	if (st != DLOCK_OK) {
		bench_slot_error(w->slot, "release: %s: %s", dlock_status_name(st), dlock_client_errmsg(w->client));
		return -1;
	}
	count(w, shared, t0, t1, t_end, t2);
	return 0;
}

static dlock_status kind_new(dlock_client *client, const struct bench_opts *o, enum bench_scenario sc,
                             const char *name, dlock_lock **lock)
{
	return sc == BENCH_SEMAPHORE ? dlock_semaphore_new(client, name, o->permits, lock)
	                             : dlock_rwlock_new(client, name, lock);
}

void bench_work_kind(struct bench_worker *w)
{
	struct bench_phase *ph = w->ph;
	dlock_lock *lock = NULL;
	dlock_status st = kind_new(w->client, ph->o, ph->sc, ph->name, &lock);
	if (st != DLOCK_OK) {
		bench_slot_error(w->slot, "%s: %s: %s", ph->sc == BENCH_SEMAPHORE ? "dlock_semaphore_new" : "dlock_rwlock_new",
		                 dlock_status_name(st), dlock_client_errmsg(w->client));
		return;
	}
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	opts.wait_ms = KIND_WAIT_MS;
	opts.fence = ph->o->fencing ? DLOCK_ON : DLOCK_OFF;
	uint64_t rng = seed_of(w);
	while (!atomic_load(&ph->sh->stop)) {
		int shared = ph->sc == BENCH_READ_MOSTLY && next_shared(&rng, ph->o->read_ratio);
		if (kind_cycle(w, lock, &opts, shared) != 0 && !atomic_load(&ph->sh->stop))
			bench_sleep_ns(ERROR_BACKOFF_NS);
	}
	dlock_lock_free(lock);
}

/* One raw cycle of read-mostly, measured exactly as kind_cycle(). */
static int raw_cycle(struct bench_worker *w, int shared)
{
	const struct bench_raw *raw = w->ph->raw;
	char err[200];
	int64_t t0 = bench_now_ns();
	int rc = (shared ? raw->acquire_shared : raw->acquire)(w->raw_conn, w->ph->name, &w->ph->sh->stop, err,
	                                                       sizeof err);
	int64_t t1 = bench_now_ns();
	if (rc <= 0) {
		if (rc < 0)
			bench_slot_error(w->slot, "raw acquire%s: %s", shared ? " shared" : "", err);
		return -1;
	}
	int64_t t_end = hold(w, shared, t0, t1);
	rc = (shared ? raw->release_shared : raw->release)(w->raw_conn, w->ph->name, err, sizeof err);
	int64_t t2 = bench_now_ns();
	if (rc != 0) {
		bench_slot_error(w->slot, "raw release%s: %s", shared ? " shared" : "", err);
		return -1;
	}
	count(w, shared, t0, t1, t_end, t2);
	return 0;
}

void bench_work_kind_raw(struct bench_worker *w)
{
	uint64_t rng = seed_of(w);
	while (!atomic_load(&w->ph->sh->stop)) {
		int shared = next_shared(&rng, w->ph->o->read_ratio);
		if (raw_cycle(w, shared) != 0 && !atomic_load(&w->ph->sh->stop))
			bench_sleep_ns(ERROR_BACKOFF_NS);
	}
}

int bench_kind_supported(const struct bench_opts *o, const char *uri, enum bench_scenario sc, char *why,
                         size_t whylen)
{
	dlock_client *c = NULL;
	dlock_lock *lock = NULL;
	char err[256];
	int64_t v = 0;
	int sem = sc == BENCH_SEMAPHORE;
	dlock_feature f = sem ? DLOCK_FEATURE_SEMAPHORE : DLOCK_FEATURE_RWLOCK;
	if (dlock_client_open(&c, uri, NULL, err, sizeof err) != DLOCK_OK) {
		snprintf(why, whylen, "%s", err);
		return -1;
	}
	int rc = 1;
	dlock_status st = dlock_client_feature(c, f, &v);
	if (st != DLOCK_OK || v == 0) {
		snprintf(why, whylen, "not supported: %s", st != DLOCK_OK ? dlock_client_errmsg(c)
		         : sem ? "DLOCK_FEATURE_SEMAPHORE is none" : "DLOCK_FEATURE_RWLOCK is none");
		rc = 0;
	} else if ((st = kind_new(c, o, sc, "bench-kind-probe", &lock)) != DLOCK_OK) {
		snprintf(why, whylen, "%s%s: %s", st == DLOCK_ENOTSUP ? "not supported: " : "",
		         sem ? "dlock_semaphore_new" : "dlock_rwlock_new", dlock_client_errmsg(c));
		rc = st == DLOCK_ENOTSUP ? 0 : -1;
	}
	dlock_lock_free(lock);
	dlock_client_close(c);
	return rc;
}
