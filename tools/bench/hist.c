/*
 * The monotonic clock and latency histograms.
 *
 * Histograms rather than sample arrays: mem:// does millions of cycles a
 * second, and a fixed-size histogram per worker in the shared region keeps
 * every sample at 3% resolution without allocating while measuring.
 */
#include <errno.h>
#include <time.h>

#include "bench.h"

#define SUB (1 << BENCH_HIST_SUB_BITS)

int64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * BENCH_NS_PER_S + ts.tv_nsec;
}

void bench_sleep_ns(int64_t ns)
{
	if (ns <= 0)
		return;
	struct timespec ts = { .tv_sec = ns / BENCH_NS_PER_S, .tv_nsec = ns % BENCH_NS_PER_S };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Values below SUB have a bucket each; above, SUB buckets per power of two. */
static int bucket_of(uint64_t v)
{
	if (v < SUB)
		return (int)v;
	int e = 63 - __builtin_clzll(v);
	int shift = e - BENCH_HIST_SUB_BITS;
	int idx = (shift + 1) * SUB + (int)((v >> shift) - SUB);
	return idx < BENCH_HIST_BUCKETS ? idx : BENCH_HIST_BUCKETS - 1;
}

/* The middle of a bucket's range. */
static double bucket_mid(int idx)
{
	if (idx < SUB)
		return idx;
	int shift = idx / SUB - 1;
	double lo = (double)((uint64_t)(idx % SUB + SUB) << shift);
	return lo + (double)(1ULL << shift) / 2.0;
}

void bench_hist_add(struct bench_hist *h, int64_t ns)
{
	if (ns < 0)
		ns = 0;
	h->b[bucket_of((uint64_t)ns)]++;
	h->count++;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

void bench_hist_merge(struct bench_hist *into, const struct bench_hist *h)
{
	for (int i = 0; i < BENCH_HIST_BUCKETS; i++)
		into->b[i] += h->b[i];
	into->count += h->count;
	if (h->max_ns > into->max_ns)
		into->max_ns = h->max_ns;
}

double bench_hist_pct_us(const struct bench_hist *h, double pct)
{
	if (h->count == 0)
		return -1;
	uint64_t rank = (uint64_t)((double)h->count * pct / 100.0);
	if (rank >= h->count)
		rank = h->count - 1;
	uint64_t seen = 0;
	for (int i = 0; i < BENCH_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen > rank) {
			double v = bucket_mid(i);
			return (v < (double)h->max_ns ? v : (double)h->max_ns) / 1000.0;
		}
	}
	return (double)h->max_ns / 1000.0;
}
