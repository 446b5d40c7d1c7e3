/*
 * The held scenario: one dlock client acquires N distinct names, holds
 * them for --hold while its renewals run, then releases them.  What it
 * costs to keep many locks alive: acquisitions/s of the acquiring part,
 * renewals/s (dlock_client_get_stats), locks lost (a lost-lock callback, or
 * a release that said DLOCK_ENOTHELD: each lock counted once), the client's
 * memory per lock ((RSS at the end of the hold - RSS before the first
 * acquisition) / N, in the process that holds them) and the servers' CPU
 * time during the hold (bench_meter).  No raw client: the cost is dlock's
 * own bookkeeping and renewals.
 *
 * The worker (a child process, like every worker) and the controller move
 * a state along in the shared region (bench_state_set, bench_state_wait),
 * so that the servers' CPU is read exactly at the hold's two ends: the
 * worker says when every lock is held, the controller when the hold is
 * over, the worker when all are released.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define HELD_WAIT_MS 10000
/* How often a wait for the other side also looks at stop, failure and progress. */
#define LOOK_NS (100 * BENCH_NS_PER_MS)
/* No lock acquired or released for this long: the worker is stuck. */
#define STALL_NS (30 * BENCH_NS_PER_S)

/* ------------------------------------------------------------ worker */

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
		bench_state_wait(&sh->held_state, state, LOOK_NS);
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

/* ------------------------------------------------------------ controller */

struct held_ctl {
	struct bench_meter *meter;
	int64_t hold_ns; /* the servers' window: the hold, as the controller timed it */
	int done;
};

/* Wait until the worker has moved the state on to `want`; 0, or -1 when it failed or stalled. */
static int await_worker(struct bench_phase *ph, int want)
{
	struct bench_slot *s = &ph->sh->slots[0];
	uint64_t seen = 0;
	int64_t moved = bench_now_ns();
	for (int state; (state = atomic_load(&ph->sh->held_state)) < want;) {
		uint64_t now_seen = atomic_load(&s->ops) + atomic_load(&s->released);
		int64_t now = bench_now_ns();
		if (now_seen != seen) {
			seen = now_seen;
			moved = now;
		}
		if (atomic_load(&ph->sh->failed) || now - moved > STALL_NS)
			return -1;
		bench_state_wait(&ph->sh->held_state, state, LOOK_NS);
	}
	return 0;
}

static void held_control(struct bench_phase *ph, void *arg)
{
	struct held_ctl *hc = arg;
	if (await_worker(ph, BENCH_HELD_HOLDING) != 0)
		return;
	bench_meter_begin(hc->meter);
	int64_t t0 = bench_now_ns();
	bench_progress_until(ph, t0 + ph->duration_ms * BENCH_NS_PER_MS, "hold");
	bench_meter_end(hc->meter);
	hc->hold_ns = bench_now_ns() - t0;
	bench_state_set(&ph->sh->held_state, BENCH_HELD_RELEASE);
	hc->done = await_worker(ph, BENCH_HELD_DONE) == 0;
}

/* The lease the acquisitions asked for: --lease, else the URI's ttl, else dlock's default. */
static int64_t held_lease(const struct bench_opts *o, const char *uri)
{
	char text[32];
	int64_t ms;
	if (o->lease_given)
		return o->lease_ms;
	if (bench_uri_param(uri, "ttl", text, sizeof text) == 0 && dlock_duration_parse(text, 1, &ms) == DLOCK_OK)
		return ms;
	return 30000;
}

static void keep_held(struct bench_result *r, const struct bench_slot *s, const struct held_ctl *hc)
{
	r->ops = atomic_load(&s->ops);
	r->errors = s->errors;
	r->acq = s->acq;
	r->rel = s->rel;
	r->ops_per_s = s->acquire_ns > 0 ? (double)r->ops / ((double)s->acquire_ns / 1e9) : 0;
	r->duration_ms = hc->hold_ns / BENCH_NS_PER_MS;
	r->renewals_per_s = s->hold_ns > 0 ? (double)s->renewals / ((double)s->hold_ns / 1e9) : 0;
	r->lost_reported = s->lost_reported;
	r->release_notheld = s->release_notheld;
	r->locks_lost = s->locks_lost;
	/* RSS can shrink (the allocator gave pages back): that is no memory per lock, not an unknown. */
	r->client_bytes_per_lock = s->rss_before < 0 || s->rss_held < 0 || !r->ops ? -1
	                           : s->rss_held > s->rss_before ? (double)(s->rss_held - s->rss_before) / (double)r->ops
	                                                         : 0;
	r->server_cpu_ms = hc->meter->cpu_us >= 0 ? hc->meter->cpu_us / 1000.0 : -1;
	snprintf(r->server_note, sizeof r->server_note, "%s", hc->meter->note);
}

int bench_run_held(const struct bench_opts *o, const struct bench_target *t, int locks, int index,
                   struct bench_result *r)
{
	struct bench_meter meter;
	struct held_ctl hc = { .meter = &meter };
	struct bench_phase ph = { .o = o, .uri = t->uri, .masked = r->uri, .sc = BENCH_HELD, .clients = 1,
		                  .threads = 1, .processes = 1, .duration_ms = o->hold_ms,
		                  .lease_ms = o->lease_given ? o->lease_ms : 0, .locks = locks };
	r->sc = BENCH_HELD;
	r->clients = r->threads = r->processes = 1;
	r->locks = locks;
	r->lease_ms = held_lease(o, t->uri);
	r->duration_ms = o->hold_ms;
	r->server_cpu_ms = r->client_bytes_per_lock = -1;
	r->server_cpu_us_per_acq = r->raw_server_cpu_us_per_acq = r->redis_cmds_per_acq = r->raw_redis_cmds_per_acq = -1;
	r->client_cpu_us_per_acq = r->raw_client_cpu_us_per_acq = -1;
	bench_meter_init(&meter, t, NULL);
	snprintf(ph.name, sizeof ph.name, "bench-held-%d-%d", (int)getpid(), index);
	ph.sh = bench_shared_new(1, 0);
	if (!ph.sh) {
		snprintf(r->error, sizeof r->error, "cannot map the shared region");
		r->failed = 1;
	} else if (bench_phase_run(&ph, held_control, &hc, r->error, sizeof r->error) != 0 || !hc.done) {
		if (!r->error[0])
			snprintf(r->error, sizeof r->error, "the client holding the locks stopped making progress");
		r->failed = 1;
	} else {
		keep_held(r, &ph.sh->slots[0], &hc);
	}
	bench_shared_free(ph.sh);
	bench_meter_close(&meter);
	return r->failed ? -1 : 0;
}
