/*
 * Conformance: inspection and breaking (dlock_inspect(), dlock_list(),
 * dlock_break()) and the client's identity.  A free name, bad input and a
 * name of hostile bytes; the holder another client shows (identity, host,
 * pid, acquisition time on the server's clock, lease left, token); every
 * reader of a read-write lock and every permit of a semaphore; the kind
 * a name is in use as, for each kind and each way of holding it; waiters;
 * listing under a name prefix; breaking a holder (its lost-lock callback
 * runs, a waiter gets the name with a larger token); the identity option
 * against the URI's, and bad identities.
 *
 * What a backend can see comes from DLOCK_FEATURE_INSPECT and what it can
 * break from DLOCK_FEATURE_BREAK: a field whose flag is set must be right
 * for every holder, one whose flag is absent unknown or right, and a test
 * of something the backend cannot do says SKIPPED and checks that the call
 * answers DLOCK_ENOTSUP.
 */
#include "conformance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Lease of the holders inspected: long enough that none expires during a test. */
#define INSP_LEASE_MS 20000
/* Lease of the holder that is broken: it learns of the break within a renewal period (a third). */
#define INSP_BREAK_LEASE_MS 3000
/* How far the server's clock may be from this host's (the test servers run here). */
#define INSP_CLOCK_SLACK_MS 5000
/* A URI, plus an identity parameter. */
#define INSP_URI_MAX 4400

/* An identity with quotes, a slash, a percent and braces: bytes a record or a query must escape. */
static const char hostile_identity[] = "job \"a\"/%41{x}";

/* ------------------------------------------------------- helpers */

static int64_t feature_of(dlock_client *client, dlock_feature f)
{
	int64_t v = -1;
	if (client)
		CONF_ASSERT_ST(dlock_client_feature(client, f, &v), DLOCK_OK);
	return v;
}

static int64_t inspect_flags(dlock_client *client)
{
	int64_t v = feature_of(client, DLOCK_FEATURE_INSPECT);
	return v < 0 ? 0 : v;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The status and the client's message are both there: a refusal says why. */
static void assert_refused(dlock_client *client, dlock_status got, dlock_status want, const char *expr,
                           unsigned line)
{
	conf_assert_status(got, want, want, expr, __FILE__, line);
	const char *msg = client ? dlock_client_errmsg(client) : "x";
	CU_ASSERT(msg && *msg);
}
#define ASSERT_REFUSED(client, expr, want) assert_refused((client), (expr), (want), #expr, __LINE__)

/* 1 (and a SKIPPED line) when the backend has no inspection; checks that the calls say so. */
static int inspect_unsupported(dlock_client *client)
{
	if (!client)
		return 1;
	if (inspect_flags(client) & DLOCK_INSPECT_HELD)
		return 0;
	dlock_lock_info *info = (dlock_lock_info *)&info;
	ASSERT_REFUSED(client, dlock_inspect(client, "insp-unsupported", &info), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NULL(info);
	dlock_test_skip_part("no inspection on this backend (DLOCK_FEATURE_INSPECT is 0: DLOCK_ENOTSUP)");
	return 1;
}

/* 1 (and a SKIPPED line) when the flag `need` is absent. */
static int lacks(dlock_client *client, int64_t need, const char *why)
{
	if (inspect_flags(client) & need)
		return 0;
	dlock_test_skip_part(why);
	return 1;
}

/* Every byte outside [A-Za-z0-9._~-] as %XX. */
static void pct_encode(char *out, size_t outlen, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p && n + 4 < outlen; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    strchr("._~-", *p)) {
			out[n++] = (char)*p;
		} else {
			out[n++] = '%';
			out[n++] = hex[*p >> 4];
			out[n++] = hex[*p & 15];
		}
	}
	out[n] = '\0';
}

/* The URI under test with `param` (already encoded) appended to its query. */
static void uri_with(char *out, size_t outlen, const char *param)
{
	const char *uri = conf_uri();
	snprintf(out, outlen, "%s%c%s", uri, strchr(uri, '?') ? '&' : '?', param);
}

/* A client of the backend under test whose URI says `identity=` (encoded here). */
static dlock_client *open_as(const char *identity)
{
	char enc[3 * DLOCK_IDENTITY_MAX + 16], param[sizeof enc + 16], uri[INSP_URI_MAX];
	pct_encode(enc, sizeof enc, identity);
	snprintf(param, sizeof param, "identity=%s", enc);
	uri_with(uri, sizeof uri, param);
	dlock_client *client = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(client);
	return client;
}

static dlock_lock_info *inspect_ok(dlock_client *client, const char *name)
{
	dlock_lock_info *info = NULL;
	if (client && CONF_ASSERT_ST(dlock_inspect(client, name, &info), DLOCK_OK)) {
		CU_ASSERT_PTR_NOT_NULL_FATAL(info);
		CU_ASSERT(info->name && strcmp(info->name, name) == 0);
		CU_ASSERT_PTR_NOT_NULL(info->resource);
		CU_ASSERT(info->nholders == 0 || info->holders);
	}
	return info;
}

/* Inspected from `client`: `name` has no holder. */
static void assert_no_holder(dlock_client *client, const char *name)
{
	dlock_lock_info *info = inspect_ok(client, name);
	if (info)
		CU_ASSERT_EQUAL(info->nholders, 0);
	dlock_lock_info_free(info);
}

static const dlock_holder *holder_of(const dlock_lock_info *info, const char *identity)
{
	for (size_t i = 0; info && i < info->nholders; i++)
		if (strcmp(info->holders[i]->identity, identity) == 0)
			return info->holders[i];
	return NULL;
}

/*
 * A holder against what the holding handle knows: identity, host and pid
 * where OWNER, the time where ACQUIRED (between `before` and now, give or
 * take the clocks), the lease where LEASE, the token where TOKEN.  A field
 * whose flag is absent may still be known for some holders (file:// knows
 * a writer's owner, not a reader's): it is then unknown or right.
 */
static void check_holder(const dlock_holder *h, int64_t flags, const char *identity, dlock_lock *held,
                         int64_t before_ms, int64_t lease_ms, dlock_lock_mode mode)
{
	CU_ASSERT_PTR_NOT_NULL_FATAL(h);
	CU_ASSERT_PTR_NOT_NULL_FATAL(h->identity);
	CU_ASSERT_PTR_NOT_NULL_FATAL(h->host);
	CU_ASSERT_PTR_NOT_NULL_FATAL(h->session);
	int owner_known = (flags & DLOCK_INSPECT_OWNER) || h->identity[0] != '\0' || h->pid != 0;
	if (owner_known) {
		if (identity)
			CU_ASSERT_STRING_EQUAL(h->identity, identity);
		CU_ASSERT(h->host[0] != '\0');
		CU_ASSERT_EQUAL(h->pid, (int64_t)getpid());
	}
	if ((flags & DLOCK_INSPECT_ACQUIRED) || h->acquired_ms != -1) {
		CU_ASSERT(h->acquired_ms >= before_ms - INSP_CLOCK_SLACK_MS);
		CU_ASSERT(h->acquired_ms <= wall_ms() + INSP_CLOCK_SLACK_MS);
	}
	if ((flags & DLOCK_INSPECT_LEASE) || h->lease_left_ms != -1) {
		CU_ASSERT(h->lease_left_ms > 0 && h->lease_left_ms <= lease_ms);
		if (!(h->lease_left_ms > 0 && h->lease_left_ms <= lease_ms))
			printf("\n    lease left %lld ms, lease %lld ms", (long long)h->lease_left_ms, (long long)lease_ms);
	}
	uint64_t token = 0;
	dlock_status tst = held ? dlock_lock_fencing_token(held, &token) : DLOCK_ENOTSUP;
	if (((flags & DLOCK_INSPECT_TOKEN) || h->token != 0) && tst == DLOCK_OK)
		CU_ASSERT_EQUAL(h->token, token);
	if (!(flags & DLOCK_INSPECT_SESSION))
		CU_ASSERT_STRING_EQUAL(h->session, "");
	CU_ASSERT_EQUAL(h->mode, mode);
}

/* Assert that `info` has `n` holders; 1 when it has. */
static int holders_are(const dlock_lock_info *info, size_t n)
{
	if (!info)
		return 0;
	CU_ASSERT_EQUAL(info->nholders, n);
	return info->nholders == n;
}

static dlock_status hold(dlock_lock *lock, int64_t lease_ms, dlock_lock_mode mode)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = CONF_AWAIT_MS;
	o.lease_ms = lease_ms;
	o.mode = mode;
	return lock ? dlock_acquire(lock, &o) : DLOCK_EINVAL;
}

/* ------------------------------------------------------- tests */

/* The features are in range and agree with the calls. */
static void test_inspect_features(void)
{
	dlock_client *client = conf_open();
	if (!client)
		return;
	int64_t flags = inspect_flags(client);
	CU_ASSERT((flags & ~(int64_t)511) == 0);
	if (flags != 0)
		CU_ASSERT(flags & DLOCK_INSPECT_HELD);
	if (flags & DLOCK_INSPECT_NAMES)
		CU_ASSERT(flags & DLOCK_INSPECT_LIST);
	int64_t brk = feature_of(client, DLOCK_FEATURE_BREAK);
	CU_ASSERT(brk == DLOCK_BREAK_NONE || brk == DLOCK_BREAK_DELETE || brk == DLOCK_BREAK_SESSION);
	if (brk != DLOCK_BREAK_NONE)
		CU_ASSERT(flags & DLOCK_INSPECT_HELD);
	printf("\n    inspect flags 0x%llx, break %s", (unsigned long long)flags,
	       dlock_break_effect_name((dlock_break_effect)brk));
	if (!(flags & DLOCK_INSPECT_LIST)) {
		dlock_lock_list *list = (dlock_lock_list *)&list;
		ASSERT_REFUSED(client, dlock_list(client, "", &list), DLOCK_ENOTSUP);
		CU_ASSERT_PTR_NULL(list);
	}
	if (brk == DLOCK_BREAK_NONE) {
		size_t broken = 7;
		ASSERT_REFUSED(client, dlock_break(client, "insp-nobreak", &broken), DLOCK_ENOTSUP);
		CU_ASSERT_EQUAL(broken, 0);
	}
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_INSPECT), "inspect");
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_BREAK), "break");
	CU_ASSERT_STRING_EQUAL(dlock_break_effect_name(DLOCK_BREAK_NONE), "none");
	CU_ASSERT_STRING_EQUAL(dlock_break_effect_name(DLOCK_BREAK_DELETE), "delete");
	CU_ASSERT_STRING_EQUAL(dlock_break_effect_name(DLOCK_BREAK_SESSION), "session");
	conf_close(client);
}

/* A free name: no holder.  NULL, "" and a name too long: DLOCK_EINVAL with a message. */
static void test_inspect_free_and_bad_input(void)
{
	dlock_client *client = conf_open();
	char *too_long = malloc(DLOCK_NAME_MAX + 2);
	if (!too_long || inspect_unsupported(client))
		goto done;
	char name[128];
	conf_name(name, sizeof name, "insp-free");
	dlock_lock_info *info = inspect_ok(client, name);
	if (info) {
		CU_ASSERT_EQUAL(info->nholders, 0);
		CU_ASSERT(info->waiters == 0 || info->waiters == -1);
		if (!(inspect_flags(client) & DLOCK_INSPECT_WAITERS))
			CU_ASSERT_EQUAL(info->waiters, -1);
	}
	dlock_lock_info_free(info);

	memset(too_long, 'n', DLOCK_NAME_MAX + 1);
	too_long[DLOCK_NAME_MAX + 1] = '\0';
	dlock_lock_info *out = (dlock_lock_info *)&out;
	CONF_ASSERT_ST(dlock_inspect(NULL, name, &out), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(out);
	ASSERT_REFUSED(client, dlock_inspect(client, NULL, &out), DLOCK_EINVAL);
	ASSERT_REFUSED(client, dlock_inspect(client, name, NULL), DLOCK_EINVAL);
	ASSERT_REFUSED(client, dlock_inspect(client, "", &out), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(out);
	ASSERT_REFUSED(client, dlock_inspect(client, too_long, &out), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(out);
	dlock_lock_info_free(NULL);

	dlock_lock_list *list = (dlock_lock_list *)&list;
	CONF_ASSERT_ST(dlock_list(NULL, "", &list), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(list);
	if (inspect_flags(client) & DLOCK_INSPECT_LIST) {
		ASSERT_REFUSED(client, dlock_list(client, "", NULL), DLOCK_EINVAL);
		ASSERT_REFUSED(client, dlock_list(client, too_long, &list), DLOCK_EINVAL);
		CU_ASSERT_PTR_NULL(list);
	}
	dlock_lock_list_free(NULL);

	size_t broken = 7;
	CONF_ASSERT_ST(dlock_break(NULL, name, &broken), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(broken, 0);
	/* Bad input is refused as such, also where breaking is not possible. */
	ASSERT_REFUSED(client, dlock_break(client, NULL, &broken), DLOCK_EINVAL);
	ASSERT_REFUSED(client, dlock_break(client, "", &broken), DLOCK_EINVAL);
	ASSERT_REFUSED(client, dlock_break(client, too_long, &broken), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(broken, 0);
done:
	free(too_long);
	conf_close(client);
}

/* A name of DLOCK_NAME_MAX bytes, every byte 0x01..0xff among them, held elsewhere: inspected right. */
static void test_inspect_hostile_name(void)
{
	dlock_client *client = conf_open(), *holder = conf_open();
	char *name = malloc(DLOCK_NAME_MAX + 1);
	dlock_lock *lock = NULL;
	if (!name || !holder || inspect_unsupported(client))
		goto done;
	static const char odd[] = "\"'%/*{}\\?#&=;: \x7f";
	int used = 0;
	conf_name(name, 64, "insp-odd-");
	used = (int)strlen(name);
	for (int b = 1; b <= 0xff && used < DLOCK_NAME_MAX; b++)
		name[used++] = (char)b;
	for (size_t i = 0; used < DLOCK_NAME_MAX; i++)
		name[used++] = odd[i % (sizeof odd - 1)];
	name[DLOCK_NAME_MAX] = '\0';
	lock = conf_lock(holder, name);
	if (!lock)
		goto done;
	int64_t before = wall_ms();
	CONF_ASSERT_ST(hold(lock, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK);
	dlock_lock_info *info = inspect_ok(client, name);
	if (holders_are(info, 1))
		check_holder(info->holders[0], inspect_flags(client), NULL, lock, before, INSP_LEASE_MS,
		             DLOCK_MODE_EXCLUSIVE);
	dlock_lock_info_free(info);
	/* The same name but its last byte: another resource, free. */
	name[DLOCK_NAME_MAX - 1] = name[DLOCK_NAME_MAX - 1] == 'x' ? 'y' : 'x';
	assert_no_holder(client, name);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
done:
	dlock_lock_free(lock);
	free(name);
	conf_close(holder);
	conf_close(client);
}

/* A holder opened with a hostile identity in its URI is shown as it is, and gone once released. */
static void test_inspect_holder(void)
{
	dlock_client *client = conf_open(), *holder = open_as(hostile_identity);
	dlock_lock *lock = NULL;
	if (!holder || inspect_unsupported(client))
		goto done;
	int64_t flags = inspect_flags(client);
	char name[128];
	conf_name(name, sizeof name, "insp-holder");
	lock = conf_lock(holder, name);
	int64_t before = wall_ms();
	if (!lock || !CONF_ASSERT_ST(hold(lock, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK))
		goto done;
	/* From another client, and from the holder's own. */
	dlock_client *views[2] = { client, holder };
	for (int v = 0; v < 2; v++) {
		dlock_lock_info *info = inspect_ok(views[v], name);
		if (!info)
			continue;
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_MUTEX);
		CU_ASSERT(info->permits == 1 || info->permits == 0);
		CU_ASSERT(info->resource && info->resource[0] != '\0');
		if (holders_are(info, 1)) {
			check_holder(info->holders[0], flags, hostile_identity, lock, before, INSP_LEASE_MS,
			             DLOCK_MODE_EXCLUSIVE);
			CU_ASSERT_EQUAL(info->holders[0]->slot, -1);
		}
		dlock_lock_info_free(info);
	}
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	assert_no_holder(client, name);
done:
	dlock_lock_free(lock);
	conf_close(holder);
	conf_close(client);
}

/* Without an identity a client is "HOST:PID". */
static void test_inspect_default_identity(void)
{
	dlock_client *client = conf_open(), *holder = conf_open();
	dlock_lock *lock = NULL;
	if (!holder || inspect_unsupported(client) ||
	    lacks(client, DLOCK_INSPECT_OWNER, "holders' identities are not seen on this backend"))
		goto done;
	char name[128], suffix[32];
	conf_name(name, sizeof name, "insp-default-id");
	snprintf(suffix, sizeof suffix, ":%ld", (long)getpid());
	lock = conf_lock(holder, name);
	if (!lock || !CONF_ASSERT_ST(hold(lock, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK))
		goto done;
	dlock_lock_info *info = inspect_ok(client, name);
	if (info && info->nholders == 1) {
		const dlock_holder *h = info->holders[0];
		size_t n = strlen(h->identity), s = strlen(suffix);
		CU_ASSERT(n > s && strcmp(h->identity + n - s, suffix) == 0);
		CU_ASSERT(strncmp(h->identity, h->host, n - s) == 0);
	} else {
		CU_FAIL("the holder is not shown");
	}
	dlock_lock_info_free(info);
	CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
done:
	dlock_lock_free(lock);
	conf_close(holder);
	conf_close(client);
}

/* Three readers: three shared holders; then a writer: one exclusive holder. */
static void test_inspect_rwlock(void)
{
	enum { READERS = 3 };
	dlock_client *client = conf_open(), *c[READERS] = { NULL };
	dlock_lock *l[READERS] = { NULL };
	char name[128], id[READERS][32];
	conf_name(name, sizeof name, "insp-rw");
	if (inspect_unsupported(client))
		goto done;
	if (feature_of(client, DLOCK_FEATURE_RWLOCK) == DLOCK_RWLOCK_NONE) {
		dlock_test_skip_part("no read-write locks on this backend");
		goto done;
	}
	int64_t flags = inspect_flags(client);
	int64_t before = wall_ms();
	for (int i = 0; i < READERS; i++) {
		snprintf(id[i], sizeof id[i], "reader-%d", i);
		c[i] = open_as(id[i]);
		if (!c[i] || !CONF_ASSERT_ST(dlock_rwlock_new(c[i], name, &l[i]), DLOCK_OK))
			goto done;
		CONF_ASSERT_ST(hold(l[i], INSP_LEASE_MS, DLOCK_MODE_SHARED), DLOCK_OK);
	}
	dlock_lock_info *info = inspect_ok(client, name);
	if (info) {
		CU_ASSERT_EQUAL(info->nholders, READERS);
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
		for (size_t i = 0; i < info->nholders; i++)
			CU_ASSERT_EQUAL(info->holders[i]->mode, DLOCK_MODE_SHARED);
		for (int i = 0; (flags & DLOCK_INSPECT_OWNER) && i < READERS; i++) {
			const dlock_holder *h = holder_of(info, id[i]);
			CU_ASSERT_PTR_NOT_NULL(h);
			if (h)
				check_holder(h, flags, id[i], l[i], before, INSP_LEASE_MS, DLOCK_MODE_SHARED);
		}
	}
	dlock_lock_info_free(info);
	for (int i = 0; i < READERS; i++)
		CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
	before = wall_ms();
	CONF_ASSERT_ST(hold(l[0], INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK);
	info = inspect_ok(client, name);
	if (holders_are(info, 1)) {
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
		check_holder(info->holders[0], flags, id[0], l[0], before, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE);
	}
	dlock_lock_info_free(info);
	CONF_ASSERT_ST(dlock_release(l[0]), DLOCK_OK);
done:
	for (int i = 0; i < READERS; i++) {
		dlock_lock_free(l[i]);
		conf_close(c[i]);
	}
	conf_close(client);
}

/* A semaphore of 3 with 2 permits held: two holders, permits 3, distinct slots. */
static void test_inspect_semaphore(void)
{
	enum { N = 3, HELD = 2 };
	dlock_client *client = conf_open(), *c[HELD] = { NULL };
	dlock_lock *l[HELD] = { NULL };
	char name[128], id[HELD][32];
	conf_name(name, sizeof name, "insp-sem");
	if (inspect_unsupported(client))
		goto done;
	if (feature_of(client, DLOCK_FEATURE_SEMAPHORE) == DLOCK_SEMAPHORE_NONE) {
		dlock_test_skip_part("no semaphores on this backend");
		goto done;
	}
	int64_t flags = inspect_flags(client);
	int slots_known = feature_of(client, DLOCK_FEATURE_PERMIT_FENCING) != DLOCK_FENCING_NONE;
	int64_t before = wall_ms();
	for (int i = 0; i < HELD; i++) {
		snprintf(id[i], sizeof id[i], "permit-%d", i);
		c[i] = open_as(id[i]);
		if (!c[i] || !CONF_ASSERT_ST(dlock_semaphore_new(c[i], name, N, &l[i]), DLOCK_OK))
			goto done;
		CONF_ASSERT_ST(hold(l[i], INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK);
	}
	dlock_lock_info *info = inspect_ok(client, name);
	if (info) {
		CU_ASSERT_EQUAL(info->nholders, HELD);
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_SEMAPHORE);
		CU_ASSERT(info->permits == N || info->permits == 0);
		if (info->nholders == HELD && slots_known) {
			CU_ASSERT(info->holders[0]->slot >= 0 && info->holders[0]->slot < N);
			CU_ASSERT(info->holders[1]->slot >= 0 && info->holders[1]->slot < N);
			CU_ASSERT_NOT_EQUAL(info->holders[0]->slot, info->holders[1]->slot);
		}
		for (int i = 0; (flags & DLOCK_INSPECT_OWNER) && i < HELD; i++) {
			const dlock_holder *h = holder_of(info, id[i]);
			CU_ASSERT_PTR_NOT_NULL(h);
			if (!h)
				continue;
			check_holder(h, flags, id[i], l[i], before, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE);
			uint32_t slot = 0;
			if (slots_known && dlock_lock_permit_slot(l[i], &slot) == DLOCK_OK)
				CU_ASSERT_EQUAL(h->slot, (int64_t)slot);
		}
	}
	dlock_lock_info_free(info);
	for (int i = 0; i < HELD; i++)
		CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
	assert_no_holder(client, name);
done:
	for (int i = 0; i < HELD; i++) {
		dlock_lock_free(l[i]);
		conf_close(c[i]);
	}
	conf_close(client);
}

typedef struct waiters_seen {
	dlock_client *client;
	const char *name;
} waiters_seen;

static int waiters_counted(void *arg)
{
	waiters_seen *s = arg;
	dlock_lock_info *info = NULL;
	int yes = dlock_inspect(s->client, s->name, &info) == DLOCK_OK && info->waiters >= 1;
	dlock_lock_info_free(info);
	return yes;
}

/* ------------------------------------------------------- the kind a name is in use as */

/*
 * Each way of holding a name, and the kind inspection must name for it:
 * the kind the name is in use as (an acquisition of another kind is
 * refused, or waits), whatever the server keeps.  A writer is a holder of
 * a read-write lock, not a mutex, also when it took the read level on its
 * handle too (as Redisson's RedissonReadWriteLockTest testReadLockIsLocked
 * and testWriteReadReentrancy do).  Each case again with a waiter blocked
 * beside the holders: the kind stays, and a backend that counts waiters
 * never says 0 while one waits.
 */
typedef struct kind_case {
	const char *tag;
	dlock_lock_kind kind;        /* the handles' kind */
	uint32_t permits;            /* a semaphore's N */
	int holders;                 /* handles holding, each in a client of its own */
	dlock_lock_mode mode;        /* how each holds */
	int read_level;              /* the one writer also takes the read level on its handle */
	dlock_lock_mode waiter_mode; /* how the waiter asks (a handle of the same kind) */
} kind_case;

enum { KIND_HOLDERS_MAX = 3 };

static const kind_case kind_cases[] = {
	{ "mutex", DLOCK_KIND_MUTEX, 1, 1, DLOCK_MODE_EXCLUSIVE, 0, DLOCK_MODE_EXCLUSIVE },
	{ "writer", DLOCK_KIND_RWLOCK, 1, 1, DLOCK_MODE_EXCLUSIVE, 0, DLOCK_MODE_EXCLUSIVE },
	{ "writer+read", DLOCK_KIND_RWLOCK, 1, 1, DLOCK_MODE_EXCLUSIVE, 1, DLOCK_MODE_SHARED },
	{ "reader", DLOCK_KIND_RWLOCK, 1, 1, DLOCK_MODE_SHARED, 0, DLOCK_MODE_EXCLUSIVE },
	{ "readers", DLOCK_KIND_RWLOCK, 1, 3, DLOCK_MODE_SHARED, 0, DLOCK_MODE_EXCLUSIVE },
	{ "permit", DLOCK_KIND_SEMAPHORE, 3, 1, DLOCK_MODE_EXCLUSIVE, 0, DLOCK_MODE_EXCLUSIVE },
	{ "permits", DLOCK_KIND_SEMAPHORE, 2, 2, DLOCK_MODE_EXCLUSIVE, 0, DLOCK_MODE_EXCLUSIVE },
};

static const char *kind_word(dlock_lock_kind k)
{
	return k == DLOCK_KIND_RWLOCK ? "rwlock" : k == DLOCK_KIND_SEMAPHORE ? "semaphore" : "mutex";
}

/* A handle of the case's kind on `client`. */
static dlock_lock *kind_lock(dlock_client *client, const char *name, const kind_case *k)
{
	dlock_lock *lock = NULL;
	dlock_status st = !client                          ? DLOCK_EINVAL
	                  : k->kind == DLOCK_KIND_RWLOCK    ? dlock_rwlock_new(client, name, &lock)
	                  : k->kind == DLOCK_KIND_SEMAPHORE ? dlock_semaphore_new(client, name, k->permits, &lock)
	                                                    : dlock_lock_new(client, name, &lock);
	if (client)
		CONF_ASSERT_ST(st, DLOCK_OK);
	return lock;
}

/* Inspected from `viewer`: the case's kind, its holders in its mode; `when` says at which step. */
static void check_kind(dlock_client *viewer, const char *name, const kind_case *k, int holders, const char *when)
{
	dlock_lock_info *info = inspect_ok(viewer, name);
	if (!info)
		return;
	if (info->kind != k->kind)
		printf("\n    %s (%s): inspection says %s, the name is in use as a %s", k->tag, when,
		       kind_word(info->kind), kind_word(k->kind));
	CU_ASSERT_EQUAL(info->kind, k->kind);
	CU_ASSERT_EQUAL(info->nholders, (size_t)holders);
	for (size_t i = 0; i < info->nholders; i++)
		CU_ASSERT_EQUAL(info->holders[i]->mode, k->mode);
	uint32_t permits = k->kind == DLOCK_KIND_SEMAPHORE ? k->permits : 1;
	CU_ASSERT(info->permits == permits || info->permits == 0);
	dlock_lock_info_free(info);
}

static int waiter_not_hidden(void *arg)
{
	waiters_seen *s = arg;
	dlock_lock_info *info = NULL;
	int yes = dlock_inspect(s->client, s->name, &info) == DLOCK_OK && info->waiters != 0;
	dlock_lock_info_free(info);
	return yes;
}

/*
 * Another handle of the case's kind (`wl`, in client `wc`) beside the
 * holders `l`: one more permit where a semaphore has room, else a waiter
 * blocked until the holders let go, inspected meanwhile.  Releases the
 * holders.
 */
static void kind_beside(dlock_client *viewer, const char *name, const kind_case *k, dlock_lock *const *l,
                        dlock_client *wc, dlock_lock *wl)
{
	int waits = !(k->kind == DLOCK_KIND_SEMAPHORE && k->holders < (int)k->permits);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.mode = k->waiter_mode;
	conf_waiter w;
	if (!waits) {
		CONF_ASSERT_ST(dlock_acquire(wl, &o), DLOCK_OK);
		check_kind(viewer, name, k, k->holders + 1, "one more permit");
		CONF_ASSERT_ST(dlock_release(wl), DLOCK_OK);
	} else {
		CONF_ASSERT_ST(dlock_acquire(wl, &o), DLOCK_EBUSY);
		uint64_t base = conf_stats(wc).server_acquires;
		conf_waiter_start(&w, wl, CONF_LONG_WAIT_MS, 1, NULL);
		conf_waiter_await_blocked(&w, wc, base);
		check_kind(viewer, name, k, k->holders, "with a waiter");
		if (inspect_flags(viewer) & DLOCK_INSPECT_WAITERS) {
			waiters_seen seen = { viewer, name };
			CU_ASSERT(dlock_test_await(waiter_not_hidden, &seen, CONF_AWAIT_MS));
		}
	}
	for (int i = 0; i < k->holders; i++)
		CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
	if (waits) {
		CONF_ASSERT_ST(conf_waiter_join(&w, CONF_LONG_WAIT_MS), DLOCK_OK);
		CONF_ASSERT_ST(w.release_status, DLOCK_OK);
	}
}

/* One case: held, inspected, (the read level taken and let go, inspected,) another beside, released. */
static void kind_case_run(dlock_client *viewer, const kind_case *k)
{
	dlock_client *c[KIND_HOLDERS_MAX] = { NULL }, *wc = NULL;
	dlock_lock *l[KIND_HOLDERS_MAX] = { NULL }, *wl = NULL;
	char name[128];
	conf_name(name, sizeof name, "insp-kind");
	for (int i = 0; i < k->holders; i++) {
		c[i] = conf_open();
		l[i] = kind_lock(c[i], name, k);
		if (!l[i] || !CONF_ASSERT_ST(hold(l[i], INSP_LEASE_MS, k->mode), DLOCK_OK))
			goto done;
	}
	check_kind(viewer, name, k, k->holders, "held");
	if (k->read_level) {
		/* The writer takes the read level too: still one holder, the writer; then it lets that level go. */
		if (!CONF_ASSERT_ST(hold(l[0], INSP_LEASE_MS, DLOCK_MODE_SHARED), DLOCK_OK))
			goto done;
		check_kind(viewer, name, k, 1, "writer with the read level");
		CONF_ASSERT_ST(dlock_release(l[0]), DLOCK_OK);
		check_kind(viewer, name, k, 1, "the read level let go");
	}
	wc = conf_open();
	wl = kind_lock(wc, name, k);
	if (wl)
		kind_beside(viewer, name, k, l, wc, wl);
	else
		for (int i = 0; i < k->holders; i++)
			CONF_ASSERT_ST(dlock_release(l[i]), DLOCK_OK);
	assert_no_holder(viewer, name);
done:
	dlock_lock_free(wl);
	conf_close(wc);
	for (int i = 0; i < KIND_HOLDERS_MAX; i++) {
		dlock_lock_free(l[i]);
		conf_close(c[i]);
	}
}

/* Every case of kind_cases the backend has the kind for, and a leader of an election: a mutex. */
static void test_inspect_kind(void)
{
	dlock_client *viewer = conf_open();
	if (inspect_unsupported(viewer))
		goto done;
	int rw = feature_of(viewer, DLOCK_FEATURE_RWLOCK) != DLOCK_RWLOCK_NONE;
	int sem = feature_of(viewer, DLOCK_FEATURE_SEMAPHORE) != DLOCK_SEMAPHORE_NONE;
	for (size_t i = 0; i < sizeof kind_cases / sizeof kind_cases[0]; i++) {
		const kind_case *k = &kind_cases[i];
		if ((k->kind == DLOCK_KIND_RWLOCK && !rw) || (k->kind == DLOCK_KIND_SEMAPHORE && !sem)) {
			char why[96];
			snprintf(why, sizeof why, "%s: no %s on this backend", k->tag, kind_word(k->kind));
			dlock_test_skip_part(why);
			continue;
		}
		kind_case_run(viewer, k);
	}
	if (feature_of(viewer, DLOCK_FEATURE_ELECTION) < 0) {
		dlock_test_skip_part("leader: no elections on this backend");
		goto done;
	}
	dlock_client *cand = conf_open();
	dlock_election *e = NULL;
	char name[128];
	conf_name(name, sizeof name, "insp-kind-leader");
	if (cand && CONF_ASSERT_ST(dlock_election_new(cand, name, &e), DLOCK_OK)) {
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = CONF_AWAIT_MS;
		o.lease_ms = INSP_LEASE_MS;
		if (CONF_ASSERT_ST(dlock_campaign(e, "leader-value", &o, NULL), DLOCK_OK)) {
			check_kind(viewer, name, &kind_cases[0], 1, "leader");
			CONF_ASSERT_ST(dlock_resign(e), DLOCK_OK);
		}
	}
	dlock_election_free(e);
	conf_close(cand);
done:
	conf_close(viewer);
}

/* A waiter blocked in another client is counted where the backend can know. */
static void test_inspect_waiters(void)
{
	dlock_client *client = conf_open(), *holder = conf_open(), *other = conf_open();
	dlock_lock *lh = NULL, *lw = NULL;
	char name[128];
	conf_name(name, sizeof name, "insp-waiters");
	if (!holder || !other || inspect_unsupported(client))
		goto done;
	int known = (inspect_flags(client) & DLOCK_INSPECT_WAITERS) != 0;
	lh = conf_lock(holder, name);
	lw = conf_lock(other, name);
	if (!lh || !lw || !CONF_ASSERT_ST(hold(lh, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK))
		goto done;
	uint64_t base = conf_stats(other).server_acquires;
	conf_waiter w;
	conf_waiter_start(&w, lw, CONF_LONG_WAIT_MS, 1, NULL);
	conf_waiter_await_blocked(&w, other, base);
	if (known) {
		waiters_seen seen = { client, name };
		CU_ASSERT(dlock_test_await(waiters_counted, &seen, CONF_AWAIT_MS));
	} else {
		dlock_lock_info *info = inspect_ok(client, name);
		if (info)
			CU_ASSERT_EQUAL(info->waiters, -1);
		dlock_lock_info_free(info);
		dlock_test_skip_part("waiters are not seen on this backend (DLOCK_INSPECT_WAITERS)");
	}
	CONF_ASSERT_ST(dlock_release(lh), DLOCK_OK);
	CONF_ASSERT_ST(conf_waiter_join(&w, CONF_LONG_WAIT_MS), DLOCK_OK);
	CONF_ASSERT_ST(w.release_status, DLOCK_OK);
	if (known) {
		dlock_lock_info *info = inspect_ok(client, name);
		if (info) {
			CU_ASSERT_EQUAL(info->nholders, 0);
			CU_ASSERT_EQUAL(info->waiters, 0);
		}
		dlock_lock_info_free(info);
	}
done:
	dlock_lock_free(lh);
	dlock_lock_free(lw);
	conf_close(other);
	conf_close(holder);
	conf_close(client);
}

/* Two names held by two clients under a prefix of this test: exactly those, sorted; a released one
 * and a prefix of nothing: not listed. */
static void test_list(void)
{
	dlock_client *client = conf_open(), *ca = open_as("lister-a"), *cb = open_as("lister-b");
	dlock_lock *la = NULL, *lb = NULL, *lc = NULL;
	dlock_lock_list *list = NULL;
	char prefix[96], na[128], nb[128], nc[128], none[128];
	conf_name(prefix, sizeof prefix, "insp-list/");
	snprintf(na, sizeof na, "%sa", prefix);
	snprintf(nb, sizeof nb, "%sb \"x\"", prefix);
	snprintf(nc, sizeof nc, "%sc", prefix);
	snprintf(none, sizeof none, "%sz", prefix);
	if (!ca || !cb || inspect_unsupported(client) ||
	    lacks(client, DLOCK_INSPECT_LIST, "no listing on this backend (DLOCK_INSPECT_LIST)"))
		goto done;
	int64_t flags = inspect_flags(client);
	la = conf_lock(ca, na);
	lb = conf_lock(cb, nb);
	lc = conf_lock(cb, nc);
	if (!la || !lb || !lc)
		goto done;
	int64_t before = wall_ms();
	CONF_ASSERT_ST(hold(la, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK);
	CONF_ASSERT_ST(hold(lb, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK);
	CONF_ASSERT_ST(hold(lc, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(lc), DLOCK_OK);
	if (!(flags & DLOCK_INSPECT_NAMES)) {
		/* Names not kept: at least ours among all. */
		if (CONF_ASSERT_ST(dlock_list(client, NULL, &list), DLOCK_OK))
			CU_ASSERT(list->count >= 2);
		dlock_test_skip_part("listing gives no names on this backend (DLOCK_INSPECT_NAMES)");
		goto release;
	}
	if (!CONF_ASSERT_ST(dlock_list(client, prefix, &list), DLOCK_OK))
		goto release;
	CU_ASSERT_EQUAL_FATAL(list->count, 2);
	const char *names[2] = { na, nb }, *ids[2] = { "lister-a", "lister-b" };
	dlock_lock *locks[2] = { la, lb };
	for (size_t i = 0; i < 2; i++) {
		const dlock_lock_info *it = list->items[i];
		CU_ASSERT(it->name && strcmp(it->name, names[i]) == 0);
		CU_ASSERT_PTR_NOT_NULL(it->resource);
		if (holders_are(it, 1))
			check_holder(it->holders[0], flags, ids[i], locks[i], before, INSP_LEASE_MS,
			             DLOCK_MODE_EXCLUSIVE);
	}
	dlock_lock_list_free(list);
	list = NULL;
	/* All names: ours among them. */
	if (CONF_ASSERT_ST(dlock_list(client, "", &list), DLOCK_OK)) {
		size_t ours = 0;
		for (size_t i = 0; i < list->count; i++)
			ours += list->items[i]->name && strncmp(list->items[i]->name, prefix, strlen(prefix)) == 0;
		CU_ASSERT_EQUAL(ours, 2);
	}
	dlock_lock_list_free(list);
	list = NULL;
	if (CONF_ASSERT_ST(dlock_list(client, none, &list), DLOCK_OK))
		CU_ASSERT_EQUAL(list->count, 0);
release:
	CONF_ASSERT_ST(dlock_release(la), DLOCK_OK);
	CONF_ASSERT_ST(dlock_release(lb), DLOCK_OK);
done:
	dlock_lock_list_free(list);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_lock_free(lc);
	conf_close(cb);
	conf_close(ca);
	conf_close(client);
}

/*
 * Break: a holder in client A with a lost-lock callback; B breaks the name;
 * A's callback runs within a renewal period (plus slack), the waiter in C
 * gets the name with a larger token, A's release then says ENOTHELD and
 * leaves C's hold alone.  Breaking C's hold with nobody waiting frees the
 * name; a free name breaks to 0.
 */
static void test_break(void)
{
	dlock_client *a = open_as("breaker-victim"), *b = conf_open(), *c = open_as("breaker-next");
	dlock_lock *la = NULL, *lc = NULL, *lb = NULL;
	char name[128], free_name[128];
	conf_name(name, sizeof name, "insp-break");
	conf_name(free_name, sizeof free_name, "insp-break-free");
	if (!a || !c || inspect_unsupported(b))
		goto done;
	int64_t effect = feature_of(b, DLOCK_FEATURE_BREAK);
	if (effect == DLOCK_BREAK_NONE) {
		size_t broken = 7;
		ASSERT_REFUSED(b, dlock_break(b, name, &broken), DLOCK_ENOTSUP);
		CU_ASSERT_EQUAL(broken, 0);
		dlock_test_skip_part("no breaking on this backend (DLOCK_FEATURE_BREAK is none: DLOCK_ENOTSUP)");
		goto done;
	}
	int fenced = conf_caps()->fencing != DLOCK_FENCING_NONE;
	la = conf_lock(a, name);
	lc = conf_lock(c, name);
	lb = conf_lock(b, name);
	dlock_test_lost lost = { 0 };
	if (!la || !lc || !lb ||
	    !CONF_ASSERT_ST(dlock_test_acquire(la, 0, INSP_BREAK_LEASE_MS, 1, dlock_test_on_lost, &lost), DLOCK_OK))
		goto done;
	uint64_t token_a = fenced ? dlock_test_token(la) : 0;
	uint64_t base = conf_stats(c).server_acquires;
	conf_waiter w;
	conf_waiter_start(&w, lc, CONF_LONG_WAIT_MS, 0, NULL);
	conf_waiter_await_blocked(&w, c, base);

	size_t broken = 0;
	int64_t t0 = dlock_test_now_ms();
	CONF_ASSERT_ST(dlock_break(b, name, &broken), DLOCK_OK);
	CU_ASSERT(broken >= 1);
	int64_t bound = INSP_BREAK_LEASE_MS / 3 + 2 * CONF_SLACK_MS;
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, bound));
	printf("\n    lost-lock callback after %lld ms (bound %lld)", (long long)(dlock_test_now_ms() - t0),
	       (long long)bound);
	if (atomic_load(&lost.count) > 0)
		CU_ASSERT_EQUAL(atomic_load(&lost.reason),
		                effect == DLOCK_BREAK_DELETE ? DLOCK_LOST_TAKEN : DLOCK_LOST_SESSION);
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	if (!CONF_ASSERT_ST(conf_waiter_join(&w, CONF_LONG_WAIT_MS), DLOCK_OK))
		goto done;
	if (fenced)
		CU_ASSERT(dlock_test_token(lc) > token_a);
	/* The old holder's release is refused and leaves the new holder's lock alone. */
	CONF_ASSERT_ST(dlock_release(la), DLOCK_ENOTHELD);
	CONF_ASSERT_ST(dlock_check(lc), DLOCK_OK);
	dlock_lock_info *info = inspect_ok(b, name);
	if (holders_are(info, 1) &&
	    (inspect_flags(b) & DLOCK_INSPECT_OWNER))
		CU_ASSERT_STRING_EQUAL(info->holders[0]->identity, "breaker-next");
	dlock_lock_info_free(info);

	/* Nobody waits: after the break the name is free, and taken at once with a larger token. */
	uint64_t token_c = fenced ? dlock_test_token(lc) : 0;
	CONF_ASSERT_ST(dlock_break(b, name, &broken), DLOCK_OK);
	CU_ASSERT(broken >= 1);
	assert_no_holder(b, name);
	if (CONF_ASSERT_ST(conf_acquire(lb, 0), DLOCK_OK)) {
		if (fenced)
			CU_ASSERT(dlock_test_token(lb) > token_c);
		CONF_ASSERT_ST(dlock_release(lb), DLOCK_OK);
	}
	dlock_release(lc); /* lost: ENOTHELD, or OK if it was not reported yet */

	broken = 7;
	CONF_ASSERT_ST(dlock_break(b, free_name, &broken), DLOCK_OK);
	CU_ASSERT_EQUAL(broken, 0);
	CONF_ASSERT_ST(dlock_break(b, free_name, NULL), DLOCK_OK);
done:
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_lock_free(lc);
	conf_close(c);
	conf_close(b);
	conf_close(a);
}

static dlock_status open_with(dlock_client **out, const char *uri, unsigned version, const char *identity)
{
	dlock_client_options o = DLOCK_CLIENT_OPTIONS_INIT;
	o.version = version;
	o.identity = identity;
	char err[512] = "";
	dlock_status st = dlock_client_open(out, uri, &o, err, sizeof err);
	if (st != DLOCK_OK)
		CU_ASSERT(err[0] != '\0');
	return st;
}

/* The identity of a holder opened with `version`/`identity` options on `uri`. */
static void check_identity_shown(dlock_client *viewer, const char *uri, unsigned version, const char *identity,
                                 const char *want)
{
	dlock_client *holder = NULL;
	if (!CONF_ASSERT_ST(open_with(&holder, uri, version, identity), DLOCK_OK))
		return;
	char name[128];
	conf_name(name, sizeof name, "insp-identity");
	dlock_lock *lock = conf_lock(holder, name);
	if (lock && CONF_ASSERT_ST(hold(lock, INSP_LEASE_MS, DLOCK_MODE_EXCLUSIVE), DLOCK_OK)) {
		dlock_lock_info *info = inspect_ok(viewer, name);
		if (holders_are(info, 1) && strcmp(info->holders[0]->identity, want) != 0) {
			/* A backend that keeps fewer bytes cuts a long identity: its first bytes, '+', a hash. */
			const char *shown = info->holders[0]->identity;
			size_t n = strlen(shown);
			CU_ASSERT(strlen(want) > 40 && n >= 40 && n < strlen(want));
			CU_ASSERT(n > 9 && shown[n - 9] == '+' && strncmp(shown, want, n - 9) == 0);
		}
		dlock_lock_info_free(info);
		CONF_ASSERT_ST(dlock_release(lock), DLOCK_OK);
	}
	dlock_lock_free(lock);
	conf_close(holder);
}

/* The option wins over the URI; version 1 options ignore it; bad identities are refused. */
static void test_identity_option(void)
{
	char uri[INSP_URI_MAX], bad[INSP_URI_MAX], long_id[DLOCK_IDENTITY_MAX + 2], max_id[DLOCK_IDENTITY_MAX + 1];
	memset(long_id, 'i', sizeof long_id - 1);
	long_id[sizeof long_id - 1] = '\0';
	memset(max_id, 'i', sizeof max_id - 1);
	max_id[sizeof max_id - 1] = '\0';
	uri_with(uri, sizeof uri, "identity=from-uri");
	dlock_client *c = NULL;
	CONF_ASSERT_ST(open_with(&c, uri, DLOCK_CLIENT_OPTIONS_VERSION, "a\x01" "b"), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(c);
	CONF_ASSERT_ST(open_with(&c, uri, DLOCK_CLIENT_OPTIONS_VERSION, "a\nb"), DLOCK_EINVAL);
	CONF_ASSERT_ST(open_with(&c, uri, DLOCK_CLIENT_OPTIONS_VERSION, long_id), DLOCK_EINVAL);
	CONF_ASSERT_ST(open_with(&c, uri, DLOCK_CLIENT_OPTIONS_VERSION, ""), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(c);
	const char *bad_params[] = { "identity=a%01b", "identity=", "identity=a%0Ab" };
	for (size_t i = 0; i < sizeof bad_params / sizeof bad_params[0]; i++) {
		uri_with(bad, sizeof bad, bad_params[i]);
		CONF_ASSERT_ST(open_with(&c, bad, DLOCK_CLIENT_OPTIONS_VERSION, NULL), DLOCK_EURI);
		CU_ASSERT_PTR_NULL(c);
	}
	char param[sizeof long_id + 16];
	snprintf(param, sizeof param, "identity=%s", long_id);
	uri_with(bad, sizeof bad, param);
	CONF_ASSERT_ST(open_with(&c, bad, DLOCK_CLIENT_OPTIONS_VERSION, NULL), DLOCK_EURI);
	CU_ASSERT_PTR_NULL(c);

	dlock_client *viewer = conf_open();
	if (inspect_unsupported(viewer)) {
		/* The identities are still accepted. */
		if (CONF_ASSERT_ST(open_with(&c, uri, DLOCK_CLIENT_OPTIONS_VERSION, max_id), DLOCK_OK))
			conf_close(c);
		goto done;
	}
	if (lacks(viewer, DLOCK_INSPECT_OWNER, "holders' identities are not seen on this backend"))
		goto done;
	check_identity_shown(viewer, uri, DLOCK_CLIENT_OPTIONS_VERSION, "from-options", "from-options");
	check_identity_shown(viewer, uri, DLOCK_CLIENT_OPTIONS_VERSION, NULL, "from-uri");
	check_identity_shown(viewer, uri, DLOCK_CLIENT_OPTIONS_VERSION, max_id, max_id);
	check_identity_shown(viewer, uri, DLOCK_CLIENT_OPTIONS_VERSION, "\xc3\xa9t\xc3\xa9 \"x\" %zz",
	                     "\xc3\xa9t\xc3\xa9 \"x\" %zz");
	/* Version 1 options have no identity: whatever the field holds, the URI's is used. */
	check_identity_shown(viewer, uri, 1, "a\x01" "ignored", "from-uri");
done:
	conf_close(viewer);
}

const conf_test conf_inspect_tests[] = {
	{ "inspect_features", test_inspect_features },
	{ "inspect_free_and_bad_input", test_inspect_free_and_bad_input },
	{ "inspect_hostile_name", test_inspect_hostile_name },
	{ "inspect_holder", test_inspect_holder },
	{ "inspect_default_identity", test_inspect_default_identity },
	{ "inspect_rwlock", test_inspect_rwlock },
	{ "inspect_semaphore", test_inspect_semaphore },
	{ "inspect_waiters", test_inspect_waiters },
	{ "inspect_kind", test_inspect_kind },
	{ "inspect_list", test_list },
	{ "inspect_break", test_break },
	{ "inspect_identity_option", test_identity_option },
	{ NULL, NULL },
};
