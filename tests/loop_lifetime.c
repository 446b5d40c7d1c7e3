/*
 * A loop client's lifetime around its operations: closed while an
 * acquisition waits and a lock is held (asynchronously and blocking), closed
 * twice, closed or a handle freed from inside a callback, operations
 * started before the open completed.  Under ASan the frees inside callbacks
 * must be clean: the library keeps what its callbacks still need.
 */
#include <stdio.h>

#include "loop_cases.h"

/*
 * Closed while one acquisition waits and another handle holds with an
 * on_lost: the waiter completes with ECANCELED and the holder is told
 * DLOCK_LOST_CLOSED, each exactly once; with dlock_client_close_async()
 * before the close's callback, with dlock_client_close() (blocking, on the
 * loop's thread) before it returns.  The lock is released for the other
 * client, and the handles are freed after their client.
 */
static void close_mid_wait(int blocking)
{
	lc t;
	if (!lc_begin(&t, blocking ? "close-block" : "close-wait"))
		return;
	char held[160];
	snprintf(held, sizeof held, "%s-held", t.name);
	dlock_lock *waiter = lc_lock(&t, t.name), *holder = lc_lock(&t, held), *o = lc_other_lock(&t, t.name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o, 0, 0, -1, NULL, NULL), DLOCK_OK);
	lr_op got, lost, wait;
	lr_op_init(&got, t.tc);
	lr_op_init(&lost, t.tc);
	CU_ASSERT_EQUAL(lr_finish(&got, lr_acquire(holder, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, &lost, &got)), DLOCK_OK);
	lc_start_waiting(&t, waiter, DLOCK_WAIT_FOREVER, &wait);

	if (blocking) {
		CU_ASSERT_EQUAL(lr_close_blocking(t.tc), DLOCK_OK);
	} else {
		CU_ASSERT_EQUAL(lr_close_async(t.tc), DLOCK_OK);
		CU_ASSERT(lr_run_done(t.lp, &t.tc->closed, LR_AWAIT_MS));
		LR_ASSERT_ONCE(&t.tc->closed, DLOCK_OK);
		CU_ASSERT(wait.seq < t.tc->closed.seq);
		CU_ASSERT(lost.seq < t.tc->closed.seq);
	}
	LR_ASSERT_ONCE(&wait, DLOCK_ECANCELED);
	if (LR_ASSERT_ONCE(&lost, DLOCK_OK))
		CU_ASSERT_EQUAL(lost.reason, DLOCK_LOST_CLOSED);
	LR_ASSERT_CLEAN(t.tc);
	CU_ASSERT_EQUAL(dlock_test_probe(t.other, held), DLOCK_OK); /* released by the close */
	CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
	dlock_lock_free(waiter);
	dlock_lock_free(holder);
	dlock_lock_free(o);
	lc_end(&t);
}

static void test_close_mid_wait(void)
{
	close_mid_wait(0);
}

static void test_close_blocking_mid_wait(void)
{
	close_mid_wait(1);
}

/* A second close while the first runs: ECLOSED at the start call, and still one close callback. */
static void test_close_twice(void)
{
	lc t;
	if (!lc_begin(&t, "close-twice"))
		return;
	lr_op second;
	lr_op_init(&second, t.tc);
	CU_ASSERT_EQUAL(lr_close_async(t.tc), DLOCK_OK);
	CU_ASSERT_EQUAL(LR_START(t.lp, dlock_client_close_async(t.tc->client, lr_on_close, &second)), DLOCK_ECLOSED);
	CU_ASSERT(lr_run_done(t.lp, &t.tc->closed, LR_AWAIT_MS));
	LR_ASSERT_ONCE(&t.tc->closed, DLOCK_OK);
	LR_ASSERT_NEVER(&second);
	LR_ASSERT_CLEAN(t.tc);
	lc_end(&t);
}

static void free_lock(void *arg)
{
	dlock_lock_free(arg);
}

static void free_election(void *arg)
{
	dlock_election_free(arg);
}

static void close_client(void *arg)
{
	lr_client *tc = arg;
	CU_ASSERT_EQUAL(lr_close_async(tc), DLOCK_OK);
}

/* A try-once acquisition of `h` whose callback, recorded in `op`, ends by calling fn(arg). */
static void acquire_then(lc *t, dlock_lock *h, void (*fn)(void *), void *arg, lr_op *op)
{
	lr_op_init(op, t->tc);
	op->then = fn;
	op->then_arg = arg;
	CU_ASSERT_EQUAL(lr_acquire(h, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, op), DLOCK_OK);
}

/* dlock_lock_free() inside the handle's own acquire callback, granted: freed, and the lock released. */
static void test_free_in_acquire_callback(void)
{
	lc t;
	if (!lc_begin(&t, "free-acq"))
		return;
	dlock_lock *h = lc_lock(&t, t.name);
	lr_op op;
	acquire_then(&t, h, free_lock, h, &op);
	CU_ASSERT(lr_run_done(t.lp, &op, LR_AWAIT_MS));
	LR_ASSERT_ONCE(&op, DLOCK_OK);
	lc_await_free(&t, t.name);
	lr_run_for(t.lp, 50); /* nothing more comes for it */
	CU_ASSERT_EQUAL(op.calls, 1);
	lc_end(&t);
}

/* The same for an acquisition refused (EBUSY). */
static void test_free_in_refused_callback(void)
{
	lc t;
	if (!lc_begin(&t, "free-busy"))
		return;
	dlock_lock *h = lc_lock(&t, t.name), *o = lc_other_lock(&t, t.name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o, 0, 0, -1, NULL, NULL), DLOCK_OK);
	lr_op op;
	acquire_then(&t, h, free_lock, h, &op);
	CU_ASSERT(lr_run_done(t.lp, &op, LR_AWAIT_MS));
	LR_ASSERT_ONCE(&op, DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
	dlock_lock_free(o);
	lc_end(&t);
}

/* dlock_lock_free() inside the handle's release callback. */
static void test_free_in_release_callback(void)
{
	lc t;
	if (!lc_begin(&t, "free-rel"))
		return;
	dlock_lock *h = lc_lock(&t, t.name);
	CU_ASSERT_EQUAL_FATAL(lr_acquire_now(t.tc, h, 0), DLOCK_OK);
	lr_op op;
	lr_op_init(&op, t.tc);
	op.then = free_lock;
	op.then_arg = h;
	CU_ASSERT_EQUAL(LR_START(t.lp, dlock_release_async(h, lr_on_lock, &op)), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &op, LR_AWAIT_MS));
	LR_ASSERT_ONCE(&op, DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(t.other, t.name), DLOCK_OK);
	lc_end(&t);
}

/* dlock_election_free() inside the election's campaign callback: freed, and leadership given up. */
static void test_election_free_in_campaign_callback(void)
{
	lc t;
	if (!lc_begin(&t, "free-elect"))
		return;
	if (lc_feature(&t, DLOCK_FEATURE_ELECTION) < 0) {
		dlock_test_skip_part("no elections on this backend");
		lc_end(&t);
		return;
	}
	dlock_election *e = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_election_new(t.tc->client, t.name, &e), DLOCK_OK);
	lr_op op;
	lr_op_init(&op, t.tc);
	op.then = free_election;
	op.then_arg = e;
	CU_ASSERT_EQUAL(LR_START(t.lp, dlock_campaign_async(e, "freed", NULL, lr_on_election, &op)), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &op, LR_AWAIT_MS));
	if (LR_ASSERT_ONCE(&op, DLOCK_OK))
		CU_ASSERT(op.term > 0);
	lc_await_free(&t, t.name); /* resigned by the free */
	lc_end(&t);
}

/* dlock_client_close_async() inside an acquire callback: the close completes after it, the lock released. */
static void test_close_in_callback(void)
{
	lc t;
	if (!lc_begin(&t, "close-cb"))
		return;
	dlock_lock *h = lc_lock(&t, t.name);
	lr_op op;
	acquire_then(&t, h, close_client, t.tc, &op);
	CU_ASSERT(lr_run_done(t.lp, &t.tc->closed, LR_AWAIT_MS));
	LR_ASSERT_ONCE(&op, DLOCK_OK);
	LR_ASSERT_ONCE(&t.tc->closed, DLOCK_OK);
	CU_ASSERT(op.seq < t.tc->closed.seq);
	LR_ASSERT_CLEAN(t.tc);
	CU_ASSERT_EQUAL(dlock_test_probe(t.other, t.name), DLOCK_OK);
	dlock_lock_free(h);
	lc_end(&t);
}

/* dlock_client_close_async() inside the open's own callback. */
static void test_close_in_open_callback(void)
{
	lr_loop *lp = lr_loop_new(lc_get_target()->mode);
	lr_client *tc = lr_client_new(lp);
	tc->opened.then = close_client;
	tc->opened.then_arg = tc;
	CU_ASSERT_EQUAL_FATAL(lr_open(tc, lc_get_target()->uri, NULL, NULL, 0), DLOCK_OK);
	CU_ASSERT(lr_run_done(lp, &tc->closed, LR_AWAIT_MS));
	LR_ASSERT_ONCE(&tc->opened, DLOCK_OK);
	LR_ASSERT_ONCE(&tc->closed, DLOCK_OK);
	CU_ASSERT(tc->opened.seq < tc->closed.seq);
	LR_ASSERT_CLEAN(tc);
	lr_loop_free(lp);
}

/* A handle made inside the open's callback: from then on handles can be made. */
struct early {
	lr_client *tc;
	const char *name;
	dlock_lock *h;
	dlock_status made;
};

static void make_handle(void *arg)
{
	struct early *e = arg;
	e->made = dlock_lock_new(e->tc->client, e->name, &e->h);
}

/*
 * Operations started right after dlock_client_open_async() returned, before
 * its callback, wait for the open and complete after it; a handle cannot be
 * made before the open completed (DLOCK_EINVAL), and can be from its
 * callback on.
 */
static void test_ops_before_open(void)
{
	lc t;
	if (!lc_begin(&t, "early"))
		return;
	lr_client *tc = lr_client_new(t.lp);
	struct early e = { tc, t.name, NULL, DLOCK_STATUS_COUNT_ };
	tc->opened.then = make_handle;
	tc->opened.then_arg = &e;
	CU_ASSERT_EQUAL_FATAL(lr_open(tc, lc_get_target()->uri, NULL, NULL, 0), DLOCK_OK);
	dlock_lock *h = NULL;
	CU_ASSERT_EQUAL(dlock_lock_new(tc->client, t.name, &h), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(h);
	lr_op seen, listed;
	lr_op_init(&seen, tc);
	lr_op_init(&listed, tc);
	CU_ASSERT_EQUAL(LR_START(t.lp, dlock_inspect_async(tc->client, t.name, lr_on_inspect, &seen)), DLOCK_OK);
	CU_ASSERT_EQUAL(LR_START(t.lp, dlock_list_async(tc->client, t.name, lr_on_list, &listed)), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &seen, LR_AWAIT_MS));
	CU_ASSERT(lr_run_done(t.lp, &listed, LR_AWAIT_MS));
	LR_ASSERT_ONCE(&tc->opened, DLOCK_OK);
	CU_ASSERT(tc->opened.seq < seen.seq);
	CU_ASSERT(tc->opened.seq < listed.seq);
	CU_ASSERT(seen.calls == 1 && (seen.status == DLOCK_OK || seen.status == DLOCK_ENOTSUP));
	CU_ASSERT(listed.calls == 1 && (listed.status == DLOCK_OK || listed.status == DLOCK_ENOTSUP));
	CU_ASSERT_EQUAL(e.made, DLOCK_OK);
	if (e.h) {
		CU_ASSERT_EQUAL(lr_acquire_now(tc, e.h, 0), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_probe(t.other, t.name), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(lr_release_now(tc, e.h), DLOCK_OK);
	}
	lr_op_clear(&seen);
	lr_op_clear(&listed);
	dlock_lock_free(e.h);
	lr_close(tc);
	lc_end(&t);
}

const lc_case lc_lifetime_cases[] = {
	{ "closed mid-wait: ECANCELED and LOST_CLOSED before the close's callback", test_close_mid_wait },
	{ "closed mid-wait, blocking close: every callback inside it", test_close_blocking_mid_wait },
	{ "closed while closing: ECLOSED, one callback", test_close_twice },
	{ "handle freed in its acquire callback (granted)", test_free_in_acquire_callback },
	{ "handle freed in its acquire callback (refused)", test_free_in_refused_callback },
	{ "handle freed in its release callback", test_free_in_release_callback },
	{ "election freed in its campaign callback", test_election_free_in_campaign_callback },
	{ "client closed in an acquire callback", test_close_in_callback },
	{ "client closed in its open callback", test_close_in_open_callback },
	{ "operations started before the open completed wait for it", test_ops_before_open },
	{ NULL, NULL },
};
