/*
 * The contract of a loop client (include/dlock/loop.h), stated once and
 * run on every backend URI a loop test program is given, in pull and in
 * push mode: each loop_*.c file contributes a table of tests; test_loop.c
 * registers them on mem:// and file://, test_loop_servers.c on Redis and
 * PostgreSQL.
 *
 * Each test drives its loop client from the test's own thread with the
 * loops of tests/support/looprig.h, beside an ordinary (blocking) client
 * of the same URI that holds, contends and checks.  Threads of the test
 * only cancel, release the ordinary client's locks and wake; they never
 * call CUnit.  Errors: CUnit assertions.
 */
#ifndef DLOCK_LOOP_CASES_H
#define DLOCK_LOOP_CASES_H

#include <CUnit/CUnit.h>
#include <stdint.h>

#include "dlock/dlock.h"
#include "dlock/loop.h"
#include "looprig.h"
#include "testsupport.h"

typedef struct lc_case {
	const char *name;
	CU_TestFunc fn;
} lc_case;

/* Test tables, each ended by { NULL, NULL }. */
extern const lc_case lc_acquire_cases[];  /* loop_acquire.c: every way an acquisition completes */
extern const lc_case lc_lifetime_cases[]; /* loop_lifetime.c: closing, freeing, opening around operations */
extern const lc_case lc_ops_cases[];      /* loop_ops.c: the other operations' async forms, losses */
extern const lc_case lc_kv_cases[];       /* loop_kv.c: kv://'s calls on the loop (test_loop_servers only) */
extern const lc_case lc_driver_cases[];   /* loop_driver.c: what every driver whose calls run on the loop owes */
extern const lc_case lc_driver_conn_cases[]; /* loop_driver.c: ... whose locks outlive a connection, through a proxy */

/* The backend and mode the tests run on now (set by a suite's init function). */
typedef struct lc_target {
	const char *uri;       /* the backend, with its namespace */
	lr_mode mode;
	int64_t short_lease_ms; /* a `ttl` short enough to watch a lease run out (TTL backends) */
	int driver_threads;     /* threads the driver itself starts at open (kv://'s subscriber), not the library's */
	int waiters;            /* acquisitions waiting at once in loop_driver.c's case (0: LC_WAITERS_MAX) */
	int waiters_poll;       /* the driver has no wake-ups: its waiting acquisitions ask the server again and again */
} lc_target;

#define LC_WAITERS_MAX 50

/** Make `t` the target of the tests that run next; 0 (a CUnit suite init's success). */
int lc_set_target(const lc_target *t);
const lc_target *lc_get_target(void);
/** Add every test of the tables to `suite`. */
void lc_add_all(CU_pSuite suite);

/* One test's cast: a loop, its loop client, an ordinary client of the same URI, a fresh name. */
typedef struct lc {
	lr_loop *lp;
	lr_client *tc;
	dlock_client *other;
	char name[128];
} lc;

/** Open the cast, the name tagged `tag`; 0 (with a failure asserted) when the clients cannot open. */
int lc_begin(lc *t, const char *tag);
/** Close the loop client (asserting its close and hooks) if it is still open, the other client, the loop. */
void lc_end(lc *t);

/** A handle for `name` on the loop client (asserted). */
dlock_lock *lc_lock(lc *t, const char *name);
/** A handle for `name` on the ordinary client (asserted). */
dlock_lock *lc_other_lock(lc *t, const char *name);

/**
 * Start an acquisition of `lock` (a handle of the loop client, exclusive,
 * bound `wait_ms`), its callback in `op` (initialised here), and run the
 * loop until it has asked the server once: it waits there (asserted).
 */
void lc_start_waiting(lc *t, dlock_lock *lock, int64_t wait_ms, lr_op *op);
/** Run the loop until the ordinary client can take `name` (try-once, then released); asserted. */
int lc_await_free(lc *t, const char *name);

/*
 * A contended name: `h`, a handle of the loop client, and `o`, the
 * ordinary client's, which holds it (lc_contended_begin() asserts that
 * fatally).  lc_contended_end() asserts that the holder was untouched,
 * releases it, checks that `h` then acquires and releases, and ends all.
 */
typedef struct lc_contended {
	lc t;
	dlock_lock *h, *o;
} lc_contended;

int lc_contended_begin(lc_contended *c, const char *tag);
void lc_contended_end(lc_contended *c);

/** Holders of `name` as the ordinary client's dlock_inspect() sees them; -1 when it cannot tell. */
long lc_holders(lc *t, const char *name);

/** A backend fact of the loop client (dlock_client_feature()); -1 when it does not answer. */
int64_t lc_feature(lc *t, dlock_feature f);

/**
 * An operation expected to end with `want` (an error): either its start
 * call refuses it (then no callback), or it starts and calls back once
 * with `want`.  Runs the loop as needed.
 */
#define LC_ASSERT_ENDS(op, started, want) lc_assert_ends((op), (started), (want), #started, __FILE__, __LINE__)
void lc_assert_ends(lr_op *op, dlock_status started, dlock_status want, const char *what, const char *file,
                    unsigned line);

/** DLOCK_TEST_SCALE times `base`, at least 1. */
int lc_scaled(int base);

/** The port of a URI's one host ("...://[user@]host:port/..."); 0 when it has none. */
int lc_uri_port(const char *uri);

/* For the cases of a driver that runs on the loop (loop_driver.c, loop_kv.c, test_redis_loop.c). */
/** An extend of `h` (a handle of `tc` on `lp`) started, its answer into `op` (initialised here). */
dlock_status lc_extend_start(lr_loop *lp, lr_client *tc, dlock_lock *h, lr_op *op);
/** The client's driver acquire calls so far. */
uint64_t lc_attempts(lr_client *tc);
/** What lc_attempted() and lc_all_done() wait for. */
typedef struct lc_progress {
	lr_client *tc;
	uint64_t attempts; /* wanted: this many driver acquire calls */
	const lr_op *ops;  /* or: every one of these called back */
	size_t n;
} lc_progress;
int lc_attempted(void *progress);
int lc_all_done(void *progress);
struct faultproxy;
/** A loop client on `lp` of `uri` through a new fault proxy (*px) with `params` added; NULL (asserted) if not. */
lr_client *lc_open_via_proxy(lr_loop *lp, const char *uri, const char *params, struct faultproxy **px);

#endif
