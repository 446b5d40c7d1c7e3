/*
 * Force-included (-include) into every file but core/status.c when
 * ci/static.sh runs clang-tidy.  The analyzer looks at one file at a time,
 * so it cannot see that dlock_error_set() returns its `status` argument:
 * it then follows paths where an error branch "returns DLOCK_OK" and
 * reports null dereferences that cannot happen.  This macro gives it the
 * one fact it misses.  The message's arguments are still evaluated, so a
 * value computed only for a message still counts as read.
 */
#ifndef DLOCK_ANALYZER_MODEL_H
#define DLOCK_ANALYZER_MODEL_H

#include "dlock/sys/driver.h"

#define dlock_error_set(err, status, ...) ((void)(err), (void)(__VA_ARGS__), (dlock_status)(status))

#endif
