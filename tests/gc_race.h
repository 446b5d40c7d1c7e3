/*
 * The race of dlock_gc() against holders, and a recorder of what gc reports
 * (struct gc_seen), for test_file_gc and test_pg_gc:
 * GC_RACE_WORKERS processes acquire and release GC_RACE_NAMES mutexes of
 * `prefix` and a semaphore of GC_RACE_PERMITS permits (each time one of
 * them at random) until GC_RACE_ACQUISITIONS are done in total, while one
 * more process runs dlock_gc() over `prefix` in a loop.  Asserts (CUnit,
 * in the parent) that no two holders of a mutex ever overlapped
 * (dlock_test_overlap, one per name) and never more than GC_RACE_PERMITS
 * held the semaphore, that each mutex's fencing tokens, and each permit
 * slot's, strictly increased in entry order across every removal, that
 * every acquisition and gc call succeeded, and that gc removed something
 * (else it raced nothing).  Call it with no client open (children fork).
 */
#ifndef DLOCK_TEST_GC_RACE_H
#define DLOCK_TEST_GC_RACE_H

#include <stddef.h>

#include "dlock/dlock.h"

#define GC_RACE_WORKERS 4
#define GC_RACE_NAMES 3
#define GC_RACE_PERMITS 2
#define GC_RACE_ACQUISITIONS 10000

/** Run the race on the client URI `uri`, on the names PREFIX0, PREFIX1, ... */
void gc_race(const char *uri, const char *prefix);

/** Try `l` once (DLOCK_ACQUIRE_OPTIONS_INIT: the URI's lease, renewal and fencing), shared when `shared`. */
dlock_status gc_try(dlock_lock *l, int shared);

/** What dlock_gc() reported, in order: names joined by ',' ("?" for a hashed one).  Start it { "", 0 }. */
struct gc_seen {
	char names[512];
	size_t calls;
};

/** A dlock_gc_removed_fn for a struct gc_seen `userdata`; asserts that each call names a resource. */
void gc_seen_removed(const char *name, const char *resource, void *userdata);

#endif
