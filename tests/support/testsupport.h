/* Shared helpers for dlock's CUnit test programs. */
#ifndef DLOCK_TESTSUPPORT_H
#define DLOCK_TESTSUPPORT_H

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"

/**
 * Run every suite that `add_suites` registers (it calls CU_add_suite /
 * CU_add_test) with CUnit's basic runner in verbose mode.  Returns the
 * process exit status: 0 when every test passed, 1 otherwise.
 */
int dlock_test_main(void (*add_suites)(void));

/** Make a fresh temporary directory (malloc'd path); aborts on failure. */
char *dlock_test_mkdtemp(void);

/** Remove a directory tree made by dlock_test_mkdtemp(). */
void dlock_test_rmtree(const char *path);

/** Monotonic clock in milliseconds. */
int64_t dlock_test_now_ms(void);

/** getenv(key) when it is set and not empty, else NULL. */
const char *dlock_test_env(const char *key);

/** Exit status of a test program that skipped as a whole (ctest's SKIP_RETURN_CODE: "Not Run"). */
#define DLOCK_TEST_SKIP_STATUS 77

/**
 * Say "SKIPPED: why" and return the exit status of a test program whose
 * servers are missing: DLOCK_TEST_SKIP_STATUS, which ctest counts as
 * skipped, or 1 when DLOCK_TEST_REQUIRE_ALL=1 (a skip then fails CI).
 */
int dlock_test_skip(const char *why);

/**
 * Say that part of the running CUnit test could not run here: prints
 * "SKIPPED: SUITE / TEST: why" on a line of its own, on stdout in order
 * with CUnit's output.  The test still passes; ci/test.sh lists every
 * SKIPPED line after each ctest run.  For a program that cannot run at
 * all, use dlock_test_skip().
 */
void dlock_test_skip_part(const char *why);

/** Sleep for `ms` milliseconds (not a way to wait for a condition: see dlock_test_await). */
void dlock_test_sleep_ms(int64_t ms);

/**
 * Poll `cond(arg)` about every millisecond until it returns non-zero or
 * `timeout_ms` passes.  Returns 1 when the condition held, 0 on timeout.
 */
int dlock_test_await(int (*cond)(void *arg), void *arg, int64_t timeout_ms);

/**
 * Zeroed memory shared with child processes forked afterwards
 * (MAP_SHARED | MAP_ANONYMOUS); aborts on failure.  Free with
 * dlock_test_shared_free() and the same size.
 */
void *dlock_test_shared_alloc(size_t size);
void dlock_test_shared_free(void *mem, size_t size);

/**
 * Copy `uri` into `out` (always NUL-terminated, truncated to `outlen`) with
 * the password of its userinfo, and the value of every query parameter
 * whose name ends in "password" (sentinel_password=), replaced by "***",
 * for test output about a URI that no client could open.
 */
void dlock_test_mask_uri(const char *uri, char *out, size_t outlen);

/*
 * Clients and locks.  These helpers assert nothing about opening a client
 * or making a handle (each test program adds the assertion it wants, fatal
 * or not); they print what went wrong instead.
 */

/**
 * dlock_client_open() of `uri` with, when `log` is not NULL, `log` and
 * `log_userdata` as the log callback at DLOCK_LOG_DEBUG (no callback
 * otherwise).  `errbuf` as for dlock_client_open() (may be NULL).
 */
dlock_status dlock_test_try_open(dlock_client **c, const char *uri, dlock_log_fn log, void *log_userdata,
                                 char *errbuf, size_t errlen);

/**
 * Run the shell command `cmd` (popen: what it prints to stdout goes to
 * `out`, cut to fit, NUL-terminated; the rest is read and dropped, so the
 * command never blocks on a full pipe).  Returns pclose()'s status.
 */
int dlock_test_run(const char *cmd, char *out, size_t outlen);

/**
 * dlock_test_try_open() that prints the status and message (and the URI,
 * password masked) on failure and returns NULL then.
 */
dlock_client *dlock_test_open(const char *uri, dlock_log_fn log, void *log_userdata);

/**
 * A new handle for `name` on `c`; NULL when `c` is NULL or dlock_lock_new()
 * fails (the failure is printed).
 */
dlock_lock *dlock_test_new_lock(dlock_client *c, const char *name);

/**
 * dlock_acquire() with these options: a wait bound (0: try once), a lease
 * (0: the URI's), renewal (-1: the URI's, 0 off, 1 on) and a lost-lock
 * callback with its userdata (both may be NULL).
 */
dlock_status dlock_test_acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms, int renew, dlock_lost_fn fn,
                                void *ud);

/** A test's -1 (the URI's), 0 (off) or 1 (on) as a dlock_switch (dlock_acquire_options::renewal, ::fence). */
int dlock_test_switch(int v);

/* A thread that runs one acquire; records when it returned and the token. */
typedef struct dlock_test_waiter {
	dlock_lock *lock;
	int64_t wait_ms, lease_ms; /* lease 0: the URI's */
	pthread_t thread;
	atomic_int done;
	dlock_status status;
	int64_t at_ms;             /* dlock_test_now_ms() when the acquire returned */
	uint64_t token;
} dlock_test_waiter;

/** Start `w`: one acquire of `lock` (renewal as the URI says, no lost callback). */
void dlock_test_waiter_start(dlock_test_waiter *w, dlock_lock *lock, int64_t wait_ms, int64_t lease_ms);
/** Join it, allowing `timeout_ms` (a hang is a failure: it is then cancelled); returns its status. */
dlock_status dlock_test_waiter_join(dlock_test_waiter *w, int64_t timeout_ms);

/* What a lost-lock callback saw: how many times it ran, and the last reason. */
typedef struct dlock_test_lost {
	atomic_int count;
	atomic_int reason;
} dlock_test_lost;

/** A dlock_lost_fn whose userdata is a dlock_test_lost: prints the detail, records the call. */
void dlock_test_on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata);
/** For dlock_test_await(): `arg`, a dlock_test_lost, saw at least one loss. */
int dlock_test_lost_seen(void *arg);

/*
 * A client's statistics reaching a count, for dlock_test_await(): set
 * `want` from dlock_client_get_stats() before, plus what must happen.
 */
typedef struct dlock_test_count {
	dlock_client *client;
	uint64_t want;
} dlock_test_count;

/** For dlock_test_await(): `arg`, a dlock_test_count, whose client made at least `want` driver acquire calls. */
int dlock_test_attempted(void *arg);
/** For dlock_test_await(): `arg`, a dlock_test_count, whose client renewed leases at least `want` times. */
int dlock_test_renewed(void *arg);

/** dlock_inspect() of `name` on `c`, asserting (fatally) that it answers. */
dlock_lock_info *dlock_test_inspect(dlock_client *c, const char *name);

/** The fencing token of the current acquisition; asserts (not fatally) that there is one. */
uint64_t dlock_test_token(dlock_lock *l);

/**
 * Try `name` once with a fresh handle on `c` and, when that worked,
 * release it at once (asserting, not fatally, that the release worked).
 * Returns the acquire's status, or dlock_lock_new()'s when no handle could
 * be made.
 */
dlock_status dlock_test_probe(dlock_client *c, const char *name);

/*
 * Overlap detector for mutual-exclusion tests, in shared memory so forked
 * children can use it.  A holder calls enter() just after acquiring and
 * leave() just before releasing.  enter() flags a violation when another
 * holder is inside, then does a slow non-atomic read-modify-write of a
 * counter (yielding the CPU between read and write), so overlapping holders
 * also lose counts.  The atomic flag orders
 * the holders' accesses, so the detector itself is race-free under TSan.
 */
typedef struct dlock_test_overlap dlock_test_overlap;

dlock_test_overlap *dlock_test_overlap_new(void);
void dlock_test_overlap_free(dlock_test_overlap *ov);
/** Enter the critical section; returns its index (0, 1, 2 ... in entry order). */
uint64_t dlock_test_overlap_enter(dlock_test_overlap *ov);
void dlock_test_overlap_leave(dlock_test_overlap *ov);
/** Critical sections counted (equals the number of enter() calls if none overlapped). */
uint64_t dlock_test_overlap_count(const dlock_test_overlap *ov);
/** Number of enter() calls that found another holder inside. */
uint64_t dlock_test_overlap_violations(const dlock_test_overlap *ov);

/* Loop mode of the conformance suite: these helpers' calls too go through loop clients (testloop.h). */
#ifdef DLOCK_CONFORMANCE_LOOP
#include "testloop_map.h"
#endif

#endif
