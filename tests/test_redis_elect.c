/*
 * Redis: what is its own about leader election.  On every Redis URI of
 * $DLOCK_TEST_URIS (one server with the queue and with fair=0, TLS,
 * Sentinel, Cluster) and $DLOCK_TEST_REDIS_UNIX_URI, observers are
 * notified (the lock's channel) and RedLock has no elections (no token, so
 * no term).  On the transports the conformance suite does not reach
 * (redis+unix), a campaign, a proclaim and a handoff heard by an observer
 * within a second.  An observer whose connection was cut reads again once
 * it is back; values of the previous release still inspect (looked at with
 * a raw connection on $DLOCK_TEST_REDIS_PORT).  The contract of elections
 * (values, notification, breaking, an expired key) is the conformance
 * suite's, which runs on every URI of $DLOCK_TEST_URIS.
 */
#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/dlock.h"
#include "faultproxy.h"
#include "testobserve.h"
#include "testredis.h"
#include "testsupport.h"

#define NOTIFY_MS 1000    /* a notification, not the observer's read (15 s away at ttl=30s) */
#define LEASE_MS 10000


/* ------------------------------------------------------------ helpers */

static int is_redlock(const char *uri)
{
	return strncmp(uri, "redis://", 8) == 0 && strchr(uri, ',') != NULL;
}

static dlock_client *open_with(const char *base, const char *prefix, const char *extra)
{
	char uri[1400];
	dlock_testredis_uri(uri, sizeof uri, base, prefix, extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

struct campaign {
	dlock_election *e;
	const char *value;
	int64_t lease_ms;
	int renew;
	dlock_test_lost lost;
	pthread_t thread;
	dlock_status st;
	uint64_t term;
};

static dlock_status campaign_now(struct campaign *cp)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 20000;
	o.lease_ms = cp->lease_ms;
	o.renewal = dlock_test_switch(cp->renew);
	o.on_lost = dlock_test_on_lost;
	o.lost_userdata = &cp->lost;
	cp->st = dlock_campaign(cp->e, cp->value, &o, &cp->term);
	return cp->st;
}

static void *campaign_main(void *arg)
{
	campaign_now(arg);
	return NULL;
}

/* ------------------------------------------------------------ tests */

/*
 * Observers are notified on every topology; RedLock has no elections (no
 * fencing token, so no term), says so, and leaves nothing behind.
 */
static void feature_on(const char *base)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *c = open_with(base, prefix, "");
	int64_t how = -2;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_ELECTION, &how), DLOCK_OK);
	CU_ASSERT_EQUAL(how, is_redlock(base) ? -1 : DLOCK_WAKEUP_NOTIFY);
	if (is_redlock(base)) {
		dlock_election *e = NULL;
		CU_ASSERT_EQUAL(dlock_election_new(c, "svc", &e), DLOCK_ENOTSUP);
		CU_ASSERT_PTR_NULL(e);
		CU_ASSERT_EQUAL(dlock_test_probe(c, "svc"), DLOCK_OK); /* nothing left behind */
	}
	dlock_client_close(c);
}

/*
 * Campaign, proclaim, handoff by resignation: terms are tokens and grow;
 * another client reads the value and term; the observer hears each change
 * within a notification.
 */
static void handoff_on(const char *base)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_client *a = open_with(base, prefix, "identity=leader-a"), *b = open_with(base, prefix, "identity=leader-b");
	dlock_client *o = open_with(base, prefix, "ttl=30s");
	dlock_election *ea = NULL, *eb = NULL, *eo = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(a, "svc", &ea), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(b, "svc", &eb), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(o, "svc", &eo), DLOCK_OK);
	dlock_test_observer h;
	dlock_test_observer_init(&h);
	CU_ASSERT_EQUAL_FATAL(dlock_observe(eo, dlock_test_on_leader, &h), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_nobody(&h, 5000));

	struct campaign ca = { .e = ea, .value = "10.0.0.1:8080", .lease_ms = LEASE_MS, .renew = 1 };
	CU_ASSERT_EQUAL_FATAL(campaign_now(&ca), DLOCK_OK);
	CU_ASSERT(ca.term > 0);
	CU_ASSERT_EQUAL(ca.term, dlock_test_token(dlock_election_lock(ea)));
	CU_ASSERT(dlock_test_observed(&h, "10.0.0.1:8080", ca.term, NOTIFY_MS));
	dlock_leader *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_leader_get(eb, &l), DLOCK_OK);
	CU_ASSERT(l->elected);
	CU_ASSERT_EQUAL(l->term, ca.term);
	CU_ASSERT_STRING_EQUAL(l->value, "10.0.0.1:8080");
	CU_ASSERT_STRING_EQUAL(l->holder->identity, "leader-a");
	dlock_leader_free(l);

	/* A new value: the same term; renewal keeps it. */
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "10.0.0.1:9090"), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&h, "10.0.0.1:9090", ca.term, NOTIFY_MS));
	CU_ASSERT_EQUAL(dlock_extend(dlock_election_lock(ea), LEASE_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(dlock_election_lock(ea)), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_proclaim(eb, "not me"), DLOCK_ENOTHELD);

	/* b waits; a resigns: b leads with a larger term, and says so. */
	struct campaign cb = { .e = eb, .value = "10.0.0.2:8080", .lease_ms = LEASE_MS, .renew = 1 };
	CU_ASSERT_EQUAL_FATAL(pthread_create(&cb.thread, NULL, campaign_main, &cb), 0);
	dlock_test_sleep_ms(100); /* b's campaign is waiting (or not yet: either way it gets the lock next) */
	CU_ASSERT_EQUAL(dlock_resign(ea), DLOCK_OK);
	pthread_join(cb.thread, NULL);
	CU_ASSERT_EQUAL_FATAL(cb.st, DLOCK_OK);
	CU_ASSERT(cb.term > ca.term);
	CU_ASSERT(dlock_test_observed(&h, "10.0.0.2:8080", cb.term, NOTIFY_MS));
	CU_ASSERT_EQUAL(dlock_proclaim(ea, "gone"), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_resign(eb), DLOCK_OK);
	CU_ASSERT(dlock_test_observed_nobody(&h, NOTIFY_MS));
	CU_ASSERT_FALSE(dlock_test_observer_went_back(&h));
	CU_ASSERT_EQUAL(atomic_load(&ca.lost.count), 0);
	CU_ASSERT_EQUAL(atomic_load(&cb.lost.count), 0);

	dlock_election_free(eo);
	dlock_election_free(eb);
	dlock_election_free(ea);
	dlock_client_close(o);
	dlock_client_close(b);
	dlock_client_close(a);
}

/*
 * Candidates a and b on `base` and an observer o on `obase` (NULL: `base`;
 * `oextra` added to its URI), all on a fresh prefix, each with an election
 * of "svc"; o observing into `seen`.
 */
struct stage {
	dlock_client *a, *b, *o;
	dlock_election *ea, *eb, *eo;
	dlock_test_observer seen;
};

static void stage_open(struct stage *st, const char *base, const char *obase, const char *oextra)
{
	char prefix[64];
	dlock_testredis_prefix(prefix, sizeof prefix);
	st->a = open_with(base, prefix, "");
	st->b = open_with(base, prefix, "");
	st->o = open_with(obase ? obase : base, prefix, oextra);
	st->ea = st->eb = st->eo = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(st->a, "svc", &st->ea), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(st->b, "svc", &st->eb), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(st->o, "svc", &st->eo), DLOCK_OK);
	dlock_test_observer_init(&st->seen);
	CU_ASSERT_EQUAL_FATAL(dlock_observe(st->eo, dlock_test_on_leader, &st->seen), DLOCK_OK);
}

static void stage_close(struct stage *st)
{
	dlock_election_free(st->eo);
	dlock_election_free(st->eb);
	dlock_election_free(st->ea);
	dlock_test_observer_destroy(&st->seen);
	dlock_client_close(st->o);
	dlock_client_close(st->b);
	dlock_client_close(st->a);
}

/*
 * An observer whose connections are cut and refused misses a proclaim;
 * once it can connect again its subscription is confirmed and it reads:
 * it hears the value long before its lease (30 s) would have.
 */
static void test_reconnect(void)
{
	int redis_port = 0;
	const char *base = dlock_testredis_single(&redis_port);
	if (!base)
		return;
	faultproxy *px = faultproxy_start("127.0.0.1", redis_port);
	CU_ASSERT_PTR_NOT_NULL_FATAL(px);
	char via[128];
	snprintf(via, sizeof via, "redis://127.0.0.1:%d", faultproxy_port(px));
	struct stage st;
	stage_open(&st, base, via, "ttl=30s");
	struct campaign ca = { .e = st.ea, .value = "before", .lease_ms = LEASE_MS, .renew = 1 };
	CU_ASSERT_EQUAL_FATAL(campaign_now(&ca), DLOCK_OK);
	CU_ASSERT(dlock_test_observed(&st.seen, "before", ca.term, NOTIFY_MS));
	CU_ASSERT_EQUAL(faultproxy_refuse(px, 1), 0);
	faultproxy_reset(px);
	CU_ASSERT_EQUAL(dlock_proclaim(st.ea, "while away"), DLOCK_OK);
	dlock_test_sleep_ms(300); /* the message is published while the observer cannot hear it */
	CU_ASSERT_EQUAL(faultproxy_refuse(px, 0), 0);
	/* reconnect backoff at most 2 s, then a read */
	CU_ASSERT(dlock_test_observed(&st.seen, "while away", ca.term, 5000));
	CU_ASSERT_EQUAL(dlock_resign(st.ea), DLOCK_OK);
	stage_close(&st);
	faultproxy_stop(px);
}

/*
 * Values of the previous release: the owner alone, or a record without a
 * value, inspect as a leader with no value (and the token it has); a
 * record whose value field does not decode shows no value.
 */
static void test_old_format(void)
{
	int redis_port = 0;
	const char *base = dlock_testredis_single(&redis_port);
	if (!base)
		return;
	static const struct {
		const char *stored;
		uint64_t term;
		const char *value;
	} cases[] = {
		{ "0123456789abcdef0123456789abcdef", 0, "" },
		{ "0123456789abcdef0123456789abcdef 77 1700000000000 id=old&host=h&pid=1", 77, "" },
		{ "0123456789abcdef0123456789abcdef 78 1700000000000 id=old&host=h&pid=1&value=a%20b", 78, "a b" },
		{ "0123456789abcdef0123456789abcdef 79 1700000000000 id=old&host=h&pid=1&value=%G0", 79, "" },
		{ "0123456789abcdef0123456789abcdef 80 1700000000000 id=old&host=h&pid=1&value=%00", 80, "" },
	};
	char prefix[64], key[256];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_key(key, sizeof key, prefix, "legacy", "lock");
	dlock_client *c = open_with(base, prefix, "");
	dlock_election *e = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(c, "legacy", &e), DLOCK_OK);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		redisReply *r = redisCommand(ctx, "SET %s %s PX %d", key, cases[i].stored, LEASE_MS);
		freeReplyObject(r);
		dlock_leader *l = NULL;
		CU_ASSERT_EQUAL_FATAL(dlock_leader_get(e, &l), DLOCK_OK);
		CU_ASSERT(l->elected);
		CU_ASSERT_EQUAL(l->term, cases[i].term);
		CU_ASSERT_STRING_EQUAL(l->value, cases[i].value);
		if (i > 0)
			CU_ASSERT_STRING_EQUAL(l->holder->identity, "old");
		dlock_leader_free(l);
	}
	/* A holder the previous release wrote (the owner alone) is not ours to proclaim over. */
	CU_ASSERT_EQUAL(dlock_campaign(e, "mine", &(dlock_acquire_options){ .version = DLOCK_ACQUIRE_OPTIONS_VERSION,
	                                                                  .wait_ms = 0 },
	                               NULL),
	                DLOCK_EBUSY);
	redisReply *r = redisCommand(ctx, "DEL %s", key);
	freeReplyObject(r);
	redisFree(ctx);
	dlock_election_free(e);
	dlock_client_close(c);
}

/* 1 when `uri` is one of $DLOCK_TEST_URIS, where the conformance suite runs every election test. */
static int in_conformance(const char *uri)
{
	const char *env = dlock_test_env("DLOCK_TEST_URIS");
	size_t n = strlen(uri);
	for (const char *p = env; p && *p;) {
		p += strspn(p, " \t\r\n");
		size_t w = strcspn(p, " \t\r\n");
		if (w == n && strncmp(p, uri, n) == 0)
			return 1;
		p += w;
	}
	return 0;
}

/* The handoff on each Redis URI the conformance suite does not run on (redis+unix). */
static void test_other_transports(void)
{
	static char uris[DLOCK_TESTREDIS_EACH_MAX][DLOCK_TESTREDIS_URI_MAX];
	size_t n = dlock_testredis_uris(uris, DLOCK_TESTREDIS_EACH_MAX), ran = 0;
	for (size_t i = 0; i < n; i++) {
		if (in_conformance(uris[i]))
			continue;
		printf("\n    %.*s:", (int)strcspn(uris[i], ":"), uris[i]); /* the scheme alone: a query may hold a password */
		handoff_on(uris[i]);
		ran++;
	}
	if (!ran)
		dlock_test_skip_part("no Redis URI outside DLOCK_TEST_URIS (the conformance suite runs those)");
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis elections", NULL, NULL);
	dlock_testredis_add_each(s, "observers notified; RedLock has none", feature_on);
	CU_add_test(s, "campaign, proclaim, handoff heard within a second, where the conformance suite does not run",
	            test_other_transports);
	CU_add_test(s, "an observer cut off reads again once reconnected", test_reconnect);
	CU_add_test(s, "the previous release's values", test_old_format);
}

int main(void)
{
	if (dlock_testredis_every_uri() == 0)
		return dlock_test_skip("no redis URI in DLOCK_TEST_URIS");
	return dlock_test_main(add_suites);
}
