/*
 * Charts with gnuplot: each chart is a data file and a gnuplot script in
 * DIR (kept, so that a chart can be redrawn or restyled by hand), then
 * `gnuplot SCRIPT` writes the PNG.
 *
 *   throughput-uncontended.png, throughput-contended.png
 *                      ops/s of dlock and raw per backend and client count
 *   latency.png        contended: handoff p50/p99 and wait p99, dlock and raw
 *   scale.png          scale, per backend and waiters: acquisitions/s, handoff
 *                      p50/p99, wait p99, server CPU time and Redis commands per
 *                      acquisition, dlock and raw
 *   held.png           held, per backend and locks: acquisitions/s and
 *                      renewals/s, client bytes per lock, server CPU (% of a core)
 *   faults-N-BACKEND.png   the faults timeline: one row per worker, one bar
 *                      per critical section (red: overlapping, orange:
 *                      its write was refused as stale), the faults shaded
 */
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "bench.h"

extern char **environ;

static int run_gnuplot(const char *script)
{
	char *argv[] = { "gnuplot", (char *)script, NULL };
	pid_t pid;
	int status;
	if (posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ) != 0) {
		fprintf(stderr, "dlock-bench: --plot needs gnuplot on PATH (apt-get install gnuplot-nox)\n");
		return -1;
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "dlock-bench: gnuplot %s failed\n", script);
		return -1;
	}
	return 0;
}

static FILE *open_in(const char *dir, const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", dir, name);
	FILE *f = fopen(path, "we");
	if (!f)
		fprintf(stderr, "dlock-bench: cannot write %s\n", path);
	return f;
}

static void header(FILE *g, const char *dir, const char *png, const char *title, int width, int height)
{
	fprintf(g, "set terminal pngcairo size %d,%d font ',9' noenhanced\nset output '%s/%s'\n", width, height, dir, png);
	fprintf(g, "set title '%s'\nset key top right\nset grid ytics\nset datafile missing '-'\n", title);
}

static void num(FILE *f, double v, int have)
{
	if (have && v >= 0)
		fprintf(f, " %.1f", v);
	else
		fprintf(f, " -");
}

static int throughput(const char *dir, const struct bench_result *r, int n, enum bench_scenario sc)
{
	char dat[600], gp[600], name[64];
	int rows = 0;
	snprintf(name, sizeof name, "throughput-%s.dat", bench_scenario_name(sc));
	FILE *d = open_in(dir, name, dat, sizeof dat);
	if (!d)
		return -1;
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != sc)
			continue;
		fprintf(d, "\"%s %dx%d\"", r[i].backend, r[i].clients, r[i].threads);
		num(d, r[i].ops_per_s, 1);
		num(d, r[i].raw_ops_per_s, r[i].has_raw);
		fputc('\n', d);
		rows++;
	}
	fclose(d);
	snprintf(name, sizeof name, "throughput-%s.gp", bench_scenario_name(sc));
	FILE *g = open_in(dir, name, gp, sizeof gp);
	if (!g)
		return -1;
	snprintf(name, sizeof name, "throughput-%s.png", bench_scenario_name(sc));
	header(g, dir, name, sc == BENCH_CONTENDED ? "contended: acquisitions/s on one name (log scale)"
	                                           : "uncontended: acquire+release cycles/s (log scale)", 960, 480);
	fprintf(g, "set logscale y\nset ylabel 'ops/s'\nset style data histograms\n"
	           "set style histogram cluster gap 1\nset style fill solid 0.8 border -1\nset xtics rotate by -30\n"
	           "plot '%s' using 2:xtic(1) title 'dlock', '' using 3 title 'raw client'\n", dat);
	fclose(g);
	return rows ? run_gnuplot(gp) : 0;
}

static int latency(const char *dir, const struct bench_result *r, int n)
{
	char dat[600], gp[600];
	int rows = 0;
	FILE *d = open_in(dir, "latency.dat", dat, sizeof dat);
	if (!d)
		return -1;
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != BENCH_CONTENDED || r[i].clients * r[i].threads < 2)
			continue;
		fprintf(d, "\"%s %dx%d\"", r[i].backend, r[i].clients, r[i].threads);
		num(d, bench_hist_pct_us(&r[i].handoff, 50), 1);
		num(d, bench_hist_pct_us(&r[i].handoff, 99), 1);
		num(d, bench_hist_pct_us(&r[i].acq, 99), 1);
		num(d, bench_hist_pct_us(&r[i].raw_handoff, 50), r[i].has_raw);
		num(d, bench_hist_pct_us(&r[i].raw_handoff, 99), r[i].has_raw);
		num(d, bench_hist_pct_us(&r[i].raw_acq, 99), r[i].has_raw);
		fputc('\n', d);
		rows++;
	}
	fclose(d);
	FILE *g = open_in(dir, "latency.gp", gp, sizeof gp);
	if (!g)
		return -1;
	header(g, dir, "latency.png", "contended: handoff and wait, microseconds (log scale)", 1100, 480);
	fprintf(g, "set logscale y\nset ylabel 'us'\nset style data histograms\n"
	           "set style histogram cluster gap 1\nset style fill solid 0.8 border -1\nset xtics rotate by -30\n"
	           "set key outside right\n"
	           "plot '%s' using 2:xtic(1) title 'handoff p50', '' using 3 title 'handoff p99', "
	           "'' using 4 title 'wait p99', '' using 5 title 'raw handoff p50', '' using 6 title 'raw handoff p99', "
	           "'' using 7 title 'raw wait p99'\n", dat);
	fclose(g);
	return rows ? run_gnuplot(gp) : 0;
}

/* One panel of a chart: the series in columns 2+2i and 3+2i of its data file (the second may be absent). */
struct panel {
	const char *title, *first, *second;
	int known; /* values written: a panel without any stays empty (gnuplot refuses to plot nothing) */
};

/* One value of panel p's series. */
static void put(FILE *d, double v, int have, struct panel *p)
{
	num(d, v, have);
	p->known += have && v >= 0;
}

/* The panels in `rows` rows, each clustered histograms on a linear scale (zeros are values too). */
static void panels(FILE *g, const char *title, const char *dat, int nrows, const struct panel *p, int n, int rows)
{
	/* Every row on every panel's x axis, even where a panel has no value for the last rows. */
	fprintf(g, "set style data histograms\nset style histogram cluster gap 1\nset style fill solid 0.8 border -1\n"
	           "set xtics rotate by -30\nset key below\nset xrange [-0.5:%d.5]\nset yrange [0:*]\n"
	           "set multiplot layout %d,%d title '%s'\n", nrows - 1, rows, (n + rows - 1) / rows, title);
	for (int i = 0; i < n; i++) {
		fprintf(g, "set title '%s%s'\n", p[i].title, p[i].known ? "" : ": unknown");
		if (!p[i].known) {
			fprintf(g, "set multiplot next\n");
			continue;
		}
		fprintf(g, "plot '%s' using %d:xtic(1) title '%s'", dat, 2 + 2 * i, p[i].first);
		if (p[i].second)
			fprintf(g, ", '' using %d title '%s'", 3 + 2 * i, p[i].second);
		fputc('\n', g);
	}
	fprintf(g, "unset multiplot\n");
}

static int scale_chart(const char *dir, const struct bench_result *r, int n)
{
	struct panel p[6] = {
		{ "acquisitions/s", "dlock", "raw client", 0 },
		{ "handoff p50, us", "dlock", "raw client", 0 },
		{ "handoff p99, us", "dlock", "raw client", 0 },
		{ "wait p99, us", "dlock", "raw client", 0 },
		{ "server CPU us per acquisition", "dlock", "raw client", 0 },
		{ "Redis commands per acquisition", "dlock", "raw client", 0 },
	};
	char dat[600], gp[600];
	int rows = 0;
	FILE *d = open_in(dir, "scale.dat", dat, sizeof dat);
	if (!d)
		return -1;
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != BENCH_SCALE)
			continue;
		fprintf(d, "\"%s %d\"", r[i].backend, r[i].clients);
		put(d, r[i].ops_per_s, 1, &p[0]);
		put(d, r[i].raw_ops_per_s, r[i].has_raw, &p[0]);
		put(d, bench_hist_pct_us(&r[i].handoff, 50), 1, &p[1]);
		put(d, bench_hist_pct_us(&r[i].raw_handoff, 50), r[i].has_raw, &p[1]);
		put(d, bench_hist_pct_us(&r[i].handoff, 99), 1, &p[2]);
		put(d, bench_hist_pct_us(&r[i].raw_handoff, 99), r[i].has_raw, &p[2]);
		put(d, bench_hist_pct_us(&r[i].acq, 99), 1, &p[3]);
		put(d, bench_hist_pct_us(&r[i].raw_acq, 99), r[i].has_raw, &p[3]);
		put(d, r[i].server_cpu_us_per_acq, 1, &p[4]);
		put(d, r[i].raw_server_cpu_us_per_acq, r[i].has_raw, &p[4]);
		put(d, r[i].redis_cmds_per_acq, 1, &p[5]);
		put(d, r[i].raw_redis_cmds_per_acq, r[i].has_raw, &p[5]);
		fputc('\n', d);
		rows++;
	}
	fclose(d);
	FILE *g = open_in(dir, "scale.gp", gp, sizeof gp);
	if (!g)
		return -1;
	header(g, dir, "scale.png", "scale", 1500, 900);
	panels(g, "scale: waiters on one name", dat, rows, p, 6, 2);
	fclose(g);
	return rows ? run_gnuplot(gp) : 0;
}

static int held_chart(const char *dir, const struct bench_result *r, int n)
{
	struct panel p[3] = {
		{ "acquisitions/s, renewals/s during the hold", "acquisitions/s", "renewals/s", 0 },
		{ "client bytes per lock held", "dlock", NULL, 0 },
		{ "server CPU during the hold, % of one core", "dlock", NULL, 0 },
	};
	char dat[600], gp[600];
	int rows = 0;
	FILE *d = open_in(dir, "held.dat", dat, sizeof dat);
	if (!d)
		return -1;
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != BENCH_HELD)
			continue;
		double pct = r[i].server_cpu_ms >= 0 && r[i].duration_ms > 0
		                     ? r[i].server_cpu_ms / (double)r[i].duration_ms * 100.0 : -1;
		fprintf(d, "\"%s %d\"", r[i].backend, r[i].locks);
		put(d, r[i].ops_per_s, 1, &p[0]);
		put(d, r[i].renewals_per_s, 1, &p[0]);
		put(d, r[i].client_bytes_per_lock, 1, &p[1]);
		put(d, -1, 0, &p[1]);
		put(d, pct, 1, &p[2]);
		put(d, -1, 0, &p[2]);
		fputc('\n', d);
		rows++;
	}
	fclose(d);
	FILE *g = open_in(dir, "held.gp", gp, sizeof gp);
	if (!g)
		return -1;
	header(g, dir, "held.png", "held", 1500, 480);
	panels(g, "held: locks kept alive by one client", dat, rows, p, 3, 1);
	fclose(g);
	return rows ? run_gnuplot(gp) : 0;
}

static int timeline(const char *dir, const struct bench_result *r)
{
	char gp[600], png[600], name[96];
	const char *base = strrchr(r->timeline, '/') ? strrchr(r->timeline, '/') + 1 : r->timeline;
	snprintf(name, sizeof name, "%.*s.gp", (int)(strlen(base) - 4), base);
	snprintf(png, sizeof png, "%.*s.png", (int)(strlen(base) - 4), base);
	FILE *g = open_in(dir, name, gp, sizeof gp);
	if (!g)
		return -1;
	char title[700];
	snprintf(title, sizeof title, "faults on %s: critical sections per worker", r->uri);
	header(g, dir, png, title, 1100, 480);
	fprintf(g, "set xlabel 'seconds'\nset ylabel 'worker'\nset yrange [-0.5:%d.5]\nset ytics 1\n", r->clients - 1);
	for (int i = 0; i < r->nfaults; i++)
		fprintf(g, "set object %d rect from %.3f, graph 0 to %.3f, graph 1 fc rgb '#dddddd' fs solid 0.5 behind\n"
		           "set label %d '%s' at %.3f, graph 0.97\n",
		        i + 1, r->faults[i].at_ms / 1e3, r->faults[i].end_ms / 1e3, i + 1, r->faults[i].what,
		        r->faults[i].at_ms / 1e3 + 0.05);
	fprintf(g, "plot '%s' index 0 using 1:2:3:(0):($4==2 ? 0xdd0000 : $4==1 ? 0xff9900 : 0x3366cc) "
	           "with vectors nohead lw 8 lc rgb variable notitle\n", r->timeline);
	fclose(g);
	return run_gnuplot(gp);
}

int bench_plot(const char *dir, const struct bench_result *r, int n)
{
	int rc = 0;
	rc |= throughput(dir, r, n, BENCH_UNCONTENDED);
	rc |= throughput(dir, r, n, BENCH_CONTENDED);
	rc |= latency(dir, r, n);
	rc |= scale_chart(dir, r, n);
	rc |= held_chart(dir, r, n);
	for (int i = 0; i < n; i++)
		if (!r[i].failed && r[i].sc == BENCH_FAULTS && r[i].timeline[0])
			rc |= timeline(dir, &r[i]);
	return rc ? -1 : 0;
}
