/* Helpers of the fault and load tests (see faults.h). */
#include "faults.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testsupport.h"

dlock_client *ft_open(const char *uri)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	return c;
}

dlock_lock *ft_lock(dlock_client *c, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(c, name);
	if (c)
		CU_ASSERT_PTR_NOT_NULL(l);
	return l;
}

void ft_name(char *out, size_t len, const char *tag)
{
	static atomic_uint counter;
	snprintf(out, len, "ft-%ld-%u-%s", (long)getpid(), atomic_fetch_add(&counter, 1) + 1, tag);
}

void ft_uri_with(char *out, size_t len, const char *uri, const char *params)
{
	snprintf(out, len, "%s%c%s", uri, strchr(uri, '?') ? '&' : '?', params);
}

void ft_uri_port(char *out, size_t len, const char *uri, int port, int newport)
{
	char from[16];
	int n = snprintf(from, sizeof from, ":%d", port);
	const char *p = strstr(uri, from);
	while (p && p[n] && !strchr("/?,", p[n]))
		p = strstr(p + 1, from);
	if (!p) {
		snprintf(out, len, "%s", uri);
		return;
	}
	snprintf(out, len, "%.*s:%d%s", (int)(p - uri), uri, newport, p + n);
}

faultproxy *ft_proxy_to(int port)
{
	faultproxy *px = faultproxy_start("127.0.0.1", port);
	CU_ASSERT_PTR_NOT_NULL_FATAL(px);
	return px;
}

/* ------------------------------------------------------------ lost callbacks */

void ft_on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	ft_lost *r = userdata;
	(void)lock;
	(void)detail;
	if (atomic_load(&r->calls) == 0) {
		atomic_store(&r->reason, (int)reason);
		atomic_store(&r->at_ms, dlock_test_now_ms());
	}
	atomic_fetch_add(&r->calls, 1);
}

int ft_lost_called(void *arg)
{
	return atomic_load(&((ft_lost *)arg)->calls) > 0;
}

dlock_status ft_acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms, ft_lost *lost)
{
	return dlock_test_acquire(l, wait_ms, lease_ms, -1, lost ? ft_on_lost : NULL, lost);
}

/* ------------------------------------------------------------ exclusion */

void ft_assert_disjoint(const ft_interval *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		for (size_t j = i + 1; j < n; j++) {
			int overlap = v[i].from_ms < v[j].to_ms && v[j].from_ms < v[i].to_ms;
			if (overlap)
				printf("\n    OVERLAP: %s held [%lld, %lld] ms (token %llu), %s held [%lld, %lld] ms (token %llu)",
				       v[i].who, (long long)v[i].from_ms, (long long)v[i].to_ms,
				       (unsigned long long)v[i].token, v[j].who, (long long)v[j].from_ms,
				       (long long)v[j].to_ms, (unsigned long long)v[j].token);
			CU_ASSERT(!overlap);
		}
	}
}

void ft_store_init(ft_store *s)
{
	*s = (ft_store){ .max_token = 0 };
	pthread_mutex_init(&s->mu, NULL);
}

void ft_store_destroy(ft_store *s)
{
	pthread_mutex_destroy(&s->mu);
}

int ft_store_write(ft_store *s, uint64_t token)
{
	pthread_mutex_lock(&s->mu);
	int ok = token >= s->max_token;
	if (ok) {
		s->max_token = token;
		s->accepted++;
	} else {
		s->rejected++;
	}
	pthread_mutex_unlock(&s->mu);
	return ok;
}

/* ------------------------------------------------------------ resources */

long ft_rss_kib(void)
{
	long pages = -1, resident = -1;
	FILE *f = fopen("/proc/self/statm", "re");
	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int ft_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the directory's own descriptor */
}

/* ------------------------------------------------------------ one name, two clients */

void ft_pair_open(ft_pair *p, const char *via_uri, const char *direct_uri, const char *name)
{
	p->via = ft_open(via_uri);
	p->direct = ft_open(direct_uri);
	p->lv = ft_lock(p->via, name);
	p->ld = ft_lock(p->direct, name);
}

void ft_pair_close(ft_pair *p)
{
	dlock_lock_free(p->lv);
	dlock_lock_free(p->ld);
	dlock_client_close(p->via);
	dlock_client_close(p->direct);
	*p = (ft_pair){ NULL, NULL, NULL, NULL };
}

/* ------------------------------------------------------------ a holder gone silent */

void ft_silent_begin(ft_silent *s, faultproxy *px, const char *via_uri, const char *direct_uri, const char *tag,
                     int nlocks, int64_t lease_ms)
{
	char base[64], name[80];
	CU_ASSERT_FATAL(nlocks >= 1 && nlocks <= FT_SILENT_MAX);
	memset(s, 0, sizeof *s);
	s->nlocks = nlocks;
	ft_store_init(&s->store);
	ft_name(base, sizeof base, tag);
	snprintf(name, sizeof name, "%s-0", base);
	ft_pair_open(&s->first, via_uri, direct_uri, name);
	for (int i = 1; i < nlocks; i++) {
		snprintf(name, sizeof name, "%s-%d", base, i);
		s->more[i - 1] = ft_lock(s->first.via, name);
	}
	s->from_ms = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(ft_acquire(s->first.lv, 0, lease_ms, &s->lost[0]), DLOCK_OK);
	for (int i = 1; i < nlocks; i++)
		CU_ASSERT_EQUAL_FATAL(ft_acquire(s->more[i - 1], 0, lease_ms, &s->lost[i]), DLOCK_OK);
	s->token = dlock_test_token(s->first.lv);
	CU_ASSERT(ft_store_write(&s->store, s->token));

	dlock_test_waiter w;
	dlock_test_waiter_start(&w, s->first.ld, FT_LONG_WAIT_MS, 0);
	s->cut_ms = dlock_test_now_ms();
	faultproxy_blackhole(px, FP_BOTH);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, FT_AWAIT_MS), DLOCK_OK);
	for (int i = 0; i < nlocks; i++)
		CU_ASSERT(dlock_test_await(ft_lost_called, &s->lost[i], FT_AWAIT_MS));
	s->told_ms = atomic_load(&s->lost[0].at_ms);
	s->next_at_ms = w.at_ms;
	s->next_token = w.token;
	printf("\n    silent from +%lld ms: holder told at +%lld ms, next holder in at +%lld ms (after its acquire)",
	       (long long)(s->cut_ms - s->from_ms), (long long)(s->told_ms - s->from_ms),
	       (long long)(s->next_at_ms - s->from_ms));
	CU_ASSERT(s->next_token > s->token);
	CU_ASSERT(ft_store_write(&s->store, s->next_token));
	CU_ASSERT_FALSE(ft_store_write(&s->store, s->token)); /* the stale writer is refused */
	ft_interval iv[2] = { { "silent holder", s->from_ms, s->told_ms, s->token },
		              { "next holder", s->next_at_ms, dlock_test_now_ms(), s->next_token } };
	ft_assert_disjoint(iv, 2);
	faultproxy_pass(px);
}

void ft_silent_end(ft_silent *s, int reason)
{
	dlock_lock *first = s->first.lv;
	CU_ASSERT_EQUAL(dlock_check(first), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_check(s->first.ld), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(s->first.ld), DLOCK_OK);
	for (int i = 0; i < s->nlocks; i++) {
		CU_ASSERT_EQUAL(dlock_release(i ? s->more[i - 1] : first), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(atomic_load(&s->lost[i].calls), 1); /* once per lost lock */
		if (reason != FT_ANY_REASON)
			CU_ASSERT_EQUAL(atomic_load(&s->lost[i].reason), reason);
	}
	/* The holder's client works on, and its next token is larger still. */
	CU_ASSERT_EQUAL(ft_acquire(first, FT_LONG_WAIT_MS, 0, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_token(first) > s->next_token);
	CU_ASSERT_EQUAL(dlock_release(first), DLOCK_OK);
	for (int i = 1; i < s->nlocks; i++)
		dlock_lock_free(s->more[i - 1]);
	ft_pair_close(&s->first);
	ft_store_destroy(&s->store);
}

/* ------------------------------------------------------------ the same faults on every backend */

/* `uri` moved onto `px`, with `params`. */
static void through(char *out, size_t len, const char *uri, int port, const faultproxy *px, const char *params)
{
	char moved[512];
	ft_uri_port(moved, sizeof moved, uri, port, faultproxy_port(px));
	if (*params)
		ft_uri_with(out, len, moved, params);
	else
		snprintf(out, len, "%s", moved);
}

/* One open that must fail with ECONNECT within `bound_ms`. */
static void open_fails(const char *what, const char *uri, int64_t bound_ms)
{
	char err[512] = "";
	dlock_client *c = NULL;
	int64_t t0 = dlock_test_now_ms();
	dlock_status st = dlock_client_open(&c, uri, NULL, err, sizeof err);
	int64_t dt = dlock_test_now_ms() - t0;
	printf("\n    %s: %s after %lld ms: %s", what, dlock_status_name(st), (long long)dt, err);
	CU_ASSERT_EQUAL(st, DLOCK_ECONNECT);
	CU_ASSERT_PTR_NULL(c);
	CU_ASSERT(dt < bound_ms + FT_SLACK_MS);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "127.0.0.1"));
}

void ft_check_open_server_down(const char *uri, int port, const char *params, int64_t hung_ms, int64_t refused_ms)
{
	char via[1024];
	faultproxy *px = ft_proxy_to(port);
	through(via, sizeof via, uri, port, px, params);
	faultproxy_blackhole(px, FP_BOTH);
	open_fails("hung server", via, hung_ms);
	faultproxy_pass(px);
	CU_ASSERT_EQUAL(faultproxy_refuse(px, 1), 0);
	open_fails("refused", via, refused_ms);
	faultproxy_stop(px);
}

void ft_check_close_releases(const char *uri, int port, const char *params, int64_t lease_ms)
{
	char via[1024], name[64];
	faultproxy *px = ft_proxy_to(port);
	through(via, sizeof via, uri, port, px, params);
	dlock_client *a = ft_open(via), *b = ft_open(uri);
	dlock_lock *la[3], *lb[3];
	ft_lost lost[3] = { 0 };
	faultproxy_latency(px, FP_BOTH, 50);
	for (int i = 0; i < 3; i++) {
		ft_name(name, sizeof name, "closed");
		la[i] = ft_lock(a, name);
		lb[i] = ft_lock(b, name);
		CU_ASSERT_EQUAL(ft_acquire(la[i], 0, lease_ms, &lost[i]), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL(ft_acquire(lb[i], 0, 0, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(lb[i]), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(la[i]), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(atomic_load(&lost[i].calls), 0);
		dlock_lock_free(la[i]);
		dlock_lock_free(lb[i]);
	}
	dlock_client_close(b);
	faultproxy_stop(px);
}
