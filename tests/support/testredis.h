/*
 * Helpers for the Redis test programs (test_redis, test_redis_fair): key
 * prefixes of their own, URIs, tests run once per URI, and a raw hiredis
 * connection to look at what the backend left on the server.  Failures to
 * reach the server are fatal CUnit assertions.
 */
#ifndef DLOCK_TESTREDIS_H
#define DLOCK_TESTREDIS_H

#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"

/** A fresh key prefix, so no test sees another's keys. */
void dlock_testredis_prefix(char *out, size_t len);

/** `base` with prefix=`prefix` and `extra` ("k=v&..." or "") added to its query. */
void dlock_testredis_uri(char *out, size_t len, const char *base, const char *prefix, const char *extra);

/** A plain hiredis connection to 127.0.0.1:`port`; the caller frees it. */
redisContext *dlock_testredis_raw(int port);

/** Number of keys under `prefix` on the instance at `port`. */
long dlock_testredis_keys_under(int port, const char *prefix);

/**
 * Open `uri` expecting status `want` and no client; the message (printed)
 * must hold `expect` (NULL: anything) and none of the NULL-terminated
 * `secrets` (passwords, a key's path).
 */
void dlock_testredis_open_fails(const char *uri, dlock_status want, const char *expect, const char *const *secrets);

/** Run `CTL WHAT` (CTL: $DLOCK_TEST_REDIS_CTL, ci/servers/redis.sh's control command); 1 when it
 *  succeeded, else 0 with the failure printed. */
int dlock_testredis_ctl(const char *ctl, const char *what);

/** The same for a verb that prints a port ("PORT" or "HOST PORT"): that port, 0 when it failed. */
int dlock_testredis_ctl_port(const char *ctl, const char *what);

/** The clock of the server behind `ctx`, in ms (TIME; fatal when it does not answer). */
int64_t dlock_testredis_server_ms(redisContext *ctx);

/** The integer reply of `cmd` (a format with one %s) for `key`; -99 for any other reply. */
long long dlock_testredis_integer(redisContext *ctx, const char *cmd, const char *key);

/** The value of `key` into out[len], "" when absent. */
void dlock_testredis_get(redisContext *ctx, const char *key, char *out, size_t len);

/** Room for one URI in dlock_testredis_uris()'s array. */
#define DLOCK_TESTREDIS_URI_MAX 1024

/**
 * The Redis URIs of $DLOCK_TEST_URIS (every topology), and
 * $DLOCK_TEST_REDIS_UNIX_URI when it is not among them, into out[0..max):
 * how many.
 */
size_t dlock_testredis_uris(char (*out)[DLOCK_TESTREDIS_URI_MAX], size_t max);

/**
 * The single server's URI ($DLOCK_TEST_REDIS_URI), its port
 * ($DLOCK_TEST_REDIS_PORT) into *port; NULL, after saying that this part of
 * the test is SKIPPED, when either is unset.
 */
const char *dlock_testredis_single(int *port);

/** At most this many URIs and tests for dlock_testredis_add_each(). */
#define DLOCK_TESTREDIS_EACH_MAX 16

/**
 * Load the URIs (dlock_testredis_uris()) that the tests of
 * dlock_testredis_add_each() run on: how many (0: the program has nothing
 * to test and says SKIPPED).
 */
size_t dlock_testredis_every_uri(void);

/**
 * Add to `suite` a test called `name` that runs `body` once per URI that
 * dlock_testredis_every_uri() loaded, each announced by its scheme alone (a
 * query may hold a password).  Call it from the add_suites function, at
 * most DLOCK_TESTREDIS_EACH_MAX times (aborts beyond).
 */
void dlock_testredis_add_each(CU_pSuite suite, const char *name, void (*body)(const char *base));

/** PREFIX:{first 32 hex digits of SHA-256(name)}:SUFFIX, as the backend names its keys. */
void dlock_testredis_key(char *out, size_t len, const char *prefix, const char *name, const char *suffix);

#endif
