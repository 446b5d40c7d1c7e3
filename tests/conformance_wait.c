/*
 * Conformance: waiting (try once, bounds, forever), ownership of release,
 * reentrancy, cancellation and closing a client with waiters or locks.
 */
#include "conformance.h"

#include <stdio.h>
#include <stdlib.h>

/* A name, a holder client that has it, and a second client for the tests. */
typedef struct held_fixture {
	char name[128];
	dlock_client *holder;
	dlock_client *other;
	dlock_lock *held;
} held_fixture;

static int held_setup(held_fixture *f, const char *tag)
{
	conf_name(f->name, sizeof f->name, tag);
	f->holder = conf_open();
	f->other = conf_open();
	f->held = conf_lock(f->holder, f->name);
	return f->other && f->held && CONF_ASSERT_ST(conf_acquire(f->held, 0), DLOCK_OK);
}

static void held_teardown(held_fixture *f)
{
	dlock_lock_free(f->held);
	conf_close(f->other);
	conf_close(f->holder);
}

/*
 * Start `w` on a new handle of f->other for f->name, waiting forever and
 * releasing once it has the lock; await that it is blocked.  Returns the handle.
 */
static dlock_lock *start_blocked_waiter(held_fixture *f, conf_waiter *w)
{
	dlock_lock *lock = conf_lock(f->other, f->name);
	uint64_t base = conf_stats(f->other).server_acquires;
	conf_waiter_start(w, lock, DLOCK_WAIT_FOREVER, 1, NULL);
	conf_waiter_await_blocked(w, f->other, base);
	return lock;
}

/* ------------------------------------------------------- waiting */

static void test_try_once_busy(void)
{
	held_fixture f;
	if (held_setup(&f, "try-once")) {
		dlock_lock *lock = conf_lock(f.other, f.name);
		int64_t t0 = dlock_test_now_ms();
		CONF_ASSERT_ST(conf_acquire(lock, 0), DLOCK_EBUSY);
		CU_ASSERT(dlock_test_now_ms() - t0 < CONF_SLACK_MS);
		CONF_ASSERT_ST(dlock_test_probe(f.other, f.name), DLOCK_EBUSY);
		CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
		CONF_ASSERT_ST(conf_acquire(lock, 0), DLOCK_OK);
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
		dlock_lock_free(lock);
	}
	held_teardown(&f);
}

static void test_bounded_wait_times_out(void)
{
	enum { BOUND = 200 };
	held_fixture f;
	if (held_setup(&f, "bounded")) {
		dlock_lock *lock = conf_lock(f.other, f.name);
		int64_t t0 = dlock_test_now_ms();
		CONF_ASSERT_ST(conf_acquire(lock, BOUND), DLOCK_ETIMEDOUT);
		int64_t elapsed = dlock_test_now_ms() - t0;
		if (elapsed < BOUND - 20 || elapsed > BOUND + CONF_SLACK_MS)
			printf("\n    a %d ms wait took %lld ms", BOUND, (long long)elapsed);
		CU_ASSERT(elapsed >= BOUND - 20);
		CU_ASSERT(elapsed <= BOUND + CONF_SLACK_MS);
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_ENOTHELD);
		CONF_ASSERT_ST(dlock_test_probe(f.other, f.name), DLOCK_EBUSY);
		dlock_lock_free(lock);
	}
	held_teardown(&f);
}

static void test_wait_forever_gets_released_lock(void)
{
	held_fixture f;
	if (held_setup(&f, "forever")) {
		conf_waiter w;
		dlock_lock *lock = start_blocked_waiter(&f, &w);
		CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
		CONF_ASSERT_ST(conf_waiter_join(&w, CONF_AWAIT_MS), DLOCK_OK);
		CONF_ASSERT_ST(w.release_status, DLOCK_OK);
		CONF_ASSERT_ST(dlock_test_probe(f.holder, f.name), DLOCK_OK);
		dlock_lock_free(lock);
	}
	held_teardown(&f);
}

/* ------------------------------------------------------- ownership */

static void test_release_by_non_owner(void)
{
	held_fixture f;
	if (!held_setup(&f, "non-owner")) {
		held_teardown(&f);
		return;
	}
	dlock_client *third = conf_open();
	dlock_lock *foreign = conf_lock(f.other, f.name);
	dlock_lock *sibling = conf_lock(f.holder, f.name);
	CONF_ASSERT_ST(dlock_release(foreign), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_release(sibling), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_test_probe(third, f.name), DLOCK_EBUSY);
	CONF_ASSERT_ST2(dlock_check(f.held), DLOCK_OK, DLOCK_ENOTSUP);

	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(conf_acquire(foreign, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_test_probe(third, f.name), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(foreign), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(third, f.name), DLOCK_OK);

	dlock_lock_free(sibling);
	dlock_lock_free(foreign);
	conf_close(third);
	held_teardown(&f);
}

static void test_release_never_acquired(void)
{
	char name[128];
	conf_name(name, sizeof name, "never");
	dlock_client *client = conf_open();
	dlock_lock *lock = conf_lock(client, name);
	if (lock) {
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_ENOTHELD);
		CONF_ASSERT_ST(dlock_test_probe(client, name), DLOCK_OK);
		CONF_ASSERT_ST2(dlock_check(lock), DLOCK_ENOTHELD, DLOCK_ENOTSUP);
	}
	dlock_lock_free(lock);
	conf_close(client);
}

static void test_stats_one_cycle(void)
{
	char name[128];
	conf_name(name, sizeof name, "stats");
	dlock_client *client = conf_open();
	dlock_lock *lock = conf_lock(client, name);
	if (lock && CONF_ASSERT_ST(conf_acquire(lock, 0), DLOCK_OK)) {
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
		dlock_client_stats s = conf_stats(client);
		CU_ASSERT_EQUAL(s.acquired, 1);
		CU_ASSERT_EQUAL(s.reentered, 0);
		CU_ASSERT_EQUAL(s.server_acquires, 1);
		CU_ASSERT_EQUAL(s.server_releases, 1);
		CU_ASSERT_EQUAL(s.lost, 0);
	}
	dlock_lock_free(lock);
	conf_close(client);
}

/* ------------------------------------------------------- reentrancy */

static void assert_same_token(dlock_lock *lock, uint64_t first)
{
	uint64_t again = 0;
	if (conf_caps()->fencing == DLOCK_FENCING_NONE)
		return;
	CONF_ASSERT_ST(dlock_lock_fencing_token(lock, &again), DLOCK_OK);
	CU_ASSERT_EQUAL(again, first);
}

static void test_reentrant_same_handle(void)
{
	held_fixture f;
	if (!held_setup(&f, "reentrant")) {
		held_teardown(&f);
		return;
	}
	uint64_t token = 0;
	if (conf_caps()->fencing != DLOCK_FENCING_NONE)
		CONF_ASSERT_ST(dlock_lock_fencing_token(f.held, &token), DLOCK_OK);
	dlock_client_stats before = conf_stats(f.holder);
	CONF_ASSERT_ST(conf_acquire(f.held, 0), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(f.held, DLOCK_WAIT_FOREVER), DLOCK_OK);
	dlock_client_stats after = conf_stats(f.holder);
	CU_ASSERT_EQUAL(after.reentered, before.reentered + 2);
	CU_ASSERT_EQUAL(after.acquired, before.acquired + 2);
	CU_ASSERT_EQUAL(after.server_acquires, before.server_acquires);
	assert_same_token(f.held, token);

	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(f.other, f.name), DLOCK_EBUSY);
	CONF_ASSERT_ST2(dlock_check(f.held), DLOCK_OK, DLOCK_ENOTSUP);
	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(f.other, f.name), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_ENOTHELD);
	held_teardown(&f);
}

static void test_reentrant_two_handles_deadlock(void)
{
#ifdef DLOCK_CONFORMANCE_LOOP
	dlock_test_skip_part("loop mode: reentrancy is per handle, so another handle of the name waits its turn instead"
	                     " of DLOCK_EDEADLK (dlock/loop.h; loop_second_handle_waits tests it)");
	return;
#endif
	held_fixture f;
	if (!held_setup(&f, "two-handles")) {
		held_teardown(&f);
		return;
	}
	dlock_lock *second = conf_lock(f.holder, f.name);
	CONF_ASSERT_ST(conf_acquire(second, 0), DLOCK_EBUSY);
	int64_t t0 = dlock_test_now_ms();
	CONF_ASSERT_ST(conf_acquire(second, 5000), DLOCK_EDEADLK);
	CU_ASSERT(dlock_test_now_ms() - t0 < CONF_SLACK_MS);

	conf_watchdog dog;
	conf_watchdog_start(&dog, second, 5000);
	CONF_ASSERT_ST(conf_acquire(second, DLOCK_WAIT_FOREVER), DLOCK_EDEADLK);
	CU_ASSERT(!conf_watchdog_stop(&dog));

	CONF_ASSERT_ST(dlock_release(second), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_test_probe(f.other, f.name), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(second, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(second), DLOCK_OK);
	dlock_lock_free(second);
	held_teardown(&f);
}

/*
 * A thread that acquired and ended is not the owner of the next thread the
 * system starts, even when that thread gets the same pthread_t (glibc hands
 * out a joined thread's id again): the new thread's try-once of the held
 * handle is refused, and another handle of the same name waits and times
 * out instead of being refused as a deadlock.  For a mutex, a writer (whose
 * handle a reader's acquisition of its own thread would reenter) and a
 * semaphore whose every permit of the client the ended thread holds.
 */
typedef struct ended_step {
	dlock_lock *first, *second; /* acquired in this order; second may be NULL */
	dlock_lock_mode mode;
	int64_t first_wait_ms, second_wait_ms;
	dlock_status first_st, second_st;
} ended_step;

static void *ended_run(void *arg)
{
	ended_step *s = arg;
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.mode = s->mode;
	o.wait_ms = s->first_wait_ms;
	s->first_st = dlock_acquire(s->first, &o);
	if (s->second) {
		o.wait_ms = s->second_wait_ms;
		s->second_st = dlock_acquire(s->second, &o);
	}
	return NULL;
}

/* Run `s` in a new thread and wait for it to end; *id is the thread's pthread_t. */
static void ended_in_thread(ended_step *s, pthread_t *id)
{
	if (pthread_create(id, NULL, ended_run, s) != 0)
		abort();
	pthread_join(*id, NULL);
}

/* Thread A takes `mine` (and `mine2`) and ends; thread C then tries `mine` once and waits 300 ms on `other`.
 * Adds 1 to *reused when C had A's pthread_t. */
static void ended_owner_case(dlock_lock *mine, dlock_lock *mine2, dlock_lock *other, dlock_lock_mode mode,
                             int *reused)
{
	pthread_t a, c;
	ended_step take = { mine, mine2, DLOCK_MODE_EXCLUSIVE, 0, 0, DLOCK_STATUS_COUNT_, DLOCK_OK };
	ended_in_thread(&take, &a);
	if (!CONF_ASSERT_ST(take.first_st, DLOCK_OK) || !CONF_ASSERT_ST(take.second_st, DLOCK_OK))
		return;
	ended_step probe = { mine, other, mode, 0, 300, DLOCK_STATUS_COUNT_, DLOCK_STATUS_COUNT_ };
	ended_in_thread(&probe, &c);
	*reused += pthread_equal(a, c) != 0;
	CONF_ASSERT_ST(probe.first_st, DLOCK_EBUSY);
	CONF_ASSERT_ST(probe.second_st, DLOCK_ETIMEDOUT);
	/* Released from this thread, as any handle may be; then the other handle gets it. */
	CONF_ASSERT_ST(dlock_release(mine), DLOCK_OK);
	if (mine2)
		CONF_ASSERT_ST(dlock_release(mine2), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(mine), DLOCK_ENOTHELD);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.mode = mode;
	o.wait_ms = CONF_LONG_WAIT_MS;
	CONF_ASSERT_ST(dlock_acquire(other, &o), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(other), DLOCK_OK);
}

static void test_owner_thread_ended(void)
{
#ifdef DLOCK_CONFORMANCE_LOOP
	dlock_test_skip_part("loop mode: a hold belongs to its handle, not to a thread (dlock/loop.h;"
	                     " loop_reentrant_per_handle tests it)");
	return;
#endif
	char name[128];
	int reused = 0, cases = 0;
	dlock_client *client = conf_open();
	if (!client)
		return;

	conf_name(name, sizeof name, "ended-mutex");
	dlock_lock *h = conf_lock(client, name), *other = conf_lock(client, name);
	if (h && other) {
		ended_owner_case(h, NULL, other, DLOCK_MODE_EXCLUSIVE, &reused);
		cases++;
	}
	dlock_lock_free(h);
	dlock_lock_free(other);

	conf_name(name, sizeof name, "ended-rw");
	h = other = NULL;
	dlock_status st = dlock_rwlock_new(client, name, &h);
	if (st == DLOCK_OK && CONF_ASSERT_ST(dlock_rwlock_new(client, name, &other), DLOCK_OK)) {
		ended_owner_case(h, NULL, other, DLOCK_MODE_SHARED, &reused);
		cases++;
	} else {
		CONF_ASSERT_ST2(st, DLOCK_OK, DLOCK_ENOTSUP);
	}
	dlock_lock_free(h);
	dlock_lock_free(other);

	conf_name(name, sizeof name, "ended-sem");
	dlock_lock *h2 = NULL;
	h = other = NULL;
	st = dlock_semaphore_new(client, name, 2, &h);
	if (st == DLOCK_OK && CONF_ASSERT_ST(dlock_semaphore_new(client, name, 2, &h2), DLOCK_OK) &&
	    CONF_ASSERT_ST(dlock_semaphore_new(client, name, 2, &other), DLOCK_OK)) {
		ended_owner_case(h, h2, other, DLOCK_MODE_EXCLUSIVE, &reused);
		cases++;
	} else {
		CONF_ASSERT_ST2(st, DLOCK_OK, DLOCK_ENOTSUP);
	}
	dlock_lock_free(h);
	dlock_lock_free(h2);
	dlock_lock_free(other);
	conf_close(client);
	if (reused < cases)
		printf("\n    note: the system gave the ended thread's id again in %d of %d cases", reused, cases);
}

/* ------------------------------------------------------- cancel, close */

static int cancel_until_done(void *arg)
{
	conf_waiter *w = arg;
	if (conf_waiter_done(w))
		return 1;
	dlock_status st = dlock_cancel(w->lock);
	if (st != DLOCK_OK)
		CONF_ASSERT_ST(st, DLOCK_OK);
	return 0;
}

/*
 * A waiting acquire that is cancelled returns DLOCK_ECANCELED promptly (a
 * waiter that polls has its sleep cut short); neither it nor a waiter that
 * timed out leaves anything behind that would keep another client out.
 */
static void test_cancel_waiting_acquire(void)
{
	held_fixture f;
	if (!held_setup(&f, "cancel")) {
		held_teardown(&f);
		return;
	}
	conf_waiter w;
	dlock_lock *lock = start_blocked_waiter(&f, &w);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT(dlock_test_await(cancel_until_done, &w, 5000));
	int64_t took = dlock_test_now_ms() - t0;
	if (took >= CONF_SLACK_MS)
		printf("\n    the cancelled acquire returned after %lld ms", (long long)took);
	CU_ASSERT(took < CONF_SLACK_MS);
	CONF_ASSERT_ST(conf_waiter_join(&w, CONF_AWAIT_MS), DLOCK_ECANCELED);

	/* A cancel affects only the acquire in progress. */
	CONF_ASSERT_ST(dlock_cancel(lock), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(lock, 100), DLOCK_ETIMEDOUT);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_release(f.held), DLOCK_OK);
	/* Neither waiter left anything: another client gets the name at once. */
	CONF_ASSERT_ST(dlock_test_probe(f.holder, f.name), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(lock, 0), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	held_teardown(&f);
}

static void test_close_cancels_waiter(void)
{
	held_fixture f;
	if (!held_setup(&f, "close-waiter")) {
		held_teardown(&f);
		return;
	}
	conf_waiter w;
	dlock_lock *lock = start_blocked_waiter(&f, &w);
	CONF_ASSERT_ST(dlock_client_close(f.other), DLOCK_OK);
	f.other = NULL;
	CONF_ASSERT_ST(conf_waiter_join(&w, CONF_AWAIT_MS), DLOCK_ECANCELED);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_ENOTHELD);
	dlock_lock_free(lock);
	CONF_ASSERT_ST2(dlock_check(f.held), DLOCK_OK, DLOCK_ENOTSUP);
	held_teardown(&f);
}

static void test_close_releases_held(void)
{
	char a[128], b[128];
	conf_name(a, sizeof a, "close-held-a");
	conf_name(b, sizeof b, "close-held-b");
	dlock_client *client = conf_open();
	dlock_client *other = conf_open();
	dlock_lock *la = conf_lock(client, a);
	dlock_lock *lb = conf_lock(client, b);
	if (la && lb && other) {
		CONF_ASSERT_ST(conf_acquire(la, 0), DLOCK_OK);
		CONF_ASSERT_ST(conf_acquire(lb, 0), DLOCK_OK);
		CONF_ASSERT_ST(conf_acquire(lb, 0), DLOCK_OK);
		CONF_ASSERT_ST(dlock_test_probe(other, a), DLOCK_EBUSY);
		CONF_ASSERT_ST(dlock_client_close(client), DLOCK_OK);
		client = NULL;
		CONF_ASSERT_ST(dlock_test_probe(other, a), DLOCK_OK);
		CONF_ASSERT_ST(dlock_test_probe(other, b), DLOCK_OK);
		CONF_ASSERT_ST(dlock_release(la), DLOCK_ENOTHELD);
		CONF_ASSERT_ST(dlock_release(lb), DLOCK_ENOTHELD);
	}
	dlock_lock_free(la);
	dlock_lock_free(lb);
	conf_close(client);
	conf_close(other);
}

/* ------------------------------------------------------- many names */

#define MANY 200

static void test_many_names(void)
{
	dlock_client *client = conf_open();
	dlock_client *other = conf_open();
	dlock_lock *locks[MANY] = { NULL };
	char names[MANY][96];
	int ok = client && other;
	for (int i = 0; ok && i < MANY; i++) {
		conf_name(names[i], sizeof names[i], "many");
		ok = (locks[i] = conf_lock(client, names[i])) != NULL;
		ok = ok && CONF_ASSERT_ST(conf_acquire(locks[i], 0), DLOCK_OK);
	}
	for (int i = 0; ok && i < MANY; i += 7)
		CONF_ASSERT_ST(dlock_test_probe(other, names[i]), DLOCK_EBUSY);
	for (int i = 0; ok && i < MANY; i++)
		CONF_ASSERT_ST(dlock_release(locks[i]), DLOCK_OK);
	for (int i = 0; ok && i < MANY; i++)
		CONF_ASSERT_ST(dlock_test_probe(other, names[i]), DLOCK_OK);
	if (ok) {
		dlock_client_stats s = conf_stats(client);
		CU_ASSERT_EQUAL(s.server_acquires, MANY);
		CU_ASSERT_EQUAL(s.server_releases, MANY);
	}
	for (int i = 0; i < MANY; i++)
		dlock_lock_free(locks[i]);
	conf_close(other);
	conf_close(client);
}

const conf_test conf_wait_tests[] = {
	{ "try_once_busy", test_try_once_busy },
	{ "bounded_wait_times_out", test_bounded_wait_times_out },
	{ "wait_forever_gets_released_lock", test_wait_forever_gets_released_lock },
	{ "release_by_non_owner", test_release_by_non_owner },
	{ "release_never_acquired", test_release_never_acquired },
	{ "stats_one_cycle", test_stats_one_cycle },
	{ "reentrant_same_handle", test_reentrant_same_handle },
	{ "reentrant_two_handles_deadlock", test_reentrant_two_handles_deadlock },
	{ "owner_thread_ended", test_owner_thread_ended },
	{ "cancel_waiting_acquire", test_cancel_waiting_acquire },
	{ "close_cancels_waiter", test_close_cancels_waiter },
	{ "close_releases_held", test_close_releases_held },
	{ "many_names", test_many_names },
	{ NULL, NULL },
};
