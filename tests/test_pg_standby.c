/*
 * postgres:// never holds a lock on a hot standby: advisory locks work
 * there but are not replicated, so they would exclude nothing on the
 * primary.  Against a real primary and its streaming standby
 * (ci/servers/postgres.sh): the standby alone is refused with a message
 * that says what to do; a URI listing the standby first and the primary
 * with target_session_attrs=read-write reaches the primary and locks there;
 * the same list without it is refused, not silently used.
 */
#include "dlock/dlock.h"
#include "testsupport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *primary_uri, *standby_uri;

/* "postgres://dlock@HOST:PORT/dlock_test" -> "HOST:PORT" */
static void host_port(const char *uri, char *out, size_t len)
{
	const char *at = strchr(uri, '@'), *slash = at ? strchr(at, '/') : NULL;
	CU_ASSERT_FATAL(at && slash);
	snprintf(out, len, "%.*s", (int)(slash - at - 1), at + 1);
}

static void test_standby_refused(void)
{
	dlock_client *c = NULL;
	char err[512] = "";
	CU_ASSERT_EQUAL(dlock_client_open(&c, standby_uri, NULL, err, sizeof err), DLOCK_ECONNECT);
	CU_ASSERT_PTR_NULL(c);
	printf("\n    %s", err);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "hot standby"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "target_session_attrs=read-write"));
}

static void test_list_reaches_primary(void)
{
	char standby[128], primary[128], uri[512], err[512] = "";
	host_port(standby_uri, standby, sizeof standby);
	host_port(primary_uri, primary, sizeof primary);

	snprintf(uri, sizeof uri, "postgres://dlock@%s,%s/dlock_test?target_session_attrs=read-write", standby, primary);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *l = dlock_test_new_lock(c, "on-the-primary");
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_OK);
	/* Held on the primary: a client of the primary alone cannot take it. */
	dlock_client *p = dlock_test_open(primary_uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(p);
	CU_ASSERT_EQUAL(dlock_test_probe(p, "on-the-primary"), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(p, "on-the-primary"), DLOCK_OK);
	dlock_client_close(p);
	dlock_lock_free(l);
	dlock_client_close(c);

	dlock_client *none = NULL;
	snprintf(uri, sizeof uri, "postgres://dlock@%s,%s/dlock_test", standby, primary);
	CU_ASSERT_EQUAL(dlock_client_open(&none, uri, NULL, err, sizeof err), DLOCK_ECONNECT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "hot standby"));
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("postgres standby", NULL, NULL);
	CU_add_test(s, "a hot standby is refused, with what to do", test_standby_refused);
	CU_add_test(s, "standby and primary listed, read-write: the primary", test_list_reaches_primary);
}

int main(void)
{
	primary_uri = dlock_test_env("DLOCK_TEST_PG_URI");
	standby_uri = dlock_test_env("DLOCK_TEST_PG_STANDBY_URI");
	if (!primary_uri || !standby_uri)
		return dlock_test_skip("no postgres primary with a standby (DLOCK_TEST_PG_STANDBY_URI unset)");
	return dlock_test_main(add_suites);
}
