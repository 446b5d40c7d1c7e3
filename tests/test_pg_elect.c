/*
 * PostgreSQL: what is its own about leader election in advisory mode
 * (backends/postgres/pg_elect.c, pg_watch.c), against a real server: a
 * leader whose session the server ends (pg_terminate_backend) is told
 * (DLOCK_LOST_SESSION) and the next one's term is larger; the row an ended
 * leader left is never shown as a later holder's; an observer whose LISTEN
 * session is ended reads again once it is back; candidates of one process
 * taking turns on a 2 s lease never overlap, and an observer with a
 * one-minute lease ends on nobody within a second; advisory mode notifies
 * observers, row mode has no elections.  The contract of elections
 * (campaign, values, notification, breaking, a lease that runs out) is the
 * conformance suite's, which runs on every postgres URI.  Environment:
 * DLOCK_TEST_PG_URI (advisory), DLOCK_TEST_PG_ROW_URI (row),
 * DLOCK_TEST_PG_BOUNCER_URI (optional).  Without DLOCK_TEST_PG_URI the
 * program says SKIPPED.
 */
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testelect.h"
#include "testobserve.h"
#include "testpg.h"
#include "testsupport.h"

#define NOTIFY_MS 1000 /* a notification arrives within this; every lease here is far longer */
#define LONG_TTL "ttl=60s"

static dlock_election *election(dlock_client *c, const char *name)
{
	dlock_election *e = NULL;
	dlock_status st = dlock_election_new(c, name, &e);
	if (st != DLOCK_OK)
		printf("\n    election_new: %s: %s", dlock_status_name(st), dlock_client_errmsg(c));
	CU_ASSERT_EQUAL_FATAL(st, DLOCK_OK);
	return e;
}

/* Who leads, read by `e`'s client: elected, term, value (value copied into `v`). */
static int leader(dlock_election *e, uint64_t *term, char *v, size_t vlen)
{
	dlock_leader *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_leader_get(e, &l), DLOCK_OK);
	int elected = l->elected;
	*term = l->term;
	snprintf(v, vlen, "%s", l->value);
	dlock_leader_free(l);
	return elected;
}

/* The session (backend pid) of the name's holder, as inspection shows it; NULL-free text. */
static void holder_session(dlock_client *c, const char *name, char *out, size_t len)
{
	dlock_lock_info *info = dlock_test_inspect(c, name);
	out[0] = '\0';
	if (info && info->nholders == 1)
		snprintf(out, len, "%s", info->holders[0]->session);
	dlock_lock_info_free(info);
	CU_ASSERT(out[0] != '\0');
}

/* ------------------------------------------------------------ tests */

/*
 * The leader's session ended by the server (pg_terminate_backend): the
 * leader is told (DLOCK_LOST_SESSION) within its lease, the waiting
 * candidate leads with a larger term, the observer follows.
 */
static void test_terminated_leader(void)
{
	char name[128], session[32];
	dlock_testpg_name(name, sizeof name, "pgelect", "terminated");
	dlock_client *a = dlock_testpg_open_with("ttl=1500ms"), *b = dlock_testpg_open_with("ttl=1500ms");
	dlock_client *o = dlock_testpg_open_with("ttl=1500ms");
	dlock_election *ea = election(a, name), *eb = election(b, name), *eo = election(o, name);
	PGconn *mon = dlock_testpg_monitor();
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	dlock_test_lost lost = { 0 };
	uint64_t t1 = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(ea, "a", 0, 0, -1, &lost, &t1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_after(&s, "a", t1 - 1, NOTIFY_MS));
	dlock_test_candidate cb;
	dlock_test_candidate_start(&cb, eb, "b", 20000);
	holder_session(o, name, session, sizeof session);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT pg_terminate_backend($1::int)::int", session), 1);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, 1500));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_SESSION);
	CU_ASSERT_EQUAL(dlock_test_candidate_join(&cb, 20000), DLOCK_OK);
	CU_ASSERT(cb.term > t1);
	CU_ASSERT(dlock_test_observed_after(&s, "b", t1, 1500));
	printf(" (told after %lld ms)", (long long)(dlock_test_now_ms() - t0));
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "a-again"), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&s), 0);
	PQfinish(mon);
	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_election_free(eb);
	dlock_client_close(o);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* The row of a leader whose session ended stays, and is not the next holder's value or term. */
static void test_stale_row(void)
{
	char name[128], session[32], v[DLOCK_VALUE_MAX + 1];
	dlock_testpg_name(name, sizeof name, "pgelect", "stale");
	dlock_client *a = dlock_testpg_open_with(""), *b = dlock_testpg_open_with("");
	dlock_election *ea = election(a, name), *eb = election(b, name);
	PGconn *mon = dlock_testpg_monitor();
	uint64_t t1 = 0, t = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(ea, "old", 0, 0, -1, NULL, &t1), DLOCK_OK);
	holder_session(b, name, session, sizeof session);
	CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT pg_terminate_backend($1::int, 5000)::int", session), 1);
	/* The row is still there, with the ended session. */
	CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT count(*) FROM dlock_leaders WHERE pid = $1::int", session), 1);
	/* Another client takes the mutex without proclaiming: it holds, with no term or value known. */
	dlock_lock *l = dlock_test_new_lock(b, name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 5000, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(leader(eb, &t, v, sizeof v), 1);
	CU_ASSERT_EQUAL(t, 0);
	CU_ASSERT_STRING_EQUAL(v, "");
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	/* A resignation takes its row along. */
	uint64_t t2 = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(eb, "new", 0, 0, -1, NULL, &t2), DLOCK_OK);
	CU_ASSERT(t2 > t1);
	holder_session(a, name, session, sizeof session);
	CU_ASSERT_EQUAL(dlock_resign(eb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT count(*) FROM dlock_leaders WHERE pid = $1::int", session), 0);
	/* The same session taking the name again shows nothing of its earlier term before it proclaims. */
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 5000, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(leader(ea, &t, v, sizeof v), 1);
	CU_ASSERT_EQUAL(t, 0);
	CU_ASSERT_STRING_EQUAL(v, "");
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	PQfinish(mon);
	dlock_election_free(ea);
	dlock_election_free(eb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* The observer's LISTEN session ended: a proclaim sent meanwhile is seen once it is back, not a lease later. */
static void test_observer_reconnects(void)
{
	char name[128], ident[64], app[128];
	dlock_testpg_name(name, sizeof name, "pgelect", "reconnect");
	dlock_testpg_name(ident, sizeof ident, "obs", "reconnect");
	snprintf(app, sizeof app, "identity=%s&" LONG_TTL, ident);
	dlock_client *a = dlock_testpg_open_with(LONG_TTL), *o = dlock_testpg_open_with(app);
	dlock_election *ea = election(a, name), *eo = election(o, name);
	PGconn *mon = dlock_testpg_monitor();
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	uint64_t t1 = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_test_campaign(ea, "a-1", 0, 0, -1, NULL, &t1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_after(&s, "a-1", t1 - 1, NOTIFY_MS));
	/* Every session of the observer's client (its identity is in application_name). */
	snprintf(app, sizeof app, "%%:%s", ident);
	CU_ASSERT(dlock_testpg_num(mon, "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
	                       "WHERE application_name LIKE $1",
	                  app) >= 1);
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "a-2"), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_after(&s, "a-2", t1 - 1, 3 * NOTIFY_MS));
	/* And notifications work again. */
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "a-3"), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_after(&s, "a-3", t1 - 1, NOTIFY_MS));
	PQfinish(mon);
	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_client_close(o);
	dlock_client_close(a);
}

/* ------------------------------------------------------------ churn */

#define CHURN_N 4
#define CHURN_MS 1500

struct churn {
	pthread_mutex_t mu;
	uint64_t terms[256]; /* every term won, in the order leaders began */
	size_t nterms;
	int bad_order, leading, overlap;
	const char *name;
	int64_t until_ms;
};

static void *churn_main(void *arg)
{
	struct churn *ch = arg;
	dlock_client *c = dlock_testpg_open_with("ttl=2s");
	dlock_election *e = election(c, ch->name);
	while (dlock_test_now_ms() < ch->until_ms) {
		uint64_t term = 0;
		if (dlock_test_campaign(e, "c", 500, 0, -1, NULL, &term) != DLOCK_OK)
			continue;
		pthread_mutex_lock(&ch->mu);
		ch->overlap += ch->leading++ != 0;
		if (ch->nterms && term <= ch->terms[ch->nterms - 1])
			ch->bad_order++;
		if (ch->nterms < 256)
			ch->terms[ch->nterms++] = term;
		pthread_mutex_unlock(&ch->mu);
		dlock_test_sleep_ms(5);
		pthread_mutex_lock(&ch->mu);
		ch->leading--;
		pthread_mutex_unlock(&ch->mu);
		CU_ASSERT_EQUAL(dlock_resign(e), DLOCK_OK);
	}
	dlock_election_free(e);
	dlock_client_close(c);
	return NULL;
}

/* Candidates of several clients take turns: terms strictly increase, one leader at a time, and the observer
 * (one-minute lease) never goes back and ends on nobody leading. */
static void test_churn(void)
{
	char name[128];
	dlock_testpg_name(name, sizeof name, "pgelect", "churn");
	struct churn ch = { .name = name, .until_ms = dlock_test_now_ms() + CHURN_MS };
	pthread_mutex_init(&ch.mu, NULL);
	dlock_client *o = dlock_testpg_open_with(LONG_TTL);
	dlock_election *eo = election(o, name);
	dlock_test_observer s;
	dlock_test_observer_init(&s);
	CU_ASSERT_EQUAL(dlock_observe(eo, dlock_test_on_leader, &s), DLOCK_OK);
	pthread_t t[CHURN_N];
	for (int i = 0; i < CHURN_N; i++)
		CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, churn_main, &ch), 0);
	for (int i = 0; i < CHURN_N; i++)
		pthread_join(t[i], NULL);
	printf(" (%zu terms, observer called %zu times)", ch.nterms, dlock_test_observer_calls(&s));
	CU_ASSERT(ch.nterms >= CHURN_N);
	CU_ASSERT_EQUAL(ch.bad_order, 0);
	CU_ASSERT_EQUAL(ch.overlap, 0);
	CU_ASSERT(dlock_test_observed_nobody(&s, NOTIFY_MS));
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&s), 0);
	dlock_election_free(eo);
	dlock_client_close(o);
}

/* Row mode (direct and behind PgBouncer): no elections, said why. */
static void row_refuses(const char *uri)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	dlock_election *e = NULL;
	dlock_status st = dlock_election_new(c, "x", &e);
	if (st == DLOCK_OK) { /* a core that offers elections to every client of the driver: the campaign says no */
		uint64_t t;
		CU_ASSERT_EQUAL(dlock_test_campaign(e, "v", 0, 0, -1, NULL, &t), DLOCK_ENOTSUP);
		CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "mode=row"));
		dlock_election_free(e);
	} else {
		CU_ASSERT_EQUAL(st, DLOCK_ENOTSUP);
	}
	int64_t f = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_ELECTION, &f), DLOCK_OK);
	CU_ASSERT_EQUAL(f, -1);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "x"), DLOCK_OK); /* nothing left held */
	dlock_client_close(c);
}

/* Advisory mode notifies observers (LISTEN/NOTIFY); row mode, direct and behind PgBouncer, has no elections. */
static void test_modes(void)
{
	dlock_client *c = dlock_testpg_open_with("");
	int64_t f = -2;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_ELECTION, &f), DLOCK_OK);
	CU_ASSERT_EQUAL(f, DLOCK_WAKEUP_NOTIFY);
	dlock_client_close(c);
	dlock_testpg_each_row_uri(row_refuses);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("pg_elect", NULL, NULL);
	CU_add_test(s, "terminated_leader", test_terminated_leader);
	CU_add_test(s, "stale_row", test_stale_row);
	CU_add_test(s, "observer_reconnects", test_observer_reconnects);
	CU_add_test(s, "churn", test_churn);
	CU_add_test(s, "modes", test_modes);
}

int main(void)
{
	return dlock_testpg_main(add_suites);
}
