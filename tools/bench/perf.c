/*
 * The uncontended and contended scenarios: the dlock phase, then the raw
 * phase with the same clients, threads and processes, so that every ratio
 * compares two measurements of one run on one machine state.
 *
 * scale is contended with many waiters, one client per process, and the
 * servers' own account of each phase (bench_meter): CPU time and commands,
 * per acquisition, beside dlock's and raw's throughput alike.
 *
 * While the dlock phase runs, a probe thread in the parent does one cheap
 * round trip (raw ping) every few milliseconds: round-trip times move with
 * load, so handoff latencies are compared with round trips measured under
 * the same load.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define PROBE_INTERVAL_NS (5 * BENCH_NS_PER_MS)

struct probe {
	const struct bench_raw *raw;
	const char *uri;
	_Atomic int stop;
	struct bench_hist rtt;
};

static void *probe_main(void *arg)
{
	struct probe *p = arg;
	char err[200];
	void *conn = p->raw->connect(p->uri, 0, err, sizeof err);
	while (conn && !atomic_load(&p->stop)) {
		int64_t t0 = bench_now_ns();
		if (p->raw->ping(conn) == 0)
			bench_hist_add(&p->rtt, bench_now_ns() - t0);
		bench_sleep_ns(PROBE_INTERVAL_NS);
	}
	if (conn)
		p->raw->close(conn);
	return NULL;
}

static void probed_control(struct bench_phase *ph, void *arg)
{
	struct probe *p = arg;
	pthread_t tid;
	atomic_store(&p->stop, 0);
	int started = pthread_create(&tid, NULL, probe_main, p) == 0;
	bench_progress_until(ph, ph->sh->go_ns + ph->duration_ms * BENCH_NS_PER_MS, "");
	atomic_store(&p->stop, 1);
	if (started)
		pthread_join(tid, NULL);
}

/* What the rounds of one side (dlock or raw) measured, summed over workers and rounds. */
struct totals {
	uint64_t ops, errors, reacquired, acquired, server_calls;
	uint64_t worker_ops[BENCH_MAX_WORKERS];
	double secs;
	struct bench_hist acq, rel, handoff;
	uint64_t overlaps, dropped;
	/* semaphore, read-mostly */
	int most_holders, most_readers;
	uint64_t violations;
	struct bench_hist acq_read, acq_write;
	/* scale: the servers' work over every phase of this side; unknown once one phase's is */
	int metered, cpu_unknown, cmds_unknown;
	double server_cpu_us, server_cmds;
	double client_cpu_us; /* the worker processes' */
	char server_note[200];
};

static void add_up(struct bench_shared *sh, struct totals *t)
{
	for (int i = 0; i < sh->nworkers; i++) {
		struct bench_slot *s = &sh->slots[i];
		uint64_t ops = atomic_load(&s->ops);
		t->ops += ops;
		t->worker_ops[i] += ops;
		t->errors += s->errors;
		t->reacquired += s->reacquired;
		if (s->has_stats) {
			t->acquired += s->st_acquired;
			t->server_calls += s->st_server_acquires + s->st_server_releases;
		}
		bench_hist_merge(&t->acq, &s->acq);
		bench_hist_merge(&t->rel, &s->rel);
		bench_hist_merge(&t->handoff, &s->handoff);
		bench_hist_merge(&t->acq_read, &s->acq_read);
		bench_hist_merge(&t->acq_write, &s->acq_write);
	}
	int most = atomic_load(&sh->most_holders), readers = atomic_load(&sh->most_readers);
	t->most_holders = most > t->most_holders ? most : t->most_holders;
	t->most_readers = readers > t->most_readers ? readers : t->most_readers;
	t->violations += atomic_load(&sh->violations);
	t->client_cpu_us += (double)atomic_load(&sh->client_cpu_us);
	t->secs += (double)(atomic_load(&sh->stop_ns) - sh->go_ns) / 1e9;
}

static void add_meter(const struct bench_meter *m, struct totals *t)
{
	t->metered = 1;
	if (m->cpu_us < 0) {
		t->cpu_unknown = 1;
		if (!t->server_note[0])
			snprintf(t->server_note, sizeof t->server_note, "%s", m->note);
	}
	t->cmds_unknown |= m->cmds < 0;
	t->server_cpu_us += m->cpu_us;
	t->server_cmds += m->cmds;
}

/* A server quantity of the whole side per acquisition; -1 when unknown. */
static double per_acq(const struct totals *t, double v, int unknown)
{
	return t->metered && !unknown && t->ops ? v / (double)t->ops : -1;
}

/* (most - fewest) acquisitions of one worker, over the mean. */
static double spread_pct(const struct totals *t, int nworkers)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	for (int i = 0; i < nworkers; i++) {
		lo = t->worker_ops[i] < lo ? t->worker_ops[i] : lo;
		hi = t->worker_ops[i] > hi ? t->worker_ops[i] : hi;
	}
	double mean = (double)t->ops / nworkers;
	return mean > 0 ? (double)(hi - lo) / mean * 100.0 : 0;
}

static int run_phase(struct bench_phase *ph, struct probe *probe, struct totals *t, char *err, size_t errlen)
{
	int n = ph->clients * ph->threads;
	ph->sh = bench_shared_new(n, bench_one_name(ph->sc));
	if (!ph->sh) {
		snprintf(err, errlen, "cannot map the shared region");
		return -1;
	}
	int rc = bench_phase_run(ph, probe ? probed_control : NULL, probe, err, errlen);
	if (rc == 0) {
		add_up(ph->sh, t);
		if (ph->meter)
			add_meter(ph->meter, t);
		struct bench_sweep s;
		if (bench_one_name(ph->sc) && bench_sweep(ph->sh, &s) == 0) {
			t->overlaps += s.overlaps;
			t->dropped += s.dropped;
			free(s.iv);
		}
	}
	bench_shared_free(ph->sh);
	ph->sh = NULL;
	return rc;
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

static void keep_dlock(struct bench_result *r, const struct totals *t, const struct probe *probe)
{
	r->ops = t->ops;
	r->errors = t->errors;
	r->ops_per_s = t->secs > 0 ? (double)t->ops / t->secs : 0;
	r->acq = t->acq;
	r->rel = t->rel;
	r->handoff = t->handoff;
	r->reacquire_pct = pct(t->reacquired, t->ops);
	r->share_spread_pct = spread_pct(t, r->clients * r->threads);
	r->server_calls_per_acq = t->acquired ? (double)t->server_calls / (double)t->acquired : -1;
	r->overlaps = t->overlaps;
	r->dropped = t->dropped;
	r->most_holders = t->most_holders;
	r->most_readers = t->most_readers;
	r->violations = t->violations;
	r->acq_read = t->acq_read;
	r->acq_write = t->acq_write;
	r->rtt_p50_us = probe ? bench_hist_pct_us(&probe->rtt, 50) : -1;
	r->server_cpu_us_per_acq = per_acq(t, t->server_cpu_us, t->cpu_unknown);
	r->redis_cmds_per_acq = per_acq(t, t->server_cmds, t->cmds_unknown);
	r->client_cpu_us_per_acq = t->ops ? t->client_cpu_us / (double)t->ops : -1;
	snprintf(r->server_note, sizeof r->server_note, "%s", t->server_note);
}

static void keep_raw(struct bench_result *r, const struct totals *t)
{
	r->has_raw = 1;
	r->raw_ops_per_s = t->secs > 0 ? (double)t->ops / t->secs : 0;
	r->raw_acq = t->acq;
	r->raw_handoff = t->handoff;
	r->raw_reacquire_pct = pct(t->reacquired, t->ops);
	r->overlaps += t->overlaps;
	r->violations += t->violations; /* raw's are the bench's own check failing: never hidden */
	r->raw_server_cpu_us_per_acq = per_acq(t, t->server_cpu_us, t->cpu_unknown);
	r->raw_redis_cmds_per_acq = per_acq(t, t->server_cmds, t->cmds_unknown);
	r->raw_client_cpu_us_per_acq = t->ops ? t->client_cpu_us / (double)t->ops : -1;
}

/*
 * dlock and raw take turns, ROUNDS times each, so that a change in the
 * machine's load during the run (other jobs, CPU frequency) falls on both.
 */
#define ROUNDS 3

static int run_rounds(struct bench_phase *ph, const struct bench_raw *raw, struct probe *probe,
                      struct totals *mine, struct totals *theirs, char *err, size_t errlen, char *raw_err,
                      size_t raw_errlen)
{
	int64_t total = ph->duration_ms;
	ph->duration_ms = total / ROUNDS > 100 ? total / ROUNDS : 100;
	int rc = 0, raw_ok = raw != NULL;
	for (int i = 0; i < ROUNDS && rc == 0; i++) {
		ph->raw = NULL;
		rc = run_phase(ph, probe, mine, err, errlen);
		if (rc == 0 && raw_ok) {
			ph->raw = raw;
			raw_ok = run_phase(ph, NULL, theirs, raw_err, raw_errlen) == 0;
		}
	}
	ph->duration_ms = total;
	ph->raw = NULL;
	return rc != 0 ? -1 : raw && !raw_ok ? 1 : 0;
}

/*
 * Worker processes: mem:// clients contend only inside one process; scale
 * gives each waiter a process of its own, and so do semaphore and
 * read-mostly unless --processes says otherwise.
 */
static int processes_of(const struct bench_opts *o, const dlock_capabilities *caps, enum bench_scenario sc,
                        int clients)
{
	if (caps->scope == DLOCK_SCOPE_PROCESS)
		return 1;
	if (sc == BENCH_SCALE || (bench_other_kind(sc) && !o->processes_given) || o->processes > clients)
		return clients;
	return o->processes;
}

/*
 * The raw client of the scenario's phases, or NULL with the reason in
 * `note`: a semaphore has no plain-client equivalent to compare with, and
 * read-mostly only where the raw client has a shared acquisition.
 */
static const struct bench_raw *phase_raw(enum bench_scenario sc, const struct bench_raw *raw, char *note,
                                         size_t notelen)
{
	if (raw && sc == BENCH_SEMAPHORE) {
		snprintf(note, notelen, "no raw baseline: a semaphore is no single command or statement of %s's plain "
		         "client (docs/BENCHMARKS.md)", raw->name);
		return NULL;
	}
	if (raw && sc == BENCH_READ_MOSTLY && !raw->acquire_shared) {
		snprintf(note, notelen, "no raw baseline: a read-write lock is no single command or statement of %s's "
		         "plain client (docs/BENCHMARKS.md)", raw->name);
		return NULL;
	}
	return raw;
}

int bench_run_perf(const struct bench_opts *o, const struct bench_target *t, const char *masked,
                   const dlock_capabilities *caps, enum bench_scenario sc, int clients, int threads, int index,
                   struct bench_result *r)
{
	int procs = processes_of(o, caps, sc, clients);
	struct bench_phase ph = { .o = o, .uri = t->uri, .masked = masked, .sc = sc, .clients = clients,
		                  .threads = threads, .processes = procs, .duration_ms = o->duration_ms };
	const struct bench_raw *server = bench_raw_find(t->uri), *raw = phase_raw(sc, server, r->raw_note,
	                                                                          sizeof r->raw_note);
	struct bench_meter meter;
	bench_meter_init(&meter, t, server);
	if (sc == BENCH_SCALE || sc == BENCH_UNCONTENDED || sc == BENCH_CONTENDED)
		ph.meter = &meter;
	static const struct totals zero;
	/* The round-trip probe needs only the server's raw client, baseline or not. */
	struct probe probe = { .raw = server, .uri = t->uri };
	struct totals *mine = malloc(sizeof *mine), *theirs = malloc(sizeof *theirs);
	char raw_err[200] = "";
	r->sc = sc;
	r->clients = clients;
	r->threads = threads;
	r->processes = procs;
	r->duration_ms = o->duration_ms;
	r->permits = sc == BENCH_SEMAPHORE ? o->permits : 0;
	r->read_ratio = o->read_ratio;
	r->server_cpu_us_per_acq = r->raw_server_cpu_us_per_acq = r->redis_cmds_per_acq = r->raw_redis_cmds_per_acq = -1;
	r->client_cpu_us_per_acq = r->raw_client_cpu_us_per_acq = -1;
	snprintf(ph.name, sizeof ph.name, "bench-%s-%d-%d", bench_scenario_name(sc), (int)getpid(), index);
	if (!mine || !theirs) {
		snprintf(r->error, sizeof r->error, "out of memory");
		r->failed = 1;
		goto out;
	}
	*mine = zero;
	*theirs = zero;
	int rc = run_rounds(&ph, raw, server ? &probe : NULL, mine, theirs, r->error, sizeof r->error, raw_err,
	                    sizeof raw_err);
	if (rc < 0) {
		r->failed = 1;
		goto out;
	}
	keep_dlock(r, mine, server ? &probe : NULL);
	if (!server)
		snprintf(r->raw_note, sizeof r->raw_note, "no raw client: %s",
		         caps->scope == DLOCK_SCOPE_NETWORK ? "several hosts, or its library is not built"
		                                            : "no server (in-process or local files)");
	else if (raw && rc > 0)
		snprintf(r->raw_note, sizeof r->raw_note, "raw phase failed: %s", raw_err);
	else if (raw)
		keep_raw(r, theirs); /* else phase_raw() said why there is none */
out:
	bench_meter_close(&meter);
	free(mine);
	free(theirs);
	return r->failed ? -1 : 0;
}

/*
 * Each side's first cycles on a server just started are slow (ZooKeeper's
 * JVM compiles its request path in the first seconds), and dlock's side
 * runs first in each round: without a warm-up, the first phase of a
 * target charged the cold start to dlock (ZooKeeper, 1 client: 0.7x raw
 * instead of 0.9-1.0x).  Only targets with a raw client: the others have
 * no server to warm.
 */
#define WARM_UP_MS 500

void bench_warm_up(const struct bench_opts *o, const struct bench_target *t, const char *masked,
                   const dlock_capabilities *caps, int index)
{
	if (!bench_raw_find(t->uri))
		return;
	struct bench_opts quick = *o;
	struct bench_result ignored = { .failed = 0 };
	quick.duration_ms = WARM_UP_MS * ROUNDS;
	bench_run_perf(&quick, t, masked, caps, BENCH_UNCONTENDED, 1, 1, index, &ignored);
}
