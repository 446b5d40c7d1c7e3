/*
 * v1proxy:// (v1proxy.c), a driver built against the version-1 contract.
 * Its struct is the version-1 dlock_driver, shorter than today's: only the
 * registry may look inside it, and reads no slot past version 1.
 */
#ifndef DLOCK_TEST_V1PROXY_H
#define DLOCK_TEST_V1PROXY_H

struct dlock_driver;
extern const struct dlock_driver v1proxy_driver;

#endif
