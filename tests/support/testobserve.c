/* What an election's observer was told (testobserve.h). */
#include "testobserve.h"

#include <stdio.h>
#include <string.h>

#include "testsupport.h"

void dlock_test_observer_init(dlock_test_observer *o)
{
	memset(o, 0, sizeof *o);
	pthread_mutex_init(&o->mu, NULL);
}

void dlock_test_observer_destroy(dlock_test_observer *o)
{
	pthread_mutex_destroy(&o->mu);
}

void dlock_test_on_leader(dlock_election *e, const dlock_leader *leader, void *userdata)
{
	dlock_test_observer *o = userdata;
	(void)e;
	pthread_mutex_lock(&o->mu);
	o->elected = leader->elected;
	o->term = leader->term;
	snprintf(o->value, sizeof o->value, "%s", leader->value ? leader->value : "(null)");
	if (o->calls < DLOCK_TEST_OBSERVER_HISTORY) {
		o->history[o->calls].elected = leader->elected;
		o->history[o->calls].term = leader->term;
	}
	o->calls++;
	if (leader->elected && leader->term < o->highest)
		o->went_back = 1;
	if (leader->elected && leader->term > o->highest)
		o->highest = leader->term;
	pthread_mutex_unlock(&o->mu);
}

size_t dlock_test_observer_calls(dlock_test_observer *o)
{
	pthread_mutex_lock(&o->mu);
	size_t n = o->calls;
	pthread_mutex_unlock(&o->mu);
	return n;
}

int dlock_test_observer_went_back(dlock_test_observer *o)
{
	pthread_mutex_lock(&o->mu);
	int back = o->went_back;
	pthread_mutex_unlock(&o->mu);
	return back;
}

/* What the latest call must say: elected with a term in (over, exact or any] and `value`, or nobody. */
struct want {
	dlock_test_observer *o;
	int elected;
	uint64_t term_over, term; /* term 0: any */
	const char *value;        /* NULL: any */
};

static int reached(void *arg)
{
	const struct want *w = arg;
	dlock_test_observer *o = w->o;
	pthread_mutex_lock(&o->mu);
	int ok = o->calls > 0 && o->elected == w->elected &&
	         (!w->elected || (o->term > w->term_over && (!w->term || o->term == w->term))) &&
	         (!w->value || strcmp(o->value, w->value) == 0);
	pthread_mutex_unlock(&o->mu);
	return ok;
}

static int await_want(const struct want *w, int64_t ms)
{
	int64_t t0 = dlock_test_now_ms();
	int ok = dlock_test_await(reached, (void *)w, ms);
	if (!ok) {
		dlock_test_observer *o = w->o;
		pthread_mutex_lock(&o->mu);
		printf("\n    observer after %lld ms: calls %zu elected %d term %llu value \"%.40s\"; wanted ",
		       (long long)(dlock_test_now_ms() - t0), o->calls, o->elected, (unsigned long long)o->term,
		       o->value);
		pthread_mutex_unlock(&o->mu);
		if (!w->elected)
			printf("nobody");
		else if (w->term)
			printf("term %llu value \"%.40s\"", (unsigned long long)w->term, w->value ? w->value : "*");
		else
			printf("term > %llu value \"%.40s\"", (unsigned long long)w->term_over,
			       w->value ? w->value : "*");
	}
	return ok;
}

int dlock_test_observed_after(dlock_test_observer *o, const char *value, uint64_t term_over, int64_t ms)
{
	struct want w = { o, 1, term_over, 0, value };
	return await_want(&w, ms);
}

int dlock_test_observed(dlock_test_observer *o, const char *value, uint64_t term, int64_t ms)
{
	struct want w = { o, 1, 0, term, value };
	return await_want(&w, ms);
}

int dlock_test_observed_nobody(dlock_test_observer *o, int64_t ms)
{
	struct want w = { o, 0, 0, 0, "" };
	return await_want(&w, ms);
}
