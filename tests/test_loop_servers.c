/*
 * Loop clients (include/dlock/loop.h) on a real Redis and a real
 * PostgreSQL: the first redis:// URI of DLOCK_TEST_URIS (see
 * ci/servers.sh; its fair queue runs on workers) in pull mode, and the
 * first postgres:// one in pull and in push mode (Redis with fair=0, on
 * the loop itself, has test_redis_loop in both), with
 * the contract of loop_cases.h (on these servers a lease that runs out and
 * a lock broken by another client are reported on the loop), and a
 * connection cut while an acquisition waits: through the fault proxy of
 * tests/support/faultproxy.h, so that the shared servers themselves are
 * never touched.  The loop client must answer the cut as the blocking
 * client does in the same test (measured first, and checked): keep
 * waiting and be granted after reconnecting, or fail once with ECONNECT.
 * Built with DLOCK_LOOP_KV (when the Redis backend is), the same on the
 * example driver kv:// (examples/kv_driver.c) on that Redis, whose lock
 * calls run on the loop itself, with the cases of loop_driver.c (every
 * driver on the loop) and loop_kv.c (its own).
 * Skipped, loudly, without those URIs.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faultproxy.h"
#include "faults.h"
#include "loop_cases.h"
#ifdef DLOCK_LOOP_KV
#include "../examples/kv_driver.h"
#endif

#define SHORT_LEASE_MS 1000 /* a lease of `ttl=1s`, renewal off, to watch it run out */
#define CUT_WAIT_MS 5000     /* the waiters' bound through a cut: a hang becomes ETIMEDOUT */
#define REFUSED_WAIT_MS 1500 /* the bound when reconnecting is refused: a refused reconnection is retried until it
                              * (as PostgreSQL's and kv://'s clients do), so the case lasts that long */

static char redis_uri[2048], pg_uri[2048], kv_uri[2100];

/* The first whitespace-separated URI of `list` that starts with `scheme`, into out ("" when none). */
static void first_uri(const char *list, const char *scheme, char *out, size_t len)
{
	out[0] = '\0';
	for (const char *p = list; *p;) {
		while (isspace((unsigned char)*p))
			p++;
		size_t n = strcspn(p, " \t\r\n");
		if (n > 0 && strncmp(p, scheme, strlen(scheme)) == 0 && n < len) {
			snprintf(out, len, "%.*s", (int)n, p);
			return;
		}
		p += n;
	}
}

/* ------------------------------------------------------------ a connection cut mid-wait */

/* Cut every connection through the proxy; with `refuse`, new ones are refused too until faultproxy_pass(). */
static void cut(faultproxy *px, int refuse)
{
	if (refuse)
		CU_ASSERT_EQUAL(faultproxy_refuse(px, 1), 0);
	faultproxy_reset(px);
}

static int cut_wait_ms(int refuse)
{
	return refuse ? REFUSED_WAIT_MS : CUT_WAIT_MS;
}

/*
 * The blocking client's answer: it waits through the proxy (a thread) for
 * `name`, held directly by another client; the cut comes, the holder
 * releases, and the waiter returns.
 */
static dlock_status blocking_answer(const char *direct, const char *via, faultproxy *px, int refuse,
                                    const char *name)
{
	dlock_client *a = ft_open(direct), *b = ft_open(via);
	dlock_lock *la = ft_lock(a, name), *lb = ft_lock(b, name);
	dlock_status st = DLOCK_STATUS_COUNT_;
	dlock_client_stats s;
	if (la && lb && dlock_test_acquire(la, 0, 0, -1, NULL, NULL) == DLOCK_OK &&
	    dlock_client_get_stats(b, &s) == DLOCK_OK) {
		dlock_test_count n = { b, s.server_acquires + 1 };
		dlock_test_waiter w;
		dlock_test_waiter_start(&w, lb, cut_wait_ms(refuse), 0);
		CU_ASSERT(dlock_test_await(dlock_test_attempted, &n, LR_AWAIT_MS));
		cut(px, refuse);
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
		st = dlock_test_waiter_join(&w, cut_wait_ms(refuse) + LR_AWAIT_MS);
		faultproxy_pass(px);
		if (st == DLOCK_OK)
			CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	} else {
		CU_FAIL("blocking clients through the proxy");
	}
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
	return st;
}

/*
 * The same with a loop client through the proxy: it completes once, with
 * one of the statuses in want[0..nwant); granted, it holds the lock.
 */
static void loop_answer(const char *direct, const char *via, faultproxy *px, int refuse, const char *name,
                        const dlock_status *want, size_t nwant)
{
	lc t = { .lp = lr_loop_new(lc_get_target()->mode) };
	t.tc = lr_open_ready(t.lp, via);
	t.other = ft_open(direct);
	if (!t.tc || !t.other) {
		lc_end(&t);
		return;
	}
	dlock_lock *h = lc_lock(&t, name), *o = lc_other_lock(&t, name);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o, 0, 0, -1, NULL, NULL), DLOCK_OK);
	lr_op op;
	lc_start_waiting(&t, h, cut_wait_ms(refuse), &op);
	cut(px, refuse);
	CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
	CU_ASSERT(lr_run_done(t.lp, &op, cut_wait_ms(refuse) + LR_AWAIT_MS));
	faultproxy_pass(px);
	lr_run_for(t.lp, 100); /* nothing more comes for it */
	printf("\n    loop client: %s%s%s", op.calls ? dlock_status_name(op.status) : "no answer", op.msg[0] ? ": " : "",
	       op.msg);
	size_t i = 0;
	while (i < nwant && want[i] != op.status)
		i++;
	if (LR_ASSERT_ONCE(&op, i < nwant ? want[i] : want[0]) && op.status == DLOCK_OK) {
		CU_ASSERT_EQUAL(dlock_test_probe(t.other, name), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
	}
	/* Either way the client works on through the proxy, and nothing was left held. */
	lc_await_free(&t, name);
	CU_ASSERT_EQUAL(lr_acquire_now(t.tc, h, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(lr_release_now(t.tc, h), DLOCK_OK);
	dlock_lock_free(h);
	dlock_lock_free(o);
	lc_end(&t);
}

/*
 * What the blocking client answers to the cut, and then the loop client.
 * A reset while reconnecting works: the blocking client keeps waiting and
 * is granted, or fails with ECONNECT when the reset meets a request in
 * flight (both are seen on Redis); the loop client answers one of those.
 * With reconnecting refused: ECONNECT from both.
 */
static void cut_mid_wait(int refuse)
{
	const char *uri = lc_get_target()->uri;
	int port = lc_uri_port(uri);
	CU_ASSERT_FATAL(port > 0);
	faultproxy *px = ft_proxy_to(port);
	char via[2100], name[128];
	ft_uri_port(via, sizeof via, uri, port, faultproxy_port(px));
	lr_name(name, sizeof name, refuse ? "cut-refused" : "cut");
	dlock_status blocking = blocking_answer(uri, via, px, refuse, name);
	printf("\n    blocking client: %s", dlock_status_name(blocking));
	static const dlock_status after_reset[] = { DLOCK_OK, DLOCK_ECONNECT }, after_refused[] = { DLOCK_ECONNECT };
	const dlock_status *want = refuse ? after_refused : after_reset;
	size_t nwant = refuse ? 1 : 2;
	CU_ASSERT(blocking == want[0] || (nwant > 1 && blocking == want[1]));
	lr_name(name, sizeof name, refuse ? "loop-cut-refused" : "loop-cut");
	loop_answer(uri, via, px, refuse, name, want, nwant);
	faultproxy_stop(px);
}

/* Every connection reset while the acquisition waits; reconnecting works. */
static void test_cut_mid_wait(void)
{
	cut_mid_wait(0);
}

/* The same, and reconnecting is refused until the acquisition has answered. */
static void test_cut_refused_mid_wait(void)
{
	cut_mid_wait(1);
}

/* ------------------------------------------------------------ suites */

static int redis_pull(void)
{
	return lc_set_target(&(lc_target){ .uri = redis_uri, .mode = LR_PULL, .short_lease_ms = SHORT_LEASE_MS });
}

static int pg_pull(void)
{
	return lc_set_target(&(lc_target){ .uri = pg_uri, .mode = LR_PULL, .short_lease_ms = SHORT_LEASE_MS });
}

static int pg_push(void)
{
	return lc_set_target(&(lc_target){ .uri = pg_uri, .mode = LR_PUSH, .short_lease_ms = SHORT_LEASE_MS });
}

#define KV_DRIVER_THREADS 1 /* kv_driver.c's subscriber, started by its open */

static int kv_pull(void)
{
	return lc_set_target(&(lc_target){
		.uri = kv_uri, .mode = LR_PULL, .short_lease_ms = SHORT_LEASE_MS, .driver_threads = KV_DRIVER_THREADS });
}

static int kv_push(void)
{
	return lc_set_target(&(lc_target){
		.uri = kv_uri, .mode = LR_PUSH, .short_lease_ms = SHORT_LEASE_MS, .driver_threads = KV_DRIVER_THREADS });
}

static void add_suites(void)
{
	struct {
		const char *name;
		const char *uri;
		CU_InitializeFunc init;
	} suites[] = {
		{ "redis:// pull", redis_uri, redis_pull },
		{ "postgres:// pull", pg_uri, pg_pull },
		{ "postgres:// push", pg_uri, pg_push },
		{ "kv:// pull", kv_uri, kv_pull },
		{ "kv:// push", kv_uri, kv_push },
	};
	for (size_t i = 0; i < sizeof suites / sizeof *suites; i++) {
		if (!suites[i].uri[0])
			continue;
		CU_pSuite s = CU_add_suite(suites[i].name, suites[i].init, NULL);
		lc_add_all(s);
		CU_add_test(s, "connection cut mid-wait: as the blocking client", test_cut_mid_wait);
		CU_add_test(s, "connection cut mid-wait, reconnecting refused: as the blocking client",
		            test_cut_refused_mid_wait);
#ifdef DLOCK_LOOP_KV
		for (const lc_case *c = lc_kv_cases; suites[i].uri == kv_uri && c->name; c++)
			CU_add_test(s, c->name, c->fn);
		for (const lc_case *c = lc_driver_cases; suites[i].uri == kv_uri && c->name; c++)
			CU_add_test(s, c->name, c->fn);
		for (const lc_case *c = lc_driver_conn_cases; suites[i].uri == kv_uri && c->name; c++)
			CU_add_test(s, c->name, c->fn);
#endif
	}
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *uris = dlock_test_env("DLOCK_TEST_URIS");
	if (!uris)
		return dlock_test_skip("no servers (DLOCK_TEST_URIS unset)");
	first_uri(uris, "redis://", redis_uri, sizeof redis_uri);
	first_uri(uris, "postgres://", pg_uri, sizeof pg_uri);
#ifdef DLOCK_LOOP_KV
	if (redis_uri[0] && dlock_register_driver(&example_kv_driver) == DLOCK_OK)
		snprintf(kv_uri, sizeof kv_uri, "kv://%.*s?prefix=loop-kv", /* the host and port; no redis:// parameter */
		         (int)strcspn(redis_uri + strlen("redis://"), "/?"), redis_uri + strlen("redis://"));
#endif
	if (!redis_uri[0] && !pg_uri[0])
		return dlock_test_skip("no redis:// and no postgres:// URI in DLOCK_TEST_URIS");
	if (!redis_uri[0] || !pg_uri[0]) {
		const char *why = !redis_uri[0] ? "no redis:// URI in DLOCK_TEST_URIS" : "no postgres:// URI in DLOCK_TEST_URIS";
		const char *req = getenv("DLOCK_TEST_REQUIRE_ALL");
		if (req && strcmp(req, "1") == 0)
			return dlock_test_skip(why);
		printf("SKIPPED: %s\n", why);
	}
	return dlock_test_main(add_suites);
}
