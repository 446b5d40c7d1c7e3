/*
 * Conformance: lock names (limits, odd bytes, distinct resources), argument
 * checks, and, in a suite of their own, malformed URIs and static helpers.
 */
#include "conformance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bound for the acquisitions of the name tests: bare names such as "." are
 * shared by every run on a server, so a short wait rides over another run. */
#define NAME_WAIT_MS 500

static void print_name(const char *what, const char *name)
{
	printf("\n    %s: \"", what);
	size_t len = strlen(name);
	for (size_t i = 0; i < len && i < 48; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			putchar(c);
		else
			printf("\\x%02x", c);
	}
	printf(len > 48 ? "\"... (%zu bytes)" : "\" (%zu bytes)", len);
}

/* Take `name` on `client` within NAME_WAIT_MS with a fresh handle, then release it. */
static dlock_status probe_wait(dlock_client *client, const char *name)
{
	dlock_lock *lock = NULL;
	dlock_status st = dlock_lock_new(client, name, &lock);
	if (st == DLOCK_OK)
		st = conf_acquire(lock, NAME_WAIT_MS);
	if (st == DLOCK_OK)
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	dlock_lock_free(lock);
	return st;
}

/* ------------------------------------------------------- limits */

static void assert_bad_name(dlock_client *client, const char *name)
{
	dlock_lock *lock = (dlock_lock *)&lock;
	CONF_ASSERT_ST(dlock_lock_new(client, name, &lock), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(lock);
	const char *msg = dlock_client_errmsg(client);
	CU_ASSERT(msg && *msg);
	dlock_lock_free(lock == (dlock_lock *)&lock ? NULL : lock);
}

static void test_name_invalid(void)
{
	dlock_client *client = conf_open();
	char *long_name = malloc(DLOCK_NAME_MAX + 2);
	if (client && long_name) {
		memset(long_name, 'n', DLOCK_NAME_MAX + 1);
		long_name[DLOCK_NAME_MAX + 1] = '\0';
		assert_bad_name(client, "");
		assert_bad_name(client, long_name);
		assert_bad_name(client, NULL);
		dlock_lock *lock = (dlock_lock *)&lock;
		CONF_ASSERT_ST(dlock_lock_new(NULL, "x", &lock), DLOCK_EINVAL);
		CU_ASSERT_PTR_NULL(lock);
		CONF_ASSERT_ST(dlock_lock_new(client, "x", NULL), DLOCK_EINVAL);
	}
	free(long_name);
	conf_close(client);
}

static void test_name_max_length(void)
{
	char *name = malloc(DLOCK_NAME_MAX + 1);
	dlock_client *client = conf_open();
	dlock_client *other = conf_open();
	dlock_lock *lock = NULL;
	if (name && client && other) {
		conf_name(name, DLOCK_NAME_MAX + 1, "max");
		size_t used = strlen(name);
		memset(name + used, 'm', DLOCK_NAME_MAX - used);
		name[DLOCK_NAME_MAX] = '\0';
		lock = conf_lock(client, name);
	}
	if (lock && CONF_ASSERT_ST(conf_acquire(lock, 0), DLOCK_OK)) {
		CU_ASSERT_STRING_EQUAL(dlock_lock_name(lock), name);
		CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_EBUSY);
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
		CONF_ASSERT_ST(dlock_test_probe(other, name), DLOCK_OK);
	}
	dlock_lock_free(lock);
	conf_close(other);
	conf_close(client);
	free(name);
}

/* ------------------------------------------------------- odd names */

#define CONTROL_BYTES                                                        \
	("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f" \
	 "\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f")

/* Suffixes appended to the run's prefix; pairs that a careless mapping could
 * merge sit next to each other. */
static const char *const odd_suffixes[] = {
	" ", "a b", "/", "a/b", "a%2Fb", "a%2fb", ".", "%2E", "..", "%2E%2E", "{x}", "x", "X",
	"\"q\"", "'q'", "a;b", "%", "%25", "%%", "\\", "a:b", "a|b", "*", "?", "#", "~", "-", "_",
	"\xff\xfe", "\xff", "\xc3\xa9", "e\xcc\x81", "\x01", "\n", "\t", "\x1f",
	CONTROL_BYTES,
};

/* Whole names, without the run's prefix: what a path or key mapping must survive. */
static const char *const bare_names[] = { ".", "..", "/", "%2E", "%2e", " ", "\xff\xfe", "{}", "*" };

typedef struct name_set {
	char **names;
	size_t n;
} name_set;

static void name_add(name_set *set, const char *prefix, const char *suffix, size_t pad, char last)
{
	size_t len = strlen(prefix) + strlen(suffix) + pad + 2;
	char *name = malloc(len);
	if (!name)
		abort();
	int used = snprintf(name, len, "%s%s", prefix, suffix);
	memset(name + used, 'p', pad);
	name[used + pad] = last;
	name[used + pad + (last ? 1 : 0)] = '\0';
	set->names[set->n++] = name;
}

/* Names differing only in their last byte, around the lengths where a
 * backend may cut and hash (DLOCK_COMPONENT_MAX) and at DLOCK_NAME_MAX. */
static void add_long_names(name_set *set, const char *prefix)
{
	static const size_t lengths[] = { 199, 200, 201, 512, DLOCK_NAME_MAX };
	size_t plen = strlen(prefix);
	for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
		name_add(set, prefix, "", lengths[i] - plen - 1, 'a');
		name_add(set, prefix, "", lengths[i] - plen - 1, 'b');
	}
	char slashes[120];
	memset(slashes, '/', sizeof slashes - 1);
	slashes[sizeof slashes - 1] = '\0';
	name_add(set, prefix, slashes, 0, 'a');
	name_add(set, prefix, slashes, 0, 'b');
}

static name_set odd_names(void)
{
	char prefix[96];
	conf_name(prefix, sizeof prefix, "odd-");
	size_t nodd = sizeof odd_suffixes / sizeof odd_suffixes[0];
	size_t nbare = sizeof bare_names / sizeof bare_names[0];
	name_set set = { calloc(nodd + nbare + 16, sizeof(char *)), 0 };
	if (!set.names)
		abort();
	for (size_t i = 0; i < nodd; i++)
		name_add(&set, prefix, odd_suffixes[i], 0, '\0');
	for (size_t i = 0; i < nbare; i++)
		name_add(&set, "", bare_names[i], 0, '\0');
	add_long_names(&set, prefix);
	return set;
}

static void name_set_free(name_set *set)
{
	for (size_t i = 0; i < set->n; i++)
		free(set->names[i]);
	free(set->names);
}

/*
 * With `holder` holding every other name, `other` must get name i: no two
 * names share a resource.
 */
static void assert_distinct(dlock_client *other, dlock_lock **held, const name_set *set)
{
	for (size_t i = 0; i < set->n; i++) {
		if (!held[i] || !CONF_ASSERT_ST(dlock_release(held[i]), DLOCK_OK))
			continue;
		dlock_status st = probe_wait(other, set->names[i]);
		if (st != DLOCK_OK)
			print_name("blocked while the other names were held", set->names[i]);
		CONF_ASSERT_ST(st, DLOCK_OK);
		CONF_ASSERT_ST(conf_acquire(held[i], NAME_WAIT_MS), DLOCK_OK);
	}
}

static void test_odd_names_distinct(void)
{
	name_set set = odd_names();
	int shared = conf_shared_names_begin(); /* the bare names */
	dlock_client *holder = conf_open();
	dlock_client *other = conf_open();
	dlock_lock **held = calloc(set.n, sizeof *held);
	for (size_t i = 0; holder && other && held && i < set.n; i++) {
		dlock_status st = dlock_lock_new(holder, set.names[i], &held[i]);
		if (st == DLOCK_OK)
			st = conf_acquire(held[i], NAME_WAIT_MS);
		if (st != DLOCK_OK)
			print_name(dlock_status_name(st), set.names[i]);
		CONF_ASSERT_ST(st, DLOCK_OK);
		if (held[i])
			CU_ASSERT_STRING_EQUAL(dlock_lock_name(held[i]), set.names[i]);
	}
	if (holder && other && held)
		assert_distinct(other, held, &set);
	for (size_t i = 0; held && i < set.n; i++) {
		if (held[i])
			CONF_ASSERT_ST(dlock_release(held[i]), DLOCK_OK);
		dlock_lock_free(held[i]);
	}
	free(held);
	conf_close(other);
	conf_close(holder);
	conf_shared_names_end(shared);
	name_set_free(&set);
}

/* ------------------------------------------------------- NULL arguments */

static void test_null_arguments(void)
{
	char name[128];
	conf_name(name, sizeof name, "null-args");
	dlock_client *client = conf_open();
	dlock_lock *lock = conf_lock(client, name);
	uint64_t token;
	dlock_client_stats stats;
	dlock_capabilities caps;
	CONF_ASSERT_ST(dlock_acquire(NULL, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_release(NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_extend(NULL, 0), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_check(NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_cancel(NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_lock_fencing_token(NULL, &token), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_client_get_stats(NULL, &stats), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_client_capabilities(NULL, &caps), DLOCK_EINVAL);
	if (lock && CONF_ASSERT_ST(dlock_acquire(lock, NULL), DLOCK_OK)) {
		CONF_ASSERT_ST(dlock_lock_fencing_token(lock, NULL), DLOCK_EINVAL);
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	}
	CONF_ASSERT_ST(dlock_client_get_stats(client, NULL), DLOCK_EINVAL);
	CONF_ASSERT_ST(dlock_client_capabilities(client, NULL), DLOCK_EINVAL);
	dlock_lock_free(lock);
	conf_close(client);
}

const conf_test conf_names_tests[] = {
	{ "name_invalid", test_name_invalid },
	{ "name_max_length", test_name_max_length },
	{ "odd_names_distinct", test_odd_names_distinct },
	{ "null_arguments", test_null_arguments },
	{ NULL, NULL },
};

/* ------------------------------------------------------- URIs (one suite) */

/* Opening `uri` fails with `want` (DLOCK_OK: any failure), cleanly and safely. */
static void assert_open_fails(const char *uri, dlock_status want)
{
	dlock_client *client = (dlock_client *)&client;
	char err[512];
	memset(err, 0, sizeof err);
	dlock_status st = dlock_client_open(&client, uri, NULL, err, sizeof err);
	if (st == DLOCK_OK || (want != DLOCK_OK && st != want))
		printf("\n    \"%s\": %s", uri ? uri : "(null)", dlock_status_name(st));
	CU_ASSERT(st != DLOCK_OK);
	if (want != DLOCK_OK)
		CONF_ASSERT_ST(st, want);
	CU_ASSERT_PTR_NULL(client);
	CU_ASSERT(err[0] != '\0');
	CU_ASSERT(strstr(err, "secret") == NULL);
	if (st == DLOCK_OK && client != (dlock_client *)&client)
		dlock_client_close(client);
}

static void test_uri_malformed(void)
{
	static const char *const bad[] = {
		"", "nothing", "://x", "mem", "mem:/x", "mem://x?ttl=abc", "mem://x?ttl=0",
		"mem://x?ttl=-5", "mem://x?ttl=1s&ttl=2s", "mem://x?renew=maybe", "mem://x?fencing=maybe", "mem://x?wait=10parsecs",
		"file://relative/dir", "file://", "redis://:secret@127.0.0.1:1?ttl=10parsecs",
		"redis://user:secret@127.0.0.1:1?ttl=abc", "mem://user:secret@x?ttl=abc",
	};
	assert_open_fails(NULL, DLOCK_OK);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_open_fails(bad[i], DLOCK_OK);
	assert_open_fails("unknown://x", DLOCK_ENOBACKEND);
	assert_open_fails("unknown://u:secret@x", DLOCK_ENOBACKEND);
}

static void test_uri_unknown_param(void)
{
	dlock_client *client = (dlock_client *)&client;
	char err[512] = "";
	CONF_ASSERT_ST(dlock_client_open(&client, "mem://x?bogus=1", NULL, err, sizeof err), DLOCK_EURI);
	CU_ASSERT_PTR_NULL(client);
	CU_ASSERT(strstr(err, "bogus") != NULL);
}

/* A password never shows, whether the open fails or works. */
static void test_uri_password_masked(void)
{
	static const char *const uris[] = { "redis://:secret@127.0.0.1:1", "mem://user:secret@x" };
	for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
		dlock_client *client = NULL;
		char err[512] = "";
		dlock_status st = dlock_client_open(&client, uris[i], NULL, err, sizeof err);
		CU_ASSERT(strstr(err, "secret") == NULL);
		if (st == DLOCK_OK) {
			CU_ASSERT(strstr(dlock_client_uri(client), "secret") == NULL);
			CONF_ASSERT_ST(dlock_client_close(client), DLOCK_OK);
		} else {
			CU_ASSERT(err[0] != '\0');
		}
	}
}

static void test_uri_small_errbuf(void)
{
	char err[16];
	memset(err, 'Z', sizeof err);
	dlock_client *client = NULL;
	CU_ASSERT(dlock_client_open(&client, "mem://x?bogus=1", NULL, err, 8) != DLOCK_OK);
	CU_ASSERT(memchr(err, '\0', 8) != NULL);
	CU_ASSERT(err[8] == 'Z' && err[15] == 'Z');
	CU_ASSERT(dlock_client_open(&client, "mem://x?bogus=1", NULL, NULL, 0) != DLOCK_OK);
	CU_ASSERT_PTR_NULL(client);
}

static void test_null_is_noop(void)
{
	CONF_ASSERT_ST(dlock_client_close(NULL), DLOCK_OK);
	dlock_lock_free(NULL);
	CU_PASS("dlock_client_close(NULL) and dlock_lock_free(NULL) returned");
}

static void test_strerror_all(void)
{
	for (int st = 0; st < DLOCK_STATUS_COUNT_; st++) {
		CU_ASSERT(dlock_strerror(st) && *dlock_strerror(st));
		CU_ASSERT(dlock_status_name(st) && *dlock_status_name(st));
	}
	CU_ASSERT_STRING_EQUAL(dlock_status_name(DLOCK_ENOTHELD), "ENOTHELD");
	CU_ASSERT(dlock_strerror(DLOCK_STATUS_COUNT_) && *dlock_strerror(DLOCK_STATUS_COUNT_));
	CU_ASSERT(dlock_strerror(-1) && *dlock_strerror(-1));
	CU_ASSERT_STRING_EQUAL(dlock_status_name(-1), "UNKNOWN");
}

const conf_test conf_uri_tests[] = {
	{ "uri_malformed", test_uri_malformed },
	{ "uri_unknown_param", test_uri_unknown_param },
	{ "uri_password_masked", test_uri_password_masked },
	{ "uri_small_errbuf", test_uri_small_errbuf },
	{ "null_is_noop", test_null_is_noop },
	{ "strerror_all", test_strerror_all },
	{ NULL, NULL },
};
