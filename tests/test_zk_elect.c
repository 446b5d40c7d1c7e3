/*
 * zk:// elections against real ZooKeeper servers (DLOCK_TEST_ZK_URI and
 * DLOCK_TEST_ZK_ENSEMBLE_URI, as tests/test_zookeeper.c): campaign,
 * proclaim, observe, resign; terms (the leader node's czxid) increase from
 * leader to leader; an observer in another client hears of a proclaim, a
 * resignation and a new leader through ZooKeeper's watches, within a
 * second, while its URI's ttl (a minute) keeps the core's periodic read
 * half a minute away; a leader whose session is closed from outside, or
 * whose node is broken, is told, and the observer follows the next leader;
 * an observer whose own session is closed reads again on its new session
 * and keeps being woken, and so does one whose connection is cut (through
 * the fault proxy) while the leader proclaims.  The leader's value sits after the owner record in
 * its node's data: nodes without one still inspect.  Every test works under
 * its own base path; conditions are awaited, never slept for.
 */
#define THREADED /* the client library's synchronous API */

#include <CUnit/CUnit.h>
#include <pthread.h>
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

static dlock_status campaign(dlock_election *e, const char *value, dlock_test_lost *lost, uint64_t *term)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = AWAIT_MS;
	o.on_lost = lost ? dlock_test_on_lost : NULL;
	o.lost_userdata = lost;
	return dlock_campaign(e, value, &o, term);
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

/* A candidate campaigning on a thread of its own. */
struct candidate {
	dlock_election *e;
	const char *value;
	dlock_test_lost lost;
	pthread_t t;
	atomic_int done;
	dlock_status st;
	uint64_t term;
};

static void *candidate_main(void *arg)
{
	struct candidate *k = arg;
	k->st = campaign(k->e, k->value, &k->lost, &k->term);
	atomic_store(&k->done, 1);
	return NULL;
}

static void candidate_start(struct candidate *k, dlock_election *e, const char *value)
{
	memset(k, 0, sizeof *k);
	k->e = e;
	k->value = value;
	CU_ASSERT_EQUAL_FATAL(pthread_create(&k->t, NULL, candidate_main, k), 0);
}

static int candidate_done(void *arg)
{
	return atomic_load(&((struct candidate *)arg)->done);
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

/* Campaign, proclaim, resign, the next leader: each heard by another client's observer within a second. */
static void observe_on(int h)
{
	struct place p;
	place_new(&p, h);
	dlock_client *a = open_at(&p, "identity=a&" CANDIDATE_TTL), *b = open_at(&p, "identity=b&" CANDIDATE_TTL);
	dlock_client *o = open_at(&p, OBSERVER_TTL);
	dlock_election *ea = election(a, "svc"), *eb = election(b, "svc"), *eo = election(o, "svc");
	dlock_test_observer s;
	dlock_test_observer_init(&s);

	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_nobody(&s, AWAIT_MS)); /* nobody leads yet: told so once */
	dlock_leader *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_leader_get(eo, &l), DLOCK_OK);
	CU_ASSERT_EQUAL(l->elected, 0);
	dlock_leader_free(l);

	uint64_t t1 = 0, t2 = 0;
	CU_ASSERT_EQUAL_FATAL(campaign(ea, "10.0.0.1:80", NULL, &t1), DLOCK_OK);
	CU_ASSERT(t1 > 0);
	CU_ASSERT_EQUAL(t1, dlock_test_token(dlock_election_lock(ea)));
	CU_ASSERT(dlock_test_observed(&s, "10.0.0.1:80", t1, NOTIFIED_MS));

	/* Any client reads the value and the term; inspection shows the holder with its value. */
	CU_ASSERT_EQUAL_FATAL(dlock_leader_get(eo, &l), DLOCK_OK);
	CU_ASSERT_EQUAL(l->elected, 1);
	CU_ASSERT_EQUAL(l->term, t1);
	CU_ASSERT_STRING_EQUAL(l->value, "10.0.0.1:80");
	CU_ASSERT_PTR_NOT_NULL_FATAL(l->holder);
	CU_ASSERT_STRING_EQUAL(l->holder->identity, "a");
	dlock_leader_free(l);

	/* A value with a newline, '&' and "id=" stays the leader's value; the owner record is untouched. */
	const char *odd = "line1\nid=evil&host=x&pid=1\n";
	CU_ASSERT_EQUAL(dlock_proclaim(ea, odd), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, odd, t1, NOTIFIED_MS));
	dlock_lock_info *info = dlock_test_inspect(b, "svc");
	CU_ASSERT_EQUAL_FATAL(info->nholders, 1);
	CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "a");
	CU_ASSERT_EQUAL(info->holders[0]->pid, (int64_t)getpid());
	CU_ASSERT_STRING_EQUAL(info->holders[0]->value, odd);
	dlock_lock_info_free(info);

	/* The longest value, then "" (the record alone). */
	char big[DLOCK_VALUE_MAX + 1];
	memset(big, 'v', DLOCK_VALUE_MAX);
	big[DLOCK_VALUE_MAX] = '\0';
	CU_ASSERT_EQUAL(dlock_proclaim(ea, big), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, big, t1, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_proclaim(ea, ""), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "", t1, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "10.0.0.1:81"), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "10.0.0.1:81", t1, NOTIFIED_MS));

	/* Not leading: proclaim and resign say so. */
	CU_ASSERT_EQUAL(dlock_proclaim(eb, "no"), DLOCK_ENOTHELD);

	/* b waits; a resigns: the observer hears of b's term, larger. */
	struct candidate kb;
	candidate_start(&kb, eb, "10.0.0.2:80");
	CU_ASSERT_EQUAL(dlock_resign(ea), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_resign(ea), DLOCK_ENOTHELD);
	CU_ASSERT(dlock_test_await(candidate_done, &kb, AWAIT_MS));
	pthread_join(kb.t, NULL);
	CU_ASSERT_EQUAL_FATAL(kb.st, DLOCK_OK);
	t2 = kb.term;
	CU_ASSERT(t2 > t1);
	CU_ASSERT(dlock_test_observed(&s, "10.0.0.2:80", t2, NOTIFIED_MS));

	/* b resigns with nobody waiting: nobody leads. */
	CU_ASSERT_EQUAL(dlock_resign(eb), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_nobody(&s, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&s), 0);

	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_election_free(eb);
	dlock_client_close(o);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_observe(void)
{
	observe_on(0);
	observe_on(1);
}

/* Candidates take turns on three clients: every term larger than the one before, the observer never back. */
static void test_terms_increase(void)
{
	enum { N = 3, ROUNDS = 3 };
	struct place p;
	place_new(&p, 1);
	dlock_client *c[N], *o = open_at(&p, OBSERVER_TTL);
	dlock_election *e[N], *eo = election(o, "turns");
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	for (int i = 0; i < N; i++) {
		c[i] = open_at(&p, CANDIDATE_TTL);
		e[i] = election(c[i], "turns");
	}
	uint64_t last = 0;
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < N; i++) {
			char value[32];
			uint64_t term = 0;
			snprintf(value, sizeof value, "c%d-r%d", i, r);
			CU_ASSERT_EQUAL_FATAL(campaign(e[i], value, NULL, &term), DLOCK_OK);
			CU_ASSERT(term > last);
			last = term;
			CU_ASSERT(dlock_test_observed(&s, value, term, NOTIFIED_MS));
			CU_ASSERT_EQUAL(dlock_resign(e[i]), DLOCK_OK);
		}
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&s), 0);
	dlock_election_free(eo);
	dlock_client_close(o);
	for (int i = 0; i < N; i++) {
		dlock_election_free(e[i]);
		dlock_client_close(c[i]);
	}
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
	CU_ASSERT_EQUAL_FATAL(campaign(ea, "a", &lost, &t1), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "a", t1, NOTIFIED_MS));
	struct candidate kb;
	candidate_start(&kb, eb, "b");

	clientid_t id = dlock_testzk_session(a);
	for (int i = 0; i < 10 && !dlock_test_lost_seen(&lost); i++) {
		dlock_testzk_close_session(hosts[h], &id);
		dlock_test_await(dlock_test_lost_seen, &lost, 3000);
	}
	CU_ASSERT_FATAL(dlock_test_lost_seen(&lost));
	int reason = atomic_load(&lost.reason);
	CU_ASSERT(reason == DLOCK_LOST_SESSION || reason == DLOCK_LOST_TAKEN);
	CU_ASSERT(dlock_test_await(candidate_done, &kb, AWAIT_MS));
	pthread_join(kb.t, NULL);
	CU_ASSERT_EQUAL_FATAL(kb.st, DLOCK_OK);
	CU_ASSERT(kb.term > t1);
	CU_ASSERT(dlock_test_observed(&s, "b", kb.term, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "still a?"), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_resign(ea), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);

	/* a campaigns again on its new session: after b, a larger term still. */
	CU_ASSERT_EQUAL(dlock_resign(eb), DLOCK_OK);
	uint64_t t3 = 0;
	dlock_status st = campaign(ea, "a again", NULL, &t3);
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

/* The leader's node broken by another client: the leader is told TAKEN; the observer follows the next. */
static void break_on(int h)
{
	struct place p;
	place_new(&p, h);
	dlock_client *a = open_at(&p, CANDIDATE_TTL), *b = open_at(&p, CANDIDATE_TTL), *o = open_at(&p, OBSERVER_TTL);
	dlock_election *ea = election(a, "brk"), *eb = election(b, "brk"), *eo = election(o, "brk");
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	dlock_test_lost lost = { 0 };
	uint64_t t1 = 0;
	CU_ASSERT_EQUAL_FATAL(campaign(ea, "a", &lost, &t1), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&s, "a", t1, NOTIFIED_MS));

	/* Nobody waiting: the observer hears that nobody leads. */
	size_t broken = 0;
	CU_ASSERT_EQUAL(dlock_break(o, "brk", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, 5000));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_TAKEN);
	CU_ASSERT(dlock_test_observed_nobody(&s, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_resign(ea), DLOCK_ENOTHELD);

	/* b leads, a waits; b's node broken: a leads with a larger term, the observer follows. */
	uint64_t t2 = 0;
	dlock_test_lost lost_b = { 0 };
	struct candidate ka;
	CU_ASSERT_EQUAL_FATAL(campaign(eb, "b", &lost_b, &t2), DLOCK_OK);
	CU_ASSERT(t2 > t1);
	CU_ASSERT(dlock_test_observed(&s, "b", t2, NOTIFIED_MS));
	candidate_start(&ka, ea, "a2");
	dlock_lock_info *info = NULL;
	for (int64_t t0 = dlock_test_now_ms(); dlock_test_now_ms() - t0 < AWAIT_MS;) { /* a queued */
		info = dlock_test_inspect(o, "brk");
		int queued = info->waiters == 1;
		dlock_lock_info_free(info);
		if (queued)
			break;
		dlock_test_sleep_ms(5);
	}
	CU_ASSERT_EQUAL(dlock_break(o, "brk", &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 1);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost_b, 5000));
	CU_ASSERT(dlock_test_await(candidate_done, &ka, AWAIT_MS));
	pthread_join(ka.t, NULL);
	CU_ASSERT_EQUAL_FATAL(ka.st, DLOCK_OK);
	CU_ASSERT(ka.term > t2);
	CU_ASSERT(dlock_test_observed(&s, "a2", ka.term, NOTIFIED_MS));
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&s), 0);

	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_election_free(eb);
	dlock_client_close(o);
	dlock_client_close(a);
	dlock_client_close(b);
}

static void test_leader_broken(void)
{
	break_on(0);
	break_on(1);
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
	CU_ASSERT_EQUAL_FATAL(campaign(ea, "one", NULL, &t1), DLOCK_OK);
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
	CU_ASSERT_EQUAL_FATAL(campaign(ea, "one", NULL, &t1), DLOCK_OK);
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
			CU_ASSERT_EQUAL_FATAL(campaign(ea[i], value, NULL, &term), DLOCK_OK);
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
	CU_add_test(s, "campaign, proclaim, resign, the next leader: another client hears each within 1 s",
	            test_observe);
	CU_add_test(s, "candidates taking turns: each term larger than the last", test_terms_increase);
	CU_add_test(s, "the leader's session closed from outside: told; the next term larger, observed",
	            test_leader_expired);
	CU_add_test(s, "the leader's node broken: told TAKEN; nobody, then the next leader, observed",
	            test_leader_broken);
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
