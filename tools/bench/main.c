/*
 * dlock-bench: for each --uri, each scenario and each client count, one
 * measurement; results go to stdout as they complete with --json, else as
 * one table at the end; --plot draws the charts.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"

/* RedLock: several hosts after redis:// or rediss:// (a scheme without a topology), past any user:password@. */
static int is_redlock(const char *uri, const char *backend)
{
	size_t n = strcspn(uri, ":");
	if (strcmp(backend, "redis") != 0 || memchr(uri, '+', n) || strncmp(uri + n, "://", 3) != 0)
		return 0;
	const char *a = uri + n + 3;
	size_t len = strcspn(a, "/?#");
	for (const char *at; (at = memchr(a, '@', len)) != NULL; a = at + 1)
		len -= (size_t)(at + 1 - a);
	return memchr(a, ',', len) != NULL;
}

/*
 * The backend's name, or the URI's scheme where it names a topology or TLS
 * on the same backend: "rediss", "redis-sentinel", "redis-cluster" ('+'
 * becomes '-'), so that a table tells a cluster from a single server; and
 * "redlock" ("rediss-redlock") for Redis over several independent servers.
 */
static void backend_kind(const char *uri, const char *backend, char *out, size_t len)
{
	size_t n = strcspn(uri, ":"), b = strlen(backend);
	int topology = memchr(uri, '+', n) != NULL, tls = n == b + 1 && uri[b] == 's';
	if (is_redlock(uri, backend)) {
		snprintf(out, len, "%s", tls ? "rediss-redlock" : "redlock");
		return;
	}
	if (n <= b || n >= len || strncmp(uri, backend, b) != 0 || !(topology || tls)) {
		snprintf(out, len, "%s", backend);
		return;
	}
	memcpy(out, uri, n);
	for (size_t i = 0; i < n; i++)
		if (out[i] == '+')
			out[i] = '-';
	out[n] = '\0';
}

/* What the bench learns from the backend before forking (no client stays open). */
static int describe(const struct bench_opts *o, const struct bench_target *t, struct bench_result *proto,
                    dlock_capabilities *caps)
{
	dlock_client *c = NULL;
	char err[256];
	memset(proto, 0, sizeof *proto);
	if (dlock_client_open(&c, t->uri, NULL, err, sizeof err) != DLOCK_OK) {
		/* The library masks the password in its message; the URI itself is not printed. */
		snprintf(proto->error, sizeof proto->error, "%s", err);
		snprintf(proto->uri, sizeof proto->uri, "(could not open)");
		return -1;
	}
	dlock_client_capabilities(c, caps);
	snprintf(proto->uri, sizeof proto->uri, "%s", dlock_client_uri(c));
	/* PostgreSQL's two modes, and Redis with its queue, are different lock mechanisms: tell them
	 * apart in tables and charts (a fair backend is fair anyway: only an option that makes it so counts). */
	char mode[16], fair[8], kind[16];
	int row = bench_uri_param(t->uri, "mode", mode, sizeof mode) == 0 && strcmp(mode, "row") == 0;
	int fair_opt = bench_uri_param(t->uri, "fair", fair, sizeof fair) == 0 && caps->fair;
	/* Redis's two ways of waking waiters: the queue (its default on one server) or pub/sub (fair=0). */
	int pubsub = strcmp(caps->backend, "redis") == 0 && caps->wakeup == DLOCK_WAKEUP_NOTIFY;
	backend_kind(t->uri, caps->backend, kind, sizeof kind);
	snprintf(proto->backend, sizeof proto->backend, "%s%s%s%s%s", kind, row ? "-row" : "", fair_opt ? "-fair" : "",
	         pubsub ? "-pubsub" : "", o->fencing ? "" : "+notoken");
	proto->fencing = o->fencing;
	dlock_client_close(c);
	return 0;
}

static void emit(const struct bench_opts *o, const struct bench_result *r)
{
	if (o->json) {
		bench_print_json(r);
		fflush(stdout);
	} else if (r->failed == 1) {
		fprintf(stderr, "dlock-bench: %s %s: %s\n", r->uri, bench_scenario_name(r->sc), r->error);
	}
}

/*
 * A run of the semaphore or read-mostly scenario: a "not supported" row
 * (no failure) when the backend has no such kind.
 */
static int run_kind(const struct bench_opts *o, const struct bench_target *t, const dlock_capabilities *caps,
                    enum bench_scenario sc, int clients, int threads, int index, struct bench_result *r)
{
	int rc = bench_kind_supported(o, t->uri, sc, r->error, sizeof r->error);
	if (rc <= 0) {
		r->sc = sc;
		r->clients = clients;
		r->threads = threads;
		r->permits = sc == BENCH_SEMAPHORE ? o->permits : 0;
		r->read_ratio = o->read_ratio;
		r->unsupported = rc == 0;
		r->failed = rc == 0 ? 2 : 1;
		return rc == 0 ? 0 : -1;
	}
	return bench_run_perf(o, t, r->uri, caps, sc, clients, threads, index, r);
}

/* Every run of one target; returns the number of results added, *failures counts failed runs. */
static int run_target(const struct bench_opts *o, const struct bench_target *t, struct bench_result *out,
                      int *index, int *failures)
{
	struct bench_result proto;
	dlock_capabilities caps;
	int n = 0;
	if (describe(o, t, &proto, &caps) != 0) {
		proto.failed = 1;
		out[n++] = proto;
		emit(o, &proto);
		(*failures)++;
		return n;
	}
	if (o->scenario[BENCH_UNCONTENDED] || o->scenario[BENCH_CONTENDED] || o->scenario[BENCH_SCALE] ||
	    o->scenario[BENCH_READ_MOSTLY] || o->scenario[BENCH_INFLIGHT])
		bench_warm_up(o, t, proto.uri, &caps, (*index)++);
	for (int sc = BENCH_UNCONTENDED; sc <= BENCH_CONTENDED; sc++) {
		for (int i = 0; o->scenario[sc] && i < o->nclients; i++) {
			struct bench_result *r = &out[n++];
			*r = proto;
			int threads = o->size_threads[i] ? o->size_threads[i] : o->threads;
			if (bench_run_perf(o, t, proto.uri, &caps, sc, o->clients[i], threads, (*index)++, r) != 0)
				(*failures)++;
			emit(o, r);
		}
	}
	for (int i = 0; o->scenario[BENCH_SCALE] && i < o->nwaiters; i++) {
		struct bench_result *r = &out[n++];
		*r = proto;
		if (bench_run_perf(o, t, proto.uri, &caps, BENCH_SCALE, o->waiters[i], 1, (*index)++, r) != 0)
			(*failures)++;
		emit(o, r);
	}
	/* Without --clients, one run of BENCH_KIND_CLIENTS clients. */
	for (int sc = BENCH_SEMAPHORE; sc <= BENCH_READ_MOSTLY; sc++) {
		for (int i = 0; o->scenario[sc] && i < (o->clients_given ? o->nclients : 1); i++) {
			struct bench_result *r = &out[n++];
			*r = proto;
			int clients = o->clients_given ? o->clients[i] : BENCH_KIND_CLIENTS;
			int threads = o->clients_given && o->size_threads[i] ? o->size_threads[i] : o->threads;
			if (run_kind(o, t, &caps, (enum bench_scenario)sc, clients, threads, (*index)++, r) != 0)
				(*failures)++;
			emit(o, r);
		}
	}
	for (int i = 0; o->scenario[BENCH_INFLIGHT] && i < o->ninflight; i++) {
		struct bench_result *r = &out[n++];
		*r = proto;
		if (bench_run_inflight(o, t, o->inflight[i], (*index)++, r) != 0)
			(*failures)++;
		emit(o, r);
	}
	for (int i = 0; o->scenario[BENCH_HELD] && i < o->nheld; i++) {
		struct bench_result *r = &out[n++];
		*r = proto;
		if (bench_run_held(o, t, o->held[i], (*index)++, r) != 0)
			(*failures)++;
		emit(o, r);
	}
	if (o->scenario[BENCH_FAULTS]) {
		struct bench_result *r = &out[n++];
		*r = proto;
		if (bench_run_faults(o, t, &caps, (*index)++, r) != 0)
			(*failures)++;
		emit(o, r);
	}
	return n;
}

static int write_table(const char *path, const struct bench_result *r, int n)
{
	FILE *f = fopen(path, "we");
	if (!f) {
		fprintf(stderr, "dlock-bench: cannot write %s\n", path);
		return -1;
	}
	bench_print_table(f, r, n);
	return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	int rc = bench_opts_parse(&o, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	/* A server killed under a worker must not kill the bench with it. */
	signal(SIGPIPE, SIG_IGN);
	size_t per_target = (size_t)(4 * o.nclients + o.nwaiters + o.nheld + o.ninflight + 1);
	struct bench_result *results = calloc((size_t)o.ntargets * per_target, sizeof *results);
	if (!results) {
		fprintf(stderr, "dlock-bench: out of memory\n");
		return 1;
	}
	int n = 0, index = 0, failures = 0;
	if (o.plot_dir)
		mkdir(o.plot_dir, 0755); /* fault timelines are written there as they are measured */
	for (int i = 0; i < o.ntargets; i++)
		n += run_target(&o, &o.targets[i], results + n, &index, &failures);
	if (!o.json)
		bench_print_table(stdout, results, n);
	if (o.table_path && write_table(o.table_path, results, n) != 0)
		failures++;
	if (o.plot_dir && bench_plot(o.plot_dir, results, n) != 0)
		failures++;
	free(results);
	return failures ? 1 : 0;
}
