/*
 * The threads of a test program: how many it has now, and how many were
 * started since it began — every pthread_create(), the library's included,
 * in a program linked with -Wl,--wrap=pthread_create (threadcount.c
 * defines the wrapper; link it only into such a program).  Counting the
 * starts sees a thread that lived between two looks at /proc, which
 * sampling would miss.
 *
 * Threads: any.  Errors: dlock_test_threads_now() is -1 when it cannot
 * tell.
 */
#ifndef DLOCK_THREADCOUNT_H
#define DLOCK_THREADCOUNT_H

/** Threads of this process now (/proc/self/task), or -1. */
int dlock_test_threads_now(void);
/** Threads started so far by this process. */
long dlock_test_threads_started(void);

#endif
