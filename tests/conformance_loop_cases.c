/*
 * Conformance, loop mode only (conformance_loop): what dlock/loop.h
 * defines otherwise than the blocking API.  Reentrancy is per handle: a
 * handle acquired again, from any thread, goes up a level with no server
 * call, and another handle of the name on the same client waits its turn
 * (it is never DLOCK_EDEADLK).  On the loop's thread the blocking forms of
 * the server operations answer DLOCK_EDEADLK and change nothing, while the
 * calls that do not talk to the server work.  A lost-lock callback runs on
 * the loop thread, releases with the asynchronous form, and a loss frees
 * the client's other handles of the name without the lost handle's release.
 *
 * The calls go through the loop clients of support/testloop.c, as in the
 * rest of the suite; testloop_run_on_loop() runs a function on a client's
 * loop thread.
 */
#include "conformance.h"

#include <stdio.h>
#include <string.h>

#include "dlock/loop.h"

#define LOOP_SHORT_LEASE_MS 300

/* ------------------------------------------------------- reentrancy per handle */

/*
 * A handle that one thread acquired is acquired again by another thread
 * at once: the hold count goes up (no server call, the same token); one
 * release keeps the lock, the second frees it.
 */
static void test_loop_reentrant_per_handle(void)
{
	char name[128];
	conf_name(name, sizeof name, "loop-reentry");
	dlock_client *client = conf_open(), *other = conf_open();
	dlock_lock *lock = conf_lock(client, name);
	int fenced = conf_caps()->fencing != DLOCK_FENCING_NONE;
	if (!other || !lock || !CONF_ASSERT_ST(conf_acquire(lock, 0), DLOCK_OK))
		goto out;
	uint64_t token = fenced ? dlock_test_token(lock) : 0;
	dlock_client_stats before = conf_stats(client);
	conf_waiter w;
	conf_waiter_start(&w, lock, 0, 0, NULL); /* try once, from another thread */
	CONF_ASSERT_ST(conf_waiter_join(&w, CONF_AWAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(conf_acquire(lock, DLOCK_WAIT_FOREVER), DLOCK_OK); /* and from this one */
	dlock_client_stats after = conf_stats(client);
	CU_ASSERT_EQUAL(after.reentered, before.reentered + 2);
	CU_ASSERT_EQUAL(after.server_acquires, before.server_acquires);
	if (fenced)
		CU_ASSERT_EQUAL(dlock_test_token(lock), token);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_EBUSY);
	CONF_ASSERT_ST2(dlock_check(lock), DLOCK_OK, DLOCK_ENOTSUP);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_ENOTHELD);
out:
	dlock_lock_free(lock);
	conf_close(other);
	conf_close(client);
}

/*
 * A second handle of the name on the same client, from the thread that
 * holds the first: busy when it tries once, times out when it waits (never
 * DLOCK_EDEADLK), and is granted once the first is released.
 */
static void test_loop_second_handle_waits(void)
{
	enum { BOUND = 200 };
	char name[128];
	conf_name(name, sizeof name, "loop-second");
	dlock_client *client = conf_open(), *other = conf_open();
	dlock_lock *first = conf_lock(client, name), *second = conf_lock(client, name);
	if (!other || !first || !second || !CONF_ASSERT_ST(conf_acquire(first, 0), DLOCK_OK))
		goto out;
	CONF_ASSERT_ST(conf_acquire(second, 0), DLOCK_EBUSY);
	int64_t t0 = dlock_test_now_ms();
	CONF_ASSERT_ST(conf_acquire(second, BOUND), DLOCK_ETIMEDOUT);
	CU_ASSERT(dlock_test_now_ms() - t0 >= BOUND - 20);
	conf_waiter w;
	conf_waiter_start(&w, second, CONF_LONG_WAIT_MS, 0, NULL);
	conf_waiter_await_blocked(&w, NULL, 0); /* queued in the client behind `first` */
	CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(first), DLOCK_OK);
	if (CONF_ASSERT_ST(conf_waiter_join(&w, CONF_LONG_WAIT_MS), DLOCK_OK)) {
		CONF_ASSERT_ST(conf_acquire(first, 0), DLOCK_EBUSY);
		CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_EBUSY);
		CONF_ASSERT_ST(dlock_release(second), DLOCK_OK);
	}
	CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_OK);
out:
	dlock_lock_free(first);
	dlock_lock_free(second);
	conf_close(other);
	conf_close(client);
}

/* ------------------------------------------------------- blocking calls on the loop thread */

/* What the blocking forms answered on the loop thread. */
typedef struct on_loop {
	dlock_client *client;
	dlock_lock *held, *free_lock;
	dlock_election *e; /* NULL where the backend has no elections */
	const char *name, *free_name;
	int on_loop_thread;
	dlock_status acquire, acquire_wait, release, extend, check, inspect, list, brk;
	dlock_status campaign, proclaim, resign, leader;
	dlock_status lock_new, stats;
	char text[512]; /* the client's text after the refused acquire */
} on_loop;

static void blocking_calls(void *arg)
{
	on_loop *s = arg;
	s->on_loop_thread = testloop_on_loop_thread(s->client);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	s->acquire = dlock_acquire(s->free_lock, &o);
	snprintf(s->text, sizeof s->text, "%s", dlock_client_errmsg(s->client));
	o.wait_ms = 1000;
	s->acquire_wait = dlock_acquire(s->free_lock, &o);
	s->release = dlock_release(s->held);
	s->extend = dlock_extend(s->held, 0);
	s->check = dlock_check(s->held);
	dlock_lock_info *info = NULL;
	s->inspect = dlock_inspect(s->client, s->name, &info);
	dlock_lock_info_free(info);
	dlock_lock_list *list = NULL;
	s->list = dlock_list(s->client, NULL, &list);
	dlock_lock_list_free(list);
	size_t broken = 0;
	s->brk = dlock_break(s->client, s->free_name, &broken);
	if (s->e) {
		s->campaign = dlock_campaign(s->e, "on-loop", &o, NULL);
		s->proclaim = dlock_proclaim(s->e, "on-loop");
		s->resign = dlock_resign(s->e);
		dlock_leader *leader = NULL;
		s->leader = dlock_election_leader(s->e, &leader);
		dlock_leader_free(leader);
	}
	/* Calls that do not talk to the server work there. */
	dlock_lock *made = NULL;
	s->lock_new = dlock_lock_new(s->client, s->free_name, &made);
	dlock_lock_free(made);
	dlock_client_stats stats;
	s->stats = dlock_client_get_stats(s->client, &stats);
}

/*
 * On the loop thread every blocking server operation answers DLOCK_EDEADLK
 * with a message and changes nothing (the held lock stays held, the free
 * one free, no campaign leads); making a handle and reading the counters
 * work there.
 */
static void test_loop_blocking_calls_on_loop_thread(void)
{
	char name[128], free_name[128];
	conf_name(name, sizeof name, "loop-blocking");
	conf_name(free_name, sizeof free_name, "loop-blocking-free");
	dlock_client *client = conf_open(), *other = conf_open();
	on_loop s;
	memset(&s, 0, sizeof s);
	s.client = client;
	s.name = name;
	s.free_name = free_name;
	s.held = conf_lock(client, name);
	s.free_lock = conf_lock(client, free_name);
	int64_t elections = -1;
	if (!other || !s.held || !s.free_lock || !CONF_ASSERT_ST(conf_acquire(s.held, 0), DLOCK_OK))
		goto out;
	CONF_ASSERT_ST(dlock_client_feature(client, DLOCK_FEATURE_ELECTION, &elections), DLOCK_OK);
	if (elections >= 0)
		CONF_ASSERT_ST(dlock_election_new(client, free_name, &s.e), DLOCK_OK);
	CU_ASSERT(!testloop_on_loop_thread(client));
	CONF_ASSERT_ST(testloop_run_on_loop(client, blocking_calls, &s), DLOCK_OK);
	CU_ASSERT(s.on_loop_thread);
	CONF_ASSERT_ST(s.acquire, DLOCK_EDEADLK);
	CU_ASSERT(s.text[0] != '\0');
	CONF_ASSERT_ST(s.acquire_wait, DLOCK_EDEADLK);
	CONF_ASSERT_ST(s.release, DLOCK_EDEADLK);
	CONF_ASSERT_ST(s.extend, DLOCK_EDEADLK);
	CONF_ASSERT_ST(s.check, DLOCK_EDEADLK);
	CONF_ASSERT_ST(s.inspect, DLOCK_EDEADLK);
	CONF_ASSERT_ST(s.list, DLOCK_EDEADLK);
	CONF_ASSERT_ST(s.brk, DLOCK_EDEADLK);
	if (s.e) {
		CONF_ASSERT_ST(s.campaign, DLOCK_EDEADLK);
		CONF_ASSERT_ST(s.proclaim, DLOCK_EDEADLK);
		CONF_ASSERT_ST(s.resign, DLOCK_EDEADLK);
		CONF_ASSERT_ST(s.leader, DLOCK_EDEADLK);
	}
	CONF_ASSERT_ST(s.lock_new, DLOCK_OK);
	CONF_ASSERT_ST(s.stats, DLOCK_OK);
	/* Nothing changed: the held lock is held, the free name free and nobody leads it. */
	CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_EBUSY);
	CONF_ASSERT_ST(dlock_release(s.held), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_OK);
	CONF_ASSERT_ST(dlock_test_probe(other, free_name), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(s.free_lock), DLOCK_ENOTHELD);
out:
	dlock_election_free(s.e);
	dlock_lock_free(s.held);
	dlock_lock_free(s.free_lock);
	conf_close(other);
	conf_close(client);
}

/* ------------------------------------------------------- losses on the loop */

/* What the lost-lock callback did on the loop thread. */
typedef struct loop_lost {
	dlock_client *client;
	atomic_int calls;
	atomic_int on_loop_thread;
	atomic_int reason;
	atomic_int blocking_release; /* dlock_release() there */
	atomic_int async_release;    /* dlock_release_async(): its start's refusal, or its callback's status */
	atomic_int async_done;
} loop_lost;

static void on_async_release(dlock_lock *lock, dlock_status st, void *userdata)
{
	loop_lost *r = userdata;
	(void)lock;
	atomic_store(&r->async_release, (int)st);
	atomic_store(&r->async_done, 1);
}

static void on_lost_on_loop(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	loop_lost *r = userdata;
	(void)detail;
	atomic_store(&r->on_loop_thread, testloop_on_loop_thread(r->client));
	atomic_store(&r->reason, (int)reason);
	atomic_store(&r->blocking_release, (int)dlock_release(lock));
	dlock_status st = dlock_release_async(lock, on_async_release, r);
	if (st != DLOCK_OK) {
		atomic_store(&r->async_release, (int)st);
		atomic_store(&r->async_done, 1);
	}
	atomic_fetch_add(&r->calls, 1);
}

static int async_release_done(void *arg)
{
	return atomic_load(&((loop_lost *)arg)->async_done);
}

/*
 * TTL: the lease runs out; the callback runs once, on the loop thread, where
 * the blocking release answers DLOCK_EDEADLK and the asynchronous one ends
 * the lost hold (DLOCK_ENOTHELD); another client then gets the name.
 */
static void test_loop_lost_callback(void)
{
	if (conf_caps()->lease != DLOCK_LEASE_TTL) {
		dlock_test_skip_part("session lease: no way to lose a lock while the client lives");
		return;
	}
	char name[128];
	conf_name(name, sizeof name, "loop-lost");
	dlock_client *client = conf_open(), *other = conf_open();
	dlock_lock *lock = conf_lock(client, name), *next = NULL;
	loop_lost r;
	memset(&r, 0, sizeof r);
	r.client = client;
	r.blocking_release = r.async_release = DLOCK_STATUS_COUNT_;
	if (!other || !lock ||
	    !CONF_ASSERT_ST(dlock_test_acquire(lock, 0, LOOP_SHORT_LEASE_MS, 0, on_lost_on_loop, &r), DLOCK_OK))
		goto out;
	CU_ASSERT(dlock_test_await(async_release_done, &r, LOOP_SHORT_LEASE_MS + CONF_AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 1);
	CU_ASSERT(atomic_load(&r.on_loop_thread));
	CU_ASSERT_EQUAL(atomic_load(&r.reason), DLOCK_LOST_EXPIRED);
	CONF_ASSERT_ST((dlock_status)atomic_load(&r.blocking_release), DLOCK_EDEADLK);
	CONF_ASSERT_ST((dlock_status)atomic_load(&r.async_release), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_ENOTHELD);
	next = conf_lock(other, name);
	if (next && CONF_ASSERT_ST(conf_acquire(next, CONF_AWAIT_MS), DLOCK_OK))
		CONF_ASSERT_ST(dlock_release(next), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 1);
out:
	dlock_lock_free(next);
	dlock_lock_free(lock);
	conf_close(other);
	conf_close(client);
}

/*
 * TTL: a lost holder does not keep the client's other handle of the name
 * waiting: that handle's waiter gets it, and the lost handle's release
 * then says DLOCK_ENOTHELD with no server call.
 */
static void test_loop_lost_frees_local_waiter(void)
{
	if (conf_caps()->lease != DLOCK_LEASE_TTL) {
		dlock_test_skip_part("session lease: each backend's own tests end the session");
		return;
	}
	char name[128];
	conf_name(name, sizeof name, "loop-lost-local");
	dlock_client *client = conf_open(), *other = conf_open();
	dlock_lock *m1 = conf_lock(client, name), *m2 = conf_lock(client, name);
	dlock_test_lost lost;
	memset(&lost, 0, sizeof lost);
	if (!other || !m1 || !m2 ||
	    !CONF_ASSERT_ST(dlock_test_acquire(m1, 0, 3 * LOOP_SHORT_LEASE_MS, 0, dlock_test_on_lost, &lost), DLOCK_OK))
		goto out;
	conf_waiter w;
	conf_waiter_start(&w, m2, CONF_LONG_WAIT_MS, 0, NULL);
	conf_waiter_await_blocked(&w, NULL, 0); /* queued in the client, not on the server */
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, 3 * LOOP_SHORT_LEASE_MS + CONF_AWAIT_MS));
	if (CONF_ASSERT_ST(conf_waiter_join(&w, CONF_AWAIT_MS), DLOCK_OK)) {
		uint64_t releases = conf_stats(client).server_releases;
		CONF_ASSERT_ST(dlock_release(m1), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(conf_stats(client).server_releases, releases);
		CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_EBUSY); /* m2 holds it */
		CONF_ASSERT_ST(dlock_release(m2), DLOCK_OK);
		CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
out:
	dlock_lock_free(m1);
	dlock_lock_free(m2);
	conf_close(other);
	conf_close(client);
}

const conf_test conf_loop_tests[] = {
	{ "loop_reentrant_per_handle", test_loop_reentrant_per_handle },
	{ "loop_second_handle_waits", test_loop_second_handle_waits },
	{ "loop_blocking_calls_on_loop_thread", test_loop_blocking_calls_on_loop_thread },
	{ "loop_lost_callback", test_loop_lost_callback },
	{ "loop_lost_frees_local_waiter", test_loop_lost_frees_local_waiter },
	{ NULL, NULL },
};
