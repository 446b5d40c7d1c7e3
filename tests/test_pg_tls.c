/*
 * postgres:// over TLS, on a real server that takes TCP connections only
 * with TLS, its certificate signed by a CA made at start
 * (ci/servers/postgres/tls.sh: DLOCK_TEST_PG_TLS_URI, _PORT, _CA,
 * _OTHER_CA).  The certificate names localhost and no address.
 *
 *   sslmode=verify-full, sslrootcert= the CA, host localhost: opens, and a
 *       lock is acquired (with a token) and released; the same URI with
 *       sslmode=disable is refused by the server, so the success was TLS
 *   the unrelated CA: DLOCK_EAUTH, libpq's "certificate verify failed"
 *   127.0.0.1 instead of localhost: DLOCK_EAUTH, libpq's "does not match
 *       host name"
 *
 * libpq does the TLS; dlock passes sslmode and sslrootcert through and
 * sorts a certificate libpq refused as DLOCK_EAUTH, as rediss:// does.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testsupport.h"

static const char *tls_uri, *ca, *other_ca;
static int port;

/* Open `uri`, expecting `want`; the message in err. */
static dlock_client *open_expect(const char *uri, dlock_status want, char *err, size_t errlen)
{
	dlock_client *c = NULL;
	err[0] = '\0';
	dlock_status st = dlock_client_open(&c, uri, NULL, err, errlen);
	printf("\n    %s: %s%s%s", uri, dlock_status_name(st), err[0] ? ": " : "", err);
	CU_ASSERT_EQUAL(st, want);
	if (st != DLOCK_OK) {
		CU_ASSERT_PTR_NULL(c);
	}
	return c;
}

static void test_verify_full(void)
{
	char err[1024];
	dlock_client *c = open_expect(tls_uri, DLOCK_OK, err, sizeof err);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *l = dlock_test_new_lock(c, "over-tls");
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 5000;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT(dlock_test_token(l) > 0);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "over-tls"), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "over-tls"), DLOCK_OK);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);

	/* The server takes no TCP connection without TLS: the success above was TLS. */
	char plain[512];
	snprintf(plain, sizeof plain, "postgres://dlock@127.0.0.1:%d/dlock_test?sslmode=disable", port);
	open_expect(plain, DLOCK_EAUTH, err, sizeof err);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "no encryption"));
}

static void test_wrong_ca(void)
{
	char uri[1024], err[1024];
	snprintf(uri, sizeof uri,
	         "postgres://dlock@localhost:%d/dlock_test?sslmode=verify-full&sslrootcert=%s&hostaddr=127.0.0.1", port,
	         other_ca);
	open_expect(uri, DLOCK_EAUTH, err, sizeof err);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "certificate verify failed"));
}

static void test_wrong_name(void)
{
	char uri[1024], err[1024];
	snprintf(uri, sizeof uri, "postgres://dlock@127.0.0.1:%d/dlock_test?sslmode=verify-full&sslrootcert=%s", port, ca);
	open_expect(uri, DLOCK_EAUTH, err, sizeof err);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "does not match host name"));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "127.0.0.1"));
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("postgres tls", NULL, NULL);
	CU_add_test(s, "sslmode=verify-full with the CA: a lock acquired and released", test_verify_full);
	CU_add_test(s, "an unrelated CA: DLOCK_EAUTH, certificate verify failed", test_wrong_ca);
	CU_add_test(s, "a name the certificate lacks: DLOCK_EAUTH, does not match host name", test_wrong_name);
}

int main(void)
{
	tls_uri = dlock_test_env("DLOCK_TEST_PG_TLS_URI");
	ca = dlock_test_env("DLOCK_TEST_PG_TLS_CA");
	other_ca = dlock_test_env("DLOCK_TEST_PG_TLS_OTHER_CA");
	const char *p = dlock_test_env("DLOCK_TEST_PG_TLS_PORT");
	if (!tls_uri || !ca || !other_ca || !p)
		return dlock_test_skip("no PostgreSQL server with TLS (DLOCK_TEST_PG_TLS_URI unset)");
	port = atoi(p);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
