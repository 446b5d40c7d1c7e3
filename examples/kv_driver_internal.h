/*
 * kv:// inside: what the two files of the example driver share.
 * kv_driver.c has the client, the blocking methods and the subscriber;
 * kv_driver_loop.c the non-blocking methods that a loop client calls on
 * its loop (driver contract version 9).  Both build a script's command and
 * read its answer with the functions below, so the two paths cannot
 * differ in what they ask the server or how they take its answer.
 * Not part of the driver's interface (that is kv_driver.h).
 *
 * Threads: as each struct says.  Errors: every function that can fail
 * writes a message with dlock_error_set(), naming the server by its
 * masked URI.
 */
#ifndef EXAMPLE_KV_DRIVER_INTERNAL_H
#define EXAMPLE_KV_DRIVER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "dlock/sys/driver.h"

#define KV_KEY_MAX 320   /* PREFIX ':' 64 hex digits ':fence' */
#define KV_OWNER_HEX 32  /* 16 random bytes, in hex */
#define KV_WORDS_MAX 10  /* arguments of one script */

struct kv_lock;
struct kv_loop; /* the loop's side of a client: kv_driver_loop.c */

struct kv_client {
	pthread_mutex_t mu;    /* guards ctx */
	redisContext *ctx;     /* NULL after an I/O error: connected again by the next call */
	char *host, *password, *prefix, *label; /* label: the masked URI, for messages */
	char channel[KV_KEY_MAX];
	const char *record;    /* the owner record (dlock_host_owner), stored beside each hold */
	int port;
	struct timeval open_timeout, io_timeout;
	int64_t io_timeout_ms;

	pthread_mutex_t sub_mu; /* guards the fields below */
	pthread_cond_t sub_cond; /* signalled when stopping */
	pthread_t listener;
	int listener_started, stopping;
	redisContext *sub;      /* the subscribed connection, NULL while there is none */
	struct kv_lock *armed;  /* locks whose acquisition waits for a wake-up */

	struct kv_loop *loop;   /* a loop client's (dlock_host_io() not NULL), used on its thread only; else NULL */
};

/* What a call on the loop is (kv_driver_loop.c). */
enum kv_op_kind { KV_OP_ACQUIRE, KV_OP_UNDO, KV_OP_RELEASE, KV_OP_EXTEND, KV_OP_CHECK };

/*
 * The lock's call in progress on the loop, from its _start method to its
 * dlock_call_done(): one at most, as calls on one lock never overlap.
 * The out-parameters are the core's.  Loop thread only.
 */
struct kv_op {
	enum kv_op_kind kind;  /* KV_OP_UNDO: an acquisition whose answer was lost, removing what may be ours */
	dlock_call *call;
	dlock_retry *retry;    /* KV_OP_ACQUIRE */
	dlock_acquired *out;   /* KV_OP_ACQUIRE */
	dlock_error *err;
	int64_t sent_ns;       /* KV_OP_ACQUIRE: when it began (the lease runs from here at the latest) */
	int64_t deadline_ns;   /* io_timeout after it was sent */
	dlock_status failed;   /* KV_OP_UNDO: the acquisition's answer, once the undo is done */
	struct kv_op *next;    /* the connection's calls, in the order of their answers */
};

struct kv_lock {
	char key[KV_KEY_MAX], fence_key[KV_KEY_MAX + 8];
	char digest[65];              /* what a release of the name publishes */
	char *name;                   /* stored on the server for inspection and listing */
	char kind[2], permits[12];    /* as the scripts compare them */
	char field[2 + KV_OWNER_HEX + 1]; /* "h:OWNER" of the current acquisition */
	dlock_wait *armed;            /* the acquisition its wake-up is for; NULL: not armed (sub_mu) */
	struct kv_lock *next_armed;
	struct kv_op op;              /* loop clients: the call in progress */
};

/* One EVAL of a script: argc words of argv (lengths in len), which point into the lock, the client and here. */
struct kv_cmd {
	int argc;
	const char *argv[3 + KV_WORDS_MAX];
	size_t len[3 + KV_WORDS_MAX];
	char nkeys[4], lease[24];
};

/*
 * One acquisition attempt of `lk`: a new owner id in lk->field, the
 * wake-up armed (retry->armed) and the acquire script into *cmd.
 * DLOCK_OK, or DLOCK_EIO without random bytes.  Any thread.
 */
dlock_status kv_acquire_cmd(struct kv_client *c, struct kv_lock *lk, int64_t lease_ms, dlock_wait *w,
                            dlock_retry *retry, struct kv_cmd *cmd, dlock_error *err);

/* The answer `r` (no error reply) of the acquire script sent at `sent_ns`: what try_acquire() returns. */
dlock_status kv_acquire_answer(struct kv_client *c, struct kv_lock *lk, const redisReply *r, int64_t sent_ns,
                               dlock_retry *retry, dlock_acquired *out, dlock_error *err);

/* The owner-only script for `op` ("check", "extend", "release") on the current acquisition of `lk`. */
void kv_owned_cmd(struct kv_client *c, struct kv_lock *lk, const char *op, int64_t lease_ms, struct kv_cmd *cmd);

/* The answer `r` (no error reply) of the owner-only script: DLOCK_OK, DLOCK_ENOTHELD, DLOCK_ESERVER. */
dlock_status kv_owned_answer(struct kv_client *c, const char *op, const redisReply *r, dlock_error *err);

/* What check() answers for the status `st` of its script: held, not held, or DLOCK_EUNCERTAIN. */
dlock_status kv_check_answer(struct kv_client *c, dlock_status st, dlock_error *err);

/* DLOCK_ESERVER with the server's words for an error reply, else DLOCK_OK. */
dlock_status kv_reply_error(struct kv_client *c, const redisReply *r, dlock_error *err);

/* Make `fd` close-on-exec (a driver's descriptors are: driver.h).  Any thread. */
void kv_cloexec(int fd);

/*
 * The loop's side (kv_driver_loop.c), on the loop's thread: kv_loop_open()
 * from open() on a loop client (its connection, its timer; DLOCK_OK,
 * DLOCK_ECONNECT, DLOCK_ENOMEM), kv_loop_close() from close() (NULL loop:
 * nothing), and the four non-blocking methods.
 */
dlock_status kv_loop_open(struct kv_client *c, dlock_io *io, dlock_error *err);
void kv_loop_close(struct kv_client *c);
dlock_status kv_try_acquire_start(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                  dlock_acquired *out, dlock_error *err, dlock_call *call);
dlock_status kv_release_start(void *backend, void *lk, dlock_error *err, dlock_call *call);
dlock_status kv_extend_start(void *backend, void *lk, int64_t lease_ms, dlock_error *err, dlock_call *call);
dlock_status kv_check_start(void *backend, void *lk, dlock_error *err, dlock_call *call);

#endif
