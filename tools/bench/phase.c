/*
 * One measured phase: fork the worker processes, hold them at a start
 * gate until every worker is connected, let them run, stop them, reap them.
 *
 * Workers are spread over processes as evenly as clients allow: client c
 * lives in process c % P, and each client gets its T threads.  Clients are
 * opened in the child (they are not fork-safe); the parent holds no dlock
 * client while forking.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define GATE_POLL_NS (200 * 1000)
#define READY_TIMEOUT_NS (30 * BENCH_NS_PER_S)
/* Workers finish their cycle after stop; give them this long before SIGKILL. */
#define REAP_TIMEOUT_NS (30 * BENCH_NS_PER_S)

/* ------------------------------------------------------------ child side */

static void *worker_main(void *arg)
{
	struct bench_worker *w = arg;
	struct bench_shared *sh = w->ph->sh;
	if (w->ph->sc == BENCH_INFLIGHT) { /* its loop client is opened on its own thread, then it is ready */
		bench_work_inflight(w);
		return NULL;
	}
	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load(&sh->go) && !atomic_load(&sh->stop))
		bench_sleep_ns(GATE_POLL_NS);
	if (w->ph->sc == BENCH_FAULTS)
		bench_work_faults(w);
	else if (w->ph->sc == BENCH_HELD)
		bench_work_held(w);
	else if (bench_other_kind(w->ph->sc) && w->ph->raw)
		bench_work_kind_raw(w);
	else if (bench_other_kind(w->ph->sc))
		bench_work_kind(w);
	else if (w->ph->raw)
		bench_work_raw(w);
	else
		bench_work_dlock(w);
	return NULL;
}

/* Open what worker `w` needs: its client (first thread of a client) or its raw connection. */
static int worker_connect(struct bench_worker *w, dlock_client **client)
{
	char err[256];
	if (w->ph->sc == BENCH_INFLIGHT) /* the loop side opens its own client (bench_work_inflight) */
		return 0;
	if (w->ph->raw) {
		w->raw_conn = w->ph->raw->connect(w->ph->uri, w->ph->o->fencing, err, sizeof err);
		if (!w->raw_conn)
			bench_slot_error(w->slot, "raw connect: %s", err);
		return w->raw_conn ? 0 : -1;
	}
	if (!*client && dlock_client_open(client, w->ph->uri, NULL, err, sizeof err) != DLOCK_OK) {
		bench_slot_error(w->slot, "dlock_client_open: %s", err);
		return -1;
	}
	w->client = *client;
	return 0;
}

static void worker_disconnect(struct bench_worker *w)
{
	if (w->raw_conn)
		w->ph->raw->close(w->raw_conn);
	if (w->first_of_client && w->client) {
		dlock_client_stats st;
		if (dlock_client_get_stats(w->client, &st) == DLOCK_OK) {
			w->slot->st_acquired = st.acquired;
			w->slot->st_server_acquires = st.server_acquires;
			w->slot->st_server_releases = st.server_releases;
			w->slot->has_stats = 1;
		}
		dlock_client_close(w->client);
	}
}

/* User and system CPU time of this process, every thread, in µs. */
static int64_t process_cpu_us(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

/* The workers of process `p`: its clients' threads. */
static int child_run(struct bench_phase *ph, int p)
{
	int n = 0, total = ph->clients * ph->threads;
	struct bench_worker *ws = calloc((size_t)total, sizeof *ws);
	pthread_t *tids = calloc((size_t)total, sizeof *tids);
	int rc = 0;
	if (!ws || !tids)
		goto fail;
	for (int c = p; c < ph->clients; c += ph->processes) {
		dlock_client *client = NULL;
		for (int t = 0; t < ph->threads; t++, n++) {
			struct bench_worker *w = &ws[n];
			*w = (struct bench_worker){ .ph = ph, .id = c * ph->threads + t, .first_of_client = t == 0 };
			w->slot = &ph->sh->slots[w->id];
			if (worker_connect(w, &client) != 0)
				goto fail;
		}
	}
	for (int i = 0; i < n; i++)
		if (pthread_create(&tids[i], NULL, worker_main, &ws[i]) != 0)
			goto fail;
	/* This process's CPU time from the start gate to its workers' last cycle: the client's cost. */
	while (!atomic_load(&ph->sh->go) && !atomic_load(&ph->sh->stop))
		bench_sleep_ns(GATE_POLL_NS);
	int64_t cpu0 = process_cpu_us();
	for (int i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	atomic_fetch_add(&ph->sh->client_cpu_us, process_cpu_us() - cpu0);
	goto out;
fail:
	rc = 1;
	atomic_store(&ph->sh->failed, 1);
out:
	for (int i = 0; i < n; i++)
		worker_disconnect(&ws[i]);
	free(ws);
	free(tids);
	return rc;
}

/* ------------------------------------------------------------ parent side */

static int alive(const pid_t *pids, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			k++;
	return k;
}

/* Reap children that have exited; their pid becomes 0. */
static void reap(pid_t *pids, int n, int *bad)
{
	for (int i = 0; i < n; i++) {
		int status;
		if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
				*bad = 1;
			pids[i] = 0;
		}
	}
}

static int await_ready(struct bench_phase *ph, pid_t *pids, int n, int *bad)
{
	int64_t deadline = bench_now_ns() + READY_TIMEOUT_NS;
	int want = ph->clients * ph->threads;
	while (atomic_load(&ph->sh->ready) < want) {
		reap(pids, n, bad);
		if (atomic_load(&ph->sh->failed) || *bad || bench_now_ns() > deadline)
			return -1;
		bench_sleep_ns(GATE_POLL_NS);
	}
	return 0;
}

static void stop_and_reap(struct bench_phase *ph, pid_t *pids, int n, int *bad)
{
	if (ph->meter) /* the servers' counters first: they must not see the workers' last cycles and goodbyes */
		bench_meter_end(ph->meter);
	atomic_store(&ph->sh->stop_ns, bench_now_ns());
	atomic_store(&ph->sh->stop, 1);
	int64_t deadline = bench_now_ns() + REAP_TIMEOUT_NS;
	while (alive(pids, n) && bench_now_ns() < deadline) {
		reap(pids, n, bad);
		bench_sleep_ns(5 * BENCH_NS_PER_MS);
	}
	for (int i = 0; i < n; i++) {
		if (pids[i] > 0) { /* stuck: a paused worker, or a wait that never returns */
			kill(pids[i], SIGKILL);
			kill(pids[i], SIGCONT);
			waitpid(pids[i], NULL, 0);
			*bad = 1;
		}
	}
}

/* The first error a worker noted, for the phase's message. */
static void first_error(const struct bench_shared *sh, char *err, size_t errlen)
{
	for (int i = 0; i < sh->nworkers; i++) {
		if (sh->slots[i].err[0]) {
			snprintf(err, errlen, "%s", sh->slots[i].err);
			return;
		}
	}
	snprintf(err, errlen, "a worker process failed");
}

int bench_phase_run(struct bench_phase *ph, bench_control_fn control, void *arg, char *err, size_t errlen)
{
	pid_t pids[BENCH_MAX_WORKERS] = { 0 };
	int n = ph->processes, bad = 0;
	fflush(NULL); /* children must not flush the parent's buffered output again */
	for (int p = 0; p < n; p++) {
		pids[p] = fork();
		if (pids[p] == 0)
			_exit(child_run(ph, p));
		if (pids[p] < 0) {
			snprintf(err, errlen, "fork: %s", strerror(errno));
			pids[p] = 0;
			bad = 1;
			break;
		}
	}
	if (!bad && await_ready(ph, pids, n, &bad) == 0) {
		if (ph->meter) /* every worker connected: what the servers spend from now on is the workload's */
			bench_meter_begin(ph->meter);
		ph->sh->go_ns = bench_now_ns();
		atomic_store(&ph->sh->go, 1);
		if (control)
			control(ph, arg);
		else
			bench_progress_until(ph, ph->sh->go_ns + ph->duration_ms * BENCH_NS_PER_MS, "");
	}
	stop_and_reap(ph, pids, n, &bad);
	bench_progress_end();
	if (atomic_load(&ph->sh->failed)) {
		first_error(ph->sh, err, errlen);
		return -1;
	}
	if (bad && !err[0])
		first_error(ph->sh, err, errlen);
	return bad ? -1 : 0;
}
