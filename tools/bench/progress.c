/*
 * The progress line on stderr while a phase runs.  On a terminal it is
 * rewritten in place four times a second; otherwise (CI logs) one line is
 * written when the phase ends, so logs stay readable.
 */
#include <stdio.h>
#include <unistd.h>

#include "bench.h"

#define TICK_NS (250 * BENCH_NS_PER_MS)

static uint64_t total_ops(struct bench_shared *sh)
{
	uint64_t n = 0;
	for (int i = 0; i < sh->nworkers; i++)
		n += atomic_load(&sh->slots[i].ops);
	return n;
}

static void print_line(struct bench_phase *ph, const char *label, int64_t now, int tty)
{
	double t = (double)(now - ph->sh->go_ns) / 1e9;
	uint64_t ops = total_ops(ph->sh);
	fprintf(stderr, "%s[%s] %s%s %dx%d%s%s t=%.1fs ops=%llu (%.0f/s)%s", tty ? "\r" : "", ph->masked,
	        ph->raw ? "raw " : "", bench_scenario_name(ph->sc), ph->clients, ph->threads, label[0] ? " " : "",
	        label, t, (unsigned long long)ops, t > 0 ? (double)ops / t : 0.0, tty ? "\033[K" : "\n");
	fflush(stderr);
}

int bench_progress_until(struct bench_phase *ph, int64_t until_ns, const char *label)
{
	int tty = isatty(STDERR_FILENO);
	for (;;) {
		int64_t now = bench_now_ns();
		if (atomic_load(&ph->sh->failed))
			return -1;
		if (tty)
			print_line(ph, label, now, 1);
		if (now >= until_ns)
			break;
		bench_sleep_ns(until_ns - now < TICK_NS ? until_ns - now : TICK_NS);
	}
	if (!tty)
		print_line(ph, label, bench_now_ns(), 0);
	return 0;
}

void bench_progress_end(void)
{
	if (isatty(STDERR_FILENO)) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
}
