/*
 * Helpers for the ZooKeeper test programs (test_zk_elect, test_zk_inspect):
 * the servers' host lists from the environment, handles of the test's own
 * (a new session, or another client's to end it from outside) and a
 * client's session.  Include after defining THREADED (the client
 * library's synchronous API).  Call them from the test's thread; a handle
 * that cannot be made is a fatal CUnit assertion, the rest is printed.
 */
#ifndef DLOCK_TESTZK_H
#define DLOCK_TESTZK_H

#include <zookeeper/zookeeper.h>

#include "dlock/dlock.h"

/** Room for one host list. */
#define DLOCK_TESTZK_HOSTS_MAX 512

/**
 * The host lists of $DLOCK_TEST_ZK_URI (hosts[0]) and
 * $DLOCK_TEST_ZK_ENSEMBLE_URI (hosts[1]), without "zk://" and the path's
 * start; 1, or 0 when either is unset or not a zk:// URI.
 */
int dlock_testzk_hosts(char hosts[2][DLOCK_TESTZK_HOSTS_MAX]);

/**
 * A handle of the test's own on `hosts` with the session `id` (NULL: a new
 * one), after waiting up to 20 s for it to connect (it may not have: see
 * zoo_state()).  The caller zookeeper_close()s it.
 */
zhandle_t *dlock_testzk_raw(const char *hosts, const clientid_t *id);

/** End the session `id` from outside: a handle on it, closed at once. */
void dlock_testzk_close_session(const char *hosts, const clientid_t *id);

/** The session of `c` (DLOCK_ZK_CTL_SESSION_ID; asserted, not fatally). */
clientid_t dlock_testzk_session(dlock_client *c);

#endif
