/*
 * The engine of testloop.c, for the files that map each call onto it
 * (testloop_ops.c, testloop_elect.c); not for the tests.
 *
 * A call is a tl_call that its caller makes with tl_call_new(), fills in
 * and hands to tl_do() (or tl_run(), which also frees it): its `start`
 * runs on the client's loop thread and ends it with tl_finish() at once,
 * or starts an _async form whose callback ends it with tl_callback_end()
 * (tl_started() ends it when the start call refuses).  Threads: tl_do()
 * from any thread but the loop's; the rest as each says.
 */
#ifndef DLOCK_TESTLOOP_CALL_H
#define DLOCK_TESTLOOP_CALL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"
#include "dlock/loop.h"

#define TL_TEXT_MAX 1024

typedef struct tl_client tl_client;
typedef struct tl_call tl_call;

/*
 * One call posted to a loop thread.  `start` runs on that thread: it makes
 * the call there, or starts its _async form, and tl_finish() ends it (at
 * once, or from the callback).  The posting thread owns the record.
 */
struct tl_call {
	tl_call *next;
	tl_client *c;
	const char *what;
	void (*start)(tl_call *k);
	/* arguments */
	dlock_client *client;
	dlock_lock *lock;
	dlock_election *e;
	const char *text; /* a name, a value or a prefix */
	const dlock_acquire_options *opts;
	int64_t n;        /* a lease, a feature code, a lock's kind */
	uint32_t permits;
	void *out;        /* the caller's pointer for what a call answers, passed through */
	dlock_leader_fn observer;
	void *userdata;
	void (*fn)(void *arg);
	/* results */
	dlock_status status;
	uint64_t term;
	size_t broken;
	const void *result; /* an info, list, leader, name or lock */
	int starting;       /* inside the start call (a callback then breaks the contract) */
	int broke_contract;
	int early;          /* called back inside the start call, with early_status: ended by tl_started() */
	dlock_status early_status;
	int has_text;       /* a failure: `text_out` holds the client's detail */
	char text_out[TL_TEXT_MAX];
	int done;           /* under c->mu */
};

/* A loop client and the thread that drives it. */
struct tl_client {
	dlock_client *client; /* the key it is known by, also once closed */
	char *uri;
	pthread_t thread;
	int wake_fd;          /* eventfd: calls were posted, or `stop` set */
	pthread_mutex_t mu;   /* guards the queue, `stop` and the calls' `done` */
	pthread_cond_t cv;
	tl_call *head, *tail;
	int stop;
	int live;             /* loop thread only: open and not yet closed */
	/* Under registry_mu: */
	int closed;           /* its close has completed */
	size_t handles;       /* locks and elections made on it and not yet freed */
	int reaped;
	/* The open (the loop thread's first call). */
	const dlock_client_options *open_opts;
	char *open_errbuf;
	size_t open_errlen;
	tl_call *open_call;
	dlock_status open_failed;
};

/* The loop client `key` (a client, lock, election or an election's lock) belongs to; NULL if none. */
tl_client *tl_find(const void *key);
/* 1 where `key` is no loop client's (NULL) or this is its loop thread: there, the library's own call. */
int tl_direct(const void *key);
/* 1 when the calling thread is `c`'s loop thread. */
int tl_is_loop(const tl_client *c);
/* Remember that `key` belongs to `c` (a lock or an election counts as one of its handles when `is_handle`). */
void tl_register(const void *key, tl_client *c, int is_handle);
/* Forget `key`, if it is `c`'s. */
void tl_forget(const void *key, tl_client *c);
/* The calling thread's failure text for `client`, as testloop_client_errmsg() gives it. */
void tl_note_text(const dlock_client *client, const char *text);
/* Once `c` is closed and its last handle freed: end its thread (not from that thread). */
void tl_reap_if_done(tl_client *c);

tl_call *tl_call_new(const char *what, void (*start)(tl_call *k));
/* Post `k` to `c`'s loop thread and wait for its end; its status (DLOCK_STATUS_COUNT_ if the contract broke). */
dlock_status tl_do(tl_client *c, tl_call *k);
/* tl_do() on the client of `key`, for a call whose status is all it answers; frees `k`. */
dlock_status tl_run(const void *key, tl_call *k);
/* tl_do(), free `k`, then tl_reap_if_done(): for the calls that may leave `c` closed with no handle. */
dlock_status tl_run_then_reap(tl_client *c, tl_call *k);
/* On the loop thread: end `k` with `st` (a failure takes the client's text with it). */
void tl_finish(tl_call *k, dlock_status st);
/* A callback's end of `k` (one inside the start call is said, and ended by tl_started()). */
void tl_callback_end(tl_call *k, dlock_status st);
/* The start call returned `st`: a failure ends `k` now. */
void tl_started(tl_call *k, dlock_status st);
/* The start of an _async form given a NULL handle: it must refuse, and never call back. */
dlock_status tl_null_start(dlock_status st, const char *what);
/* A dlock_lock_done_fn for starts that must refuse: says that one called back. */
void tl_never_lock(dlock_lock *lock, dlock_status st, void *ud);

#endif
