#include "testsupport.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <ftw.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int dlock_test_main(void (*add_suites)(void))
{
	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	add_suites();
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	unsigned suite_fail = CU_get_number_of_suites_failed();
	CU_cleanup_registry();
	return (failed || suite_fail) ? 1 : 0;
}

char *dlock_test_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof tmpl, "%s/dlock-test-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpl)) {
		perror("mkdtemp");
		abort();
	}
	char *out = malloc(sizeof tmpl);
	if (!out)
		abort();
	snprintf(out, sizeof tmpl, "%s", tmpl);
	return out;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(path);
}

void dlock_test_rmtree(const char *path)
{
	if (path)
		nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int64_t dlock_test_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dlock_test_sleep_ms(int64_t ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int dlock_test_await(int (*cond)(void *arg), void *arg, int64_t timeout_ms)
{
	int64_t end = dlock_test_now_ms() + timeout_ms;
	for (;;) {
		if (cond(arg))
			return 1;
		if (dlock_test_now_ms() >= end)
			return 0;
		dlock_test_sleep_ms(1);
	}
}

void *dlock_test_shared_alloc(size_t size)
{
	void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		abort();
	}
	return mem;
}

void dlock_test_shared_free(void *mem, size_t size)
{
	if (mem)
		munmap(mem, size);
}

/* Replace the value of every query parameter whose name ends in "password" (password=,
 * sentinel_password=) in `out` with "***". */
static void mask_password_params(char *out, size_t outlen)
{
	static const char key[] = "password=";
	char *q = strchr(out, '?');
	for (char *p = q ? strstr(q, key) : NULL; p; p = strstr(p, key)) {
		char *value = p + sizeof key - 1;
		size_t len = strcspn(value, "&#");
		if (len > 0 && (len != 3 || strncmp(value, "***", 3) != 0)) {
			char rest[4096];
			snprintf(rest, sizeof rest, "%s", value + len);
			snprintf(value, outlen - (size_t)(value - out), "***%s", rest);
		}
		p = value;
	}
}

void dlock_test_mask_uri(const char *uri, char *out, size_t outlen)
{
	if (!outlen)
		return;
	snprintf(out, outlen, "%s", uri ? uri : "(null)");
	mask_password_params(out, outlen);
	char *auth = strstr(out, "://");
	if (!auth)
		return;
	auth += 3;
	size_t authlen = strcspn(auth, "/?#");
	char *at = NULL;
	for (char *p = auth; p < auth + authlen; p++)
		if (*p == '@')
			at = p;
	char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (!colon)
		return;
	char rest[4096];
	snprintf(rest, sizeof rest, "%s", at);
	snprintf(colon, outlen - (size_t)(colon - out), ":***%s", rest);
}

dlock_status dlock_test_try_open(dlock_client **c, const char *uri, dlock_log_fn log, void *log_userdata,
                                 char *errbuf, size_t errlen)
{
	dlock_client_options o = DLOCK_CLIENT_OPTIONS_INIT;
	if (log) {
		o.log = log;
		o.log_userdata = log_userdata;
		o.log_level = DLOCK_LOG_DEBUG;
	}
	return dlock_client_open(c, uri, &o, errbuf, errlen);
}

dlock_client *dlock_test_open(const char *uri, dlock_log_fn log, void *log_userdata)
{
	dlock_client *c = NULL;
	char err[512] = "";
	dlock_status st = dlock_test_try_open(&c, uri, log, log_userdata, err, sizeof err);
	if (st != DLOCK_OK) {
		char masked[1024];
		dlock_test_mask_uri(uri, masked, sizeof masked);
		printf("\n    cannot open %s: %s: %s", masked, dlock_status_name(st), err);
		fflush(stdout); /* also from a forked child that leaves with _exit() */
	}
	return c;
}

dlock_lock *dlock_test_new_lock(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	if (!c)
		return NULL;
	dlock_status st = dlock_lock_new(c, name, &l);
	if (st != DLOCK_OK)
		printf("\n    dlock_lock_new: %s: %s", dlock_status_name(st), dlock_client_errmsg(c));
	return l;
}

dlock_status dlock_test_acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms, int renew, dlock_lost_fn fn,
                                void *ud)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.lease_ms = lease_ms;
	o.renewal = dlock_test_switch(renew);
	o.on_lost = fn;
	o.lost_userdata = ud;
	return dlock_acquire(l, &o);
}

int dlock_test_switch(int v)
{
	return v < 0 ? DLOCK_DEFAULT : v == 0 ? DLOCK_OFF : DLOCK_ON;
}

void dlock_test_on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	dlock_test_lost *f = userdata;
	(void)lock;
	printf("\n    lost: %s", detail);
	atomic_store(&f->reason, (int)reason);
	atomic_fetch_add(&f->count, 1);
}

int dlock_test_lost_seen(void *arg)
{
	return atomic_load(&((dlock_test_lost *)arg)->count) > 0;
}

int dlock_test_attempted(void *arg)
{
	const dlock_test_count *n = arg;
	dlock_client_stats st;
	return dlock_client_get_stats(n->client, &st) == DLOCK_OK && st.server_acquires >= n->want;
}

int dlock_test_renewed(void *arg)
{
	const dlock_test_count *n = arg;
	dlock_client_stats st;
	return dlock_client_get_stats(n->client, &st) == DLOCK_OK && st.renewals >= n->want;
}

uint64_t dlock_test_token(dlock_lock *l)
{
	uint64_t t = 0;
	CU_ASSERT_EQUAL(dlock_lock_fencing_token(l, &t), DLOCK_OK);
	return t;
}

dlock_status dlock_test_probe(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	dlock_status st = dlock_lock_new(c, name, &l);
	if (st != DLOCK_OK)
		return st;
	st = dlock_test_acquire(l, 0, 0, -1, NULL, NULL);
	if (st == DLOCK_OK)
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	return st;
}

struct dlock_test_overlap {
	atomic_int inside;
	atomic_uint_least64_t violations;
	volatile uint64_t counter;
};

dlock_test_overlap *dlock_test_overlap_new(void)
{
	return dlock_test_shared_alloc(sizeof(dlock_test_overlap));
}

void dlock_test_overlap_free(dlock_test_overlap *ov)
{
	dlock_test_shared_free(ov, sizeof *ov);
}

uint64_t dlock_test_overlap_enter(dlock_test_overlap *ov)
{
	if (atomic_exchange(&ov->inside, 1) != 0)
		atomic_fetch_add(&ov->violations, 1);
	uint64_t seq = ov->counter;
	/* Give a would-be second holder time to run while the write is pending. */
	sched_yield();
	for (volatile int spin = 0; spin < 200; spin++)
		;
	ov->counter = seq + 1;
	return seq;
}

void dlock_test_overlap_leave(dlock_test_overlap *ov)
{
	atomic_store(&ov->inside, 0);
}

uint64_t dlock_test_overlap_count(const dlock_test_overlap *ov)
{
	return ov->counter;
}

uint64_t dlock_test_overlap_violations(const dlock_test_overlap *ov)
{
	return atomic_load(&((dlock_test_overlap *)ov)->violations);
}

/* ------------------------------------------------------------ a waiting acquire */

static void *waiter_main(void *arg)
{
	dlock_test_waiter *w = arg;
	w->status = dlock_test_acquire(w->lock, w->wait_ms, w->lease_ms, -1, NULL, NULL);
	w->at_ms = dlock_test_now_ms();
	if (w->status == DLOCK_OK)
		dlock_lock_fencing_token(w->lock, &w->token);
	atomic_store(&w->done, 1);
	return NULL;
}

void dlock_test_waiter_start(dlock_test_waiter *w, dlock_lock *lock, int64_t wait_ms, int64_t lease_ms)
{
	*w = (dlock_test_waiter){ .lock = lock, .wait_ms = wait_ms, .lease_ms = lease_ms, .status = DLOCK_EINVAL };
	CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, waiter_main, w) == 0);
}

static int waiter_done(void *arg)
{
	return atomic_load(&((dlock_test_waiter *)arg)->done);
}

dlock_status dlock_test_waiter_join(dlock_test_waiter *w, int64_t timeout_ms)
{
	int done = dlock_test_await(waiter_done, w, timeout_ms);
	CU_ASSERT(done);
	while (!done) { /* a hang is a failure, not a hung test program */
		dlock_cancel(w->lock);
		done = dlock_test_await(waiter_done, w, 100);
	}
	pthread_join(w->thread, NULL);
	return w->status;
}

/* ------------------------------------------------------------ environment */

const char *dlock_test_env(const char *key)
{
	const char *v = getenv(key);
	return v && *v ? v : NULL;
}

int dlock_test_skip(const char *why)
{
	const char *req = getenv("DLOCK_TEST_REQUIRE_ALL");
	printf("SKIPPED: %s\n", why);
	return req && strcmp(req, "1") == 0 ? 1 : DLOCK_TEST_SKIP_STATUS;
}

void dlock_test_skip_part(const char *why)
{
	CU_pSuite suite = CU_get_current_suite();
	CU_pTest test = CU_get_current_test();
	printf("\n    SKIPPED: %s / %s: %s\n    ", suite && suite->pName ? suite->pName : "?",
	       test && test->pName ? test->pName : "?", why);
	fflush(stdout);
}

int dlock_test_run(const char *cmd, char *out, size_t outlen)
{
	FILE *p = popen(cmd, "r");
	CU_ASSERT_FATAL(p != NULL);
	size_t n = fread(out, 1, outlen - 1, p);
	out[n] = '\0';
	char rest[4096];
	while (fread(rest, 1, sizeof rest, p) > 0) /* drain: the command must not block on a full pipe */
		;
	return pclose(p);
}

dlock_lock_info *dlock_test_inspect(dlock_client *c, const char *name)
{
	dlock_lock_info *info = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_inspect(c, name, &info), DLOCK_OK);
	CU_ASSERT_PTR_NOT_NULL_FATAL(info);
	return info;
}
