/*
 * Load on each server backend whose variables are set (DLOCK_TEST_REDIS_URI,
 * DLOCK_TEST_ZK_URI, DLOCK_TEST_PG_URI, from the scripts in ci/servers/):
 *
 *   - 64 clients, each on its own thread, contend for 8 names (8 clients
 *     per name) until at least 10,000 acquisitions are done on every
 *     backend (ZooKeeper, which commits every create and delete through
 *     its log, takes about ten seconds); zero overlapping holders, and each name's
 *     fencing tokens strictly increase in the order the holders entered.
 *   - 64 clients, each on its own thread, take permits of one semaphore
 *     of 3 permits, and then read (nine times in ten) and write one
 *     read-write lock, at least 5,000 acquisitions each on every backend
 *     (2,000 under ASan):
 *     never more than 3 holders at once, never a writer beside anyone (a
 *     sequentially consistent count of who is inside), and the tokens of
 *     each permit's slot strictly increase in entry order.
 *   - one client cycles acquire/release 100,000 times (ZooKeeper 10,000;
 *     a fifth of that under ASan) on 4 threads; resident memory and open descriptors are measured
 *     after a warm-up and at the end, printed, and must stay flat: the
 *     same descriptor count, and less than 2 MiB more memory.  Under ASan
 *     the allocator's quarantine grows the RSS by design: the numbers are
 *     printed, LeakSanitizer checks the memory, the descriptors are still
 *     asserted.
 */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "faults.h"
#include "testsupport.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define CLIENTS 64
#define NAMES 8
#define CYCLE_THREADS 4
#define RSS_TOLERANCE_KIB 2048
#define SAMPLES 10
/* Under ASan, which looks for memory errors rather than races, fewer (and a fifth of the cycles, whose
 * memory it does not measure). */
#define KIND_ACQUISITIONS (UNDER_ASAN ? 2000 : 5000)
#define CYCLES(n) (UNDER_ASAN ? (n) / 5 : (n))
#define PERMITS 3
#define READS_IN_TEN 9

struct backend {
	const char *label, *uri;
	unsigned acquisitions; /* in total, over CLIENTS clients */
	unsigned cycles;       /* for the flat memory and descriptor check */
};

static struct backend backends[3];
static size_t nbackends;
static const struct backend *cur; /* the suite running now */

static int init_backend(const struct backend *b)
{
	cur = b;
	return 0;
}

static int init_0(void) { return init_backend(&backends[0]); }
static int init_1(void) { return init_backend(&backends[1]); }
static int init_2(void) { return init_backend(&backends[2]); }

/* ------------------------------------------------------------ 64 clients */

struct name_log {
	dlock_test_overlap *ov;
	uint64_t *tokens; /* by entry order */
	size_t cap;
};

struct contender {
	const char *uri;
	const char *name;
	struct name_log *log;
	unsigned rounds;
	pthread_barrier_t *start;
	atomic_uint *failures;
};

static void *contender_main(void *arg)
{
	struct contender *c = arg;
	dlock_client *client = NULL;
	dlock_lock *l = NULL;
	char err[512];
	if (dlock_client_open(&client, c->uri, NULL, err, sizeof err) != DLOCK_OK ||
	    dlock_lock_new(client, c->name, &l) != DLOCK_OK) {
		atomic_fetch_add(c->failures, c->rounds);
		pthread_barrier_wait(c->start);
		dlock_client_close(client);
		return NULL;
	}
	pthread_barrier_wait(c->start);
	for (unsigned i = 0; i < c->rounds; i++) {
		uint64_t token = 0;
		if (ft_acquire(l, FT_LONG_WAIT_MS, 0, NULL) != DLOCK_OK) {
			atomic_fetch_add(c->failures, 1);
			continue;
		}
		dlock_lock_fencing_token(l, &token);
		uint64_t seq = dlock_test_overlap_enter(c->log->ov);
		if (seq < c->log->cap)
			c->log->tokens[seq] = token;
		dlock_test_overlap_leave(c->log->ov);
		if (dlock_release(l) != DLOCK_OK)
			atomic_fetch_add(c->failures, 1);
	}
	dlock_lock_free(l);
	dlock_client_close(client);
	return NULL;
}

static void test_many_clients(void)
{
	static struct contender cs[CLIENTS];
	static pthread_t th[CLIENTS];
	struct name_log logs[NAMES];
	char names[NAMES][64];
	unsigned rounds = (cur->acquisitions + CLIENTS - 1) / CLIENTS;
	atomic_uint failures = 0;
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, CLIENTS + 1);
	for (int n = 0; n < NAMES; n++) {
		ft_name(names[n], sizeof names[n], "load");
		logs[n].ov = dlock_test_overlap_new();
		logs[n].cap = (size_t)rounds * (CLIENTS / NAMES);
		logs[n].tokens = calloc(logs[n].cap, sizeof *logs[n].tokens);
	}
	for (int i = 0; i < CLIENTS; i++) {
		cs[i] = (struct contender){ .uri = cur->uri, .name = names[i % NAMES], .log = &logs[i % NAMES],
			                    .rounds = rounds, .start = &start, .failures = &failures };
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, contender_main, &cs[i]) == 0);
	}
	pthread_barrier_wait(&start); /* every client is open: time the locking only */
	int64_t t0 = dlock_test_now_ms();
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(th[i], NULL);
	int64_t dt = dlock_test_now_ms() - t0;
	uint64_t total = 0, violations = 0, backwards = 0;
	for (int n = 0; n < NAMES; n++) {
		uint64_t count = dlock_test_overlap_count(logs[n].ov);
		total += count;
		violations += dlock_test_overlap_violations(logs[n].ov);
		for (size_t k = 1; k < count && k < logs[n].cap; k++)
			backwards += logs[n].tokens[k] <= logs[n].tokens[k - 1];
		dlock_test_overlap_free(logs[n].ov);
		free(logs[n].tokens);
	}
	printf("\n    %s: %llu acquisitions by %d clients on %d names in %lld ms (%.0f/s); overlaps %llu, "
	       "tokens out of order %llu, failures %u",
	       cur->label, (unsigned long long)total, CLIENTS, NAMES, (long long)dt, dt ? total * 1000.0 / (double)dt : 0.0,
	       (unsigned long long)violations, (unsigned long long)backwards, atomic_load(&failures));
	CU_ASSERT(total >= cur->acquisitions);
	CU_ASSERT_EQUAL(violations, 0);
	CU_ASSERT_EQUAL(backwards, 0);
	CU_ASSERT_EQUAL(atomic_load(&failures), 0);
	pthread_barrier_destroy(&start);
}

/* ------------------------------------------------------------ semaphore, read-write lock */

/* Who is inside one name, shared by the contenders of a kinds test. */
struct kind_log {
	atomic_int inside, writers, most;
	atomic_uint violations, acquisitions, failures;
	uint64_t last_token[PERMITS]; /* per slot, written by the slot's holder only */
	atomic_uint backwards;
};

struct kind_contender {
	const char *uri, *name;
	int semaphore;     /* else a read-write lock */
	unsigned rounds;
	unsigned seed;
	pthread_barrier_t *start;
	struct kind_log *log;
};

static dlock_status kind_acquire(dlock_lock *l, int exclusive)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = FT_LONG_WAIT_MS;
	o.mode = exclusive ? DLOCK_MODE_EXCLUSIVE : DLOCK_MODE_SHARED;
	return dlock_acquire(l, &o);
}

/* Inside: count, check the kind's rule, and for a permit its slot's token order. */
static void kind_inside(struct kind_contender *c, dlock_lock *l, int writer)
{
	struct kind_log *log = c->log;
	int n = atomic_fetch_add(&log->inside, 1) + 1;
	if (writer && atomic_fetch_add(&log->writers, 1) != 0)
		atomic_fetch_add(&log->violations, 1);
	if ((c->semaphore && n > PERMITS) || (!c->semaphore && (writer ? n > 1 : atomic_load(&log->writers) != 0)))
		atomic_fetch_add(&log->violations, 1);
	int most = atomic_load(&log->most);
	while (n > most && !atomic_compare_exchange_weak(&log->most, &most, n))
		;
	/* Stay a moment, so that holders that may overlap do, and one that may not would be seen. */
	nanosleep(&(struct timespec){ .tv_nsec = 200 * 1000 }, NULL);
	uint32_t slot;
	uint64_t token;
	if (c->semaphore && dlock_lock_permit_slot(l, &slot) == DLOCK_OK && slot < PERMITS &&
	    dlock_lock_fencing_token(l, &token) == DLOCK_OK) {
		if (token <= log->last_token[slot])
			atomic_fetch_add(&log->backwards, 1);
		log->last_token[slot] = token;
	}
	if (writer)
		atomic_fetch_sub(&log->writers, 1);
	atomic_fetch_sub(&log->inside, 1);
	atomic_fetch_add(&log->acquisitions, 1);
}

static void *kind_contender_main(void *arg)
{
	struct kind_contender *c = arg;
	dlock_client *client = NULL;
	dlock_lock *l = NULL;
	char err[512];
	dlock_status st = dlock_client_open(&client, c->uri, NULL, err, sizeof err);
	if (st == DLOCK_OK)
		st = c->semaphore ? dlock_semaphore_new(client, c->name, PERMITS, &l) : dlock_rwlock_new(client, c->name, &l);
	pthread_barrier_wait(c->start);
	for (unsigned i = 0; st == DLOCK_OK && i < c->rounds; i++) {
		/* A permit is taken in exclusive mode, and is no writer: N of them may be inside. */
		int writer = !c->semaphore && (unsigned)rand_r(&c->seed) % 10 >= READS_IN_TEN;
		if (kind_acquire(l, writer || c->semaphore) != DLOCK_OK) {
			atomic_fetch_add(&c->log->failures, 1);
			continue;
		}
		kind_inside(c, l, writer);
		if (dlock_release(l) != DLOCK_OK)
			atomic_fetch_add(&c->log->failures, 1);
	}
	if (st != DLOCK_OK)
		atomic_fetch_add(&c->log->failures, c->rounds);
	dlock_lock_free(l);
	dlock_client_close(client);
	return NULL;
}

static void kinds_run(int semaphore)
{
	static struct kind_contender cs[CLIENTS];
	static pthread_t th[CLIENTS];
	static struct kind_log log;
	char name[64];
	unsigned rounds = (KIND_ACQUISITIONS + CLIENTS - 1) / CLIENTS;
	pthread_barrier_t start;
	memset(&log, 0, sizeof log);
	ft_name(name, sizeof name, semaphore ? "load-sem" : "load-rw");
	pthread_barrier_init(&start, NULL, CLIENTS + 1);
	for (int i = 0; i < CLIENTS; i++) {
		cs[i] = (struct kind_contender){ .uri = cur->uri, .name = name, .semaphore = semaphore,
			                         .rounds = rounds, .seed = (unsigned)i * 7919u + 1, .start = &start,
			                         .log = &log };
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, kind_contender_main, &cs[i]) == 0);
	}
	pthread_barrier_wait(&start);
	int64_t t0 = dlock_test_now_ms();
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(th[i], NULL);
	int64_t dt = dlock_test_now_ms() - t0;
	unsigned total = atomic_load(&log.acquisitions);
	printf("\n    %s: %u acquisitions of a %s by %d clients in %lld ms (%.0f/s); at most %d inside%s, "
	       "violations %u, slot tokens out of order %u, failures %u",
	       cur->label, total, semaphore ? "semaphore of 3 permits" : "read-write lock (9 reads in 10)", CLIENTS,
	       (long long)dt, dt ? total * 1000.0 / (double)dt : 0.0, atomic_load(&log.most),
	       semaphore ? "" : " (readers)", atomic_load(&log.violations), atomic_load(&log.backwards),
	       atomic_load(&log.failures));
	CU_ASSERT(total >= KIND_ACQUISITIONS);
	CU_ASSERT_EQUAL(atomic_load(&log.violations), 0);
	CU_ASSERT_EQUAL(atomic_load(&log.backwards), 0);
	CU_ASSERT_EQUAL(atomic_load(&log.failures), 0);
	pthread_barrier_destroy(&start);
}

static void test_semaphore_load(void)
{
	kinds_run(1);
}

static void test_rwlock_load(void)
{
	kinds_run(0);
}

/* ------------------------------------------------------------ flat resources */

struct cycler {
	dlock_lock *lock;
	unsigned cycles;
	atomic_uint *done;
	atomic_uint *failures;
};

static void *cycler_main(void *arg)
{
	struct cycler *c = arg;
	for (unsigned i = 0; i < c->cycles; i++) {
		if (ft_acquire(c->lock, FT_LONG_WAIT_MS, 0, NULL) != DLOCK_OK || dlock_release(c->lock) != DLOCK_OK)
			atomic_fetch_add(c->failures, 1);
		atomic_fetch_add(c->done, 1);
	}
	return NULL;
}

/*
 * Descriptors now: the least of a few readings a few ms apart, because a
 * client library may hold one for an instant (a reconnect, a resolver
 * file) on another thread; a leak raises every reading.
 */
static int settled_fd_count(void)
{
	int least = ft_fd_count();
	for (int i = 0; i < 4; i++) {
		dlock_test_sleep_ms(2); /* spacing between readings, not a synchronisation */
		int n = ft_fd_count();
		if (n < least)
			least = n;
	}
	return least;
}

struct progress {
	atomic_uint *done;
	unsigned want;
};

static int reached(void *arg)
{
	struct progress *p = arg;
	return atomic_load(p->done) >= p->want;
}

static void test_flat(void)
{
	dlock_client *c = ft_open(cur->uri);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	struct cycler cy[CYCLE_THREADS];
	pthread_t th[CYCLE_THREADS];
	atomic_uint done = 0, failures = 0;
	long rss[SAMPLES + 1];
	int fds[SAMPLES + 1];
	for (int i = 0; i < CYCLE_THREADS; i++) {
		char name[64];
		ft_name(name, sizeof name, "flat");
		cy[i] = (struct cycler){ .lock = ft_lock(c, name), .cycles = cur->cycles / CYCLE_THREADS, .done = &done,
			                 .failures = &failures };
		CU_ASSERT_FATAL(pthread_create(&th[i], NULL, cycler_main, &cy[i]) == 0);
	}
	/* Sample 0 after the first tenth (connections made, caches warm), then every tenth. */
	int64_t t0 = dlock_test_now_ms();
	for (int s = 0; s < SAMPLES; s++) {
		struct progress p = { &done, (unsigned)((uint64_t)cur->cycles * (unsigned)(s + 1) / SAMPLES) };
		if (s == SAMPLES - 1)
			break;
		CU_ASSERT(dlock_test_await(reached, &p, 10 * 60 * 1000));
		rss[s] = ft_rss_kib();
		fds[s] = settled_fd_count();
	}
	for (int i = 0; i < CYCLE_THREADS; i++)
		pthread_join(th[i], NULL);
	int64_t dt = dlock_test_now_ms() - t0;
	rss[SAMPLES - 1] = ft_rss_kib();
	fds[SAMPLES - 1] = settled_fd_count();
	printf("\n    %s: %u acquire/release cycles on %d threads in %lld ms; RSS KiB by tenths:", cur->label,
	       atomic_load(&done), CYCLE_THREADS, (long long)dt);
	for (int s = 0; s < SAMPLES; s++)
		printf(" %ld", rss[s]);
	printf("; descriptors:");
	for (int s = 0; s < SAMPLES; s++)
		printf(" %d", fds[s]);
	long growth = rss[SAMPLES - 1] - rss[0];
	printf("; growth after warm-up %ld KiB%s", growth, UNDER_ASAN ? " (ASan: not asserted)" : "");
	CU_ASSERT_EQUAL(atomic_load(&failures), 0);
	CU_ASSERT_EQUAL(fds[SAMPLES - 1], fds[0]);
	if (!UNDER_ASAN)
		CU_ASSERT(growth < RSS_TOLERANCE_KIB);
	for (int i = 0; i < CYCLE_THREADS; i++)
		dlock_lock_free(cy[i].lock);
	dlock_client_close(c);
}

/* ------------------------------------------------------------ main */

static void add_suites(void)
{
	static CU_InitializeFunc inits[] = { init_0, init_1, init_2 };
	for (size_t i = 0; i < nbackends; i++) {
		CU_pSuite s = CU_add_suite(backends[i].label, inits[i], NULL);
		CU_add_test(s, "64 clients, 8 names: no overlap, tokens in order", test_many_clients);
		CU_add_test(s, "64 clients, a semaphore of 3: never more than 3 inside", test_semaphore_load);
		CU_add_test(s, "64 clients, a read-write lock: never a writer beside anyone", test_rwlock_load);
		CU_add_test(s, "acquire/release cycles: memory and descriptors flat", test_flat);
	}
}

int main(void)
{
	static char zk_uri[512];
	const char *redis = dlock_test_env("DLOCK_TEST_REDIS_URI"), *zk = dlock_test_env("DLOCK_TEST_ZK_URI"),
		   *pg = dlock_test_env("DLOCK_TEST_PG_URI");
	if (redis)
		backends[nbackends++] = (struct backend){ "redis", redis, 10000, CYCLES(100000) };
	if (zk) {
		/* Its own base path, and a session timeout that a loaded machine keeps alive. */
		snprintf(zk_uri, sizeof zk_uri, "%s/dlock-load-%ld?session_timeout=10s", zk, (long)getpid());
		backends[nbackends++] = (struct backend){ "zookeeper", zk_uri, 10000, CYCLES(10000) };
	}
	if (pg)
		backends[nbackends++] = (struct backend){ "postgres", pg, 10000, CYCLES(100000) };
	const char *req = getenv("DLOCK_TEST_REQUIRE_ALL");
	if (nbackends == 0 || (req && strcmp(req, "1") == 0 && nbackends < 3))
		return dlock_test_skip("a server backend is missing (DLOCK_TEST_REDIS_URI, DLOCK_TEST_ZK_URI, DLOCK_TEST_PG_URI)");
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
