/*
 * Unit tests of the core's text handling: URI parsing and masking,
 * durations, status and capability names, and the driver helpers
 * (digests, hex, random bytes, name components).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/sys/driver.h"
#include "testsupport.h"
#include "uri.h"

/* A password that cannot appear in a message by accident. */
#define SECRET "Hunter2Secret"

/* ------------------------------------------------------------ helpers */

static dlock_uri *parse_ok(const char *text)
{
	dlock_uri *u = NULL;
	dlock_error err = { "" };
	dlock_status rc = dlock_uri_parse(text, &u, &err);
	if (rc != DLOCK_OK)
		fprintf(stderr, "\n  unexpected failure for %s: %s: %s\n", text, dlock_status_name(rc), err.msg);
	CU_ASSERT_EQUAL_FATAL(rc, DLOCK_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(u);
	return u;
}

static void check_defaults(const dlock_uri *u)
{
	CU_ASSERT_EQUAL(u->ttl_ms, 30000);
	CU_ASSERT_EQUAL(u->wait_ms, DLOCK_WAIT_FOREVER);
	CU_ASSERT_EQUAL(u->renew, 1);
	CU_ASSERT_STRING_EQUAL(u->prefix, "dlock");
	CU_ASSERT_EQUAL(u->prefix_given, 0);
	CU_ASSERT_EQUAL(u->connect_timeout_ms, 5000);
	CU_ASSERT_EQUAL(u->io_timeout_ms, 5000);
}

static void check_host(const dlock_uri *u, size_t i, const char *host, int port)
{
	CU_ASSERT_FATAL(i < u->nhosts);
	CU_ASSERT_STRING_EQUAL(u->hosts[i].host, host);
	CU_ASSERT_EQUAL(u->hosts[i].port, port);
}

/*
 * `text` must fail with `want` and a message; when `secret` is given it
 * must appear in neither the message nor the masked text.
 */
static void expect_bad(const char *text, dlock_status want, const char *secret)
{
	dlock_uri *u = (dlock_uri *)&u; /* not NULL: failure must clear it */
	dlock_error err = { "" };
	dlock_status rc = dlock_uri_parse(text, &u, &err);
	if (rc != want)
		fprintf(stderr, "\n  %s: got %s (%s), want %s\n", text ? text : "(null)", dlock_status_name(rc),
		        err.msg, dlock_status_name(want));
	CU_ASSERT_EQUAL(rc, want);
	CU_ASSERT_PTR_NULL(u);
	CU_ASSERT(err.msg[0] != '\0');
	if (rc == DLOCK_OK)
		dlock_uri_free(u);
	if (!secret)
		return;
	if (strstr(err.msg, secret))
		fprintf(stderr, "\n  message leaks the password: %s\n", err.msg);
	CU_ASSERT_PTR_NULL(strstr(err.msg, secret));
	char masked[1024];
	dlock_uri_mask(text, masked, sizeof masked);
	CU_ASSERT_PTR_NULL(strstr(masked, secret));
}

/* --------------------------------------------------- accepted URI forms */

static void test_mem(void)
{
	dlock_uri *u = parse_ok("mem://ns");
	CU_ASSERT_STRING_EQUAL(u->scheme, "mem");
	CU_ASSERT_PTR_NULL(u->user);
	CU_ASSERT_PTR_NULL(u->password);
	CU_ASSERT_EQUAL(u->nhosts, 1);
	check_host(u, 0, "ns", 0);
	CU_ASSERT_STRING_EQUAL(u->path, "");
	CU_ASSERT_EQUAL(u->nparams, 0);
	CU_ASSERT_STRING_EQUAL(u->masked, "mem://ns");
	check_defaults(u);
	dlock_uri_free(u);

	u = parse_ok("mem://");
	CU_ASSERT_EQUAL(u->nhosts, 1);
	check_host(u, 0, "", 0);
	CU_ASSERT_STRING_EQUAL(u->path, "");
	CU_ASSERT_EQUAL(u->nparams, 0);
	dlock_uri_free(u);

	u = parse_ok("mem://ns?");
	CU_ASSERT_EQUAL(u->nparams, 0);
	check_host(u, 0, "ns", 0);
	dlock_uri_free(u);
}

static void test_file(void)
{
	dlock_uri *u = parse_ok("file:///abs/dir");
	CU_ASSERT_STRING_EQUAL(u->scheme, "file");
	CU_ASSERT_EQUAL(u->nhosts, 1);
	check_host(u, 0, "", 0);
	CU_ASSERT_STRING_EQUAL(u->path, "/abs/dir");
	CU_ASSERT_PTR_NULL(u->user);
	CU_ASSERT_STRING_EQUAL(u->masked, "file:///abs/dir");
	check_defaults(u);
	dlock_uri_free(u);

	u = parse_ok("file:///");
	CU_ASSERT_STRING_EQUAL(u->path, "/");
	dlock_uri_free(u);

	/* '@' in a path is not userinfo. */
	u = parse_ok("file:///var/lock/a@b");
	check_host(u, 0, "", 0);
	CU_ASSERT_PTR_NULL(u->user);
	CU_ASSERT_STRING_EQUAL(u->path, "/var/lock/a@b");
	dlock_uri_free(u);
}

static void test_redis(void)
{
	dlock_uri *u = parse_ok("redis://:" SECRET "@h:6379/0?ttl=10s");
	CU_ASSERT_STRING_EQUAL(u->scheme, "redis");
	CU_ASSERT_STRING_EQUAL(u->user, "");
	CU_ASSERT_STRING_EQUAL(u->password, SECRET);
	CU_ASSERT_EQUAL(u->nhosts, 1);
	check_host(u, 0, "h", 6379);
	CU_ASSERT_STRING_EQUAL(u->path, "/0");
	CU_ASSERT_EQUAL(u->ttl_ms, 10000);
	CU_ASSERT_EQUAL(u->nparams, 0);
	CU_ASSERT_PTR_NULL(dlock_uri_get(u, "ttl"));
	CU_ASSERT_STRING_EQUAL(u->masked, "redis://:***@h:6379/0?ttl=10s");
	dlock_uri_free(u);

	u = parse_ok("redis://user:" SECRET "@h1:1,h2:2,h3:3");
	CU_ASSERT_STRING_EQUAL(u->user, "user");
	CU_ASSERT_STRING_EQUAL(u->password, SECRET);
	CU_ASSERT_EQUAL(u->nhosts, 3);
	check_host(u, 0, "h1", 1);
	check_host(u, 1, "h2", 2);
	check_host(u, 2, "h3", 3);
	CU_ASSERT_STRING_EQUAL(u->path, "");
	CU_ASSERT_STRING_EQUAL(u->masked, "redis://user:***@h1:1,h2:2,h3:3");
	dlock_uri_free(u);

	u = parse_ok("redis+unix:///path/sock");
	CU_ASSERT_STRING_EQUAL(u->scheme, "redis+unix");
	CU_ASSERT_EQUAL(u->nhosts, 1);
	check_host(u, 0, "", 0);
	CU_ASSERT_STRING_EQUAL(u->path, "/path/sock");
	dlock_uri_free(u);

	u = parse_ok("redis+unix://:" SECRET "@/run/redis.sock?ttl=5s");
	CU_ASSERT_STRING_EQUAL(u->password, SECRET);
	check_host(u, 0, "", 0);
	CU_ASSERT_STRING_EQUAL(u->path, "/run/redis.sock");
	CU_ASSERT_EQUAL(u->ttl_ms, 5000);
	dlock_uri_free(u);

	u = parse_ok("redis://h:65535");
	check_host(u, 0, "h", 65535);
	dlock_uri_free(u);

	/* An empty host with a port stands for the driver's default host. */
	u = parse_ok("redis://:6379");
	CU_ASSERT_PTR_NULL(u->user);
	check_host(u, 0, "", 6379);
	dlock_uri_free(u);
}

static void test_zk(void)
{
	dlock_uri *u = parse_ok("zk://u:" SECRET "@h1:2181,h2:2182/base/path?session_timeout=4s");
	CU_ASSERT_STRING_EQUAL(u->scheme, "zk");
	CU_ASSERT_STRING_EQUAL(u->user, "u");
	CU_ASSERT_STRING_EQUAL(u->password, SECRET);
	CU_ASSERT_EQUAL(u->nhosts, 2);
	check_host(u, 0, "h1", 2181);
	check_host(u, 1, "h2", 2182);
	CU_ASSERT_STRING_EQUAL(u->path, "/base/path");
	CU_ASSERT_EQUAL(u->nparams, 1);
	CU_ASSERT_STRING_EQUAL(u->params[0].key, "session_timeout");
	CU_ASSERT_STRING_EQUAL(u->params[0].value, "4s");
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "session_timeout"), "4s");
	CU_ASSERT_PTR_NULL(dlock_uri_get(u, "missing"));
	CU_ASSERT_PTR_NULL(dlock_uri_get(u, NULL));
	CU_ASSERT_PTR_NULL(dlock_uri_get(NULL, "session_timeout"));
	CU_ASSERT_STRING_EQUAL(u->masked, "zk://u:***@h1:2181,h2:2182/base/path?session_timeout=4s");
	check_defaults(u);
	dlock_uri_free(u);
}

static void test_postgres(void)
{
	dlock_uri *u = parse_ok("postgres://u:" SECRET "@h1,h2:5433/db?sslmode=disable&mode=row");
	CU_ASSERT_STRING_EQUAL(u->scheme, "postgres");
	CU_ASSERT_STRING_EQUAL(u->user, "u");
	CU_ASSERT_STRING_EQUAL(u->password, SECRET);
	CU_ASSERT_EQUAL(u->nhosts, 2);
	check_host(u, 0, "h1", 0);
	check_host(u, 1, "h2", 5433);
	CU_ASSERT_STRING_EQUAL(u->path, "/db");
	CU_ASSERT_EQUAL_FATAL(u->nparams, 2);
	CU_ASSERT_STRING_EQUAL(u->params[0].key, "sslmode");
	CU_ASSERT_STRING_EQUAL(u->params[0].value, "disable");
	CU_ASSERT_STRING_EQUAL(u->params[1].key, "mode");
	CU_ASSERT_STRING_EQUAL(u->params[1].value, "row");
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "mode"), "row");
	CU_ASSERT_STRING_EQUAL(u->masked, "postgres://u:***@h1,h2:5433/db?sslmode=disable&mode=row");
	dlock_uri_free(u);
}

static void test_ipv6(void)
{
	dlock_uri *u = parse_ok("redis://[::1]:6379");
	CU_ASSERT_EQUAL(u->nhosts, 1);
	check_host(u, 0, "::1", 6379);
	dlock_uri_free(u);

	u = parse_ok("redis://[::1]");
	check_host(u, 0, "::1", 0);
	dlock_uri_free(u);

	u = parse_ok("zk://u:" SECRET "@[2001:db8::1]:2181,h2,[::2]:2/p");
	CU_ASSERT_EQUAL(u->nhosts, 3);
	check_host(u, 0, "2001:db8::1", 2181);
	check_host(u, 1, "h2", 0);
	check_host(u, 2, "::2", 2);
	CU_ASSERT_STRING_EQUAL(u->path, "/p");
	dlock_uri_free(u);

	/* A zone id is written %25 and decoded like any other part. */
	u = parse_ok("redis://[fe80::1%25eth0]:1");
	check_host(u, 0, "fe80::1%eth0", 1);
	dlock_uri_free(u);
}

static void test_scheme_and_userinfo(void)
{
	dlock_uri *u = parse_ok("REDIS://Host:1");
	CU_ASSERT_STRING_EQUAL(u->scheme, "redis");
	check_host(u, 0, "Host", 1); /* hosts are kept as given */
	dlock_uri_free(u);

	u = parse_ok("Redis+Unix.v-2:///s");
	CU_ASSERT_STRING_EQUAL(u->scheme, "redis+unix.v-2");
	dlock_uri_free(u);

	u = parse_ok("redis://alice@h");
	CU_ASSERT_STRING_EQUAL(u->user, "alice");
	CU_ASSERT_PTR_NULL(u->password);
	CU_ASSERT_STRING_EQUAL(u->masked, "redis://alice@h");
	dlock_uri_free(u);

	u = parse_ok("redis://alice:@h");
	CU_ASSERT_STRING_EQUAL(u->user, "alice");
	CU_ASSERT_STRING_EQUAL(u->password, "");
	CU_ASSERT_STRING_EQUAL(u->masked, "redis://alice:***@h");
	dlock_uri_free(u);

	u = parse_ok("redis://@h");
	CU_ASSERT_STRING_EQUAL(u->user, "");
	CU_ASSERT_PTR_NULL(u->password);
	dlock_uri_free(u);

	/* Only the first ':' splits; the last '@' of the authority ends the userinfo. */
	u = parse_ok("redis://a:b:c@d@h:1");
	CU_ASSERT_STRING_EQUAL(u->user, "a");
	CU_ASSERT_STRING_EQUAL(u->password, "b:c@d");
	check_host(u, 0, "h", 1);
	CU_ASSERT_STRING_EQUAL(u->masked, "redis://a:***@h:1");
	dlock_uri_free(u);
}

static void test_percent_decoding(void)
{
	dlock_uri *u = parse_ok("redis://a%40b%3Ac:p%3Aw%2F%40%25%3f%26@h%2Dx:1/a%20b%2fc%C3%A9"
	                        "?k%3D=v%26w&plus=a+b&lower=%2a%2A");
	CU_ASSERT_STRING_EQUAL(u->user, "a@b:c");
	CU_ASSERT_STRING_EQUAL(u->password, "p:w/@%?&");
	check_host(u, 0, "h-x", 1);
	CU_ASSERT_STRING_EQUAL(u->path, "/a b/c\xc3\xa9");
	CU_ASSERT_EQUAL_FATAL(u->nparams, 3);
	CU_ASSERT_STRING_EQUAL(u->params[0].key, "k=");
	CU_ASSERT_STRING_EQUAL(u->params[0].value, "v&w");
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "plus"), "a+b"); /* '+' is not a space */
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "lower"), "**");
	CU_ASSERT_STRING_EQUAL(u->masked, "redis://a%40b%3Ac:***@h%2Dx:1/a%20b%2fc%C3%A9"
	                                  "?k%3D=v%26w&plus=a+b&lower=%2a%2A");
	dlock_uri_free(u);

	/* Escapes of common parameter names and values are decoded before use. */
	u = parse_ok("mem://ns?%74tl=1%30s&prefix=a%2Fb");
	CU_ASSERT_EQUAL(u->ttl_ms, 10000);
	CU_ASSERT_STRING_EQUAL(u->prefix, "a/b");
	CU_ASSERT_EQUAL(u->prefix_given, 1);
	CU_ASSERT_EQUAL(u->nparams, 0);
	dlock_uri_free(u);

	/* Any byte but NUL may be in a path. */
	u = parse_ok("file:///x%01%FF%7F");
	CU_ASSERT_STRING_EQUAL(u->path, "/x\x01\xff\x7f");
	dlock_uri_free(u);
}

static void test_params(void)
{
	dlock_uri *u = parse_ok("mem://ns?flag&empty=&eq=a=b&x=1");
	CU_ASSERT_EQUAL_FATAL(u->nparams, 4);
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "flag"), "");
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "empty"), "");
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "eq"), "a=b");
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "x"), "1");
	CU_ASSERT_PTR_NULL(dlock_uri_get(u, "X")); /* keys are case-sensitive */
	dlock_uri_free(u);

	/* Common parameters are resolved and taken out; others stay in order. */
	u = parse_ok("redis://h/1?a=1&ttl=250ms&wait=0&renew=off&prefix=app&open_timeout=2s"
	             "&io_timeout=750&fencing=no&b=2");
	CU_ASSERT_EQUAL(u->ttl_ms, 250);
	CU_ASSERT_EQUAL(u->wait_ms, 0);
	CU_ASSERT_EQUAL(u->renew, 0);
	CU_ASSERT_EQUAL(u->fencing, 0);
	CU_ASSERT_STRING_EQUAL(u->prefix, "app");
	CU_ASSERT_EQUAL(u->connect_timeout_ms, 2000);
	CU_ASSERT_EQUAL(u->io_timeout_ms, 750);
	CU_ASSERT_EQUAL_FATAL(u->nparams, 2);
	CU_ASSERT_STRING_EQUAL(u->params[0].key, "a");
	CU_ASSERT_STRING_EQUAL(u->params[1].key, "b");
	CU_ASSERT_PTR_NULL(dlock_uri_get(u, "ttl"));
	CU_ASSERT_PTR_NULL(dlock_uri_get(u, "wait"));
	dlock_uri_free(u);

	u = parse_ok("mem://ns?wait=forever&ttl=1h");
	CU_ASSERT_EQUAL(u->fencing, 1); /* default: tokens on */
	CU_ASSERT_EQUAL(u->wait_ms, DLOCK_WAIT_FOREVER);
	CU_ASSERT_EQUAL(u->ttl_ms, 3600000);
	dlock_uri_free(u);

	u = parse_ok("mem://ns?wait=2m&ttl=1500");
	CU_ASSERT_EQUAL(u->wait_ms, 120000);
	CU_ASSERT_EQUAL(u->ttl_ms, 1500);
	dlock_uri_free(u);

	/* Every duration parameter takes fractions, rounded up to a millisecond. */
	u = parse_ok("mem://ns?wait=0.5s&ttl=1.5&open_timeout=0.0001s&io_timeout=0.25m");
	CU_ASSERT_EQUAL(u->wait_ms, 500);
	CU_ASSERT_EQUAL(u->ttl_ms, 2);
	CU_ASSERT_EQUAL(u->connect_timeout_ms, 1);
	CU_ASSERT_EQUAL(u->io_timeout_ms, 15000);
	dlock_uri_free(u);
	u = parse_ok("mem://ns?wait=0.0s");
	CU_ASSERT_EQUAL(u->wait_ms, 0);
	dlock_uri_free(u);

	static const struct {
		const char *value;
		int want;
	} renew[] = { { "1", 1 },  { "true", 1 },  { "on", 1 },  { "yes", 1 },
	              { "0", 0 },  { "false", 0 }, { "off", 0 }, { "no", 0 } };
	for (size_t i = 0; i < sizeof renew / sizeof renew[0]; i++) {
		char text[64];
		snprintf(text, sizeof text, "mem://ns?renew=%s", renew[i].value);
		u = parse_ok(text);
		CU_ASSERT_EQUAL(u->renew, renew[i].want);
		dlock_uri_free(u);
	}
}

/* Append "sep item" to `text` while it stays within `limit` bytes; returns the count. */
static size_t fill_list(char *text, size_t limit, const char *sep, const char *fmt)
{
	size_t n = 0;
	for (;; n++) {
		char item[32];
		snprintf(item, sizeof item, fmt, n);
		size_t len = strlen(text);
		if (len + strlen(sep) + strlen(item) > limit)
			return n;
		snprintf(text + len, limit + 1 - len, "%s%s", n ? sep : "", item);
	}
}

static void test_length_limit(void)
{
	char *text = malloc(8194);
	CU_ASSERT_PTR_NOT_NULL_FATAL(text);
	memcpy(text, "mem://", 6);
	memset(text + 6, 'a', 8192 - 6);
	text[8192] = '\0';
	dlock_uri *u = parse_ok(text);
	CU_ASSERT_EQUAL(strlen(u->hosts[0].host), 8192 - 6);
	CU_ASSERT_EQUAL(strlen(u->masked), 8192);
	dlock_uri_free(u);

	text[8192] = 'a';
	text[8193] = '\0';
	expect_bad(text, DLOCK_EURI, NULL);

	/* Many tiny parts: the most bookkeeping a URI of this size can need. */
	strcpy(text, "mem://");
	size_t n = fill_list(text, 8192, ",", "h");
	u = parse_ok(text);
	CU_ASSERT_EQUAL(u->nhosts, n);
	CU_ASSERT(n > 4000);
	dlock_uri_free(u);

	strcpy(text, "mem://a?");
	n = fill_list(text, 8192, "&", "%zx");
	u = parse_ok(text);
	CU_ASSERT_EQUAL(u->nparams, n);
	CU_ASSERT(n > 1500);
	CU_ASSERT_STRING_EQUAL(dlock_uri_get(u, "10"), "");
	dlock_uri_free(u);

	/* The masked copy of a short password grows by up to three bytes. */
	strcpy(text, "redis://u:@");
	memset(text + 11, 'h', 8192 - 11);
	text[8192] = '\0';
	u = parse_ok(text);
	CU_ASSERT_EQUAL(strlen(u->masked), 8195);
	CU_ASSERT(strncmp(u->masked, "redis://u:***@hhh", 17) == 0);
	dlock_uri_free(u);
	free(text);
}

/* ---------------------------------------------------- rejected URI forms */

static void test_invalid_args(void)
{
	dlock_uri *u = (dlock_uri *)&u;
	dlock_error err = { "" };
	CU_ASSERT_EQUAL(dlock_uri_parse(NULL, &u, &err), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(u);
	CU_ASSERT(err.msg[0] != '\0');
	expect_bad("", DLOCK_EINVAL, NULL);
	CU_ASSERT_EQUAL(dlock_uri_parse("mem://ns", NULL, &err), DLOCK_EINVAL);
	/* err may be NULL. */
	CU_ASSERT_EQUAL(dlock_uri_parse("nope", &u, NULL), DLOCK_EURI);
	CU_ASSERT_EQUAL(dlock_uri_parse("mem://ns", &u, NULL), DLOCK_OK);
	dlock_uri_free(u);
	dlock_uri_free(NULL);
}

/* A text that is no URI is shown in the message, masked. */
static void test_not_a_uri_shown(void)
{
	static const struct {
		const char *text, *shown;
	} cases[] = {
		{ "notauri", "URI has no \"://\" after the scheme: 'notauri'" },
		{ "/var/lock/x", "'/var/lock/x'" },
		{ "://x", "empty scheme before \"://\": '://x'" },
		{ "re_dis://h/x", "invalid URI scheme: " },
		{ "re_dis://h/x", ": 're_dis://h/x'" },
		{ "u:" SECRET "@h/x", "'***@h/x'" },
		{ "a?b://u:" SECRET "@h?x=1&password=" SECRET, "'***@h?x=1&password=***'" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		dlock_uri *u = NULL;
		dlock_error err = { "" };
		CU_ASSERT_EQUAL(dlock_uri_parse(cases[i].text, &u, &err), DLOCK_EURI);
		if (!strstr(err.msg, cases[i].shown))
			fprintf(stderr, "\n  %s: message \"%s\" lacks \"%s\"\n", cases[i].text, err.msg,
			        cases[i].shown);
		CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, cases[i].shown));
		CU_ASSERT_PTR_NULL(strstr(err.msg, SECRET));
	}
}

static void test_malformed(void)
{
	static const char *const bad[] = {
		/* scheme */
		"redis//u:" SECRET "@h",
		"redis:u:" SECRET "@h",
		"redis:/u:" SECRET "@h",
		"://u:" SECRET "@h",
		"1redis://u:" SECRET "@h",
		"re dis://u:" SECRET "@h",
		"re_dis://u:" SECRET "@h",
		"+redis://u:" SECRET "@h",
		"red:is://u:" SECRET "@h",
		"u:" SECRET "@h",
		"u:" SECRET "@h?sslpassword=" SECRET,
		/* ports */
		"redis://u:" SECRET "@h:0",
		"redis://u:" SECRET "@h:65536",
		"redis://u:" SECRET "@h:99999999999999999999",
		"redis://u:" SECRET "@h:abc",
		"redis://u:" SECRET "@h:",
		"redis://u:" SECRET "@h:-1",
		"redis://u:" SECRET "@h:+1",
		"redis://u:" SECRET "@h: 1",
		"redis://u:" SECRET "@h:1x",
		"redis://u:" SECRET "@h1:1,h2:0",
		"redis://u:" SECRET "@[::1]:",
		"redis://u:" SECRET "@[::1]:70000",
		/* host lists */
		"redis://u:" SECRET "@a,,b",
		"redis://u:" SECRET "@a,",
		"redis://u:" SECRET "@,a",
		"redis://u:" SECRET "@,",
		"redis://u:" SECRET "@a:1,:2",
		"redis://u:" SECRET "@[::1",
		"redis://u:" SECRET "@[::1,h]",
		"redis://u:" SECRET "@h,[::1",
		"redis://u:" SECRET "@[]:1",
		"redis://u:" SECRET "@[::1]x",
		"redis://u:" SECRET "@[::1]:1x",
		/* percent escapes */
		"redis://u:" SECRET "@h%",
		"redis://u:" SECRET "@h%4",
		"redis://u:" SECRET "@h%zz",
		"redis://u:" SECRET "@h%4g",
		"redis://u:" SECRET "@h%00",
		"redis://u%00:" SECRET "@h",
		"redis://u%:" SECRET "@h",
		"redis://u:" SECRET "%00@h",
		"redis://u:" SECRET "%@h",
		"redis://u:" SECRET "%G1@h",
		"redis://u:" SECRET "@h/a%00b",
		"redis://u:" SECRET "@h/a%",
		"redis://u:" SECRET "@h/a%x1",
		"redis://u:" SECRET "@h?k%00=v",
		"redis://u:" SECRET "@h?k=v%00",
		"redis://u:" SECRET "@h?k=v%",
		"redis://u:" SECRET "@h?k%=v",
		/* query */
		"redis://u:" SECRET "@h?=v",
		"redis://u:" SECRET "@h?&a",
		"redis://u:" SECRET "@h?a&",
		"redis://u:" SECRET "@h?a&&b",
		"redis://u:" SECRET "@h?&",
		"redis://u:" SECRET "@h?x=1&x=2",
		"redis://u:" SECRET "@h?x&x",
		"redis://u:" SECRET "@h?x=1&%78=2",
		"redis://u:" SECRET "@h?ttl=1s&ttl=2s",
		"redis://u:" SECRET "@h?wait=1s&a=1&wait=1s",
		/* common parameter values */
		"redis://u:" SECRET "@h?ttl=0",
		"redis://u:" SECRET "@h?ttl=0ms",
		"redis://u:" SECRET "@h?ttl=abc",
		"redis://u:" SECRET "@h?ttl=",
		"redis://u:" SECRET "@h?ttl",
		"redis://u:" SECRET "@h?ttl=-1s",
		"redis://u:" SECRET "@h?ttl=1.5.5s",
		"redis://u:" SECRET "@h?ttl=0.0s",
		"redis://u:" SECRET "@h?ttl=.5s",
		"redis://u:" SECRET "@h?ttl=1e3",
		"redis://u:" SECRET "@h?wait=-0.5s",
		"redis://u:" SECRET "@h?wait=nan",
		"redis://u:" SECRET "@h?wait=.",
		"redis://u:" SECRET "@h?io_timeout=0.0",
		"redis://u:" SECRET "@h?ttl=10x",
		"redis://u:" SECRET "@h?ttl=99999999999999999999",
		"redis://u:" SECRET "@h?ttl=9223372036854775807s",
		"redis://u:" SECRET "@h?wait=-1",
		"redis://u:" SECRET "@h?wait=Forever",
		"redis://u:" SECRET "@h?wait=never",
		"redis://u:" SECRET "@h?wait=",
		"redis://u:" SECRET "@h?renew=maybe",
		"redis://u:" SECRET "@h?renew=",
		"redis://u:" SECRET "@h?renew=TRUE",
		"redis://u:" SECRET "@h?renew=2",
		"redis://u:" SECRET "@h?prefix=",
		"redis://u:" SECRET "@h?prefix",
		"redis://u:" SECRET "@h?open_timeout=0",
		"redis://u:" SECRET "@h?open_timeout=1d",
		"redis://u:" SECRET "@h?io_timeout=0s",
		"redis://u:" SECRET "@h?io_timeout= 1s",
		/* a password with an unescaped '/' spills into the host list */
		"redis://u:" SECRET "/x@h:6379",
		"redis://u:x/" SECRET "@h:6379",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_bad(bad[i], DLOCK_EURI, SECRET);

	/* The same forms without userinfo still fail. */
	expect_bad("redis//h", DLOCK_EURI, NULL);
	expect_bad("://h", DLOCK_EURI, NULL);
	expect_bad("redis://h:0", DLOCK_EURI, NULL);
	expect_bad("redis://a,,b", DLOCK_EURI, NULL);
	expect_bad("redis://[::1", DLOCK_EURI, NULL);
	expect_bad("mem://ns?ttl=0", DLOCK_EURI, NULL);
}

/* ----------------------------------------------------------- masking */

static void check_mask(const char *text, const char *want)
{
	char out[256];
	dlock_uri_mask(text, out, sizeof out);
	if (strcmp(out, want) != 0)
		fprintf(stderr, "\n  mask(%s) = %s, want %s\n", text ? text : "(null)", out, want);
	CU_ASSERT_STRING_EQUAL(out, want);
}

static void test_mask(void)
{
	check_mask("redis://:pw@h:6379/0", "redis://:***@h:6379/0");
	check_mask("redis://user:pw@h1,h2", "redis://user:***@h1,h2");
	check_mask("redis://user@h", "redis://user@h");
	check_mask("redis://user:@h", "redis://user:***@h");
	check_mask("mem://ns", "mem://ns");
	check_mask("file:///var/a@b", "file:///var/a@b");
	check_mask("redis://h?x=a:b@c", "redis://h?x=a:b@c");
	check_mask("", "");
	check_mask(NULL, "");
	/* Malformed input is masked too, erring on the side of hiding. */
	check_mask("redis:u:pw@h", "redis:***@h");
	check_mask("redis//u:pw@h", "redis//u:***@h");
	check_mask("redis://u:p/w@h:1", "redis://u:***@h:1");
	check_mask("redis://u:p@w@h:1", "redis://u:***@h:1");
	check_mask("redis://u:pw@h?next=http://x:y@z", "redis://u:***@h?next=http://x:y@z");
	/* Query values of secret keys: libpq's sslpassword, a mistaken ?password=. */
	check_mask("postgres://u@h/db?sslpassword=hunter2&sslmode=require",
	           "postgres://u@h/db?sslpassword=***&sslmode=require");
	check_mask("redis://u:pw@h?PASSWORD=x&ttl=1s", "redis://u:***@h?PASSWORD=***&ttl=1s");
	check_mask("mem://ns?password", "mem://ns?password");
	/* Where a private key lies is a secret too: rediss' tls_key, libpq's sslkey. */
	check_mask("rediss://h?tls_ca_file=/ca.pem&tls_key=/k/key.pem&tls_cert=/c.pem",
	           "rediss://h?tls_ca_file=/ca.pem&tls_key=***&tls_cert=/c.pem");
	check_mask("postgres://u@h/db?sslkey=/k/client.key", "postgres://u@h/db?sslkey=***");

	/* The output is always terminated and cut to size. */
	char out[12];
	memset(out, 'X', sizeof out);
	dlock_uri_mask("redis://user:" SECRET "@host:6379", out, sizeof out);
	CU_ASSERT_STRING_EQUAL(out, "redis://use");
	dlock_uri_mask("redis://u:" SECRET "@host:6379", out, sizeof out);
	CU_ASSERT_STRING_EQUAL(out, "redis://u:*");
	dlock_uri_mask("mem://ns", out, 1);
	CU_ASSERT_STRING_EQUAL(out, "");
	out[0] = 'X';
	dlock_uri_mask("mem://ns", out, 0); /* nothing written */
	CU_ASSERT_EQUAL(out[0], 'X');
	dlock_uri_mask("mem://ns", NULL, 10);

	/* The masked field of a parse never holds the password. */
	dlock_uri *u = parse_ok("zk://admin:" SECRET "@h:1/p?x=" "y");
	CU_ASSERT_PTR_NULL(strstr(u->masked, SECRET));
	CU_ASSERT_STRING_EQUAL(u->masked, "zk://admin:***@h:1/p?x=y");
	dlock_uri_free(u);
}

/* --------------------------------------------------------- durations */

static void check_duration(const char *text, int64_t bare, int64_t want)
{
	int64_t ms = -42;
	dlock_status rc = dlock_duration_parse(text, bare, &ms);
	if (rc != DLOCK_OK || ms != want)
		fprintf(stderr, "\n  duration %s -> %s %lld\n", text, dlock_status_name(rc), (long long)ms);
	CU_ASSERT_EQUAL(rc, DLOCK_OK);
	CU_ASSERT_EQUAL(ms, want);
}

static void check_bad_duration(const char *text, int64_t bare)
{
	int64_t ms = -42;
	dlock_status rc = dlock_duration_parse(text, bare, &ms);
	if (rc != DLOCK_EINVAL)
		fprintf(stderr, "\n  duration '%s' accepted as %lld\n", text ? text : "(null)", (long long)ms);
	CU_ASSERT_EQUAL(rc, DLOCK_EINVAL);
	CU_ASSERT_EQUAL(ms, -42); /* untouched on failure */
}

static void test_durations(void)
{
	check_duration("250ms", 1, 250);
	check_duration("10s", 1, 10000);
	check_duration("2m", 1, 120000);
	check_duration("1h", 1, 3600000);
	check_duration("0", 1, 0);
	check_duration("0ms", 1, 0);
	check_duration("007s", 1, 7000);
	check_duration("1500", 1, 1500);
	check_duration("15", 1000, 15000);
	check_duration("15ms", 1000, 15);
	check_duration("9223372036854775807", 1, INT64_MAX);
	check_duration("9223372036854775807ms", 1, INT64_MAX);
	check_duration("2562047788015h", 1, INT64_C(2562047788015) * 3600000);
	check_duration("153722867280912m", 1, INT64_C(153722867280912) * 60000);

	/* Fractions, rounded up to a whole millisecond. */
	check_duration("1.5s", 1, 1500);
	check_duration("0.5s", 1, 500);
	check_duration("1.5", 1000, 1500);
	check_duration("0.5", 1000, 500);
	check_duration("1.5", 1, 2);
	check_duration("0.0001s", 1, 1);
	check_duration("0.001s", 1, 1);
	check_duration("0.0011s", 1, 2);
	check_duration("0.000000000000000000000000000001h", 1, 1);
	check_duration("0.25m", 1, 15000);
	check_duration("0.1h", 1, 360000);
	check_duration("1.0000000000000000000000000s", 1, 1000);
	check_duration("2.50ms", 1, 3);
	check_duration("0.0", 1000, 0);
	check_duration("0.000", 1, 0);
	check_duration("9223372036854775806.5ms", 1, INT64_MAX);
	check_duration("9223372036854775.807s", 1, INT64_MAX);

	static const char *const bad[] = { "",     "ms",   "s",     "-1",   "+1",   "-0",    " 1",
		                           "1 ",   "1 s",  "1.",    "1.s",  ".5",   ".",     "1.2.3",
		                           "1.5.s", "-0.5", "+0.5", "nan",   "inf",  "1,5",   "1e3",
		                           "1.5e3", "0x1.8p1", "1. 5", "1 .5", "9223372036854775807.5ms",
		                           "9223372036854775.808s", "10sec",
		                           "10S",  "10MS", "1d",    "0x10", "s10",  "1ms1",  "1sm",
		                           "1\n",  "\t1",  "\xef\xbc\x91", "9223372036854775808",
		                           "9223372036854775807s", "99999999999999999999999",
		                           "2562047788016h", "153722867280913m" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		check_bad_duration(bad[i], 1);
	check_bad_duration("9223372036854776", 1000);
	check_bad_duration(NULL, 1);
	check_bad_duration("1s", 0);
	check_bad_duration("1s", -1);
	CU_ASSERT_EQUAL(dlock_duration_parse("1s", 1, NULL), DLOCK_EINVAL);
}

/* ------------------------------------------------ status and names */

static void test_status(void)
{
	CU_ASSERT_STRING_EQUAL(dlock_version(), DLOCK_VERSION_STRING);
	CU_ASSERT_STRING_EQUAL(dlock_strerror(DLOCK_OK), "success");
	CU_ASSERT_STRING_EQUAL(dlock_status_name(DLOCK_OK), "OK");
	CU_ASSERT_STRING_EQUAL(dlock_status_name(DLOCK_ENOTHELD), "ENOTHELD");
	CU_ASSERT_STRING_EQUAL(dlock_strerror(DLOCK_EURI), "malformed URI");

	/* Every status has its own name and text, at the index of its value. */
	static const struct {
		int status;
		const char *name, *text;
	} all[] = {
#define ENTRY_(name, text) { DLOCK_##name, #name, text },
		DLOCK_STATUS_MAP(ENTRY_)
#undef ENTRY_
	};
	CU_ASSERT_EQUAL(sizeof all / sizeof all[0], DLOCK_STATUS_COUNT_);
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		CU_ASSERT_STRING_EQUAL(dlock_status_name(all[i].status), all[i].name);
		CU_ASSERT_STRING_EQUAL(dlock_strerror(all[i].status), all[i].text);
		CU_ASSERT(dlock_strerror(all[i].status)[0] != '\0');
		for (size_t j = 0; j < i; j++)
			CU_ASSERT(strcmp(dlock_status_name(all[i].status), dlock_status_name(all[j].status)) != 0);
	}
	static const int out_of_range[] = { -1, DLOCK_STATUS_COUNT_, DLOCK_STATUS_COUNT_ + 1, 1000, INT_MIN,
		                            INT_MAX };
	for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; i++) {
		CU_ASSERT_STRING_EQUAL(dlock_strerror(out_of_range[i]), "unknown status");
		CU_ASSERT_STRING_EQUAL(dlock_status_name(out_of_range[i]), "UNKNOWN");
	}
}

static void test_capability_names(void)
{
	CU_ASSERT_STRING_EQUAL(dlock_consistency_name(DLOCK_CONSISTENCY_CP), "CP");
	CU_ASSERT_STRING_EQUAL(dlock_consistency_name(DLOCK_CONSISTENCY_AP), "AP");
	CU_ASSERT_STRING_EQUAL(dlock_consistency_name(DLOCK_CONSISTENCY_LOCAL), "local");
	CU_ASSERT_STRING_EQUAL(dlock_fencing_name(DLOCK_FENCING_STRICT), "strict");
	CU_ASSERT_STRING_EQUAL(dlock_fencing_name(DLOCK_FENCING_CONDITIONAL), "conditional");
	CU_ASSERT_STRING_EQUAL(dlock_fencing_name(DLOCK_FENCING_NONE), "none");
	CU_ASSERT_STRING_EQUAL(dlock_lease_kind_name(DLOCK_LEASE_TTL), "ttl");
	CU_ASSERT_STRING_EQUAL(dlock_lease_kind_name(DLOCK_LEASE_SESSION), "session");
	CU_ASSERT_STRING_EQUAL(dlock_wakeup_name(DLOCK_WAKEUP_NOTIFY), "notify");
	CU_ASSERT_STRING_EQUAL(dlock_wakeup_name(DLOCK_WAKEUP_SERVER_QUEUE), "server-queue");
	CU_ASSERT_STRING_EQUAL(dlock_wakeup_name(DLOCK_WAKEUP_POLL), "poll");
	CU_ASSERT_STRING_EQUAL(dlock_scope_name(DLOCK_SCOPE_PROCESS), "process");
	CU_ASSERT_STRING_EQUAL(dlock_scope_name(DLOCK_SCOPE_HOST), "host");
	CU_ASSERT_STRING_EQUAL(dlock_scope_name(DLOCK_SCOPE_NETWORK), "network");
	/* Values outside the enums still give a static string. */
	CU_ASSERT_PTR_NOT_NULL(dlock_consistency_name((dlock_consistency)99));
	CU_ASSERT_PTR_NOT_NULL(dlock_fencing_name((dlock_fencing)99));
	CU_ASSERT_PTR_NOT_NULL(dlock_lease_kind_name((dlock_lease_kind)99));
	CU_ASSERT_PTR_NOT_NULL(dlock_wakeup_name((dlock_wakeup)99));
	CU_ASSERT_PTR_NOT_NULL(dlock_scope_name((dlock_scope)99));
}

static void test_error_set(void)
{
	dlock_error err = { "old" };
	CU_ASSERT_EQUAL(dlock_error_set(&err, DLOCK_ECONNECT, "cannot reach %s:%d", "h", 1), DLOCK_ECONNECT);
	CU_ASSERT_STRING_EQUAL(err.msg, "cannot reach h:1");
	CU_ASSERT_EQUAL(dlock_error_set(NULL, DLOCK_EBUSY, "x %d", 1), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_error_set(&err, DLOCK_OK, "%s", ""), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(err.msg, "");

	/* A long message is cut to fit and still terminated. */
	char big[DLOCK_ERROR_MAX * 2];
	memset(big, 'z', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	CU_ASSERT_EQUAL(dlock_error_set(&err, DLOCK_EIO, "%s", big), DLOCK_EIO);
	CU_ASSERT_EQUAL(strlen(err.msg), DLOCK_ERROR_MAX - 1);
}

/* --------------------------------------------------------- helpers */

static void test_sha256_hex(void)
{
	unsigned char d[32];
	char hex[65];
	dlock_sha256("abc", 3, d);
	dlock_hex(d, sizeof d, hex);
	CU_ASSERT_STRING_EQUAL(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	dlock_sha256("", 0, d);
	dlock_hex(d, sizeof d, hex);
	CU_ASSERT_STRING_EQUAL(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	dlock_sha256(NULL, 0, d);
	dlock_hex(d, sizeof d, hex);
	CU_ASSERT_STRING_EQUAL(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	dlock_sha256(two, strlen(two), d);
	dlock_hex(d, sizeof d, hex);
	CU_ASSERT_STRING_EQUAL(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

	const unsigned char bytes[] = { 0x00, 0xff, 0x0a, 0xa0, 0x7f };
	char out[11];
	memset(out, 'X', sizeof out);
	dlock_hex(bytes, sizeof bytes, out);
	CU_ASSERT_STRING_EQUAL(out, "00ff0aa07f");
	dlock_hex(bytes, 0, out);
	CU_ASSERT_STRING_EQUAL(out, "");
}

static void test_random_and_clock(void)
{
	unsigned char a[32], b[32];
	CU_ASSERT_EQUAL(dlock_random_bytes(a, sizeof a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_random_bytes(b, sizeof b), DLOCK_OK);
	CU_ASSERT(memcmp(a, b, sizeof a) != 0);
	CU_ASSERT_EQUAL(dlock_random_bytes(a, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_random_bytes(NULL, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_random_bytes(NULL, 1), DLOCK_EINVAL);

	/* More than one getrandom() call can return at once. */
	size_t big_len = 1 << 20;
	unsigned char *big = calloc(1, big_len);
	CU_ASSERT_PTR_NOT_NULL_FATAL(big);
	CU_ASSERT_EQUAL(dlock_random_bytes(big, big_len), DLOCK_OK);
	size_t zeros = 0;
	for (size_t i = big_len - 4096; i < big_len; i++)
		zeros += big[i] == 0;
	CU_ASSERT(zeros < 100); /* the tail was written too (about 16 expected) */
	free(big);

	int64_t t0 = dlock_monotonic_ns();
	int64_t t1 = dlock_monotonic_ns();
	CU_ASSERT(t0 > 0);
	CU_ASSERT(t1 >= t0);
}

/* ------------------------------------------------- name components */

static void check_component(const char *name, size_t len, const char *want)
{
	char out[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(name, len, out);
	CU_ASSERT_STRING_EQUAL(out, want);
}

static int is_hex_upper(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

/* Shape every component must have, long or short. */
static void check_component_shape(const char *out)
{
	size_t n = strlen(out);
	CU_ASSERT(n > 0 && n <= DLOCK_COMPONENT_MAX);
	CU_ASSERT_PTR_NULL(strchr(out, '/'));
	CU_ASSERT(strcmp(out, ".") != 0 && strcmp(out, "..") != 0);
	const char *tilde = strchr(out, '~');
	size_t plain = tilde ? (size_t)(tilde - out) : n;
	for (size_t i = 0; i < plain; i++) {
		char c = out[i];
		if (c == '%') {
			/* A whole escape: the cut never splits one. */
			CU_ASSERT_FATAL(i + 2 < plain);
			CU_ASSERT(is_hex_upper(out[i + 1]) && is_hex_upper(out[i + 2]));
			i += 2;
			continue;
		}
		CU_ASSERT((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
		          c == '-');
	}
	if (tilde) {
		CU_ASSERT_EQUAL(strlen(tilde + 1), 64);
		CU_ASSERT(plain <= DLOCK_COMPONENT_MAX - 65);
	}
}

static void test_component_escapes(void)
{
	check_component("abcXYZ_-0189", 12, "abcXYZ_-0189");
	check_component("a.b", 3, "a%2Eb");
	check_component("a/b", 3, "a%2Fb");
	check_component("%", 1, "%25");
	check_component("~", 1, "%7E");
	check_component(" ", 1, "%20");
	check_component(".", 1, "%2E");
	check_component("..", 2, "%2E%2E");
	check_component("\xff", 1, "%FF");
	check_component("\xc3\xa9", 2, "%C3%A9");
	check_component("\0", 1, "%00");
	check_component("a\0b", 3, "a%00b");
	check_component("x:y*z", 5, "x%3Ay%2Az");
	for (int c = 0; c < 0x20; c++) {
		char name = (char)c, want[4];
		snprintf(want, sizeof want, "%%%02X", c);
		check_component(&name, 1, want);
	}
	/* Every single byte maps to a component of the right shape, all distinct. */
	char seen[256][DLOCK_COMPONENT_MAX + 1];
	for (int c = 0; c < 256; c++) {
		char name = (char)c;
		dlock_name_component(&name, 1, seen[c]);
		check_component_shape(seen[c]);
		for (int d = 0; d < c; d++)
			CU_ASSERT(strcmp(seen[c], seen[d]) != 0);
	}
}

static void test_component_long(void)
{
	char name[DLOCK_NAME_MAX], out[DLOCK_COMPONENT_MAX + 1], other[DLOCK_COMPONENT_MAX + 1];
	char want[DLOCK_COMPONENT_MAX + 1];

	/* Exactly DLOCK_COMPONENT_MAX escaped characters are kept as they are. */
	memset(name, 'a', DLOCK_COMPONENT_MAX);
	dlock_name_component(name, DLOCK_COMPONENT_MAX, out);
	CU_ASSERT_EQUAL(strlen(out), DLOCK_COMPONENT_MAX);
	CU_ASSERT_PTR_NULL(strchr(out, '~'));

	/* One more: 135 kept characters, "~" and the digest of the whole name. */
	memset(name, 'a', sizeof name);
	dlock_name_component(name, DLOCK_COMPONENT_MAX + 1, out);
	CU_ASSERT_EQUAL(strlen(out), DLOCK_COMPONENT_MAX);
	CU_ASSERT_EQUAL(out[DLOCK_COMPONENT_MAX - 65], '~');
	unsigned char d[32];
	dlock_sha256(name, DLOCK_COMPONENT_MAX + 1, d);
	memset(want, 'a', DLOCK_COMPONENT_MAX - 65);
	want[DLOCK_COMPONENT_MAX - 65] = '~';
	dlock_hex(d, sizeof d, want + DLOCK_COMPONENT_MAX - 64);
	CU_ASSERT_STRING_EQUAL(out, want);
	check_component_shape(out);

	/* 66 dots escape to 198 characters and fit; 67 do not. */
	memset(name, '.', sizeof name);
	dlock_name_component(name, 66, out);
	CU_ASSERT_EQUAL(strlen(out), 198);
	CU_ASSERT_PTR_NULL(strchr(out, '~'));
	dlock_name_component(name, 67, out);
	check_component_shape(out);
	CU_ASSERT_EQUAL(strlen(out), 135 + 1 + 64);

	/* The cut falls before a triple that would not fit whole. */
	name[0] = 'a';
	dlock_name_component(name, 100, out);
	check_component_shape(out);
	CU_ASSERT_EQUAL(out[1 + 44 * 3], '~');
	CU_ASSERT_EQUAL(strlen(out), 1 + 44 * 3 + 1 + 64);

	/* Names equal up to well past the cut still get different components. */
	memset(name, 'q', sizeof name);
	name[999] = 'x';
	dlock_name_component(name, 1000, out);
	name[999] = 'y';
	dlock_name_component(name, 1000, other);
	check_component_shape(out);
	check_component_shape(other);
	CU_ASSERT(strcmp(out, other) != 0);
	CU_ASSERT(memcmp(out, other, DLOCK_COMPONENT_MAX - 64) == 0);

	/* A prefix of a long name differs from the name. */
	dlock_name_component(name, 999, other);
	CU_ASSERT(strcmp(out, other) != 0);

	/* The longest name of the worst bytes still fits. */
	memset(name, 0xff, sizeof name);
	dlock_name_component(name, sizeof name, out);
	check_component_shape(out);

	/* An empty name never gives "". */
	dlock_name_component("", 0, out);
	check_component_shape(out);
}

/* Deterministic pseudo-random names (xorshift), so a failure repeats. */
static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_component_random(void)
{
	enum { N = 1500, MAXLEN = 300 };
	char (*outs)[DLOCK_COMPONENT_MAX + 1] = calloc(N, sizeof *outs);
	unsigned char (*names)[MAXLEN] = calloc(N, sizeof *names);
	size_t *lens = calloc(N, sizeof *lens);
	CU_ASSERT_FATAL(outs && names && lens);
	uint64_t seed = 0x9e3779b97f4a7c15u;
	for (size_t i = 0; i < N; i++) {
		lens[i] = 1 + next_rand(&seed) % MAXLEN;
		/* Mostly a few byte values, so that near-identical names are common. */
		for (size_t j = 0; j < lens[i]; j++)
			names[i][j] = (i % 3) ? "a.~/%"[next_rand(&seed) % 5] : (unsigned char)next_rand(&seed);
		dlock_name_component((const char *)names[i], lens[i], outs[i]);
		check_component_shape(outs[i]);
	}
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < i; j++) {
			int same_name = lens[i] == lens[j] && memcmp(names[i], names[j], lens[i]) == 0;
			CU_ASSERT_EQUAL(same_name, strcmp(outs[i], outs[j]) == 0);
		}
	free(outs);
	free(names);
	free(lens);
}

/* ------------------------------------------------------------ suites */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("uri_accept", NULL, NULL);
	CU_add_test(s, "mem", test_mem);
	CU_add_test(s, "file", test_file);
	CU_add_test(s, "redis", test_redis);
	CU_add_test(s, "zk", test_zk);
	CU_add_test(s, "postgres", test_postgres);
	CU_add_test(s, "ipv6", test_ipv6);
	CU_add_test(s, "scheme_and_userinfo", test_scheme_and_userinfo);
	CU_add_test(s, "percent_decoding", test_percent_decoding);
	CU_add_test(s, "params", test_params);
	CU_add_test(s, "length_limit", test_length_limit);

	s = CU_add_suite("uri_reject", NULL, NULL);
	CU_add_test(s, "invalid_args", test_invalid_args);
	CU_add_test(s, "malformed", test_malformed);
	CU_add_test(s, "a text that is no URI is shown, masked", test_not_a_uri_shown);

	s = CU_add_suite("uri_mask", NULL, NULL);
	CU_add_test(s, "mask", test_mask);

	s = CU_add_suite("status", NULL, NULL);
	CU_add_test(s, "durations", test_durations);
	CU_add_test(s, "status", test_status);
	CU_add_test(s, "capability_names", test_capability_names);
	CU_add_test(s, "error_set", test_error_set);

	s = CU_add_suite("util", NULL, NULL);
	CU_add_test(s, "sha256_hex", test_sha256_hex);
	CU_add_test(s, "random_and_clock", test_random_and_clock);
	CU_add_test(s, "component_escapes", test_component_escapes);
	CU_add_test(s, "component_long", test_component_long);
	CU_add_test(s, "component_random", test_component_random);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
