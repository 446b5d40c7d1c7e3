/* Shared helpers for dlock's CUnit test programs. */
#ifndef DLOCK_TESTSUPPORT_H
#define DLOCK_TESTSUPPORT_H

#include <CUnit/CUnit.h>
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

#endif
