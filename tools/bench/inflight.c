/*
 * The inflight scenario: N names acquired and released in flight by ONE
 * thread through a loop client (dlock/loop.h, pull mode: inflight_loop.c),
 * beside the blocking client with N threads doing the same cycles (the
 * uncontended workload of work.c, one client of N threads) and the raw
 * client with N threads, one connection each (the raw client cannot have
 * more than one request in flight on a connection: its best form for N
 * names at once is N connections).  Above BENCH_MAX_WORKERS (256) the
 * loop side runs alone: the bench's phases have at most that many worker
 * threads (their start gate polls, and 1,000 threads polling it swamp the
 * machine before the first cycle).  The three sides take turns, ROUNDS
 * times each, after the target's warm-up (main.c), as perf.c's dlock and
 * raw do, so that the machine's load falls on all three.
 *
 * Where each lock in flight holds a server session (PostgreSQL: the raw
 * client's N connections, dlock's waiting acquisitions each on a session
 * of its own), a size that does not fit in the server's max_connections,
 * as it stands at the time, is skipped and says so.  The descriptor limit
 * is raised to its hard limit when N connections would not fit under it.
 *
 * Threads: the controller's.  Errors: in the result (failed 1, or 2 for a
 * size skipped).
 */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"

/* As perf.c: each side runs ROUNDS phases of a third of --duration. */
#define ROUNDS 3
/* Sessions besides the N that a side may hold at once: the client's own, ones that are still closing. */
#define SESSION_MARGIN 8
/* Descriptors of the process besides one per connection. */
#define FD_MARGIN 64

/* What the rounds of one side measured. */
struct side {
	uint64_t ops, errors;
	double secs;
};

/* The progress line of a side's phase, with what it is (`arg`). */
static void labelled(struct bench_phase *ph, void *arg)
{
	bench_progress_until(ph, ph->sh->go_ns + ph->duration_ms * BENCH_NS_PER_MS, arg);
}

/* One phase of one side, labelled `what`, added to `t`; the loop side's /proc counts and feature go to `r`. */
static int run_side(struct bench_phase *ph, const char *what, struct side *t, struct bench_hist *acq, struct bench_hist *rel,
                    struct bench_result *r, char *err, size_t errlen)
{
	int n = ph->clients * ph->threads;
	ph->sh = bench_shared_new(n, 0);
	if (!ph->sh) {
		snprintf(err, errlen, "cannot map the shared region");
		return -1;
	}
	int rc = bench_phase_run(ph, labelled, (void *)what, err, errlen);
	for (int i = 0; rc == 0 && i < n; i++) {
		struct bench_slot *s = &ph->sh->slots[i];
		t->ops += atomic_load(&s->ops);
		t->errors += s->errors;
		if (acq)
			bench_hist_merge(acq, &s->acq);
		if (rel)
			bench_hist_merge(rel, &s->rel);
		if (ph->sc == BENCH_INFLIGHT) {
			r->threads_seen = s->threads_seen > r->threads_seen ? s->threads_seen : r->threads_seen;
			r->fds_seen = s->fds_seen > r->fds_seen ? s->fds_seen : r->fds_seen;
			r->sockets_seen = s->sockets_seen > r->sockets_seen ? s->sockets_seen : r->sockets_seen;
			r->loop_native = s->loop_native;
		}
	}
	if (rc == 0)
		t->secs += (double)(atomic_load(&ph->sh->stop_ns) - ph->sh->go_ns) / 1e9;
	bench_shared_free(ph->sh);
	ph->sh = NULL;
	return rc;
}

/*
 * Whether N sessions fit on the server now, where locks hold sessions: 1
 * yes (or no such limit), 0 no (why in r->error), -1 the server would not
 * say.
 */
static int sessions_fit(const struct bench_target *t, const struct bench_raw *raw, int n, struct bench_result *r)
{
	char err[200] = "";
	long max = -1, room = -1;
	if (!raw || !raw->sessions)
		return 1;
	void *conn = raw->connect(t->uri, 0, err, sizeof err);
	int ok = conn && raw->sessions(conn, &max, &room) == 0;
	if (conn)
		raw->close(conn);
	if (!ok) {
		snprintf(r->error, sizeof r->error, "cannot read the server's max_connections: %s",
		         err[0] ? err : "the query failed");
		return -1;
	}
	r->max_connections = max;
	if (n + SESSION_MARGIN <= room)
		return 1;
	snprintf(r->error, sizeof r->error, "%d in flight need %d sessions at once (one per lock in flight) and %d "
	         "to spare; max_connections is %ld, %ld left to this role now", n, n, SESSION_MARGIN, max, room);
	return 0;
}

/* N connections in one process: the soft descriptor limit up to the hard one when they would not fit. */
static void fd_room(int n)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)(2 * n + FD_MARGIN))
		return;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
}

static double per_s(const struct side *t)
{
	return t->secs > 0 ? (double)t->ops / t->secs : 0;
}

int bench_run_inflight(const struct bench_opts *o, const struct bench_target *t, int n, int index,
                       struct bench_result *r)
{
	const struct bench_raw *raw = bench_raw_find(t->uri);
	int64_t each = o->duration_ms / ROUNDS > 100 ? o->duration_ms / ROUNDS : 100;
	struct bench_phase loop = { .o = o, .uri = t->uri, .masked = r->uri, .sc = BENCH_INFLIGHT, .clients = 1,
		                    .threads = 1, .processes = 1, .duration_ms = each, .locks = n };
	struct bench_phase blocking = loop, direct;
	struct side mine = { 0 }, theirs = { 0 }, blocked = { 0 };
	char raw_err[200] = "";
	blocking.sc = BENCH_UNCONTENDED;
	blocking.threads = n;
	direct = blocking;
	direct.raw = raw;
	r->sc = BENCH_INFLIGHT;
	r->clients = r->threads = r->processes = 1;
	r->inflight = n;
	r->duration_ms = o->duration_ms;
	r->rtt_p50_us = r->server_calls_per_acq = -1;
	r->server_cpu_us_per_acq = r->raw_server_cpu_us_per_acq = r->redis_cmds_per_acq = r->raw_redis_cmds_per_acq = -1;
	r->client_cpu_us_per_acq = r->raw_client_cpu_us_per_acq = -1;
	r->max_connections = -1;
	int fit = sessions_fit(t, raw, n, r);
	if (fit <= 0) {
		r->failed = fit == 0 ? 2 : 1;
		return fit == 0 ? 0 : -1;
	}
	fd_room(n);
	snprintf(loop.name, sizeof loop.name, "bench-inflight-%d-%d", (int)getpid(), index);
	snprintf(blocking.name, sizeof blocking.name, "%s", loop.name);
	snprintf(direct.name, sizeof direct.name, "%s", loop.name);
	char what[3][48];
	snprintf(what[0], sizeof what[0], "N=%d on one loop thread", n);
	snprintf(what[1], sizeof what[1], "inflight N=%d, blocking", n);
	snprintf(what[2], sizeof what[2], "inflight N=%d", n);
	int sides = n <= BENCH_MAX_WORKERS, raw_ok = raw != NULL && sides;
	for (int i = 0; i < ROUNDS && !r->failed; i++) {
		if (run_side(&loop, what[0], &mine, &r->acq, &r->rel, r, r->error, sizeof r->error) != 0 ||
		    (sides && run_side(&blocking, what[1], &blocked, NULL, NULL, r, r->error, sizeof r->error) != 0))
			r->failed = 1;
		else if (raw_ok)
			raw_ok = run_side(&direct, what[2], &theirs, &r->raw_acq, NULL, r, raw_err, sizeof raw_err) == 0;
	}
	if (r->failed)
		return -1;
	r->ops = mine.ops;
	r->errors = mine.errors + blocked.errors;
	r->ops_per_s = per_s(&mine);
	r->has_blocking = sides;
	r->blocking_ops_per_s = per_s(&blocked);
	if (!sides)
		snprintf(r->raw_note, sizeof r->raw_note, "the loop alone: the blocking and raw sides would need %d threads, "
		         "more than the %d workers of a phase", n, BENCH_MAX_WORKERS);
	else if (!raw)
		snprintf(r->raw_note, sizeof r->raw_note, "no raw client: no server, several hosts, or its library "
		         "is not built");
	else if (!raw_ok)
		snprintf(r->raw_note, sizeof r->raw_note, "raw phase failed: %s", raw_err);
	else {
		r->has_raw = 1;
		r->raw_ops_per_s = per_s(&theirs);
	}
	return 0;
}
