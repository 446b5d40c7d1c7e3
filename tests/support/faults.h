/*
 * Helpers shared by the fault tests (test_faults_*.c, test_pg_failover.c)
 * and the load test: what the user was told (lost-lock callbacks), what
 * really happened (recorded hold intervals, a storage that checks fencing
 * tokens), what the process uses (RSS, descriptors), and the set-ups and
 * bodies that every server backend's fault test runs alike.
 *
 * Ownership: what a function opens it also closes, except ft_pair_open()
 * and ft_silent_begin(), whose structs the caller closes with
 * ft_pair_close() and ft_silent_end(); a fault proxy stays the caller's.
 * Threads: ft_on_lost() runs on the clients' threads; everything else on the
 * test's thread.  Errors: CUnit assertions (fatal where nothing after could
 * run), never a return value to check.
 */
#ifndef DLOCK_TEST_FAULTS_H
#define DLOCK_TEST_FAULTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"
#include "faultproxy.h"

#define FT_LONG_WAIT_MS 30000 /* an acquire that must succeed: a hang becomes a failure */
#define FT_AWAIT_MS 20000
#define FT_SLACK_MS 1500      /* on every upper timing bound: sanitizers, loaded machines */

/** dlock_test_open() asserting (not fatally) that it worked. */
dlock_client *ft_open(const char *uri);
/** dlock_test_new_lock() asserting (not fatally), when `c` is set, that it worked. */
dlock_lock *ft_lock(dlock_client *c, const char *name);
/** A name unique to this process and call: "ft-PID-N-tag". */
void ft_name(char *out, size_t len, const char *tag);
/** `uri` with "key=value&..." appended to its query. */
void ft_uri_with(char *out, size_t len, const char *uri, const char *params);
/** `uri` with its first ":PORT" after the authority's '@' (or "//") replaced by ":NEWPORT". */
void ft_uri_port(char *out, size_t len, const char *uri, int port, int newport);
/** A fault proxy to 127.0.0.1:`port` (fatal assertion when it cannot start). */
faultproxy *ft_proxy_to(int port);

/* ------------------------------------------------------------ one name, two clients */

/*
 * The usual cast of a fault test: a client whose path to the server the
 * test breaks (`via`, through a fault proxy) and one that reaches the
 * server directly, each with a handle of the same name.
 */
typedef struct ft_pair {
	dlock_client *via, *direct;
	dlock_lock *lv, *ld; /* `name` on via and on direct */
} ft_pair;

/** Open both clients and both handles (asserted, not fatally). */
void ft_pair_open(ft_pair *p, const char *via_uri, const char *direct_uri, const char *name);
/** Free both handles and close both clients (either may be NULL). */
void ft_pair_close(ft_pair *p);

/* ------------------------------------------------------------ the same faults on every backend */

/*
 * The bodies of the fault tests every server backend runs.  `uri` reaches
 * the server at 127.0.0.1:`port` directly (with the test's namespace); the
 * faulty client gets the same URI through a proxy, with `params` added.
 */

/**
 * Open against a server that accepts and never answers, then one that
 * refuses: ECONNECT, no client, within `hung_ms` and `refused_ms` (each
 * plus FT_SLACK_MS), and the message names the host.
 */
void ft_check_open_server_down(const char *uri, int port, const char *params, int64_t hung_ms, int64_t refused_ms);

/**
 * A client holding three locks (lease `lease_ms`, 0: the URI's) through a
 * slow proxy is closed: a direct client gets each at once, the closed
 * client's handles say ENOTHELD, and no lost-lock callback ran (released,
 * not lost).
 */
void ft_check_close_releases(const char *uri, int port, const char *params, int64_t lease_ms);

/* ------------------------------------------------------------ lost callbacks */

typedef struct ft_lost {
	atomic_int calls;
	atomic_int reason;
	_Atomic int64_t at_ms; /* dlock_test_now_ms() of the first call */
} ft_lost;

void ft_on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata);
/** dlock_test_await() condition: the callback was called. */
int ft_lost_called(void *ft_lost_ptr);
/** Acquire with a wait bound, a lease (0: the URI's) and, when `lost` is set, ft_on_lost. */
dlock_status ft_acquire(dlock_lock *l, int64_t wait_ms, int64_t lease_ms, ft_lost *lost);

/* ------------------------------------------------------------ exclusion */

/*
 * Hold intervals as each holder saw them: from its acquire until it was
 * told it lost the lock (or released it).  Two that overlap mean two
 * holders believed they held the lock at once.
 */
typedef struct ft_interval {
	const char *who;
	int64_t from_ms, to_ms;
	uint64_t token;
} ft_interval;

/** Assert that no two of `n` intervals overlap, printing each pair that does. */
void ft_assert_disjoint(const ft_interval *v, size_t n);

/* The protected storage: it takes a write only with a token at least the largest seen. */
typedef struct ft_store {
	pthread_mutex_t mu;
	uint64_t max_token;
	unsigned accepted, rejected;
} ft_store;

void ft_store_init(ft_store *s);
void ft_store_destroy(ft_store *s);
/** 1 if the write with `token` was accepted, 0 if rejected as stale. */
int ft_store_write(ft_store *s, uint64_t token);

/* ------------------------------------------------------------ a holder gone silent */

#define FT_SILENT_MAX 4   /* locks a silent holder holds */
#define FT_ANY_REASON (-1) /* ft_silent_end(): whatever reason the loss was reported with */

/*
 * A holder whose network goes silent (blackholed both ways, sockets open)
 * while another client waits for its first lock, past its lease or session.
 */
typedef struct ft_silent {
	ft_pair first;                        /* the first name: the holder (via) and the next holder (direct) */
	dlock_lock *more[FT_SILENT_MAX - 1];  /* the holder's other names */
	int nlocks;
	ft_lost lost[FT_SILENT_MAX];          /* one per name, the first name's first */
	ft_store store;
	int64_t from_ms, cut_ms, told_ms;     /* the holder acquired; silent from; the first lock reported lost */
	uint64_t token;                       /* the holder's token on the first name */
	int64_t next_at_ms;                   /* the next holder got the first name */
	uint64_t next_token;
} ft_silent;

/**
 * The holder opens `via_uri` (through `px`), the next holder `direct_uri`;
 * the holder takes `nlocks` (1 to FT_SILENT_MAX) fresh names tagged `tag`
 * with a lease of `lease_ms` (0: the URI's) and a lost callback each, and
 * writes to the storage; the next holder waits for the first name; the
 * network goes silent.  Then what every backend must do: the next holder
 * gets the name with a larger token, every lock is reported lost, the
 * holder was told before the next holder was in (disjoint hold intervals),
 * the storage takes the new token and refuses the old one.  The network
 * comes back (the proxy passes again) before this returns; the caller adds
 * its backend's own checks, then calls ft_silent_end().
 */
void ft_silent_begin(ft_silent *s, faultproxy *px, const char *via_uri, const char *direct_uri, const char *tag,
                     int nlocks, int64_t lease_ms);

/**
 * What every backend must say afterwards: the holder's first handle checks
 * DLOCK_ENOTHELD and the next holder's DLOCK_OK; every lock was reported
 * lost once, with `reason` (a dlock_lost_reason, or FT_ANY_REASON), and its
 * release says DLOCK_ENOTHELD; once the next holder released, the holder's
 * client acquires the first name again with a larger token (it works on).
 * Then closes everything.
 */
void ft_silent_end(ft_silent *s, int reason);

/* ------------------------------------------------------------ resources */

/** Resident set size of this process in KiB (/proc/self/statm). */
long ft_rss_kib(void);
/** Open descriptors of this process (/proc/self/fd). */
int ft_fd_count(void);

#endif
