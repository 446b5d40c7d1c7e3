/*
 * What an election's observer was told, for the election test programs: a
 * dlock_observe() callback that records each call, and awaits for what the
 * latest call must come to.
 *
 * Ownership: the caller owns the dlock_test_observer (on its stack or in
 * its own struct); init before dlock_observe(), destroy after the
 * observation stopped (dlock_observe(e, NULL, NULL) or the election freed).
 * Threads: dlock_test_on_leader() runs on the client's threads; every other
 * function may be called from the test's thread meanwhile (a mutex guards
 * the record).  Errors: the awaits return 0 on timeout and print what the
 * observer had and what was wanted; they assert nothing.
 */
#ifndef DLOCK_TESTOBSERVE_H
#define DLOCK_TESTOBSERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"

/** Calls whose elected flag and term the record keeps in order (the first ones). */
#define DLOCK_TEST_OBSERVER_HISTORY 64

typedef struct dlock_test_observer {
	pthread_mutex_t mu;
	size_t calls;
	/* The latest call: elected, term and value ("(null)" for a NULL value). */
	int elected;
	uint64_t term;
	char value[DLOCK_VALUE_MAX + 1];
	uint64_t highest; /* the highest term of a call that said elected */
	int went_back;    /* a call said elected with a term below `highest` */
	struct {
		int elected;
		uint64_t term;
	} history[DLOCK_TEST_OBSERVER_HISTORY]; /* calls [0, min(calls, HISTORY)) */
} dlock_test_observer;

/** Zero the record and make its mutex. */
void dlock_test_observer_init(dlock_test_observer *o);
/** Destroy its mutex (the callback must no longer run). */
void dlock_test_observer_destroy(dlock_test_observer *o);

/** A dlock_leader_fn whose userdata is a dlock_test_observer: records the call. */
void dlock_test_on_leader(dlock_election *e, const dlock_leader *leader, void *userdata);

/** How many calls so far. */
size_t dlock_test_observer_calls(dlock_test_observer *o);
/** 1 when a call ever said elected with a term below one said before. */
int dlock_test_observer_went_back(dlock_test_observer *o);

/**
 * Await, within `ms`, that the latest call says `value` (NULL: any) leads
 * with a term above `term_over`.  1 when it did, else 0 (printed).
 */
int dlock_test_observed_after(dlock_test_observer *o, const char *value, uint64_t term_over, int64_t ms);

/** The same with the term exactly `term` (0: any). */
int dlock_test_observed(dlock_test_observer *o, const char *value, uint64_t term, int64_t ms);

/** Await, within `ms`, that the latest call says nobody leads (not elected, value ""). */
int dlock_test_observed_nobody(dlock_test_observer *o, int64_t ms);

#endif
