/*
 * The worker of the faults scenario (the workload Jepsen calls lock-set):
 * acquire, read the shared counter, write counter + 1 with the
 * acquisition's fencing token, release.  Each worker is a process of its
 * own, so that the controller can stop one with SIGSTOP.
 *
 * Faults reach a holder at the worst moment: after it has read the
 * counter and before it writes it back.  The controller posts a request in
 * the shared region; the next holder to pass that point takes it, and
 * either stops itself (SIGSTOP; the controller sends SIGCONT later) or
 * waits there until the controller has done its part (server restart,
 * connection cut).
 */
#include <signal.h>
#include <unistd.h>

#include "bench.h"

#define ACQUIRE_WAIT_MS 500
#define ERROR_BACKOFF_NS (20 * BENCH_NS_PER_MS)
/* The critical section's own work: long enough that holders are seen holding. */
#define WORK_NS (2 * BENCH_NS_PER_MS)

/* On the client's background thread: only an atomic counter is touched. */
static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct bench_shared *sh = userdata;
	(void)lock;
	(void)reason;
	(void)detail;
	atomic_fetch_add(&sh->lost_reported, 1);
}

static void answer_fault(struct bench_shared *sh)
{
	int req = atomic_load(&sh->fault_request);
	if (req == BENCH_REQ_NONE || !atomic_compare_exchange_strong(&sh->fault_request, &req, BENCH_REQ_NONE))
		return;
	atomic_store(&sh->fault_pid, (int)getpid());
	atomic_store(&sh->fault_state, BENCH_FS_PARKED);
	if (req == BENCH_REQ_PAUSE) {
		raise(SIGSTOP); /* the whole process, the client's renewal thread too */
		return;
	}
	while (atomic_load(&sh->fault_state) != BENCH_FS_RESUME && !atomic_load(&sh->stop))
		bench_sleep_ns(BENCH_NS_PER_MS);
}

/* The critical section: read, maybe meet a fault, write; the interval's flags. */
static int critical_section(struct bench_worker *w, dlock_lock *lock)
{
	uint64_t token = 0, value;
	int fenced = dlock_lock_fencing_token(lock, &token) == DLOCK_OK;
	if (bench_store_read(w->ph->fence_path, &value) != 0) {
		bench_slot_error(w->slot, "cannot read the counter file");
		return 0;
	}
	answer_fault(w->ph->sh);
	bench_sleep_ns(WORK_NS);
	switch (bench_store_write(w->ph->fence_path, value + 1, token, fenced)) {
	case BENCH_WRITE_OK:
		return BENCH_IV_WRITE_OK;
	case BENCH_WRITE_STALE:
		return BENCH_IV_WRITE_REJECTED;
	default:
		bench_slot_error(w->slot, "cannot write the counter file");
		return 0;
	}
}

static void cycle(struct bench_worker *w, dlock_lock *lock, const dlock_acquire_options *opts)
{
	dlock_status st = dlock_acquire(lock, opts);
	if (st == DLOCK_EBUSY || st == DLOCK_ETIMEDOUT)
		return;
	if (st != DLOCK_OK) { /* expected while a server is down: counted, not fatal */
		bench_slot_error(w->slot, "acquire: %s: %s", dlock_status_name(st), dlock_client_errmsg(w->client));
		bench_sleep_ns(ERROR_BACKOFF_NS);
		return;
	}
	int64_t t1 = bench_now_ns();
	int flags = critical_section(w, lock);
	int64_t t_end = bench_now_ns();
	if (dlock_release(lock) != DLOCK_OK)
		flags |= BENCH_IV_RELEASE_NOTHELD;
	bench_interval_add(w->ph->sh, w->id, t1, t_end, flags);
	atomic_fetch_add_explicit(&w->slot->ops, 1, memory_order_relaxed);
}

void bench_work_faults(struct bench_worker *w)
{
	dlock_lock *lock = NULL;
	if (dlock_lock_new(w->client, w->ph->name, &lock) != DLOCK_OK) {
		bench_slot_error(w->slot, "dlock_lock_new: %s", dlock_client_errmsg(w->client));
		atomic_store(&w->ph->sh->failed, 1);
		return;
	}
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	opts.wait_ms = ACQUIRE_WAIT_MS;
	opts.lease_ms = w->ph->lease_ms;
	opts.on_lost = on_lost;
	opts.lost_userdata = w->ph->sh;
	while (!atomic_load(&w->ph->sh->stop))
		cycle(w, lock, &opts);
	dlock_lock_free(lock);
}
