/*
 * The region every worker process writes its results to: one anonymous
 * MAP_SHARED mapping made before fork, so parent and children see the same
 * pages and no file or descriptor is involved.  Layout: the header, one
 * slot per worker, then each worker's interval array.  Each worker thread
 * writes only its own slot: its counts, intervals and first error.
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Enough intervals for a contended run on mem:// without exhausting memory. */
#define INTERVALS_TOTAL (1u << 22)
#define INTERVALS_MIN 4096u
#define INTERVALS_MAX (1u << 19)

static size_t header_size(int nworkers)
{
	size_t s = sizeof(struct bench_shared) + (size_t)nworkers * sizeof(struct bench_slot);
	return (s + 63) & ~(size_t)63;
}

struct bench_shared *bench_shared_new(int nworkers, int want_intervals)
{
	uint64_t cap = 0;
	if (want_intervals) {
		cap = INTERVALS_TOTAL / (unsigned)nworkers;
		cap = cap < INTERVALS_MIN ? INTERVALS_MIN : cap > INTERVALS_MAX ? INTERVALS_MAX : cap;
	}
	size_t size = header_size(nworkers) + (size_t)nworkers * cap * sizeof(struct bench_interval);
	/* Pages are only touched as intervals are written: untouched ones cost nothing. */
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	struct bench_shared *sh = p;
	sh->nworkers = nworkers;
	sh->int_cap = cap;
	sh->size = size;
	atomic_store(&sh->stop_ns, INT64_MAX);
	atomic_store(&sh->last_releaser, -1);
	return sh;
}

void bench_shared_free(struct bench_shared *sh)
{
	if (sh)
		munmap(sh, sh->size);
}

/* An _Atomic int is an int in memory (C11 7.17.6, and the ABI on Linux): the futex word. */
void bench_state_set(_Atomic int *state, int value)
{
	atomic_store(state, value);
	syscall(SYS_futex, (int *)state, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void bench_state_wait(_Atomic int *state, int seen, int64_t timeout_ns)
{
	struct timespec ts = { .tv_sec = timeout_ns / BENCH_NS_PER_S, .tv_nsec = timeout_ns % BENCH_NS_PER_S };
	/* EAGAIN when it changed in between, EINTR, ETIMEDOUT: the caller looks again in every case. */
	if (atomic_load(state) == seen)
		syscall(SYS_futex, (int *)state, FUTEX_WAIT, seen, &ts, NULL, 0);
}

struct bench_interval *bench_intervals(struct bench_shared *sh, int worker)
{
	char *base = (char *)sh + header_size(sh->nworkers);
	return (struct bench_interval *)(void *)base + (size_t)worker * sh->int_cap;
}

void bench_interval_add(struct bench_shared *sh, int worker, int64_t start, int64_t end, int flags)
{
	struct bench_slot *s = &sh->slots[worker];
	if (s->nint >= sh->int_cap) {
		s->dropped++;
		return;
	}
	bench_intervals(sh, worker)[s->nint++] = (struct bench_interval){ start, end, worker, flags };
}

void bench_slot_error(struct bench_slot *s, const char *fmt, ...)
{
	s->errors++;
	if (s->err[0])
		return; /* keep the first: later ones are usually its consequences */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof s->err, fmt, ap);
	va_end(ap);
}

static int by_start(const void *a, const void *b)
{
	const struct bench_interval *x = a, *y = b;
	return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

/*
 * A critical section overlaps when it starts before the latest end seen so
 * far among earlier-starting sections of other workers.  Tracking the two
 * latest ends of distinct workers is enough: a worker never overlaps itself.
 */
static uint64_t count_overlaps(struct bench_interval *iv, size_t n)
{
	int64_t end1 = INT64_MIN, end2 = INT64_MIN; /* latest end, and latest of another worker */
	int w1 = -1;
	uint64_t overlaps = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t other_end = iv[i].worker == w1 ? end2 : end1;
		if (iv[i].start_ns < other_end) {
			overlaps++;
			iv[i].flags |= BENCH_IV_OVERLAP;
		}
		if (iv[i].end_ns > end1) {
			if (iv[i].worker != w1)
				end2 = end1;
			end1 = iv[i].end_ns;
			w1 = iv[i].worker;
		} else if (iv[i].worker != w1 && iv[i].end_ns > end2) {
			end2 = iv[i].end_ns;
		}
	}
	return overlaps;
}

int bench_sweep(struct bench_shared *sh, struct bench_sweep *out)
{
	size_t n = 0;
	memset(out, 0, sizeof *out);
	for (int w = 0; w < sh->nworkers; w++) {
		n += sh->slots[w].nint;
		out->dropped += sh->slots[w].dropped;
	}
	out->iv = malloc((n ? n : 1) * sizeof *out->iv);
	if (!out->iv)
		return -1;
	for (int w = 0; w < sh->nworkers; w++) {
		memcpy(out->iv + out->n, bench_intervals(sh, w), sh->slots[w].nint * sizeof *out->iv);
		out->n += sh->slots[w].nint;
	}
	qsort(out->iv, out->n, sizeof *out->iv, by_start);
	out->overlaps = count_overlaps(out->iv, out->n);
	return 0;
}

uint64_t bench_overlaps_between(const struct bench_sweep *s, int64_t from_ns, int64_t to_ns)
{
	uint64_t n = 0;
	for (size_t i = 0; i < s->n; i++)
		if ((s->iv[i].flags & BENCH_IV_OVERLAP) && s->iv[i].start_ns >= from_ns && s->iv[i].start_ns < to_ns)
			n++;
	return n;
}
