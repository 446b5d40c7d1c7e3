/*
 * The asynchronous forms of the operations besides acquire: inspect, list,
 * extend, check, break, and an election's campaign, proclaim, resign and
 * leader.  Each completes once, on the loop, with what the blocking form
 * answers on the ordinary client (or where the backend lacks the
 * operation, the same refusal).  And losses: a lease that runs out, a
 * lock broken by another client, each reported once on the loop.
 */
#include <stdio.h>
#include <string.h>

#include "loop_cases.h"

#define LEASE_MS 5000      /* a lease that does not run out during a test */
#define LONG_LEASE_MS 60000
#define BREAK_LEASE_MS 1500 /* renewed often enough that a broken lock is noticed soon */

static const char *str(const char *s)
{
	return s ? s : "(null)";
}

/* Assert that two answers about one lock say the same (times left out: they move). */
static void same_info(const dlock_lock_info *a, const dlock_lock_info *b)
{
	CU_ASSERT_FATAL(a != NULL && b != NULL);
	CU_ASSERT_STRING_EQUAL(str(a->name), str(b->name));
	CU_ASSERT_STRING_EQUAL(str(a->resource), str(b->resource));
	CU_ASSERT_EQUAL(a->kind, b->kind);
	CU_ASSERT_EQUAL(a->permits, b->permits);
	CU_ASSERT_EQUAL_FATAL(a->nholders, b->nholders);
	for (size_t i = 0; i < a->nholders; i++) {
		CU_ASSERT_STRING_EQUAL(str(a->holders[i]->identity), str(b->holders[i]->identity));
		CU_ASSERT_EQUAL(a->holders[i]->pid, b->holders[i]->pid);
		CU_ASSERT_EQUAL(a->holders[i]->token, b->holders[i]->token);
		CU_ASSERT_EQUAL(a->holders[i]->mode, b->holders[i]->mode);
		CU_ASSERT_STRING_EQUAL(str(a->holders[i]->session), str(b->holders[i]->session));
	}
}

/* inspect and list of a name the loop client holds: what the blocking forms answer. */
static void test_inspect_list(void)
{
	lc t;
	if (!lc_begin(&t, "inspect"))
		return;
	int64_t flags = lc_feature(&t, DLOCK_FEATURE_INSPECT);
	dlock_lock *h = lc_lock(&t, t.name);
	CU_ASSERT_EQUAL_FATAL(lr_acquire_now(t.tc, h, 0), DLOCK_OK);
	lr_op seen, listed;
	lr_op_init(&seen, t.tc);
	lr_op_init(&listed, t.tc);
	dlock_lock_info *info = NULL;
	dlock_lock_list *list = NULL;
	dlock_status want = dlock_inspect(t.other, t.name, &info);
	dlock_status st = LR_START(t.lp, dlock_inspect_async(t.tc->client, t.name, lr_on_inspect, &seen));
	if (want != DLOCK_OK) {
		printf("\n    dlock_inspect: %s", dlock_status_name(want));
		LC_ASSERT_ENDS(&seen, st, want);
	} else if (lr_finish(&seen, st) == DLOCK_OK) {
		CU_ASSERT(flags > 0);
		same_info(seen.info, info);
		if (flags & DLOCK_INSPECT_HELD)
			CU_ASSERT_EQUAL(seen.info->nholders, 1);
	} else {
		CU_FAIL("dlock_inspect_async failed where dlock_inspect answers");
	}

	want = dlock_list(t.other, t.name, &list);
	st = LR_START(t.lp, dlock_list_async(t.tc->client, t.name, lr_on_list, &listed));
	if (want != DLOCK_OK) {
		printf("\n    dlock_list: %s", dlock_status_name(want));
		LC_ASSERT_ENDS(&listed, st, want);
	} else if (lr_finish(&listed, st) == DLOCK_OK) {
		CU_ASSERT_EQUAL_FATAL(listed.list->count, list->count);
		if (flags & DLOCK_INSPECT_NAMES) /* else a name kept only hashed is listed only without a prefix */
			CU_ASSERT(list->count >= 1);
		for (size_t i = 0; i < list->count; i++)
			same_info(listed.list->items[i], list->items[i]);
	} else {
		CU_FAIL("dlock_list_async failed where dlock_list answers");
	}
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
	dlock_lock_info_free(info);
	dlock_lock_list_free(list);
	lr_op_clear(&seen);
	lr_op_clear(&listed);
	dlock_lock_free(h);
	lc_end(&t);
}

/* extend and check of a held lock, then of a released one: as the blocking forms on the other client. */
static void test_extend_check(void)
{
	lc t;
	if (!lc_begin(&t, "extend"))
		return;
	char oname[160];
	snprintf(oname, sizeof oname, "%s-other", t.name);
	dlock_lock *h = lc_lock(&t, t.name), *o = lc_other_lock(&t, oname);
	lr_op got, ext, chk;
	lr_op_init(&got, t.tc);
	CU_ASSERT_EQUAL_FATAL(lr_finish(&got, lr_acquire(h, 0, LEASE_MS, 0, DLOCK_MODE_EXCLUSIVE, NULL, &got)), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o, 0, LEASE_MS, 0, NULL, NULL), DLOCK_OK);

	dlock_status want = dlock_extend(o, LONG_LEASE_MS);
	lr_op_init(&ext, t.tc);
	if (want == DLOCK_OK) {
		CU_ASSERT_EQUAL(lr_finish(&ext, LR_START(t.lp, dlock_extend_async(h, LONG_LEASE_MS, lr_on_lock, &ext))),
		                DLOCK_OK);
		dlock_lock_info *info = NULL;
		if ((lc_feature(&t, DLOCK_FEATURE_INSPECT) & DLOCK_INSPECT_LEASE) &&
		    dlock_inspect(t.other, t.name, &info) == DLOCK_OK && info->nholders == 1)
			CU_ASSERT(info->holders[0]->lease_left_ms > LEASE_MS); /* the extension reached the server */
		dlock_lock_info_free(info);
	} else {
		printf("\n    dlock_extend: %s", dlock_status_name(want));
		LC_ASSERT_ENDS(&ext, LR_START(t.lp, dlock_extend_async(h, LONG_LEASE_MS, lr_on_lock, &ext)), want);
	}
	want = dlock_check(o);
	lr_op_init(&chk, t.tc);
	CU_ASSERT_EQUAL(lr_finish(&chk, LR_START(t.lp, dlock_check_async(h, lr_on_lock, &chk))), want);

	/* Released: both say not held. */
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
	lr_op_init(&chk, t.tc);
	LC_ASSERT_ENDS(&chk, LR_START(t.lp, dlock_check_async(h, lr_on_lock, &chk)), dlock_check(o));
	want = dlock_extend(o, LONG_LEASE_MS);
	lr_op_init(&ext, t.tc);
	LC_ASSERT_ENDS(&ext, LR_START(t.lp, dlock_extend_async(h, LONG_LEASE_MS, lr_on_lock, &ext)), want);
	dlock_lock_free(h);
	dlock_lock_free(o);
	lc_end(&t);
}

/* break of a name the other client holds, then of a free one: the counts of the blocking form. */
static void test_break(void)
{
	lc t;
	if (!lc_begin(&t, "break"))
		return;
	char freename[160];
	snprintf(freename, sizeof freename, "%s-free", t.name);
	dlock_lock *o = lc_other_lock(&t, t.name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o, 0, 0, -1, NULL, NULL), DLOCK_OK);
	lr_op brk;
	lr_op_init(&brk, t.tc);
	dlock_status st = LR_START(t.lp, dlock_break_async(t.tc->client, t.name, lr_on_break, &brk));
	if (lc_feature(&t, DLOCK_FEATURE_BREAK) == DLOCK_BREAK_NONE) {
		size_t n = 99;
		CU_ASSERT_EQUAL(dlock_break(t.other, t.name, &n), DLOCK_ENOTSUP);
		LC_ASSERT_ENDS(&brk, st, DLOCK_ENOTSUP);
		CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
	} else {
		if (lr_finish(&brk, st) == DLOCK_OK)
			CU_ASSERT_EQUAL(brk.broken, 1);
		CU_ASSERT_EQUAL(dlock_test_probe(t.other, freename), DLOCK_OK);
		if (lc_feature(&t, DLOCK_FEATURE_INSPECT) & DLOCK_INSPECT_HELD)
			CU_ASSERT_EQUAL(lc_holders(&t, t.name), 0);
		size_t n = 99;
		CU_ASSERT_EQUAL(dlock_break(t.other, freename, &n), DLOCK_OK);
		lr_op_init(&brk, t.tc);
		st = LR_START(t.lp, dlock_break_async(t.tc->client, freename, lr_on_break, &brk));
		if (lr_finish(&brk, st) == DLOCK_OK)
			CU_ASSERT_EQUAL(brk.broken, n);
		dlock_release(o); /* ENOTHELD by now, or not yet noticed: either way it is gone */
	}
	dlock_lock_free(o);
	lc_end(&t);
}

static const char *leader_value(const dlock_leader *l)
{
	return l && l->value ? l->value : "(none)";
}

/* campaign, leader, proclaim and resign on the loop, against dlock_election_leader() on the other client. */
static void test_election(void)
{
	lc t;
	if (!lc_begin(&t, "elect"))
		return;
	if (lc_feature(&t, DLOCK_FEATURE_ELECTION) < 0) {
		dlock_test_skip_part("no elections on this backend");
		lc_end(&t);
		return;
	}
	dlock_election *e = NULL, *oe = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(t.tc->client, t.name, &e), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(t.other, t.name, &oe), DLOCK_OK);
	dlock_leader *seen = NULL;
	lr_op op;

	lr_op_init(&op, t.tc);
	CU_ASSERT_EQUAL(lr_finish(&op, LR_START(t.lp, dlock_campaign_async(e, "alpha", NULL, lr_on_election, &op))),
	                DLOCK_OK);
	uint64_t term = op.term;
	CU_ASSERT(term > 0);
	CU_ASSERT_EQUAL_FATAL(dlock_election_leader(oe, &seen), DLOCK_OK);
	CU_ASSERT(seen->elected && seen->term == term);
	CU_ASSERT_STRING_EQUAL(leader_value(seen), "alpha");
	dlock_leader_free(seen);

	lr_op_init(&op, t.tc);
	if (lr_finish(&op, LR_START(t.lp, dlock_election_leader_async(e, lr_on_leader, &op))) == DLOCK_OK) {
		CU_ASSERT(op.leader->elected && op.leader->term == term);
		CU_ASSERT_STRING_EQUAL(leader_value(op.leader), "alpha");
	}
	lr_op_clear(&op);

	lr_op_init(&op, t.tc);
	CU_ASSERT_EQUAL(lr_finish(&op, LR_START(t.lp, dlock_proclaim_async(e, "beta", lr_on_election, &op))), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_election_leader(oe, &seen), DLOCK_OK);
	CU_ASSERT(seen->elected && seen->term == term);
	CU_ASSERT_STRING_EQUAL(leader_value(seen), "beta");
	dlock_leader_free(seen);

	lr_op_init(&op, t.tc);
	CU_ASSERT_EQUAL(lr_finish(&op, LR_START(t.lp, dlock_resign_async(e, lr_on_election, &op))), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_election_leader(oe, &seen), DLOCK_OK);
	CU_ASSERT_FALSE(seen->elected);
	dlock_leader_free(seen);

	/* The other client leads now: the loop client reads it, and cannot act as leader. */
	uint64_t oterm = 0;
	CU_ASSERT_EQUAL_FATAL(dlock_campaign(oe, "gamma", NULL, &oterm), DLOCK_OK);
	CU_ASSERT(oterm > term);
	lr_op_init(&op, t.tc);
	if (lr_finish(&op, LR_START(t.lp, dlock_election_leader_async(e, lr_on_leader, &op))) == DLOCK_OK) {
		CU_ASSERT(op.leader->elected && op.leader->term == oterm);
		CU_ASSERT_STRING_EQUAL(leader_value(op.leader), "gamma");
	}
	lr_op_clear(&op);
	lr_op_init(&op, t.tc);
	LC_ASSERT_ENDS(&op, LR_START(t.lp, dlock_proclaim_async(e, "delta", lr_on_election, &op)), DLOCK_ENOTHELD);
	lr_op_init(&op, t.tc);
	LC_ASSERT_ENDS(&op, LR_START(t.lp, dlock_resign_async(e, lr_on_election, &op)), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_resign(oe), DLOCK_OK);
	dlock_election_free(e);
	dlock_election_free(oe);
	lc_end(&t);
}

/* A loop client of the target's URI with its short lease as `ttl` (renewal off when `renew` is 0), opened
 * with its callback run (asserted); NULL when it could not open. */
static lr_client *open_short_lease(lc *t, int renew)
{
	const char *uri = lc_get_target()->uri;
	char short_uri[2200];
	snprintf(short_uri, sizeof short_uri, "%s%cttl=%lldms%s", uri, strchr(uri, '?') ? '&' : '?',
	         (long long)lc_get_target()->short_lease_ms, renew ? "" : "&renew=0");
	return lr_open_ready(t->lp, short_uri);
}

/*
 * A lease that runs out without renewal (a loop client of the URI with
 * `ttl` short and `renew=0`): on_lost once, on the loop, EXPIRED; the name
 * is free after.
 */
static void test_lost_lease(void)
{
	lc t;
	if (!lc_begin(&t, "lease"))
		return;
	if (lc_feature(&t, DLOCK_FEATURE_LEASE) != DLOCK_LEASE_TTL || lc_feature(&t, DLOCK_FEATURE_EXTEND) != 1) {
		dlock_test_skip_part("no lease that runs out on this backend");
		lc_end(&t);
		return;
	}
	lr_client *tc = open_short_lease(&t, 0);
	if (!tc) {
		lc_end(&t);
		return;
	}
	dlock_lock *h = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(tc->client, t.name, &h), DLOCK_OK);
	lr_op got, lost;
	lr_op_init(&got, tc);
	lr_op_init(&lost, tc);
	CU_ASSERT_EQUAL_FATAL(lr_finish(&got, lr_acquire(h, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost, &got)), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &lost, LR_AWAIT_MS));
	if (LR_ASSERT_ONCE(&lost, DLOCK_OK))
		CU_ASSERT_EQUAL(lost.reason, DLOCK_LOST_EXPIRED);
	lc_await_free(&t, t.name);
	CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(lost.calls, 1);
	dlock_lock_free(h);
	lr_close(tc);
	lc_end(&t);
}

/*
 * A loop whose timer fires a little before it is due (libevent's coarse
 * clock, libuv's time cached at the start of a turn): the renewals go on.
 * A lock held for three short leases on a loop that fires every timer 5 ms
 * early is still held, and nothing was lost.  Push mode (in pull mode the
 * loop asks dlock_loop_timeout_ms() again every turn), on a client whose
 * renewals are the loop's timers (DLOCK_FEATURE_LOOP_NATIVE).
 */
static void test_timer_fires_early(void)
{
	if (lc_get_target()->mode != LR_PUSH) {
		dlock_test_skip_part("pull mode: the loop asks for its timeout every turn");
		return;
	}
	lc t;
	if (!lc_begin(&t, "early"))
		return;
	if (lc_feature(&t, DLOCK_FEATURE_LEASE) != DLOCK_LEASE_TTL || lc_feature(&t, DLOCK_FEATURE_LOOP_NATIVE) != 1) {
		dlock_test_skip_part("no lease renewed by the loop's timer on this backend");
		lc_end(&t);
		return;
	}
	int64_t lease_ms = lc_get_target()->short_lease_ms;
	lr_client *tc = open_short_lease(&t, 1);
	if (!tc) {
		lc_end(&t);
		return;
	}
	tc->timer_early_ms = 5;
	dlock_lock *h = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(tc->client, t.name, &h), DLOCK_OK);
	lr_op got, lost;
	lr_op_init(&got, tc);
	lr_op_init(&lost, tc);
	CU_ASSERT_EQUAL_FATAL(lr_finish(&got, lr_acquire(h, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost, &got)), DLOCK_OK);
	lr_run_for(t.lp, 3 * lease_ms);
	CU_ASSERT_EQUAL(lost.calls, 0);
	if (lost.calls)
		printf("\n    lost: %s", lost.msg);
	CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
	dlock_lock_free(h);
	lr_close(tc);
	lc_end(&t);
}

/*
 * A loop that stalls for three leases with two locks held and a check of
 * the second started just before.  Where the client renews on the loop
 * (DLOCK_FEATURE_LOOP_RENEWS 1) its renewals are the loop's timers and stop
 * with it: on waking, each loss is reported once, before the check's
 * callback that waited through the stall, and a renewal answer that comes
 * after changes nothing (a further lease of turns: still one report, and
 * the release says ENOTHELD).  Otherwise the client's own threads renew:
 * nothing is lost and both release.
 */
static void test_stalled_loop(void)
{
	lc t;
	if (!lc_begin(&t, "stall"))
		return;
	if (lc_feature(&t, DLOCK_FEATURE_LEASE) != DLOCK_LEASE_TTL) {
		dlock_test_skip_part("no lease that runs out on this backend");
		lc_end(&t);
		return;
	}
	int on_loop = lc_feature(&t, DLOCK_FEATURE_LOOP_RENEWS) == 1;
	int64_t lease_ms = lc_get_target()->short_lease_ms;
	char second[160];
	snprintf(second, sizeof second, "%s-2", t.name);
	lr_client *tc = open_short_lease(&t, 1);
	if (!tc) {
		lc_end(&t);
		return;
	}
	dlock_lock *h = NULL, *h2 = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(tc->client, t.name, &h), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(tc->client, second, &h2), DLOCK_OK);
	lr_op got, got2, lost, lost2, chk;
	lr_op_init(&got, tc);
	lr_op_init(&got2, tc);
	lr_op_init(&lost, tc);
	lr_op_init(&lost2, tc);
	lr_op_init(&chk, tc);
	CU_ASSERT_EQUAL_FATAL(lr_finish(&got, lr_acquire(h, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost, &got)), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(lr_finish(&got2, lr_acquire(h2, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost2, &got2)),
	                      DLOCK_OK);
	CU_ASSERT_EQUAL(LR_START(t.lp, dlock_check_async(h2, lr_on_lock, &chk)), DLOCK_OK);
	dlock_test_sleep_ms(3 * lease_ms); /* the stall itself: the loop does not turn */
	CU_ASSERT(lr_run_done(t.lp, &chk, LR_AWAIT_MS));
	if (on_loop) {
		CU_ASSERT(lr_run_done(t.lp, &lost2, LR_AWAIT_MS));
		if (LR_ASSERT_ONCE(&lost, DLOCK_OK) && LR_ASSERT_ONCE(&lost2, DLOCK_OK)) {
			CU_ASSERT_EQUAL(lost.reason, DLOCK_LOST_EXPIRED);
			CU_ASSERT(lost.seq < chk.seq && lost2.seq < chk.seq); /* the losses first */
		}
		lr_run_for(t.lp, lease_ms); /* renewal answers, cleanups: nothing more is reported */
		CU_ASSERT_EQUAL(lost.calls, 1);
		CU_ASSERT_EQUAL(lost2.calls, 1);
		CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(lr_release_now(tc, h2), DLOCK_ENOTHELD);
	} else {
		LR_ASSERT_ONCE(&chk, DLOCK_OK);
		CU_ASSERT_EQUAL(lost.calls, 0);
		CU_ASSERT_EQUAL(lost2.calls, 0);
		CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
		CU_ASSERT_EQUAL(lr_release_now(tc, h2), DLOCK_OK);
	}
	dlock_lock_free(h);
	dlock_lock_free(h2);
	lr_close(tc);
	lc_end(&t);
}

/* The other client breaks a lock the loop client holds: on_lost once, on the loop. */
static void test_lost_broken(void)
{
	lc t;
	if (!lc_begin(&t, "broken"))
		return;
	int64_t effect = lc_feature(&t, DLOCK_FEATURE_BREAK);
	if (effect == DLOCK_BREAK_NONE || effect < 0) {
		dlock_test_skip_part("no breaking on this backend");
		lc_end(&t);
		return;
	}
	dlock_lock *h = lc_lock(&t, t.name);
	lr_op got, lost;
	lr_op_init(&got, t.tc);
	lr_op_init(&lost, t.tc);
	CU_ASSERT_EQUAL_FATAL(lr_finish(&got, lr_acquire(h, 0, BREAK_LEASE_MS, 1, DLOCK_MODE_EXCLUSIVE, &lost, &got)),
	                      DLOCK_OK);
	size_t n = 0;
	CU_ASSERT_EQUAL(dlock_break(t.other, t.name, &n), DLOCK_OK);
	CU_ASSERT_EQUAL(n, 1);
	CU_ASSERT(lr_run_done(t.lp, &lost, LR_AWAIT_MS));
	if (LR_ASSERT_ONCE(&lost, DLOCK_OK)) {
		printf("\n    lost: %s", lost.msg);
		CU_ASSERT_EQUAL(lost.reason, effect == DLOCK_BREAK_SESSION ? DLOCK_LOST_SESSION : DLOCK_LOST_TAKEN);
	}
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(lost.calls, 1);
	lc_await_free(&t, t.name);
	dlock_lock_free(h);
	lc_end(&t);
}

const lc_case lc_ops_cases[] = {
	{ "inspect and list: as the blocking forms", test_inspect_list },
	{ "extend and check: as the blocking forms", test_extend_check },
	{ "break: as the blocking form", test_break },
	{ "campaign, leader, proclaim, resign: as the blocking forms", test_election },
	{ "lease runs out: on_lost once, on the loop", test_lost_lease },
	{ "broken by another client: on_lost once, on the loop", test_lost_broken },
	{ "a timer that fires early: the renewals go on", test_timer_fires_early },
	{ "a loop stalled past the lease: the loss first on waking, once", test_stalled_loop },
	{ NULL, NULL },
};
