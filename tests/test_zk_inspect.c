/*
 * zk:// inspection, listing and breaking against real ZooKeeper servers
 * (DLOCK_TEST_ZK_URI, DLOCK_TEST_ZK_ENSEMBLE_URI, as tests/test_zookeeper.c):
 * the holders of a mutex, a read-write lock and a semaphore with their
 * owner records, ctime, czxid and session; waiters as kazoo's contenders();
 * names listed back from their components or, hashed, from the data of
 * their node; breaking deletes the holders' nodes (the holder is told, the
 * next token is larger; another identity is refused under ACLs); nodes of
 * the previous release and of Curator inspect as held, owner unknown.
 * Every test works under its own base path; queue positions are awaited on
 * the server, never slept for.
 */
#define THREADED /* the client library's synchronous API */

#include <CUnit/CUnit.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "dlock/dlock.h"
#include "dlock/sys/driver.h"
#include "dlock/sys/zookeeper.h"
#include "testsupport.h"
#include "testzk.h"

#define LONG_WAIT_MS 30000
#define AWAIT_MS 20000
#define SKEW_MS 5000 /* the servers run on this host: their clock is ours, give or take */

static char hosts[2][DLOCK_TESTZK_HOSTS_MAX];
static unsigned base_counter;

/* ------------------------------------------------------------ helpers */

static void new_uri(char *uri, size_t len, int h, const char *auth, const char *query, char *base, size_t blen)
{
	snprintf(base, blen, "/dlock-zki-%d-%u", (int)getpid(), ++base_counter);
	snprintf(uri, len, "zk://%s%s%s%s%s%s", auth ? auth : "", auth ? "@" : "", hosts[h], base, *query ? "?" : "",
	         query);
}

static void parent_of(char *out, size_t len, const char *base, const char *name, size_t nlen)
{
	char comp[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(name, nlen, comp);
	snprintf(out, len, "%s/%s", base, comp);
}

static dlock_client *open_client(const char *uri)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_lock *new_kind(dlock_client *c, const char *name, int kind, uint32_t permits)
{
	dlock_lock *l = NULL;
	dlock_status st = kind == DLOCK_KIND_RWLOCK      ? dlock_rwlock_new(c, name, &l)
	                  : kind == DLOCK_KIND_SEMAPHORE ? dlock_semaphore_new(c, name, permits, &l)
	                                                 : dlock_lock_new(c, name, &l);
	CU_ASSERT_EQUAL_FATAL(st, DLOCK_OK);
	return l;
}

static dlock_status acquire_mode(dlock_lock *l, int64_t wait_ms, dlock_lock_mode mode, dlock_test_lost *lost)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.mode = mode;
	o.on_lost = lost ? dlock_test_on_lost : NULL;
	o.lost_userdata = lost;
	return dlock_acquire(l, &o);
}

/* A thread that acquires and holds until told to release. */
struct holder {
	dlock_lock *l;
	dlock_lock_mode mode;
	pthread_t t;
	atomic_int done;
	dlock_status st;
};

static void *holder_main(void *arg)
{
	struct holder *h = arg;
	h->st = acquire_mode(h->l, LONG_WAIT_MS, h->mode, NULL);
	atomic_store(&h->done, 1);
	return NULL;
}

static void holder_start(struct holder *h, dlock_lock *l, dlock_lock_mode mode)
{
	*h = (struct holder){ .l = l, .mode = mode };
	CU_ASSERT_EQUAL_FATAL(pthread_create(&h->t, NULL, holder_main, h), 0);
}

static void holder_join(struct holder *h)
{
	pthread_join(h->t, NULL);
}

static int holder_done(void *arg)
{
	return atomic_load(&((struct holder *)arg)->done);
}

/* Inspection of `name` on `c` until `nholders` and `waiters` are seen (a waiter queues in its own time). */
struct seen {
	dlock_client *c;
	const char *name;
	size_t nholders;
	int64_t waiters;
};

static int seen_now(void *arg)
{
	struct seen *s = arg;
	dlock_lock_info *i = NULL;
	int ok = dlock_inspect(s->c, s->name, &i) == DLOCK_OK && i->nholders == s->nholders && i->waiters == s->waiters;
	dlock_lock_info_free(i);
	return ok;
}

static dlock_lock_info *inspect_when(dlock_client *c, const char *name, size_t nholders, int64_t waiters)
{
	struct seen s = { c, name, nholders, waiters };
	CU_ASSERT(dlock_test_await(seen_now, &s, AWAIT_MS));
	dlock_lock_info *i = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, name, &i), DLOCK_OK);
	return i;
}

static void check_holder(const dlock_holder *h, const char *identity, dlock_client *owner)
{
	char host[256] = "", ses[32];
	gethostname(host, sizeof host - 1);
	CU_ASSERT_STRING_EQUAL(h->identity, identity);
	CU_ASSERT_STRING_EQUAL(h->host, host);
	CU_ASSERT_EQUAL(h->pid, (int64_t)getpid());
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	CU_ASSERT(h->acquired_ms > now - 60000 - SKEW_MS && h->acquired_ms < now + SKEW_MS);
	CU_ASSERT_EQUAL(h->lease_left_ms, -1);
	CU_ASSERT_EQUAL(h->slot, -1);
	snprintf(ses, sizeof ses, "0x%llx", (unsigned long long)dlock_testzk_session(owner).client_id);
	CU_ASSERT_STRING_EQUAL(h->session, ses);
}

/* ------------------------------------------------------------ tests */

static void test_features(void)
{
	char uri[1024], base[64];
	new_uri(uri, sizeof uri, 0, NULL, "", base, sizeof base);
	dlock_client *c = open_client(uri);
	int64_t v = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_INSPECT, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_TOKEN |
	                       DLOCK_INSPECT_WAITERS | DLOCK_INSPECT_LIST | DLOCK_INSPECT_NAMES |
	                       DLOCK_INSPECT_SESSION);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_BREAK, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_BREAK_DELETE);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
}

/* The holder of a mutex, seen from another client; a waiter counted; free again after release. */
static void mutex_on(int h)
{
	char uri[1024], other[1024], base[64], parent[512];
	new_uri(uri, sizeof uri, h, NULL, "identity=alice%20%26id%3Devil%25", base, sizeof base);
	snprintf(other, sizeof other, "zk://%s%s?identity=bob", hosts[h], base);
	parent_of(parent, sizeof parent, base, "m", 1);
	dlock_client *a = open_client(uri), *b = open_client(other), *w = open_client(other);
	dlock_lock *l = new_kind(a, "m", DLOCK_KIND_MUTEX, 1), *wl = new_kind(w, "m", DLOCK_KIND_MUTEX, 1);

	dlock_lock_info *i = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(b, "m", &i), DLOCK_OK);
	CU_ASSERT_EQUAL(i->nholders, 0);
	dlock_lock_info_free(i);

	CU_ASSERT_EQUAL_FATAL(acquire_mode(l, 0, DLOCK_MODE_EXCLUSIVE, NULL), DLOCK_OK);
	i = inspect_when(b, "m", 1, 0);
	CU_ASSERT_STRING_EQUAL(i->name, "m");
	CU_ASSERT_STRING_EQUAL(i->resource, parent);
	CU_ASSERT_EQUAL(i->kind, DLOCK_KIND_MUTEX);
	CU_ASSERT_EQUAL(i->permits, 1);
	check_holder(i->holders[0], "alice &id=evil%", a);
	CU_ASSERT_EQUAL(i->holders[0]->token, dlock_test_token(l));
	CU_ASSERT_EQUAL(i->holders[0]->mode, DLOCK_MODE_EXCLUSIVE);
	dlock_lock_info_free(i);

	struct holder wh;
	holder_start(&wh, wl, DLOCK_MODE_EXCLUSIVE);
	i = inspect_when(b, "m", 1, 1);
	CU_ASSERT_STRING_EQUAL(i->holders[0]->identity, "alice &id=evil%");
	dlock_lock_info_free(i);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT(dlock_test_await(holder_done, &wh, AWAIT_MS));
	holder_join(&wh);
	CU_ASSERT_EQUAL(wh.st, DLOCK_OK);
	i = inspect_when(a, "m", 1, 0);
	CU_ASSERT_STRING_EQUAL(i->holders[0]->identity, "bob");
	CU_ASSERT_EQUAL(i->holders[0]->token, dlock_test_token(wl));
	dlock_lock_info_free(i);
	CU_ASSERT_EQUAL(dlock_release(wl), DLOCK_OK);
	i = inspect_when(a, "m", 0, 0);
	dlock_lock_info_free(i);

	dlock_lock_free(l);
	dlock_lock_free(wl);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_client_close(w);
}

static void test_mutex(void)
{
	mutex_on(0);
	mutex_on(1);
}

/* Every reader listed, shared, without a token; a waiting writer counted; then the writer alone. */
static void test_rwlock(void)
{
	enum { READERS = 3 };
	char uri[1024], base[64];
	dlock_client *r[READERS];
	dlock_lock *rl[READERS];
	for (int i = 0; i < READERS; i++) {
		char q[64];
		snprintf(q, sizeof q, "identity=reader-%d", i);
		if (i == 0)
			new_uri(uri, sizeof uri, 0, NULL, q, base, sizeof base);
		else
			snprintf(uri, sizeof uri, "zk://%s%s?%s", hosts[0], base, q);
		r[i] = open_client(uri);
		rl[i] = new_kind(r[i], "rw", DLOCK_KIND_RWLOCK, 1);
		CU_ASSERT_EQUAL_FATAL(acquire_mode(rl[i], 0, DLOCK_MODE_SHARED, NULL), DLOCK_OK);
	}
	snprintf(uri, sizeof uri, "zk://%s%s?identity=writer", hosts[0], base);
	dlock_client *w = open_client(uri);
	dlock_lock *wl = new_kind(w, "rw", DLOCK_KIND_RWLOCK, 1);
	struct holder wh;
	holder_start(&wh, wl, DLOCK_MODE_EXCLUSIVE);
	dlock_lock_info *info = inspect_when(w, "rw", READERS, 1);
	CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
	int seen = 0;
	for (size_t i = 0; i < info->nholders; i++) {
		const dlock_holder *h = info->holders[i];
		CU_ASSERT_EQUAL(h->mode, DLOCK_MODE_SHARED);
		CU_ASSERT_EQUAL(h->token, 0);
		int k = -1;
		if (sscanf(h->identity, "reader-%d", &k) == 1 && k >= 0 && k < READERS) {
			seen |= 1 << k;
			check_holder(h, h->identity, r[k]);
		}
	}
	CU_ASSERT_EQUAL(seen, (1 << READERS) - 1);
	dlock_lock_info_free(info);
	for (int i = 0; i < READERS; i++)
		CU_ASSERT_EQUAL(dlock_release(rl[i]), DLOCK_OK);
	CU_ASSERT(dlock_test_await(holder_done, &wh, AWAIT_MS));
	holder_join(&wh);
	CU_ASSERT_EQUAL_FATAL(wh.st, DLOCK_OK);
	info = inspect_when(r[0], "rw", 1, 0);
	CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "writer");
	CU_ASSERT_EQUAL(info->holders[0]->mode, DLOCK_MODE_EXCLUSIVE);
	CU_ASSERT_EQUAL(info->holders[0]->token, dlock_test_token(wl));
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_release(wl), DLOCK_OK);
	dlock_lock_free(wl);
	dlock_client_close(w);
	for (int i = 0; i < READERS; i++) {
		dlock_lock_free(rl[i]);
		dlock_client_close(r[i]);
	}
}

/* N = 2: both permits listed with N, a third acquirer waits and is counted; the next gets in after a break. */
static void test_semaphore(void)
{
	char uri[1024], base[64];
	dlock_client *c[3];
	dlock_lock *l[3];
	dlock_test_lost lost[2] = { 0 };
	for (int i = 0; i < 3; i++) {
		char q[64];
		snprintf(q, sizeof q, "identity=permit-%d", i);
		if (i == 0)
			new_uri(uri, sizeof uri, 1, NULL, q, base, sizeof base);
		else
			snprintf(uri, sizeof uri, "zk://%s%s?%s", hosts[1], base, q);
		c[i] = open_client(uri);
		l[i] = new_kind(c[i], "sem", DLOCK_KIND_SEMAPHORE, 2);
	}
	for (int i = 0; i < 2; i++)
		CU_ASSERT_EQUAL_FATAL(acquire_mode(l[i], LONG_WAIT_MS, DLOCK_MODE_EXCLUSIVE, &lost[i]), DLOCK_OK);
	struct holder wh;
	holder_start(&wh, l[2], DLOCK_MODE_EXCLUSIVE);
	dlock_lock_info *info = inspect_when(c[2], "sem", 2, 1);
	CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_SEMAPHORE);
	CU_ASSERT_EQUAL(info->permits, 2);
	int seen = 0;
	for (size_t i = 0; i < info->nholders; i++) {
		int k = -1;
		if (sscanf(info->holders[i]->identity, "permit-%d", &k) == 1 && k >= 0 && k < 2) {
			seen |= 1 << k;
			check_holder(info->holders[i], info->holders[i]->identity, c[k]);
		}
		CU_ASSERT_EQUAL(info->holders[i]->token, 0);
	}
	CU_ASSERT_EQUAL(seen, 3);
	dlock_lock_info_free(info);

	size_t broken = 0;
	CU_ASSERT_EQUAL(dlock_break(c[2], "sem", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 2);
	for (int i = 0; i < 2; i++) {
		CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost[i], AWAIT_MS));
		CU_ASSERT_EQUAL(atomic_load(&lost[i].reason), DLOCK_LOST_TAKEN);
	}
	CU_ASSERT(dlock_test_await(holder_done, &wh, AWAIT_MS));
	holder_join(&wh);
	CU_ASSERT_EQUAL(wh.st, DLOCK_OK);
	info = inspect_when(c[0], "sem", 1, 0);
	CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "permit-2");
	dlock_lock_info_free(info);
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(dlock_release(l[i]), i == 2 ? DLOCK_OK : DLOCK_ENOTHELD);
		dlock_lock_free(l[i]);
		dlock_client_close(c[i]);
	}
}

/* Break a mutex: the holder is told (TAKEN), the waiter gets in with a larger token; a free name is 0. */
static void break_on(int h)
{
	char uri[1024], base[64];
	new_uri(uri, sizeof uri, h, NULL, "identity=holder", base, sizeof base);
	dlock_client *a = open_client(uri), *b = open_client(uri);
	dlock_lock *l = new_kind(a, "b", DLOCK_KIND_MUTEX, 1), *wl = new_kind(b, "b", DLOCK_KIND_MUTEX, 1);
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_mode(l, 0, DLOCK_MODE_EXCLUSIVE, &lost), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	struct holder wh;
	holder_start(&wh, wl, DLOCK_MODE_EXCLUSIVE);
	dlock_lock_info_free(inspect_when(b, "b", 1, 1));
	size_t broken = 0;
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_break(b, "b", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_TAKEN);
	CU_ASSERT(dlock_test_now_ms() - t0 < 5000);
	CU_ASSERT(dlock_test_await(holder_done, &wh, AWAIT_MS));
	holder_join(&wh);
	CU_ASSERT_EQUAL_FATAL(wh.st, DLOCK_OK);
	CU_ASSERT(dlock_test_token(wl) > first);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(wl), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_break(b, "b", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 0);
	CU_ASSERT_EQUAL(dlock_break(b, "never-used", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 0);
	/* Readers: every one is taken. */
	dlock_lock *r1 = new_kind(a, "rb", DLOCK_KIND_RWLOCK, 1), *r2 = new_kind(b, "rb", DLOCK_KIND_RWLOCK, 1);
	dlock_test_lost l1 = { 0 }, l2 = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_mode(r1, 0, DLOCK_MODE_SHARED, &l1), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire_mode(r2, 0, DLOCK_MODE_SHARED, &l2), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_break(a, "rb", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 2);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &l1, AWAIT_MS));
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &l2, AWAIT_MS));
	dlock_lock_free(r1);
	dlock_lock_free(r2);
	dlock_lock_free(l);
	dlock_lock_free(wl);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_break(void)
{
	break_on(0);
	break_on(1);
}

/* With credentials, another identity (or none) cannot break: EPERM with a clear message; the creator can. */
static void test_break_acl(void)
{
	char uri[1024], bob[1024], anon[1024], base[64];
	new_uri(uri, sizeof uri, 0, "alice:s3cret-pw", "", base, sizeof base);
	snprintf(bob, sizeof bob, "zk://bob:bobs-pw@%s%s", hosts[0], base);
	snprintf(anon, sizeof anon, "zk://%s%s", hosts[0], base);
	dlock_client *a = open_client(uri), *a2 = open_client(uri), *b = open_client(bob), *n = open_client(anon);
	dlock_lock *l = new_kind(a, "acl", DLOCK_KIND_MUTEX, 1);
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_mode(l, 0, DLOCK_MODE_EXCLUSIVE, &lost), DLOCK_OK);
	size_t broken = 7;
	CU_ASSERT_EQUAL(dlock_break(b, "acl", &broken), DLOCK_EPERM);
	CU_ASSERT_EQUAL(broken, 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(b), "identity that created them"));
	CU_ASSERT_PTR_NULL(strstr(dlock_client_errmsg(b), "bobs-pw"));
	CU_ASSERT_EQUAL(dlock_break(n, "acl", &broken), DLOCK_EPERM);
	dlock_lock_info *i = NULL;
	CU_ASSERT_EQUAL(dlock_inspect(b, "acl", &i), DLOCK_EPERM); /* creator-only nodes: not even readable */
	CU_ASSERT_PTR_NULL(i);
	/* Another client of the same identity sees the holder (the nodes are readable by their creator only). */
	dlock_status st = dlock_inspect(a2, "acl", &i);
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	if (st == DLOCK_OK)
		CU_ASSERT_EQUAL(i->nholders, 1);
	dlock_lock_info_free(i);
	/* The base path is the creator's too: another identity cannot list it; the creator's clients can. */
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL(dlock_list(b, NULL, &list), DLOCK_EPERM);
	CU_ASSERT_PTR_NULL(list);
	CU_ASSERT_EQUAL_FATAL(dlock_list(a2, NULL, &list), DLOCK_OK);
	CU_ASSERT_EQUAL(list->count, 1);
	dlock_lock_list_free(list);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_break(a2, "acl", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, AWAIT_MS));
	dlock_lock_free(l);
	dlock_client_close(a);
	dlock_client_close(a2);
	dlock_client_close(b);
	dlock_client_close(n);
}

/* Names come back as bytes: escaped ones from their component, a hashed one from its node's data. */
static void test_list(void)
{
	char uri[1024], base[64];
	new_uri(uri, sizeof uri, 0, NULL, "identity=lister", base, sizeof base);
	dlock_client *c = open_client(uri);
	static char longname[DLOCK_NAME_MAX + 1];
	for (int i = 0; i < DLOCK_NAME_MAX; i++)
		longname[i] = (char)(1 + i % 255); /* every byte but NUL, '/' and '%' included */
	longname[DLOCK_NAME_MAX] = '\0';
	const char *names[] = { "pre/a", "pre/b b", "other", "..", "\xff\xfe%2F", longname };
	enum { N = sizeof names / sizeof names[0] };
	dlock_lock *l[N];
	for (int i = 0; i < N; i++) {
		l[i] = new_kind(c, names[i], i == 1 ? DLOCK_KIND_RWLOCK : DLOCK_KIND_MUTEX, 1);
		CU_ASSERT_EQUAL_FATAL(acquire_mode(l[i], 0, i == 1 ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE, NULL),
		                      DLOCK_OK);
	}
	dlock_lock *idle = new_kind(c, "free", DLOCK_KIND_MUTEX, 1);
	CU_ASSERT_EQUAL(acquire_mode(idle, 0, DLOCK_MODE_EXCLUSIVE, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(idle), DLOCK_OK);

	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_list(c, NULL, &list), DLOCK_OK);
	CU_ASSERT_EQUAL(list->count, N);
	int seen = 0;
	for (size_t k = 0; k < list->count; k++) {
		const dlock_lock_info *i = list->items[k];
		CU_ASSERT_PTR_NOT_NULL_FATAL(i->name);
		for (int j = 0; j < N; j++)
			if (strcmp(i->name, names[j]) == 0)
				seen |= 1 << j;
		CU_ASSERT_EQUAL(i->nholders, 1);
		if (i->nholders == 1)
			check_holder(i->holders[0], "lister", c);
	}
	CU_ASSERT_EQUAL(seen, (1 << N) - 1);
	dlock_lock_list_free(list);

	CU_ASSERT_EQUAL_FATAL(dlock_list(c, "pre/", &list), DLOCK_OK);
	CU_ASSERT_EQUAL(list->count, 2);
	if (list->count == 2) {
		CU_ASSERT_STRING_EQUAL(list->items[0]->name, "pre/a");
		CU_ASSERT_STRING_EQUAL(list->items[1]->name, "pre/b b");
		CU_ASSERT_EQUAL(list->items[1]->kind, DLOCK_KIND_RWLOCK);
		CU_ASSERT_EQUAL(list->items[1]->holders[0]->mode, DLOCK_MODE_SHARED);
	}
	dlock_lock_list_free(list);

	dlock_lock_info *info = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, longname, &info), DLOCK_OK);
	CU_ASSERT_EQUAL(info->nholders, 1);
	CU_ASSERT_EQUAL(info->holders[0]->token, dlock_test_token(l[N - 1]));
	dlock_lock_info_free(info);
	size_t broken = 0;
	CU_ASSERT_EQUAL(dlock_break(c, longname, &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);

	for (int i = 0; i < N; i++)
		dlock_lock_free(l[i]);
	dlock_lock_free(idle);
	dlock_client_close(c);
	/* Nothing held: an empty list; a base that does not exist: the same. */
	c = open_client(uri);
	CU_ASSERT_EQUAL_FATAL(dlock_list(c, NULL, &list), DLOCK_OK);
	CU_ASSERT_EQUAL(list->count, 0);
	dlock_lock_list_free(list);
	dlock_client_close(c);
}

/* Nodes of the previous release (no data) and of Curator (its address as data) inspect as held, owner unknown. */
static void test_foreign_nodes(void)
{
	char uri[1024], base[64], parent[512], path[1024], made[1024];
	new_uri(uri, sizeof uri, 0, NULL, "", base, sizeof base);
	dlock_client *c = open_client(uri);
	zhandle_t *zh = dlock_testzk_raw(hosts[0], NULL);
	CU_ASSERT_EQUAL_FATAL(zoo_state(zh), ZOO_CONNECTED_STATE);
	dlock_lock *l = new_kind(c, "old", DLOCK_KIND_MUTEX, 1);

	/* A mutex node as the previous release made it: no data.  (Parents persistent: never reaped under us.) */
	parent_of(parent, sizeof parent, base, "old", 3);
	CU_ASSERT_EQUAL(zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	snprintf(path, sizeof path, "%s/_c_0123456789abcdef0123456789abcdef-lock-", parent);
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, made,
	                                 sizeof made),
	                      ZOK);
	struct Stat st;
	CU_ASSERT_EQUAL(zoo_exists(zh, made, 0, &st), ZOK);
	dlock_lock_info *i = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, "old", &i), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(i->nholders, 1);
	CU_ASSERT_STRING_EQUAL(i->holders[0]->identity, "");
	CU_ASSERT_EQUAL(i->holders[0]->pid, 0);
	CU_ASSERT_EQUAL(i->holders[0]->token, (uint64_t)st.czxid);
	CU_ASSERT_EQUAL(i->holders[0]->acquired_ms, st.ctime);
	dlock_lock_info_free(i);
	/* Our acquire waits behind it, as the previous release's would. */
	CU_ASSERT_EQUAL(acquire_mode(l, 0, DLOCK_MODE_EXCLUSIVE, NULL), DLOCK_EBUSY);

	/* Curator's: its address as data, a data that is no owner record. */
	parent_of(parent, sizeof parent, base, "cur", 3);
	CU_ASSERT_EQUAL(zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	snprintf(path, sizeof path, "%s/_c_0123456789abcdef0123456789abcdef-__WRIT__", parent);
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, path, "127.0.0.1", 9, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
	                                 made, sizeof made),
	                      ZOK);
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, "cur", &i), DLOCK_OK);
	CU_ASSERT_EQUAL(i->nholders, 1);
	CU_ASSERT_EQUAL(i->kind, DLOCK_KIND_RWLOCK);
	CU_ASSERT_STRING_EQUAL(i->holders[0]->identity, "");
	dlock_lock_info_free(i);

	/* A lease of the previous release: "dlock:permits=2" only.  Ours joins it and both are listed. */
	parent_of(parent, sizeof parent, base, "sem", 3);
	CU_ASSERT_EQUAL(zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	snprintf(path, sizeof path, "%s/leases", parent);
	CU_ASSERT_EQUAL(zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	snprintf(path + strlen(path), sizeof path - strlen(path), "/_c_0123456789abcdef0123456789abcdef-lease-");
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, path, "dlock:permits=2", 15, &ZOO_OPEN_ACL_UNSAFE,
	                                 ZOO_EPHEMERAL_SEQUENTIAL, made, sizeof made),
	                      ZOK);
	dlock_lock *s3 = new_kind(c, "sem", DLOCK_KIND_SEMAPHORE, 3), *s2 = new_kind(c, "sem", DLOCK_KIND_SEMAPHORE, 2);
	CU_ASSERT_EQUAL(acquire_mode(s3, 0, DLOCK_MODE_EXCLUSIVE, NULL), DLOCK_EKIND); /* its N is still read */
	dlock_lock_free(s3);
	CU_ASSERT_EQUAL_FATAL(acquire_mode(s2, 0, DLOCK_MODE_EXCLUSIVE, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, "sem", &i), DLOCK_OK);
	CU_ASSERT_EQUAL(i->kind, DLOCK_KIND_SEMAPHORE);
	CU_ASSERT_EQUAL(i->permits, 2);
	CU_ASSERT_EQUAL_FATAL(i->nholders, 2);
	CU_ASSERT_STRING_EQUAL(i->holders[0]->identity, "");
	CU_ASSERT(strlen(i->holders[1]->identity) > 0);
	dlock_lock_info_free(i);
	/* And our lease's data still starts with what the previous release reads: its N. */
	CU_ASSERT_EQUAL(dlock_release(s2), DLOCK_OK);
	dlock_lock_free(s2);
	dlock_lock_free(l);
	dlock_client_close(c);
	zookeeper_close(zh);
}

/* Hostile names and identities: bytes in, the same bytes out; a bad identity is refused at open. */
static void test_bad_input(void)
{
	char uri[1024], base[64];
	new_uri(uri, sizeof uri, 0, NULL, "identity=%2F..%2F%25%26pid%3D1", base, sizeof base);
	dlock_client *c = open_client(uri);
	const char *name = "../x\"; DROP TABLE l; --\\\x01\x7f";
	dlock_lock *l = new_kind(c, name, DLOCK_KIND_MUTEX, 1);
	CU_ASSERT_EQUAL_FATAL(acquire_mode(l, 0, DLOCK_MODE_EXCLUSIVE, NULL), DLOCK_OK);
	dlock_lock_info *i = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, name, &i), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(i->name, name);
	CU_ASSERT_EQUAL_FATAL(i->nholders, 1);
	CU_ASSERT_STRING_EQUAL(i->holders[0]->identity, "/../%&pid=1");
	CU_ASSERT_EQUAL(i->holders[0]->pid, (int64_t)getpid());
	CU_ASSERT_PTR_NULL(strchr(i->resource, '\x01'));
	dlock_lock_info_free(i);
	static char too_long[DLOCK_NAME_MAX + 2];
	memset(too_long, 'x', DLOCK_NAME_MAX + 1);
	CU_ASSERT_EQUAL(dlock_inspect(c, too_long, &i), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_inspect(c, "", &i), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
	dlock_client *bad = NULL;
	new_uri(uri, sizeof uri, 0, NULL, "identity=a%0Ab", base, sizeof base);
	CU_ASSERT_EQUAL(dlock_client_open(&bad, uri, NULL, NULL, 0), DLOCK_EURI); /* a control byte */
	CU_ASSERT_PTR_NULL(bad);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("zookeeper inspection", NULL, NULL);
	CU_add_test(s, "features: what inspection sees, break deletes", test_features);
	CU_add_test(s, "a mutex's holder: identity, host, pid, ctime, czxid, session; waiters", test_mutex);
	CU_add_test(s, "every reader listed; the waiting writer counted, then alone", test_rwlock);
	CU_add_test(s, "a semaphore's permits with N; broken, the waiter gets in", test_semaphore);
	CU_add_test(s, "break: the holder told TAKEN, the next token larger; readers all taken", test_break);
	CU_add_test(s, "under ACLs another identity may neither break, inspect nor list; the creator may", test_break_acl);
	CU_add_test(s, "list: names back as bytes, a hashed one from its node; prefix", test_list);
	CU_add_test(s, "nodes of the previous release and of Curator: held, owner unknown", test_foreign_nodes);
	CU_add_test(s, "hostile names and identities", test_bad_input);
}

int main(void)
{
	if (!dlock_testzk_hosts(hosts))
		return dlock_test_skip("no ZooKeeper server (DLOCK_TEST_ZK_URI unset)");
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
