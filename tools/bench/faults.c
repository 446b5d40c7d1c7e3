/*
 * The faults scenario's controller, in the parent process.  Timeline:
 * a warm-up, then one fault at a time, each followed by a recovery window:
 *
 *   pause    the next holder stops itself (SIGSTOP) between its read and
 *            its write; SIGCONT after 1.5x its lease or session timeout
 *   cut      the holder's connection or session is ended by the server
 *            (Redis CLIENT KILL, PostgreSQL pg_terminate_backend) while it
 *            holds; on ZooKeeper the session is expired by pausing the
 *            holder past the session timeout
 *   restart  --server-stop, then --server-start, while a holder holds
 *   failover --failover while a holder holds: a command that makes a
 *            replica the server (PostgreSQL: kill the primary, promote
 *            its standby; ZooKeeper: kill the leader) and returns once it
 *            serves.  Last, since it leaves another topology behind.
 *
 * Then the recorded intervals say how many critical sections overlapped,
 * the store says how many stale writes it refused, the lost-lock callbacks
 * say how many losses the holders were told about, and the accepted writes
 * say how long nobody could make progress (unavailable_ms).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define WARMUP_NS (1 * BENCH_NS_PER_S)
#define PARK_TIMEOUT_NS (10 * BENCH_NS_PER_S)
#define RECOVER_MIN_NS (2 * BENCH_NS_PER_S)

struct fault_ctl {
	const struct bench_target *t;
	const struct bench_raw *raw;
	void *conn; /* raw control connection for the cut, or NULL */
	int64_t pause_ns;
	struct bench_result *r;
};

/* ------------------------------------------------------------ one fault */

static struct bench_fault_result *fault_begin(struct bench_phase *ph, struct fault_ctl *fc, const char *what)
{
	if (fc->r->nfaults == BENCH_MAX_FAULTS) /* never with the faults of this file; a new one needs room */
		fc->r->nfaults--;
	struct bench_fault_result *f = &fc->r->faults[fc->r->nfaults++];
	snprintf(f->what, sizeof f->what, "%s", what);
	f->at_ms = (bench_now_ns() - ph->sh->go_ns) / BENCH_NS_PER_MS;
	return f;
}

/* Post a request and wait until a holder has taken it; its pid, or 0 (note written). */
static pid_t park_holder(struct bench_phase *ph, int req, struct bench_fault_result *f)
{
	struct bench_shared *sh = ph->sh;
	atomic_store(&sh->fault_state, BENCH_FS_IDLE);
	atomic_store(&sh->fault_request, req);
	int64_t deadline = bench_now_ns() + PARK_TIMEOUT_NS;
	while (atomic_load(&sh->fault_state) != BENCH_FS_PARKED) {
		if (bench_now_ns() > deadline || atomic_load(&sh->failed)) {
			int expect = req;
			if (atomic_compare_exchange_strong(&sh->fault_request, &expect, BENCH_REQ_NONE)) {
				snprintf(f->note, sizeof f->note, "no holder reached its critical section within 10 s");
				return 0;
			}
		}
		bench_sleep_ns(BENCH_NS_PER_MS);
	}
	return (pid_t)atomic_load(&sh->fault_pid);
}

/* Is `pid` stopped yet?  A SIGSTOP the process sent itself takes effect asynchronously. */
static int stopped(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	return p && (p[2] == 'T' || p[2] == 't');
}

static void fault_pause(struct bench_phase *ph, struct fault_ctl *fc, const char *what)
{
	struct bench_fault_result *f = fault_begin(ph, fc, what);
	pid_t pid = park_holder(ph, BENCH_REQ_PAUSE, f);
	if (pid > 0) {
		while (!stopped(pid))
			bench_sleep_ns(100 * 1000);
		bench_progress_until(ph, bench_now_ns() + fc->pause_ns, what);
		kill(pid, SIGCONT);
		snprintf(f->note, sizeof f->note, "holder stopped for %lld ms",
		         (long long)(fc->pause_ns / BENCH_NS_PER_MS));
	}
	int64_t recover = fc->pause_ns > RECOVER_MIN_NS ? fc->pause_ns : RECOVER_MIN_NS;
	bench_progress_until(ph, bench_now_ns() + recover, "recovery");
	f->end_ms = (bench_now_ns() - ph->sh->go_ns) / BENCH_NS_PER_MS;
}

static void fault_cut(struct bench_phase *ph, struct fault_ctl *fc)
{
	if (!fc->raw->cut) {
		fault_pause(ph, fc, "cut (session expiry)");
		return;
	}
	struct bench_fault_result *f = fault_begin(ph, fc, "cut");
	if (!fc->conn) {
		snprintf(f->note, sizeof f->note, "no control connection to the server");
	} else if (park_holder(ph, BENCH_REQ_HOLD, f) > 0) {
		if (fc->raw->cut(fc->conn, f->note, sizeof f->note) != 0)
			snprintf(f->note, sizeof f->note, "the server refused the cut");
		atomic_store(&ph->sh->fault_state, BENCH_FS_RESUME);
	}
	bench_progress_until(ph, bench_now_ns() + RECOVER_MIN_NS + fc->pause_ns, "recovery");
	f->end_ms = (bench_now_ns() - ph->sh->go_ns) / BENCH_NS_PER_MS;
}

/* A user command; its output goes to stderr, stdout is the results'. */
static int run_command(const char *cmd)
{
	size_t len = strlen(cmd) + 16;
	char *line = malloc(len);
	if (!line)
		return -1;
	snprintf(line, len, "exec 1>&2; %s", cmd);
	int rc = system(line);
	free(line);
	return rc;
}

static void fault_restart(struct bench_phase *ph, struct fault_ctl *fc)
{
	struct bench_fault_result *f = fault_begin(ph, fc, "restart");
	if (park_holder(ph, BENCH_REQ_HOLD, f) > 0) {
		int64_t t0 = bench_now_ns();
		int a = run_command(fc->t->server_stop), b = run_command(fc->t->server_start);
		snprintf(f->note, sizeof f->note, "server down and up again in %lld ms%s",
		         (long long)((bench_now_ns() - t0) / BENCH_NS_PER_MS),
		         a != 0 || b != 0 ? " (a command failed)" : "");
		atomic_store(&ph->sh->fault_state, BENCH_FS_RESUME);
	}
	bench_progress_until(ph, bench_now_ns() + 2 * RECOVER_MIN_NS + fc->pause_ns, "recovery");
	f->end_ms = (bench_now_ns() - ph->sh->go_ns) / BENCH_NS_PER_MS;
}

static void fault_failover(struct bench_phase *ph, struct fault_ctl *fc)
{
	struct bench_fault_result *f = fault_begin(ph, fc, "failover");
	if (park_holder(ph, BENCH_REQ_HOLD, f) > 0) {
		int64_t t0 = bench_now_ns();
		int rc = run_command(fc->t->failover);
		snprintf(f->note, sizeof f->note, "failed over in %lld ms%s",
		         (long long)((bench_now_ns() - t0) / BENCH_NS_PER_MS), rc != 0 ? " (the command failed)" : "");
		atomic_store(&ph->sh->fault_state, BENCH_FS_RESUME);
	}
	bench_progress_until(ph, bench_now_ns() + 2 * RECOVER_MIN_NS + fc->pause_ns, "recovery");
	f->end_ms = (bench_now_ns() - ph->sh->go_ns) / BENCH_NS_PER_MS;
}

static void faults_control(struct bench_phase *ph, void *arg)
{
	struct fault_ctl *fc = arg;
	char err[256];
	bench_progress_until(ph, ph->sh->go_ns + WARMUP_NS, "warm-up");
	fault_pause(ph, fc, "pause");
	if (fc->raw) {
		if (fc->raw->cut)
			fc->conn = fc->raw->connect(ph->uri, 0, err, sizeof err);
		fault_cut(ph, fc);
		if (fc->conn)
			fc->raw->close(fc->conn);
		fc->conn = NULL;
	}
	if (fc->t->server_stop && fc->t->server_start)
		fault_restart(ph, fc);
	if (fc->t->failover)
		fault_failover(ph, fc);
}

/* ------------------------------------------------------------ analysis */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The longest stretch of [from, to] without an accepted write (times sorted). */
static int64_t longest_gap(const int64_t *w, size_t n, int64_t from, int64_t to)
{
	int64_t prev = from, gap = 0;
	for (size_t i = 0; i < n && w[i] <= to; i++) {
		if (w[i] <= from)
			continue;
		if (w[i] - prev > gap)
			gap = w[i] - prev;
		prev = w[i];
	}
	return to - prev > gap ? to - prev : gap;
}

static void analyse(struct bench_phase *ph, const struct bench_sweep *s, struct bench_result *r)
{
	int64_t *writes = malloc((s->n ? s->n : 1) * sizeof *writes);
	size_t nw = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->iv[i].flags & BENCH_IV_WRITE_OK)
			writes[nw++] = s->iv[i].end_ns;
		if (s->iv[i].flags & BENCH_IV_RELEASE_NOTHELD)
			r->release_notheld++;
	}
	qsort(writes, nw, sizeof *writes, cmp_i64);
	r->ops = s->n;
	r->overlaps = s->overlaps;
	r->dropped = s->dropped;
	for (int i = 0; i < r->nfaults; i++) {
		struct bench_fault_result *f = &r->faults[i];
		int64_t from = ph->sh->go_ns + f->at_ms * BENCH_NS_PER_MS, to = ph->sh->go_ns + f->end_ms * BENCH_NS_PER_MS;
		f->unavailable_ms = longest_gap(writes, nw, from, to) / BENCH_NS_PER_MS;
		f->overlaps = bench_overlaps_between(s, from, to);
		r->unavailable_ms += f->unavailable_ms;
	}
	free(writes);
}

/* The chart's data: one line per critical section, then the faults. */
static void write_timeline(const char *dir, struct bench_phase *ph, const struct bench_sweep *s,
                           struct bench_result *r, int index)
{
	snprintf(r->timeline, sizeof r->timeline, "%s/faults-%d-%s.dat", dir, index, r->backend);
	FILE *f = fopen(r->timeline, "we");
	if (!f) {
		r->timeline[0] = '\0';
		return;
	}
	fprintf(f, "# start_s worker length_s kind(0 ok, 1 rejected write, 2 overlap)\n");
	for (size_t i = 0; i < s->n; i++) {
		const struct bench_interval *iv = &s->iv[i];
		int kind = iv->flags & BENCH_IV_OVERLAP ? 2 : iv->flags & BENCH_IV_WRITE_REJECTED ? 1 : 0;
		fprintf(f, "%.4f %d %.4f %d\n", (double)(iv->start_ns - ph->sh->go_ns) / 1e9, iv->worker,
		        (double)(iv->end_ns - iv->start_ns) / 1e9, kind);
	}
	fprintf(f, "\n\n# faults: at_s end_s name\n");
	for (int i = 0; i < r->nfaults; i++)
		fprintf(f, "%.3f %.3f \"%s\"\n", (double)r->faults[i].at_ms / 1e3, (double)r->faults[i].end_ms / 1e3,
		        r->faults[i].what);
	fclose(f);
}

/* ------------------------------------------------------------ the scenario */

/* What stops a paused holder from holding: its lease, or its session's timeout. */
static int64_t lease_of(const char *uri, const dlock_capabilities *caps, int64_t lease_ms)
{
	char text[32];
	int64_t ms;
	if (strcmp(caps->backend, "zk") == 0) {
		if ((bench_uri_param(uri, "session_timeout", text, sizeof text) == 0 ||
		     bench_uri_param(uri, "ttl", text, sizeof text) == 0) &&
		    dlock_duration_parse(text, 1, &ms) == DLOCK_OK)
			return ms;
		return 30000;
	}
	return lease_ms;
}

int bench_run_faults(const struct bench_opts *o, const struct bench_target *t, const dlock_capabilities *caps,
                     int index, struct bench_result *r)
{
	char dir[] = "/tmp/dlock-bench.XXXXXX", path[64];
	struct fault_ctl fc = { .t = t, .raw = bench_raw_find(t->uri), .r = r };
	struct bench_phase ph = { .o = o, .uri = t->uri, .masked = r->uri, .sc = BENCH_FAULTS,
		                  .clients = o->fault_clients, .threads = 1, .processes = o->fault_clients,
		                  .lease_ms = o->lease_ms };
	r->sc = BENCH_FAULTS;
	r->clients = r->processes = o->fault_clients;
	r->threads = 1;
	if (caps->scope == DLOCK_SCOPE_PROCESS) {
		r->failed = 2;
		snprintf(r->error, sizeof r->error, "not applicable: %s:// locks are private to one process", caps->backend);
		return 0;
	}
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof path, "%s/counter", dir);
	snprintf(ph.name, sizeof ph.name, "bench-faults-%d-%d", (int)getpid(), index);
	/* For the fault commands (run_command): a cluster's failover must hit the master of this name. */
	setenv("DLOCK_BENCH_LOCK", ph.name, 1);
	ph.fence_path = path;
	fc.pause_ns = lease_of(t->uri, caps, o->lease_ms) * 3 / 2 * BENCH_NS_PER_MS;
	ph.sh = bench_shared_new(ph.clients, 1);
	if (!ph.sh || bench_store_create(path) != 0) {
		snprintf(r->error, sizeof r->error, "cannot set up the shared region or the counter file");
		r->failed = 1;
	} else if (bench_phase_run(&ph, faults_control, &fc, r->error, sizeof r->error) != 0) {
		r->failed = 1;
	}
	struct bench_sweep s = { 0 };
	struct bench_store_totals tot = { 0 };
	if (!r->failed && bench_sweep(ph.sh, &s) == 0 && bench_store_totals(path, &tot) == 0) {
		r->duration_ms = (atomic_load(&ph.sh->stop_ns) - ph.sh->go_ns) / BENCH_NS_PER_MS;
		analyse(&ph, &s, r);
		r->stale_rejected = tot.rejected;
		r->accepted = tot.accepted;
		r->lost_updates = tot.lost_updates;
		r->lost_reported = atomic_load(&ph.sh->lost_reported);
		for (int i = 0; i < ph.sh->nworkers; i++)
			r->errors += ph.sh->slots[i].errors;
		if (o->plot_dir)
			write_timeline(o->plot_dir, &ph, &s, r, index);
	}
	free(s.iv);
	bench_shared_free(ph.sh);
	unlink(path);
	rmdir(dir);
	return r->failed ? -1 : 0;
}
