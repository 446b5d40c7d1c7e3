/*
 * PostgreSQL backend tests, against the server that ci/servers/postgres.sh
 * starts.  Environment:
 *
 *   DLOCK_TEST_PG_URI       advisory mode; also a plain libpq URI, used for
 *                           the test's own monitor connection
 *   DLOCK_TEST_PG_ROW_URI   row mode
 *   DLOCK_TEST_PG_PW_URI    a role with a password that may create nothing
 *   DLOCK_TEST_PG_BOUNCER_URI  row mode through PgBouncer in transaction
 *                           pooling (its suite is skipped without it)
 *
 * Without DLOCK_TEST_PG_URI the program says SKIPPED and exits 0 (1 when
 * DLOCK_TEST_REQUIRE_ALL=1).  The mode-specific suites run once per mode.
 * The read-write tests (rw_*) look at pg_locks to see what the server holds.
 */
#include <fcntl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

#include "dlock/dlock.h"
#include "testpg.h"
#include "testsupport.h"
#include "dlock/sys/driver.h"   /* dlock_sha256() */
#include "dlock/sys/postgres.h" /* DLOCK_PG_CTL_ADVISORY_KEY */

#define LONG_WAIT_MS 30000
#define AWAIT_MS 10000
#define SLACK_MS 1000

static const char *mode_uri; /* the URI of the suite running now */
static int mode_is_row;
static int via_bouncer;      /* mode_uri goes through PgBouncer (transaction pooling) */
static unsigned name_counter;

/* ------------------------------------------------------------ helpers */

/* Assert a status; returns 1 when it is the one wanted. */
static int expect(dlock_status got, dlock_status want)
{
	if (got != want)
		printf("\n    got %s, expected %s", dlock_status_name(got), dlock_status_name(want));
	CU_ASSERT(got == want);
	return got == want;
}

/* `base` with "key=value" appended as a query parameter. */
static void uri_with(char *out, size_t outlen, const char *base, const char *param)
{
	snprintf(out, outlen, "%s%c%s", base, strchr(base, '?') ? '&' : '?', param);
}

static void unique_name(char *out, size_t outlen, const char *tag)
{
	snprintf(out, outlen, "pgtest-%ld-%ld-%u-%s", (long)getpid(), (long)time(NULL), ++name_counter, tag);
}

static dlock_client *open_uri(const char *uri)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	return c;
}

/* A client of the suite's mode whose connections carry application_name `app`. */
static dlock_client *open_app(const char *app)
{
	char uri[1024], param[128];
	snprintf(param, sizeof param, "application_name=%s", app);
	uri_with(uri, sizeof uri, mode_uri, param);
	return open_uri(uri);
}

static dlock_lock *new_lock(dlock_client *c, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(c, name);
	if (c)
		CU_ASSERT_PTR_NOT_NULL(l);
	return l;
}

static dlock_status acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms, dlock_lost_fn fn, void *ud)
{
	return dlock_test_acquire(l, wait_ms, lease_ms, -1, fn, ud);
}

static long long backends_of(PGconn *pg, const char *app)
{
	return dlock_testpg_num(pg, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app);
}

/* ------------------------------------------------------------ lost callback */

typedef struct lost_rec {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
	dlock_lost_reason reason;
} lost_rec;

static void lost_init(lost_rec *r)
{
	memset(r, 0, sizeof *r);
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutex_init(&r->mu, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	pthread_cond_init(&r->cv, &ca);
	pthread_condattr_destroy(&ca);
}

static void lost_destroy(lost_rec *r)
{
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
}

static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *ud)
{
	lost_rec *r = ud;
	(void)lock;
	(void)detail;
	pthread_mutex_lock(&r->mu);
	r->calls++;
	r->reason = reason;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static int lost_await(lost_rec *r, int64_t timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(timeout_ms / 1000);
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->mu);
	while (r->calls == 0 && pthread_cond_timedwait(&r->cv, &r->mu, &until) == 0)
		;
	int calls = r->calls;
	pthread_mutex_unlock(&r->mu);
	return calls;
}

/* ------------------------------------------------------------ names */

/* What a lock of `name` is called on the server under the default prefix:
 * "dlock:" name, and its advisory key, the first 8 bytes of that's SHA-256
 * big-endian (README), computed here from the documentation and checked
 * against what the driver says through its door.  *ns is malloc'ed. */
static int64_t documented_key(dlock_lock *l, const char *name, char **ns, size_t *n)
{
	unsigned char sum[32];
	uint64_t key = 0;
	int64_t driver_key = 0;
	*n = strlen("dlock:") + strlen(name);
	*ns = malloc(*n + 1);
	CU_ASSERT_PTR_NOT_NULL_FATAL(*ns);
	snprintf(*ns, *n + 1, "dlock:%s", name);
	dlock_sha256(*ns, *n, sum);
	for (int i = 0; i < 8; i++)
		key = key << 8 | sum[i];
	CU_ASSERT_EQUAL(dlock_lock_control(l, DLOCK_PG_CTL_ADVISORY_KEY, &driver_key), DLOCK_OK);
	CU_ASSERT_EQUAL(driver_key, (int64_t)key);
	return (int64_t)key;
}

/* ------------------------------------------------------------ connecting */

static dlock_status open_status(const char *uri, char *err, size_t errlen, int64_t *ms)
{
	dlock_client *c = NULL;
	int64_t t0 = dlock_test_now_ms();
	dlock_status st = dlock_client_open(&c, uri, NULL, err, errlen);
	*ms = dlock_test_now_ms() - t0;
	dlock_client_close(c);
	return st;
}

static void test_wrong_password(void)
{
	const char *pw_uri = dlock_test_env("DLOCK_TEST_PG_PW_URI");
	if (!pw_uri) {
		CU_PASS("no DLOCK_TEST_PG_PW_URI");
		return;
	}
	/* postgres://dlock_pw:PASSWORD@host... -> a wrong password of the same length */
	char uri[1024], err[512] = "";
	snprintf(uri, sizeof uri, "%s", pw_uri);
	char *colon = strchr(uri + strlen("postgres://"), ':'), *at = strchr(uri, '@');
	CU_ASSERT_FATAL(colon && at && colon < at);
	char right[128];
	snprintf(right, sizeof right, "%.*s", (int)(at - colon - 1), colon + 1);
	for (char *p = colon + 1; p < at; p++)
		*p = 'W';
	int64_t ms;
	CU_ASSERT_EQUAL(open_status(uri, err, sizeof err, &ms), DLOCK_EAUTH);
	printf("\n    wrong password: %lld ms: %s", (long long)ms, err);
	CU_ASSERT(ms < 2000);
	CU_ASSERT(strstr(err, "password authentication failed") != NULL);
	CU_ASSERT(strstr(err, "WWWW") == NULL && strstr(err, right) == NULL);
	/* No password at all: libpq cannot answer the server's request. */
	char *nopw = strdup(pw_uri);
	char *c2 = strchr(nopw + strlen("postgres://"), ':'), *a2 = strchr(nopw, '@');
	memmove(c2, a2, strlen(a2) + 1);
	CU_ASSERT_EQUAL(open_status(nopw, err, sizeof err, &ms), DLOCK_EAUTH);
	free(nopw);
}

static void test_missing_database(void)
{
	char uri[1024], err[512] = "";
	const char *base = dlock_test_env("DLOCK_TEST_PG_URI");
	const char *slash = strrchr(base, '/');
	snprintf(uri, sizeof uri, "%.*s/no_such_db_%ld", (int)(slash - base), base, (long)getpid());
	int64_t ms;
	CU_ASSERT_EQUAL(open_status(uri, err, sizeof err, &ms), DLOCK_ENOTFOUND);
	printf("\n    missing database: %lld ms: %s", (long long)ms, err);
	CU_ASSERT(strstr(err, "does not exist") != NULL);
}

/* A loopback port nothing listens on (bound, then closed). */
static int closed_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0)
		return 1;
	close(fd);
	return ntohs(a.sin_port);
}

static void test_refused(void)
{
	char uri[256], err[512] = "";
	snprintf(uri, sizeof uri, "postgres://dlock:secret@127.0.0.1:%d/dlock_test", closed_port());
	int64_t ms;
	CU_ASSERT_EQUAL(open_status(uri, err, sizeof err, &ms), DLOCK_ECONNECT);
	printf("\n    refused: %lld ms: %s", (long long)ms, err);
	CU_ASSERT(ms < 2000);
	CU_ASSERT(strstr(err, "secret") == NULL);
	/* libpq's "Connection refused\n\tIs the server running ..." reads as one line. */
	CU_ASSERT(strstr(err, "Connection refused; Is the server running") != NULL);
	CU_ASSERT(strchr(err, '\t') == NULL && strchr(err, '\n') == NULL);
	/* A host list: the first refuses, the second serves (failover). */
	const char *base = dlock_test_env("DLOCK_TEST_PG_URI"), *host = strchr(base, '@') + 1;
	snprintf(uri, sizeof uri, "postgres://dlock@127.0.0.1:%d,%s", closed_port(), host);
	CU_ASSERT_EQUAL(open_status(uri, err, sizeof err, &ms), DLOCK_OK);
}

static void test_uri_params(void)
{
	const char *base = dlock_test_env("DLOCK_TEST_PG_URI");
	static const struct {
		const char *param;
		dlock_status want;
	} cases[] = {
		{ "bogus=1", DLOCK_EURI },
		{ "host=x", DLOCK_EURI },
		{ "mode=lease", DLOCK_EURI },
		{ "table=x", DLOCK_EURI }, /* table needs mode=row */
		{ "mode=row&table=bad%20name", DLOCK_EURI },
		{ "mode=row&table=1abc", DLOCK_EURI },
		{ "mode=row&table=x%22%3B%20DROP", DLOCK_EURI },
		{ "sslmode=disable&application_name=dlock-uri-test&connect_timeout=3", DLOCK_OK },
		{ "options=-c%20search_path%3Dpublic", DLOCK_OK },
		{ "mode=advisory&ttl=10s&prefix=other", DLOCK_OK },
		{ "fencing_durability=yes", DLOCK_EURI },
		{ "mode=row&fencing_durability=commit", DLOCK_EURI }, /* row tokens commit at release */
		{ "fencing_durability=commit", DLOCK_OK },
		{ "mode=row&fencing_durability=none", DLOCK_OK },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char uri[1024], err[512] = "";
		int64_t ms;
		uri_with(uri, sizeof uri, base, cases[i].param);
		dlock_status st = open_status(uri, err, sizeof err, &ms);
		if (st != cases[i].want)
			printf("\n    %s: %s (%s)", cases[i].param, dlock_status_name(st), err);
		CU_ASSERT_EQUAL(st, cases[i].want);
	}
}

/*
 * Tokens can come again after a crash or a failover (README, "PostgreSQL
 * failover"; test_pg_failover), in both modes and with
 * fencing_durability=commit too: CONDITIONAL, and the note says when, for
 * mutexes and permits alike.
 */
static void test_fencing_capability(void)
{
	const char *base = dlock_test_env("DLOCK_TEST_PG_URI");
	static const struct {
		const char *param, *says;
	} cases[] = {
		{ "mode=advisory", "33 tokens" },
		{ "mode=row", "commits at release" },
		{ "fencing_durability=commit", "asynchronous replication" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char uri[1024];
		uri_with(uri, sizeof uri, base, cases[i].param);
		dlock_client *c = open_uri(uri);
		CU_ASSERT_PTR_NOT_NULL_FATAL(c);
		dlock_capabilities caps;
		CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
		CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_CONDITIONAL);
		CU_ASSERT_PTR_NOT_NULL(strstr(caps.fencing_note, cases[i].says));
		printf("\n    %s: %s: %s", cases[i].param, dlock_fencing_name(caps.fencing), caps.fencing_note);
		int64_t v = -1;
		CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_PERMIT_FENCING, &v), DLOCK_OK);
		CU_ASSERT_EQUAL(v, DLOCK_FENCING_CONDITIONAL);
		dlock_client_close(c);
	}
}

/* A role that may create nothing: open says what SQL to run. */
static void test_missing_privilege(void)
{
	const char *pw_uri = dlock_test_env("DLOCK_TEST_PG_PW_URI");
	if (!pw_uri) {
		CU_PASS("no DLOCK_TEST_PG_PW_URI");
		return;
	}
	char uri[1024], param[128], err[512] = "";
	int64_t ms;
	snprintf(param, sizeof param, "mode=row&table=dlock_pw_t%ld", (long)getpid());
	uri_with(uri, sizeof uri, pw_uri, param);
	CU_ASSERT_EQUAL(open_status(uri, err, sizeof err, &ms), DLOCK_EPERM);
	printf("\n    %s", err);
	CU_ASSERT(strstr(err, "CREATE TABLE") != NULL);
	/* The sequence exists (the owner made it) but this role may not use it. */
	dlock_client_close(open_uri(dlock_test_env("DLOCK_TEST_PG_URI")));
	CU_ASSERT_EQUAL(open_status(pw_uri, err, sizeof err, &ms), DLOCK_EPERM);
	CU_ASSERT(strstr(err, "GRANT USAGE ON SEQUENCE") != NULL);
}

/* Every descriptor dlock opened is close-on-exec (libpq sets FD_CLOEXEC). */
static void test_cloexec(void)
{
	char before[1024] = { 0 };
	for (int fd = 0; fd < 1024; fd++)
		before[fd] = fcntl(fd, F_GETFD) >= 0;
	dlock_client *c = open_uri(dlock_test_env("DLOCK_TEST_PG_URI"));
	char name[128];
	unique_name(name, sizeof name, "cloexec");
	dlock_lock *l = new_lock(c, name);
	CU_ASSERT_EQUAL(acquire(l, 1000, 0, NULL, NULL), DLOCK_OK);
	int fresh = 0;
	for (int fd = 0; fd < 1024; fd++) {
		int flags = fcntl(fd, F_GETFD);
		if (flags < 0 || before[fd])
			continue;
		fresh++;
		CU_ASSERT(flags & FD_CLOEXEC);
	}
	CU_ASSERT(fresh >= 2); /* a socket and an eventfd at least */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/*
 * The first token of a client whose URI says fencing=off may have to set
 * the sequence up: that happens on a session of its own, never on the
 * session another held lock shares (its heartbeat would wait behind it).
 */
static void test_first_token_own_session(void)
{
	char name1[128], name2[128], app[64], param[128], uri[1024];
	unique_name(name1, sizeof name1, "token-first-a");
	unique_name(name2, sizeof name2, "token-first-b");
	snprintf(app, sizeof app, "dlock-tok1-%ld-%u", (long)getpid(), name_counter);
	snprintf(param, sizeof param, "application_name=%s&fencing=off", app);
	uri_with(uri, sizeof uri, dlock_test_env("DLOCK_TEST_PG_URI"), param);
	dlock_client *c = open_uri(uri);
	dlock_lock *a = new_lock(c, name1), *b = new_lock(c, name2);
	PGconn *mon = dlock_testpg_monitor();
	if (a && b && expect(acquire(a, 0, 0, NULL, NULL), DLOCK_OK)) {
		CU_ASSERT_EQUAL(backends_of(mon, app), 1);
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = 0;
		o.fence = DLOCK_ON;
		if (expect(dlock_acquire(b, &o), DLOCK_OK)) {
			CU_ASSERT(dlock_test_token(b) > 0);
			CU_ASSERT_EQUAL(backends_of(mon, app), 2);
			CU_ASSERT_EQUAL(dlock_release(b), DLOCK_OK);
		}
		CU_ASSERT_EQUAL(dlock_release(a), DLOCK_OK);
	}
	PQfinish(mon);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ per mode */

/* End every session of application `app`; returns how many. */
static long long terminate_app(PGconn *mon, const char *app)
{
	return dlock_testpg_num(mon, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
	               app);
}

/* pg_terminate_backend of the holder's session: lost, taken, not held, larger token. */
static void test_terminate_backend(void)
{
	char name[128], app[64];
	unique_name(name, sizeof name, "terminate");
	snprintf(app, sizeof app, "dlock-term-%ld-%u", (long)getpid(), name_counter);
	dlock_client *a = open_app(app), *b = open_uri(mode_uri);
	dlock_lock *la = new_lock(a, name), *lb = new_lock(b, name);
	PGconn *mon = dlock_testpg_monitor();
	lost_rec r;
	lost_init(&r);
	if (la && lb && expect(acquire(la, 0, 1500, on_lost, &r), DLOCK_OK)) {
		uint64_t t1 = dlock_test_token(la);
		CU_ASSERT(terminate_app(mon, app) >= 1);
		CU_ASSERT_EQUAL(lost_await(&r, AWAIT_MS), 1);
		CU_ASSERT_EQUAL(r.reason, DLOCK_LOST_SESSION);
		CU_ASSERT_EQUAL(acquire(lb, 5000, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT(dlock_test_token(lb) > t1);
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
		/* The client itself recovers: new connections for new locks. */
		CU_ASSERT_EQUAL(acquire(la, 1000, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	}
	PQfinish(mon);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
	lost_destroy(&r);
}

/*
 * A session ended by the server while it idles in the client's pool (here
 * at once, before any check of the pool would notice): the next
 * acquisitions, waiting and try-once, get the lock on a new session and
 * never see the error.
 */
static void test_terminate_idle_session(void)
{
	char name[128], app[64];
	unique_name(name, sizeof name, "idle-term");
	snprintf(app, sizeof app, "dlock-idle-%ld-%u", (long)getpid(), name_counter);
	dlock_client *a = open_app(app);
	dlock_lock *la = new_lock(a, name);
	PGconn *mon = dlock_testpg_monitor();
	for (int wait_ms = 1000; la && wait_ms >= 0; wait_ms -= 1000) {
		CU_ASSERT_EQUAL(acquire(la, 1000, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
		/* The two-argument form returns once the session is gone. */
		CU_ASSERT(dlock_testpg_num(mon, "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
		                       "WHERE application_name = $1", app) >= 1);
		CU_ASSERT_EQUAL(acquire(la, wait_ms, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	}
	PQfinish(mon);
	dlock_lock_free(la);
	dlock_client_close(a);
}

/*
 * The same, with a second handle of the holder's own client waiting for
 * the name: the loss lets it in without the holder's release (Curator's
 * testKilledSession).
 */
static void test_terminate_local_waiter(void)
{
	char name[128], app[64];
	unique_name(name, sizeof name, "terminate-local");
	snprintf(app, sizeof app, "dlock-terml-%ld-%u", (long)getpid(), name_counter);
	dlock_client *a = open_app(app);
	dlock_lock *l1 = new_lock(a, name), *l2 = new_lock(a, name);
	PGconn *mon = dlock_testpg_monitor();
	lost_rec r;
	lost_init(&r);
	if (l1 && l2 && expect(acquire(l1, 0, 1500, on_lost, &r), DLOCK_OK)) {
		uint64_t t1 = dlock_test_token(l1);
		dlock_test_waiter w;
		dlock_test_waiter_start(&w, l2, 2 * AWAIT_MS, 0);
		CU_ASSERT(terminate_app(mon, app) >= 1);
		CU_ASSERT_EQUAL(lost_await(&r, AWAIT_MS), 1);
		if (expect(dlock_test_waiter_join(&w, AWAIT_MS), DLOCK_OK)) {
			CU_ASSERT(w.token > t1);
			CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_ENOTHELD);
			CU_ASSERT_EQUAL(dlock_check(l2), DLOCK_OK);
			CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_OK);
		}
	}
	PQfinish(mon);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	dlock_client_close(a);
	lost_destroy(&r);
}

/*
 * Advisory mode leaves an idle session the idle timeout of its last lease
 * (so release does not pay for resetting it): the server ends that session
 * once it has been idle that long, and the next acquisition must not
 * notice — it gets a live connection, not an error.
 */
typedef struct idle_watch {
	PGconn *mon;
	const char *app;
} idle_watch;

static int app_gone(void *arg)
{
	idle_watch *w = arg;
	return backends_of(w->mon, w->app) == 0;
}

static void test_idle_session_ends(void)
{
	char name[128], app[64], uri[1024], param[96];
	unique_name(name, sizeof name, "idle");
	snprintf(app, sizeof app, "dlock-idle-%ld-%u", (long)getpid(), name_counter);
	snprintf(param, sizeof param, "application_name=%s", app);
	uri_with(uri, sizeof uri, dlock_test_env("DLOCK_TEST_PG_URI"), param);
	dlock_client *c = open_uri(uri);
	dlock_lock *l = new_lock(c, name);
	idle_watch w = { .mon = dlock_testpg_monitor(), .app = app };
	if (l && expect(dlock_test_acquire(l, 0, 300, 0, NULL, NULL), DLOCK_OK)) {
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		CU_ASSERT_EQUAL(backends_of(w.mon, app), 1); /* kept for the next acquisition */
		CU_ASSERT(dlock_test_await(app_gone, &w, AWAIT_MS));
		CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 300, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(backends_of(w.mon, app), 1);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		/* A longer lease on the same session replaces the 300 ms: three
		 * times that without a statement, the session and lock are there. */
		CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 60000, 0, NULL, NULL), DLOCK_OK);
		dlock_test_sleep_ms(900);
		CU_ASSERT_EQUAL(backends_of(w.mon, app), 1);
		CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	PQfinish(w.mon);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* Shared with the stopped child. */
typedef struct stop_shared {
	lost_rec lost;
	atomic_int holding;
	uint64_t token;
	dlock_status release_st;
	int calls;
	dlock_lost_reason reason;
} stop_shared;

#define STOP_LEASE_MS 1000

static int stopped_child(const char *name, stop_shared *sh)
{
	dlock_client *c = NULL;
	dlock_lock *l = NULL;
	if (dlock_client_open(&c, mode_uri, NULL, NULL, 0) != DLOCK_OK || dlock_lock_new(c, name, &l) != DLOCK_OK ||
	    acquire(l, 0, STOP_LEASE_MS, on_lost, &sh->lost) != DLOCK_OK)
		return 1;
	dlock_lock_fencing_token(l, &sh->token);
	atomic_store(&sh->holding, 1);
	/* The parent stops this process here, and resumes it much later. */
	sh->calls = lost_await(&sh->lost, AWAIT_MS + 20000);
	sh->reason = sh->lost.reason;
	sh->release_st = dlock_release(l);
	dlock_lock_free(l);
	dlock_client_close(c);
	return 0;
}

static int holding(void *arg)
{
	return atomic_load(&((stop_shared *)arg)->holding);
}

static void test_sigstop_holder(void)
{
	char name[128];
	unique_name(name, sizeof name, "sigstop");
	stop_shared *sh = dlock_test_shared_alloc(sizeof *sh);
	lost_init(&sh->lost);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(stopped_child(name, sh));
	CU_ASSERT_FATAL(pid > 0);
	dlock_client *c = NULL;
	dlock_lock *l = NULL;
	int held = dlock_test_await(holding, sh, AWAIT_MS);
	CU_ASSERT(held);
	if (held) {
		kill(pid, SIGSTOP);
		c = open_uri(mode_uri);
		l = new_lock(c, name);
		int64_t t0 = dlock_test_now_ms();
		CU_ASSERT_EQUAL(acquire(l, STOP_LEASE_MS + AWAIT_MS, 0, NULL, NULL), DLOCK_OK);
		int64_t ms = dlock_test_now_ms() - t0;
		printf("\n    the server freed the stopped holder's lock after %lld ms (lease %d ms)", (long long)ms,
		       STOP_LEASE_MS);
		CU_ASSERT(ms >= STOP_LEASE_MS / 2);
		CU_ASSERT(dlock_test_token(l) > sh->token);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	kill(pid, SIGCONT);
	int status = 0;
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CU_ASSERT_EQUAL(sh->calls, 1);
	CU_ASSERT(sh->reason == DLOCK_LOST_EXPIRED || sh->reason == DLOCK_LOST_SESSION);
	CU_ASSERT_EQUAL(sh->release_st, DLOCK_ENOTHELD);
	dlock_lock_free(l);
	dlock_client_close(c);
	lost_destroy(&sh->lost);
	dlock_test_shared_free(sh, sizeof *sh);
}

/* A bounded wait ends within its bound; the same client then works normally. */
static void test_bounded_wait_then_normal(void)
{
	enum { BOUND = 300 };
	char name[128], other[128], app[64];
	unique_name(name, sizeof name, "bounded");
	unique_name(other, sizeof other, "bounded-other");
	snprintf(app, sizeof app, "dlock-bounded-%ld", (long)getpid());
	dlock_client *holder = open_uri(mode_uri), *c = open_app(app);
	dlock_lock *h = new_lock(holder, name), *l = new_lock(c, name);
	PGconn *mon = dlock_testpg_monitor();
	if (h && l && expect(acquire(h, 0, 0, NULL, NULL), DLOCK_OK)) {
		int64_t t0 = dlock_test_now_ms();
		CU_ASSERT_EQUAL(acquire(l, BOUND, 0, NULL, NULL), DLOCK_ETIMEDOUT);
		int64_t ms = dlock_test_now_ms() - t0;
		printf("\n    a %d ms wait returned after %lld ms", BOUND, (long long)ms);
		CU_ASSERT(ms >= BOUND - 20 && ms <= BOUND + SLACK_MS);
		CU_ASSERT_EQUAL(dlock_test_probe(c, other), DLOCK_OK);
		if (!via_bouncer) /* the timed-out connection was reused */
			CU_ASSERT_EQUAL(backends_of(mon, app), 1);
		CU_ASSERT_EQUAL(dlock_release(h), DLOCK_OK);
		CU_ASSERT_EQUAL(acquire(l, 1000, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	PQfinish(mon);
	dlock_lock_free(h);
	dlock_lock_free(l);
	dlock_client_close(holder);
	dlock_client_close(c);
}

/* Odd names are just names: quotes, semicolons, bytes that are not UTF-8. */
static void test_odd_names(void)
{
	static const char *const names[] = {
		"'; DROP TABLE dlock_locks; --", "\"); SELECT pg_sleep(10); --", "$1 $2 %s %n \\x00",
		"\xff\xfe\x80 not utf-8", "a\x01\x02\x7f\xc3\x28", "E'\\\\'",
	};
	dlock_client *a = open_uri(mode_uri), *b = open_uri(mode_uri);
	PGconn *mon = dlock_testpg_monitor();
	char big[DLOCK_NAME_MAX + 1];
	memset(big, '\xff', DLOCK_NAME_MAX);
	big[DLOCK_NAME_MAX] = '\0';
	for (size_t i = 0; a && b && i <= sizeof names / sizeof names[0]; i++) {
		const char *name = i < sizeof names / sizeof names[0] ? names[i] : big;
		dlock_lock *l = new_lock(a, name);
		if (!l || !expect(acquire(l, 1000, 0, NULL, NULL), DLOCK_OK)) {
			dlock_lock_free(l);
			continue;
		}
		CU_ASSERT_EQUAL(dlock_test_probe(b, name), DLOCK_EBUSY);
		size_t n;
		char *ns;
		char key[32];
		snprintf(key, sizeof key, "%lld", (long long)documented_key(l, name, &ns, &n));
		if (mode_is_row) { /* the row holds exactly those bytes */
			const char *values[1] = { ns };
			int lengths[1] = { (int)n }, formats[1] = { 1 };
			PGresult *r = PQexecParams(mon, "SELECT count(*) FROM dlock_locks WHERE name = $1", 1, NULL,
			                           values, lengths, formats, 0);
			CU_ASSERT(PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "1") == 0);
			PQclear(r);
		} else { /* the server shows the documented key as held */
			CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
			                             "AND granted AND objsubid = 1 "
			                             "AND classid = (($1::int8 >> 32) & 4294967295)::oid "
			                             "AND objid = ($1::int8 & 4294967295)::oid", key),
			                1);
		}
		free(ns);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_probe(b, name), DLOCK_OK);
		dlock_lock_free(l);
	}
	if (mode_is_row) /* and the table is still there */
		CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT count(*) FROM pg_class WHERE relname = 'dlock_locks'", NULL), 1);
	PQfinish(mon);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* How many connections a client needs for many held locks. */
static void test_many_locks_connections(void)
{
	enum { N = 50 };
	char app[64], names[N][128];
	snprintf(app, sizeof app, "dlock-many-%ld-%d", (long)getpid(), mode_is_row);
	dlock_client *c = open_app(app), *other = open_uri(mode_uri);
	dlock_lock *locks[N] = { NULL };
	PGconn *mon = dlock_testpg_monitor();
	int ok = c && other;
	for (int i = 0; ok && i < N; i++) {
		unique_name(names[i], sizeof names[i], "many");
		locks[i] = new_lock(c, names[i]);
		ok = locks[i] && acquire(locks[i], 0, 0, NULL, NULL) == DLOCK_OK;
	}
	CU_ASSERT(ok);
	long long n = backends_of(mon, app);
	printf("\n    %d locks held on %lld connections", N, n);
	CU_ASSERT(mode_is_row ? n >= N : n <= 2);
	for (int i = 0; ok && i < N; i++)
		CU_ASSERT_EQUAL(dlock_test_probe(other, names[i]), DLOCK_EBUSY);
	for (int i = 0; i < N; i++) {
		if (ok)
			CU_ASSERT_EQUAL(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	for (int i = 0; ok && i < N; i += 5)
		CU_ASSERT_EQUAL(dlock_test_probe(other, names[i]), DLOCK_OK);
	PQfinish(mon);
	dlock_client_close(c);
	dlock_client_close(other);
}

/* ------------------------------------------------------------ contended */

#define PROCS 4
#define THREADS 4
#define ITERS 25

typedef struct contend_shared {
	atomic_llong last_release_ns; /* CLOCK_MONOTONIC is system-wide */
	atomic_llong handoff_sum_ns, handoff_max_ns, handoffs;
	atomic_int errors, done;
} contend_shared;

typedef struct contend_arg {
	dlock_client *client;
	const char *name;
	contend_shared *sh;
	dlock_test_overlap *ov;
} contend_arg;

static long long mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void record_handoff(contend_shared *sh)
{
	long long last = atomic_load(&sh->last_release_ns);
	if (!last)
		return;
	long long d = mono_ns() - last, max = atomic_load(&sh->handoff_max_ns);
	atomic_fetch_add(&sh->handoff_sum_ns, d);
	atomic_fetch_add(&sh->handoffs, 1);
	while (d > max && !atomic_compare_exchange_weak(&sh->handoff_max_ns, &max, d))
		;
}

static void *contend_thread(void *p)
{
	contend_arg *a = p;
	dlock_lock *l = NULL;
	if (dlock_lock_new(a->client, a->name, &l) != DLOCK_OK) {
		atomic_fetch_add(&a->sh->errors, 1);
		return NULL;
	}
	for (int i = 0; i < ITERS; i++) {
		if (acquire(l, LONG_WAIT_MS, 0, NULL, NULL) != DLOCK_OK) {
			atomic_fetch_add(&a->sh->errors, 1);
			continue;
		}
		record_handoff(a->sh);
		dlock_test_overlap_enter(a->ov);
		dlock_test_overlap_leave(a->ov);
		atomic_store(&a->sh->last_release_ns, mono_ns());
		if (dlock_release(l) != DLOCK_OK)
			atomic_fetch_add(&a->sh->errors, 1);
		atomic_fetch_add(&a->sh->done, 1);
	}
	dlock_lock_free(l);
	return NULL;
}

static int contend_child(const char *name, contend_shared *sh, dlock_test_overlap *ov)
{
	dlock_client *c = NULL;
	if (dlock_client_open(&c, mode_uri, NULL, NULL, 0) != DLOCK_OK)
		return 1;
	pthread_t t[THREADS];
	contend_arg a = { .client = c, .name = name, .sh = sh, .ov = ov };
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, contend_thread, &a);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	return dlock_client_close(c) == DLOCK_OK ? 0 : 1;
}

static void test_contended(void)
{
	char name[128];
	unique_name(name, sizeof name, "contended");
	contend_shared *sh = dlock_test_shared_alloc(sizeof *sh);
	dlock_test_overlap *ov = dlock_test_overlap_new();
	pid_t pids[PROCS];
	int64_t t0 = dlock_test_now_ms();
	fflush(NULL);
	for (int i = 0; i < PROCS; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(contend_child(name, sh, ov));
	}
	for (int i = 0; i < PROCS; i++) {
		int status = 0;
		CU_ASSERT_EQUAL(waitpid(pids[i], &status, 0), pids[i]);
		CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	int64_t ms = dlock_test_now_ms() - t0;
	long long n = atomic_load(&sh->handoffs);
	printf("\n    %d threads in %d processes, %d acquisitions in %lld ms; handoff avg %.0f us, max %.0f us",
	       PROCS * THREADS, PROCS, atomic_load(&sh->done), (long long)ms,
	       n ? (double)atomic_load(&sh->handoff_sum_ns) / (double)n / 1000.0 : 0.0,
	       (double)atomic_load(&sh->handoff_max_ns) / 1000.0);
	CU_ASSERT_EQUAL(atomic_load(&sh->errors), 0);
	CU_ASSERT_EQUAL(atomic_load(&sh->done), PROCS * THREADS * ITERS);
	CU_ASSERT_EQUAL(dlock_test_overlap_violations(ov), 0);
	CU_ASSERT_EQUAL(dlock_test_overlap_count(ov), (uint64_t)PROCS * THREADS * ITERS);
	dlock_test_overlap_free(ov);
	dlock_test_shared_free(sh, sizeof *sh);
}

/* ------------------------------------------------------------ advisory only */

/*
 * ROLLBACK and dlock: an application never shares dlock's connections, so
 * its transactions cannot release dlock's locks.  On the server, a session
 * advisory lock taken inside a transaction survives its ROLLBACK — which is
 * why dlock ends a session whose acquiring statement failed after locking.
 */
static void test_rollback(void)
{
	if (mode_is_row) {
		CU_PASS("row locks end with their transaction by design");
		return;
	}
	char name[128];
	unique_name(name, sizeof name, "rollback");
	dlock_client *a = open_uri(mode_uri), *b = open_uri(mode_uri);
	dlock_lock *l = new_lock(a, name);
	PGconn *mon = dlock_testpg_monitor();
	size_t n;
	char *ns = NULL;
	char key[32] = "0";
	if (l)
		snprintf(key, sizeof key, "%lld", (long long)documented_key(l, name, &ns, &n));
	free(ns);
	if (l && expect(acquire(l, 0, 0, NULL, NULL), DLOCK_OK)) {
		PQclear(PQexec(mon, "BEGIN"));
		CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT pg_try_advisory_lock($1::int8)::int", key), 0);
		PQclear(PQexec(mon, "ROLLBACK"));
		CU_ASSERT_EQUAL(dlock_test_probe(b, name), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	/* Server semantics: the lock outlives the ROLLBACK of its transaction. */
	PQclear(PQexec(mon, "BEGIN"));
	CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT pg_try_advisory_lock($1::int8)::int", key), 1);
	PQclear(PQexec(mon, "ROLLBACK"));
	CU_ASSERT_EQUAL(dlock_test_probe(b, name), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT pg_advisory_unlock($1::int8)::int", key), 1);
	CU_ASSERT_EQUAL(dlock_test_probe(b, name), DLOCK_OK);
	PQfinish(mon);
	dlock_lock_free(l);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* ------------------------------------------------------------ read-write locks */

/* One acquire of a read-write handle on a thread of its own; the lock stays held (release from any thread). */
typedef struct rw_taker {
	dlock_lock *lock;
	dlock_lock_mode mode;
	int64_t wait_ms;
	pthread_t thread;
	atomic_int done;
	dlock_status status;
} rw_taker;

static void *rw_taker_run(void *arg)
{
	rw_taker *t = arg;
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = t->wait_ms;
	o.mode = t->mode;
	t->status = dlock_acquire(t->lock, &o);
	atomic_store(&t->done, 1);
	return NULL;
}

static void rw_taker_start(rw_taker *t, dlock_lock *lock, dlock_lock_mode mode, int64_t wait_ms)
{
	memset(t, 0, sizeof *t);
	t->lock = lock;
	t->mode = mode;
	t->wait_ms = wait_ms;
	if (pthread_create(&t->thread, NULL, rw_taker_run, t) != 0)
		abort();
}

static int rw_taker_done(void *arg)
{
	return atomic_load(&((rw_taker *)arg)->done);
}

/* The acquire's status, once it returned; the thread is left unjoined (see rw_taker_join). */
static dlock_status rw_taker_status(rw_taker *t)
{
	int done = dlock_test_await(rw_taker_done, t, LONG_WAIT_MS);
	CU_ASSERT(done);
	while (!done) { /* a hang is a failure, not a hung test program */
		dlock_cancel(t->lock);
		done = dlock_test_await(rw_taker_done, t, 100);
	}
	return t->status;
}

/* Join the thread: only once the lock it took is released, as a joined thread's id may be given to
 * the next thread, which the core would then take for the holder (one thread, two handles). */
static dlock_status rw_taker_join(rw_taker *t)
{
	dlock_status st = rw_taker_status(t);
	pthread_join(t->thread, NULL);
	return st;
}

/* dlock_acquire() in `mode` on the calling thread. */
static dlock_status rw_acquire(dlock_lock *l, dlock_lock_mode mode, int64_t wait_ms)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.mode = mode;
	return dlock_acquire(l, &o);
}

static uint64_t server_acquires(dlock_client *c)
{
	dlock_client_stats st;
	CU_ASSERT_EQUAL(dlock_client_get_stats(c, &st), DLOCK_OK);
	return st.server_acquires;
}

static dlock_lock *new_rwlock(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	if (c)
		CU_ASSERT_EQUAL(dlock_rwlock_new(c, name, &l), DLOCK_OK);
	return l;
}

static int64_t key_of(dlock_lock *l)
{
	int64_t key = 0;
	CU_ASSERT_EQUAL(dlock_lock_control(l, DLOCK_PG_CTL_ADVISORY_KEY, &key), DLOCK_OK);
	return key;
}

/* Sessions that hold (granted 1) or wait for (0) advisory key `key` in `mode` ("ShareLock",
 * "ExclusiveLock"); -1 on error. */
static long long key_sessions(PGconn *pg, int64_t key, const char *mode, int granted)
{
	char k[24];
	snprintf(k, sizeof k, "%lld", (long long)key);
	const char *values[3] = { k, mode, granted ? "t" : "f" };
	PGresult *r = PQexecParams(pg,
	                           "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' "
	                           "AND objsubid = 1 AND classid = (($1::int8 >> 32) & 4294967295)::oid "
	                           "AND objid = ($1::int8 & 4294967295)::oid AND mode = $2 AND granted = $3::bool",
	                           3, NULL, values, NULL, NULL, 0);
	long long v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK)
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	else
		printf("\n    pg_locks: %s", PQresultErrorMessage(r));
	PQclear(r);
	return v;
}

typedef struct key_wait {
	PGconn *mon;
	int64_t key;
} key_wait;

/* For dlock_test_await(): a session waits for the key in exclusive mode. */
static int writer_queued(void *arg)
{
	key_wait *k = arg;
	return key_sessions(k->mon, k->key, "ExclusiveLock", 0) == 1;
}

/*
 * Two readers of one client, then a writer of the same client: the writer
 * waits until both readers have released.  In advisory mode the server
 * shows the two readers as two sessions holding the key in ShareLock (each
 * its own lock: the second reader was not sent on the first one's
 * session), a release gives back one of them, and the writer then holds
 * it in ExclusiveLock alone.
 */
static void test_rw_one_client(void)
{
	char name[128], app[64];
	unique_name(name, sizeof name, "rw-one-client");
	snprintf(app, sizeof app, "dlock-rw1-%ld-%u", (long)getpid(), name_counter);
	dlock_client *a = open_app(app);
	dlock_lock *r1 = new_rwlock(a, name), *r2 = new_rwlock(a, name), *w = new_rwlock(a, name);
	PGconn *mon = dlock_testpg_monitor();
	rw_taker t2, tw;
	int64_t key = 0;
	/* r1 on this thread; r2 and the writer on threads of their own, joined only at the end. */
	if (!r1 || !r2 || !w || !expect(rw_acquire(r1, DLOCK_MODE_SHARED, 0), DLOCK_OK))
		goto done;
	key = key_of(r1);
	CU_ASSERT_EQUAL(key_of(w), key);
	rw_taker_start(&t2, r2, DLOCK_MODE_SHARED, 0);
	if (expect(rw_taker_status(&t2), DLOCK_OK)) {
		CU_ASSERT_EQUAL(backends_of(mon, app), 2);
		if (!mode_is_row) { /* two sessions, each with its own shared lock of the key */
			CU_ASSERT_EQUAL(key_sessions(mon, key, "ShareLock", 1), 2);
			CU_ASSERT_EQUAL(key_sessions(mon, key, "ExclusiveLock", 1), 0);
		}
		CU_ASSERT_EQUAL(dlock_check(r2), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(dlock_check(r1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(r1, &(uint64_t){ 0 }), DLOCK_ENOTSUP);
	rw_taker_start(&tw, w, DLOCK_MODE_EXCLUSIVE, LONG_WAIT_MS);
	CU_ASSERT_EQUAL(dlock_release(r1), DLOCK_OK);
	if (!mode_is_row) /* one level given back: the other reader's lock stays */
		CU_ASSERT_EQUAL(key_sessions(mon, key, "ShareLock", 1), 1);
	CU_ASSERT_EQUAL(dlock_check(r2), DLOCK_OK);
	CU_ASSERT(!rw_taker_done(&tw));
	CU_ASSERT_EQUAL(dlock_release(r2), DLOCK_OK);
	if (expect(rw_taker_status(&tw), DLOCK_OK)) {
		CU_ASSERT(dlock_test_token(w) > 0);
		if (!mode_is_row) {
			CU_ASSERT_EQUAL(key_sessions(mon, key, "ShareLock", 1), 0);
			CU_ASSERT_EQUAL(key_sessions(mon, key, "ExclusiveLock", 1), 1);
		}
		CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	}
	if (!mode_is_row)
		CU_ASSERT_EQUAL(key_sessions(mon, key, "ExclusiveLock", 1), 0);
	rw_taker_join(&t2);
	rw_taker_join(&tw);
done:
	PQfinish(mon);
	dlock_lock_free(r1);
	dlock_lock_free(r2);
	dlock_lock_free(w);
	dlock_client_close(a);
}

/*
 * Advisory mode: a reader of client A holds, a writer of client B waits on
 * the server, and a second reader of A, sent to the server beside A's own
 * reader, must not get in (writer-first).  On the first reader's session
 * PostgreSQL would grant it at once, queue or not, so this fails if the
 * pool ever offers a session that holds the key.  Once the first reader
 * leaves, the writer gets the lock.
 */
static void test_rw_writer_first_one_client(void)
{
	char name[128];
	unique_name(name, sizeof name, "rw-writer-first");
	const char *uri = dlock_test_env("DLOCK_TEST_PG_URI");
	dlock_client *a = open_uri(uri), *b = open_uri(uri);
	dlock_lock *r1 = new_rwlock(a, name), *r2 = new_rwlock(a, name), *w = new_rwlock(b, name);
	PGconn *mon = dlock_testpg_monitor();
	rw_taker tw, t2;
	if (!r1 || !r2 || !w || !expect(rw_acquire(r1, DLOCK_MODE_SHARED, 0), DLOCK_OK))
		goto done;
	key_wait k = { .mon = mon, .key = key_of(r1) };
	rw_taker_start(&tw, w, DLOCK_MODE_EXCLUSIVE, LONG_WAIT_MS);
	CU_ASSERT(dlock_test_await(writer_queued, &k, AWAIT_MS));
	uint64_t sent = server_acquires(a);
	rw_taker_start(&t2, r2, DLOCK_MODE_SHARED, 0);
	CU_ASSERT_EQUAL(rw_taker_join(&t2), DLOCK_EBUSY); /* not held: joining is harmless */
	CU_ASSERT_EQUAL(server_acquires(a), sent + 1);   /* the server said no, not the core */
	CU_ASSERT_EQUAL(key_sessions(mon, k.key, "ShareLock", 1), 1);
	CU_ASSERT(!rw_taker_done(&tw));
	CU_ASSERT_EQUAL(dlock_release(r1), DLOCK_OK);
	if (expect(rw_taker_status(&tw), DLOCK_OK)) {
		CU_ASSERT_EQUAL(rw_acquire(r2, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(dlock_release(w), DLOCK_OK);
	}
	rw_taker_join(&tw);
	/* Free again: the second reader gets in. */
	if (expect(rw_acquire(r2, DLOCK_MODE_SHARED, 0), DLOCK_OK))
		CU_ASSERT_EQUAL(dlock_release(r2), DLOCK_OK);
done:
	PQfinish(mon);
	dlock_lock_free(r1);
	dlock_lock_free(r2);
	dlock_lock_free(w);
	dlock_client_close(a);
	dlock_client_close(b);
}

/*
 * A mutex and a read-write lock of one name meet on one advisory key (one
 * row): a mutex holder keeps readers and writers of another client out,
 * and a reader keeps the mutex out (KIND_CHECK 0: nothing to refuse).
 */
static void test_rw_mutex_same_key(void)
{
	char name[128];
	unique_name(name, sizeof name, "rw-mutex");
	dlock_client *a = open_uri(mode_uri), *b = open_uri(mode_uri);
	dlock_lock *m = new_lock(a, name), *r = new_rwlock(b, name);
	int64_t kc = -1;
	if (!m || !r)
		goto done;
	CU_ASSERT_EQUAL(dlock_client_feature(a, DLOCK_FEATURE_KIND_CHECK, &kc), DLOCK_OK);
	CU_ASSERT_EQUAL(kc, 0);
	CU_ASSERT_EQUAL(key_of(m), key_of(r));
	if (expect(acquire(m, 0, 0, NULL, NULL), DLOCK_OK)) { /* two clients: the server decides */
		CU_ASSERT_EQUAL(rw_acquire(r, DLOCK_MODE_SHARED, 0), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(rw_acquire(r, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	}
	if (expect(rw_acquire(r, DLOCK_MODE_SHARED, 0), DLOCK_OK)) {
		CU_ASSERT_EQUAL(acquire(m, 0, 0, NULL, NULL), DLOCK_EBUSY);
		CU_ASSERT_EQUAL(dlock_release(r), DLOCK_OK);
	}
done:
	dlock_lock_free(m);
	dlock_lock_free(r);
	dlock_client_close(a);
	dlock_client_close(b);
}

/* ------------------------------------------------------------ suites */

/* ------------------------------------------------------------ semaphores */

static dlock_lock *new_sem(dlock_client *c, const char *name, uint32_t n)
{
	dlock_lock *l = NULL;
	if (c)
		CU_ASSERT_EQUAL(dlock_semaphore_new(c, name, n, &l), DLOCK_OK);
	return l;
}

static uint32_t slot_of(dlock_lock *l)
{
	uint32_t slot = 9999;
	CU_ASSERT_EQUAL(dlock_lock_permit_slot(l, &slot), DLOCK_OK);
	return slot;
}

/* The two-int keys of a semaphore, from the documentation (pg_hash.c): bytes 8..15 of the SHA-256 of
 * "dlock:" name. */
static void sem_keys(const char *name, long *hi, long *base)
{
	char ns[256];
	unsigned char sum[32];
	uint32_t a = 0, b = 0;
	snprintf(ns, sizeof ns, "dlock:%s", name);
	dlock_sha256(ns, strlen(ns), sum);
	for (int i = 8; i < 12; i++)
		a = a << 8 | sum[i];
	for (int i = 12; i < 16; i++)
		b = b << 8 | sum[i];
	*hi = (long)(a & 0x7fffffffu);
	*base = (long)(0x40000000u | (b & 0x3ffff000u));
}

/* Sessions that hold (or wait with) the marker of a semaphore `name` of `n` permits: how many
 * (`count`), or the greatest pid of them; -1 on error. */
static long long marker_sessions(PGconn *mon, const char *name, uint32_t n, int count)
{
	long hi, base;
	char sql[320];
	sem_keys(name, &hi, &base);
	snprintf(sql, sizeof sql,
	         "SELECT %s FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
	         "AND granted AND mode = 'ShareLock' AND classid = %ld AND objid = %ld",
	         count ? "count(DISTINCT pid)" : "COALESCE(max(pid), -1)", hi, base + 1023 + (long)n);
	return dlock_testpg_num(mon, sql, NULL);
}

/*
 * N permits across N clients, each with its own slot and a greater token;
 * the (N+1)th client is refused a try and waits; a release wakes it by
 * NOTIFY, well before the waiters' poll (500 ms), and it gets the freed
 * slot.
 */
static void test_sem_permits(void)
{
	enum { N = 3 };
	char name[128];
	unique_name(name, sizeof name, "sem-permits");
	const char *uri = mode_uri;
	dlock_client *c[N + 1];
	dlock_lock *l[N + 1];
	uint64_t max_token = 0;
	unsigned seen = 0;
	for (int i = 0; i <= N; i++) {
		c[i] = open_uri(uri);
		l[i] = new_sem(c[i], name, N);
		CU_ASSERT_PTR_NOT_NULL_FATAL(l[i]);
	}
	for (int i = 0; i < N; i++) {
		CU_ASSERT_EQUAL_FATAL(acquire(l[i], 0, 0, NULL, NULL), DLOCK_OK);
		uint32_t s = slot_of(l[i]);
		CU_ASSERT(s < N && !(seen & 1u << s));
		seen |= 1u << s;
		uint64_t t = dlock_test_token(l[i]);
		CU_ASSERT(t > max_token);
		max_token = t;
	}
	CU_ASSERT_EQUAL(acquire(l[N], 0, 0, NULL, NULL), DLOCK_EBUSY);
	printf("\n    try with %d permits held: %s", N, dlock_client_errmsg(c[N]));
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, l[N], LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(800); /* past the first poll: it waits for a notification */
	CU_ASSERT(!atomic_load(&w.done));
	uint32_t freed = slot_of(l[1]);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(l[1]), DLOCK_OK);
	if (expect(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK)) {
		printf("\n    handoff by %s: %lld ms", mode_is_row ? "poll" : "NOTIFY", (long long)(w.at_ms - t0));
		CU_ASSERT(w.at_ms - t0 < (mode_is_row ? 500 + SLACK_MS : 250));
		CU_ASSERT_EQUAL(slot_of(l[N]), freed);
		CU_ASSERT(w.token > max_token);
		CU_ASSERT_EQUAL(dlock_release(l[N]), DLOCK_OK);
	}
	for (int i = 0; i < N; i++)
		if (i != 1)
			CU_ASSERT_EQUAL(dlock_release(l[i]), DLOCK_OK);
	for (int i = 0; i <= N; i++) {
		dlock_lock_free(l[i]);
		dlock_client_close(c[i]);
	}
}

/*
 * Two permits of one client: with N = 1 the second waits, and gets in once
 * the first is released; with N = 2 both hold, on two slots (two sessions:
 * a session never takes a slot it holds), and another client is refused.
 */
static void test_sem_one_client(void)
{
	char name[128], name2[128];
	unique_name(name, sizeof name, "sem-one-client");
	unique_name(name2, sizeof name2, "sem-one-client-2");
	const char *uri = mode_uri;
	dlock_client *a = open_uri(uri), *b = open_uri(uri);
	dlock_lock *l1 = new_sem(a, name, 1), *l2 = new_sem(a, name, 1);
	dlock_lock *m1 = new_sem(a, name2, 2), *m2 = new_sem(a, name2, 2), *m3 = new_sem(b, name2, 2);
	PGconn *mon = dlock_testpg_monitor();
	CU_ASSERT_EQUAL_FATAL(acquire(l1, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(slot_of(l1), 0);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, l2, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(600);
	CU_ASSERT(!atomic_load(&w.done));
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_OK);
	if (expect(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK)) {
		printf("\n    second permit of one client (N = 1) after %lld ms", (long long)(w.at_ms - t0));
		CU_ASSERT_EQUAL(slot_of(l2), 0);
		CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(acquire(m1, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(m2, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_NOT_EQUAL(slot_of(m1), slot_of(m2));
	CU_ASSERT_EQUAL(marker_sessions(mon, name2, 2, 1), 2);
	CU_ASSERT_EQUAL(acquire(m3, 0, 0, NULL, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(m1), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(m3, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(m2), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(m3), DLOCK_OK);
	PQfinish(mon);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	dlock_lock_free(m1);
	dlock_lock_free(m2);
	dlock_lock_free(m3);
	dlock_client_close(a);
	dlock_client_close(b);
}

/*
 * The session of a permit's holder ended from outside
 * (pg_terminate_backend): the holder is told (DLOCK_LOST_SESSION, at its
 * next heartbeat) and the permit is free: a waiter of another client gets
 * it, by its bounded poll (no release sends a notification).
 */
static void test_sem_terminate(void)
{
	char name[128];
	unique_name(name, sizeof name, "sem-terminate");
	const char *uri = mode_uri;
	dlock_client *a = open_uri(uri), *b = open_uri(uri);
	dlock_lock *la = new_sem(a, name, 1), *lb = new_sem(b, name, 1);
	PGconn *mon = dlock_testpg_monitor();
	lost_rec lost;
	lost_init(&lost);
	CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 1500, on_lost, &lost), DLOCK_OK);
	long long pid = marker_sessions(mon, name, 1, 0);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(300);
	char p[24];
	snprintf(p, sizeof p, "%lld", pid);
	CU_ASSERT(pid > 0);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_testpg_num(mon, "SELECT pg_terminate_backend($1::int)::int", p), 1);
	if (expect(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK)) {
		printf("\n    permit of an ended session taken after %lld ms", (long long)(w.at_ms - t0));
		CU_ASSERT(w.at_ms - t0 < 500 + SLACK_MS);
		CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	}
	CU_ASSERT(lost_await(&lost, AWAIT_MS) == 1);
	CU_ASSERT_EQUAL(lost.reason, DLOCK_LOST_SESSION);
	dlock_release(la);
	lost_destroy(&lost);
	PQfinish(mon);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
}

/*
 * All clients of a name agree on N: a semaphore of 4 beside holders of 3
 * is DLOCK_EKIND naming both numbers, so is one beside a waiter of 3; once
 * nobody holds or waits, 4 applies.
 */
static void test_sem_n_mismatch(void)
{
	char name[128];
	unique_name(name, sizeof name, "sem-n");
	const char *uri = mode_uri;
	dlock_client *a = open_uri(uri), *b = open_uri(uri), *c = open_uri(uri);
	dlock_lock *la = new_sem(a, name, 1), *lb = new_sem(b, name, 4), *lc = new_sem(c, name, 1);
	CU_ASSERT_EQUAL_FATAL(acquire(la, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(lb, 0, 0, NULL, NULL), DLOCK_EKIND);
	const char *msg = dlock_client_errmsg(b);
	printf("\n    %s", msg);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "semaphore of 1 permits, not 4"));
	/* A waiter of 1 counts too, also once the holder is gone. */
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lc, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(300);
	CU_ASSERT_EQUAL(dlock_test_acquire(lb, 200, 0, -1, NULL, NULL), DLOCK_EKIND);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	if (expect(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK)) {
		CU_ASSERT_EQUAL(acquire(lb, 0, 0, NULL, NULL), DLOCK_EKIND);
		CU_ASSERT_EQUAL(dlock_release(lc), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(acquire(lb, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_lock_free(lc);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_client_close(c);
}

/*
 * One kind per name across clients: a semaphore beside a mutex or a reader
 * is refused (DLOCK_EKIND); a mutex or a writer beside a semaphore's
 * holder is kept out (the holders hold the mutex's key shared).
 */
static void test_sem_kinds(void)
{
	char name[128];
	unique_name(name, sizeof name, "sem-kinds");
	const char *uri = mode_uri;
	dlock_client *a = open_uri(uri), *b = open_uri(uri);
	dlock_lock *mutex = new_lock(a, name), *rw = new_rwlock(a, name), *sem = new_sem(b, name, 2);
	CU_ASSERT_EQUAL_FATAL(acquire(mutex, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(sem, 0, 0, NULL, NULL), DLOCK_EKIND);
	printf("\n    %s", dlock_client_errmsg(b));
	CU_ASSERT_EQUAL(dlock_release(mutex), DLOCK_OK);
	CU_ASSERT_EQUAL(rw_acquire(rw, DLOCK_MODE_SHARED, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(sem, 0, 0, NULL, NULL), DLOCK_EKIND);
	CU_ASSERT_EQUAL(dlock_release(rw), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire(sem, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(mutex, 0, 0, NULL, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(rw_acquire(rw, DLOCK_MODE_EXCLUSIVE, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(rw_acquire(rw, DLOCK_MODE_SHARED, 0), DLOCK_EKIND);
	printf("\n    %s", dlock_client_errmsg(a));
	/* A mutex that waits gets in once the permit is released. */
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, mutex, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(200);
	CU_ASSERT(!atomic_load(&w.done));
	CU_ASSERT_EQUAL(dlock_release(sem), DLOCK_OK);
	if (expect(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK))
		CU_ASSERT_EQUAL(dlock_release(mutex), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(sem, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(sem), DLOCK_OK);
	dlock_lock_free(mutex);
	dlock_lock_free(rw);
	dlock_lock_free(sem);
	dlock_client_close(a);
	dlock_client_close(b);
}

static int init_advisory(void)
{
	mode_uri = dlock_test_env("DLOCK_TEST_PG_URI");
	mode_is_row = via_bouncer = 0;
	return mode_uri ? 0 : 1;
}

static int init_row(void)
{
	mode_uri = dlock_test_env("DLOCK_TEST_PG_ROW_URI");
	mode_is_row = 1;
	via_bouncer = 0;
	return mode_uri ? 0 : 1;
}

static int init_bouncer(void)
{
	mode_uri = dlock_test_env("DLOCK_TEST_PG_BOUNCER_URI");
	mode_is_row = via_bouncer = 1;
	return mode_uri ? 0 : 1;
}

static const struct {
	const char *name;
	CU_TestFunc fn;
} mode_tests[] = {
	{ "terminate_backend", test_terminate_backend },
	{ "terminate_local_waiter", test_terminate_local_waiter },
	{ "terminate_idle_session", test_terminate_idle_session },
	{ "sigstop_holder", test_sigstop_holder },
	{ "bounded_wait_then_normal", test_bounded_wait_then_normal },
	{ "odd_names", test_odd_names },
	{ "many_locks_connections", test_many_locks_connections },
	{ "rollback", test_rollback },
	{ "contended", test_contended },
	{ "rw_one_client", test_rw_one_client },
	{ "rw_mutex_same_key", test_rw_mutex_same_key },
};

static void add_mode_suite(const char *name, CU_InitializeFunc init)
{
	CU_pSuite s = CU_add_suite(name, init, NULL);
	for (size_t i = 0; i < sizeof mode_tests / sizeof mode_tests[0]; i++)
		CU_add_test(s, mode_tests[i].name, mode_tests[i].fn);
}

/*
 * Many advisory locks held by one client at a short lease: they share a
 * few sessions, and each batch of renewals sends one heartbeat per session
 * (the idle timeout is the session's), not one per lock.  None is lost,
 * and each is still held.
 */
static void test_held_many(void)
{
	enum { N = 1000, LEASE_MS = 1500 };
	char name[32];
	dlock_client *c = dlock_test_open(dlock_test_env("DLOCK_TEST_PG_URI"), NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	static dlock_lock *locks[N];
	dlock_test_lost lost = { 0 };
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "held-%d", i);
		locks[i] = dlock_test_new_lock(c, name);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(locks[i], 0, LEASE_MS, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	}
	dlock_client_stats st;
	CU_ASSERT_EQUAL(dlock_client_get_stats(c, &st), DLOCK_OK);
	dlock_test_count r = { c, st.renewals + 2 * N };
	CU_ASSERT(dlock_test_await(dlock_test_renewed, &r, 30000));
	int held = 0;
	for (int i = 0; i < N; i++) {
		held += dlock_check(locks[i]) == DLOCK_OK;
		CU_ASSERT_EQUAL(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	printf("\n    %d of %d locks held at a %d ms lease, %d lost", held, N, LEASE_MS, atomic_load(&lost.count));
	CU_ASSERT_EQUAL(held, N);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 0);
	dlock_client_close(c);
}

/*
 * The server's lock table full (SQLSTATE 53200, "out of shared memory"): a
 * session of the test's own fills it with advisory locks (it holds about
 * max_locks_per_transaction x (max_connections + max_prepared_transactions)
 * for every session together); an acquisition is then DLOCK_ELIMIT with a
 * message that names the setting, not a bare server error, and works again
 * once the table has room.
 */
static void test_lock_table_full(void)
{
	/* Opened, and its session made, before: a new session cannot even start while the table is full. */
	dlock_client *c = dlock_test_open(dlock_test_env("DLOCK_TEST_PG_URI"), NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *l = dlock_test_new_lock(c, "table-full");
	CU_ASSERT_EQUAL(acquire(l, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	PGconn *filler = dlock_testpg_monitor();
	PGresult *r = PQexec(filler, "SELECT count(pg_advisory_lock(2000000000 + g)) FROM generate_series(1, 1000000) g");
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	int full = state && strcmp(state, "53200") == 0;
	PQclear(r);
	dlock_status st = full ? acquire(l, 0, 0, NULL, NULL) : DLOCK_OK;
	printf("\n    %s: %s", dlock_status_name(st), dlock_client_errmsg(c));
	CU_ASSERT(full);
	CU_ASSERT_EQUAL(st, DLOCK_ELIMIT);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "max_locks_per_transaction"));
	r = PQexec(filler, "SELECT pg_advisory_unlock_all()");
	CU_ASSERT_EQUAL(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	PQfinish(filler);
	CU_ASSERT_EQUAL(acquire(l, 0, 0, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void add_sem_suite(const char *name, CU_InitializeFunc init)
{
	CU_pSuite s = CU_add_suite(name, init, NULL);
	CU_add_test(s, "sem_permits", test_sem_permits);
	CU_add_test(s, "sem_one_client", test_sem_one_client);
	CU_add_test(s, "sem_terminate", test_sem_terminate);
	CU_add_test(s, "sem_n_mismatch", test_sem_n_mismatch);
	CU_add_test(s, "sem_kinds", test_sem_kinds);
}

static void add_sem_suites(void)
{
	add_sem_suite("postgres-semaphore-advisory", init_advisory);
	add_sem_suite("postgres-semaphore-row", init_row);
	if (dlock_test_env("DLOCK_TEST_PG_BOUNCER_URI"))
		add_sem_suite("postgres-semaphore-row-pgbouncer", init_bouncer);
}

/* DLOCK_TEST_PG_SEM_ONLY=1: only the semaphore suites. */
static void add_suites(void)
{
	if (dlock_test_env("DLOCK_TEST_PG_SEM_ONLY")) {
		add_sem_suites();
		return;
	}
	CU_pSuite s = CU_add_suite("postgres", NULL, NULL);
	CU_add_test(s, "wrong_password", test_wrong_password);
	CU_add_test(s, "missing_database", test_missing_database);
	CU_add_test(s, "refused", test_refused);
	CU_add_test(s, "uri_params", test_uri_params);
	CU_add_test(s, "fencing_capability", test_fencing_capability);
	CU_add_test(s, "missing_privilege", test_missing_privilege);
	CU_add_test(s, "cloexec", test_cloexec);
	CU_add_test(s, "idle_session_ends", test_idle_session_ends);
	CU_add_test(s, "first_token_own_session", test_first_token_own_session);
	CU_add_test(s, "lock_table_full", test_lock_table_full);
	CU_add_test(s, "held_many", test_held_many);
	CU_add_test(s, "rw_writer_first_one_client", test_rw_writer_first_one_client);
	add_sem_suites();
	add_mode_suite("postgres-advisory", init_advisory);
	add_mode_suite("postgres-row", init_row);
	if (dlock_test_env("DLOCK_TEST_PG_BOUNCER_URI"))
		add_mode_suite("postgres-row-pgbouncer", init_bouncer);
	else
		printf("SKIPPED: postgres-row-pgbouncer (DLOCK_TEST_PG_BOUNCER_URI unset)\n");
}

int main(void)
{
	if (!dlock_test_env("DLOCK_TEST_PG_URI") || !dlock_test_env("DLOCK_TEST_PG_ROW_URI")) {
		return dlock_test_skip("no PostgreSQL server (DLOCK_TEST_PG_URI unset)");
	}
	return dlock_test_main(add_suites);
}
