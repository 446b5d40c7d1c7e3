/*
 * dlock_client_feature(): the growable query beside the frozen
 * dlock_capabilities.  Its answers agree with the capabilities on every
 * backend (mem://, file:// and each server URI in DLOCK_TEST_URIS); the
 * method facts match what the calls do; unknown codes, NULL arguments and
 * a closed client fail cleanly.  A driver states its facts in feature()
 * (ABI version 7, "feat7://") or, before, in capabilities() and the
 * control door ("feat://").  The frozen struct's layout is pinned.
 */
#include "dlock/dlock.h"
#include "dlock/sys/control.h"
#include "dlock/sys/driver.h"
#include "testsupport.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Frozen: a field added here would overrun applications' copies (see dlock.h).  LP64 layout. */
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_capabilities) == 40, "dlock_capabilities is frozen");
_Static_assert(offsetof(dlock_capabilities, scope) + sizeof(dlock_scope) == sizeof(dlock_capabilities),
               "dlock_capabilities is frozen: scope is its last field");

static char *file_dir;

static int64_t feature(dlock_client *c, dlock_feature f)
{
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, f, &v), DLOCK_OK);
	return v;
}

/* The answers of one client agree with its capabilities and with what its calls do. */
static void check_client(const char *uri)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_capabilities caps;
	CU_ASSERT_EQUAL_FATAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_CONSISTENCY), caps.consistency);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_FENCING), caps.fencing);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_FAIR), caps.fair);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_LEASE), caps.lease);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_WAKEUP), caps.wakeup);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_SCOPE), caps.scope);

	/* extend and check: the feature says whether the call does something. */
	dlock_lock *l = dlock_test_new_lock(c, "feature");
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_OK);
	dlock_status ext = dlock_extend(l, 0), chk = dlock_check(l);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_EXTEND), ext != DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_CHECK), chk != DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);

	int64_t control = feature(c, DLOCK_FEATURE_CONTROL);
	CU_ASSERT(control == 0 || control == 1);

	/* Read-write locks: the feature says whether dlock_rwlock_new() works. */
	int64_t rw = feature(c, DLOCK_FEATURE_RWLOCK), rf = feature(c, DLOCK_FEATURE_READ_FENCING);
	int64_t kc = feature(c, DLOCK_FEATURE_KIND_CHECK);
	dlock_lock *rwl = NULL;
	dlock_status rst = dlock_rwlock_new(c, "feature-rw", &rwl);
	CU_ASSERT_EQUAL(rst, rw == DLOCK_RWLOCK_NONE ? DLOCK_ENOTSUP : DLOCK_OK);
	CU_ASSERT(rw != DLOCK_RWLOCK_NONE || (rf == DLOCK_FENCING_NONE && kc == 0));
	CU_ASSERT(kc == 0 || kc == 1);
	dlock_lock_free(rwl);

	/* Collection: the feature says whether dlock_gc() does something (a dry run, on a prefix no name has). */
	char none[64];
	snprintf(none, sizeof none, "feature-gc-none-%ld-", (long)getpid());
	int64_t gc = feature(c, DLOCK_FEATURE_GC);
	size_t n = 1;
	CU_ASSERT_EQUAL(dlock_gc(c, none, DLOCK_GC_DRY_RUN, NULL, NULL, &n), gc ? DLOCK_OK : DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(n, 0);
	CU_ASSERT(gc == 0 || gc == 1);
	printf("\n    %s: rwlock=%s read-fencing=%s kind-check=%lld", dlock_client_uri(c),
	       dlock_rwlock_policy_name((dlock_rwlock_policy)rw), dlock_fencing_name((dlock_fencing)rf),
	       (long long)kc);
	printf("\n    %s: gc=%lld", dlock_client_uri(c), (long long)gc);
	printf("\n    %s: %s %s fair=%d extend=%lld check=%lld control=%lld", dlock_client_uri(c),
	       dlock_consistency_name(caps.consistency), dlock_lease_kind_name(caps.lease), caps.fair,
	       (long long)feature(c, DLOCK_FEATURE_EXTEND), (long long)feature(c, DLOCK_FEATURE_CHECK),
	       (long long)control);
	dlock_client_close(c);
}

static void test_agrees_everywhere(void)
{
	char uri[4200];
	snprintf(uri, sizeof uri, "mem://features-%ld", (long)getpid());
	check_client(uri);
	snprintf(uri, sizeof uri, "file://%s", file_dir);
	check_client(uri);
	const char *env = getenv("DLOCK_TEST_URIS");
	if (!env) {
		dlock_test_skip_part("server URIs (DLOCK_TEST_URIS unset)");
		return;
	}
	char *copy = strdup(env), *save = NULL;
	CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
	for (char *u = strtok_r(copy, " \t\r\n", &save); u; u = strtok_r(NULL, " \t\r\n", &save))
		check_client(u);
	free(copy);
}

static void test_bad_input(void)
{
	dlock_client *c = dlock_test_open("mem://features-bad", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int64_t v = 42;
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)9999, &v), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(v, 42);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "feature 9999 is not known"));
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)0, &v), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_FAIR, NULL), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_client_feature(NULL, DLOCK_FEATURE_FAIR, &v), DLOCK_EINVAL);
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_EXTEND), "extend");
	/* A sound build refuses none of its own drivers. */
	const char *scheme = NULL, *reason = NULL;
	CU_ASSERT_EQUAL(dlock_backend_refused(0, &scheme, &reason), DLOCK_ENOTFOUND);
	CU_ASSERT_STRING_EQUAL(dlock_feature_name((dlock_feature)9999), "unknown");
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_RWLOCK), "rwlock");
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_READ_FENCING), "read-fencing");
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_KIND_CHECK), "kind-check");
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_GC), "gc");
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_LOOP_RENEWS), "loop-renews");
	CU_ASSERT_STRING_EQUAL(dlock_rwlock_policy_name(DLOCK_RWLOCK_NONE), "none");
	CU_ASSERT_STRING_EQUAL(dlock_rwlock_policy_name(DLOCK_RWLOCK_WRITER_FIRST), "writer-first");
	CU_ASSERT_STRING_EQUAL(dlock_rwlock_policy_name(DLOCK_RWLOCK_NO_PREFERENCE), "no-preference");
	CU_ASSERT_STRING_EQUAL(dlock_rwlock_policy_name((dlock_rwlock_policy)99), "unknown");
	CU_ASSERT_STRING_EQUAL(dlock_status_name(DLOCK_EKIND), "EKIND");
	CU_ASSERT_STRING_EQUAL(dlock_strerror(DLOCK_EKIND), "name in use as another kind of lock");
	dlock_client_close(c);
}

/* ------------------------------------------------------------ a fact only the driver knows */

/* "feat://": a driver that answers feature 1000 (a code newer than the core's) through its door. */
#define NEWER_FEATURE 1000

static dlock_status feat_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	(void)uri, (void)host, (void)err;
	*backend = NULL;
	return DLOCK_OK;
}

static void feat_close(void *backend)
{
	(void)backend;
}

static void feat_caps(void *backend, dlock_capabilities *caps)
{
	(void)backend;
	*caps = (dlock_capabilities){ .backend = "feat", .fencing_note = "" };
}

static dlock_status feat_init(void *backend, void *lk, const char *name, size_t len, dlock_error *err)
{
	(void)backend, (void)lk, (void)name, (void)len, (void)err;
	return DLOCK_OK;
}

static dlock_status feat_try(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                             dlock_acquired *out, dlock_error *err)
{
	(void)backend, (void)lk, (void)lease_ms, (void)w, (void)retry, (void)err;
	*out = (dlock_acquired){ .token = 1, .sent_ns = 0 };
	return DLOCK_OK;
}

static dlock_status feat_release(void *backend, void *lk, dlock_error *err)
{
	(void)backend, (void)lk, (void)err;
	return DLOCK_OK;
}

static dlock_status feat_control(void *backend, void *lk, int op, void *arg, dlock_error *err)
{
	(void)backend, (void)lk;
	struct dlock_feature_query *q = arg;
	if (op != DLOCK_CTL_FEATURE || q->feature != NEWER_FEATURE)
		return DLOCK_ENOTSUP;
	if (q->value != 0)
		return dlock_error_set(err, DLOCK_EINVAL, "feat: the query's value was not cleared");
	q->value = 7;
	return DLOCK_OK;
}

static const dlock_driver feat_driver = {
	.abi_version = 2,
	.scheme = "feat",
	.open = feat_open,
	.close = feat_close,
	.capabilities = feat_caps,
	.lock_init = feat_init,
	.release = feat_release,
	.control = feat_control,
	.try_acquire = feat_try,
};

/* A code the core does not know goes to the driver's door; the application cannot send the core's own code. */
static void test_driver_answers_newer_codes(void)
{
	dlock_client *c = dlock_test_open("feat://", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int64_t v = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)NEWER_FEATURE, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 7);
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)(NEWER_FEATURE + 1), &v), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "not known to this library or to feat://"));
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_CONTROL), 1);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_EXTEND), 0);
	/* A version-2 driver has mutexes only: the core says so without asking it. */
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_RWLOCK), DLOCK_RWLOCK_NONE);
	dlock_lock *rw = NULL;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "rw", &rw), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "feat:// has no read-write locks"));
	struct dlock_feature_query q = { .feature = NEWER_FEATURE, .value = 0 };
	CU_ASSERT_EQUAL(dlock_client_control(c, DLOCK_CTL_FEATURE, &q), DLOCK_ENOTSUP);
	dlock_client_close(c);
}

/* "feat7://": the same fact through feature() (ABI version 7), which also claims read-write locks, and
 * counts the questions that reach it. */
static int feat7_asked[2]; /* [0]: NEWER_FEATURE, [1]: a code of the contract's own */

static dlock_status feat7_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	(void)backend, (void)kind;
	if (code == NEWER_FEATURE) {
		out->value = 8 + feat7_asked[0]++; /* asked anew each time */
		return DLOCK_OK;
	}
	if (code >= DLOCK_FACT_FIRST)
		feat7_asked[1]++;
	if (code == DLOCK_FEATURE_FENCING)
		out->value = DLOCK_FENCING_STRICT;
	else if (code == DLOCK_FEATURE_RWLOCK)
		out->value = DLOCK_RWLOCK_WRITER_FIRST; /* without lock_init_kind, the core has none */
	else
		return DLOCK_ENOTSUP;
	return DLOCK_OK;
}

static const dlock_driver feat7_driver = {
	.abi_version = 7,
	.scheme = "feat7",
	.open = feat_open,
	.close = feat_close,
	.feature = feat7_feature,
	.lock_init = feat_init,
	.release = feat_release,
	.try_acquire = feat_try,
};

/* A version-7 driver: every fact from feature(), the core's defaults for what it leaves out. */
static void test_driver_of_version_7(void)
{
	dlock_client *c = dlock_test_open("feat7://", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_capabilities caps;
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(caps.backend, "feat7"); /* DLOCK_FACT_BACKEND unanswered: the scheme */
	CU_ASSERT_STRING_EQUAL(caps.fencing_note, "");
	CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_STRICT);
	CU_ASSERT_EQUAL(caps.wakeup, DLOCK_WAKEUP_NOTIFY); /* 0 */
	int opened = feat7_asked[1];
	CU_ASSERT(opened > 0); /* the contract's facts, asked once at open */
	int64_t v = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)NEWER_FEATURE, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 8);
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)NEWER_FEATURE, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 9);
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)(NEWER_FEATURE + 1), &v), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "not known to this library or to feat7://"));
	/* The contract's own codes are not an application's: refused without asking the driver. */
	v = 42;
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)DLOCK_FACT_BACKEND, &v), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(dlock_client_feature(c, (dlock_feature)DLOCK_FACT_SLOTS, &v), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(v, 42);
	CU_ASSERT_EQUAL(feat7_asked[1], opened);
	/* What the core answers from the driver's methods: no door, no gc, no kinds without lock_init_kind. */
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_CONTROL), 0);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_GC), 0);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_RWLOCK), DLOCK_RWLOCK_NONE);
	CU_ASSERT_EQUAL(feature(c, DLOCK_FEATURE_ELECTION), -1);
	dlock_lock *rw = NULL;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "rw", &rw), DLOCK_ENOTSUP);
	dlock_client_close(c);
}

static void add_suites(void)
{
	if (dlock_register_driver(&feat_driver) != DLOCK_OK) {
		fprintf(stderr, "test_features: cannot register feat://\n");
		exit(1);
	}
	if (dlock_register_driver(&feat7_driver) != DLOCK_OK) {
		fprintf(stderr, "test_features: cannot register feat7://\n");
		exit(1);
	}
	CU_pSuite s = CU_add_suite("features", NULL, NULL);
	CU_add_test(s, "answers agree with the capabilities and the calls, on every backend", test_agrees_everywhere);
	CU_add_test(s, "unknown codes and NULL arguments", test_bad_input);
	CU_add_test(s, "a code newer than the core's is the driver's to answer", test_driver_answers_newer_codes);
	CU_add_test(s, "a driver of version 7 states its facts in feature()", test_driver_of_version_7);
}

int main(void)
{
	file_dir = dlock_test_mkdtemp();
	int rc = dlock_test_main(add_suites);
	dlock_test_rmtree(file_dir);
	free(file_dir);
	return rc;
}
