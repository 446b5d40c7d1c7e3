/* The loop tests' target, their cast and the helpers they share (see loop_cases.h). */
#include "loop_cases.h"
#include "faultproxy.h"
#include "faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lc_target current;

int lc_set_target(const lc_target *t)
{
	current = *t;
	return 0;
}

const lc_target *lc_get_target(void)
{
	return &current;
}

void lc_add_all(CU_pSuite suite)
{
	const lc_case *tables[] = { lc_acquire_cases, lc_lifetime_cases, lc_ops_cases };
	for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
		for (const lc_case *c = tables[i]; c->name; c++)
			CU_add_test(suite, c->name, c->fn);
}

int lc_begin(lc *t, const char *tag)
{
	memset(t, 0, sizeof *t);
	lr_name(t->name, sizeof t->name, tag);
	t->lp = lr_loop_new(current.mode);
	t->tc = lr_open_ready(t->lp, current.uri);
	t->other = dlock_test_open(current.uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(t->other);
	if (t->tc && t->other)
		return 1;
	lc_end(t);
	return 0;
}

void lc_end(lc *t)
{
	if (t->tc && !t->tc->gone)
		lr_close(t->tc);
	if (t->other)
		CU_ASSERT_EQUAL(dlock_client_close(t->other), DLOCK_OK);
	lr_loop_free(t->lp); /* closes, blocking, a client whose open failed its test */
	memset(t, 0, sizeof *t);
}

dlock_lock *lc_lock(lc *t, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(t->tc->client, name);
	CU_ASSERT_PTR_NOT_NULL(l);
	return l;
}

dlock_lock *lc_other_lock(lc *t, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(t->other, name);
	CU_ASSERT_PTR_NOT_NULL(l);
	return l;
}

/* Run the loop until the loop client made `want` driver acquire calls; asserted. */
static int lc_await_attempts(lc *t, uint64_t want)
{
	lc_progress a = { t->tc, want, NULL, 0 };
	int ok = lr_run_until(t->lp, lc_attempted, &a, LR_AWAIT_MS);
	if (!ok)
		printf("\n    the loop client's statistics never showed %llu driver acquire calls (%llu)",
		       (unsigned long long)want, (unsigned long long)lc_attempts(t->tc));
	CU_ASSERT(ok);
	return ok;
}

void lc_start_waiting(lc *t, dlock_lock *lock, int64_t wait_ms, lr_op *op)
{
	lr_op_init(op, t->tc);
	uint64_t before = lc_attempts(t->tc);
	CU_ASSERT_EQUAL(lr_acquire(lock, wait_ms, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, op), DLOCK_OK);
	lc_await_attempts(t, before + 1);
}

int lc_contended_begin(lc_contended *c, const char *tag)
{
	if (!lc_begin(&c->t, tag))
		return 0;
	c->h = lc_lock(&c->t, c->t.name);
	c->o = lc_other_lock(&c->t, c->t.name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(c->o, 0, 0, -1, NULL, NULL), DLOCK_OK);
	return 1;
}

void lc_contended_end(lc_contended *c)
{
	CU_ASSERT_EQUAL(dlock_check(c->o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(c->o), DLOCK_OK);
	/* Nothing was left behind, and the handle works on. */
	CU_ASSERT_EQUAL(lr_acquire_now(c->t.tc, c->h, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(c->t.tc, c->h), DLOCK_OK);
	dlock_lock_free(c->h);
	dlock_lock_free(c->o);
	lc_end(&c->t);
}

struct probe {
	lc *t;
	const char *name;
};

static int other_gets_it(void *arg)
{
	struct probe *p = arg;
	return dlock_test_probe(p->t->other, p->name) == DLOCK_OK;
}

int lc_await_free(lc *t, const char *name)
{
	struct probe p = { t, name };
	int ok = lr_run_until(t->lp, other_gets_it, &p, LR_AWAIT_MS);
	dlock_lock_info *info = NULL;
	if (!ok && dlock_inspect(t->other, name, &info) == DLOCK_OK && info->nholders > 0)
		printf("\n    %s stayed held: by %s, token %llu, lease left %lld ms", name, info->holders[0]->identity,
		       (unsigned long long)info->holders[0]->token, (long long)info->holders[0]->lease_left_ms);
	else if (!ok)
		printf("\n    %s stayed held: the other client cannot take it", name);
	dlock_lock_info_free(info);
	CU_ASSERT(ok);
	return ok;
}

long lc_holders(lc *t, const char *name)
{
	dlock_lock_info *info = NULL;
	if (dlock_inspect(t->other, name, &info) != DLOCK_OK)
		return -1;
	long n = (long)info->nholders;
	dlock_lock_info_free(info);
	return n;
}

int64_t lc_feature(lc *t, dlock_feature f)
{
	int64_t v = -1;
	if (dlock_client_feature(t->other, f, &v) != DLOCK_OK)
		return -1;
	return v;
}

void lc_assert_ends(lr_op *op, dlock_status started, dlock_status want, const char *what, const char *file,
                    unsigned line)
{
	if (started != DLOCK_OK) {
		int ok = started == want;
		if (!ok)
			printf("\n    %s:%u: %s: the start call gave %s, expected %s (or OK and then %s)", file, line, what,
			       dlock_status_name(started), dlock_status_name(want), dlock_status_name(want));
		CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line, what, file, "", CU_FALSE);
		return;
	}
	if (!lr_run_done(op->tc->lp, op, LR_AWAIT_MS))
		printf("\n    %s:%u: %s: no callback within %d ms", file, line, what, LR_AWAIT_MS);
	lr_assert_once(op, want, what, file, line);
}

int lc_uri_port(const char *uri)
{
	const char *p = strstr(uri, "://");
	if (!p)
		return 0;
	p += 3;
	size_t auth = strcspn(p, "/?#");
	const char *at = memchr(p, '@', auth);
	const char *host = at ? at + 1 : p;
	const char *colon = memchr(host, ':', auth - (size_t)(host - p));
	return colon ? atoi(colon + 1) : 0;
}

int lc_scaled(int base)
{
	const char *env = getenv("DLOCK_TEST_SCALE");
	double scale = env && *env ? strtod(env, NULL) : 1.0;
	if (!(scale > 0))
		scale = 1.0;
	int n = (int)(base * scale);
	return n < 1 ? 1 : n;
}

/* dlock_client_get_stats() on the loop's thread. */
uint64_t lc_attempts(lr_client *tc)
{
	dlock_client_stats s;
	return dlock_client_get_stats(tc->client, &s) == DLOCK_OK ? s.server_acquires : 0;
}

int lc_attempted(void *arg)
{
	const lc_progress *p = arg;
	return lc_attempts(p->tc) >= p->attempts;
}

int lc_all_done(void *arg)
{
	const lc_progress *p = arg;
	for (size_t i = 0; i < p->n; i++)
		if (p->ops[i].calls == 0)
			return 0;
	return 1;
}

lr_client *lc_open_via_proxy(lr_loop *lp, const char *uri, const char *params, struct faultproxy **px)
{
	char via[2300], bounded[2400];
	int port = lc_uri_port(uri);
	CU_ASSERT_FATAL(port > 0);
	*px = ft_proxy_to(port);
	ft_uri_port(via, sizeof via, uri, port, faultproxy_port(*px));
	ft_uri_with(bounded, sizeof bounded, via, params);
	return lr_open_ready(lp, bounded);
}

dlock_status lc_extend_start(lr_loop *lp, lr_client *tc, dlock_lock *h, lr_op *op)
{
	lr_op_init(op, tc);
	return LR_START(lp, dlock_extend_async(h, 0, lr_on_lock, op));
}
