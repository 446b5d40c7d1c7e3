/*
 * dlock-bench: the same lock workloads against every URI it is given, next
 * to a minimal hand-written client of the same server ("raw"), with the
 * results as a table, JSON lines and gnuplot charts.
 *
 * Shape of a run: the parent process is the controller (start gate,
 * progress line, fault injection, results); workers run in child
 * processes, P processes x (N/P clients) x T threads, so that contention is
 * real across processes.  Everything the workers measure goes to one
 * MAP_SHARED region (shared.c) created before fork: counters, latency
 * histograms, and the critical-section intervals from which overlaps are
 * found.  All times are CLOCK_MONOTONIC, which is one clock for every
 * process of the host.
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <dlock/dlock.h>

#define BENCH_MAX_URIS 16
#define BENCH_MAX_SIZES 8
#define BENCH_MAX_WORKERS 256
#define BENCH_MAX_FAULTS 4
#define BENCH_MAX_SERVER_PIDS 64
#define BENCH_MAX_HELD 1000000
#define BENCH_MAX_INFLIGHT 1000
#define BENCH_NS_PER_MS 1000000LL
#define BENCH_NS_PER_S 1000000000LL

enum bench_scenario { BENCH_UNCONTENDED, BENCH_CONTENDED, BENCH_FAULTS, BENCH_SCALE, BENCH_HELD, BENCH_SEMAPHORE,
	              BENCH_READ_MOSTLY, BENCH_INFLIGHT, BENCH_SCENARIOS };

/* The scenarios whose workers all take one name: the contended workload, with few waiters or many. */
static inline int bench_one_name(enum bench_scenario sc)
{
	return sc == BENCH_CONTENDED || sc == BENCH_SCALE;
}

/*
 * The contended workload on the other kinds of lock, where several holders
 * at once are the point: a semaphore of N permits, a read-write lock taken
 * mostly shared.  Holders are counted in the shared region, not by intervals.
 */
static inline int bench_other_kind(enum bench_scenario sc)
{
	return sc == BENCH_SEMAPHORE || sc == BENCH_READ_MOSTLY;
}

/* Clients of the semaphore and read-mostly scenarios without --clients. */
#define BENCH_KIND_CLIENTS 16

/* ------------------------------------------------------------ options */

struct bench_target {
	const char *uri;          /* as given: may carry a password, never printed */
	const char *server_stop;  /* --server-stop after this --uri, or NULL */
	const char *server_start; /* --server-start after this --uri, or NULL */
	const char *failover;     /* --failover after this --uri, or NULL */
	const char *server_pids;  /* --server-pids after this --uri, or NULL: server CPU unknown */
};

struct bench_opts {
	struct bench_target targets[BENCH_MAX_URIS];
	int ntargets;
	int scenario[BENCH_SCENARIOS]; /* 1: run it */
	int clients[BENCH_MAX_SIZES];  /* each value is one run */
	int size_threads[BENCH_MAX_SIZES]; /* its threads per client; 0: --threads */
	int nclients;
	int threads;
	int processes;       /* at most one per client */
	int fault_clients;   /* workers (one process each) of the faults scenario */
	int waiters[BENCH_MAX_SIZES]; /* scale: each value is one run, one client per process */
	int nwaiters;
	int held[BENCH_MAX_SIZES];    /* held: locks held by one client, one run per value */
	int nheld;
	int inflight[BENCH_MAX_SIZES]; /* inflight: names kept in flight by one loop thread, one run per value */
	int ninflight;
	int64_t duration_ms; /* of each measured phase */
	int64_t hold_ms;     /* held: how long the locks are held */
	int64_t lease_ms;    /* lease of the faults' (and with lease_given, held's) acquisitions */
	int lease_given;     /* --lease was given: held uses it, else the URI's ttl */
	int cs_us;           /* critical section of the contended, scale, semaphore and read-mostly scenarios */
	int clients_given;   /* --clients was given: semaphore and read-mostly use it, else BENCH_KIND_CLIENTS */
	int processes_given; /* --processes was given: semaphore and read-mostly use it, else one per client */
	uint32_t permits;    /* semaphore: N */
	double read_ratio;   /* read-mostly: share of the acquisitions that are shared */
	int fencing;         /* uncontended, contended, scale, held: acquisitions, dlock's and raw's, take tokens */
	int json;
	const char *table_path; /* --table: the table to this file as well */
	const char *plot_dir;
};

int bench_opts_parse(struct bench_opts *o, int argc, char **argv);
const char *bench_scenario_name(enum bench_scenario sc);

/* ------------------------------------------------------------ clock, histograms */

int64_t bench_now_ns(void);
void bench_sleep_ns(int64_t ns);

/* Log-linear histogram of nanoseconds: 32 sub-buckets per power of two (3% resolution). */
#define BENCH_HIST_SUB_BITS 5
#define BENCH_HIST_BUCKETS (60 * (1 << BENCH_HIST_SUB_BITS))

struct bench_hist {
	uint64_t count;
	int64_t max_ns;
	uint64_t b[BENCH_HIST_BUCKETS];
};

void bench_hist_add(struct bench_hist *h, int64_t ns);
void bench_hist_merge(struct bench_hist *into, const struct bench_hist *h);
/* The pct-th percentile in microseconds; -1 when the histogram is empty. */
double bench_hist_pct_us(const struct bench_hist *h, double pct);

/* ------------------------------------------------------------ shared region */

struct bench_interval {
	int64_t start_ns; /* dlock_acquire() returned */
	int64_t end_ns;   /* dlock_release() is about to be called */
	int32_t worker;
	int32_t flags;    /* BENCH_IV_* */
};

#define BENCH_IV_WRITE_OK 1       /* faults: the fenced write was accepted */
#define BENCH_IV_WRITE_REJECTED 2 /* faults: the store refused a stale token */
#define BENCH_IV_RELEASE_NOTHELD 4
#define BENCH_IV_OVERLAP 256       /* set by bench_sweep() */

/* One worker thread's results; written only by that thread. */
struct bench_slot {
	_Atomic uint64_t ops; /* completed cycles inside the measured window (progress line) */
	uint64_t errors;
	uint64_t reacquired;  /* contended: acquired right after releasing it ourselves */
	uint64_t nint;        /* intervals recorded */
	uint64_t dropped;     /* intervals that did not fit */
	/* dlock client counters, filled by the client's first thread */
	uint64_t st_acquired, st_server_acquires, st_server_releases;
	int has_stats;
	struct bench_hist acq, rel, handoff;
	struct bench_hist acq_read, acq_write; /* read-mostly: acq, shared and exclusive apart */
	char err[200];
	/* held: what the one worker saw of its locks (ops: locks acquired) */
	_Atomic uint64_t released;
	uint64_t renewals, lost_reported, release_notheld, locks_lost;
	int64_t acquire_ns, hold_ns; /* the acquiring part; the hold, from all held to told to release */
	int64_t rss_before, rss_held; /* bytes: before the first acquisition, at the end of the hold */
	/* inflight: the loop side's process, the most seen in /proc/self (task, fd, fd that is a socket) */
	int threads_seen, fds_seen, sockets_seen;
	int loop_native; /* DLOCK_FEATURE_LOOP_NATIVE of its client */
};

enum bench_fault_req { BENCH_REQ_NONE, BENCH_REQ_PAUSE, BENCH_REQ_HOLD };
/* held: acquiring (worker), holding (worker: all held), release (controller: the hold is over), done (worker) */
enum bench_held_state { BENCH_HELD_ACQUIRING, BENCH_HELD_HOLDING, BENCH_HELD_RELEASE, BENCH_HELD_DONE };
/* held: how often a wait for the other side also looks at stop, failure and progress */
#define BENCH_HELD_LOOK_NS (100 * BENCH_NS_PER_MS)
enum bench_fault_state { BENCH_FS_IDLE, BENCH_FS_PARKED, BENCH_FS_RESUME };

struct bench_shared {
	_Atomic int go, stop, ready, failed;
	_Atomic int64_t stop_ns; /* ops completing later are not counted */
	int64_t go_ns;
	/* The last release of the contended name: who, and when (just before dlock_release). */
	_Atomic int64_t last_release_ns;
	_Atomic int last_releaser;
	/* faults: the controller asks, the next holder that reads the counter answers */
	_Atomic int fault_request;
	_Atomic int fault_state;
	_Atomic int fault_pid;
	_Atomic uint64_t lost_reported;
	/* held: a bench_held_state, moved on by the worker and the controller in turn */
	_Atomic int held_state;
	/*
	 * semaphore, read-mostly: holders inside the critical section now (a
	 * read-write lock's readers and writers apart), the most seen at once,
	 * and entries that found more than the lock allows (a semaphore: more
	 * than N; a writer: anyone beside it).
	 */
	_Atomic int holders, readers, writers;
	_Atomic int most_holders, most_readers;
	_Atomic uint64_t violations;
	/* the worker processes' own CPU time (user + system, every thread) from go to their last cycle, in µs */
	_Atomic int64_t client_cpu_us;
	int nworkers;
	uint64_t int_cap; /* intervals per worker */
	size_t size;
	struct bench_slot slots[];
};

struct bench_shared *bench_shared_new(int nworkers, int want_intervals);
void bench_shared_free(struct bench_shared *sh);
struct bench_interval *bench_intervals(struct bench_shared *sh, int worker);
void bench_interval_add(struct bench_shared *sh, int worker, int64_t start, int64_t end, int flags);
/* Count an error in the worker's slot; the first one's text is kept for the phase's message. */
void bench_slot_error(struct bench_slot *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * A state in the shared region that one process moves on and another
 * awaits: set stores and wakes every waiter (a futex, which works across
 * processes on a shared mapping); wait returns once the state is no longer
 * `seen`, or after `timeout_ns` (so that the waiter can look at other
 * conditions too), or at once when it has already changed.
 */
void bench_state_set(_Atomic int *state, int value);
void bench_state_wait(_Atomic int *state, int seen, int64_t timeout_ns);

/* Overlaps found by sorting every recorded interval by its start. */
struct bench_sweep {
	struct bench_interval *iv; /* all intervals, sorted by start (caller frees) */
	size_t n;
	uint64_t overlaps; /* intervals that began before an earlier one of another worker ended */
	uint64_t dropped;
};

int bench_sweep(struct bench_shared *sh, struct bench_sweep *out);
uint64_t bench_overlaps_between(const struct bench_sweep *s, int64_t from_ns, int64_t to_ns);

/* ------------------------------------------------------------ raw clients */

/*
 * A minimal hand-written client of one server: the same server work as the
 * backend, without dlock.  One connection per worker thread.  Each raw
 * client is one const object; raw_table.c (generated) lists those whose
 * client library was found.
 */
struct bench_raw {
	const char *name;            /* "redis", "postgres", "zookeeper" */
	const char *const *schemes;  /* URI schemes it serves, NULL-terminated */
	const char *what;            /* the server work, for the docs and --help */
	/* The scheme whose comma-separated hosts are seeds of one server (a cluster), or NULL: elsewhere
	 * several hosts are RedLock, an ensemble or failover hosts, which one raw connection does not match. */
	const char *host_list;
	/* Connect for `uri`; NULL with a message (no password in it) on failure.  `fencing`: every
	 * acquisition on this connection takes a fencing token, as dlock's do with fencing on. */
	void *(*connect)(const char *uri, int fencing, char *err, size_t errlen);
	/* 1 acquired, 0 gave up (stop was set), -1 error (message in err). */
	int (*acquire)(void *conn, const char *name, const _Atomic int *stop, char *err, size_t errlen);
	/* 0 released, -1 error. */
	int (*release)(void *conn, const char *name, char *err, size_t errlen);
	/* One cheap round trip: 0 or -1. */
	int (*ping)(void *conn);
	/*
	 * Cut the lock holders' connections or sessions from the server side;
	 * 0 done (what it did in msg), -1 error.  NULL: the backend's session
	 * is ended by a pause past its timeout instead.
	 */
	int (*cut)(void *conn, char *msg, size_t msglen);
	void (*close)(void *conn);
	/*
	 * Commands the server (in a cluster, every master) has run since it
	 * started, but those only dlock-bench itself sends (the counting, the
	 * round-trip probe); 0, or -1 when it does not answer.  NULL: the
	 * server does not count them.
	 */
	int (*commands)(void *conn, uint64_t *calls);
	/*
	 * read-mostly: a shared acquisition of `name` (a reader), and its
	 * release, as acquire and release are the exclusive ones; NULL: the
	 * server has no plain-client read-write lock to compare with.
	 */
	int (*acquire_shared)(void *conn, const char *name, const _Atomic int *stop, char *err, size_t errlen);
	int (*release_shared)(void *conn, const char *name, char *err, size_t errlen);
	/*
	 * inflight: the server's sessions, where each lock in flight holds one
	 * (PostgreSQL): *max its limit (max_connections), *room what is left of
	 * it for a plain role now (less those reserved for superusers and those
	 * open); 0, -1 on error.  NULL: connections are not scarce there.
	 */
	int (*sessions)(void *conn, long *max, long *room);
};

/* The raw client for a URI, or NULL (mem://, file://, RedLock, library not built). */
const struct bench_raw *bench_raw_find(const char *uri);
extern const struct bench_raw *const bench_raw_table[];

/* Helpers for raw clients: host and port of the URI's first host, its query. */
int bench_uri_host(const char *uri, char *host, size_t hostlen, int *port, int default_port);
int bench_uri_param(const char *uri, const char *key, char *out, size_t outlen);

/* ------------------------------------------------------------ server meter */

/*
 * What the servers of one target spent in a window: the CPU time of their
 * processes from /proc (the processes --server-pids prints, their threads,
 * and their children, those that exited included), and the commands they
 * ran when the raw client can count them (Redis: INFO commandstats).  A
 * value that cannot be had is unknown (-1), never 0, and the note says why.
 */
struct bench_meter {
	const char *pids_cmd;        /* --server-pids, or NULL */
	const char *uri;             /* for the raw connection: may carry a password, never printed */
	const struct bench_raw *raw; /* counts the commands when it can; NULL: not counted */
	void *conn;                  /* its connection, opened at the first window, kept until close */
	int npids;
	pid_t pids[BENCH_MAX_SERVER_PIDS];
	unsigned long long started[BENCH_MAX_SERVER_PIDS]; /* a restarted server is another process */
	int64_t ticks0;
	uint64_t calls0;
	int counting_cpu, counting_cmds; /* the window's start was read */
	/* the last window */
	double cpu_us;  /* server CPU time, -1: unknown */
	double cmds;    /* commands, -1: unknown */
	char note[200]; /* why the CPU time is unknown, or "" */
};

/* `raw` NULL: no commands counted. */
void bench_meter_init(struct bench_meter *m, const struct bench_target *t, const struct bench_raw *raw);
/* The window's start: runs --server-pids, reads /proc and the server's counters. */
void bench_meter_begin(struct bench_meter *m);
/* The window's end: cpu_us and cmds of [begin, end], or -1.  Does nothing without a begin. */
void bench_meter_end(struct bench_meter *m);
void bench_meter_close(struct bench_meter *m);

/* ------------------------------------------------------------ phases */

/* One measured phase: one workload, on dlock or on the raw client. */
struct bench_phase {
	const struct bench_opts *o;
	const char *uri;             /* for connecting: may carry a password */
	const char *masked;          /* for display */
	const struct bench_raw *raw; /* NULL: dlock */
	enum bench_scenario sc;
	int clients, threads, processes;
	int64_t duration_ms;
	char name[96];               /* lock name (contended) or its stem */
	const char *fence_path;      /* faults: the shared counter file */
	int64_t lease_ms;            /* 0: the URI's */
	int locks;                   /* held, inflight: how many */
	struct bench_meter *meter;   /* read at the start gate and at stop, or NULL */
	struct bench_shared *sh;
};

/* What the controller does between the start gate and stop (progress, faults). */
typedef void (*bench_control_fn)(struct bench_phase *ph, void *arg);

/* Fork the workers, run `control` (or just wait the duration), collect. -1 on failure (msg in err). */
int bench_phase_run(struct bench_phase *ph, bench_control_fn control, void *arg, char *err, size_t errlen);
/* Sleep until `until_ns` while updating the progress line; 0, or -1 when every worker is gone. */
int bench_progress_until(struct bench_phase *ph, int64_t until_ns, const char *label);
void bench_progress_end(void);

/* Worker loops, run on each worker thread of a child process. */
struct bench_worker {
	struct bench_phase *ph;
	int id;
	dlock_client *client;  /* dlock phases: shared by the client's threads */
	void *raw_conn;        /* raw phases: this thread's connection */
	int first_of_client;
	struct bench_slot *slot;
};

void bench_work_dlock(struct bench_worker *w);
void bench_work_raw(struct bench_worker *w);
void bench_work_faults(struct bench_worker *w);
void bench_work_held(struct bench_worker *w);
void bench_work_kind(struct bench_worker *w);
void bench_work_kind_raw(struct bench_worker *w);
/* inflight: the loop side; opens its own loop client on this thread, before the start gate. */
void bench_work_inflight(struct bench_worker *w);
/* semaphore, read-mostly: 1 when the backend of `uri` has the scenario's kind, 0 not (why in `why`), -1 error. */
int bench_kind_supported(const struct bench_opts *o, const char *uri, enum bench_scenario sc, char *why,
                         size_t whylen);
/* Count one completed cycle that ended inside the measured window (its acquire and release times). */
void bench_count_cycle(struct bench_worker *w, int64_t acquire_ns, int64_t release_ns, int64_t t2);
/* The contended name's handoff bookkeeping, shared by dlock and raw loops. */
void bench_note_acquired(struct bench_worker *w, int64_t t_call, int64_t t_acq);
void bench_note_releasing(struct bench_worker *w, int64_t t_end);
void bench_critical_section(int cs_us);

/* ------------------------------------------------------------ fenced counter store */

enum bench_write { BENCH_WRITE_OK, BENCH_WRITE_STALE, BENCH_WRITE_ERROR };

struct bench_store_totals {
	uint64_t accepted, rejected, lost_updates, counter, highest;
};

int bench_store_create(const char *path);
int bench_store_read(const char *path, uint64_t *value);
/* Write `value` under `token` (0 with `fenced` unset: no token to check). */
enum bench_write bench_store_write(const char *path, uint64_t value, uint64_t token, int fenced);
int bench_store_totals(const char *path, struct bench_store_totals *t);

/* ------------------------------------------------------------ results */

struct bench_fault_result {
	char what[48];
	char note[160];
	int64_t at_ms, end_ms;  /* from the start gate */
	int64_t unavailable_ms;
	uint64_t overlaps;
};

struct bench_result {
	char backend[48];     /* caps.backend or the scheme, "-row", "-fair", "-pubsub", "+notoken" with --fencing off */
	char uri[512];          /* masked */
	enum bench_scenario sc;
	int clients, threads, processes;
	int fencing;            /* uncontended, contended: with fencing tokens */
	int64_t duration_ms;
	int failed;
	char error[256];
	/* dlock */
	uint64_t ops, errors;
	double ops_per_s;
	struct bench_hist acq, rel, handoff;
	double reacquire_pct, share_spread_pct, server_calls_per_acq, rtt_p50_us;
	uint64_t overlaps, dropped;
	/* raw */
	int has_raw;
	char raw_note[256];
	double raw_ops_per_s, raw_reacquire_pct;
	struct bench_hist raw_acq, raw_handoff;
	/* faults */
	uint64_t stale_rejected, lost_reported, accepted, lost_updates, release_notheld;
	int64_t unavailable_ms;
	int nfaults;
	struct bench_fault_result faults[BENCH_MAX_FAULTS];
	char timeline[512];     /* faults: data file for the chart, when --plot */
	/* uncontended, contended, scale: the servers' work per acquisition, dlock's and raw's; -1: unknown */
	double server_cpu_us_per_acq, raw_server_cpu_us_per_acq;
	/* uncontended, contended, scale: the client processes' CPU time per acquisition; -1: unknown */
	double client_cpu_us_per_acq, raw_client_cpu_us_per_acq;
	double redis_cmds_per_acq, raw_redis_cmds_per_acq;
	char server_note[200];  /* scale, held: why server CPU is unknown */
	/* held */
	int locks;
	int64_t lease_ms;
	uint64_t locks_lost;
	double renewals_per_s, client_bytes_per_lock;
	double server_cpu_ms;   /* during the hold; -1: unknown */
	/* semaphore, read-mostly */
	int unsupported;        /* the backend has no such kind: a "not supported" row (why in error) */
	uint32_t permits;       /* semaphore: N */
	double read_ratio;      /* read-mostly */
	int most_holders;       /* semaphore: holders seen at once, at most */
	int most_readers;       /* read-mostly: readers seen at once, at most */
	uint64_t violations;    /* semaphore: entries that found N others in; read-mostly: a writer beside anyone */
	struct bench_hist acq_read, acq_write;
	/* inflight: ops_per_s, acq, rel and the raw fields are the loop side's and raw's */
	int inflight;           /* N, names in flight */
	int loop_native;        /* DLOCK_FEATURE_LOOP_NATIVE of the loop client */
	int has_blocking;
	double blocking_ops_per_s; /* the blocking client, N threads */
	int threads_seen, fds_seen, sockets_seen; /* the loop side's process, at most */
	long max_connections;   /* the server's session limit where it is checked (PostgreSQL), else -1 */
};

int bench_run_perf(const struct bench_opts *o, const struct bench_target *t, const char *masked,
                   const dlock_capabilities *caps, enum bench_scenario sc, int clients, int threads, int index,
                   struct bench_result *r);
/** One short unmeasured run of both sides, so that no measured phase meets a cold server. */
void bench_warm_up(const struct bench_opts *o, const struct bench_target *t, const char *masked,
                   const dlock_capabilities *caps, int index);
int bench_run_held(const struct bench_opts *o, const struct bench_target *t, int locks, int index,
                   struct bench_result *r);
int bench_run_inflight(const struct bench_opts *o, const struct bench_target *t, int n, int index,
                       struct bench_result *r);
int bench_run_faults(const struct bench_opts *o, const struct bench_target *t, const dlock_capabilities *caps,
                     int index, struct bench_result *r);

void bench_print_table(FILE *out, const struct bench_result *r, int n);
void bench_print_json(const struct bench_result *r);
int bench_plot(const char *dir, const struct bench_result *r, int n);

#endif
