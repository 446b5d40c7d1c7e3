/*
 * zk:// elections against real ZooKeeper servers (DLOCK_TEST_ZK_URI and
 * DLOCK_TEST_ZK_ENSEMBLE_URI, as tests/test_zookeeper.c): what is
 * ZooKeeper's own.  Observers are woken through watches
 * (DLOCK_FEATURE_ELECTION is notify); a leader whose session is closed
 * from outside is told, the next term (the leader node's czxid) is larger,
 * and the observer follows; an observer whose own session is closed reads
 * again on its new session and keeps being woken, and so does one whose
 * connection is cut (through the fault proxy) while the leader proclaims;
 * names never used before are watched from their first campaign, several
 * per client; the leader's value sits after the owner record in its node's
 * data, and nodes without one (or Curator's) still inspect.  The contract
 * of elections (values, turns, notification, breaking) is the conformance
 * suite's, which runs on both URIs.  Every test works under its own base
 * path; conditions are awaited, never slept for.
 */
#define THREADED /* the client library's synchronous API */

#include <CUnit/CUnit.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "dlock/dlock.h"
#include "dlock/sys/driver.h"
#include "dlock/sys/zookeeper.h"
#include "faultproxy.h"
#include "testelect.h"
#include "testobserve.h"
#include "testsupport.h"
#include "testzk.h"

#define AWAIT_MS 20000
#define NOTIFIED_MS 1000 /* a notification, not the read twice per lease (OBSERVER_TTL) */
#define OBSERVER_TTL "ttl=60s"
#define CANDIDATE_TTL "ttl=60s&session_timeout=4s"

static char hosts[2][DLOCK_TESTZK_HOSTS_MAX];
static unsigned base_counter;

/* ------------------------------------------------------------ helpers */

/* A fresh base path for one test on host list `h`; uri(query) builds URIs under it. */
struct place {
	int h;
	char base[64];
};

static void place_new(struct place *p, int h)
{
	p->h = h;
	snprintf(p->base, sizeof p->base, "/dlock-zke-%d-%u", (int)getpid(), ++base_counter);
}

static dlock_client *open_at(const struct place *p, const char *query)
{
	char uri[1024];
	snprintf(uri, sizeof uri, "zk://%s%s?%s", hosts[p->h], p->base, query);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_election *election(dlock_client *c, const char *name)
{
	dlock_election *e = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(c, name, &e), DLOCK_OK);
	return e;
}

/* The client's session is no longer `old` (a new one is connected). */
struct new_session {
	dlock_client *c;
	int64_t old;
};

static int session_replaced(void *arg)
{
	struct new_session *n = arg;
	clientid_t id = { 0 };
	return dlock_client_control(n->c, DLOCK_ZK_CTL_SESSION_ID, &id) == DLOCK_OK && id.client_id != 0 &&
	       id.client_id != n->old;
}

/* ------------------------------------------------------------ tests */

static void test_feature(void)
{
	struct place p;
	place_new(&p, 0);
	dlock_client *c = open_at(&p, OBSERVER_TTL);
	int64_t v = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_ELECTION, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_WAKEUP_NOTIFY);
	dlock_client_close(c);
}

/*
 * The leader's session closed from outside (a handle with its id): it is
 * told; the waiting candidate leads with a larger term; the observer
 * follows within a second.  The leader's library may win the session back
 * just before the close: close again until it is told.
 */
static void expired_on(int h)
{
	struct place p;
	place_new(&p, h);
	dlock_client *a = open_at(&p, "identity=a&" CANDIDATE_TTL), *b = open_at(&p, "identity=b&" CANDIDATE_TTL);
	dlock_client *o = open_at(&p, OBSERVER_TTL);
	dlock_election *ea = election(a, "exp"), *eb = election(b, "exp"), *eo = election(o, "exp");
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	dlock_test_lost lost = { 0 };
	uint64_t t1 = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(ea, "a", AWAIT_MS, 0, -1, &lost, &t1), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "a", t1, NOTIFIED_MS));
	dlock_test_candidate kb;
	dlock_test_candidate_start(&kb, eb, "b", AWAIT_MS);

	clientid_t id = dlock_testzk_session(a);
	for (int i = 0; i < 10 && !dlock_test_lost_seen(&lost); i++) {
		dlock_testzk_close_session(hosts[h], &id);
		dlock_test_await(dlock_test_lost_seen, &lost, 3000);
	}
	CU_ASSERT_FATAL(dlock_test_lost_seen(&lost));
	int reason = atomic_load(&lost.reason);
	CU_ASSERT(reason == DLOCK_LOST_SESSION || reason == DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL_FATAL(dlock_test_candidate_join(&kb, AWAIT_MS), DLOCK_OK);
	CU_ASSERT(kb.term > t1);
	CU_ASSERT(dlock_test_observed(&s, "b", kb.term, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "still a?"), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_resign(ea), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);

	/* a campaigns again on its new session: after b, a larger term still. */
	CU_ASSERT_EQUAL(dlock_resign(eb), DLOCK_OK);
	uint64_t t3 = 0;
	dlock_status st = dlock_test_campaign(ea, "a again", AWAIT_MS, 0, -1, NULL, &t3);
	if (st != DLOCK_OK)
		printf("\n    campaign again: %s: %s", dlock_status_name(st), dlock_client_errmsg(a));
	CU_ASSERT_EQUAL_FATAL(st, DLOCK_OK);
	CU_ASSERT(t3 > kb.term);
	CU_ASSERT(dlock_test_observed(&s, "a again", t3, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&s), 0);

	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_election_free(eb);
	dlock_client_close(o);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_leader_expired(void)
{
	expired_on(0);
	expired_on(1);
}

/*
 * The observer's own session closed from outside: its watches went with
 * it.  A proclaim made while it had none is read on the new session (the
 * driver tells the core once its watches are set again), and the next
 * proclaim wakes it as before, both within a second (its ttl is a minute).
 */
static void observer_session_on(int h)
{
	struct place p;
	place_new(&p, h);
	dlock_client *a = open_at(&p, CANDIDATE_TTL), *o = open_at(&p, OBSERVER_TTL "&session_timeout=4s");
	dlock_election *ea = election(a, "obs"), *eo = election(o, "obs");
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	uint64_t t1 = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(ea, "one", AWAIT_MS, 0, -1, NULL, &t1), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "one", t1, NOTIFIED_MS));

	clientid_t id = dlock_testzk_session(o);
	struct new_session ns = { o, id.client_id };
	/* The server ends the session; the client's library may have won it back just before: close again. */
	dlock_testzk_close_session(hosts[h], &id);
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "two"), DLOCK_OK);
	for (int i = 0; i < 10 && !dlock_test_await(session_replaced, &ns, 3000); i++)
		dlock_testzk_close_session(hosts[h], &id);
	CU_ASSERT_FATAL(session_replaced(&ns));
	CU_ASSERT(dlock_test_observed(&s, "two", t1, 2 * NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "three"), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "three", t1, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_resign(ea), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_nobody(&s, NOTIFIED_MS));

	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_client_close(o);
	dlock_client_close(a);
}

static void test_observer_session(void)
{
	observer_session_on(0);
	observer_session_on(1);
}

/*
 * The observer's connection cut (through the fault proxy, reconnecting
 * refused) while the leader proclaims: the session lives, and once it is
 * connected again the observer reads the value it missed, well before its
 * periodic read; the next proclaim wakes it as before.
 */
static void test_observer_disconnected(void)
{
	struct place p;
	place_new(&p, 0);
	int port = 0;
	CU_ASSERT_FATAL(sscanf(strrchr(hosts[0], ':') + 1, "%d", &port) == 1);
	faultproxy *px = faultproxy_start("127.0.0.1", port);
	CU_ASSERT_PTR_NOT_NULL_FATAL(px);
	char uri[1024];
	snprintf(uri, sizeof uri, "zk://127.0.0.1:%d%s?" OBSERVER_TTL "&session_timeout=10s", faultproxy_port(px),
	         p.base);
	dlock_client *a = open_at(&p, CANDIDATE_TTL), *o = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(o);
	dlock_election *ea = election(a, "cut"), *eo = election(o, "cut");
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	uint64_t t1 = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(ea, "one", AWAIT_MS, 0, -1, NULL, &t1), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "one", t1, NOTIFIED_MS));
	int64_t id = dlock_testzk_session(o).client_id;

	CU_ASSERT_EQUAL_FATAL(faultproxy_refuse(px, 1), 0);
	faultproxy_reset(px);
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "two"), DLOCK_OK);
	CU_ASSERT_EQUAL(faultproxy_refuse(px, 0), 0);
	CU_ASSERT(dlock_test_observed(&s, "two", t1, 5 * NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_testzk_session(o).client_id, id); /* the same session: its watches came back with it */
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "three"), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "three", t1, NOTIFIED_MS));

	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_client_close(o);
	dlock_client_close(a);
	faultproxy_stop(px);
}

/*
 * Observing a name nobody ever used (no node to watch the children of):
 * the first campaign creates it, and the observer hears of it.  Several
 * elections on one client, each stopped and started again (watch contexts
 * reused), are each woken for their own name.
 */
static void test_fresh_names(void)
{
	enum { N = 3 };
	struct place p;
	place_new(&p, 0);
	dlock_client *a = open_at(&p, CANDIDATE_TTL), *o = open_at(&p, OBSERVER_TTL);
	dlock_election *ea[N], *eo[N];
	dlock_test_observer s[N];
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			char name[32];
			snprintf(name, sizeof name, "fresh-%d-%d", round, i);
			ea[i] = election(a, name);
			eo[i] = election(o, name);
			dlock_test_observer_init(&s[i]);
			CU_ASSERT_EQUAL(dlock_observe(eo[i], dlock_test_on_leader, &s[i]), DLOCK_OK);
			CU_ASSERT(dlock_test_observed_nobody(&s[i], AWAIT_MS));
		}
		for (int i = 0; i < N; i++) {
			uint64_t term = 0;
			char value[32];
			snprintf(value, sizeof value, "v%d", i);
			CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(ea[i], value, AWAIT_MS, 0, -1, NULL, &term), DLOCK_OK);
			CU_ASSERT(dlock_test_observed(&s[i], value, term, NOTIFIED_MS));
		}
		for (int i = 0; i < N; i++) {
			dlock_election_free(eo[i]);
			dlock_election_free(ea[i]);
			dlock_test_observer_destroy(&s[i]);
		}
	}
	dlock_client_close(o);
	dlock_client_close(a);
}

/* A node written by the previous release (the record alone) and one with a value, made by hand. */
static void test_node_data(void)
{
	struct place p;
	place_new(&p, 0);
	dlock_client *o = open_at(&p, OBSERVER_TTL);
	dlock_election *eo = election(o, "raw");
	char parent[512], path[600], comp[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component("raw", 3, comp);
	snprintf(parent, sizeof parent, "%s/%s", p.base, comp);
	zhandle_t *zh = dlock_testzk_raw(hosts[0], NULL);
	/* The base path is there: the client made it when it opened. */
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	snprintf(path, sizeof path, "%s/_c_0123456789abcdef0123456789abcdef-lock-", parent);
	const char *old = "id=old&host=h&pid=7";
	char made[600];
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, path, old, (int)strlen(old), &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
	                                 made, sizeof made),
	                      ZOK);
	dlock_leader *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_leader_get(eo, &l), DLOCK_OK);
	CU_ASSERT_EQUAL(l->elected, 1);
	CU_ASSERT_STRING_EQUAL(l->value, "");
	CU_ASSERT_STRING_EQUAL(l->holder->identity, "old");
	CU_ASSERT_EQUAL(l->holder->pid, 7);
	dlock_leader_free(l);
	const char *with = "id=new&host=h&pid=8\nhost:1";
	CU_ASSERT_EQUAL(zoo_set(zh, made, with, (int)strlen(with), -1), ZOK);
	CU_ASSERT_EQUAL_FATAL(dlock_leader_get(eo, &l), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(l->value, "host:1");
	CU_ASSERT_STRING_EQUAL(l->holder->identity, "new");
	CU_ASSERT_EQUAL(l->holder->pid, 8);
	dlock_leader_free(l);
	const char *foreign = "10.1.2.3"; /* Curator's LeaderLatch: the participant id */
	CU_ASSERT_EQUAL(zoo_set(zh, made, foreign, (int)strlen(foreign), -1), ZOK);
	CU_ASSERT_EQUAL_FATAL(dlock_leader_get(eo, &l), DLOCK_OK);
	CU_ASSERT_EQUAL(l->elected, 1);
	CU_ASSERT_STRING_EQUAL(l->value, "");
	CU_ASSERT_STRING_EQUAL(l->holder->identity, "");
	dlock_leader_free(l);
	zookeeper_close(zh);
	dlock_election_free(eo);
	dlock_client_close(o);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("zookeeper elections", NULL, NULL);
	CU_add_test(s, "observers are woken by the server (DLOCK_FEATURE_ELECTION)", test_feature);
	CU_add_test(s, "the leader's session closed from outside: told; the next term larger, observed",
	            test_leader_expired);
	CU_add_test(s, "the observer's session closed: it reads again on the new one and is woken as before",
	            test_observer_session);
	CU_add_test(s, "the observer's connection cut while the leader proclaims: read once reconnected",
	            test_observer_disconnected);
	CU_add_test(s, "names never used before, several per client, watches reused", test_fresh_names);
	CU_add_test(s, "node data: the record alone, with a value, Curator's", test_node_data);
}

int main(void)
{
	if (!dlock_testzk_hosts(hosts))
		return dlock_test_skip("no ZooKeeper server (DLOCK_TEST_ZK_URI unset)");
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
