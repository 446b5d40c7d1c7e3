/*
 * mem:// inspection and breaking, beyond the conformance body: the
 * features, an expired holder that is no longer shown, the lease left
 * after dlock_extend(), exact waiter counts, namespaces that list only
 * their own names, and breaking readers, permits and a holder of the
 * breaking client itself (each told at once, DLOCK_LOST_TAKEN).
 *
 * Every test uses a namespace of its own (namespaces live as long as the
 * process).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000
#define AWAIT_MS 10000

static dlock_client *open_ns(const char *ns, const char *identity)
{
	char uri[256];
	snprintf(uri, sizeof uri, "mem://insp-%ld-%s%s%s", (long)getpid(), ns, identity ? "?identity=" : "",
	         identity ? identity : "");
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_lock_info *inspect(dlock_client *c, const char *name)
{
	dlock_lock_info *info = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, name, &info), DLOCK_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(info);
	return info;
}

static size_t holders(dlock_client *c, const char *name)
{
	dlock_lock_info *info = inspect(c, name);
	size_t n = info->nholders;
	dlock_lock_info_free(info);
	return n;
}

static void test_features(void)
{
	dlock_client *c = open_ns("features", NULL);
	int64_t v = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_INSPECT, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_LEASE |
	                           DLOCK_INSPECT_TOKEN | DLOCK_INSPECT_WAITERS | DLOCK_INSPECT_LIST |
	                           DLOCK_INSPECT_NAMES);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_BREAK, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_BREAK_DELETE);
	dlock_lock_info *info = inspect(c, "never-used");
	CU_ASSERT_EQUAL(info->nholders, 0);
	CU_ASSERT_EQUAL(info->waiters, 0);
	CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_MUTEX);
	CU_ASSERT_EQUAL(info->permits, 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(info->resource, "mem://insp-"));
	CU_ASSERT_PTR_NOT_NULL(strstr(info->resource, "/never-used"));
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
}

typedef struct gone {
	dlock_client *c;
	const char *name;
} gone;

static int no_holder(void *arg)
{
	gone *g = arg;
	return holders(g->c, g->name) == 0;
}

/* A lease that ran out without renewal: no holder shown nor listed, nothing to break. */
static void test_expired_not_shown(void)
{
	dlock_client *c = open_ns("expired", NULL), *viewer = open_ns("expired", NULL);
	dlock_lock *l = dlock_test_new_lock(c, "short");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 100, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(holders(viewer, "short"), 1);
	gone g = { viewer, "short" };
	CU_ASSERT(dlock_test_await(no_holder, &g, AWAIT_MS));
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL(dlock_list(viewer, NULL, &list), DLOCK_OK);
	CU_ASSERT_EQUAL(list->count, 0);
	dlock_lock_list_free(list);
	size_t broken = 9;
	CU_ASSERT_EQUAL(dlock_break(viewer, "short", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 0);
	dlock_release(l);
	dlock_lock_free(l);
	dlock_client_close(viewer);
	dlock_client_close(c);
}

/* The lease left follows dlock_extend(). */
static void test_lease_left(void)
{
	dlock_client *c = open_ns("lease", NULL);
	dlock_lock *l = dlock_test_new_lock(c, "l");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 5000, 0, NULL, NULL), DLOCK_OK);
	dlock_lock_info *info = inspect(c, "l");
	CU_ASSERT(info->nholders == 1 && info->holders[0]->lease_left_ms > 0 &&
	          info->holders[0]->lease_left_ms <= 5000);
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_extend(l, 60000), DLOCK_OK);
	info = inspect(c, "l");
	CU_ASSERT(info->nholders == 1 && info->holders[0]->lease_left_ms > 50000 &&
	          info->holders[0]->lease_left_ms <= 60000);
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

typedef struct count_is {
	dlock_client *c;
	int64_t want;
} count_is;

static int waiters_are(void *arg)
{
	count_is *w = arg;
	dlock_lock_info *info = NULL;
	int yes = dlock_inspect(w->c, "w", &info) == DLOCK_OK && info->waiters == w->want;
	dlock_lock_info_free(info);
	return yes;
}

/* Two waiters in two clients: 2; one cancelled: 1; none: 0. */
static void test_waiters_exact(void)
{
	dlock_client *h = open_ns("waiters", NULL), *a = open_ns("waiters", NULL), *b = open_ns("waiters", NULL);
	dlock_lock *lh = dlock_test_new_lock(h, "w"), *la = dlock_test_new_lock(a, "w"), *lb = dlock_test_new_lock(b, "w");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(lh, 0, 0, -1, NULL, NULL), DLOCK_OK);
	dlock_test_waiter wa, wb;
	dlock_test_waiter_start(&wa, la, LONG_WAIT_MS, 0);
	count_is want = { h, 1 };
	CU_ASSERT(dlock_test_await(waiters_are, &want, AWAIT_MS));
	dlock_test_waiter_start(&wb, lb, LONG_WAIT_MS, 0);
	want.want = 2;
	CU_ASSERT(dlock_test_await(waiters_are, &want, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_cancel(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&wb, AWAIT_MS), DLOCK_ECANCELED);
	want.want = 1;
	CU_ASSERT(dlock_test_await(waiters_are, &want, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_release(lh), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&wa, LONG_WAIT_MS), DLOCK_OK);
	want.want = 0;
	CU_ASSERT(waiters_are(&want));
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	dlock_lock_free(lh);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(b);
	dlock_client_close(a);
	dlock_client_close(h);
}

/* A namespace lists its own names only. */
static void test_list_namespace(void)
{
	dlock_client *x = open_ns("list-x", "x"), *y = open_ns("list-y", "y");
	dlock_lock *lx = dlock_test_new_lock(x, "same"), *ly = dlock_test_new_lock(y, "same");
	dlock_lock *lx2 = dlock_test_new_lock(x, "other");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(lx, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(lx2, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(ly, 0, 0, -1, NULL, NULL), DLOCK_OK);
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_list(y, "", &list), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(list->count, 1);
	CU_ASSERT_STRING_EQUAL(list->items[0]->name, "same");
	CU_ASSERT_STRING_EQUAL(list->items[0]->holders[0]->identity, "y");
	dlock_lock_list_free(list);
	CU_ASSERT_EQUAL_FATAL(dlock_list(x, NULL, &list), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(list->count, 2);
	CU_ASSERT_STRING_EQUAL(list->items[0]->name, "other");
	CU_ASSERT_STRING_EQUAL(list->items[1]->name, "same");
	dlock_lock_list_free(list);
	dlock_release(lx);
	dlock_release(lx2);
	dlock_release(ly);
	dlock_lock_free(lx);
	dlock_lock_free(lx2);
	dlock_lock_free(ly);
	dlock_client_close(x);
	dlock_client_close(y);
}

/* Three readers broken at once: three removed, each told; a writer then gets a larger token. */
static void test_break_readers(void)
{
	enum { N = 3 };
	dlock_client *c[N], *admin = open_ns("break-rw", "admin");
	dlock_lock *l[N];
	dlock_test_lost lost[N];
	memset(lost, 0, sizeof lost);
	uint64_t before = 0;
	for (int i = 0; i < N; i++) {
		c[i] = open_ns("break-rw", NULL);
		CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(c[i], "rw", &l[i]), DLOCK_OK);
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = 0;
		o.mode = DLOCK_MODE_SHARED;
		o.on_lost = dlock_test_on_lost;
		o.lost_userdata = &lost[i];
		CU_ASSERT_EQUAL_FATAL(dlock_acquire(l[i], &o), DLOCK_OK);
		before = dlock_test_token(l[i]);
	}
	size_t broken = 0;
	CU_ASSERT_EQUAL(dlock_break(admin, "rw", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, N);
	for (int i = 0; i < N; i++) {
		CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost[i], AWAIT_MS));
		CU_ASSERT_EQUAL(atomic_load(&lost[i].reason), DLOCK_LOST_TAKEN);
	}
	CU_ASSERT_EQUAL(holders(admin, "rw"), 0);
	dlock_lock *w = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(admin, "rw", &w), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(w, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_token(w) > before);
	for (int i = 0; i < N; i++) {
		CU_ASSERT_EQUAL(dlock_release(l[i]), DLOCK_ENOTHELD);
		dlock_lock_free(l[i]);
		dlock_client_close(c[i]);
	}
	CU_ASSERT_EQUAL(holders(admin, "rw"), 1);
	CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	dlock_lock_free(w);
	dlock_client_close(admin);
}

/* Permits broken: both told; the slots are free again; the breaking client's own holder is not spared. */
static void test_break_permits_and_own(void)
{
	dlock_client *c = open_ns("break-sem", NULL), *admin = open_ns("break-sem", "admin");
	dlock_lock *p[2], *own = dlock_test_new_lock(admin, "own");
	dlock_test_lost lost[3];
	memset(lost, 0, sizeof lost);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(c, "sem", 2, &p[i]), DLOCK_OK);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(p[i], 0, 0, -1, dlock_test_on_lost, &lost[i]), DLOCK_OK);
	}
	dlock_lock_info *info = inspect(admin, "sem");
	CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_SEMAPHORE);
	CU_ASSERT_EQUAL(info->permits, 2);
	CU_ASSERT_EQUAL(info->nholders, 2);
	dlock_lock_info_free(info);
	size_t broken = 0;
	CU_ASSERT_EQUAL(dlock_break(admin, "sem", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 2);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost[0], AWAIT_MS));
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost[1], AWAIT_MS));
	dlock_lock *q = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(admin, "sem", 2, &q), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(q, 0, 0, -1, NULL, NULL), DLOCK_OK);
	uint32_t slot = 9;
	CU_ASSERT_EQUAL(dlock_lock_permit_slot(q, &slot), DLOCK_OK);
	CU_ASSERT_EQUAL(slot, 0);
	CU_ASSERT_EQUAL(dlock_release(q), DLOCK_OK);

	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(own, 0, 0, -1, dlock_test_on_lost, &lost[2]), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_break(admin, "own", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost[2], AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_release(own), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_test_acquire(own, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(own), DLOCK_OK);

	for (int i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(dlock_release(p[i]), DLOCK_ENOTHELD);
		dlock_lock_free(p[i]);
	}
	dlock_lock_free(q);
	dlock_lock_free(own);
	dlock_client_close(admin);
	dlock_client_close(c);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("mem inspect", NULL, NULL);
	CU_add_test(s, "features and a name never used", test_features);
	CU_add_test(s, "an expired holder is not shown", test_expired_not_shown);
	CU_add_test(s, "the lease left follows extend", test_lease_left);
	CU_add_test(s, "waiters are counted exactly", test_waiters_exact);
	CU_add_test(s, "a namespace lists its own names", test_list_namespace);
	CU_add_test(s, "breaking readers tells each", test_break_readers);
	CU_add_test(s, "breaking permits, and the breaker's own holder", test_break_permits_and_own);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
