/*
 * Faults between dlock and ZooKeeper, injected by the fault proxy
 * (tests/support/faultproxy.h): what the holder is told, and whether
 * mutual exclusion held (hold intervals and fencing tokens).  The server
 * comes from ci/servers/zookeeper.sh (DLOCK_TEST_ZK_PORT; tickTime 500 ms,
 * so sessions of 1 to 10 s).  Session expiry from outside, a stopped
 * holder, a lost connection to one ensemble member and the leader's death
 * are in test_zookeeper.c.
 */
#define THREADED /* the client library's synchronous API */

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "dlock/sys/driver.h"
#include "faultproxy.h"
#include "faults.h"
#include "testsupport.h"

static int zk_port;
static char zk_hosts[64];
static unsigned base_counter;

static void new_base(char *out, size_t len)
{
	snprintf(out, len, "/dlock-ft-%ld-%u", (long)getpid(), ++base_counter);
}

static void uri_at(char *out, size_t len, int port, const char *base, const char *query)
{
	snprintf(out, len, "zk://127.0.0.1:%d%s?%s", port, base, query);
}

/* ------------------------------------------------------------ the server's view */

static void raw_log(const char *msg)
{
	(void)msg; /* the test's own handle stays off stderr */
}

static int raw_connected(void *zh)
{
	return zoo_state(zh) == ZOO_CONNECTED_STATE;
}

static zhandle_t *raw_open(void)
{
	zhandle_t *zh = zookeeper_init2(zk_hosts, NULL, 10000, NULL, NULL, 0, raw_log);
	CU_ASSERT_PTR_NOT_NULL_FATAL(zh);
	CU_ASSERT_FATAL(dlock_test_await(raw_connected, zh, FT_AWAIT_MS));
	return zh;
}

static void parent_of(char *out, size_t len, const char *base, const char *name)
{
	char comp[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(name, strlen(name), comp);
	snprintf(out, len, "%s/%s", base, comp);
}

/* Lock nodes ("...-lock-NNNNNNNNNN") under `parent`; -1 when it does not exist. */
static int lock_nodes(zhandle_t *zh, const char *parent)
{
	struct String_vector v = { 0, NULL };
	if (zoo_get_children(zh, parent, 0, &v) != ZOK)
		return -1;
	int n = 0;
	for (int32_t i = 0; i < v.count; i++)
		n += strstr(v.data[i], "-lock-") != NULL;
	deallocate_String_vector(&v);
	return n;
}

struct nodes_cond {
	zhandle_t *zh;
	const char *parent;
	int want;
};

static int nodes_are(void *arg)
{
	struct nodes_cond *nc = arg;
	return lock_nodes(nc->zh, nc->parent) == nc->want;
}

/* ------------------------------------------------------------ create and reset */

/*
 * The create of our sequential node reaches the server, its answer does
 * not, and the connection is reset: after reconnecting, the client finds
 * the node it made (by its GUID) instead of making a second one.  Exactly
 * one node of ours exists while held, none after the release.
 */
static void test_reset_during_create(void)
{
	char base[64], uri[512], direct[512], parent[512];
	new_base(base, sizeof base);
	parent_of(parent, sizeof parent, base, "created");
	faultproxy *px = ft_proxy_to(zk_port);
	uri_at(uri, sizeof uri, faultproxy_port(px), base, "session_timeout=6s");
	uri_at(direct, sizeof direct, zk_port, base, "session_timeout=6s");
	ft_pair p;
	ft_pair_open(&p, uri, direct, "created");
	dlock_lock *la = p.lv, *lb = p.ld;
	zhandle_t *zh = raw_open();
	/* A persistent parent (the base exists since the open): an empty container could be reaped before the create. */
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	ft_lost lost = { 0 };

	faultproxy_blackhole(px, FP_DOWN);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, la, FT_LONG_WAIT_MS, 0);
	struct nodes_cond one = { zh, parent, 1 };
	CU_ASSERT(dlock_test_await(nodes_are, &one, FT_AWAIT_MS)); /* the create went through */
	faultproxy_reset(px);                                      /* its answer is lost */
	faultproxy_pass(px);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, FT_AWAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(lock_nodes(zh, parent), 1);
	CU_ASSERT_EQUAL(dlock_check(la), DLOCK_OK);
	CU_ASSERT_EQUAL(ft_acquire(lb, 0, 0, NULL), DLOCK_EBUSY);
	faultproxy_stats s;
	faultproxy_get_stats(px, &s);
	CU_ASSERT(s.reset >= 1);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	struct nodes_cond none = { zh, parent, 0 };
	CU_ASSERT(dlock_test_await(nodes_are, &none, FT_AWAIT_MS));
	CU_ASSERT_EQUAL(ft_acquire(lb, 0, 0, &lost), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.calls), 0);
	zoo_delete(zh, parent, -1);
	zoo_delete(zh, base, -1);
	zookeeper_close(zh);
	ft_pair_close(&p);
	faultproxy_stop(px);
}

static int check_certain(void *lock)
{
	return dlock_check(lock) != DLOCK_EUNCERTAIN;
}

/* A connection reset while held, well within the session: the lock survives, nobody is told it is lost. */
static void test_reset_while_held(void)
{
	char base[64], uri[512], direct[512];
	new_base(base, sizeof base);
	faultproxy *px = ft_proxy_to(zk_port);
	uri_at(uri, sizeof uri, faultproxy_port(px), base, "session_timeout=6s");
	uri_at(direct, sizeof direct, zk_port, base, "session_timeout=6s");
	ft_pair p;
	ft_pair_open(&p, uri, direct, "survives");
	dlock_lock *la = p.lv, *lb = p.ld;
	ft_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(ft_acquire(la, 0, 0, &lost), DLOCK_OK);
	uint64_t t1 = dlock_test_token(la);
	faultproxy_reset(px);
	/* Until the client reconnects it cannot tell; then the lock is still its own. */
	CU_ASSERT(dlock_test_await(check_certain, la, FT_AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_check(la), DLOCK_OK);
	CU_ASSERT_EQUAL(ft_acquire(lb, 0, 0, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_test_token(la), t1);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&lost.calls), 0);
	ft_pair_close(&p);
	faultproxy_stop(px);
}

static int check_uncertain(void *lock)
{
	return dlock_check(lock) == DLOCK_EUNCERTAIN;
}

/* The one child of `parent` (its full path); 0 if not exactly one. */
static int only_child(zhandle_t *zh, const char *parent, char *out, size_t len)
{
	struct String_vector v = { 0, NULL };
	if (zoo_get_children(zh, parent, 0, &v) != ZOK)
		return 0;
	int ok = v.count == 1;
	if (ok)
		snprintf(out, len, "%s/%s", parent, v.data[0]);
	deallocate_String_vector(&v);
	return ok;
}

/*
 * Another client deletes the holder's node while the holder is cut off,
 * within its session: the watch on its own node, set again by the client
 * library when it reconnects, reports the lock taken (not a session loss).
 * With `parent_too` the parent goes as well, as when the server reaps the
 * emptied container meanwhile: the reconnection then reports the parent's
 * deletion rather than a change of its children.
 */
static void deleted_while_disconnected(int parent_too)
{
	char base[64], uri[512], parent[512], node[1024];
	new_base(base, sizeof base);
	parent_of(parent, sizeof parent, base, "gone");
	faultproxy *px = ft_proxy_to(zk_port);
	uri_at(uri, sizeof uri, faultproxy_port(px), base, "session_timeout=6s");
	dlock_client *a = ft_open(uri);
	dlock_lock *la = ft_lock(a, "gone");
	zhandle_t *zh = raw_open();
	ft_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(ft_acquire(la, 0, 0, &lost), DLOCK_OK);
	CU_ASSERT_FATAL(only_child(zh, parent, node, sizeof node));
	CU_ASSERT_EQUAL_FATAL(faultproxy_refuse(px, 1), 0);
	faultproxy_reset(px);
	CU_ASSERT(dlock_test_await(check_uncertain, la, FT_AWAIT_MS));
	CU_ASSERT_EQUAL(zoo_delete(zh, node, -1), ZOK);
	if (parent_too)
		CU_ASSERT_EQUAL(zoo_delete(zh, parent, -1), ZOK);
	CU_ASSERT_EQUAL(faultproxy_refuse(px, 0), 0);
	CU_ASSERT(dlock_test_await(ft_lost_called, &lost, FT_AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(atomic_load(&lost.calls), 1);
	/* The session lived on: the next acquire needs no new one. */
	CU_ASSERT_EQUAL(ft_acquire(la, FT_LONG_WAIT_MS, 0, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	zookeeper_close(zh);
	dlock_lock_free(la);
	dlock_client_close(a);
	faultproxy_stop(px);
}

static void test_deleted_while_disconnected(void)
{
	deleted_while_disconnected(0);
}

static void test_deleted_with_parent_while_disconnected(void)
{
	deleted_while_disconnected(1);
}

/* ------------------------------------------------------------ blackhole past the session */

#define SESSION_MS 2000
#define HELD_LOCKS 3

/*
 * The holder's network goes silent for longer than its session timeout:
 * every lock is reported lost, once, before the server can have expired
 * the session and let the next contender in, and the old holder's token is
 * refused (ft_silent_begin()), within the session timeout of the silence; a
 * new session serves the old holder's next acquire (ft_silent_end()).
 */
static void test_blackhole_past_session(void)
{
	char base[64], uri[512], direct[512], query[64];
	new_base(base, sizeof base);
	snprintf(query, sizeof query, "session_timeout=%dms", SESSION_MS);
	faultproxy *px = ft_proxy_to(zk_port);
	uri_at(uri, sizeof uri, faultproxy_port(px), base, query);
	uri_at(direct, sizeof direct, zk_port, base, query);
	ft_silent s;
	ft_silent_begin(&s, px, uri, direct, "silent", HELD_LOCKS, 0);
	printf(" (session %d ms)", SESSION_MS);
	CU_ASSERT(s.told_ms - s.cut_ms <= SESSION_MS + FT_SLACK_MS);
	ft_silent_end(&s, DLOCK_LOST_SESSION);
	faultproxy_stop(px);
}

/* ------------------------------------------------------------ open, close */

static void test_server_down_at_open(void)
{
	char uri[512];
	uri_at(uri, sizeof uri, zk_port, "/dlock-ft-hung", "session_timeout=6s");
	ft_check_open_server_down(uri, zk_port, "open_timeout=1s", 1000, 1000);
}

static void test_close_releases(void)
{
	char base[64], uri[512];
	new_base(base, sizeof base);
	uri_at(uri, sizeof uri, zk_port, base, "session_timeout=6s");
	ft_check_close_releases(uri, zk_port, "", 0);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("zookeeper faults", NULL, NULL);
	CU_add_test(s, "reset during the create: one node of ours, cleaned up", test_reset_during_create);
	CU_add_test(s, "reset while held: the lock survives", test_reset_while_held);
	CU_add_test(s, "node deleted while cut off: taken, told on reconnection", test_deleted_while_disconnected);
	CU_add_test(s, "node and its container deleted while cut off: taken, told", test_deleted_with_parent_while_disconnected);
	CU_add_test(s, "blackhole past the session: told first, fenced after", test_blackhole_past_session);
	CU_add_test(s, "server hung or refusing at open: ECONNECT in time", test_server_down_at_open);
	CU_add_test(s, "closed while holding on a slow path: released", test_close_releases);
}

int main(void)
{
	const char *port = dlock_test_env("DLOCK_TEST_ZK_PORT");
	if (!dlock_test_env("DLOCK_TEST_ZK_URI") || !port)
		return dlock_test_skip("no ZooKeeper server (DLOCK_TEST_ZK_URI unset)");
	zk_port = atoi(port);
	snprintf(zk_hosts, sizeof zk_hosts, "127.0.0.1:%d", zk_port);
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
