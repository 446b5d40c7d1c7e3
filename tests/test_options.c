/*
 * Acquire options by version, on mem://: what a field left out means.
 *
 *   - Version 5: a designated initializer that names only some fields
 *     keeps every safeguard the URI gives (renewal, a fencing token, the
 *     hold bounds); DLOCK_OFF and DLOCK_HOLD_NONE, named, turn one off; a
 *     -1 carried over from version 4 is refused.
 *   - Version 4, as a program built against that header passes it (the
 *     frozen copy of its struct below): 0 still means off for `renew` and
 *     `fencing` and no bound for the holds, -1 the URI's.
 *   - Version 1 (before `fencing`) still works and means the URI's
 *     fencing; a version newer than this library's is refused.
 *   - dlock_campaign() reads the options the same way.
 *
 * Every test uses mem:// namespaces of its own.  Renewals are awaited
 * through the client's counters, losses through dlock_check(): no sleeps.
 */
#include <stddef.h>
#include <string.h>

#include "dlock/dlock.h"
#include "testsupport.h"

#define LEASE_MS 500   /* renewed every third of it */
#define AWAIT_MS 10000 /* awaiting a condition that must come true */

/*
 * Version 4 of dlock_acquire_options, as the header of dlock 0.3.0 declared
 * it: the bytes a program built against that header passes.  Frozen: never
 * edit.  Version 5 kept the layout, which the assertions below hold it to.
 */
struct acquire_options_v4 {
	unsigned version;
	int64_t wait_ms;
	int64_t lease_ms;
	int renew;             /* -1: the URI's `renew`; 0: off; 1: on */
	dlock_lost_fn on_lost;
	void *lost_userdata;
	int fencing;           /* -1: the URI's `fencing`; 0: off; 1: on */
	dlock_lock_mode mode;
	int64_t min_hold_ms;   /* -1: the URI's `min_hold`; 0: none */
	int64_t max_hold_ms;   /* -1: the URI's `max_hold`; 0: none */
};
#define ACQUIRE_OPTIONS_V4_INIT { 4, DLOCK_WAIT_DEFAULT, 0, -1, NULL, NULL, -1, DLOCK_MODE_EXCLUSIVE, -1, -1 }

#define SAME_PLACE(v4, v5) \
	_Static_assert(offsetof(struct acquire_options_v4, v4) == offsetof(dlock_acquire_options, v5), #v4 " moved")
SAME_PLACE(version, version);
SAME_PLACE(wait_ms, wait_ms);
SAME_PLACE(lease_ms, lease_ms);
SAME_PLACE(renew, renewal);
SAME_PLACE(on_lost, on_lost);
SAME_PLACE(lost_userdata, lost_userdata);
SAME_PLACE(fencing, fence);
SAME_PLACE(mode, mode);
SAME_PLACE(min_hold_ms, min_hold);
SAME_PLACE(max_hold_ms, max_hold);
_Static_assert(sizeof(struct acquire_options_v4) == sizeof(dlock_acquire_options), "the size changed");

/* The options a version-4 program passes, as this library sees them. */
static dlock_acquire_options from_v4(const struct acquire_options_v4 *v4)
{
	dlock_acquire_options o;
	memcpy(&o, v4, sizeof o);
	return o;
}

static dlock_status acquire_v4(dlock_lock *l, const struct acquire_options_v4 *v4)
{
	dlock_acquire_options o = from_v4(v4);
	return dlock_acquire(l, &o);
}

/* Renewals of `c` go `n` past what they are now. */
static int renewed(dlock_client *c, uint64_t n)
{
	dlock_client_stats st;
	if (dlock_client_get_stats(c, &st) != DLOCK_OK)
		return 0;
	dlock_test_count count = { c, st.renewals + n };
	return dlock_test_await(dlock_test_renewed, &count, AWAIT_MS);
}

static int gone(void *arg)
{
	return dlock_check(arg) != DLOCK_OK;
}

/* `l`, held with renewal on, is still held after several renewals, more than a lease after `since`. */
static void assert_renewed_past_lease(dlock_client *c, dlock_lock *l, dlock_client *other, int64_t since)
{
	CU_ASSERT(renewed(c, 6));
	CU_ASSERT(dlock_test_now_ms() - since > LEASE_MS);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(other, dlock_lock_name(l)), DLOCK_EBUSY);
}

struct probe {
	dlock_client *client;
	const char *name;
};

static int probe_gets(void *arg)
{
	const struct probe *p = arg;
	return dlock_test_probe(p->client, p->name) == DLOCK_OK;
}

/* `l`, held with renewal off, is lost when its lease runs out (the holder is told first), and then
 * `other` gets the name. */
static void assert_expires(dlock_lock *l, dlock_client *other)
{
	struct probe p = { other, dlock_lock_name(l) };
	CU_ASSERT(dlock_test_await(gone, l, LEASE_MS + AWAIT_MS));
	CU_ASSERT(dlock_test_await(probe_gets, &p, AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
}

static int has_token(dlock_lock *l)
{
	uint64_t token = 0;
	return dlock_lock_fencing_token(l, &token) == DLOCK_OK && token > 0;
}

struct pair {
	dlock_client *a, *b;
};

static struct pair open_pair(const char *uri)
{
	struct pair p = { dlock_test_open(uri, NULL, NULL), dlock_test_open(uri, NULL, NULL) };
	CU_ASSERT_FATAL(p.a != NULL && p.b != NULL);
	return p;
}

static void close_pair(struct pair *p)
{
	dlock_client_close(p->a);
	dlock_client_close(p->b);
}

/* Version 5: naming only `version` and `lease_ms` keeps renewal and fencing on (the URI's default). */
static void test_v5_named_fields_keep_safeguards(void)
{
	struct pair p = open_pair("mem://t_options_v5_named");
	dlock_lock *l = dlock_test_new_lock(p.a, "job");
	CU_ASSERT_FATAL(l != NULL);
	dlock_acquire_options o = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .lease_ms = LEASE_MS };
	int64_t since = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(l, &o), DLOCK_OK); /* wait_ms 0: try once, and the name is free */
	CU_ASSERT(has_token(l));
	assert_renewed_past_lease(p.a, l, p.b, since);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	close_pair(&p);
}

/* Version 5: DLOCK_OFF, named, turns renewal off, or fencing off, and nothing else. */
static void test_v5_off_turns_each_off(void)
{
	struct pair p = open_pair("mem://t_options_v5_off");
	dlock_lock *l = dlock_test_new_lock(p.a, "job");
	CU_ASSERT_FATAL(l != NULL);
	dlock_acquire_options no_renewal = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .lease_ms = LEASE_MS,
		                             .renewal = DLOCK_OFF };
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(l, &no_renewal), DLOCK_OK);
	CU_ASSERT(has_token(l));
	assert_expires(l, p.b);

	dlock_acquire_options no_token = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .lease_ms = LEASE_MS,
		                           .fence = DLOCK_OFF };
	uint64_t token = 0;
	int64_t since = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(l, &no_token), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &token), DLOCK_ENOTSUP);
	assert_renewed_past_lease(p.a, l, p.b, since);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);

	/* And DLOCK_ON turns them on where the URI turns them off. */
	struct pair q = open_pair("mem://t_options_v5_on?renew=off&fencing=off");
	dlock_lock *m = dlock_test_new_lock(q.a, "job");
	CU_ASSERT_FATAL(m != NULL);
	dlock_acquire_options uri_off = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .lease_ms = LEASE_MS };
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(m, &uri_off), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(m, &token), DLOCK_ENOTSUP);
	assert_expires(m, q.b);
	dlock_acquire_options on = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .lease_ms = LEASE_MS,
		                     .renewal = DLOCK_ON, .fence = DLOCK_ON };
	since = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(m, &on), DLOCK_OK);
	CU_ASSERT(has_token(m));
	assert_renewed_past_lease(q.a, m, q.b, since);
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	dlock_lock_free(m);
	close_pair(&q);
	dlock_lock_free(l);
	close_pair(&p);
}

/* Version 5: a hold bound left out is the URI's; DLOCK_HOLD_NONE, named, is none. */
static void test_v5_hold_bounds(void)
{
	struct pair p = open_pair("mem://t_options_v5_hold?min_hold=60s");
	dlock_lock *kept = dlock_test_new_lock(p.a, "kept"), *freed = dlock_test_new_lock(p.a, "freed");
	CU_ASSERT_FATAL(kept != NULL && freed != NULL);
	dlock_acquire_options o = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION };
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(kept, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(kept), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(p.b, "kept"), DLOCK_EBUSY); /* the URI's minimum hold */
	o.min_hold = DLOCK_HOLD_NONE;
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(freed, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(freed), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(p.b, "freed"), DLOCK_OK);
	dlock_lock_free(kept);
	dlock_lock_free(freed);
	close_pair(&p);

	struct pair q = open_pair("mem://t_options_v5_maxhold?max_hold=600ms");
	dlock_lock *capped = dlock_test_new_lock(q.a, "capped"), *uncapped = dlock_test_new_lock(q.a, "uncapped");
	CU_ASSERT_FATAL(capped != NULL && uncapped != NULL);
	dlock_test_lost lost = { 0, 0 };
	dlock_acquire_options c = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .lease_ms = LEASE_MS,
		                    .on_lost = dlock_test_on_lost, .lost_userdata = &lost };
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(capped, &c), DLOCK_OK);
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, 600 + AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_MAX_HOLD);
	CU_ASSERT_EQUAL(dlock_release(capped), DLOCK_ENOTHELD);
	dlock_acquire_options u = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .lease_ms = LEASE_MS,
		                    .max_hold = DLOCK_HOLD_NONE };
	int64_t since = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(dlock_acquire(uncapped, &u), DLOCK_OK);
	assert_renewed_past_lease(q.a, uncapped, q.b, since);
	CU_ASSERT(dlock_test_now_ms() - since > 600); /* past the URI's maximum */
	CU_ASSERT_EQUAL(dlock_check(uncapped), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(uncapped), DLOCK_OK);
	dlock_lock_free(capped);
	dlock_lock_free(uncapped);
	close_pair(&q);
}

/* Version 5 refuses what it does not define, -1 from version 4 among them, with a message. */
static void test_v5_bad_values(void)
{
	dlock_client *c = dlock_test_open("mem://t_options_v5_bad", NULL, NULL);
	CU_ASSERT_FATAL(c != NULL);
	dlock_lock *l = dlock_test_new_lock(c, "job");
	CU_ASSERT_FATAL(l != NULL);
	static const dlock_acquire_options bad[] = {
		{ .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .renewal = -1 },
		{ .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .renewal = 3 },
		{ .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .fence = -1 },
		{ .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .min_hold = -1 },
		{ .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .max_hold = -1 },
		{ .version = DLOCK_ACQUIRE_OPTIONS_VERSION, .max_hold = -3 },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CU_ASSERT_EQUAL(dlock_acquire(l, &bad[i]), DLOCK_EINVAL);
		CU_ASSERT(strstr(dlock_client_errmsg(c), i < 3 ? "DLOCK_OFF" : "DLOCK_HOLD_NONE") != NULL);
	}
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* Version 4, as its programs fill it: 0 is off for renewal and fencing, and no bound for the holds. */
static void test_v4_keeps_its_meaning(void)
{
	struct pair p = open_pair("mem://t_options_v4?min_hold=60s");
	dlock_lock *l = dlock_test_new_lock(p.a, "named"), *n = dlock_test_new_lock(p.a, "none"),
	           *k = dlock_test_new_lock(p.a, "init");
	CU_ASSERT_FATAL(l != NULL && n != NULL && k != NULL);
	uint64_t token = 0;

	/* A version-4 designated initializer: renewal off, no token, no minimum hold. */
	struct acquire_options_v4 named = { .version = 4, .lease_ms = LEASE_MS };
	CU_ASSERT_EQUAL_FATAL(acquire_v4(l, &named), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &token), DLOCK_ENOTSUP);
	assert_expires(l, p.b);
	struct acquire_options_v4 try_once = { .version = 4 };
	CU_ASSERT_EQUAL_FATAL(acquire_v4(n, &try_once), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(n), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(p.b, "none"), DLOCK_OK); /* min_hold_ms 0: none, whatever the URI says */

	/* Its initializer (-1: the URI's): renewal, a token and the URI's minimum hold. */
	struct acquire_options_v4 init = ACQUIRE_OPTIONS_V4_INIT;
	init.wait_ms = 0;
	init.lease_ms = LEASE_MS;
	int64_t since = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(acquire_v4(k, &init), DLOCK_OK);
	CU_ASSERT(has_token(k));
	assert_renewed_past_lease(p.a, k, p.b, since);
	CU_ASSERT_EQUAL(dlock_release(k), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(p.b, "init"), DLOCK_EBUSY);

	/* Any value but 0 was on, any negative the URI's; a hold below -1 was wrong. */
	struct acquire_options_v4 on = { .version = 4, .renew = 7, .fencing = 7, .min_hold_ms = -1 };
	CU_ASSERT_EQUAL_FATAL(acquire_v4(l, &on), DLOCK_OK);
	CU_ASSERT(has_token(l));
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(p.b, "named"), DLOCK_EBUSY); /* -1: the URI's minimum hold */
	struct acquire_options_v4 bad = { .version = 4, .max_hold_ms = -2 };
	CU_ASSERT_EQUAL(acquire_v4(n, &bad), DLOCK_EINVAL);
	CU_ASSERT(strstr(dlock_client_errmsg(p.a), "version 4") != NULL);
	dlock_lock_free(l);
	dlock_lock_free(n);
	dlock_lock_free(k);
	close_pair(&p);
}

/*
 * Version 1 (before `fence`) is still accepted and means the URI's
 * fencing, whatever lies where later fields went; a version newer than
 * this library's is refused.
 */
static void test_v1_and_unknown_versions(void)
{
	dlock_client *c = dlock_test_open("mem://t_optver?fencing=off", NULL, NULL);
	dlock_lock *l = dlock_test_new_lock(c, "n");
	CU_ASSERT_FATAL(l != NULL);
	uint64_t token = 0;
	dlock_acquire_options v1 = DLOCK_ACQUIRE_OPTIONS_INIT;
	v1.version = 1;
	v1.wait_ms = 0;
	v1.fence = DLOCK_ON; /* not part of version 1: never read */
	CU_ASSERT_EQUAL(dlock_acquire(l, &v1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &token), DLOCK_ENOTSUP); /* the URI's fencing=off */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.fence = DLOCK_ON;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &token), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	o.version = DLOCK_ACQUIRE_OPTIONS_VERSION + 1;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_EVERSION);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* A campaign's term is a fencing token: version 5 left out is the URI's (on), version 4's 0 is off. */
static void test_campaign_by_version(void)
{
	dlock_client *c = dlock_test_open("mem://t_options_campaign", NULL, NULL);
	CU_ASSERT_FATAL(c != NULL);
	dlock_election *e = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(c, "lead", &e), DLOCK_OK);
	struct acquire_options_v4 v4 = { .version = 4 };
	dlock_acquire_options old = from_v4(&v4);
	CU_ASSERT_EQUAL(dlock_campaign(e, "a", &old, NULL), DLOCK_EINVAL);
	uint64_t term = 0;
	dlock_acquire_options o = { .version = DLOCK_ACQUIRE_OPTIONS_VERSION };
	CU_ASSERT_EQUAL(dlock_campaign(e, "a", &o, &term), DLOCK_OK);
	CU_ASSERT(term > 0);
	CU_ASSERT_EQUAL(dlock_resign(e), DLOCK_OK);
	o.fence = DLOCK_OFF;
	CU_ASSERT_EQUAL(dlock_campaign(e, "a", &o, &term), DLOCK_EINVAL);
	dlock_election_free(e);
	dlock_client_close(c);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("acquire options", NULL, NULL);
	CU_add_test(s, "v5: naming version and lease_ms keeps renewal and fencing", test_v5_named_fields_keep_safeguards);
	CU_add_test(s, "v5: DLOCK_OFF turns renewal or fencing off, DLOCK_ON on", test_v5_off_turns_each_off);
	CU_add_test(s, "v5: hold bounds left out are the URI's; DLOCK_HOLD_NONE is none", test_v5_hold_bounds);
	CU_add_test(s, "v5: undefined values and version 4's -1 are refused", test_v5_bad_values);
	CU_add_test(s, "v4: 0 is still off for renewal and fencing, none for holds", test_v4_keeps_its_meaning);
	CU_add_test(s, "v1 still works; a newer version is refused", test_v1_and_unknown_versions);
	CU_add_test(s, "campaign: options read by version", test_campaign_by_version);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
