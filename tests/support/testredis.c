/* Helpers for the Redis test programs; see testredis.h. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock/sys/driver.h"
#include "testredis.h"
#include "testsupport.h"

void dlock_testredis_prefix(char *out, size_t len)
{
	static unsigned counter; /* test programs run their tests on one thread */
	snprintf(out, len, "dlt%d-%u", (int)getpid(), ++counter);
}

void dlock_testredis_uri(char *out, size_t len, const char *base, const char *prefix, const char *extra)
{
	snprintf(out, len, "%s%sprefix=%s%s%s", base, strchr(base, '?') ? "&" : "?", prefix, *extra ? "&" : "",
	         extra);
}

redisContext *dlock_testredis_raw(int port)
{
	redisContext *ctx = redisConnect("127.0.0.1", port);
	CU_ASSERT_FATAL(ctx != NULL && !ctx->err);
	return ctx;
}

long dlock_testredis_keys_under(int port, const char *prefix)
{
	redisContext *ctx = dlock_testredis_raw(port);
	redisReply *r = redisCommand(ctx, "KEYS %s:*", prefix);
	long n = r && r->type == REDIS_REPLY_ARRAY ? (long)r->elements : -1;
	freeReplyObject(r);
	redisFree(ctx);
	return n;
}

int dlock_testredis_ctl(const char *ctl, const char *what)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s %s", ctl, what);
	int rc = system(cmd);
	if (rc != 0)
		printf("\n    '%s' failed (%d)", what, rc);
	return rc == 0;
}

int dlock_testredis_ctl_port(const char *ctl, const char *what)
{
	char cmd[1024], line[256] = "";
	snprintf(cmd, sizeof cmd, "%s %s", ctl, what);
	if (dlock_test_run(cmd, line, sizeof line) != 0) {
		printf("\n    '%s' failed", what);
		return 0;
	}
	line[strcspn(line, "\n")] = '\0';
	const char *sp = strrchr(line, ' ');
	return atoi(sp ? sp + 1 : line);
}

void dlock_testredis_key(char *out, size_t len, const char *prefix, const char *name, const char *suffix)
{
	unsigned char sum[32];
	char hex[65];
	dlock_sha256(name, strlen(name), sum);
	dlock_hex(sum, 16, hex);
	snprintf(out, len, "%s:{%s}:%s", prefix, hex, suffix);
}

void dlock_testredis_open_fails(const char *uri, dlock_status want, const char *expect, const char *const *secrets)
{
	dlock_client *c = NULL;
	char err[1024] = "";
	dlock_status st = dlock_client_open(&c, uri, NULL, err, sizeof err);
	printf("\n    %s: %s", dlock_status_name(st), err);
	CU_ASSERT_EQUAL(st, want);
	CU_ASSERT_PTR_NULL(c);
	if (expect)
		CU_ASSERT_PTR_NOT_NULL(strstr(err, expect));
	for (; secrets && *secrets; secrets++)
		CU_ASSERT_PTR_NULL(strstr(err, *secrets));
	dlock_client_close(c);
}

int64_t dlock_testredis_server_ms(redisContext *ctx)
{
	redisReply *r = redisCommand(ctx, "TIME");
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	int64_t ms = strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
	freeReplyObject(r);
	return ms;
}

long long dlock_testredis_integer(redisContext *ctx, const char *cmd, const char *key)
{
	redisReply *r = redisCommand(ctx, cmd, key);
	long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -99;
	freeReplyObject(r);
	return v;
}

void dlock_testredis_get(redisContext *ctx, const char *key, char *out, size_t len)
{
	redisReply *r = redisCommand(ctx, "GET %s", key);
	snprintf(out, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
	freeReplyObject(r);
}

size_t dlock_testredis_uris(char (*out)[DLOCK_TESTREDIS_URI_MAX], size_t max)
{
	size_t n = 0;
	const char *all = dlock_test_env("DLOCK_TEST_URIS");
	for (const char *p = all; p && *p && n < max;) {
		while (*p == ' ')
			p++;
		size_t w = strcspn(p, " ");
		if (w > 0 && w < DLOCK_TESTREDIS_URI_MAX && strncmp(p, "redis", 5) == 0) {
			memcpy(out[n], p, w);
			out[n++][w] = '\0';
		}
		p += w;
	}
	const char *unix_uri = dlock_test_env("DLOCK_TEST_REDIS_UNIX_URI");
	int listed = 0;
	for (size_t i = 0; unix_uri && i < n; i++)
		listed |= strcmp(out[i], unix_uri) == 0;
	if (unix_uri && !listed && n < max && strlen(unix_uri) < DLOCK_TESTREDIS_URI_MAX)
		snprintf(out[n++], DLOCK_TESTREDIS_URI_MAX, "%s", unix_uri);
	return n;
}

const char *dlock_testredis_single(int *port)
{
	const char *base = dlock_test_env("DLOCK_TEST_REDIS_URI"), *p = dlock_test_env("DLOCK_TEST_REDIS_PORT");
	*port = p ? atoi(p) : 0;
	if (!base || !*port) {
		dlock_test_skip_part("DLOCK_TEST_REDIS_URI unset");
		return NULL;
	}
	return base;
}

/* The URIs and the bodies of dlock_testredis_add_each()'s tests (test programs register and run on one thread). */
static char each_uris[DLOCK_TESTREDIS_EACH_MAX][DLOCK_TESTREDIS_URI_MAX];
static size_t each_nuris;
static struct {
	CU_pTest test;
	void (*body)(const char *base);
} each_tests[DLOCK_TESTREDIS_EACH_MAX];
static size_t each_ntests;

size_t dlock_testredis_every_uri(void)
{
	each_nuris = dlock_testredis_uris(each_uris, DLOCK_TESTREDIS_EACH_MAX);
	return each_nuris;
}

/* The test CUnit is running: its body on every URI. */
static void run_each(void)
{
	CU_pTest now = CU_get_current_test();
	for (size_t t = 0; t < each_ntests; t++) {
		if (each_tests[t].test != now)
			continue;
		for (size_t i = 0; i < each_nuris; i++) {
			/* the scheme only: a query may hold a sentinel's password */
			printf("\n    %.*s (URI %zu)", (int)strcspn(each_uris[i], ":"), each_uris[i], i + 1);
			each_tests[t].body(each_uris[i]);
		}
	}
}

void dlock_testredis_add_each(CU_pSuite suite, const char *name, void (*body)(const char *base))
{
	if (each_ntests == DLOCK_TESTREDIS_EACH_MAX)
		abort();
	each_tests[each_ntests].body = body;
	each_tests[each_ntests].test = CU_add_test(suite, name, run_each);
	each_ntests++;
}
