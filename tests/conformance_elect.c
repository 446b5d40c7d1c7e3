/*
 * Conformance: leader election (dlock_election_new(), dlock_campaign(),
 * dlock_proclaim(), dlock_resign(), dlock_election_leader(), dlock_observe()).
 * The leader and its value as another client reads them; bad input, and
 * names, identities and values of hostile bytes that stay data; a second
 * candidate that waits, times out, is cancelled and takes over with a
 * larger term; an observer that hears who leads at once and then each
 * change, never an older term, and stops when told; notification within a
 * moment where the backend says NOTIFY (campaigns, proclaims, turns,
 * handoffs, resignations); a leader broken from outside is told why, and
 * an observer hears nobody, or its successor with a larger term; a leader
 * that stops renewing is told when its lease runs out; and churn:
 * candidates of two processes taking turns, some pausing past their
 * lease, every leadership recorded and checked afterwards.
 *
 * A backend without elections (DLOCK_FEATURE_ELECTION -1) says SKIPPED and
 * checks that dlock_election_new() answers DLOCK_ENOTSUP with a message.
 * Candidates, threads and child processes record what they saw; only the
 * test's thread asserts.
 */
#include "conformance.h"
#include "testelect.h"
#include "testobserve.h"
#ifdef DLOCK_CONFORMANCE_LOOP
#include "dlock/loop.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Lease of the leader that is broken: it learns of the break within a renewal period (a third). */
#define ELECT_BREAK_LEASE_MS 3000
/* An observer's ttl where it must converge by reading (twice per lease), not by notification. */
#define ELECT_OBSERVER_TTL "ttl=1s"
#define ELECT_OBSERVER_TTL_MS 1000
/* An observer's ttl so long that only a notification brings a change within CONF_SLACK_MS. */
#define ELECT_NOTIFY_TTL "ttl=30s"
/* Churn: candidates, their processes, how long they take turns, and their leases. */
#define CHURN_CANDIDATES 4
#define CHURN_CHILDREN 2
#define CHURN_MS 2500
#define CHURN_LEASE_MS 400
#define CHURN_MAX_TERMS 1024
/* Each candidate's every third leadership pauses (no renewal) this long: past its lease. */
#define CHURN_PAUSE_MS (2 * CHURN_LEASE_MS + 100)
/* A URI plus a parameter. */
#define ELECT_URI_MAX 4400

/* ------------------------------------------------------- helpers */

static int64_t election_feature(dlock_client *client)
{
	int64_t v = -1;
	if (client)
		CONF_ASSERT_ST(dlock_client_feature(client, DLOCK_FEATURE_ELECTION, &v), DLOCK_OK);
	return v;
}

/* 1 (and a SKIPPED line) when the backend has no elections; checks that dlock_election_new() says so. */
static int elect_unsupported(dlock_client *client)
{
	if (!client)
		return 1;
	int64_t v = election_feature(client);
	if (v != -1) {
		CU_ASSERT(v == DLOCK_WAKEUP_NOTIFY || v == DLOCK_WAKEUP_POLL);
		return 0;
	}
	dlock_election *e = (dlock_election *)&e;
	CONF_ASSERT_ST(dlock_election_new(client, "elect-unsupported", &e), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(e);
	const char *msg = dlock_client_errmsg(client);
	CU_ASSERT(msg && *msg);
	CONF_ASSERT_ST(dlock_test_probe(client, "elect-unsupported"), DLOCK_OK); /* nothing left behind */
	dlock_test_skip_part("no leader election on this backend (DLOCK_FEATURE_ELECTION is -1: DLOCK_ENOTSUP)");
	return 1;
}

/* A client of the backend under test with `param` (already encoded) appended to its URI's query. */
static dlock_client *open_with(const char *param)
{
	char uri[ELECT_URI_MAX];
	const char *base = conf_uri();
	snprintf(uri, sizeof uri, "%s%c%s", base, strchr(base, '?') ? '&' : '?', param);
	dlock_client *client = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(client);
	return client;
}

static dlock_election *election(dlock_client *client, const char *name)
{
	dlock_election *e = NULL;
	if (client)
		CONF_ASSERT_ST(dlock_election_new(client, name, &e), DLOCK_OK);
	return e;
}

/* Who leads, read once from `e`'s client; asserts that the read worked. */
static dlock_leader *leader_of(dlock_election *e)
{
	dlock_leader *l = NULL;
	if (e && CONF_ASSERT_ST(dlock_election_leader(e, &l), DLOCK_OK))
		CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	return l;
}

static void assert_no_leader(dlock_election *e)
{
	dlock_leader *l = leader_of(e);
	if (l) {
		CU_ASSERT_EQUAL(l->elected, 0);
		CU_ASSERT_EQUAL(l->term, 0);
		CU_ASSERT(l->value && strcmp(l->value, "") == 0);
		CU_ASSERT_PTR_NULL(l->holder);
	}
	dlock_leader_free(l);
}

static void assert_leader(dlock_election *e, uint64_t term, const char *value, const char *identity)
{
	dlock_leader *l = leader_of(e);
	if (!l)
		return;
	CU_ASSERT_EQUAL(l->elected, 1);
	CU_ASSERT_EQUAL(l->term, term);
	CU_ASSERT(l->value && strcmp(l->value, value) == 0);
	if (l->value && strcmp(l->value, value) != 0)
		printf("\n    leader's value: %zu bytes, expected %zu", strlen(l->value), strlen(value));
	CU_ASSERT_PTR_NOT_NULL(l->holder);
	if (l->holder && identity && l->holder->identity[0])
		CU_ASSERT_STRING_EQUAL(l->holder->identity, identity);
	if (l->holder)
		CU_ASSERT_EQUAL(l->holder->token, term);
	dlock_leader_free(l);
}

/* ------------------------------------------------------- observer record */

/* What an observer callback saw (seen), and what it did besides, guarded by mu. */
typedef struct obs_rec {
	dlock_test_observer seen;
	pthread_mutex_t mu;
	int get_calls, get_failed; /* dlock_election_leader() from the callback */
	int call_get;              /* make that call */
	int free_self;             /* call dlock_election_free() of its own election, once */
	int free_done;
} obs_rec;

static obs_rec *obs_new(void)
{
	obs_rec *r = calloc(1, sizeof *r);
	if (!r)
		abort();
	dlock_test_observer_init(&r->seen);
	pthread_mutex_init(&r->mu, NULL);
	return r;
}

static void obs_free(obs_rec *r)
{
	if (!r)
		return;
	dlock_test_observer_destroy(&r->seen);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

static void leader_read(obs_rec *r, dlock_status st)
{
	pthread_mutex_lock(&r->mu);
	r->get_calls++;
	r->get_failed += st != DLOCK_OK;
	pthread_mutex_unlock(&r->mu);
}

#ifdef DLOCK_CONFORMANCE_LOOP
/* Loop mode: the observer runs on the loop thread, where the blocking read answers DLOCK_EDEADLK: it reads with
 * the asynchronous form, whose answer comes here. */
static void on_leader_read(dlock_election *e, dlock_status st, dlock_leader *leader, void *userdata)
{
	(void)e;
	dlock_leader_free(leader);
	leader_read(userdata, st);
}
#endif

static void on_leader(dlock_election *e, const dlock_leader *leader, void *userdata)
{
	obs_rec *r = userdata;
	dlock_test_on_leader(e, leader, &r->seen);
	pthread_mutex_lock(&r->mu);
	int get = r->call_get;
	int free_self = r->free_self && !r->free_done;
	r->free_done |= free_self;
	pthread_mutex_unlock(&r->mu);
	if (get) {
#ifdef DLOCK_CONFORMANCE_LOOP
		dlock_status st = dlock_election_leader_async(e, on_leader_read, r);
		if (st != DLOCK_OK)
			leader_read(r, st);
#else
		dlock_leader *now = NULL;
		dlock_status st = dlock_election_leader(e, &now);
		dlock_leader_free(now);
		leader_read(r, st);
#endif
	}
	/* Refused: its own election, from its callback.  In loop mode freed, once the callback has returned
	 * (dlock/loop.h), and the observer stops there all the same. */
	if (free_self)
		dlock_election_free(e);
}

/*
 * Await the observer's reaching a state within `ms`: elected with `term`
 * (0: any) and `value`, or nobody (elected 0); asserts it, says how long
 * it took.
 */
static int obs_await(obs_rec *r, int elected, uint64_t term, const char *value, int64_t ms, const char *what)
{
	int64_t t0 = dlock_test_now_ms();
	int ok = elected ? dlock_test_observed(&r->seen, value, term, ms) : dlock_test_observed_nobody(&r->seen, ms);
	if (!ok)
		printf("\n    observer did not see %s within %lld ms", what, (long long)ms);
	else
		printf("\n    observer saw %s after %lld ms", what, (long long)(dlock_test_now_ms() - t0));
	CU_ASSERT(ok);
	return ok;
}

/* ------------------------------------------------------- basics */

/* Two candidates of one fresh name: A on a client whose URI adds `a_param`, B on a client of the URI as is. */
typedef struct elect_pair {
	dlock_client *a, *b;
	dlock_election *ea, *eb;
	char name[160];
} elect_pair;

/* 1 when both elections are made; 0 (a failure, or SKIPPED) otherwise.  Close with pair_close() either way. */
static int pair_open(elect_pair *p, const char *a_param, const char *tag)
{
	memset(p, 0, sizeof *p);
	p->a = open_with(a_param);
	p->b = conf_open();
	conf_name(p->name, sizeof p->name, tag);
	if (!p->a || elect_unsupported(p->b))
		return 0;
	p->ea = election(p->a, p->name);
	p->eb = election(p->b, p->name);
	return p->ea && p->eb;
}

static void pair_close(elect_pair *p)
{
	dlock_election_free(p->ea);
	dlock_election_free(p->eb);
	conf_close(p->b);
	conf_close(p->a);
}

/* Quotes, %, braces, backslash, every control byte but NUL, and 0xff: what a query or a record must escape. */
static void hostile_value(char *out, size_t outlen)
{
	size_t n = 0;
	const char *head = "\"a\" 'b' %41%% {x} \\n\\";
	for (const char *p = head; *p && n + 1 < outlen; p++)
		out[n++] = *p;
	for (int b = 1; b < 0x20 && n + 1 < outlen; b++)
		out[n++] = (char)b;
	if (n + 3 < outlen) {
		out[n++] = (char)0xff;
		out[n++] = (char)0xc3;
		out[n++] = (char)0xa9;
	}
	out[n] = '\0';
}

/*
 * Campaign with a value: the term is the lock's fencing token; another
 * client reads the leader (term, value, identity); proclaim changes the
 * value; campaigning again on the leading handle proclaims anew in the
 * same term; resign leaves nobody; not leading, proclaim and resign are
 * DLOCK_ENOTHELD; a value too long and NULL arguments are refused; a value
 * of hostile bytes and one of DLOCK_VALUE_MAX bytes come back exactly.
 */
static void test_elect_basics(void)
{
	elect_pair p;
	if (!pair_open(&p, "identity=elect-leader", "elect-basics"))
		goto out;
	dlock_client *a = p.a, *b = p.b;
	dlock_election *ea = p.ea, *eb = p.eb;
	const char *name = p.name;
	CU_ASSERT_PTR_NOT_NULL(dlock_election_lock(ea));
	CU_ASSERT_STRING_EQUAL(dlock_lock_name(dlock_election_lock(ea)), name);
	assert_no_leader(eb);

	uint64_t term = 0, token = 0;
	if (!CONF_ASSERT_ST(dlock_test_campaign(ea, "host-a:8080", 0, 0, -1, NULL, &term), DLOCK_OK))
		goto out;
	CU_ASSERT(term > 0);
	CONF_ASSERT_ST(dlock_lock_fencing_token(dlock_election_lock(ea), &token), DLOCK_OK);
	CU_ASSERT_EQUAL(term, token);
	assert_leader(eb, term, "host-a:8080", "elect-leader");
	assert_leader(ea, term, "host-a:8080", "elect-leader"); /* the leader reads itself the same way */

	CONF_ASSERT_ST(dlock_proclaim(ea, "host-a:9090"), DLOCK_OK);
	assert_leader(eb, term, "host-a:9090", "elect-leader");
	/* The leader's lock is a lock like any other: it extends and checks, and keeps its term. */
	CONF_ASSERT_ST2(dlock_extend(dlock_election_lock(ea), 10000), DLOCK_OK, DLOCK_ENOTSUP);
	CONF_ASSERT_ST2(dlock_check(dlock_election_lock(ea)), DLOCK_OK, DLOCK_ENOTSUP);
	assert_leader(eb, term, "host-a:9090", "elect-leader");
	CONF_ASSERT_ST(dlock_proclaim(ea, NULL), DLOCK_OK); /* NULL is "" */
	assert_leader(eb, term, "", "elect-leader");

	/* Bad input, while leading: nothing changes. */
	char too_long[DLOCK_VALUE_MAX + 2];
	memset(too_long, 'v', sizeof too_long - 1);
	too_long[sizeof too_long - 1] = '\0';
	CONF_ASSERT_ST(dlock_proclaim(ea, too_long), DLOCK_EINVAL);
	CU_ASSERT(*dlock_client_errmsg(a));
	CONF_ASSERT_ST(dlock_proclaim(NULL, "x"), DLOCK_EINVAL);
	assert_leader(eb, term, "", "elect-leader");

	/* Exactly DLOCK_VALUE_MAX bytes, then hostile bytes, come back as they are. */
	char max_value[DLOCK_VALUE_MAX + 1], hostile[128];
	memset(max_value, 'm', DLOCK_VALUE_MAX);
	max_value[DLOCK_VALUE_MAX] = '\0';
	CONF_ASSERT_ST(dlock_proclaim(ea, max_value), DLOCK_OK);
	assert_leader(eb, term, max_value, "elect-leader");
	hostile_value(hostile, sizeof hostile);
	CONF_ASSERT_ST(dlock_proclaim(ea, hostile), DLOCK_OK);
	assert_leader(eb, term, hostile, "elect-leader");

	/* Campaigning again while leading (the same handle and thread): a new value, the same term. */
	uint64_t again = 0;
	CONF_ASSERT_ST(dlock_test_campaign(ea, "host-a:7070", 0, 0, -1, NULL, &again), DLOCK_OK);
	CU_ASSERT_EQUAL(again, term);
	assert_leader(eb, term, "host-a:7070", "elect-leader");

	/* Resign once, whatever the depth: nobody leads. */
	CONF_ASSERT_ST(dlock_resign(ea), DLOCK_OK);
	assert_no_leader(eb);
	CONF_ASSERT_ST(dlock_proclaim(ea, "late"), DLOCK_ENOTHELD);
	CU_ASSERT(*dlock_client_errmsg(a));
	CONF_ASSERT_ST(dlock_resign(ea), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_proclaim(eb, "never"), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_resign(eb), DLOCK_ENOTHELD);
	assert_no_leader(eb);

	/* A value too long is refused before campaigning: nobody leads. */
	CONF_ASSERT_ST(dlock_test_campaign(eb, too_long, 0, 0, -1, NULL, &term), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(term, 0);
	assert_no_leader(ea);
	/* A term is a fencing token: a campaign without one is refused. */
	dlock_acquire_options unfenced = DLOCK_ACQUIRE_OPTIONS_INIT;
	unfenced.wait_ms = 0;
	unfenced.fence = DLOCK_OFF;
	CONF_ASSERT_ST(dlock_campaign(eb, "x", &unfenced, NULL), DLOCK_EINVAL);
	assert_no_leader(ea);

	/* NULL arguments. */
	dlock_election *none = (dlock_election *)&none;
	CONF_ASSERT_ST(dlock_election_new(NULL, name, &none), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(none);
	CONF_ASSERT_ST(dlock_election_new(b, name, NULL), DLOCK_EINVAL);
	none = (dlock_election *)&none;
	CONF_ASSERT_ST(dlock_election_new(b, NULL, &none), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(none);
	CONF_ASSERT_ST(dlock_campaign(NULL, "x", NULL, &term), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_resign(NULL), DLOCK_EINVAL);
	dlock_leader *l = (dlock_leader *)&l;
	CONF_ASSERT_ST(dlock_leader_get(NULL, &l), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_election_leader(NULL, &l), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(l);
	CONF_ASSERT_ST(dlock_leader_get(eb, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_observe(NULL, on_leader, NULL), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(dlock_election_lock(NULL));
	dlock_leader_free(NULL);
	dlock_election_free(NULL);

	/* Campaign with no value and no term pointer: leads with "". */
	if (CONF_ASSERT_ST(dlock_campaign(eb, NULL, NULL, NULL), DLOCK_OK)) {
		CONF_ASSERT_ST(dlock_lock_fencing_token(dlock_election_lock(eb), &token), DLOCK_OK);
		assert_leader(ea, token, "", NULL);
		CU_ASSERT(token > again);
	}
	/* Freeing a leading election resigns. */
	dlock_election_free(eb);
	p.eb = NULL;
	assert_no_leader(ea);
out:
	pair_close(&p);
}

/* ------------------------------------------------------- hostile values */

/* Values a backend's own syntax could misread: its record's separators and fields, SQL, Lua, escapes, newlines. */
static const char *const tricky_values[] = {
	"", " ", "&", "%", "a b&value=c%00%ZZ", "k=v&id=x", "line1\nid=evil&host=x&pid=1\n",
	"'); DROP TABLE dlock_leaders; -- \xc3\xa9\\x00", "x' .. redis.call('FLUSHALL') .. '", "\xc3\xa9t\xc3\xa9\n",
};

/* Inspection of the leader's name, where the backend has it: its one holder, with `value`, this process and `identity`. */
static void assert_inspected(dlock_client *viewer, const char *name, const char *value, const char *identity)
{
	int64_t flags = 0;
	CONF_ASSERT_ST(dlock_client_feature(viewer, DLOCK_FEATURE_INSPECT, &flags), DLOCK_OK);
	if (!(flags & DLOCK_INSPECT_HELD))
		return;
	dlock_lock_info *info = dlock_test_inspect(viewer, name);
	CU_ASSERT_EQUAL_FATAL(info->nholders, 1);
	const dlock_holder *h = info->holders[0];
	CU_ASSERT(h->value && strcmp(h->value, value) == 0);
	if (flags & DLOCK_INSPECT_OWNER) {
		CU_ASSERT_STRING_EQUAL(h->identity, identity);
		CU_ASSERT_EQUAL(h->pid, (int64_t)getpid());
	}
	dlock_lock_info_free(info);
}

/*
 * Untrusted bytes stay data: an election whose name carries SQL and Lua, a
 * leader whose identity holds '&', '=' and a space, and values of every
 * byte but NUL (DLOCK_VALUE_MAX of them) and of the backend's own record
 * syntax, each read back exactly by another client, in the same term, the
 * identity untouched; inspection shows the holder with that value.
 */
static void test_elect_hostile_values(void)
{
	elect_pair p;
	if (!pair_open(&p, "identity=a%20b%26value%3Dc",
	               "elect-hostile'); DROP TABLE dlock_leaders; -- x' .. redis.call('FLUSHALL') .. '"))
		goto out;
	dlock_client *b = p.b;
	dlock_election *ea = p.ea, *eb = p.eb;
	const char *name = p.name;
	char every[DLOCK_VALUE_MAX + 1];
	for (size_t i = 0; i < DLOCK_VALUE_MAX; i++)
		every[i] = (char)(1 + i % 255);
	every[DLOCK_VALUE_MAX] = '\0';
	uint64_t term = 0;
	if (!CONF_ASSERT_ST(dlock_test_campaign(ea, every, 0, 0, -1, NULL, &term), DLOCK_OK))
		goto out;
	assert_leader(eb, term, every, "a b&value=c");
	assert_inspected(b, name, every, "a b&value=c");
	for (size_t i = 0; i < sizeof tricky_values / sizeof tricky_values[0]; i++) {
		CONF_ASSERT_ST(dlock_proclaim(ea, tricky_values[i]), DLOCK_OK);
		assert_leader(eb, term, tricky_values[i], "a b&value=c");
	}
	assert_inspected(b, name, tricky_values[sizeof tricky_values / sizeof tricky_values[0] - 1], "a b&value=c");
	CONF_ASSERT_ST(dlock_resign(ea), DLOCK_OK);
	assert_no_leader(eb);
out:
	pair_close(&p);
}

/* ------------------------------------------------------- a second candidate */

/*
 * While A leads, B's bounded campaign times out and a cancelled one
 * returns DLOCK_ECANCELED, both leaving A alone; a waiting B takes over
 * when A resigns, with a larger term and its own value; A then waits.
 */
static void test_elect_second_candidate(void)
{
	dlock_client *a = conf_open(), *b = open_with("identity=elect-second");
	dlock_election *ea = NULL, *eb = NULL;
	char name[128];
	conf_name(name, sizeof name, "elect-second");
	if (!b || elect_unsupported(a))
		goto out;
	ea = election(a, name);
	eb = election(b, name);
	uint64_t term_a = 0, term_b = 0;
	if (!ea || !eb || !CONF_ASSERT_ST(dlock_test_campaign(ea, "a", 0, 0, -1, NULL, &term_a), DLOCK_OK))
		goto out;

	CONF_ASSERT_ST(dlock_test_campaign(eb, "b", 0, 0, -1, NULL, &term_b), DLOCK_EBUSY);
	int64_t t0 = dlock_test_now_ms();
	CONF_ASSERT_ST(dlock_test_campaign(eb, "b", 200, 0, -1, NULL, &term_b), DLOCK_ETIMEDOUT);
	CU_ASSERT(dlock_test_now_ms() - t0 >= 190);
	CU_ASSERT_EQUAL(term_b, 0);
	CONF_ASSERT_ST(dlock_proclaim(eb, "b"), DLOCK_ENOTHELD);
	assert_leader(eb, term_a, "a", NULL);

	dlock_test_candidate c;
	uint64_t base = conf_stats(b).server_acquires;
	dlock_test_candidate_start(&c, eb, "b", CONF_LONG_WAIT_MS);
	dlock_test_candidate_await_blocked(&c, b, base, CONF_AWAIT_MS);
	CU_ASSERT(dlock_test_await(dlock_test_candidate_cancel, &c, CONF_AWAIT_MS));
	CONF_ASSERT_ST(dlock_test_candidate_join(&c, CONF_AWAIT_MS), DLOCK_ECANCELED);
	CU_ASSERT_EQUAL(c.term, 0);
	assert_leader(eb, term_a, "a", NULL);
	CONF_ASSERT_ST(dlock_check(dlock_election_lock(ea)), DLOCK_OK);

	base = conf_stats(b).server_acquires;
	dlock_test_candidate_start(&c, eb, "b", CONF_LONG_WAIT_MS);
	dlock_test_candidate_await_blocked(&c, b, base, CONF_AWAIT_MS);
	CONF_ASSERT_ST(dlock_resign(ea), DLOCK_OK);
	if (CONF_ASSERT_ST(dlock_test_candidate_join(&c, CONF_LONG_WAIT_MS), DLOCK_OK)) {
		CU_ASSERT(c.term > term_a);
		assert_leader(ea, c.term, "b", "elect-second");
		CONF_ASSERT_ST(dlock_test_campaign(ea, "a", 0, 0, -1, NULL, &term_a), DLOCK_EBUSY);
		CONF_ASSERT_ST(dlock_resign(eb), DLOCK_OK);
	}
	assert_no_leader(ea);
out:
	dlock_election_free(ea);
	dlock_election_free(eb);
	conf_close(b);
	conf_close(a);
}

/*
 * Curator's TestLeaderLatch.testBasicAlt: candidates of one client, each
 * started from a thread of its own that ends once it leads (the first one
 * ends before the others start, so the next thread may get its id); the
 * test's thread sees exactly one leader at a time, resigns it, and the
 * next candidate leads, until every one has led once.  Leadership belongs
 * to the election handle, not to a thread id that the system hands out
 * again.
 */
#define ALT_CANDIDATES 10

static int alt_any_done(void *arg)
{
	dlock_test_candidate *c = arg;
	for (int i = 0; i < ALT_CANDIDATES; i++)
		if (c[i].e && dlock_test_candidate_done(&c[i]))
			return 1;
	return 0;
}

static void test_elect_started_in_threads(void)
{
	dlock_client *client = conf_open();
	dlock_election *e[ALT_CANDIDATES] = { NULL };
	dlock_test_candidate c[ALT_CANDIDATES];
	int joined[ALT_CANDIDATES] = { 0 };
	memset(c, 0, sizeof c);
	char name[128];
	conf_name(name, sizeof name, "elect-alt");
	if (elect_unsupported(client))
		goto out;
	for (int i = 0; i < ALT_CANDIDATES; i++)
		if (!(e[i] = election(client, name)))
			goto out;
	dlock_test_candidate_start(&c[0], e[0], "alt", CONF_LONG_WAIT_MS);
	pthread_join(c[0].thread, NULL);
	joined[0] = 1;
	for (int i = 1; i < ALT_CANDIDATES; i++)
		dlock_test_candidate_start(&c[i], e[i], "alt", CONF_LONG_WAIT_MS);

	int led = 0, left = ALT_CANDIDATES;
	while (left > 0) {
		int someone = dlock_test_await(alt_any_done, c, CONF_LONG_WAIT_MS);
		CU_ASSERT(someone);
		if (!someone)
			break;
		int leader = -1, leaders = 0;
		for (int i = 0; i < ALT_CANDIDATES; i++) {
			if (!c[i].e || !dlock_test_candidate_done(&c[i]))
				continue;
			leaders++;
			leader = i;
		}
		CU_ASSERT_EQUAL(leaders, 1);
		if (!joined[leader])
			pthread_join(c[leader].thread, NULL);
		joined[leader] = 1;
		if (!CONF_ASSERT_ST(c[leader].status, DLOCK_OK))
			break;
		CONF_ASSERT_ST(dlock_check(dlock_election_lock(e[leader])), DLOCK_OK);
		assert_leader(e[leader], c[leader].term, "alt", NULL);
		CONF_ASSERT_ST(dlock_resign(e[leader]), DLOCK_OK);
		c[leader].e = NULL;
		led++;
		left--;
	}
	CU_ASSERT_EQUAL(led, ALT_CANDIDATES);
out:
	/* After a failure: cancel the campaigns still running and end their threads. */
	for (int i = 0; i < ALT_CANDIDATES; i++) {
		if (c[i].e && !joined[i]) {
			dlock_test_await(dlock_test_candidate_cancel, &c[i], CONF_AWAIT_MS);
			pthread_join(c[i].thread, NULL);
		}
		dlock_election_free(e[i]);
	}
	conf_close(client);
}

/* ------------------------------------------------------- observers */

/*
 * An observer on a client that never campaigns hears who leads at once
 * (nobody), then each change: a leader and its value, a new value, nobody,
 * another leader with a larger term; never an older term.  Its callback
 * may read who leads.  After dlock_observe(e, NULL, NULL) it hears no more.
 * An observer that frees its own election from its callback is refused,
 * stops, and the election is freed afterwards.
 */
static void test_elect_observer(void)
{
	dlock_client *a = conf_open(), *b = conf_open(), *o = open_with(ELECT_OBSERVER_TTL);
	dlock_election *ea = NULL, *eb = NULL, *eo = NULL, *eself = NULL;
	obs_rec *r = obs_new(), *rself = obs_new();
	char name[128];
	conf_name(name, sizeof name, "elect-observe");
	/* Converging by reading alone takes half the observer's ttl; a notification, less. */
	int64_t bound = ELECT_OBSERVER_TTL_MS + CONF_SLACK_MS;
	if (!a || !b || elect_unsupported(o))
		goto out;
	ea = election(a, name);
	eb = election(b, name);
	eo = election(o, name);
	if (!ea || !eb || !eo)
		goto out;
	r->call_get = 1;
	CONF_ASSERT_ST(dlock_observe(eo, on_leader, r), DLOCK_OK);
	obs_await(r, 0, 0, "", bound, "nobody, at once");

	uint64_t term_a = 0, term_b = 0;
	if (!CONF_ASSERT_ST(dlock_test_campaign(ea, "a1", 0, 0, -1, NULL, &term_a), DLOCK_OK))
		goto out;
	obs_await(r, 1, term_a, "a1", bound, "A's first value");
	CONF_ASSERT_ST(dlock_proclaim(ea, "a2"), DLOCK_OK);
	obs_await(r, 1, term_a, "a2", bound, "A's new value");
	CONF_ASSERT_ST(dlock_resign(ea), DLOCK_OK);
	obs_await(r, 0, 0, "", bound, "nobody after A resigned");
	if (!CONF_ASSERT_ST(dlock_test_campaign(eb, "b1", 0, 0, -1, NULL, &term_b), DLOCK_OK))
		goto out;
	CU_ASSERT(term_b > term_a);
	obs_await(r, 1, term_b, "b1", bound, "B");

	/* A second observer of the same name on a campaigning client hears the leader at once. */
	eself = election(a, name);
	if (eself) {
		rself->free_self = 1;
		CONF_ASSERT_ST(dlock_observe(eself, on_leader, rself), DLOCK_OK);
		obs_await(rself, 1, term_b, "b1", bound, "B, on a second observer");
	}

	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&r->seen), 0);
	pthread_mutex_lock(&r->mu);
	CU_ASSERT(r->get_calls >= 1);
	CU_ASSERT_EQUAL(r->get_failed, 0);
	pthread_mutex_unlock(&r->mu);

	/* Stopped: no more calls, whatever changes. */
	CONF_ASSERT_ST(dlock_observe(eo, NULL, NULL), DLOCK_OK);
	size_t calls = dlock_test_observer_calls(&r->seen), self_calls = dlock_test_observer_calls(&rself->seen);
	CONF_ASSERT_ST(dlock_proclaim(eb, "b2"), DLOCK_OK);
	CONF_ASSERT_ST(dlock_resign(eb), DLOCK_OK);
	dlock_test_sleep_ms(ELECT_OBSERVER_TTL_MS); /* the absence of calls is what is tested */
	CU_ASSERT_EQUAL(dlock_test_observer_calls(&r->seen), calls);
	/* The observer that tried to free its own election stopped there (refused, nothing freed). */
	pthread_mutex_lock(&rself->mu);
	CU_ASSERT_EQUAL(rself->free_done, 1);
	pthread_mutex_unlock(&rself->mu);
	CU_ASSERT_EQUAL(dlock_test_observer_calls(&rself->seen), self_calls);
	CU_ASSERT_EQUAL(self_calls, 1);
	/* Observing again starts over: who leads now (nobody). */
	CONF_ASSERT_ST(dlock_observe(eo, on_leader, r), DLOCK_OK);
	obs_await(r, 0, 0, "", bound, "nobody, observing again");
out:
#ifdef DLOCK_CONFORMANCE_LOOP
	pthread_mutex_lock(&rself->mu);
	if (rself->free_done)
		eself = NULL; /* freed by its own callback */
	pthread_mutex_unlock(&rself->mu);
#endif
	dlock_election_free(eself); /* from the test's thread: freed now */
	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_election_free(eb);
	conf_close(o);
	conf_close(b);
	conf_close(a);
	obs_free(r);
	obs_free(rself);
}

/*
 * Where the backend notifies (DLOCK_FEATURE_ELECTION is NOTIFY), an
 * observer whose ttl is 30 s (it reads again only every 15 s) still hears
 * each change within CONF_SLACK_MS: a campaign, a proclaim, candidates of
 * three clients taking turns (each term larger than the one before), a
 * resignation that hands the name to a candidate waiting, and the last
 * resignation (nobody leads); never an older term.
 */
#define NOTIFY_CANDIDATES 3
#define NOTIFY_ROUNDS 2

static void test_elect_notification(void)
{
	dlock_client *o = open_with(ELECT_NOTIFY_TTL), *c[NOTIFY_CANDIDATES] = { NULL };
	dlock_election *eo = NULL, *e[NOTIFY_CANDIDATES] = { NULL };
	obs_rec *r = obs_new();
	char name[128], value[32];
	conf_name(name, sizeof name, "elect-notify");
	if (elect_unsupported(o))
		goto out;
	if (election_feature(o) != DLOCK_WAKEUP_NOTIFY) {
		dlock_test_skip_part("observers are not notified on this backend (DLOCK_FEATURE_ELECTION is POLL)");
		goto out;
	}
	eo = election(o, name);
	for (int i = 0; i < NOTIFY_CANDIDATES; i++)
		if (!(c[i] = conf_open()) || !(e[i] = election(c[i], name)))
			goto out;
	if (!eo)
		goto out;
	CONF_ASSERT_ST(dlock_observe(eo, on_leader, r), DLOCK_OK);
	obs_await(r, 0, 0, "", CONF_AWAIT_MS, "nobody, at once");
	uint64_t term = 0, last = 0;
	if (!CONF_ASSERT_ST(dlock_test_campaign(e[0], "n1", 0, 0, -1, NULL, &term), DLOCK_OK))
		goto out;
	obs_await(r, 1, term, "n1", CONF_SLACK_MS, "the campaign, notified");
	CONF_ASSERT_ST(dlock_proclaim(e[0], "n2"), DLOCK_OK);
	obs_await(r, 1, term, "n2", CONF_SLACK_MS, "the proclaim, notified");
	CONF_ASSERT_ST(dlock_resign(e[0]), DLOCK_OK);
	obs_await(r, 0, 0, "", CONF_SLACK_MS, "the resignation, notified");

	/* Turns: every term larger than the last, each heard. */
	for (int round = 0; round < NOTIFY_ROUNDS; round++)
		for (int i = 0; i < NOTIFY_CANDIDATES; i++) {
			snprintf(value, sizeof value, "c%d-r%d", i, round);
			if (!CONF_ASSERT_ST(dlock_test_campaign(e[i], value, CONF_LONG_WAIT_MS, 0, -1, NULL, &term), DLOCK_OK))
				goto out;
			if (term <= last)
				printf("\n    term %llu after %llu", (unsigned long long)term, (unsigned long long)last);
			CU_ASSERT(term > last);
			last = term;
			obs_await(r, 1, term, value, CONF_SLACK_MS, "a turn, notified");
			CONF_ASSERT_ST(dlock_resign(e[i]), DLOCK_OK);
		}

	/* A resignation hands the name to a candidate waiting on another client. */
	if (!CONF_ASSERT_ST(dlock_test_campaign(e[0], "before", 0, 0, -1, NULL, &term), DLOCK_OK))
		goto out;
	obs_await(r, 1, term, "before", CONF_SLACK_MS, "the leader before the handoff");
	dlock_test_candidate next;
	uint64_t base = conf_stats(c[1]).server_acquires;
	dlock_test_candidate_start(&next, e[1], "after", CONF_LONG_WAIT_MS);
	dlock_test_candidate_await_blocked(&next, c[1], base, CONF_AWAIT_MS);
	CONF_ASSERT_ST(dlock_resign(e[0]), DLOCK_OK);
	if (CONF_ASSERT_ST(dlock_test_candidate_join(&next, CONF_LONG_WAIT_MS), DLOCK_OK)) {
		CU_ASSERT(next.term > term);
		obs_await(r, 1, next.term, "after", CONF_SLACK_MS, "the handoff, notified");
		CONF_ASSERT_ST(dlock_resign(e[1]), DLOCK_OK);
		obs_await(r, 0, 0, "", CONF_SLACK_MS, "the last resignation, notified");
	}
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&r->seen), 0);
out:
	dlock_election_free(eo);
	for (int i = 0; i < NOTIFY_CANDIDATES; i++) {
		dlock_election_free(e[i]);
		conf_close(c[i]);
	}
	conf_close(o);
	obs_free(r);
}

/* ------------------------------------------------------- loss */

/*
 * A client observing with the ttl that shows how it hears of a change: a
 * notification within CONF_SLACK_MS where `probe`'s backend notifies (ttl
 * 30 s), else its read twice per lease (ttl 1 s); *bound is that time.
 */
static dlock_client *open_observer(dlock_client *probe, int64_t *bound)
{
	if (election_feature(probe) == DLOCK_WAKEUP_NOTIFY) {
		*bound = CONF_SLACK_MS;
		return open_with(ELECT_NOTIFY_TTL);
	}
	*bound = ELECT_OBSERVER_TTL_MS + CONF_SLACK_MS;
	return open_with(ELECT_OBSERVER_TTL);
}

/* Break `name` from `o`'s client; the leader recorded in `lost` is told within a renewal period, once, why. */
static void break_leader(dlock_client *o, const char *name, dlock_test_lost *lost, int64_t effect)
{
	size_t broken = 0;
	int64_t t0 = dlock_test_now_ms();
	CONF_ASSERT_ST(dlock_break(o, name, &broken), DLOCK_OK);
	CU_ASSERT(broken >= 1);
	int64_t bound = ELECT_BREAK_LEASE_MS / 3 + 2 * CONF_SLACK_MS;
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, lost, bound));
	printf("\n    the broken leader was told after %lld ms (bound %lld)", (long long)(dlock_test_now_ms() - t0),
	       (long long)bound);
	CU_ASSERT_EQUAL(atomic_load(&lost->count), 1);
	/* Deleted on the server: taken from it; its session ended: lost with the session. */
	CU_ASSERT_EQUAL(atomic_load(&lost->reason),
	                effect == DLOCK_BREAK_SESSION ? DLOCK_LOST_SESSION : DLOCK_LOST_TAKEN);
}

/*
 * A leader broken from outside (dlock_break) is told through its lost-lock
 * callback within a renewal period, with the reason the backend's break
 * gives (DLOCK_FEATURE_BREAK); its proclaim and resign are DLOCK_ENOTHELD.
 * With nobody waiting, an observer hears that nobody leads; with a
 * candidate waiting (the client broken before), the candidate takes over
 * with a larger term and the observer hears it, and the old leader's
 * proclaim and resign leave the new one alone.  The observer hears each
 * change by notification within a moment where the backend notifies, else
 * within its lease, and never goes back.
 */
static void test_elect_loss(void)
{
	dlock_client *a = conf_open(), *b = open_with("identity=elect-successor"), *o = NULL;
	dlock_election *ea = NULL, *eb = NULL, *eo = NULL;
	obs_rec *r = obs_new();
	char name[128];
	int64_t hear = 0;
	conf_name(name, sizeof name, "elect-loss");
	if (!b || elect_unsupported(a))
		goto out;
	int64_t effect = DLOCK_BREAK_NONE;
	CONF_ASSERT_ST(dlock_client_feature(a, DLOCK_FEATURE_BREAK, &effect), DLOCK_OK);
	if (effect == DLOCK_BREAK_NONE) {
		dlock_test_skip_part("no breaking on this backend (DLOCK_FEATURE_BREAK is none): loss is tested by churn");
		goto out;
	}
	o = open_observer(a, &hear);
	ea = election(a, name);
	eb = election(b, name);
	eo = o ? election(o, name) : NULL;
	if (!ea || !eb || !eo)
		goto out;
	CONF_ASSERT_ST(dlock_observe(eo, on_leader, r), DLOCK_OK);
	obs_await(r, 0, 0, "", CONF_AWAIT_MS, "nobody, at once");

	/* Nobody waiting: nobody leads. */
	dlock_test_lost lost_b = { 0 };
	uint64_t term_b = 0;
	if (!CONF_ASSERT_ST(dlock_test_campaign(eb, "first", 0, ELECT_BREAK_LEASE_MS, 1, &lost_b, &term_b), DLOCK_OK))
		goto out;
	obs_await(r, 1, term_b, "first", hear, "the first leader");
	break_leader(o, name, &lost_b, effect);
	obs_await(r, 0, 0, "", hear, "nobody after the break");
	CONF_ASSERT_ST(dlock_proclaim(eb, "first again"), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_resign(eb), DLOCK_ENOTHELD);

	/* A candidate waiting (the client broken before): it takes over. */
	dlock_test_lost lost = { 0 };
	uint64_t term_a = 0;
	if (!CONF_ASSERT_ST(dlock_test_campaign(ea, "old", 0, ELECT_BREAK_LEASE_MS, 1, &lost, &term_a), DLOCK_OK))
		goto out;
	CU_ASSERT(term_a > term_b);
	obs_await(r, 1, term_a, "old", hear, "the second leader");
	dlock_test_candidate c;
	uint64_t base = conf_stats(b).server_acquires;
	dlock_test_candidate_start(&c, eb, "new", CONF_LONG_WAIT_MS);
	dlock_test_candidate_await_blocked(&c, b, base, CONF_AWAIT_MS);
	break_leader(o, name, &lost, effect);
	if (CONF_ASSERT_ST(dlock_test_candidate_join(&c, CONF_LONG_WAIT_MS), DLOCK_OK)) {
		CU_ASSERT(c.term > term_a);
		obs_await(r, 1, c.term, "new", hear, "the next leader");
		CONF_ASSERT_ST(dlock_proclaim(ea, "old again"), DLOCK_ENOTHELD);
		CONF_ASSERT_ST(dlock_resign(ea), DLOCK_ENOTHELD);
		CONF_ASSERT_ST(dlock_check(dlock_election_lock(eb)), DLOCK_OK);
		assert_leader(ea, c.term, "new", "elect-successor");
		CONF_ASSERT_ST(dlock_resign(eb), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&r->seen), 0);
out:
	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_election_free(eb);
	conf_close(o);
	conf_close(b);
	conf_close(a);
	obs_free(r);
}

/*
 * Where renewal keeps a lease or heartbeat alive (DLOCK_FEATURE_EXTEND), a
 * leader that stops renewing is told when its lease runs out, and an
 * observer hears that nobody leads within that lease and its own (a key
 * that expires may publish nothing: the observer's read finds it); the
 * next leader's term is larger, and the old leader's proclaim is
 * DLOCK_ENOTHELD.
 */
#define ELECT_PAUSED_LEASE_MS 800

static void test_elect_lease_runs_out(void)
{
	dlock_client *a = conf_open(), *b = conf_open(), *o = open_with(ELECT_OBSERVER_TTL);
	dlock_election *ea = NULL, *eb = NULL, *eo = NULL;
	obs_rec *r = obs_new();
	char name[128];
	conf_name(name, sizeof name, "elect-lease");
	if (!a || !b || elect_unsupported(o))
		goto out;
	int64_t renews = 0;
	CONF_ASSERT_ST(dlock_client_feature(o, DLOCK_FEATURE_EXTEND, &renews), DLOCK_OK);
	if (!renews) {
		dlock_test_skip_part("nothing to renew (DLOCK_FEATURE_EXTEND is 0): a leader holds while its session lives");
		goto out;
	}
	ea = election(a, name);
	eb = election(b, name);
	eo = election(o, name);
	int64_t bound = ELECT_OBSERVER_TTL_MS + CONF_SLACK_MS;
	dlock_test_lost lost = { 0 };
	uint64_t term = 0, next = 0;
	if (!ea || !eb || !eo || !CONF_ASSERT_ST(dlock_observe(eo, on_leader, r), DLOCK_OK))
		goto out;
	int64_t t0 = dlock_test_now_ms();
	if (!CONF_ASSERT_ST(dlock_test_campaign(ea, "paused", 0, ELECT_PAUSED_LEASE_MS, 0, &lost, &term), DLOCK_OK))
		goto out;
	obs_await(r, 1, term, "paused", bound, "the leader");
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, ELECT_PAUSED_LEASE_MS + 2 * CONF_SLACK_MS));
	printf("\n    the leader was told %lld ms after its campaign (lease %d ms)", (long long)(dlock_test_now_ms() - t0),
	       ELECT_PAUSED_LEASE_MS);
	obs_await(r, 0, 0, "", ELECT_PAUSED_LEASE_MS + bound, "nobody, once the lease ran out");
	if (CONF_ASSERT_ST(dlock_test_campaign(eb, "next", CONF_LONG_WAIT_MS, 0, -1, NULL, &next), DLOCK_OK)) {
		CU_ASSERT(next > term);
		obs_await(r, 1, next, "next", bound, "the next leader");
		CONF_ASSERT_ST(dlock_proclaim(ea, "paused again"), DLOCK_ENOTHELD);
		CONF_ASSERT_ST(dlock_resign(eb), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	CU_ASSERT_EQUAL(dlock_test_observer_went_back(&r->seen), 0);
out:
	dlock_election_free(eo);
	dlock_election_free(ea);
	dlock_election_free(eb);
	conf_close(o);
	conf_close(b);
	conf_close(a);
	obs_free(r);
}

/* ------------------------------------------------------- churn */

/* One leadership, as its candidate saw it. */
typedef struct churn_term {
	uint64_t term;
	unsigned seq;      /* order in which candidates recorded their acquisitions */
	int candidate;
	int paused;        /* held without renewal past its lease */
	int told;          /* the lost callback ran, or dlock_check() said DLOCK_ENOTHELD, before `end_ms` */
	int64_t start_ms;  /* just after the campaign returned */
	int64_t end_ms;    /* just before resigning */
} churn_term;

/* Shared with the candidates' processes. */
typedef struct churn_record {
	char name[128];
	int64_t deadline_ms; /* candidates stop campaigning then */
	atomic_uint seq;
	atomic_uint n;
	atomic_int failed;   /* first unexpected status + 1 */
	atomic_int ready;
	churn_term terms[CHURN_MAX_TERMS];
} churn_record;

static void churn_fail(churn_record *rec, dlock_status st)
{
	int none = 0;
	atomic_compare_exchange_strong(&rec->failed, &none, (int)st + 1);
}

typedef struct churn_candidate {
	churn_record *rec;
	int index;
	pthread_t thread;
} churn_candidate;

/* Lead briefly and resign, or (every third time) hold without renewal past the lease; record it. */
static void *churn_candidate_run(void *arg)
{
	churn_candidate *cand = arg;
	churn_record *rec = cand->rec;
	dlock_client *client = NULL;
	dlock_election *e = NULL;
	dlock_status st = dlock_client_open(&client, conf_uri(), NULL, NULL, 0);
	if (st == DLOCK_OK)
		st = dlock_election_new(client, rec->name, &e);
	if (st != DLOCK_OK) {
		churn_fail(rec, st);
		goto out;
	}
	for (unsigned k = 0; dlock_test_now_ms() < rec->deadline_ms; k++) {
		int paused = k % 3 == 2;
		char value[64];
		snprintf(value, sizeof value, "candidate-%d/%u", cand->index, k);
		dlock_test_lost lost = { 0 };
		uint64_t term = 0;
		int64_t wait = rec->deadline_ms - dlock_test_now_ms() + CONF_SLACK_MS;
		st = dlock_test_campaign(e, value, wait > 0 ? wait : 0, CHURN_LEASE_MS, paused ? 0 : 1, &lost, &term);
		int64_t start = dlock_test_now_ms();
		unsigned seq = atomic_fetch_add(&rec->seq, 1);
		if (st == DLOCK_ETIMEDOUT)
			break;
		if (st != DLOCK_OK) {
			churn_fail(rec, st);
			break;
		}
		dlock_test_sleep_ms(paused ? CHURN_PAUSE_MS : 10 + (int64_t)(k % 4) * 10); /* the leader's work */
		int told = atomic_load(&lost.count) > 0;
		if (!told && dlock_check(dlock_election_lock(e)) == DLOCK_ENOTHELD)
			told = 1;
		int64_t end = dlock_test_now_ms();
		unsigned i = atomic_fetch_add(&rec->n, 1);
		if (i < CHURN_MAX_TERMS)
			rec->terms[i] = (churn_term){ term, seq, cand->index, paused, told, start, end };
		st = dlock_resign(e);
		if (st != DLOCK_OK && !(st == DLOCK_ENOTHELD && (told || atomic_load(&lost.count) > 0)))
			churn_fail(rec, st);
	}
out:
	dlock_election_free(e);
	if (client && dlock_client_close(client) != DLOCK_OK)
		churn_fail(rec, DLOCK_EIO);
	return NULL;
}

/* `count` candidates, each on a client of its own, from index `first`. */
static int churn_candidates(churn_record *rec, int first, int count)
{
	churn_candidate cands[CHURN_CANDIDATES];
	for (int i = 0; i < count; i++) {
		cands[i] = (churn_candidate){ rec, first + i, 0 };
		if (pthread_create(&cands[i].thread, NULL, churn_candidate_run, &cands[i]) != 0)
			abort();
	}
	for (int i = 0; i < count; i++)
		pthread_join(cands[i].thread, NULL);
	return atomic_load(&rec->failed) ? 1 : 0;
}

static int churn_go_said(void *arg)
{
	return atomic_load(&((churn_record *)arg)->ready) != 0;
}

/* A child: waits for the observer (ready 1: campaign; -1: the test gave up), then campaigns. */
static int churn_child(int index, void *arg)
{
	churn_record *rec = arg;
	if (!dlock_test_await(churn_go_said, rec, CONF_LONG_WAIT_MS) || atomic_load(&rec->ready) < 0)
		return 0;
	return churn_candidates(rec, index * (CHURN_CANDIDATES / CHURN_CHILDREN), CHURN_CANDIDATES / CHURN_CHILDREN);
}

static int by_term(const void *x, const void *y)
{
	const churn_term *a = x, *b = y;
	return a->term < b->term ? -1 : a->term > b->term;
}

/* The invariants over every leadership recorded; returns the highest term. */
static uint64_t churn_check(churn_record *rec, size_t n)
{
	churn_term *t = rec->terms;
	size_t paused = 0, told = 0, overlapped = 0;
	for (size_t i = 0; i < n; i++) {
		paused += t[i].paused;
		told += t[i].told;
		CU_ASSERT(t[i].term > 0);
		/* Terms rise in the order of acquisition, unless the earlier-recorded one had already lost its term. */
		for (size_t j = 0; j < n; j++) {
			if (t[i].seq < t[j].seq && t[i].term > t[j].term && !t[j].told) {
				printf("\n    term %llu recorded before term %llu", (unsigned long long)t[i].term,
				       (unsigned long long)t[j].term);
				CU_FAIL("terms do not rise in the order of acquisition");
			}
			/* Two leaders at once: the older term must have been told by the end of its work. */
			if (t[i].term < t[j].term && t[j].start_ms < t[i].end_ms) {
				overlapped++;
				if (!t[i].told) {
					printf("\n    term %llu (candidate %d, %s) overlapped term %llu and was not told",
					       (unsigned long long)t[i].term, t[i].candidate,
					       t[i].paused ? "paused" : "renewing", (unsigned long long)t[j].term);
					CU_FAIL("a leader that was replaced was not told");
				}
			}
		}
		/* Where a lease is a TTL, a leader that did not renew past it is told. */
		if (t[i].paused && conf_caps()->lease == DLOCK_LEASE_TTL)
			CU_ASSERT(t[i].told);
	}
	qsort(t, n, sizeof *t, by_term);
	for (size_t i = 1; i < n; i++) {
		if (t[i].term == t[i - 1].term) {
			printf("\n    term %llu led twice (candidates %d and %d)", (unsigned long long)t[i].term,
			       t[i - 1].candidate, t[i].candidate);
			CU_FAIL("two leaderships share a term");
		}
	}
	printf("\n    %zu leaderships, %zu paused past the lease, %zu told, %zu overlaps", n, paused, told,
	       overlapped);
	return n ? t[n - 1].term : 0;
}

static int churn_term_known(const churn_record *rec, size_t n, uint64_t term)
{
	for (size_t i = 0; i < n; i++)
		if (rec->terms[i].term == term)
			return 1;
	return 0;
}

/*
 * Churn: four candidates on clients of two processes (one process where
 * the backend's scope is one process) campaign in turn for CHURN_MS, each
 * leading briefly, every third leadership held without renewal past its
 * lease; an observer in this process follows.  Afterwards: no two
 * leaderships share a term, terms rise in the order of acquisition, a
 * leader replaced while it worked was told, a leader that let its TTL
 * lease run out was told; the observer never went back, saw only recorded
 * terms, and converges within a lease on nobody, then on a last leader
 * whose term is larger than every one before.
 */
static void test_elect_churn(void)
{
	dlock_client *o = NULL, *p = NULL, *probe = conf_open();
	int unsupported = elect_unsupported(probe);
	conf_close(probe);
	if (unsupported)
		return;
	dlock_election *eo = NULL, *ep = NULL;
	obs_rec *r = obs_new();
	churn_record *rec = dlock_test_shared_alloc(sizeof *rec);
	int64_t bound = ELECT_OBSERVER_TTL_MS + CONF_SLACK_MS;
	conf_name(rec->name, sizeof rec->name, "elect-churn");
	/*
	 * Candidates in two processes, forked before this one opens its
	 * clients (see conf_run_children()); they wait for the observer.
	 * Where the backend's scope is one process (mem://): in threads.
	 */
	int forked = conf_caps()->scope != DLOCK_SCOPE_PROCESS;
	pid_t pids[CHURN_CHILDREN];
	if (forked)
		conf_children_start(CHURN_CHILDREN, churn_child, rec, pids);
	o = open_with(ELECT_OBSERVER_TTL);
	p = conf_open();
	if (o && p) {
		eo = election(o, rec->name);
		ep = election(p, rec->name);
	}
	if (!eo || !ep || !CONF_ASSERT_ST(dlock_observe(eo, on_leader, r), DLOCK_OK)) {
		atomic_store(&rec->ready, -1);
		if (forked)
			conf_children_wait(CHURN_CHILDREN, pids);
		goto out;
	}
	rec->deadline_ms = dlock_test_now_ms() + CHURN_MS;
	atomic_store(&rec->ready, 1);
	if (forked)
		conf_children_wait(CHURN_CHILDREN, pids);
	else
		CU_ASSERT_EQUAL(churn_candidates(rec, 0, CHURN_CANDIDATES), 0);
	int failed = atomic_load(&rec->failed);
	if (failed)
		printf("\n    a candidate failed: %s", dlock_status_name((dlock_status)(failed - 1)));
	CU_ASSERT_EQUAL(failed, 0);
	size_t n = atomic_load(&rec->n);
	CU_ASSERT(n >= CHURN_CANDIDATES);
	CU_ASSERT_FATAL(n <= CHURN_MAX_TERMS);
	uint64_t highest = churn_check(rec, n);

	/* Every candidate is gone: the observer comes to nobody, then to the last leader. */
	obs_await(r, 0, 0, "", bound, "nobody after the churn");
	uint64_t term = 0;
	if (CONF_ASSERT_ST(dlock_test_campaign(ep, "last", CONF_LONG_WAIT_MS, 0, -1, NULL, &term), DLOCK_OK)) {
		CU_ASSERT(term > highest);
		obs_await(r, 1, term, "last", bound, "the last leader");
		CONF_ASSERT_ST(dlock_resign(ep), DLOCK_OK);
	}
	CONF_ASSERT_ST(dlock_observe(eo, NULL, NULL), DLOCK_OK);
	dlock_test_observer *heard = &r->seen;
	pthread_mutex_lock(&heard->mu);
	CU_ASSERT_EQUAL(heard->went_back, 0);
	size_t seen = heard->calls < DLOCK_TEST_OBSERVER_HISTORY ? heard->calls : DLOCK_TEST_OBSERVER_HISTORY, unknown = 0;
	for (size_t i = 0; i < seen; i++)
		if (heard->history[i].elected && heard->history[i].term != term &&
		    !churn_term_known(rec, n, heard->history[i].term))
			unknown++;
	printf("\n    the observer heard %zu changes", heard->calls);
	pthread_mutex_unlock(&heard->mu);
	CU_ASSERT_EQUAL(unknown, 0);
out:
	dlock_election_free(eo);
	dlock_election_free(ep);
	conf_close(p);
	conf_close(o);
	obs_free(r);
	dlock_test_shared_free(rec, sizeof *rec);
}

const conf_test conf_elect_tests[] = {
	{ "elect_basics", test_elect_basics },
	{ "elect_hostile_values", test_elect_hostile_values },
	{ "elect_second_candidate", test_elect_second_candidate },
	{ "elect_started_in_threads", test_elect_started_in_threads },
	{ "elect_observer", test_elect_observer },
	{ "elect_notification", test_elect_notification },
	{ "elect_loss", test_elect_loss },
	{ "elect_lease_runs_out", test_elect_lease_runs_out },
	{ "elect_churn", test_elect_churn },
	{ NULL, NULL },
};
