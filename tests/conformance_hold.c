/*
 * Conformance: hold bounds (dlock_acquire_options::min_hold and
 * max_hold, URI min_hold and max_hold), after ShedLock's "lock at least
 * for" and "lock at most for".  Each bound must hold to within one
 * renewal period: the tests use a lease of LEASE_MS (renewed every third
 * of it) and allow that period plus CONF_SLACK_MS.  Lower bounds are
 * exact: a lock must never be free before its minimum hold.
 */
#include "conformance.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEASE_MS 900
#define RENEWAL_PERIOD_MS (LEASE_MS / 3)
/* The bounds: short, as the suite runs on every URI, yet several renewal periods long. */
#define MIN_MS 600
#define MAX_MS 700
#define EXIT_MIN_MS 1000

/* Bounds as the options take them: 0 the URI's (none in the suite's URIs), DLOCK_HOLD_NONE, or ms. */
static dlock_status acquire_bounded(dlock_lock *lock, int64_t wait_ms, int64_t min_ms, int64_t max_ms,
                                    dlock_test_lost *lost)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.lease_ms = LEASE_MS;
	o.min_hold = min_ms;
	o.max_hold = max_ms;
	o.on_lost = lost ? dlock_test_on_lost : NULL;
	o.lost_userdata = lost;
	return dlock_acquire(lock, &o);
}

/* A release before the minimum returns at once, but nobody else gets the name until the bound. */
static void test_min_hold_keeps_the_lock(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[96];
	conf_name(name, sizeof name, "minhold");
	dlock_lock *la = conf_lock(a, name), *lb = conf_lock(b, name);
	if (!la || !lb)
		goto out;
	int64_t before = dlock_test_now_ms();
	if (!CONF_ASSERT_ST(acquire_bounded(la, 0, MIN_MS, 0, NULL), DLOCK_OK))
		goto out;
	CONF_ASSERT_ST(dlock_release(la), DLOCK_OK);
	uint64_t token;
	if (conf_caps()->fencing != DLOCK_FENCING_NONE)
		CONF_ASSERT_ST(dlock_lock_fencing_token(la, &token), DLOCK_ENOTHELD); /* the owner let it go */
	CONF_ASSERT_ST(dlock_release(la), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_test_probe(b, name), DLOCK_EBUSY);

	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, CONF_LONG_WAIT_MS, LEASE_MS);
	CONF_ASSERT_ST(dlock_test_waiter_join(&w, CONF_LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(w.at_ms >= before + MIN_MS);
	CU_ASSERT(w.at_ms <= before + MIN_MS + RENEWAL_PERIOD_MS + CONF_SLACK_MS);
	if (w.status == DLOCK_OK)
		CONF_ASSERT_ST(dlock_release(lb), DLOCK_OK);
out:
	dlock_lock_free(la);
	dlock_lock_free(lb);
	conf_close(a);
	conf_close(b);
}

/* The handle that lingers can be acquired again: that waits for the bound too, within the client. */
static void test_min_hold_same_handle_waits(void)
{
	dlock_client *a = conf_open();
	char name[96];
	conf_name(name, sizeof name, "minhold-again");
	dlock_lock *la = conf_lock(a, name), *other = conf_lock(a, name);
	if (!la || !other)
		goto out;
	int64_t before = dlock_test_now_ms();
	if (!CONF_ASSERT_ST(acquire_bounded(la, 0, MIN_MS, 0, NULL), DLOCK_OK))
		goto out;
	CONF_ASSERT_ST(dlock_release(la), DLOCK_OK);
	CONF_ASSERT_ST(acquire_bounded(other, 0, 0, 0, NULL), DLOCK_EBUSY); /* another handle of the client */
	CONF_ASSERT_ST(acquire_bounded(la, 0, 0, 0, NULL), DLOCK_EBUSY);
	CONF_ASSERT_ST(acquire_bounded(la, CONF_LONG_WAIT_MS, 0, 0, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_now_ms() >= before + MIN_MS);
	CONF_ASSERT_ST(dlock_release(la), DLOCK_OK); /* no minimum this time: free at once */
	CONF_ASSERT_ST(acquire_bounded(other, 0, 0, 0, NULL), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
out:
	dlock_lock_free(la);
	dlock_lock_free(other);
	conf_close(a);
}

/* Only the last level lingers; past the bound a release frees the name at once. */
static void test_min_hold_levels_and_passed_bound(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[96];
	conf_name(name, sizeof name, "minhold-levels");
	dlock_lock *la = conf_lock(a, name);
	if (!la || !b)
		goto out;
	if (!CONF_ASSERT_ST(acquire_bounded(la, 0, 150, 0, NULL), DLOCK_OK))
		goto out;
	CONF_ASSERT_ST(acquire_bounded(la, 0, 150, 0, NULL), DLOCK_OK); /* reentry */
	CONF_ASSERT_ST(dlock_release(la), DLOCK_OK);
	uint64_t token;
	if (conf_caps()->fencing != DLOCK_FENCING_NONE)
		CONF_ASSERT_ST(dlock_lock_fencing_token(la, &token), DLOCK_OK); /* still held: one level left */
	dlock_test_sleep_ms(200); /* the bound itself is what is tested: time must pass */
	CONF_ASSERT_ST(dlock_release(la), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(b, name), DLOCK_OK);
out:
	dlock_lock_free(la);
	conf_close(a);
	conf_close(b);
}

/* At the maximum the core releases the lock and reports DLOCK_LOST_MAX_HOLD; renewal kept it until then. */
static void test_max_hold_releases_and_reports(void)
{
	dlock_client *a = conf_open(), *b = conf_open();
	char name[96];
	conf_name(name, sizeof name, "maxhold");
	dlock_lock *la = conf_lock(a, name);
	dlock_test_lost lost = { 0 };
	if (!la || !b)
		goto out;
	int64_t before = dlock_test_now_ms();
	if (!CONF_ASSERT_ST(acquire_bounded(la, 0, 0, MAX_MS, &lost), DLOCK_OK))
		goto out;
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, MAX_MS + RENEWAL_PERIOD_MS + CONF_SLACK_MS));
	int64_t at = dlock_test_now_ms();
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_MAX_HOLD);
	/* Told before the server can hand it on: at most the lease's safety margins early. */
	CU_ASSERT(at >= before + MAX_MS - MAX_MS / 10 - 60);
	dlock_test_waiter w;
	dlock_lock *lb = conf_lock(b, name);
	if (lb) {
		dlock_test_waiter_start(&w, lb, CONF_LONG_WAIT_MS, LEASE_MS);
		CONF_ASSERT_ST(dlock_test_waiter_join(&w, CONF_LONG_WAIT_MS), DLOCK_OK);
		CU_ASSERT(w.at_ms <= at + RENEWAL_PERIOD_MS + CONF_SLACK_MS);
		if (w.status == DLOCK_OK)
			CONF_ASSERT_ST(dlock_release(lb), DLOCK_OK);
		dlock_lock_free(lb);
	}
	CONF_ASSERT_ST(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
out:
	dlock_lock_free(la);
	conf_close(a);
	conf_close(b);
}

/* A lease shorter than the maximum is renewed up to it: the lock is still held past several leases. */
static void test_max_hold_renews_until_the_bound(void)
{
	if (conf_caps()->lease != DLOCK_LEASE_TTL) {
		dlock_test_skip("sessions hold without a lease");
		return;
	}
	dlock_client *a = conf_open();
	char name[96];
	conf_name(name, sizeof name, "maxhold-renew");
	dlock_lock *la = conf_lock(a, name);
	dlock_test_lost lost = { 0 };
	if (!la)
		goto out;
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.lease_ms = 300;
	o.max_hold = 1200;
	o.on_lost = dlock_test_on_lost;
	o.lost_userdata = &lost;
	int64_t before = dlock_test_now_ms();
	if (!CONF_ASSERT_ST(dlock_acquire(la, &o), DLOCK_OK))
		goto out;
	dlock_test_sleep_ms(800); /* more than two leases: only renewal keeps it */
	CONF_ASSERT_ST(dlock_check(la), DLOCK_OK);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, 1200 + CONF_SLACK_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_MAX_HOLD);
	CU_ASSERT(dlock_test_now_ms() >= before + 1200 - 1200 / 10 - 60);
	CONF_ASSERT_ST(dlock_release(la), DLOCK_ENOTHELD);
out:
	dlock_lock_free(la);
	conf_close(a);
}

/* Bounds out of range, or a maximum under the minimum, are refused; older options versions still work. */
static void test_hold_bad_options(void)
{
	dlock_client *a = conf_open();
	char name[96];
	conf_name(name, sizeof name, "hold-bad");
	dlock_lock *la = conf_lock(a, name);
	if (!la)
		goto out;
	CONF_ASSERT_ST(acquire_bounded(la, 0, -1, 0, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(acquire_bounded(la, 0, 0, -5, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(acquire_bounded(la, 0, 2000, 1000, NULL), DLOCK_EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "max_hold is less than min_hold"));
	dlock_acquire_options v3 = DLOCK_ACQUIRE_OPTIONS_INIT;
	v3.version = 3;
	v3.wait_ms = 0;
	v3.min_hold = -77; /* past a version-3 struct: never read */
	if (CONF_ASSERT_ST(dlock_acquire(la, &v3), DLOCK_OK))
		CONF_ASSERT_ST(dlock_release(la), DLOCK_OK);
out:
	dlock_lock_free(la);
	conf_close(a);
}

/* The URI's min_hold and max_hold are the defaults; bad values are DLOCK_EURI. */
static void test_hold_uri_parameters(void)
{
	static const char *const bad[] = { "min_hold=soon", "max_hold=-1s", "min_hold=2s&max_hold=1s" };
	const char *uri = conf_uri();
	char text[2048];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(text, sizeof text, "%s%c%s", uri, strchr(uri, '?') ? '&' : '?', bad[i]);
		dlock_client *c = NULL;
		char err[256] = "";
		CONF_ASSERT_ST(dlock_client_open(&c, text, NULL, err, sizeof err), DLOCK_EURI);
		CU_ASSERT(strstr(err, "hold") != NULL);
		dlock_client_close(c);
	}
	snprintf(text, sizeof text, "%s%cmin_hold=500ms", uri, strchr(uri, '?') ? '&' : '?');
	dlock_client *a = NULL, *b = conf_open();
	char err[256] = "";
	if (!CONF_ASSERT_ST(dlock_client_open(&a, text, NULL, err, sizeof err), DLOCK_OK) || !b) {
		conf_close(b);
		return;
	}
	char name[96];
	conf_name(name, sizeof name, "hold-uri");
	dlock_lock *la = conf_lock(a, name);
	int64_t before = dlock_test_now_ms();
	if (la && CONF_ASSERT_ST(acquire_bounded(la, 0, 0, 0, NULL), DLOCK_OK)) {
		CONF_ASSERT_ST(dlock_release(la), DLOCK_OK);
		CONF_ASSERT_ST(dlock_test_probe(b, name), DLOCK_EBUSY);
		dlock_lock *lb = conf_lock(b, name);
		if (lb) {
			CONF_ASSERT_ST(acquire_bounded(lb, CONF_LONG_WAIT_MS, 0, 0, NULL), DLOCK_OK);
			CU_ASSERT(dlock_test_now_ms() >= before + 500);
			dlock_release(lb);
			dlock_lock_free(lb);
		}
	}
	dlock_lock_free(la);
	conf_close(a);
	conf_close(b);
}

/* What a process that exits during its minimum hold leaves: a lease ends at the bound (the lock
 * holds without its process), a session's hold goes with the session, as documented. */
struct exit_arg {
	char name[96];
	int64_t *acquired_ms; /* shared memory */
};

static int exiting_holder(int index, void *argp)
{
	struct exit_arg *arg = argp;
	(void)index;
	dlock_client *c = NULL;
	char err[256];
	if (dlock_client_open(&c, conf_uri(), NULL, err, sizeof err) != DLOCK_OK)
		return 1;
	dlock_lock *l = NULL;
	int rc = 2;
	if (dlock_lock_new(c, arg->name, &l) == DLOCK_OK && acquire_bounded(l, 0, EXIT_MIN_MS, 0, NULL) == DLOCK_OK) {
		*arg->acquired_ms = dlock_test_now_ms();
		rc = dlock_release(l) == DLOCK_OK ? 0 : 3;
	}
	dlock_lock_free(l);
	dlock_client_close(c);
	return rc;
}

static void test_min_hold_after_the_process_exits(void)
{
	if (conf_caps()->scope == DLOCK_SCOPE_PROCESS) {
		dlock_test_skip("other processes do not share this backend");
		return;
	}
	struct exit_arg arg;
	conf_name(arg.name, sizeof arg.name, "minhold-exit");
	arg.acquired_ms = dlock_test_shared_alloc(sizeof *arg.acquired_ms);
	if (!arg.acquired_ms)
		return;
	*arg.acquired_ms = 0;
	int64_t before = dlock_test_now_ms();
	conf_run_children(1, exiting_holder, &arg);
	dlock_client *b = conf_open();
	dlock_lock *lb = conf_lock(b, arg.name);
	if (lb && CONF_ASSERT_ST(acquire_bounded(lb, CONF_LONG_WAIT_MS, 0, 0, NULL), DLOCK_OK)) {
		int64_t at = dlock_test_now_ms();
		if (conf_caps()->lease == DLOCK_LEASE_TTL) {
			CU_ASSERT(at >= before + EXIT_MIN_MS); /* the lease outlived its process */
		} else {
			CU_ASSERT(at < *arg.acquired_ms + EXIT_MIN_MS); /* freed with the session, early */
		}
		CONF_ASSERT_ST(dlock_release(lb), DLOCK_OK);
	}
	dlock_lock_free(lb);
	conf_close(b);
	dlock_test_shared_free(arg.acquired_ms, sizeof *arg.acquired_ms);
}

const conf_test conf_hold_tests[] = {
	{ "hold: a release before the minimum keeps the lock until it", test_min_hold_keeps_the_lock },
	{ "hold: the lingering handle and the client's others wait for the minimum", test_min_hold_same_handle_waits },
	{ "hold: only the last level lingers; past the minimum a release frees", test_min_hold_levels_and_passed_bound },
	{ "hold: at the maximum the core releases and reports DLOCK_LOST_MAX_HOLD", test_max_hold_releases_and_reports },
	{ "hold: renewal keeps a short lease up to the maximum", test_max_hold_renews_until_the_bound },
	{ "hold: bad bounds are refused; options version 3 still works", test_hold_bad_options },
	{ "hold: min_hold and max_hold in the URI", test_hold_uri_parameters },
	{ "hold: a process that exits in its minimum hold (lease or session)", test_min_hold_after_the_process_exits },
	{ NULL, NULL },
};
