/* Campaigns for the election test programs (testelect.h). */
#include "testelect.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dlock_status dlock_test_campaign(dlock_election *e, const char *value, int64_t wait_ms, int64_t lease_ms, int renew,
                                 dlock_test_lost *lost, uint64_t *term)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.lease_ms = lease_ms;
	o.renewal = dlock_test_switch(renew);
	o.on_lost = lost ? dlock_test_on_lost : NULL;
	o.lost_userdata = lost;
	return dlock_campaign(e, value, &o, term);
}

static void *candidate_run(void *arg)
{
	dlock_test_candidate *c = arg;
	atomic_store(&c->started, 1);
	c->status = dlock_test_campaign(c->e, c->value, c->wait_ms, 0, -1, &c->lost, &c->term);
	atomic_store(&c->done, 1);
	return NULL;
}

void dlock_test_candidate_start(dlock_test_candidate *c, dlock_election *e, const char *value, int64_t wait_ms)
{
	memset(c, 0, sizeof *c);
	c->e = e;
	c->value = value;
	c->wait_ms = wait_ms;
	c->status = DLOCK_STATUS_COUNT_;
	if (pthread_create(&c->thread, NULL, candidate_run, c) != 0)
		abort();
}

static int candidate_started(void *arg)
{
	return atomic_load(&((dlock_test_candidate *)arg)->started);
}

int dlock_test_candidate_done(void *arg)
{
	return atomic_load(&((dlock_test_candidate *)arg)->done);
}

void dlock_test_candidate_await_blocked(dlock_test_candidate *c, dlock_client *client, uint64_t base_server_acquires,
                                        int64_t await_ms)
{
	CU_ASSERT(dlock_test_await(candidate_started, c, await_ms));
	dlock_test_count count = { client, base_server_acquires + 1 };
	dlock_test_await(dlock_test_attempted, &count, 300);
	dlock_test_sleep_ms(50);
	CU_ASSERT(!dlock_test_candidate_done(c));
}

int dlock_test_candidate_cancel(void *arg)
{
	dlock_test_candidate *c = arg;
	if (dlock_test_candidate_done(c))
		return 1;
	dlock_cancel(dlock_election_lock(c->e));
	return 0;
}

dlock_status dlock_test_candidate_join(dlock_test_candidate *c, int64_t timeout_ms)
{
	if (!dlock_test_await(dlock_test_candidate_done, c, timeout_ms)) {
		printf("\n    campaign still blocked after %lld ms: cancelling it", (long long)timeout_ms);
		CU_FAIL("campaign did not return in time");
		if (!dlock_test_await(dlock_test_candidate_cancel, c, 10000)) {
			printf("\nFATAL: a cancelled campaign never returned; stopping the program\n");
			abort();
		}
	}
	pthread_join(c->thread, NULL);
	return c->status;
}
