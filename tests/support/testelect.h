/*
 * Campaigns for the election test programs (the conformance suite's
 * elections and each backend's own): dlock_campaign() with the options a
 * test names, and a candidate that campaigns on a thread of its own.
 *
 * Ownership: the caller owns the dlock_test_candidate (on its stack or in
 * its own struct) and the election it campaigns for; join the candidate
 * before freeing either.  Threads: the candidate's thread only campaigns
 * and records; the test's thread starts, awaits, cancels and joins it.
 * Errors: dlock_test_candidate_await_blocked() asserts (not fatally) what
 * it awaits; a join past its bound is a failure, and the campaign is then
 * cancelled until it returns (abort() when even that fails).
 */
#ifndef DLOCK_TESTELECT_H
#define DLOCK_TESTELECT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dlock/dlock.h"
#include "testsupport.h"

/**
 * dlock_campaign() with a wait bound, a lease (0: the URI's), renewal (-1:
 * the URI's, 0 off, 1 on) and, when `lost` is set, dlock_test_on_lost()
 * recording into it.  `term` may be NULL.
 */
dlock_status dlock_test_campaign(dlock_election *e, const char *value, int64_t wait_ms, int64_t lease_ms, int renew,
                                 dlock_test_lost *lost, uint64_t *term);

/* A thread that runs one dlock_test_campaign() (the URI's lease and renewal); records its status and term. */
typedef struct dlock_test_candidate {
	dlock_election *e;
	const char *value;
	int64_t wait_ms;
	dlock_test_lost lost; /* what its lost-lock callback saw */
	pthread_t thread;
	atomic_int started, done;
	dlock_status status;
	uint64_t term;
} dlock_test_candidate;

/** Start `c`: a campaign of `e` for `value`, waiting at most `wait_ms`. */
void dlock_test_candidate_start(dlock_test_candidate *c, dlock_election *e, const char *value, int64_t wait_ms);
/** For dlock_test_await(): `arg`, a dlock_test_candidate, has returned from its campaign. */
int dlock_test_candidate_done(void *arg);
/**
 * Await that the campaign is waiting on the server: started (within
 * `await_ms`), then (at most 300 ms) a driver acquire counted on `client`
 * beyond `base_server_acquires`, then a short settle; asserts that it has
 * not returned.
 */
void dlock_test_candidate_await_blocked(dlock_test_candidate *c, dlock_client *client, uint64_t base_server_acquires,
                                        int64_t await_ms);
/** Cancel the campaign (once) unless it returned; for dlock_test_await(), 1 once it has. */
int dlock_test_candidate_cancel(void *arg);
/** Join, allowing `timeout_ms`; returns its status. */
dlock_status dlock_test_candidate_join(dlock_test_candidate *c, int64_t timeout_ms);

#endif
