/*
 * Unit tests of postgres://'s own pure functions, which sit beside them
 * because they reach its internal header: the advisory key of a name
 * (golden values, the documented hash) and which URI parameters the driver
 * takes.  No server needed; tests/test_postgres.c checks the keys on a
 * server.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"
#include "testsupport.h"

static void test_golden_hash(void)
{
	static const struct {
		const char *bytes;
		size_t len;
		int64_t key;
	} v[] = {
		{ "dlock:a", 7, INT64_C(8408475929734341367) },
		{ "dlock:hello", 11, INT64_C(7777324794879810730) },
		{ "dlock:\xff\xfe", 8, INT64_C(-6975968165028297448) },
		{ "app:orders/42", 13, INT64_C(-8708382031313011388) },
		{ "dlock:'; DROP TABLE dlock_locks; --", 35, INT64_C(4865344899640008409) },
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		CU_ASSERT_EQUAL(dlock_pg_key(v[i].bytes, v[i].len), v[i].key);
	char *name = malloc(DLOCK_NAME_MAX);
	memset(name, 'n', DLOCK_NAME_MAX);
	size_t n = 0;
	char *ns = dlock_pg_namespaced("dlock", name, DLOCK_NAME_MAX, &n);
	CU_ASSERT_EQUAL(n, 6 + DLOCK_NAME_MAX);
	CU_ASSERT(ns && memcmp(ns, "dlock:nnn", 9) == 0);
	CU_ASSERT_EQUAL(dlock_pg_key(ns, n), INT64_C(6967788139897486411));
	free(ns);
	free(name);
}

/* libpq's own keywords pass; the ones the URI carries and unknown ones do not. */
static void test_knows_param(void)
{
	CU_ASSERT(dlock_pg_knows_param("mode"));
	CU_ASSERT(dlock_pg_knows_param("table"));
	CU_ASSERT(dlock_pg_knows_param("sslmode"));
	CU_ASSERT(dlock_pg_knows_param("application_name"));
	CU_ASSERT(dlock_pg_knows_param("options"));
	CU_ASSERT(!dlock_pg_knows_param("host"));
	CU_ASSERT(!dlock_pg_knows_param("password"));
	CU_ASSERT(!dlock_pg_knows_param("dbname"));
	CU_ASSERT(!dlock_pg_knows_param("bogus"));
}

/* The statements' integer parameters (dlock_decimal) and results, in and out of decimal text, at the edges too. */
static void test_int_text(void)
{
	static const int64_t v[] = { 0, 1, -1, 9, 10, 2147483647, INT64_C(8408475929734341367),
		                     INT64_C(-6975968165028297448), INT64_MAX, INT64_MIN };
	static const char *const text[] = { "0", "1", "-1", "9", "10", "2147483647", "8408475929734341367",
		                            "-6975968165028297448", "9223372036854775807", "-9223372036854775808" };
	char buf[24];
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		CU_ASSERT_EQUAL(dlock_decimal(buf, v[i]), strlen(text[i]));
		CU_ASSERT_STRING_EQUAL(buf, text[i]);
		CU_ASSERT_EQUAL(dlock_pg_text_int(text[i]), v[i]);
	}
	CU_ASSERT_EQUAL(dlock_pg_text_int(""), 0);
	CU_ASSERT_EQUAL(dlock_pg_text_int("12x"), 12);
	dlock_pg_ms_text(-5, buf);
	CU_ASSERT_STRING_EQUAL(buf, "1");
	dlock_pg_ms_text(INT64_C(1) << 40, buf);
	CU_ASSERT_STRING_EQUAL(buf, "2147483647");
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("postgres internals", NULL, NULL);
	CU_add_test(s, "golden_hash", test_golden_hash);
	CU_add_test(s, "knows_param", test_knows_param);
	CU_add_test(s, "int_text", test_int_text);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
