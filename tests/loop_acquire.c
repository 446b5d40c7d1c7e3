/*
 * Every way an acquisition of a loop client completes: granted (mutex,
 * read-write lock, semaphore, reentrant on its handle), busy, timed out,
 * cancelled from another thread, and cancel racing a grant.  Each callback
 * runs exactly once, never inside its start call, on the loop's thread
 * (LR_ASSERT_ONCE); the ordinary client checks what the server holds.
 */
#include <pthread.h>
#include <stdio.h>

#include "loop_cases.h"

#define RACE_ROUNDS 20  /* cancel against grant, scaled by DLOCK_TEST_SCALE */
#define BOUND_MS 200    /* the timed-out acquisition's wait bound */

/* A mutex granted on the loop: held for the server (the other client is refused), then released. */
static void test_granted_mutex(void)
{
	lc t;
	if (!lc_begin(&t, "mutex"))
		return;
	dlock_lock *h = lc_lock(&t, t.name);
	lr_op op;
	lr_op_init(&op, t.tc);
	CU_ASSERT_EQUAL(lr_acquire(h, DLOCK_WAIT_FOREVER, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &op, LR_AWAIT_MS));
	if (LR_ASSERT_ONCE(&op, DLOCK_OK)) {
		CU_ASSERT_EQUAL(dlock_test_probe(t.other, t.name), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(lr_check_now(t.tc, h), DLOCK_OK);
		CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_probe(t.other, t.name), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_ENOTHELD);
	dlock_lock_free(h);
	lc_end(&t);
}

/* Two readers at once on one loop client; a writer waits until both have released. */
static void test_granted_rwlock(void)
{
	lc t;
	if (!lc_begin(&t, "rw"))
		return;
	if (lc_feature(&t, DLOCK_FEATURE_RWLOCK) <= DLOCK_RWLOCK_NONE) {
		dlock_test_skip_part("no read-write locks on this backend");
		lc_end(&t);
		return;
	}
	dlock_lock *r[2] = { NULL, NULL }, *w = NULL, *ow = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(t.other, t.name, &ow), DLOCK_OK);
	for (int i = 0; i < 2; i++)
		CU_ASSERT_EQUAL(dlock_rwlock_new(t.tc->client, t.name, &r[i]), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(t.tc->client, t.name, &w), DLOCK_OK);
	lr_op rop[2], wop;
	for (int i = 0; i < 2; i++) {
		lr_op_init(&rop[i], t.tc);
		CU_ASSERT_EQUAL(lr_acquire(r[i], DLOCK_WAIT_FOREVER, 0, -1, DLOCK_MODE_SHARED, NULL, &rop[i]), DLOCK_OK);
	}
	for (int i = 0; i < 2; i++) {
		CU_ASSERT(lr_run_done(t.lp, &rop[i], LR_AWAIT_MS));
		LR_ASSERT_ONCE(&rop[i], DLOCK_OK);
	}
	if (lc_feature(&t, DLOCK_FEATURE_INSPECT) & DLOCK_INSPECT_HELD)
		CU_ASSERT_EQUAL(lc_holders(&t, t.name), 2); /* both readers at once */

	lr_op_init(&wop, t.tc);
	CU_ASSERT_EQUAL(lr_acquire(w, DLOCK_WAIT_FOREVER, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &wop), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(t.tc, r[0]), DLOCK_OK);
	LR_ASSERT_NEVER(&wop); /* the other reader still holds */
	CU_ASSERT_EQUAL(lr_release_now(t.tc, r[1]), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &wop, LR_AWAIT_MS));
	if (LR_ASSERT_ONCE(&wop, DLOCK_OK)) {
		CU_ASSERT_EQUAL(dlock_test_acquire(ow, 0, 0, -1, NULL, NULL), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(lr_release_now(t.tc, w), DLOCK_OK);
	}
	dlock_lock_free(r[0]);
	dlock_lock_free(r[1]);
	dlock_lock_free(w);
	dlock_lock_free(ow);
	lc_end(&t);
}

static int two_done(void *arg)
{
	lr_op *op = arg;
	return (op[0].calls > 0) + (op[1].calls > 0) + (op[2].calls > 0) >= 2;
}

/* A semaphore of 2 and three handles of the loop client: two are granted, the third when one releases. */
static void test_granted_semaphore(void)
{
	lc t;
	if (!lc_begin(&t, "sem"))
		return;
	if (lc_feature(&t, DLOCK_FEATURE_SEMAPHORE) <= DLOCK_SEMAPHORE_NONE) {
		dlock_test_skip_part("no semaphores on this backend");
		lc_end(&t);
		return;
	}
	dlock_lock *s[3] = { NULL, NULL, NULL };
	lr_op op[3];
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(t.tc->client, t.name, 2, &s[i]), DLOCK_OK);
		lr_op_init(&op[i], t.tc);
	}
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(lr_acquire(s[i], DLOCK_WAIT_FOREVER, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op[i]), DLOCK_OK);
	CU_ASSERT(lr_run_until(t.lp, two_done, op, LR_AWAIT_MS));
	lr_run_for(t.lp, 100); /* to see that the third one does not come */
	int first = -1, third = -1;
	for (int i = 0; i < 3; i++) {
		if (op[i].calls == 0)
			third = i;
		else if (LR_ASSERT_ONCE(&op[i], DLOCK_OK) && first < 0)
			first = i;
	}
	CU_ASSERT_FATAL(third >= 0 && first >= 0);
	if (lc_feature(&t, DLOCK_FEATURE_INSPECT) & DLOCK_INSPECT_HELD)
		CU_ASSERT_EQUAL(lc_holders(&t, t.name), 2);

	CU_ASSERT_EQUAL(lr_release_now(t.tc, s[first]), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &op[third], LR_AWAIT_MS));
	LR_ASSERT_ONCE(&op[third], DLOCK_OK);
	for (int i = 0; i < 3; i++) {
		if (i != first)
			CU_ASSERT_EQUAL(lr_release_now(t.tc, s[i]), DLOCK_OK);
		dlock_lock_free(s[i]);
	}
	lc_end(&t);
}

/*
 * Reentrancy is per handle in loop mode: the holding handle acquires again
 * with a hold count, while another handle of the name waits its turn until
 * the last level is released.
 */
static void test_reentrant_per_handle(void)
{
	lc t;
	if (!lc_begin(&t, "reenter"))
		return;
	dlock_lock *h1 = lc_lock(&t, t.name), *h2 = lc_lock(&t, t.name);
	lr_op op2;
	lr_op_init(&op2, t.tc);
	CU_ASSERT_EQUAL_FATAL(lr_acquire_now(t.tc, h1, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_acquire(h2, DLOCK_WAIT_FOREVER, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op2), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_acquire_now(t.tc, h1, 0), DLOCK_OK); /* a second level, not a wait */
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h1), DLOCK_OK);
	LR_ASSERT_NEVER(&op2); /* h1 still holds one level */
	CU_ASSERT_EQUAL(dlock_test_probe(t.other, t.name), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h1), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &op2, LR_AWAIT_MS));
	if (LR_ASSERT_ONCE(&op2, DLOCK_OK))
		CU_ASSERT_EQUAL(lr_release_now(t.tc, h2), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h1), DLOCK_ENOTHELD);
	dlock_lock_free(h1);
	dlock_lock_free(h2);
	lc_end(&t);
}

/* Held by the other client: try-once completes with EBUSY. */
static void test_busy(void)
{
	lc_contended c;
	if (!lc_contended_begin(&c, "busy"))
		return;
	lr_op op;
	lr_op_init(&op, c.t.tc);
	CU_ASSERT_EQUAL(lr_finish(&op, lr_acquire(c.h, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op)), DLOCK_EBUSY);
	lc_contended_end(&c);
}

/* Held by the other client throughout: a bounded wait completes with ETIMEDOUT, not before its bound. */
static void test_timed_out(void)
{
	lc_contended c;
	if (!lc_contended_begin(&c, "timeout"))
		return;
	lr_op op;
	lr_op_init(&op, c.t.tc);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(lr_acquire(c.h, BOUND_MS, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op), DLOCK_OK);
	CU_ASSERT(lr_run_done(c.t.lp, &op, LR_AWAIT_MS));
	if (LR_ASSERT_ONCE(&op, DLOCK_ETIMEDOUT)) {
		/* The bound is a correctness matter (never given up early); 10 ms for the clocks' rounding. */
		if (op.at_ms - t0 < BOUND_MS - 10)
			printf("\n    timed out after %lld ms, bound %d ms", (long long)(op.at_ms - t0), BOUND_MS);
		CU_ASSERT(op.at_ms - t0 >= BOUND_MS - 10);
	}
	lc_contended_end(&c);
}

/* dlock_cancel() from another thread while the acquisition waits: ECANCELED, once, on the loop. */
static void test_cancelled(void)
{
	lc_contended c;
	if (!lc_contended_begin(&c, "cancel"))
		return;
	lr_op op;
	lc_start_waiting(&c.t, c.h, DLOCK_WAIT_FOREVER, &op);
	lr_thread th = { .action = LR_DO_CANCEL, .lock = c.h };
	lr_thread_start(&th);
	CU_ASSERT(lr_run_done(c.t.lp, &op, LR_AWAIT_MS));
	CU_ASSERT_EQUAL(lr_thread_join(&th), DLOCK_OK);
	LR_ASSERT_ONCE(&op, DLOCK_ECANCELED);
	lc_contended_end(&c); /* the cancel does not carry over to the next acquisition */
}

/*
 * The other client releases while another thread cancels the waiting
 * acquisition, at nearly the same moment (a barrier), many times: each
 * completes once with ECANCELED or OK, and OK means the handle holds the
 * lock (check says so, release works); either way no lock is left on the
 * server.  No timing is asserted.
 */
static void test_cancel_races_grant(void)
{
	lc t;
	if (!lc_begin(&t, "race"))
		return;
	dlock_lock *h = lc_lock(&t, t.name), *o = lc_other_lock(&t, t.name);
	int rounds = lc_scaled(RACE_ROUNDS), granted = 0, cancelled = 0;
	for (int i = 0; i < rounds; i++) {
		if (dlock_test_acquire(o, 5000, 0, -1, NULL, NULL) != DLOCK_OK) {
			CU_FAIL("the other client cannot take the name back");
			break;
		}
		lr_op op;
		lc_start_waiting(&t, h, DLOCK_WAIT_FOREVER, &op);
		pthread_barrier_t go;
		pthread_barrier_init(&go, NULL, 3);
		lr_thread rel = { .action = LR_DO_RELEASE, .lock = o, .start = &go };
		lr_thread can = { .action = LR_DO_CANCEL, .lock = h, .start = &go };
		lr_thread_start(&rel);
		lr_thread_start(&can);
		pthread_barrier_wait(&go);
		CU_ASSERT(lr_run_done(t.lp, &op, LR_AWAIT_MS));
		CU_ASSERT_EQUAL(lr_thread_join(&rel), DLOCK_OK);
		CU_ASSERT_EQUAL(lr_thread_join(&can), DLOCK_OK);
		pthread_barrier_destroy(&go);
		if (op.status == DLOCK_OK) {
			granted++;
			LR_ASSERT_ONCE(&op, DLOCK_OK);
			CU_ASSERT_EQUAL(lr_check_now(t.tc, h), DLOCK_OK);
			CU_ASSERT_EQUAL(dlock_test_probe(t.other, t.name), DLOCK_EBUSY);
			CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
		} else {
			cancelled++;
			LR_ASSERT_ONCE(&op, DLOCK_ECANCELED);
			CU_ASSERT_EQUAL(lr_check_now(t.tc, h), DLOCK_ENOTHELD);
		}
		if (!lc_await_free(&t, t.name)) { /* nothing left without a handle */
			printf("\n    round %d of %d: the acquisition completed with %s%s%s", i + 1, rounds,
			       dlock_status_name(op.status), op.msg[0] ? ": " : "", op.msg);
			break;
		}
	}
	printf("\n    %d rounds: granted %d, cancelled %d", rounds, granted, cancelled);
	CU_ASSERT_EQUAL(granted + cancelled, rounds);
	dlock_lock_free(h);
	dlock_lock_free(o);
	lc_end(&t);
}

const lc_case lc_acquire_cases[] = {
	{ "granted: a mutex", test_granted_mutex },
	{ "granted: two readers, then a writer", test_granted_rwlock },
	{ "granted: a semaphore of 2, the third when one releases", test_granted_semaphore },
	{ "reentrant per handle; another handle waits its turn", test_reentrant_per_handle },
	{ "try-once, held elsewhere: EBUSY", test_busy },
	{ "wait bound runs out: ETIMEDOUT", test_timed_out },
	{ "cancelled from another thread: ECANCELED", test_cancelled },
	{ "cancel racing a grant: ECANCELED or held", test_cancel_races_grant },
	{ NULL, NULL },
};
