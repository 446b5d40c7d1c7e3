/*
 * kv://, the example driver, on a loop client: what its part on the loop
 * (examples/kv_driver_loop.c, driver contract 9) does beyond the contract
 * cases (loop_cases.h) and those every driver on the loop owes
 * (loop_driver.c), which test_loop_servers.c runs on it too: with a
 * password, every connection authenticates first, reconnections too (the
 * password-protected primary of the sentinel set-up, when
 * DLOCK_TEST_SENTINEL_DATA_PORTS names it).
 *
 * Faults go through a proxy of the test's own, never to the shared server.
 * Threads: the test's, which drives the loop.  Errors: CUnit assertions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faultproxy.h"
#include "faults.h"
#include "loop_cases.h"

/* With a password: the loop's connection authenticates, and again after every connection was cut. */
static void test_kv_password(void)
{
	const char *ports = dlock_test_env("DLOCK_TEST_SENTINEL_DATA_PORTS");
	const char *pw = dlock_test_env("DLOCK_TEST_SENTINEL_DATA_PASSWORD");
	if (!ports || !pw) {
		dlock_test_skip_part("no password-protected Redis (DLOCK_TEST_SENTINEL_DATA_PORTS, _PASSWORD unset)");
		return;
	}
	char uri[512], name[128];
	snprintf(uri, sizeof uri, "kv://:%s@127.0.0.1:%d?prefix=loop-kv", pw, atoi(ports)); /* the primary */
	faultproxy *px;
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lc_open_via_proxy(lp, uri, "io_timeout=500ms", &px);
	lr_name(name, sizeof name, "kv-auth");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	dlock_status st = h ? lr_acquire_now(tc, h, 0) : DLOCK_EINVAL;
	CU_ASSERT_EQUAL(st, DLOCK_OK); /* a call before AUTH would meet NOAUTH: DLOCK_ESERVER */
	if (st == DLOCK_OK) {
		faultproxy_reset(px);
		/* On a new connection, or on the cut one if the loop has not seen the cut yet: cannot tell. */
		st = lr_check_now(tc, h);
		CU_ASSERT(st == DLOCK_OK || st == DLOCK_EUNCERTAIN);
		CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK); /* connected and authenticated again */
	}
	dlock_lock_free(h);
	lr_loop_free(lp);
	faultproxy_stop(px);
}

const lc_case lc_kv_cases[] = {
	{ "kv: a password authenticates every connection", test_kv_password },
	{ NULL, NULL },
};
