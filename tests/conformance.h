/*
 * Conformance suite: the contract of include/dlock/dlock.h, stated once and
 * run against every backend URI.  Each conformance_*.c file contributes a
 * table of tests; conformance.c registers one CUnit suite per URI and gives
 * the tests the helpers below.
 *
 * Test bodies find their backend through conf_uri() and conf_caps() and
 * decide backend-specific behaviour from the capabilities only.  Worker
 * threads and child processes never call CUnit: they record what happened
 * and the test's thread asserts it after joining them.
 *
 * Loop mode (conformance_loop, built with DLOCK_CONFORMANCE_LOOP): the same
 * bodies, with every client a loop client (dlock/loop.h) that a thread of
 * the test drives: support/testloop_map.h renames their calls to
 * support/testloop.c.  A case that tests what loop mode defines otherwise
 * (reentrancy per handle, not per thread) says SKIPPED there, and
 * conformance_loop_cases.c adds the cases of loop mode.
 */
#ifndef DLOCK_CONFORMANCE_H
#define DLOCK_CONFORMANCE_H

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"
#include "testsupport.h"
#ifdef DLOCK_CONFORMANCE_LOOP
#include "testloop_map.h"
#endif

/* 1 under ThreadSanitizer, whose runtime runs threads of its own. */
#if defined(__SANITIZE_THREAD__)
#define CONF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CONF_TSAN 1
#endif
#endif
#ifndef CONF_TSAN
#define CONF_TSAN 0
#endif

/* Bound for an acquisition that must succeed, so a hang becomes a failure. */
#define CONF_LONG_WAIT_MS 30000
/* Slack on every upper timing bound (sanitizers, loaded machines). */
#define CONF_SLACK_MS 1000
/* Bound for awaiting a condition that must come true. */
#define CONF_AWAIT_MS 10000

typedef struct conf_test {
	const char *name;
	CU_TestFunc fn;
} conf_test;

/* Test tables, each ended by { NULL, NULL }. */
extern const conf_test conf_excl_tests[];    /* conformance_excl.c */
extern const conf_test conf_wait_tests[];    /* conformance_wait.c */
extern const conf_test conf_lease_tests[];   /* conformance_lease.c */
extern const conf_test conf_names_tests[];   /* conformance_names.c */
extern const conf_test conf_rw_tests[];      /* conformance_rw.c */
extern const conf_test conf_sem_tests[];     /* conformance_sem.c */
extern const conf_test conf_hold_tests[];    /* conformance_hold.c */
extern const conf_test conf_inspect_tests[]; /* conformance_inspect.c */
extern const conf_test conf_elect_tests[];   /* conformance_elect.c */
extern const conf_test conf_uri_tests[];     /* conformance_names.c, not per URI */
extern const conf_test conf_scheme_tests[];  /* conformance_uri.c, not per URI */
#ifdef DLOCK_CONFORMANCE_LOOP
extern const conf_test conf_loop_tests[];    /* conformance_loop_cases.c */
#endif

/* ------------------------------------------------------- the backend */

/** URI of the backend under test. */
const char *conf_uri(void);
/** Its capabilities, read when the suite started. */
const dlock_capabilities *conf_caps(void);
/** Iteration count `base` times DLOCK_TEST_SCALE (default 1; in loop mode a quarter of that), at least 1. */
size_t conf_scaled(size_t base);

/* ------------------------------------------------------- assertions */

#define CONF_ASSERT_ST(expr, want) \
	conf_assert_status((expr), (want), (want), #expr, __FILE__, __LINE__)
#define CONF_ASSERT_ST2(expr, want, or_want) \
	conf_assert_status((expr), (want), (or_want), #expr, __FILE__, __LINE__)

/** Assert that `got` is `want` or `or_want`; prints both names when not. */
int conf_assert_status(dlock_status got, dlock_status want, dlock_status or_want,
                       const char *expr, const char *file, unsigned line);

/* ------------------------------------------------------- clients, locks */

/** Open a client on the backend under test; NULL (and a failure) if it cannot. */
dlock_client *conf_open(void);
/** Close a client, asserting DLOCK_OK.  NULL is a no-op. */
void conf_close(dlock_client *client);
/** New handle for `name`; NULL (and a failure) if it cannot be made. */
dlock_lock *conf_lock(dlock_client *client, const char *name);
/** A name unique to this run and call: "<run prefix>-<counter>-<tag>". */
void conf_name(char *out, size_t outlen, const char *tag);
/**
 * Names without the run's prefix are shared by every group of the run on
 * one server (a pooler's URI and the server's own reach the same rows):
 * between conf_shared_names_begin() and _end() no other group of this run
 * uses them.  Returns what _end() takes.
 */
int conf_shared_names_begin(void);
void conf_shared_names_end(int token);
/** dlock_acquire() with the given wait bound. */
dlock_status conf_acquire(dlock_lock *lock, int64_t wait_ms);
/** The client's counters (zeroed, and a failure, if they cannot be read). */
dlock_client_stats conf_stats(dlock_client *client);

/* ------------------------------------------------------- waiter thread */

/**
 * A thread that runs one dlock_acquire() on `lock`.  It sets `started` just
 * before the call, then records the status and sets `done`.  With `release`
 * set it releases at once after a successful acquire (status in
 * release_status); with `order` set it takes a ticket from it while holding.
 */
typedef struct conf_waiter {
	dlock_lock *lock;
	int64_t wait_ms;
	int release;
	atomic_uint *order;
	pthread_t thread;
	atomic_int started;
	atomic_int done;
	dlock_status status;
	dlock_status release_status;
	unsigned ticket;
} conf_waiter;

void conf_waiter_start(conf_waiter *w, dlock_lock *lock, int64_t wait_ms, int release,
                       atomic_uint *order);
/**
 * Await that the waiter is inside dlock_acquire(): its `started` flag, then
 * (bounded) a driver acquire counted on `client` beyond `base_server_acquires`,
 * then a short settle.  Asserts that it is still waiting.
 */
void conf_waiter_await_blocked(conf_waiter *w, dlock_client *client, uint64_t base_server_acquires);
/** 1 once the waiter's acquire returned. */
int conf_waiter_done(const conf_waiter *w);
/**
 * Join the waiter, allowing `timeout_ms` for its acquire to return; past
 * that, record a failure and cancel it until it does.  Returns its status.
 */
dlock_status conf_waiter_join(conf_waiter *w, int64_t timeout_ms);

/* ------------------------------------------------------- processes */

/**
 * Fork `children` processes, each running child(index, arg) and exiting
 * with what it returns (never back into CUnit); wait for them all and
 * assert that each exited with 0.
 *
 * Fork only while this process runs no other thread (no client open): a
 * child forked while another thread holds a lock inside the C library or
 * a sanitizer's allocator can wait on it forever (ASan), or is stopped
 * when it starts a thread (TSan).  A test that needs clients of its own
 * beside the children starts them first and opens its clients after.
 */
void conf_run_children(int children, int (*child)(int index, void *arg), void *arg);
/** conf_run_children() in two halves: fork (pids[children]), then wait and assert. */
void conf_children_start(int children, int (*child)(int index, void *arg), void *arg, pid_t *pids);
void conf_children_wait(int children, const pid_t *pids);

/* ------------------------------------------------------- watchdog */

/**
 * Safety net for an acquire that the test's own thread runs and that must
 * return by itself: after `after_ms` the watchdog cancels `lock` repeatedly
 * until stopped.  conf_watchdog_stop() returns 1 if it had to.
 */
typedef struct conf_watchdog {
	dlock_lock *lock;
	int64_t after_ms;
	atomic_int stop;
	atomic_int fired;
	pthread_t thread;
} conf_watchdog;

void conf_watchdog_start(conf_watchdog *d, dlock_lock *lock, int64_t after_ms);
int conf_watchdog_stop(conf_watchdog *d);

#endif
