#include "testsupport.h"

#include <CUnit/Basic.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int dlock_test_main(void (*add_suites)(void))
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	add_suites();
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	unsigned suite_fail = CU_get_number_of_suites_failed();
	CU_cleanup_registry();
	return (failed || suite_fail) ? 1 : 0;
}

char *dlock_test_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof tmpl, "%s/dlock-test-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpl)) {
		perror("mkdtemp");
		abort();
	}
	char *out = malloc(sizeof tmpl);
	if (!out)
		abort();
	snprintf(out, sizeof tmpl, "%s", tmpl);
	return out;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(path);
}

void dlock_test_rmtree(const char *path)
{
	if (path)
		nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int64_t dlock_test_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
