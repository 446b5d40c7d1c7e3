/*
 * Loop clients driven by the test, for the conformance suite in loop mode
 * (conformance_loop, built with DLOCK_CONFORMANCE_LOOP).  testloop_map.h
 * renames the blocking calls of the test bodies to the functions below:
 * each opens or uses a loop client (dlock/loop.h) that a thread of
 * testloop.c drives in pull mode (poll() on dlock_loop_fd() for
 * dlock_loop_timeout_ms(), then dlock_loop_run()), so that every test runs
 * its calls through the asynchronous forms unchanged.
 *
 * How a call runs: the calling thread posts it to the client's loop thread
 * (through an eventfd polled beside the client's descriptor) and waits.  An
 * operation that talks to the server is started there with its _async form
 * and the caller is woken by its callback; a call that does not (making and
 * freeing handles, getters, dlock_observe()) runs there at once.  The
 * caller then sees what the loop thread saw: the status, the results, and
 * the failure's text, which testloop_client_errmsg() gives back to that
 * thread.  Called on the loop thread itself (from a lost-lock callback or
 * an observer), each function calls the library's own function, so the
 * blocking forms answer DLOCK_EDEADLK there, as dlock/loop.h says.
 * dlock_cancel() is not renamed: it is the one call any thread may make.
 *
 * Ownership: a client's loop thread and its record live from
 * testloop_client_open() until the client is closed and the last handle
 * made on it is freed (handles of a closed client are still used on that
 * thread).  testloop_election_free() resigns (and waits for that) before
 * it frees, since dlock_election_free() has resigned when it returns while a
 * loop client's free resigns afterwards, with no callback to await.
 * dlock_gc() has no asynchronous form: testloop_gc() runs it on
 * a blocking client of the same URI, opened for the call.
 *
 * Threads: any number of threads may call these functions at once, as on
 * a blocking client.  Errors: the library's statuses, unchanged; a
 * callback that never comes (a contract broken) aborts after TESTLOOP_WAIT_MS
 * with a message naming the call.
 */
#ifndef DLOCK_TESTLOOP_H
#define DLOCK_TESTLOOP_H

#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"

/* Longest wait for a callback (every bounded acquisition of the suite ends well within it). */
#define TESTLOOP_WAIT_MS 120000

/* ------------------------------------------------------- clients */

/** dlock_client_open(): the open completes (its callback has run) before it returns; a failed one is closed. */
dlock_status testloop_client_open(dlock_client **out, const char *uri, const dlock_client_options *opts,
                                  char *errbuf, size_t errlen);
/** dlock_client_close(): dlock_client_close_async() and wait for its callback. */
dlock_status testloop_client_close(dlock_client *client);
/** The text of the calling thread's last failed call on `client` through these functions. */
const char *testloop_client_errmsg(dlock_client *client);
const char *testloop_client_uri(const dlock_client *client);
dlock_status testloop_client_get_stats(dlock_client *client, dlock_client_stats *stats);
dlock_status testloop_client_capabilities(dlock_client *client, dlock_capabilities *caps);
dlock_status testloop_client_feature(dlock_client *client, dlock_feature feature, int64_t *value);

/* ------------------------------------------------------- locks */

dlock_status testloop_lock_new(dlock_client *client, const char *name, dlock_lock **out);
dlock_status testloop_rwlock_new(dlock_client *client, const char *name, dlock_lock **out);
dlock_status testloop_semaphore_new(dlock_client *client, const char *name, uint32_t permits, dlock_lock **out);
void testloop_lock_free(dlock_lock *lock);
const char *testloop_lock_name(const dlock_lock *lock);
dlock_lock_kind testloop_lock_get_kind(const dlock_lock *lock);
uint32_t testloop_lock_permits(const dlock_lock *lock);
dlock_status testloop_acquire(dlock_lock *lock, const dlock_acquire_options *opts);
dlock_status testloop_release(dlock_lock *lock);
dlock_status testloop_extend(dlock_lock *lock, int64_t lease_ms);
dlock_status testloop_check(dlock_lock *lock);
dlock_status testloop_lock_fencing_token(dlock_lock *lock, uint64_t *token);
dlock_status testloop_lock_permit_slot(dlock_lock *lock, uint32_t *slot);

/* ------------------------------------------------------- inspection */

dlock_status testloop_inspect(dlock_client *client, const char *name, dlock_lock_info **out);
dlock_status testloop_list(dlock_client *client, const char *name_prefix, dlock_lock_list **out);
dlock_status testloop_break(dlock_client *client, const char *name, size_t *broken);
dlock_status testloop_gc(dlock_client *client, const char *name_prefix, unsigned flags, dlock_gc_fn fn,
                         void *userdata, size_t *count);

/* ------------------------------------------------------- elections */

dlock_status testloop_election_new(dlock_client *client, const char *name, dlock_election **out);
void testloop_election_free(dlock_election *e);
dlock_lock *testloop_election_lock(dlock_election *e);
dlock_status testloop_campaign(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                               uint64_t *term);
dlock_status testloop_proclaim(dlock_election *e, const char *value);
dlock_status testloop_resign(dlock_election *e);
dlock_status testloop_election_leader(dlock_election *e, dlock_leader **out);
dlock_status testloop_observe(dlock_election *e, dlock_leader_fn fn, void *userdata);

/* ------------------------------------------------------- for the loop-only cases */

/** 1 when the calling thread is `client`'s loop thread. */
int testloop_on_loop_thread(const dlock_client *client);
/**
 * Run fn(arg) on `client`'s loop thread and wait until it returns.
 * DLOCK_EINVAL when `client` is not a loop client of this file.
 */
dlock_status testloop_run_on_loop(dlock_client *client, void (*fn)(void *arg), void *arg);

#endif
