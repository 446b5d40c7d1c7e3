/*
 * Redis on a loop client's loop (backends/redis/redis_loop.c, driver
 * contract 9): a loop client of one server with fair=0 makes its lock
 * calls on its loop, on a non-blocking connection of its own, with no
 * thread; every other mode runs them on the core's worker threads.  On
 * redis://HOST:PORT?fair=0, rediss://...&fair=0 and redis+unix://...?fair=0
 * (the first of each that DLOCK_TEST_URIS and DLOCK_TEST_REDIS_UNIX_URI
 * give), the first in pull and in push mode, the others in pull mode:
 *
 *   - the contract of a loop client (loop_cases.h), on the plain URI in
 *     pull mode;
 *   - what every driver whose calls run on the loop owes (loop_driver.c):
 *     waiting acquisitions and renewals with no thread, and through a
 *     fault proxy (TCP URIs) an unanswered call, a cut, a lost answer.
 *
 * And once, on the plain server: a password refused when the loop's
 * connection connects again is DLOCK_EAUTH (an ACL user of the test's,
 * deleted meanwhile); scripts the server lost (SCRIPT FLUSH) are sent
 * again as EVAL; replicas=N waits for the replicas after each write, and
 * too few undo the acquisition (the primary with a replica of
 * DLOCK_TEST_REDIS_PRIMARY_URI); a fair=1 queue, Sentinel and Cluster
 * clients still work on a loop (their calls on workers).
 *
 * Faults go through proxies of the test's own; the shared servers see
 * only a SCRIPT FLUSH (every client falls back to EVAL) and an ACL user
 * made and deleted.  Skipped, loudly, without the URIs.
 * Threads: the test's, which drives the loops.  Errors: CUnit assertions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faultproxy.h"
#include "faults.h"
#include "loop_cases.h"
#include "threadcount.h"
#include "testredis.h"

#define SHORT_LEASE_MS 1000

#define URI_MAX 2300

static char plain_uri[URI_MAX], tls_uri[URI_MAX], unix_uri[URI_MAX];
static char fair_uri[URI_MAX], sentinel_uri[URI_MAX], cluster_uri[URI_MAX];
static int redis_port; /* the plain server's, for a raw connection */


/* ------------------------------------------------------------ once, on the plain server */

/* The loop's connection connects again after its user was deleted: the password is refused, DLOCK_EAUTH. */
static void test_password_refused(void)
{
	char user[64], pass[64], uri[URI_MAX], name[128];
	snprintf(user, sizeof user, "dlrl%d", (int)getpid());
	snprintf(pass, sizeof pass, "loop-secret-%d", (int)getpid());
	redisContext *raw = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(raw, "ACL SETUSER %s reset on >%s ~* &* +@all", user, pass);
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	snprintf(uri, sizeof uri, "redis://%s:%s@127.0.0.1:%d?fair=0", user, pass, redis_port);
	lr_loop *lp = lr_loop_new(LR_PUSH);
	lr_client *tc = lr_open_ready(lp, uri);
	lr_name(name, sizeof name, "rl-auth");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	dlock_status st = h ? lr_acquire_now(tc, h, 0) : DLOCK_EINVAL;
	CU_ASSERT_EQUAL(st, DLOCK_OK); /* the loop's connection logged in as the user */
	/* Deleting the user closes its connections: the next call connects again, and AUTH is refused. */
	freeReplyObject(redisCommand(raw, "ACL DELUSER %s", user));
	if (st == DLOCK_OK) {
		lr_run_for(lp, 100);
		lr_op op;
		st = lc_extend_start(lp, tc, h, &op);
		CU_ASSERT_EQUAL(lr_finish(&op, st), DLOCK_EAUTH);
		printf("\n    extend: %s: %s", dlock_status_name(op.status), op.msg);
		CU_ASSERT_PTR_NULL(strstr(op.msg, pass));
		CU_ASSERT_PTR_NOT_NULL(strstr(op.msg, "authentication failed"));
	}
	dlock_lock_free(h);
	lr_loop_free(lp);
	redisFree(raw);
}

/* SCRIPT FLUSH between the calls: each is sent again as EVAL, and works. */
static void test_scripts_lost(void)
{
	char uri[URI_MAX], name[128];
	redisContext *raw = dlock_testredis_raw(redis_port);
	snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?fair=0", redis_port);
	lr_loop *lp = lr_loop_new(LR_PULL);
	lr_client *tc = lr_open_ready(lp, uri);
	lr_name(name, sizeof name, "rl-flushed");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	if (h) {
		freeReplyObject(redisCommand(raw, "SCRIPT FLUSH"));
		CU_ASSERT_EQUAL(lr_acquire_now(tc, h, 0), DLOCK_OK); /* the acquire script (a token is wanted) */
		freeReplyObject(redisCommand(raw, "SCRIPT FLUSH"));
		lr_op op;
		CU_ASSERT_EQUAL(lr_finish(&op, lc_extend_start(lp, tc, h, &op)), DLOCK_OK);
		freeReplyObject(redisCommand(raw, "SCRIPT FLUSH"));
		CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
		dlock_client *other = ft_open(uri);
		CU_ASSERT_EQUAL(dlock_test_probe(other, name), DLOCK_OK);
		dlock_client_close(other);
	}
	dlock_lock_free(h);
	lr_loop_free(lp);
	redisFree(raw);
}

/*
 * replicas=N on the loop: with one replica, WAIT confirms every write and
 * the calls work; asking for one more than there are, the acquisition
 * ends as the blocking one does (DLOCK_ECONNECT, naming the count) and is
 * undone: the name is free.
 */
static void test_replicas(void)
{
	char uri[URI_MAX + 64], name[128];
	const char *primary = dlock_test_env("DLOCK_TEST_REDIS_PRIMARY_URI");
	if (!primary) {
		dlock_test_skip_part("no primary with a replica (DLOCK_TEST_REDIS_PRIMARY_URI unset)");
		return;
	}
	lr_loop *lp = lr_loop_new(LR_PUSH);
	ft_uri_with(uri, sizeof uri, primary, "replicas=1");
	lr_client *one = lr_open_ready(lp, uri);
	ft_uri_with(uri, sizeof uri, primary, "replicas=2&replicas_timeout=100ms");
	lr_client *two = lr_open_ready(lp, uri);
	dlock_client *other = ft_open(primary);
	lr_name(name, sizeof name, "rl-replicas");
	dlock_lock *h1 = one ? ft_lock(one->client, name) : NULL, *h2 = two ? ft_lock(two->client, name) : NULL;
	if (h1 && h2 && other) {
		CU_ASSERT_EQUAL(lr_acquire_now(one, h1, 0), DLOCK_OK);
		lr_op op;
		CU_ASSERT_EQUAL(lr_finish(&op, lc_extend_start(lp, one, h1, &op)), DLOCK_OK);
		CU_ASSERT_EQUAL(lr_release_now(one, h1), DLOCK_OK);
		lr_op_init(&op, two);
		CU_ASSERT_EQUAL(lr_finish(&op, lr_acquire(h2, 0, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op)), DLOCK_ECONNECT);
		printf("\n    replicas=2: %s: %s", dlock_status_name(op.status), op.msg);
		CU_ASSERT_PTR_NOT_NULL(strstr(op.msg, "1 of 2 replicas confirmed"));
		CU_ASSERT_EQUAL(dlock_test_probe(other, name), DLOCK_OK); /* undone */
	}
	dlock_lock_free(h1);
	dlock_lock_free(h2);
	dlock_client_close(other);
	lr_loop_free(lp);
}

/*
 * A mode that does not run on the loop (fair=1's queue, Sentinel,
 * Cluster): a loop client of it still acquires, waits, is woken and
 * releases, its calls on worker threads.
 */
static void declined_works(const char *base)
{
	char uri[URI_MAX + 64], name[128];
	if (!base[0]) {
		dlock_test_skip_part("no such URI in DLOCK_TEST_URIS");
		return;
	}
	ft_uri_with(uri, sizeof uri, base, "prefix=loop-rl");
	lr_loop *lp = lr_loop_new(LR_PUSH);
	lr_client *tc = lr_open_ready(lp, uri);
	dlock_client *other = ft_open(uri);
	lr_name(name, sizeof name, "rl-declined");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL, *o = ft_lock(other, name);
	if (h && o) {
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o, 0, 0, -1, NULL, NULL), DLOCK_OK);
		lr_op op;
		lr_op_init(&op, tc);
		lc_progress p = { tc, lc_attempts(tc) + 1, &op, 1 };
		CU_ASSERT_EQUAL(lr_acquire(h, LR_AWAIT_MS, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op), DLOCK_OK);
		CU_ASSERT(lr_run_until(lp, lc_attempted, &p, LR_AWAIT_MS));
		CU_ASSERT_EQUAL(op.calls, 0);
		CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
		if (lr_run_done(lp, &op, LR_AWAIT_MS) && LR_ASSERT_ONCE(&op, DLOCK_OK)) {
			CU_ASSERT_EQUAL(lr_check_now(tc, h), DLOCK_OK);
			CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
		}
		CU_ASSERT_EQUAL(dlock_test_probe(other, name), DLOCK_OK);
	}
	dlock_lock_free(h);
	dlock_lock_free(o);
	dlock_client_close(other);
	lr_loop_free(lp);
}

/*
 * The loop's subscriber (no thread: its connection is another of the
 * loop's): its connection cut while an acquisition waits for a release,
 * it connects and subscribes again, and the release still wakes the
 * waiter, with no thread started; the cut is not the waiter's failure.
 */
static void test_subscriber_cut(void)
{
	char name[128];
	faultproxy *px;
	lr_loop *lp = lr_loop_new(LR_PULL);
	lr_client *tc = lc_open_via_proxy(lp, plain_uri, "io_timeout=2000ms", &px);
	dlock_client *other = ft_open(plain_uri);
	lr_name(name, sizeof name, "rl-subcut");
	dlock_lock *h = tc ? ft_lock(tc->client, name) : NULL;
	dlock_lock *o = other ? ft_lock(other, name) : NULL;
	if (h && o) {
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(o, 0, 0, -1, NULL, NULL), DLOCK_OK);
		long started = dlock_test_threads_started();
		lr_op op;
		lr_op_init(&op, tc);
		lc_progress p = { tc, lc_attempts(tc) + 1, &op, 1 };
		CU_ASSERT_EQUAL(lr_acquire(h, 20000, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op), DLOCK_OK);
		CU_ASSERT(lr_run_until(lp, lc_attempted, &p, LR_AWAIT_MS));
		lr_run_for(lp, 100); /* subscribed */
		faultproxy_reset(px); /* every connection through the proxy cut: the subscriber's too */
		lr_run_for(lp, 300);  /* it connects and subscribes again; the waiter tried again meanwhile */
		CU_ASSERT_EQUAL(op.calls, 0);
		CU_ASSERT_EQUAL(dlock_release(o), DLOCK_OK);
		CU_ASSERT(lr_run_done(lp, &op, LR_AWAIT_MS)); /* woken, where a poll would wait for the lease's end */
		if (LR_ASSERT_ONCE(&op, DLOCK_OK))
			CU_ASSERT_EQUAL(lr_release_now(tc, h), DLOCK_OK);
		started = dlock_test_threads_started() - started;
		printf("\n    %s after the cut and the release; %ld threads started", dlock_status_name(op.status), started);
		CU_ASSERT_EQUAL(started, 0);
	}
	dlock_lock_free(h);
	dlock_lock_free(o);
	dlock_client_close(other);
	lr_loop_free(lp);
	faultproxy_stop(px);
}

static void test_declined_fair(void)
{
	declined_works(fair_uri);
}

static void test_declined_sentinel(void)
{
	declined_works(sentinel_uri);
}

static void test_declined_cluster(void)
{
	declined_works(cluster_uri);
}

/* ------------------------------------------------------------ suites */

static char *const targets[] = { plain_uri, tls_uri, unix_uri };
static const char *const target_names[] = { "redis://?fair=0", "rediss://?fair=0", "redis+unix://?fair=0" };

static int init_target(int i, lr_mode mode)
{
	return lc_set_target(&(lc_target){ .uri = targets[i], .mode = mode, .short_lease_ms = SHORT_LEASE_MS });
}

static int plain_pull(void)
{
	return init_target(0, LR_PULL);
}

static int plain_push(void)
{
	return init_target(0, LR_PUSH);
}

static int tls_pull(void)
{
	return init_target(1, LR_PULL);
}

static int unix_pull(void)
{
	return init_target(2, LR_PULL);
}

/*
 * The contract's cases and these on redis://?fair=0 in both modes; on TLS
 * and the unix socket these in pull mode only (what push mode changes is
 * the loop's, which the plain target and test_loop cover).
 */
static void add_suites(void)
{
	CU_InitializeFunc inits[][2] = { { plain_pull, plain_push }, { tls_pull, NULL }, { unix_pull, NULL } };
	for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
		for (int m = 0; m < 2 && inits[i][m]; m++) {
			char suite[96];
			snprintf(suite, sizeof suite, "%s %s", target_names[i], m ? "push" : "pull");
			if (!targets[i][0]) {
				printf("SKIPPED: %s: no such URI in DLOCK_TEST_URIS\n", suite);
				continue;
			}
			CU_pSuite s = CU_add_suite(suite, inits[i][m], NULL);
			if (i == 0 && m == 0) /* the contract's cases once: kv:// and PostgreSQL run them in push mode */
				lc_add_all(s);
			for (const lc_case *c = lc_driver_cases; c->name; c++)
				CU_add_test(s, c->name, c->fn);
			for (const lc_case *c = lc_driver_conn_cases; c->name; c++)
				CU_add_test(s, c->name, c->fn);
		}
	}
	if (!plain_uri[0])
		return;
	CU_pSuite s = CU_add_suite("redis:// on the loop, once", NULL, NULL);
	CU_add_test(s, "a password refused on connecting again: EAUTH", test_password_refused);
	CU_add_test(s, "the loop's subscriber cut: it subscribes again, the release still wakes", test_subscriber_cut);
	CU_add_test(s, "scripts the server lost are sent again as EVAL", test_scripts_lost);
	CU_add_test(s, "replicas=N: WAIT after each write, too few undo the acquisition", test_replicas);
	CU_add_test(s, "fair=1 still works on a loop client (workers)", test_declined_fair);
	CU_add_test(s, "redis+sentinel:// still works on a loop client (workers)", test_declined_sentinel);
	CU_add_test(s, "redis+cluster:// still works on a loop client (workers)", test_declined_cluster);
}

/* The first URI of `list` whose scheme is `scheme` ("redis" matches redis:// only) and that has one host. */
static void first_uri(const char *list, const char *scheme, int one_host, char *out, size_t len)
{
	size_t sl = strlen(scheme);
	out[0] = '\0';
	for (const char *p = list; *p;) {
		p += strspn(p, " \t\r\n");
		size_t n = strcspn(p, " \t\r\n");
		const char *rest = p + sl;
		int match = n > sl + 3 && strncmp(p, scheme, sl) == 0 && strncmp(rest, "://", 3) == 0;
		size_t authority = match ? strcspn(rest + 3, "/?") : 0;
		int commas = match && memchr(rest + 3, ',', authority) != NULL;
		if (match && !(one_host && commas) && n < len) {
			snprintf(out, len, "%.*s", (int)n, p);
			return;
		}
		p += n;
	}
}

/* `uri` (when set) with fair=0 added, unless it says fair= already. */
static void fair0(char *uri, size_t len)
{
	char with[URI_MAX];
	if (!uri[0] || strstr(uri, "fair="))
		return;
	ft_uri_with(with, sizeof with, uri, "fair=0");
	snprintf(uri, len, "%.*s", (int)(len - 1), with);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *uris = dlock_test_env("DLOCK_TEST_URIS");
	const char *port = dlock_test_env("DLOCK_TEST_REDIS_PORT");
	if (!uris || !port)
		return dlock_test_skip("no Redis (DLOCK_TEST_URIS, DLOCK_TEST_REDIS_PORT unset)");
	redis_port = atoi(port);
	snprintf(plain_uri, sizeof plain_uri, "redis://127.0.0.1:%d?fair=0", redis_port);
	snprintf(fair_uri, sizeof fair_uri, "redis://127.0.0.1:%d?fair=1", redis_port);
	first_uri(uris, "rediss", 1, tls_uri, sizeof tls_uri);
	fair0(tls_uri, sizeof tls_uri);
	const char *unix_env = dlock_test_env("DLOCK_TEST_REDIS_UNIX_URI");
	snprintf(unix_uri, sizeof unix_uri, "%s", unix_env ? unix_env : "");
	fair0(unix_uri, sizeof unix_uri);
	first_uri(uris, "redis+sentinel", 0, sentinel_uri, sizeof sentinel_uri);
	first_uri(uris, "redis+cluster", 0, cluster_uri, sizeof cluster_uri);
	return dlock_test_main(add_suites);
}
