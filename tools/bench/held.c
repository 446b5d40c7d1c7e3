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
 * The worker (held_worker.c, a child process like every worker) and the
 * controller here move a state along in the shared region
 * (bench_state_set, bench_state_wait), so that the servers' CPU is read
 * exactly at the hold's two ends: the worker says when every lock is held,
 * the controller when the hold is over, the worker when all are released.
 */
#include <stdio.h>
#include <unistd.h>

#include "bench.h"

/* No lock acquired or released for this long: the worker is stuck. */
#define STALL_NS (30 * BENCH_NS_PER_S)

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
		bench_state_wait(&ph->sh->held_state, state, BENCH_HELD_LOOK_NS);
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
