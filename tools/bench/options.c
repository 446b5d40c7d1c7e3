/*
 * The command line of dlock-bench.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char *const scenario_names[BENCH_SCENARIOS] = {
	[BENCH_UNCONTENDED] = "uncontended",
	[BENCH_CONTENDED] = "contended",
	[BENCH_FAULTS] = "faults",
	[BENCH_SCALE] = "scale",
	[BENCH_HELD] = "held",
	[BENCH_SEMAPHORE] = "semaphore",
	[BENCH_READ_MOSTLY] = "read-mostly",
	[BENCH_INFLIGHT] = "inflight",
};

const char *bench_scenario_name(enum bench_scenario sc)
{
	return sc < BENCH_SCENARIOS ? scenario_names[sc] : "?";
}

static void usage(FILE *f)
{
	fputs("usage: dlock-bench --uri URI [--uri URI]... [OPTION]...\n"
	      "\n"
	      "Runs the same lock workloads against every URI, and against a hand-written\n"
	      "client of the same server (raw), and prints one table (or JSON lines).\n"
	      "\n"
	      "  --uri URI             a backend to measure (repeatable)\n"
	      "  --server-stop CMD     shell command that stops the server of the last --uri\n"
	      "  --server-start CMD    shell command that starts it again (faults: restart)\n"
	      "  --failover CMD        shell command that fails the server of the last --uri over\n"
	      "                      to a replica and returns once the new one serves\n"
	      "                      (faults: failover, last; the URI must reach the new server)\n"
	      "                      Each sees DLOCK_BENCH_LOCK, the name the faults scenario locks\n"
	      "  --server-pids CMD     shell command that prints the PIDs of the server processes of the\n"
	      "                      last --uri (their children are counted too): scale, held measure\n"
	      "                      the servers' CPU time from /proc (without it: unknown)\n"
	      "  --scenario NAME       uncontended, contended, faults, scale, held, semaphore, read-mostly,\n"
	      "                      inflight or all (repeatable; default: uncontended, contended and faults)\n"
	      "  --clients N[,N...]    independent dlock clients, one run per value (default 1; semaphore\n"
	      "                      and read-mostly: 16); NxT: N clients with T threads each\n"
	      "  --threads T           threads per client (default 1)\n"
	      "  --processes P         spread the clients over P processes (default 1; at most one per client;\n"
	      "                      semaphore and read-mostly: one per client)\n"
	      "  --duration T          length of each measured phase (default 5s; a bare number is seconds)\n"
	      "  --cs-us N             contended, scale, semaphore, read-mostly: busy critical section of N\n"
	      "                      microseconds (default 0)\n"
	      "  --permits N           semaphore: permits of the one semaphore the clients share (default 4)\n"
	      "  --read-ratio R        read-mostly: share of shared (reader) acquisitions, 0 to 1 (default 0.9)\n"
	      "  --waiters N[,N...]    scale: clients on one name, one process each, one run per value\n"
	      "                      (default 8,32,64)\n"
	      "  --held N[,N...]       held: locks one client holds, one run per value (default 1000)\n"
	      "  --hold T              held: how long it holds them (default 30s)\n"
	      "  --inflight N[,N...]   inflight: names one thread keeps acquired-and-released in flight\n"
	      "                      through a loop client, beside N blocking threads and N raw\n"
	      "                      connections (up to 256; above, the loop alone); one run per value,\n"
	      "                      1..1000 (default 1,8,64); each row shows DLOCK_FEATURE_LOOP_NATIVE\n"
	      "  --fencing on|off      uncontended, contended, scale, held, inflight: take a fencing token\n"
	      "                      with every acquisition, dlock and raw alike (default on, as dlock's\n"
	      "                      default; faults always do)\n"
	      "  --lease T             faults: lease of each acquisition (default 2s); held: likewise\n"
	      "                      (default the URI's ttl)\n"
	      "  --fault-clients N     faults: worker processes (default 3)\n"
	      "  --json                one JSON object per line per (backend, scenario, clients)\n"
	      "  --table FILE          write the table to FILE too (useful with --json)\n"
	      "  --plot DIR            write PNG charts (gnuplot) and their data to DIR\n"
	      "  --help\n",
	      f);
}

static int bad(const char *fmt, const char *arg)
{
	fprintf(stderr, "dlock-bench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	usage(stderr);
	return -1;
}

static int positive(const char *text, int max, int *out)
{
	char *end;
	long v = strtol(text, &end, 10);
	if (end == text || *end || v < 1 || v > max)
		return -1;
	*out = (int)v;
	return 0;
}

static int ratio(const char *text, double *out)
{
	char *end;
	double v = strtod(text, &end);
	if (end == text || *end || !(v >= 0 && v <= 1))
		return -1;
	*out = v;
	return 0;
}

static int client_list(struct bench_opts *o, const char *text)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%s", text);
	o->nclients = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *x = strchr(tok, 'x');
		int i = o->nclients++;
		if (i >= BENCH_MAX_SIZES)
			return -1;
		o->size_threads[i] = 0;
		if (x) {
			*x = '\0';
			if (positive(x + 1, 64, &o->size_threads[i]) != 0)
				return -1;
		}
		if (positive(tok, BENCH_MAX_WORKERS, &o->clients[i]) != 0)
			return -1;
	}
	return o->nclients ? 0 : -1;
}

/* A comma-separated list of counts 1..max, at most BENCH_MAX_SIZES. */
static int count_list(const char *text, int max, int *out, int *n)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%s", text);
	*n = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (*n >= BENCH_MAX_SIZES || positive(tok, max, &out[*n]) != 0)
			return -1;
		(*n)++;
	}
	return *n ? 0 : -1;
}

static int scenario_arg(struct bench_opts *o, const char *name, int *any)
{
	int all = strcmp(name, "all") == 0, found = all;
	for (int i = 0; i < BENCH_SCENARIOS; i++) {
		if (all || strcmp(name, scenario_names[i]) == 0) {
			o->scenario[i] = 1;
			found = 1;
		}
	}
	*any = 1;
	return found ? 0 : -1;
}

enum { OPT_URI = 256, OPT_STOP, OPT_START, OPT_FAILOVER, OPT_SERVER_PIDS, OPT_SCENARIO, OPT_CLIENTS, OPT_THREADS,
       OPT_PROCESSES, OPT_DURATION, OPT_CS, OPT_WAITERS, OPT_HELD, OPT_HOLD, OPT_FENCING, OPT_LEASE, OPT_FAULT_CLIENTS,
       OPT_JSON, OPT_TABLE, OPT_PLOT, OPT_HELP, OPT_PERMITS, OPT_READ_RATIO, OPT_INFLIGHT };

/* --server-stop, --server-start, --failover or --server-pids: a command for the last --uri. */
static int target_cmd(struct bench_opts *o, int opt, const char *cmd)
{
	if (o->ntargets == 0 || !*cmd)
		return -1;
	struct bench_target *t = &o->targets[o->ntargets - 1];
	*(opt == OPT_STOP ? &t->server_stop : opt == OPT_START ? &t->server_start : opt == OPT_FAILOVER ? &t->failover
	                                                                                              : &t->server_pids) = cmd;
	return 0;
}

static const char *cmd_option(int opt)
{
	return opt == OPT_STOP ? "--server-stop" : opt == OPT_START ? "--server-start" : opt == OPT_FAILOVER ? "--failover"
	                                                                                                    : "--server-pids";
}

static const struct option long_options[] = {
	{ "uri", required_argument, NULL, OPT_URI },
	{ "server-stop", required_argument, NULL, OPT_STOP },
	{ "server-start", required_argument, NULL, OPT_START },
	{ "failover", required_argument, NULL, OPT_FAILOVER },
	{ "server-pids", required_argument, NULL, OPT_SERVER_PIDS },
	{ "scenario", required_argument, NULL, OPT_SCENARIO },
	{ "clients", required_argument, NULL, OPT_CLIENTS },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "processes", required_argument, NULL, OPT_PROCESSES },
	{ "duration", required_argument, NULL, OPT_DURATION },
	{ "cs-us", required_argument, NULL, OPT_CS },
	{ "waiters", required_argument, NULL, OPT_WAITERS },
	{ "held", required_argument, NULL, OPT_HELD },
	{ "hold", required_argument, NULL, OPT_HOLD },
	{ "fencing", required_argument, NULL, OPT_FENCING },
	{ "lease", required_argument, NULL, OPT_LEASE },
	{ "fault-clients", required_argument, NULL, OPT_FAULT_CLIENTS },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "table", required_argument, NULL, OPT_TABLE },
	{ "plot", required_argument, NULL, OPT_PLOT },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "permits", required_argument, NULL, OPT_PERMITS },
	{ "read-ratio", required_argument, NULL, OPT_READ_RATIO },
	{ "inflight", required_argument, NULL, OPT_INFLIGHT },
	{ NULL, 0, NULL, 0 },
};

/* One option; 0, -1 on a bad value, 1 for --help. */
static int apply(struct bench_opts *o, int opt, const char *arg, int *any_scenario)
{
	switch (opt) {
	case OPT_URI:
		if (o->ntargets >= BENCH_MAX_URIS)
			return bad("at most 16 --uri", "");
		o->targets[o->ntargets++] = (struct bench_target){ .uri = arg };
		return 0;
	case OPT_STOP:
	case OPT_START:
	case OPT_FAILOVER:
	case OPT_SERVER_PIDS:
		return target_cmd(o, opt, arg) == 0 ? 0 : bad("%s must follow a --uri and name a command", cmd_option(opt));
	case OPT_SCENARIO:
		return scenario_arg(o, arg, any_scenario) == 0 ? 0 : bad("unknown scenario '%s'", arg);
	case OPT_CLIENTS:
		o->clients_given = 1;
		return client_list(o, arg) == 0 ? 0 : bad("--clients: '%s' is not a list of counts (1..256)", arg);
	case OPT_THREADS:
		return positive(arg, 64, &o->threads) == 0 ? 0 : bad("--threads: '%s' is not 1..64", arg);
	case OPT_PROCESSES:
		o->processes_given = 1;
		return positive(arg, BENCH_MAX_WORKERS, &o->processes) == 0 ? 0 : bad("--processes: bad value '%s'", arg);
	case OPT_FAULT_CLIENTS:
		return positive(arg, 32, &o->fault_clients) == 0 ? 0 : bad("--fault-clients: '%s' is not 1..32", arg);
	case OPT_CS:
		return positive(arg, 1000000, &o->cs_us) == 0 ? 0 : bad("--cs-us: bad value '%s'", arg);
	case OPT_WAITERS:
		return count_list(arg, BENCH_MAX_WORKERS, o->waiters, &o->nwaiters) == 0
		               ? 0 : bad("--waiters: '%s' is not a list of counts (1..256)", arg);
	case OPT_HELD:
		return count_list(arg, BENCH_MAX_HELD, o->held, &o->nheld) == 0
		               ? 0 : bad("--held: '%s' is not a list of counts (1..1000000)", arg);
	case OPT_INFLIGHT:
		return count_list(arg, BENCH_MAX_INFLIGHT, o->inflight, &o->ninflight) == 0
		               ? 0 : bad("--inflight: '%s' is not a list of counts (1..1000)", arg);
	case OPT_HOLD:
		return dlock_duration_parse(arg, 1000, &o->hold_ms) == DLOCK_OK && o->hold_ms >= 100
		               ? 0 : bad("--hold: '%s' is not a duration of 100ms or more", arg);
	case OPT_FENCING:
		if (strcmp(arg, "on") != 0 && strcmp(arg, "off") != 0)
			return bad("--fencing: '%s' is not on or off", arg);
		o->fencing = strcmp(arg, "on") == 0;
		return 0;
	case OPT_DURATION:
		return dlock_duration_parse(arg, 1000, &o->duration_ms) == DLOCK_OK && o->duration_ms >= 100
		               ? 0 : bad("--duration: '%s' is not a duration of 100ms or more", arg);
	case OPT_LEASE:
		o->lease_given = 1;
		return dlock_duration_parse(arg, 1000, &o->lease_ms) == DLOCK_OK && o->lease_ms >= 100
		               ? 0 : bad("--lease: '%s' is not a duration of 100ms or more", arg);
	case OPT_PERMITS: {
		int n;
		if (positive(arg, DLOCK_PERMITS_MAX, &n) != 0)
			return bad("--permits: '%s' is not 1..1024", arg);
		o->permits = (uint32_t)n;
		return 0;
	}
	case OPT_READ_RATIO:
		return ratio(arg, &o->read_ratio) == 0 ? 0 : bad("--read-ratio: '%s' is not a number from 0 to 1", arg);
	case OPT_JSON:
		o->json = 1;
		return 0;
	case OPT_TABLE:
		o->table_path = arg;
		return 0;
	case OPT_PLOT:
		o->plot_dir = arg;
		return 0;
	case OPT_HELP:
		usage(stdout);
		return 1;
	default:
		return bad("unknown option%s", "");
	}
}

int bench_opts_parse(struct bench_opts *o, int argc, char **argv)
{
	int opt, any_scenario = 0;
	*o = (struct bench_opts){ .clients = { 1 }, .nclients = 1, .threads = 1, .processes = 1, .fault_clients = 3,
		                  .waiters = { 8, 32, 64 }, .nwaiters = 3, .held = { 1000 }, .nheld = 1,
		                  .inflight = { 1, 8, 64 }, .ninflight = 3,
		                  .fencing = 1, .duration_ms = 5000, .hold_ms = 30000, .lease_ms = 2000, .permits = 4,
		                  .read_ratio = 0.9 };
	while ((opt = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
		int rc = apply(o, opt, optarg, &any_scenario);
		if (rc != 0)
			return rc;
	}
	if (optind < argc)
		return bad("unexpected argument '%s'", argv[optind]);
	if (o->ntargets == 0)
		return bad("no --uri given%s", "");
	for (int i = 0; i < o->nclients; i++)
		if ((o->size_threads[i] ? o->size_threads[i] : o->threads) * o->clients[i] > BENCH_MAX_WORKERS)
			return bad("too many workers (clients x threads > 256)%s", "");
	if ((o->scenario[BENCH_SEMAPHORE] || o->scenario[BENCH_READ_MOSTLY]) && !o->clients_given &&
	    BENCH_KIND_CLIENTS * o->threads > BENCH_MAX_WORKERS)
		return bad("too many workers (16 clients x threads > 256)%s", "");
	/* By default the scenarios of every run; the others are asked for by name (or all). */
	for (int i = 0; !any_scenario && i <= BENCH_FAULTS; i++)
		o->scenario[i] = 1;
	return 0;
}
