/*
 * Passwords never leave dlock, and a Redis user limited to the lock prefix
 * is enough to use it.
 *
 * Every compiled-in backend is opened with URIs that carry a distinctive
 * password: against ports where nothing listens, malformed in the ways
 * that spill a password into other parts of a URI, and against the test
 * servers when the scripts in ci/servers/ exported their variables.  Every log line
 * (at DEBUG), open's errbuf, dlock_client_uri(), dlock_client_errmsg()
 * after failed calls and lost-lock details are searched for the password.
 * dlock-bench's output is searched too (DLOCK_TEST_BENCH: its path).
 *
 * ZooKeeper digest authentication, which keeps other identities from
 * deleting lock nodes and their parents, is tested in test_zookeeper.c
 * (test_acl); here only its password is checked.
 *
 * Servers: DLOCK_TEST_REDIS_PORT, DLOCK_TEST_ZK_PORT, DLOCK_TEST_PG_PW_URI.
 * Without them those parts say SKIPPED and pass, unless
 * DLOCK_TEST_REQUIRE_ALL=1.  The Redis parts drive redis-cli for the raw
 * side (ACL SETUSER, keys the user may not touch).
 */
#include <CUnit/CUnit.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testsupport.h"

/* The password, as written in URIs: plain, percent-encoded (same decoded
 * value) and with an unescaped '/' that ends the authority early. */
#define SECRET "Qx7SECRETpw9Z"
#define SECRET_ENC "Qx7%53ECRETpw9Z"
#define SECRET_SPILL "Qx7SEC/RETpw9Z"
#define LONG_WAIT_MS 30000
#define PROMPT_MS 2000

/* Pieces of the password that no message has any other reason to hold. */
static const char *const fragments[] = { "Qx7", "ECRET", "pw9Z" };
static char pg_password[128]; /* the live PostgreSQL role's own password, when there is one */

static int redis_port, zk_port;
static const char *pg_pw_uri, *bench;

/* ------------------------------------------------------------ leak checks */

static int leaks(const char *text)
{
	for (size_t i = 0; i < sizeof fragments / sizeof fragments[0]; i++)
		if (strstr(text, fragments[i]))
			return 1;
	return pg_password[0] && strstr(text, pg_password);
}

#define CHECK_CLEAN(what, text) check_clean(what, text, __FILE__, __LINE__)

static void check_clean(const char *what, const char *text, const char *file, unsigned line)
{
	int bad = text && leaks(text);
	if (bad)
		printf("\n    %s:%u: %s holds a password: %s", file, line, what, text);
	CU_assertImplementation(bad ? CU_FALSE : CU_TRUE, line, "no password in the text", file, "", CU_FALSE);
}

/* Every log line of the clients of one test, in one buffer. */
static struct {
	pthread_mutex_t mu;
	char text[1 << 18];
	size_t len;
	unsigned lines;
} logbuf = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void log_fn(void *userdata, dlock_log_level level, const char *msg)
{
	(void)userdata;
	(void)level;
	pthread_mutex_lock(&logbuf.mu);
	int n = snprintf(logbuf.text + logbuf.len, sizeof logbuf.text - logbuf.len, "%s\n", msg);
	if (n > 0 && (size_t)n < sizeof logbuf.text - logbuf.len)
		logbuf.len += (size_t)n;
	logbuf.lines++;
	pthread_mutex_unlock(&logbuf.mu);
}

static void log_reset(void)
{
	pthread_mutex_lock(&logbuf.mu);
	logbuf.len = 0;
	logbuf.text[0] = '\0';
	logbuf.lines = 0;
	pthread_mutex_unlock(&logbuf.mu);
}

/* Check (and clear) what the log received since the last reset. */
static void check_log(void)
{
	pthread_mutex_lock(&logbuf.mu);
	CHECK_CLEAN("the log", logbuf.text);
	pthread_mutex_unlock(&logbuf.mu);
	log_reset();
}

static int log_holds(const char *needle)
{
	pthread_mutex_lock(&logbuf.mu);
	int found = strstr(logbuf.text, needle) != NULL;
	pthread_mutex_unlock(&logbuf.mu);
	return found;
}

/* ------------------------------------------------------------ dlock helpers */

/* Open with every log line captured; errbuf and the client's URI are checked. */
static dlock_status open_logged(const char *uri, dlock_client **out, char *err, size_t errlen)
{
	err[0] = '\0';
	dlock_status st = dlock_test_try_open(out, uri, log_fn, NULL, err, errlen);
	CHECK_CLEAN("open's message", err);
	if (st == DLOCK_OK)
		CHECK_CLEAN("dlock_client_uri()", dlock_client_uri(*out));
	return st;
}

static dlock_client *open_ok(const char *uri)
{
	dlock_client *c = NULL;
	char err[512];
	dlock_status st = open_logged(uri, &c, err, sizeof err);
	if (st != DLOCK_OK)
		printf("\n    open: %s: %s", dlock_status_name(st), err);
	CU_ASSERT_EQUAL_FATAL(st, DLOCK_OK);
	return c;
}

/* After a call that failed, its detail must be clean too. */
static void check_errmsg(dlock_client *c, dlock_status st)
{
	if (st != DLOCK_OK)
		CHECK_CLEAN("dlock_client_errmsg()", dlock_client_errmsg(c));
}

/* Acquire, extend, check and release, then the same calls once not held. */
static void exercise(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, name, &l), DLOCK_OK);
	dlock_status st = dlock_test_acquire(l, LONG_WAIT_MS, 0, -1, NULL, NULL);
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	check_errmsg(c, st);
	check_errmsg(c, dlock_extend(l, 0));
	check_errmsg(c, dlock_check(l));
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(st = dlock_release(l), DLOCK_ENOTHELD);
	check_errmsg(c, st);
	check_errmsg(c, dlock_extend(l, 1000));
	check_errmsg(c, dlock_check(l));
	dlock_lock_free(l);
}

/* A TCP port on 127.0.0.1 where nothing listens. */
static int dead_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	CU_ASSERT_FATAL(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
	CU_ASSERT_FATAL(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* redis-cli against the test server, as `user` with `pass` (NULL: the default user). */
static const char *redis_cli(const char *user, const char *pass, const char *args)
{
	static char out[4096];
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "redis-cli -h 127.0.0.1 -p %d --no-auth-warning %s%s %s%s %s 2>&1", redis_port,
	         user ? "--user " : "", user ? user : "", pass ? "--pass " : "", pass ? pass : "", args);
	dlock_test_run(cmd, out, sizeof out);
	return out;
}

static int skip_without(const char *what, int have)
{
	if (!have) {
		const char *req = getenv("DLOCK_TEST_REQUIRE_ALL");
		printf("\n    SKIPPED: %s not set", what);
		CU_ASSERT(!(req && strcmp(req, "1") == 0));
	}
	return !have;
}

/* ------------------------------------------------------------ no server */

/*
 * Each backend and each way of writing the password, against a dead port:
 * every open fails (nothing listens, or the URI is refused) and says so
 * without the password.
 */
static void test_dead_ports(void)
{
	static const char *const forms[] = {
		"%s://alice:" SECRET "@127.0.0.1:%d/0?open_timeout=1s",
		"%s://alice:" SECRET_ENC "@127.0.0.1:%d/0?open_timeout=1s",
		"%s://:" SECRET "@127.0.0.1:%d,127.0.0.1:%d/0?open_timeout=1s",
		"%s://alice:" SECRET_SPILL "@127.0.0.1:%d/0?open_timeout=1s",
		"%s://alice:" SECRET "@127.0.0.1:%d/0?no_such_param=1",
		"%s://alice:" SECRET "@127.0.0.1:%d/0?ttl=soon",
		"%s://alice:" SECRET "@127.0.0.1:%d:1/0",
		"%s://alice:" SECRET "@[::1:%d/0",
		"%s://alice:" SECRET "@127.0.0.1:%d/%%00",
		"%s://alice:" SECRET "@/tmp/dlock-no-such-dir-%d/redis.sock?open_timeout=1s",
		/* What reaches the local backends' own checks of the userinfo (%.0s: no scheme). */
		"mem://alice:" SECRET "@ns-%.0s%d",
		"file://alice:" SECRET "@/tmp/dlock-no-such-dir-%.0s%d",
	};
	char *schemes = strdup(dlock_backends()), *save = NULL;
	CU_ASSERT_FATAL(schemes != NULL);
	for (char *s = strtok_r(schemes, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
		for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
			char uri[512], err[512];
			int port = dead_port();
			snprintf(uri, sizeof uri, forms[i], s, port, port);
			if (strncmp(uri, s, strlen(s)) != 0 || strncmp(uri + strlen(s), "://", 3) != 0)
				continue; /* a form for another scheme */
			dlock_client *c = NULL;
			dlock_status st = open_logged(uri, &c, err, sizeof err);
			if (st == DLOCK_OK) { /* nothing listens: only a mistake in this test gets here */
				printf("\n    %s opened", dlock_client_uri(c));
				dlock_client_close(c);
			}
			CU_ASSERT_NOT_EQUAL(st, DLOCK_OK);
			CU_ASSERT(err[0] != '\0');
			check_log();
		}
	}
	free(schemes);
}

/* ------------------------------------------------------------ live servers */

struct lost {
	atomic_int calls;
	char detail[512];
};

static void on_lost(dlock_lock *l, dlock_lost_reason reason, const char *detail, void *arg)
{
	struct lost *lo = arg;
	(void)l;
	(void)reason;
	snprintf(lo->detail, sizeof lo->detail, "%s", detail ? detail : "");
	atomic_fetch_add(&lo->calls, 1);
}

static int lost_called(void *arg)
{
	return atomic_load(&((struct lost *)arg)->calls) > 0;
}

/* A Redis user with this test's password: log in, lock, lose a lock, fail to log in. */
static void test_redis_live(void)
{
	if (skip_without("DLOCK_TEST_REDIS_PORT", redis_port))
		return;
	char user[64], uri[512], args[256], err[512];
	snprintf(user, sizeof user, "dlsec%d", (int)getpid());
	snprintf(args, sizeof args, "ACL SETUSER %s reset on '>%s' '~*' '&*' +@all", user, SECRET);
	CU_ASSERT_STRING_EQUAL_FATAL(redis_cli(NULL, NULL, args), "OK\n");

	snprintf(uri, sizeof uri, "redis://%s:%s@127.0.0.1:%d?prefix=%s&ttl=1s", user, SECRET_ENC, redis_port, user);
	dlock_client *c = open_ok(uri);
	exercise(c, "live");
	/* A lost lock: its key is deleted behind its back, the next renewal finds out. */
	dlock_lock *l = NULL;
	struct lost lo = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "lose-me", &l), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, -1, on_lost, &lo), DLOCK_OK);
	snprintf(args, sizeof args, "--scan --pattern '%s:*:lock' | xargs -r redis-cli -p %d DEL", user, redis_port);
	redis_cli(NULL, NULL, args);
	CU_ASSERT(dlock_test_await(lost_called, &lo, LONG_WAIT_MS));
	CHECK_CLEAN("the lost-lock detail", lo.detail);
	dlock_status st = dlock_release(l);
	check_errmsg(c, st);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);

	/* The wrong password: EAUTH, and neither password in the message. */
	snprintf(uri, sizeof uri, "redis://%s:x%s@127.0.0.1:%d", user, SECRET, redis_port);
	CU_ASSERT_EQUAL(open_logged(uri, &c, err, sizeof err), DLOCK_EAUTH);
	check_log();
	snprintf(args, sizeof args, "ACL DELUSER %s", user);
	redis_cli(NULL, NULL, args);
}

/* Digest credentials on ZooKeeper (their effect on ACLs: test_zookeeper.c, test_acl). */
static void test_zk_live(void)
{
	if (skip_without("DLOCK_TEST_ZK_PORT", zk_port))
		return;
	char uri[512], other[512];
	snprintf(uri, sizeof uri, "zk://alice:%s@127.0.0.1:%d/dlsec-%d", SECRET, zk_port, (int)getpid());
	snprintf(other, sizeof other, "zk://bob:%s@127.0.0.1:%d/dlsec-%d", SECRET_ENC, zk_port, (int)getpid());
	dlock_client *c = open_ok(uri), *b = open_ok(other);
	exercise(c, "live");
	/* Another identity may not queue under alice's lock node: EPERM, told without either password. */
	dlock_lock *l = NULL, *bl = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "guarded", &l), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(b, "guarded", &bl), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, -1, NULL, NULL), DLOCK_OK);
	dlock_status st = dlock_test_acquire(bl, 0, 0, -1, NULL, NULL);
	CU_ASSERT_EQUAL(st, DLOCK_EPERM);
	check_errmsg(b, st);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(bl);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	check_log();
}

/* `base` with `param` added to its query. */
static void with_param(char *out, size_t len, const char *base, const char *param)
{
	snprintf(out, len, "%s%s%s", base, strchr(base, '?') ? "&" : "?", param);
}

/*
 * Password authentication and sslmode reach libpq.  The role behind
 * DLOCK_TEST_PG_PW_URI must give its password but may create nothing, so
 * a right password gets past authentication to EPERM (or OK where the
 * database was prepared for it).
 */
static void test_postgres_live(void)
{
	if (skip_without("DLOCK_TEST_PG_PW_URI", pg_pw_uri != NULL))
		return;
	const char *colon = strchr(pg_pw_uri + strlen("postgres://"), ':'), *at = strchr(pg_pw_uri, '@');
	CU_ASSERT_FATAL(pg_password[0] && colon && at && colon < at);
	char uri[1024], err[512];
	dlock_client *c = NULL;
	with_param(uri, sizeof uri, pg_pw_uri, "sslmode=disable&open_timeout=5s");
	dlock_status st = open_logged(uri, &c, err, sizeof err);
	if (st != DLOCK_OK && st != DLOCK_EPERM)
		printf("\n    %s", err);
	CU_ASSERT(st == DLOCK_OK || st == DLOCK_EPERM);
	if (st == DLOCK_OK)
		dlock_client_close(c);
	/* The test server has no TLS: requiring it fails, and the message says why. */
	with_param(uri, sizeof uri, pg_pw_uri, "sslmode=require&open_timeout=5s");
	CU_ASSERT_NOT_EQUAL(open_logged(uri, &c, err, sizeof err), DLOCK_OK);
	CU_ASSERT(strstr(err, "SSL") != NULL);
	with_param(uri, sizeof uri, pg_pw_uri, "sslmode=bogus");
	CU_ASSERT_NOT_EQUAL(open_logged(uri, &c, err, sizeof err), DLOCK_OK);
	CU_ASSERT(strstr(err, "sslmode") != NULL);
	/* The same role with this test's password instead of its own. */
	snprintf(uri, sizeof uri, "%.*s" SECRET "%s", (int)(colon + 1 - pg_pw_uri), pg_pw_uri, at);
	CU_ASSERT_EQUAL(open_logged(uri, &c, err, sizeof err), DLOCK_EAUTH);
	check_log();
}

/* ------------------------------------------------------------ dlock-bench */

static void test_bench_output(void)
{
	if (!bench) {
		printf("\n    SKIPPED: DLOCK_TEST_BENCH (the path of dlock-bench) not set");
		return;
	}
	char uris[2048] = "", one[512], cmd[4096];
	size_t n = 0;
	int port = dead_port();
	const char *forms[] = { "redis://alice:" SECRET "@127.0.0.1:%d?open_timeout=1s",
		                "redis://alice:" SECRET_SPILL "@127.0.0.1:%d",
		                "zk://alice:" SECRET_ENC "@127.0.0.1:%d?open_timeout=1s",
		                "postgres://alice:" SECRET "@127.0.0.1:%d/db?open_timeout=1s",
		                "mem://alice:" SECRET "@bench-%d" };
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
		snprintf(one, sizeof one, forms[i], port);
		n += (size_t)snprintf(uris + n, sizeof uris - n, " --uri '%s'", one);
	}
	/* Servers that accept the credentials: the benchmark and its raw clients run for real. */
	char user[64], args[256];
	snprintf(user, sizeof user, "dlbench%d", (int)getpid());
	if (redis_port) {
		snprintf(args, sizeof args, "ACL SETUSER %s reset on '>%s' '~*' '&*' +@all", user, SECRET);
		CU_ASSERT_STRING_EQUAL(redis_cli(NULL, NULL, args), "OK\n");
		snprintf(one, sizeof one, "redis://%s:%s@127.0.0.1:%d?prefix=%s", user, SECRET, redis_port, user);
		n += (size_t)snprintf(uris + n, sizeof uris - n, " --uri '%s'", one);
	}
	if (zk_port) {
		snprintf(one, sizeof one, "zk://alice:%s@127.0.0.1:%d/dlsec-bench-%d", SECRET, zk_port, (int)getpid());
		n += (size_t)snprintf(uris + n, sizeof uris - n, " --uri '%s'", one);
	}
	if (pg_pw_uri) /* its role may create nothing: dlock refuses it, the raw client runs */
		n += (size_t)snprintf(uris + n, sizeof uris - n, " --uri '%s'", pg_pw_uri);
	static char out[1 << 16];
	for (int json = 0; json < 2; json++) {
		snprintf(cmd, sizeof cmd, "'%s' --scenario uncontended --clients 1 --duration 200ms %s%s 2>&1", bench,
		         json ? "--json" : "", uris);
		dlock_test_run(cmd, out, sizeof out);
		CU_ASSERT(out[0] != '\0');
		CHECK_CLEAN("dlock-bench's output", out);
	}
	if (redis_port) {
		snprintf(args, sizeof args, "ACL DELUSER %s", user);
		redis_cli(NULL, NULL, args);
	}
}

/* ------------------------------------------------------------ Redis ACL */

/* The commands dlock sends (in scripts too: ACLs apply inside them): with fair=0, and those the queue (the
 * default) adds; nothing else. */
#define DLOCK_REDIS_COMMANDS                                                                              \
	"-@all +eval +evalsha '+script|load' +subscribe +unsubscribe +set +get +exists +del +pttl +pexpire +time " \
	"+publish +blpop +lpop +rpush +lindex +lrem +hget +hset +hdel"

struct waiter {
	dlock_lock *lock;
	pthread_t thread;
	atomic_int done;
	dlock_status st;
	int64_t done_ms;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	w->st = dlock_test_acquire(w->lock, LONG_WAIT_MS, 0, -1, NULL, NULL);
	w->done_ms = dlock_test_now_ms();
	atomic_store(&w->done, 1);
	return NULL;
}

static int acquire_started(void *arg)
{
	dlock_client_stats s;
	return dlock_client_get_stats(arg, &s) == DLOCK_OK && s.server_acquires > 0;
}

/*
 * A user allowed only the keys and channels under its prefix, and only the
 * commands dlock sends: acquire, extend, check, release and a waiter woken
 * by the release all work; other keys, other channels and dlock under
 * another prefix are refused.
 */
static void test_redis_acl(void)
{
	if (skip_without("DLOCK_TEST_REDIS_PORT", redis_port))
		return;
	char user[64], prefix[64], uri[512], other[512], args[512];
	snprintf(user, sizeof user, "dlacl%d", (int)getpid());
	snprintf(prefix, sizeof prefix, "dlacl%d", (int)getpid());
	snprintf(args, sizeof args, "ACL SETUSER %s reset on '>%s' '~%s:*' '&%s:*' %s", user, SECRET, prefix, prefix,
	         DLOCK_REDIS_COMMANDS);
	CU_ASSERT_STRING_EQUAL_FATAL(redis_cli(NULL, NULL, args), "OK\n");

	snprintf(uri, sizeof uri, "redis://%s:%s@127.0.0.1:%d?prefix=%s", user, SECRET, redis_port, prefix);
	dlock_client *a = open_ok(uri), *b = open_ok(uri);
	exercise(a, "job");
	dlock_lock *la = NULL, *lb = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(a, "job", &la), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(b, "job", &lb), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, 0, -1, NULL, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(la, 20000), DLOCK_OK);
	struct waiter w = { .lock = lb };
	CU_ASSERT_FATAL(pthread_create(&w.thread, NULL, waiter_main, &w) == 0);
	CU_ASSERT(dlock_test_await(acquire_started, b, LONG_WAIT_MS));
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	pthread_join(w.thread, NULL);
	CU_ASSERT_EQUAL(w.st, DLOCK_OK);
	CU_ASSERT(w.done_ms - released < PROMPT_MS); /* woken by the release message, not a poll */
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	CU_ASSERT(!log_holds("SUBSCRIBE refused"));

	/* Outside its prefix the user can touch nothing, raw or through dlock. */
	snprintf(args, sizeof args, "SET other%d:x 1", (int)getpid());
	CU_ASSERT_PTR_NOT_NULL(strstr(redis_cli(user, SECRET, args), "NOPERM"));
	CU_ASSERT_PTR_NOT_NULL(strstr(redis_cli(user, SECRET, "GET dlock:x"), "NOPERM"));
	snprintf(args, sizeof args, "PUBLISH other%d:{x}:released 1", (int)getpid());
	CU_ASSERT_PTR_NOT_NULL(strstr(redis_cli(user, SECRET, args), "NOPERM"));
	CU_ASSERT_PTR_NOT_NULL(strstr(redis_cli(user, SECRET, "FLUSHALL"), "NOPERM"));
	snprintf(other, sizeof other, "redis://%s:%s@127.0.0.1:%d?prefix=other%d", user, SECRET, redis_port,
	         (int)getpid());
	dlock_client *c = open_ok(other);
	dlock_lock *lc = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "job", &lc), DLOCK_OK);
	dlock_status st = dlock_test_acquire(lc, 0, 0, -1, NULL, NULL);
	CU_ASSERT_EQUAL(st, DLOCK_EPERM);
	check_errmsg(c, st);

	dlock_lock_free(lc);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	check_log();
	snprintf(args, sizeof args, "ACL DELUSER %s", user);
	redis_cli(NULL, NULL, args);
}

/* ------------------------------------------------------------ main */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("secrets", NULL, NULL);
	CU_add_test(s, "no password in messages, every backend, dead ports", test_dead_ports);
	CU_add_test(s, "no password: redis (ACL user, lost lock, wrong password)", test_redis_live);
	CU_add_test(s, "no password: zk digest credentials", test_zk_live);
	CU_add_test(s, "postgres: password and sslmode reach libpq", test_postgres_live);
	CU_add_test(s, "no password in dlock-bench's output", test_bench_output);
	CU_pSuite r = CU_add_suite("redis-acl", NULL, NULL);
	CU_add_test(r, "a user limited to the lock prefix and its channels", test_redis_acl);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	redis_port = dlock_test_env("DLOCK_TEST_REDIS_PORT") ? atoi(dlock_test_env("DLOCK_TEST_REDIS_PORT")) : 0;
	zk_port = dlock_test_env("DLOCK_TEST_ZK_PORT") ? atoi(dlock_test_env("DLOCK_TEST_ZK_PORT")) : 0;
	pg_pw_uri = dlock_test_env("DLOCK_TEST_PG_PW_URI");
	bench = dlock_test_env("DLOCK_TEST_BENCH");
	/* A backend not compiled in has nothing to test against its server. */
	char list[256];
	snprintf(list, sizeof list, ",%s,", dlock_backends());
	if (!strstr(list, ",redis,"))
		redis_port = 0;
	if (!strstr(list, ",zk,"))
		zk_port = 0;
	if (!strstr(list, ",postgres,"))
		pg_pw_uri = NULL;
	/* postgres://dlock_pw:PASSWORD@host...: searched for in every text too. */
	const char *colon = pg_pw_uri ? strchr(pg_pw_uri + strlen("postgres://"), ':') : NULL;
	const char *at = pg_pw_uri ? strchr(pg_pw_uri, '@') : NULL;
	if (colon && at && colon < at && at - colon < (long)sizeof pg_password)
		snprintf(pg_password, sizeof pg_password, "%.*s", (int)(at - colon - 1), colon + 1);
	return dlock_test_main(add_suites);
}
