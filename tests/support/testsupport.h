/* Shared helpers for dlock's CUnit test programs. */
#ifndef DLOCK_TESTSUPPORT_H
#define DLOCK_TESTSUPPORT_H

#include <CUnit/CUnit.h>
#include <stddef.h>
#include <stdint.h>

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
 * the password of its userinfo replaced by "***", for test output about a
 * URI that no client could open.
 */
void dlock_test_mask_uri(const char *uri, char *out, size_t outlen);

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

#endif
