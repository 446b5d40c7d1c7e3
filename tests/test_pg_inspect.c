/*
 * PostgreSQL: inspection, listing and breaking (advisory mode), and row
 * mode's refusal.  Environment: DLOCK_TEST_PG_URI (advisory),
 * DLOCK_TEST_PG_ROW_URI (row), DLOCK_TEST_PG_BOUNCER_URI (row behind
 * PgBouncer, optional).  Without DLOCK_TEST_PG_URI the program says
 * SKIPPED.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testpg.h"
#include "testsupport.h"

static dlock_lock_info *inspect(dlock_client *c, const char *name)
{
	dlock_lock_info *info = NULL;
	dlock_status st = dlock_inspect(c, name, &info);
	if (st != DLOCK_OK)
		printf("\n    inspect: %s: %s", dlock_status_name(st), dlock_client_errmsg(c));
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	return info;
}

static void test_features(void)
{
	dlock_client *c = dlock_testpg_open_with("");
	int64_t v = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_INSPECT, &v), DLOCK_OK);
	CU_ASSERT(v & DLOCK_INSPECT_HELD);
	CU_ASSERT(v & DLOCK_INSPECT_OWNER);
	CU_ASSERT(v & DLOCK_INSPECT_WAITERS);
	CU_ASSERT(v & DLOCK_INSPECT_LIST);
	CU_ASSERT(v & DLOCK_INSPECT_SESSION);
	CU_ASSERT_FALSE(v & (DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_LEASE | DLOCK_INSPECT_TOKEN));
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_BREAK, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_BREAK_SESSION);
	dlock_client_close(c);
}

/* A mutex: free, then held by the identity of the URI, then one waiter. */
static void test_mutex_owner(void)
{
	char name[128];
	dlock_testpg_name(name, sizeof name, "pginsp", "mutex");
	dlock_client *a = dlock_testpg_open_with("identity=web%2F1%20%C3%A9t%C3%A9"), *b = dlock_testpg_open_with("");
	dlock_lock *la = dlock_test_new_lock(a, name), *lb = dlock_test_new_lock(b, name);
	dlock_lock_info *info = inspect(b, name);
	if (info) {
		CU_ASSERT_EQUAL(info->nholders, 0);
		CU_ASSERT_STRING_EQUAL(info->name, name);
	}
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, 0, -1, NULL, NULL), DLOCK_OK);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, 20000, 0);
	int64_t until = dlock_test_now_ms() + 5000;
	for (info = inspect(b, name); info && info->waiters < 1 && dlock_test_now_ms() < until; info = inspect(b, name)) {
		dlock_lock_info_free(info);
		dlock_test_sleep_ms(20);
	}
	if (info) {
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_MUTEX);
		CU_ASSERT_EQUAL(info->permits, 1);
		CU_ASSERT_EQUAL(info->waiters, 1);
		CU_ASSERT_PTR_NOT_NULL(strstr(info->resource, "advisory:"));
		CU_ASSERT_EQUAL_FATAL(info->nholders, 1);
		const dlock_holder *h = info->holders[0];
		CU_ASSERT_STRING_EQUAL(h->identity, "web/1 \xc3\xa9t\xc3\xa9");
		CU_ASSERT_EQUAL(h->pid, (int64_t)getpid());
		CU_ASSERT_EQUAL(h->mode, DLOCK_MODE_EXCLUSIVE);
		CU_ASSERT(h->session[0] != '\0');
		CU_ASSERT_EQUAL(h->acquired_ms, -1);
		CU_ASSERT_EQUAL(h->token, 0);
	}
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, 10000), DLOCK_OK);
	info = inspect(a, name);
	if (info && info->nholders == 1) {
		/* The default identity: HOST:PID, and the host. */
		char host[256], want[300];
		gethostname(host, sizeof host);
		snprintf(want, sizeof want, "%s:%ld", host, (long)getpid());
		CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, want);
		CU_ASSERT_STRING_EQUAL(info->holders[0]->host, host);
		CU_ASSERT_EQUAL(info->waiters, 0);
	} else {
		CU_FAIL("the waiter holds it now");
	}
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* An identity longer than application_name holds: cut, with a mark, and the pid still there. */
static void test_long_identity(void)
{
	char name[128], params[300] = "identity=";
	dlock_testpg_name(name, sizeof name, "pginsp", "longid");
	memset(params + 9, 'x', 120);
	params[129] = '\0';
	dlock_client *a = dlock_testpg_open_with(params);
	dlock_lock *la = dlock_test_new_lock(a, name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, 0, -1, NULL, NULL), DLOCK_OK);
	dlock_lock_info *info = inspect(a, name);
	if (info && info->nholders == 1) {
		const char *id = info->holders[0]->identity;
		CU_ASSERT(strncmp(id, "xxxxxxxxxx", 10) == 0);
		CU_ASSERT_PTR_NOT_NULL(strchr(id, '+'));
		CU_ASSERT(strlen(id) < 63);
		CU_ASSERT_EQUAL(info->holders[0]->pid, (int64_t)getpid());
	}
	dlock_lock_info_free(info);
	dlock_release(la);
	dlock_lock_free(la);
	dlock_client_close(a);
}

/* Readers of a read-write lock and the permits of a semaphore: every holder. */
static void test_shared_holders(void)
{
	char rw[128], sem[128];
	dlock_testpg_name(rw, sizeof rw, "pginsp", "rw");
	dlock_testpg_name(sem, sizeof sem, "pginsp", "sem");
	dlock_client *c = dlock_testpg_open_with("identity=reader"), *c2 = dlock_testpg_open_with("identity=reader");
	dlock_lock *r1 = NULL, *r2 = NULL, *p[3] = { NULL, NULL, NULL };
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, rw, &r1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_rwlock_new(c2, rw, &r2), DLOCK_OK);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.mode = DLOCK_MODE_SHARED;
	o.wait_ms = 0;
	CU_ASSERT_EQUAL(dlock_acquire(r1, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_acquire(r2, &o), DLOCK_OK);
	dlock_lock_info *info = inspect(c, rw);
	if (info) {
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
		CU_ASSERT_EQUAL_FATAL(info->nholders, 2);
		for (size_t i = 0; i < 2; i++) {
			CU_ASSERT_EQUAL(info->holders[i]->mode, DLOCK_MODE_SHARED);
			CU_ASSERT_STRING_EQUAL(info->holders[i]->identity, "reader");
		}
	}
	dlock_lock_info_free(info);
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(dlock_semaphore_new(c, sem, 3, &p[i]), DLOCK_OK);
		if (i < 2)
			CU_ASSERT_EQUAL(dlock_test_acquire(p[i], 0, 0, -1, NULL, NULL), DLOCK_OK);
	}
	info = inspect(c, sem);
	if (info) {
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_SEMAPHORE);
		CU_ASSERT_EQUAL(info->permits, 3);
		CU_ASSERT_EQUAL(info->waiters, 0);
		CU_ASSERT_EQUAL_FATAL(info->nholders, 2);
		uint32_t s0 = 9, s1 = 9;
		dlock_lock_permit_slot(p[0], &s0);
		dlock_lock_permit_slot(p[1], &s1);
		int64_t a = info->holders[0]->slot, b = info->holders[1]->slot;
		CU_ASSERT((a == s0 && b == s1) || (a == s1 && b == s0));
	}
	dlock_lock_info_free(info);
	dlock_release(r1);
	dlock_release(r2);
	dlock_release(p[0]);
	dlock_release(p[1]);
	for (int i = 0; i < 3; i++)
		dlock_lock_free(p[i]);
	dlock_lock_free(r1);
	dlock_lock_free(r2);
	dlock_client_close(c);
	dlock_client_close(c2);
}

static const dlock_lock_info *find(const dlock_lock_list *l, const char *name)
{
	for (size_t i = 0; l && i < l->count; i++)
		if (l->items[i]->name && strcmp(l->items[i]->name, name) == 0)
			return l->items[i];
	return NULL;
}

/* `name` inspected from `c`: of `kind`, with `n` holders. */
static void kind_is(dlock_client *c, const char *name, dlock_lock_kind kind, size_t n)
{
	dlock_lock_info *info = inspect(c, name);
	if (info) {
		CU_ASSERT_EQUAL(info->kind, kind);
		CU_ASSERT_EQUAL(info->nholders, n);
	}
	dlock_lock_info_free(info);
}

/*
 * A writer holds the name's WRITER key beside its own (pg_advisory.c):
 * with a token and without (fencing=off), on a session that also holds a
 * mutex of another name, which stays a mutex; listed by name as a
 * read-write lock; let go with the writer's release (a mutex of the name
 * on the same client is a mutex then); and broken as a mutex is.
 */
static void test_writer_kind(void)
{
	char w[128], m[128], prefix[64], params[128];
	snprintf(prefix, sizeof prefix, "pw%ld_%ld", (long)getpid(), (long)time(NULL));
	const char *fencing[2] = { "", "&fencing=off" };
	for (int f = 0; f < 2; f++) {
		snprintf(params, sizeof params, "prefix=%s&identity=writer%s", prefix, fencing[f]);
		snprintf(w, sizeof w, "w/%d", f);
		snprintf(m, sizeof m, "m/%d", f);
		dlock_client *c = dlock_testpg_open_with(params), *admin = dlock_testpg_open_with(params);
		dlock_lock *lw = NULL, *lm = dlock_test_new_lock(c, m), *lm2 = NULL;
		CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(c, w, &lw), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_acquire(lm, 0, 0, -1, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_acquire(lw, 0, 0, -1, NULL, NULL), DLOCK_OK);
		kind_is(admin, w, DLOCK_KIND_RWLOCK, 1);
		kind_is(admin, m, DLOCK_KIND_MUTEX, 1);
		dlock_lock_list *list = NULL;
		CU_ASSERT_EQUAL(dlock_list(admin, "w/", &list), DLOCK_OK);
		const dlock_lock_info *it = find(list, w);
		CU_ASSERT_PTR_NOT_NULL(it);
		if (it)
			CU_ASSERT_EQUAL(it->kind, DLOCK_KIND_RWLOCK);
		dlock_lock_list_free(list);
		CU_ASSERT_EQUAL(dlock_release(lw), DLOCK_OK);
		lm2 = dlock_test_new_lock(c, w);
		CU_ASSERT_EQUAL(dlock_test_acquire(lm2, 0, 0, -1, NULL, NULL), DLOCK_OK);
		kind_is(admin, w, DLOCK_KIND_MUTEX, 1);
		CU_ASSERT_EQUAL(dlock_release(lm2), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_acquire(lw, 0, 0, -1, NULL, NULL), DLOCK_OK);
		size_t broken = 0;
		CU_ASSERT_EQUAL(dlock_break(admin, w, &broken), DLOCK_OK);
		CU_ASSERT_EQUAL(broken, 1);
		kind_is(admin, w, DLOCK_KIND_MUTEX, 0);
		dlock_release(lw); /* lost with its session, as the mutex of that session is */
		dlock_release(lm);
		dlock_lock_free(lw);
		dlock_lock_free(lm);
		dlock_lock_free(lm2);
		dlock_client_close(c);
		dlock_client_close(admin);
	}
}

/* Listing under the client's prefix, by name prefix; another prefix's names are not listed by name. */
static void test_list(void)
{
	char prefix[64], params[128], n1[128], n2[128], sem[128];
	snprintf(prefix, sizeof prefix, "pl%ld_%ld", (long)getpid(), (long)time(NULL));
	snprintf(params, sizeof params, "prefix=%s&identity=lister", prefix);
	snprintf(n1, sizeof n1, "a/one");
	snprintf(n2, sizeof n2, "b/two");
	snprintf(sem, sizeof sem, "a/sem");
	dlock_client *c = dlock_testpg_open_with(params), *other = dlock_testpg_open_with("identity=other");
	dlock_lock *l1 = dlock_test_new_lock(c, n1), *l2 = dlock_test_new_lock(c, n2), *lo = dlock_test_new_lock(other, n1);
	dlock_lock *ls = NULL;
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, sem, 2, &ls), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(l1, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(l2, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(ls, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(lo, 0, 0, -1, NULL, NULL), DLOCK_OK); /* another prefix */
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL(dlock_list(c, "a/", &list), DLOCK_OK);
	if (list) {
		CU_ASSERT_EQUAL(list->count, 2);
		const dlock_lock_info *i1 = find(list, n1), *is = find(list, sem);
		CU_ASSERT_PTR_NOT_NULL(i1);
		CU_ASSERT_PTR_NOT_NULL(is);
		if (i1 && i1->nholders == 1)
			CU_ASSERT_STRING_EQUAL(i1->holders[0]->identity, "lister");
		if (is) {
			CU_ASSERT_EQUAL(is->kind, DLOCK_KIND_SEMAPHORE);
			CU_ASSERT_EQUAL(is->nholders, 1);
		}
	}
	dlock_lock_list_free(list);
	list = NULL;
	CU_ASSERT_EQUAL(dlock_list(c, NULL, &list), DLOCK_OK);
	if (list) {
		CU_ASSERT_PTR_NOT_NULL(find(list, n2));
		size_t named = 0;
		for (size_t i = 0; i < list->count; i++)
			named += list->items[i]->name != NULL;
		CU_ASSERT_EQUAL(named, 3); /* the other prefix's a/one is there by its key only */
	}
	dlock_lock_list_free(list);
	dlock_release(l1);
	dlock_release(l2);
	dlock_release(ls);
	dlock_release(lo);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	dlock_lock_free(ls);
	dlock_lock_free(lo);
	dlock_client_close(c);
	dlock_client_close(other);
}

/* Break: the holder's session ends, its callback says so within a heartbeat, the waiter gets it. */
static void test_break(void)
{
	char name[128];
	dlock_testpg_name(name, sizeof name, "pginsp", "break");
	dlock_client *a = dlock_testpg_open_with("identity=stuck"), *b = dlock_testpg_open_with("identity=admin");
	dlock_lock *la = dlock_test_new_lock(a, name), *lb = dlock_test_new_lock(b, name);
	dlock_test_lost lost = { 0 };
	size_t broken = 99;
	CU_ASSERT_EQUAL(dlock_break(b, name, &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 0);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, 1500, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	uint64_t t1 = dlock_test_token(la);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, 20000, 0);
	dlock_test_sleep_ms(200);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_break(b, name, &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, 10000), DLOCK_OK);
	CU_ASSERT(w.token > t1);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, 1500 + 1000));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_SESSION);
	printf(" [lost after %lld ms]", (long long)(dlock_test_now_ms() - t0));
	dlock_lock_info *info = inspect(a, name);
	if (info && info->nholders == 1)
		CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "admin");
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* Hostile bytes in a name and in the identity; the longest name. */
static void test_hostile(void)
{
	char name[DLOCK_NAME_MAX + 1];
	for (size_t i = 0; i < DLOCK_NAME_MAX; i++)
		name[i] = (char)(1 + (i * 37 + 11) % 255);
	memcpy(name, "'); DROP TABLE dlock_names; --", 30);
	name[DLOCK_NAME_MAX] = '\0';
	dlock_client *c = dlock_testpg_open_with("identity=%27%3B%20DROP%20%25%26id%3D");
	dlock_lock *l = dlock_test_new_lock(c, name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, -1, NULL, NULL), DLOCK_OK);
	dlock_lock_info *info = inspect(c, name);
	if (info && info->nholders == 1) {
		CU_ASSERT_EQUAL(memcmp(info->name, name, DLOCK_NAME_MAX + 1), 0);
		CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "'; DROP %&id=");
	}
	dlock_lock_info_free(info);
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL(dlock_list(c, "'); DROP", &list), DLOCK_OK);
	if (list) {
		CU_ASSERT_EQUAL(list->count, 1);
		if (list->count == 1)
			CU_ASSERT_EQUAL(memcmp(list->items[0]->name, name, DLOCK_NAME_MAX + 1), 0);
	}
	dlock_lock_list_free(list);
	size_t broken = 0;
	CU_ASSERT_EQUAL(dlock_break(c, name, &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	dlock_release(l);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* Row mode (direct and behind PgBouncer): no inspection, said in the features and the status. */
static void row_refuses(const char *uri)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_INSPECT, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 0);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_BREAK, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_BREAK_NONE);
	dlock_lock_info *info = NULL;
	dlock_lock_list *list = NULL;
	size_t n;
	CU_ASSERT_EQUAL(dlock_inspect(c, "x", &info), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "mode=row"));
	CU_ASSERT_EQUAL(dlock_list(c, NULL, &list), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(dlock_break(c, "x", &n), DLOCK_ENOTSUP);
	dlock_client_close(c);
}

static void test_row_mode(void)
{
	dlock_testpg_each_row_uri(row_refuses);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("pg_inspect", NULL, NULL);
	CU_add_test(s, "features", test_features);
	CU_add_test(s, "mutex_owner", test_mutex_owner);
	CU_add_test(s, "long_identity", test_long_identity);
	CU_add_test(s, "shared_holders", test_shared_holders);
	CU_add_test(s, "writer_kind", test_writer_kind);
	CU_add_test(s, "list", test_list);
	CU_add_test(s, "break", test_break);
	CU_add_test(s, "hostile", test_hostile);
	CU_add_test(s, "row_mode", test_row_mode);
}

int main(void)
{
	return dlock_testpg_main(add_suites);
}
