/*
 * Results for people (one table) and for programs (one JSON object per
 * line).  Every JSON line carries every field, null where it does not
 * apply, so that consumers need no per-scenario schema.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* ------------------------------------------------------------ JSON */

static const struct bench_hist no_samples;

static void json_str(const char *key, const char *v, int *first)
{
	printf("%s\"%s\":\"", *first ? "{" : ",", key);
	*first = 0;
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

/* A number, or null when `have` is 0. */
static void json_num(const char *key, double v, int have, int *first)
{
	printf("%s\"%s\":", *first ? "{" : ",", key);
	*first = 0;
	if (!have)
		printf("null");
	else if (v == (double)(long long)v && v < 1e15 && v > -1e15)
		printf("%lld", (long long)v);
	else
		printf("%.2f", v);
}

static void json_pct(const char *key, const struct bench_hist *h, double p, int *first)
{
	double v = bench_hist_pct_us(h, p);
	json_num(key, v < 0 ? 0 : (double)(long long)(v + 0.5), v >= 0, first);
}

/* held: the servers' CPU time over the hold, in % of one core; -1 when unknown. */
static double held_cpu_pct(const struct bench_result *r)
{
	return r->server_cpu_ms >= 0 && r->duration_ms > 0 ? r->server_cpu_ms / (double)r->duration_ms * 100.0 : -1;
}

static void json_faults(const struct bench_result *r)
{
	printf(",\"faults\":");
	if (r->sc != BENCH_FAULTS || r->failed) {
		printf("null");
		return;
	}
	putchar('[');
	for (int i = 0; i < r->nfaults; i++) {
		const struct bench_fault_result *f = &r->faults[i];
		int first = 1;
		if (i)
			putchar(',');
		json_str("fault", f->what, &first);
		json_num("at_ms", (double)f->at_ms, 1, &first);
		json_num("end_ms", (double)f->end_ms, 1, &first);
		json_num("unavailable_ms", (double)f->unavailable_ms, 1, &first);
		json_num("overlaps", (double)f->overlaps, 1, &first);
		json_str("note", f->note, &first);
		putchar('}');
	}
	putchar(']');
}

/* semaphore, read-mostly: the kind's own fields, null on the other scenarios. */
static void json_kinds(const struct bench_result *r, int sem, int rw, int *f)
{
	int kind_sc = bench_other_kind(r->sc);
	printf(",\"supported\":%s", !kind_sc ? "null" : r->unsupported ? "false" : "true");
	json_num("permits", r->permits, kind_sc && r->sc == BENCH_SEMAPHORE, f);
	json_num("most_holders", r->most_holders, sem, f);
	json_num("over_permits", (double)r->violations, sem, f);
	json_num("read_ratio", r->read_ratio, kind_sc && r->sc == BENCH_READ_MOSTLY, f);
	json_num("most_readers", r->most_readers, rw, f);
	json_num("writer_overlaps", (double)r->violations, rw, f);
	json_pct("reader_wait_p99_us", rw ? &r->acq_read : &no_samples, 99, f);
	json_pct("writer_wait_p99_us", rw ? &r->acq_write : &no_samples, 99, f);
}

/* inflight: the loop side's own fields and the blocking client's throughput, null on the other scenarios. */
static void json_inflight(const struct bench_result *r, int *f)
{
	int in = r->sc == BENCH_INFLIGHT, ok = in && !r->failed;
	int blk = ok && r->has_blocking, raw = ok && r->has_raw && r->raw_ops_per_s > 0;
	json_num("inflight", r->inflight, in, f);
	json_num("loop_native", r->loop_native, ok, f);
	json_num("blocking_ops_per_s", r->blocking_ops_per_s, blk, f);
	json_num("ratio_to_blocking", blk && r->blocking_ops_per_s > 0 ? r->ops_per_s / r->blocking_ops_per_s : 0,
	         blk && r->blocking_ops_per_s > 0, f);
	json_num("blocking_ratio_to_raw", raw ? r->blocking_ops_per_s / r->raw_ops_per_s : 0, raw && blk, f);
	json_num("threads_seen", r->threads_seen, ok, f);
	json_num("descriptors_seen", r->fds_seen, ok, f);
	json_num("connections_seen", r->sockets_seen, ok, f);
	json_num("max_connections", (double)r->max_connections, in && r->max_connections >= 0, f);
}

void bench_print_json(const struct bench_result *r)
{
	int f = 1, ok = !r->failed, perf = ok && r->sc != BENCH_FAULTS && r->sc != BENCH_HELD;
	int cont = perf && bench_one_name(r->sc), scale = perf && r->sc == BENCH_SCALE, held = ok && r->sc == BENCH_HELD;
	int fl = ok && r->sc == BENCH_FAULTS, raw = perf && r->has_raw;
	int sem = perf && r->sc == BENCH_SEMAPHORE, rw = perf && r->sc == BENCH_READ_MOSTLY, kind = sem || rw;
	int hand = cont || sem; /* a waiter takes over from a releaser */
	int metered = scale || (perf && (r->sc == BENCH_UNCONTENDED || r->sc == BENCH_CONTENDED));
	double rtt = r->rtt_p50_us;
	json_str("backend", r->backend, &f);
	json_str("uri", r->uri, &f);
	json_str("scenario", bench_scenario_name(r->sc), &f);
	json_num("clients", r->clients, 1, &f);
	json_num("threads", r->threads, 1, &f);
	json_num("processes", r->processes, 1, &f);
	printf(",\"fencing\":%s", r->sc == BENCH_FAULTS || r->fencing ? "true" : "false");
	json_num("duration_s", (double)r->duration_ms / 1000.0, ok, &f);
	json_num("ops", (double)r->ops, ok, &f);
	json_num("ops_per_s", r->ops_per_s, perf || held, &f);
	json_pct("p50_us", &r->acq, 50, &f);
	json_pct("p99_us", &r->acq, 99, &f);
	json_num("max_us", (double)r->acq.max_ns / 1000.0, (perf || held) && r->acq.count, &f);
	json_pct("release_p50_us", &r->rel, 50, &f);
	json_pct("release_p99_us", &r->rel, 99, &f);
	json_num("errors", (double)r->errors, ok, &f);
	json_num("raw_ops_per_s", r->raw_ops_per_s, raw, &f);
	json_num("ratio_to_raw", raw && r->raw_ops_per_s > 0 ? r->ops_per_s / r->raw_ops_per_s : 0,
	         raw && r->raw_ops_per_s > 0, &f);
	json_pct("raw_p50_us", &r->raw_acq, 50, &f);
	json_pct("raw_p99_us", &r->raw_acq, 99, &f);
	json_num("rtt_p50_us", rtt, perf && rtt >= 0, &f);
	json_num("server_calls_per_acq", r->server_calls_per_acq, perf && r->server_calls_per_acq >= 0, &f);
	json_pct("handoff_p50_us", &r->handoff, 50, &f);
	json_pct("handoff_p99_us", &r->handoff, 99, &f);
	json_num("handoff_p50_rtt", bench_hist_pct_us(&r->handoff, 50) / rtt, hand && rtt > 0 && r->handoff.count, &f);
	json_num("handoff_p99_rtt", bench_hist_pct_us(&r->handoff, 99) / rtt, hand && rtt > 0 && r->handoff.count, &f);
	json_pct("raw_handoff_p50_us", &r->raw_handoff, 50, &f);
	json_pct("raw_handoff_p99_us", &r->raw_handoff, 99, &f);
	json_pct("wait_p99_us", cont || kind ? &r->acq : &no_samples, 99, &f);
	json_num("reacquire_pct", r->reacquire_pct, cont, &f);
	json_num("raw_reacquire_pct", r->raw_reacquire_pct, cont && raw, &f);
	json_num("share_spread_pct", r->share_spread_pct, cont || kind, &f);
	json_num("overlaps", (double)r->overlaps, cont || fl, &f);
	json_num("stale_writes_rejected", (double)r->stale_rejected, fl, &f);
	json_num("lost_reported", (double)r->lost_reported, fl || held, &f);
	json_num("unavailable_ms", (double)r->unavailable_ms, fl, &f);
	json_num("writes_accepted", (double)r->accepted, fl, &f);
	json_num("lost_updates", (double)r->lost_updates, fl, &f);
	json_num("release_failed", (double)r->release_notheld, fl || held, &f);
	json_faults(r);
	json_num("server_cpu_us_per_acq", r->server_cpu_us_per_acq, metered && r->server_cpu_us_per_acq >= 0, &f);
	json_num("raw_server_cpu_us_per_acq", r->raw_server_cpu_us_per_acq,
	         metered && raw && r->raw_server_cpu_us_per_acq >= 0, &f);
	json_num("redis_cmds_per_acq", r->redis_cmds_per_acq, metered && r->redis_cmds_per_acq >= 0, &f);
	json_num("raw_redis_cmds_per_acq", r->raw_redis_cmds_per_acq, metered && raw && r->raw_redis_cmds_per_acq >= 0,
	         &f);
	json_num("client_cpu_us_per_acq", r->client_cpu_us_per_acq, metered && r->client_cpu_us_per_acq >= 0, &f);
	json_num("raw_client_cpu_us_per_acq", r->raw_client_cpu_us_per_acq,
	         metered && raw && r->raw_client_cpu_us_per_acq >= 0, &f);
	json_num("locks", r->locks, held, &f);
	json_num("lease_ms", (double)r->lease_ms, held, &f);
	json_num("renewals_per_s", r->renewals_per_s, held, &f);
	json_num("locks_lost", (double)r->locks_lost, held, &f);
	json_num("client_bytes_per_lock", r->client_bytes_per_lock, held && r->client_bytes_per_lock >= 0, &f);
	json_num("server_cpu_ms", r->server_cpu_ms, held && r->server_cpu_ms >= 0, &f);
	json_num("server_cpu_pct", held_cpu_pct(r), held && held_cpu_pct(r) >= 0, &f);
	json_kinds(r, sem, rw, &f);
	json_inflight(r, &f);
	if (r->raw_note[0])
		json_str("raw_note", r->raw_note, &f);
	if ((metered || held) && r->server_note[0])
		json_str("server_note", r->server_note, &f);
	if (r->failed)
		json_str(r->failed == 2 ? "skipped" : "error", r->error, &f);
	printf("}\n");
}

/* ------------------------------------------------------------ table */

static void cell_us(char *out, size_t len, const struct bench_hist *h, double p)
{
	double v = bench_hist_pct_us(h, p);
	if (v < 0)
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%.0f", v);
}

/* A value with `decimals`, or "-" when unknown (negative). */
static void cell_num(char *out, size_t len, double v, int decimals)
{
	if (v < 0)
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%.*f", decimals, v);
}

static void perf_row(FILE *out, const struct bench_result *r)
{
	char p50[16], p99[16], h50[16], h99[16], w99[16], raw[16] = "-", ratio[16] = "-";
	char reacq[16] = "-", spread[16] = "-", calls[16] = "-", rtt[16] = "-", ovl[16] = "-";
	int cont = r->sc == BENCH_CONTENDED;
	cell_us(p50, sizeof p50, &r->acq, 50);
	cell_us(p99, sizeof p99, &r->acq, 99);
	cell_us(h50, sizeof h50, &r->handoff, 50);
	cell_us(h99, sizeof h99, &r->handoff, 99);
	cell_us(w99, sizeof w99, cont ? &r->acq : &r->handoff, 99);
	if (r->has_raw) {
		snprintf(raw, sizeof raw, "%.0f", r->raw_ops_per_s);
		if (r->raw_ops_per_s > 0)
			snprintf(ratio, sizeof ratio, "%.2f", r->ops_per_s / r->raw_ops_per_s);
	}
	if (r->rtt_p50_us >= 0)
		snprintf(rtt, sizeof rtt, "%.0f", r->rtt_p50_us);
	if (r->server_calls_per_acq >= 0)
		snprintf(calls, sizeof calls, "%.2f", r->server_calls_per_acq);
	if (cont) {
		snprintf(reacq, sizeof reacq, "%.1f", r->reacquire_pct);
		snprintf(spread, sizeof spread, "%.0f", r->share_spread_pct);
		snprintf(ovl, sizeof ovl, "%llu", (unsigned long long)r->overlaps);
	}
	char cli[16], rcli[16], srv[16], rsrv[16];
	cell_num(cli, sizeof cli, r->client_cpu_us_per_acq, 1);
	cell_num(rcli, sizeof rcli, r->has_raw ? r->raw_client_cpu_us_per_acq : -1, 1);
	cell_num(srv, sizeof srv, r->server_cpu_us_per_acq, 1);
	cell_num(rsrv, sizeof rsrv, r->has_raw ? r->raw_server_cpu_us_per_acq : -1, 1);
	fprintf(out, "%-20s %-11s %3dx%-2d %3d %9.0f %9s %5s %7s %7s %5s %8s %8s %8s %6s %6s %5s %7s %7s %7s %7s %4s\n",
	        r->backend, bench_scenario_name(r->sc), r->clients, r->threads, r->processes, r->ops_per_s, raw, ratio,
	        p50, p99, rtt, h50, h99, cont ? w99 : "-", reacq, spread, calls, cli, rcli, srv, rsrv, ovl);
}

static void scale_row(FILE *out, const struct bench_result *r)
{
	char h50[16], h99[16], w99[16], raw[16] = "-", ratio[16] = "-", cpu[16], rcpu[16], cmds[16], rcmds[16];
	cell_us(h50, sizeof h50, &r->handoff, 50);
	cell_us(h99, sizeof h99, &r->handoff, 99);
	cell_us(w99, sizeof w99, &r->acq, 99);
	cell_num(cpu, sizeof cpu, r->server_cpu_us_per_acq, 1);
	cell_num(cmds, sizeof cmds, r->redis_cmds_per_acq, 1);
	cell_num(rcpu, sizeof rcpu, r->has_raw ? r->raw_server_cpu_us_per_acq : -1, 1);
	cell_num(rcmds, sizeof rcmds, r->has_raw ? r->raw_redis_cmds_per_acq : -1, 1);
	if (r->has_raw) {
		snprintf(raw, sizeof raw, "%.0f", r->raw_ops_per_s);
		if (r->raw_ops_per_s > 0)
			snprintf(ratio, sizeof ratio, "%.2f", r->ops_per_s / r->raw_ops_per_s);
	}
	char cli[16], rcli[16];
	cell_num(cli, sizeof cli, r->client_cpu_us_per_acq, 1);
	cell_num(rcli, sizeof rcli, r->has_raw ? r->raw_client_cpu_us_per_acq : -1, 1);
	fprintf(out, "%-20s %7d %9.0f %9s %5s %8s %8s %8s %6.1f %6.0f %8s %8s %8s %8s %7s %7s %4llu\n", r->backend,
	        r->clients, r->ops_per_s, raw, ratio, h50, h99, w99, r->reacquire_pct, r->share_spread_pct, cpu, rcpu, cmds,
	        rcmds, cli, rcli, (unsigned long long)r->overlaps);
}

static void held_row(FILE *out, const struct bench_result *r)
{
	char mem[16], cpu[16], pct[16];
	cell_num(mem, sizeof mem, r->client_bytes_per_lock, 0);
	cell_num(cpu, sizeof cpu, r->server_cpu_ms, 0);
	cell_num(pct, sizeof pct, held_cpu_pct(r), 1);
	fprintf(out, "%-20s %7d %6.1f %8lld %9.0f %9.1f %6llu %7s %10s %8s %6llu\n", r->backend, r->locks,
	        (double)r->duration_ms / 1000.0, (long long)r->lease_ms, r->ops_per_s, r->renewals_per_s,
	        (unsigned long long)r->locks_lost, mem, cpu, pct, (unsigned long long)r->errors);
}

/*
 * A field of `w` columns for `v`: printf pads by bytes, and the ratio's
 * "—" (no baseline by design, as against "-", no server) is 3 bytes wide.
 */
static int cols(const char *v, int w)
{
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		w += (*p & 0xC0) == 0x80;
	return w;
}

/* The raw side of a semaphore or read-mostly row: ops/s and ratio, "—" where the server has no baseline. */
static void kind_raw_cells(const struct bench_result *r, char *raw, char *ratio, size_t len)
{
	int by_design = strncmp(r->raw_note, "no raw baseline", 15) == 0;
	snprintf(raw, len, "-");
	snprintf(ratio, len, "%s", by_design ? "\u2014" : "-");
	if (r->has_raw) {
		snprintf(raw, len, "%.0f", r->raw_ops_per_s);
		if (r->raw_ops_per_s > 0)
			snprintf(ratio, len, "%.2f", r->ops_per_s / r->raw_ops_per_s);
	}
}

static int kind_unsupported_row(FILE *out, const struct bench_result *r)
{
	if (!r->unsupported)
		return 0;
	fprintf(out, "%-20s %3dx%-2d  %s\n", r->backend, r->clients, r->threads, r->error);
	return 1;
}

static void semaphore_row(FILE *out, const struct bench_result *r)
{
	char h50[16], h99[16], w99[16], raw[16], ratio[16], most[24];
	if (kind_unsupported_row(out, r))
		return;
	cell_us(h50, sizeof h50, &r->handoff, 50);
	cell_us(h99, sizeof h99, &r->handoff, 99);
	cell_us(w99, sizeof w99, &r->acq, 99);
	kind_raw_cells(r, raw, ratio, sizeof raw);
	snprintf(most, sizeof most, "%d/%u", r->most_holders, r->permits);
	fprintf(out, "%-20s %3dx%-2d %3d %7u %9.0f %9s %*s %8s %8s %8s %6.0f %7s\n", r->backend, r->clients, r->threads,
	        r->processes, r->permits, r->ops_per_s, raw, cols(ratio, 5), ratio, h50, h99, w99, r->share_spread_pct,
	        most);
}

static void read_mostly_row(FILE *out, const struct bench_result *r)
{
	char rd99[16], wr99[16], w99[16], raw[16], ratio[16];
	if (kind_unsupported_row(out, r))
		return;
	cell_us(rd99, sizeof rd99, &r->acq_read, 99);
	cell_us(wr99, sizeof wr99, &r->acq_write, 99);
	cell_us(w99, sizeof w99, &r->acq, 99);
	kind_raw_cells(r, raw, ratio, sizeof raw);
	fprintf(out, "%-20s %3dx%-2d %3d %5.0f %9.0f %9s %*s %8s %8s %8s %6.0f %7d %6llu\n", r->backend, r->clients,
	        r->threads, r->processes, r->read_ratio * 100.0, r->ops_per_s, raw, cols(ratio, 5), ratio, rd99, wr99,
	        w99, r->share_spread_pct, r->most_readers, (unsigned long long)r->violations);
}

static void inflight_row(FILE *out, const struct bench_result *r)
{
	char p50[16], p99[16], blk[16], raw[16] = "-", ratio[16] = "-", blk_ratio[16] = "-";
	cell_us(p50, sizeof p50, &r->acq, 50);
	cell_us(p99, sizeof p99, &r->acq, 99);
	cell_num(blk, sizeof blk, r->has_blocking ? r->blocking_ops_per_s : -1, 0);
	if (r->has_raw) {
		snprintf(raw, sizeof raw, "%.0f", r->raw_ops_per_s);
		if (r->raw_ops_per_s > 0) {
			snprintf(ratio, sizeof ratio, "%.2f", r->ops_per_s / r->raw_ops_per_s);
			snprintf(blk_ratio, sizeof blk_ratio, "%.2f", r->blocking_ops_per_s / r->raw_ops_per_s);
		}
	}
	fprintf(out, "%-20s %5d %9.0f %9s %9s %5s %5s %7s %7s %5d %5d %5d %6d\n", r->backend, r->inflight, r->ops_per_s,
	        blk, raw, ratio, blk_ratio, p50, p99, r->threads_seen, r->fds_seen, r->sockets_seen,
	        r->loop_native);
}

static void fault_row(FILE *out, const struct bench_result *r)
{
	char faults[256] = "";
	size_t o = 0;
	for (int i = 0; i < r->nfaults && o < sizeof faults; i++)
		o += (size_t)snprintf(faults + o, sizeof faults - o, "%s%s %lldms/%llu", i ? ", " : "",
		                      r->faults[i].what, (long long)r->faults[i].unavailable_ms,
		                      (unsigned long long)r->faults[i].overlaps);
	fprintf(out, "%-20s %8llu %8llu %8llu %8llu %8llu %10lld  %s\n", r->backend, (unsigned long long)r->ops,
	       (unsigned long long)r->overlaps, (unsigned long long)r->stale_rejected,
	       (unsigned long long)r->lost_reported, (unsigned long long)r->lost_updates, (long long)r->unavailable_ms,
	       faults);
}

void bench_print_table(FILE *out, const struct bench_result *r, int n)
{
	int perf = 0, scale = 0, held = 0, faults = 0;
	for (int i = 0; i < n; i++) {
		if (r[i].failed)
			continue;
		if (r[i].sc == BENCH_UNCONTENDED || r[i].sc == BENCH_CONTENDED) {
			if (!perf++)
				fprintf(out,
				        "%-20s %-11s %6s %3s %9s %9s %5s %7s %7s %5s %8s %8s %8s %6s %6s %5s %7s %7s %7s %7s %4s\n",
				        "backend", "scenario", "c x t", "prc", "ops/s", "raw ops/s", "ratio", "p50 us", "p99 us", "rtt",
				        "hand p50", "hand p99", "wait p99", "reacq%", "spread", "calls", "cli us", "raw cli", "srv us",
				        "raw srv", "ovl");
			perf_row(out, &r[i]);
		}
	}
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != BENCH_SCALE)
			continue;
		if (!scale++)
			fprintf(out, "%s%-20s %7s %9s %9s %5s %8s %8s %8s %6s %6s %8s %8s %8s %8s %7s %7s %4s\n",
			        perf ? "\n" : "", "scale", "waiters", "ops/s", "raw ops/s", "ratio", "hand p50", "hand p99",
			        "wait p99", "reacq%", "spread", "cpu us", "raw cpu", "cmds", "raw cmds", "cli us", "raw cli", "ovl");
		scale_row(out, &r[i]);
	}
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != BENCH_HELD)
			continue;
		if (!held++)
			fprintf(out, "%s%-20s %7s %6s %8s %9s %9s %6s %7s %10s %8s %6s\n", perf || scale ? "\n" : "", "held",
			        "locks", "hold s", "lease ms", "acq/s", "renew/s", "lost", "B/lock", "srv cpu ms", "srv cpu%",
			        "errors");
		held_row(out, &r[i]);
	}
	int sem = 0, rw = 0;
	for (int i = 0; i < n; i++) {
		if ((r[i].failed && !r[i].unsupported) || r[i].sc != BENCH_SEMAPHORE)
			continue;
		if (!sem++)
			fprintf(out, "%s%-20s %6s %3s %7s %9s %9s %5s %8s %8s %8s %6s %7s\n", perf || scale || held ? "\n" : "",
			        "semaphore", "c x t", "prc", "permits", "ops/s", "raw ops/s", "ratio", "hand p50", "hand p99",
			        "wait p99", "spread", "most/N");
		semaphore_row(out, &r[i]);
	}
	for (int i = 0; i < n; i++) {
		if ((r[i].failed && !r[i].unsupported) || r[i].sc != BENCH_READ_MOSTLY)
			continue;
		if (!rw++)
			fprintf(out, "%s%-20s %6s %3s %5s %9s %9s %5s %8s %8s %8s %6s %7s %6s\n",
			        perf || scale || held || sem ? "\n" : "", "read-mostly", "c x t", "prc", "read%", "ops/s",
			        "raw ops/s", "ratio", "rd p99", "wr p99", "wait p99", "spread", "readers", "wr ovl");
		read_mostly_row(out, &r[i]);
	}
	int inflight = 0;
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != BENCH_INFLIGHT)
			continue;
		if (!inflight++)
			fprintf(out, "%s%-20s %5s %9s %9s %9s %5s %5s %7s %7s %5s %5s %5s %6s\n",
			        perf || scale || held || sem || rw ? "\n" : "", "inflight", "N", "ops/s", "block/s",
			        "raw ops/s", "ratio", "blk/r", "p50 us", "p99 us", "thr", "fds", "conns", "native");
		inflight_row(out, &r[i]);
	}
	for (int i = 0; i < n; i++) {
		if (r[i].failed || r[i].sc != BENCH_FAULTS)
			continue;
		if (!faults++)
			fprintf(out, "\n%-20s %8s %8s %8s %8s %8s %10s  %s\n", "faults", "acquired", "overlaps", "stale", "lost",
			       "lostupd", "unavail ms", "per fault: unavailable ms / overlaps");
		fault_row(out, &r[i]);
	}
	for (int i = 0; i < n; i++)
		if (r[i].failed && !r[i].unsupported)
			fprintf(out, "%s %s %s: %s\n", r[i].failed == 2 ? "skipped" : "FAILED", r[i].uri,
			       bench_scenario_name(r[i].sc), r[i].error);
	fflush(out);
}
