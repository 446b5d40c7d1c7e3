/*
 * The core's own helpers beneath everything (util.c); those drivers use
 * too are declared in include/dlock/sys/driver.h.  Pure functions.
 */
#ifndef DLOCK_CORE_UTIL_H
#define DLOCK_CORE_UTIL_H

/** The value of one hex digit (either case), -1 for any other character. */
int dlock_hex_digit(char ch);

#endif
