/*
 * The core's private structures: a client, its lock handles, the per-name
 * entries that queue local contenders, and waits.  Locking rule: one mutex
 * per client (`mu`) guards every field below that is not marked otherwise;
 * it is never held while a driver method or a user callback runs.  Order:
 * client->mu before wait->mu.
 */
#ifndef DLOCK_CORE_INTERNAL_H
#define DLOCK_CORE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#include "dlock/sys/driver.h"
#include "owner.h"
#include "reactor.h"

/* The background threads' timetables (sched.c): which heap. */
#define DLOCK_SCHED_WATCH 0 /* valid_until of leases, for the watch thread */
#define DLOCK_SCHED_RENEW 1 /* next_renew, or a lost acquisition's cleanup, for the renewal thread */
#define DLOCK_SCHEDS 2

/* Number of dlock_lock_kind values this library knows. */
#define DLOCK_KINDS 3

/* ------------------------------------------------------------------ waits */

struct dlock_wait {
	pthread_mutex_t mu; /* guards the fields below (not client->mu) */
	pthread_cond_t cond; /* made by its first waiter (cond_ready): most acquisitions never sleep */
	int cond_ready;
	int64_t deadline_ns;
	int try_once;
	int wants_token;
	dlock_lock_mode mode;
	int cancelled;
	int woken;
	void (*interrupt)(void *arg);
	void *interrupt_arg;
	void (*on_wake)(void *arg); /* a loop's wait: called on wake and cancel (dlock_wait_on_wake()) */
	void *on_wake_arg;
	int interrupt_running;

	/* Guarded by client->mu. */
	struct dlock_wait *next;  /* in the handle's list of acquires in progress */
	int pins;                 /* cancellers still using this wait */
	int cancel_requested;     /* a canceller has taken it */
};

void dlock_wait_init(struct dlock_wait *w, int64_t deadline_ns, int try_once, int wants_token,
                     dlock_lock_mode mode);
/**
 * Acquire `lk` through the driver's try_acquire() (retry.c): the one
 * waiting loop, with the deadline and cancellation of `w`.  DLOCK_OK,
 * DLOCK_EBUSY (try once), DLOCK_ETIMEDOUT, DLOCK_ECANCELED or the driver's
 * failure, its message in *err.  Called without client->mu.
 */
dlock_status dlock_retry_loop(struct dlock_client *c, void *lk, int64_t lease_ms, struct dlock_wait *w,
                              dlock_acquired *out, dlock_error *err);
void dlock_wait_destroy(struct dlock_wait *w);
/** Backoff between attempts that armed no wake-up (retry.c). */
struct dlock_backoff {
	uint64_t rng; /* xorshift64 state; 0 until the first sleep */
	int64_t step_ns;
};
/** How long to wait before the attempt after `r`; -1: until woken (or the deadline). */
int64_t dlock_retry_sleep_ns(const dlock_retry *r, int armed, struct dlock_backoff *b);
/**
 * A loop's wait (loop_acquire.c): `fn(arg)` is called, with the wait's own mutex held, by every
 * dlock_wait_wake() and dlock_wait_cancel() of `w` instead of waking a sleeping thread; it must
 * only post work to the loop.  NULL clears it.
 */
void dlock_wait_on_wake(struct dlock_wait *w, void (*fn)(void *arg), void *arg);
/** Mark cancelled, wake the sleeper and run the interrupt hook.  No client->mu held. */
void dlock_wait_cancel(struct dlock_wait *w);


/* ------------------------------------------------------------ name entry */

/* A local contender waiting for its turn to ask the server. */
struct dlock_queued {
	struct dlock_queued *next;
	struct dlock_lock *lock; /* the handle it acquires */
	dlock_lock_mode mode;    /* what it asks for */
};

/* One per distinct name per client, shared by its handles (coalescing). */
struct dlock_entry {
	struct dlock_entry *next_in_bucket;
	char *name;
	size_t len;
	uint64_t hash;
	unsigned refs;             /* handles of this name */
	struct dlock_lock *holders; /* handles holding the name on the server (list by next_holder): one
	                               exclusive holder, or any number of shared ones */
	int shared;                /* the holders hold it shared (meaningless while there are none) */
	int contending;            /* the queue head is inside driver acquire() */
	struct dlock_queued *queue_head, *queue_tail; /* FIFO of local waiters */
	pthread_cond_t cond;       /* signalled when holder, contending or the queue change */
};

/* ------------------------------------------------------------------ locks */

struct dlock_lock {
	struct dlock_client *client;
	struct dlock_entry *entry;
	struct dlock_lock *prev, *next; /* client's list of handles */
	int driver_ready;               /* lock_init succeeded, lock_fini pending */
	dlock_lock_kind kind;           /* fixed when the handle is made */
	uint32_t permits;               /* holders allowed at once (N of a semaphore; else 1), fixed too */
	struct dlock_lock *next_holder; /* in entry->holders while `holding` */
	int holding;                    /* counted among the name's holders */

	/* The current acquisition. */
	int held;
	uint64_t owner;       /* identity of the thread that acquired it (dlock_registry_thread_id()) */
	unsigned depth;       /* reentrant hold count */
	dlock_lock_mode mode; /* of the current acquisition */
	uint64_t token;
	int has_token;        /* the acquisition asked for a token (fencing on) */
	uint32_t slot;        /* a semaphore's permit: its slot, where the driver reports slots */
	uint64_t generation;  /* bumped by every acquisition and release */
	int64_t lease_ns;
	int renew;
	int tracked;          /* validity counted: the driver has extend() */
	int64_t valid_until;  /* monotonic ns; loss is declared after it */
	int64_t lease_end;    /* monotonic ns; when the server lets the lease go */
	int64_t next_renew;   /* monotonic ns */
	int lost;             /* loss declared (or reported) for this acquisition */
	int lost_pending;     /* a report waits for the background thread */
	dlock_lost_reason lost_reason;
	char *lost_detail;    /* why, allocated when the loss is declared (NULL: none); lost_text() */
	int lost_delivered;   /* the callback was called (or there was none) */
	int loss_cleaned;     /* after a loss: the driver released what was left on the
	                         server and the name went to the next local contender;
	                         dlock_release() then makes no server call */
	int contending;       /* inside the driver's acquire() */
	int lost_early;       /* a loss reported while acquire() was returning */
	int64_t held_since;   /* monotonic ns of the acquisition: the hold bounds count from it */
	int64_t min_until;    /* minimum hold: a release sooner lingers until then; 0: none */
	int64_t max_at;       /* maximum hold: declared lost (DLOCK_LOST_MAX_HOLD) then; INT64_MAX: none */
	int lingering;        /* released by its owner before min_until: still held on the server until then,
	                         by the core (the handle counts as not held; see linger.c) */
	int linger_ttl;       /* lingering on a lease set to end at min_until: no renewal, and closing leaves it */
	dlock_lost_fn on_lost;
	void *lost_userdata;

	int busy;             /* a driver call on this handle is running */
	int loop_call;        /* a driver's _start call on this handle is in progress on the loop (loop_io), the
	                         application's or the background's (loop_renew.c): every other call waits for it */
	void *loop_parked;    /* a loop client's operations waiting for that call to end (async.c) */
	int shut;             /* closing the client has dealt with this handle */
	int callback_running; /* its lost-lock callback is running */
	struct dlock_wait *waits; /* acquires in progress on this handle */
	uint64_t cancel_seq;  /* raised by every dlock_cancel(): an acquisition started before it is cancelled */

	/* A loop client's handle (async.c). */
	unsigned async_refs;  /* operations and posted callbacks that still need the handle */
	int free_requested;   /* dlock_lock_free() was called: freed when async_refs falls to 0 (1), and that
	                         free has started (2) */
	struct dlock_election *free_election; /* the election to free with it, when it is one's */
	struct dlock_async_lost *lost_post; /* a lost-lock callback posted to the loop, not yet run */

	size_t sched_pos[DLOCK_SCHEDS];  /* 1-based place in each timetable; 0: not in it (sched.c) */
	int64_t sched_key[DLOCK_SCHEDS]; /* its due time there */

	void *lk;             /* the driver's per-lock state (lock_size bytes) */
};

/* The driver's state follows its handle in one allocation, aligned for any type:
 * l->lk == (char *)l + DLOCK_LK_OFFSET. */
#define DLOCK_LK_OFFSET ((sizeof(struct dlock_lock) + 15) & ~(size_t)15)

/* ------------------------------------------------------------- elections */

/* An election (election.c): its mutex, and what observing it needs (observe.c, under c->mu). */
struct dlock_election {
	struct dlock_client *client;
	dlock_lock *lock;      /* the mutex of the name: its holder leads */
	const char *name;      /* the handle's copy of the name */

	dlock_leader_fn observe_fn; /* NULL: not observed */
	void *observe_userdata;
	int observing;         /* in client->observed */
	int observe_busy;      /* the observer thread reads it or calls it back now */
	int observe_changed;   /* the driver said it may have changed */
	int64_t observe_next;  /* monotonic ns of the next read in any case */
	void *watch_handle;    /* the driver's watch(), NULL when none is armed */
	int observe_delivered; /* the observer heard of a leader (or of none) */
	int last_elected;      /* what it heard last */
	uint64_t last_term;    /* the newest term it heard: never goes back */
	char *last_value;
	struct dlock_election *observe_next_in_client;
};

/* The background's driver calls (background.c), which a loop client whose driver runs on the loop makes there. */
enum dlock_bg_call {
	DLOCK_BG_RENEW,      /* extend the lease */
	DLOCK_BG_CLEANUP,    /* release what is left of a lost acquisition */
	DLOCK_BG_LINGER_END, /* release a lingering hold at its minimum */
	DLOCK_BG_CLOSE       /* release a held lock as the client closes (loop_close.c) */
};

/*
 * The seam between the blocking core and a loop client's layer (async*.c, loop_*.c), which sits above it
 * and calls down into it: where the blocking core must act for a loop client it calls through the
 * client's seam, set by dlock_client_open_async() (NULL for a blocking client), so that core/ stays a
 * one-way stack.  Each wrapper below does nothing (or answers OK) for a blocking client.
 */
struct dlock_loop_seam {
	/** DLOCK_EDEADLK when the caller is the loop's thread (a blocking call would stall it). */
	dlock_status (*refuse_blocking)(struct dlock_client *c, const char *call);
	/** DLOCK_EINVAL while the open has not completed, its status after it failed. */
	dlock_status (*refuse_unopened)(struct dlock_client *c, const char *call);
	/** Take over dlock_lock_free() (of `e` too, when it is an election's): 1 when it did. */
	int (*lock_free)(struct dlock_lock *l, struct dlock_election *e);
	/** dlock_client_close() of a loop client. */
	dlock_status (*close)(struct dlock_client *c);
	/** Instead of the background threads. */
	dlock_status (*start_background)(struct dlock_client *c);
	/** Deliver a loss on the loop. c->mu held. */
	void (*post_lost_locked)(struct dlock_client *c, struct dlock_lock *l);
	/** Drop a reference the loop's layer took on `l` (freeing it when that was the last one wanted). */
	void (*unref)(struct dlock_lock *l);
	/** Deliver an observer's news on the loop; `info` is taken over. c->mu held. */
	void (*post_observed_locked)(struct dlock_client *c, struct dlock_election *e, dlock_leader_fn fn,
	                             void *userdata, dlock_lock_info *info);
	/** Background work comes due at `due_ns` (0: now). Any thread, c->mu held. */
	void (*soon_locked)(struct dlock_client *c, int64_t due_ns);
	/** A name's holders changed: the acquisitions waiting on the loop for their turn look again. Any thread,
	 *  c->mu held. */
	void (*kick_locked)(struct dlock_client *c);
	/** Start the background's driver call `what` on `l` on the loop (a client whose driver runs there):
	 *  1 when it did (the answer comes later, through background.c), 0 when the caller makes the blocking
	 *  call itself.  The loop's thread, c->mu held, dropped inside. */
	int (*bg_call_locked)(struct dlock_lock *l, enum dlock_bg_call what, uint64_t generation, int64_t lease_ns);
	/** `l`'s loop call ended: the operations that waited for it go on.  The loop's thread, c->mu held. */
	void (*call_ended_locked)(struct dlock_lock *l);
};

/* Cancellation sequence meaning "none given: the handle's current one" (dlock_acquire_since()). */
#define DLOCK_CANCEL_SEQ_NOW UINT64_MAX

/** background.c: one turn of both background threads' work; the next due time. c->mu held, dropped inside. */
int64_t dlock_background_tick_locked(struct dlock_client *c);
/** lock.c: closing on the loop (loop_close.c): every handle that closing has not dealt with is marked,
 *  and what it holds on the server released through the seam's bg_call_locked (DLOCK_BG_CLOSE).  The
 *  loop's thread, no operation at work, c->mu held, dropped inside. */
void dlock_locks_shutdown_start_locked(struct dlock_client *c);
/** lock.c: then each marked handle is finished (lock_fini(), its hold dropped).  c->mu held, dropped
 *  inside. */
void dlock_locks_shutdown_finish_locked(struct dlock_client *c);
/** background.c: the answer `st` (message `msg`) to the background's call `what` on `l`, which the loop
 *  started at `sent` (monotonic ns) for acquisition `generation`, a lease of `lease_ns`.  c->mu held. */
void dlock_background_answer_locked(struct dlock_lock *l, enum dlock_bg_call what, uint64_t generation,
                                    int64_t lease_ns, int64_t sent, dlock_status st, const char *msg);

/* observe.c */
/** One turn of the observer's work; the next due time.  c->mu held, dropped inside. */
int64_t dlock_observer_tick_locked(struct dlock_client *c);
/** Who leads according to an inspection (NULL: nobody); `out` points into `info`. */
dlock_status dlock_election_leader_of(const dlock_lock_info *info, dlock_leader *out);
/** Stop the client's observer thread and disarm every watch (closing, before the driver closes). */
void dlock_observer_stop(struct dlock_client *c);

struct dlock_async_lost;
struct dlock_op;
struct loop_acq;
struct dlock_reactor;
struct dlock_workers;

/* A binary min-heap of handles by due time (sched.c). */
struct dlock_sched_heap {
	struct dlock_lock **v;
	size_t n, cap;
};

/* ----------------------------------------------------------------- client */

/* Per-thread error text of one client (errmsg.c). */
struct dlock_errs;

struct dlock_host {
	struct dlock_client *client;
};

/* The loop as a driver of contract 9 sees it (loop_io.c): the client's reactor. */
struct dlock_io {
	struct dlock_client *client;
};

struct dlock_client {
	const dlock_driver *driver;
	void *backend;
	dlock_uri *uri;
	struct dlock_host host;
	dlock_capabilities caps;
	dlock_kind_caps kinds[DLOCK_KINDS]; /* per dlock_lock_kind, from the driver (feature.c) */
	int retry_loop;            /* 1: acquisitions go through dlock_retry_loop(), else the driver's acquire() */
	struct dlock_owner owner;  /* identity and owner record (owner.c), fixed at open */
	dlock_log_fn log;
	void *log_userdata;
	dlock_log_level log_level;

	pthread_mutex_t mu;
	pthread_cond_t cond;       /* busy handles, pins, acquires in progress */
	struct dlock_errs *errs;   /* per-thread error text; has its own locks (not mu) */

	struct dlock_entry **buckets;
	size_t nbuckets, nentries;
	struct dlock_lock *locks;  /* every live handle */
	size_t nlocks;
	unsigned inflight;         /* acquire/lock_new calls in progress: close waits for them */
	int closing, closed;
	dlock_client_stats stats;

	/* Background threads: one declares expiries and calls lost-lock
	 * callbacks, the other renews leases, so that a renewal stuck on the
	 * server never delays a loss being declared on time. */
	pthread_t bg_thread, renew_thread;
	int bg_started, bg_stop;
	int64_t bg_sleep_until;    /* when the sleeping thread wakes by itself; INT64_MIN while awake */
	int64_t renew_sleep_until; /* the same for the renewal thread */
	pthread_cond_t bg_cond, renew_cond;
	struct dlock_sched_heap sched[DLOCK_SCHEDS]; /* what each thread has to do next (sched.c) */
	int losses_pending;        /* a handle may have lost_pending set: the watch thread looks */

	/* The observer thread (observe.c), started by the first dlock_observe(). */
	pthread_t observe_thread;
	int observe_started, observe_stop;
	pthread_cond_t observe_cond;
	struct dlock_election *observed; /* elections observed now (list by observe_next_in_client) */
	int observers_disarmed;    /* closing has disarmed every watch (dlock_observer_stop()) */

	/* A loop client (dlock/loop.h; async.c, async_client.c): reactor NULL for a blocking client. */
	const struct dlock_loop_seam *seam; /* a loop client's: its layer's calls (see below); NULL: a blocking client */
	struct dlock_reactor *reactor; /* what the application's loop drives; freed when the close finishes */
	int was_loop;              /* opened by dlock_client_open_async(): a loop client, also after its close */
	struct dlock_workers *workers; /* where the backend's blocking calls run */
	int opening;               /* the asynchronous open has not completed */
	dlock_status open_status;  /* how it completed */
	struct dlock_op *open_waiters; /* operations started before it completed, in order */
	unsigned ops_working;      /* operations whose blocking part is running or queued on a worker */
	int async_closing;         /* dlock_client_close_async() was called */
	int close_finished;        /* the close's callback ran: the reactor goes at the end of this turn */
	unsigned callbacks_depth;  /* >0 while the loop runs a callback of this client */

	/* A native loop client (loop_native.c, loop_acquire.c): its driver is inline, nothing runs on a thread. */
	int loop_native;
	unsigned loop_inline;      /* >0 while the loop's thread calls a blocking function on the core's behalf */
	struct loop_acq *loop_acquires; /* acquisitions in progress */
	struct dlock_reactor_item loop_kick; /* steps the acquisitions waiting for a turn (dlock_loop_kick()) */
	int loop_kick_posted;
	unsigned loop_kick_gen;
	struct dlock_reactor_timer loop_tick; /* the background work: renewals, expiries, observers */
	int64_t loop_tick_due;     /* when loop_tick is set for; INT64_MAX: not set */
	struct dlock_reactor_item loop_tick_soon; /* posted when work comes due sooner, from any thread */
	int loop_tick_soon_posted; /* under mu */

	/* A loop client of a driver that runs on the loop (DLOCK_FACT_LOOP_IO, loop_io.c): opened on the loop,
	 * acquisitions through loop_acquire.c and the driver's try_acquire_start(), releases, extends and checks
	 * through its other _start methods, and the background's renewals and releases too (loop_renew.c); the
	 * rest on workers. */
	int loop_io;
	struct dlock_io io;        /* dlock_host_io()'s answer while loop_io */
	struct dlock_loop_close *loop_close; /* its close on the loop, while it runs (loop_close.c) */
	/* The background work (renewals, expiries) runs in the loop's tick (loop_native.c), not on threads:
	 * loop_native, or loop_io once the open backend said it runs on the loop. */
	int loop_bg;
};

/* The seam's wrappers (struct dlock_loop_seam): nothing, or OK, for a blocking client. */
static inline dlock_status dlock_seam_refuse_blocking(struct dlock_client *c, const char *call)
{
	return c && c->seam ? c->seam->refuse_blocking(c, call) : DLOCK_OK;
}

static inline dlock_status dlock_seam_refuse_unopened(struct dlock_client *c, const char *call)
{
	return c && c->seam ? c->seam->refuse_unopened(c, call) : DLOCK_OK;
}

static inline void dlock_seam_soon_locked(struct dlock_client *c, int64_t due_ns)
{
	if (c->seam)
		c->seam->soon_locked(c, due_ns);
}

static inline void dlock_seam_kick_locked(struct dlock_client *c)
{
	if (c->seam)
		c->seam->kick_locked(c);
}

static inline int dlock_seam_bg_call_locked(struct dlock_lock *l, enum dlock_bg_call what, uint64_t generation,
                                            int64_t lease_ns)
{
	return l->client->seam ? l->client->seam->bg_call_locked(l, what, generation, lease_ns) : 0;
}

static inline void dlock_seam_call_ended_locked(struct dlock_lock *l)
{
	if (l->client->seam)
		l->client->seam->call_ended_locked(l);
}


/* report.c: what a client tells its application. */
/** Record `msg` as the calling thread's last error on `c`; returns `status`.  c->mu held. */
dlock_status dlock_client_fail_locked(struct dlock_client *c, dlock_status status, const char *msg);
/** Same, c->mu not held. */
dlock_status dlock_client_fail(struct dlock_client *c, dlock_status status, const char *msg);
/** Log through the client's callback, if it takes `level`; a line is cut at 1023 bytes. */
void dlock_client_logf(struct dlock_client *c, dlock_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;
/** The same, with the arguments in `ap`. */
void dlock_client_vlogf(struct dlock_client *c, dlock_log_level level, const char *fmt, va_list ap);
/** The name of `e`, printable and shortened, for messages: at most `outlen` bytes with the NUL. */
void dlock_entry_printable(const struct dlock_entry *e, char *out, size_t outlen);

/* client.c: the two halves of an open, and a close without the checks of dlock_client_close(). */
/** A client for `text` and `opts`: parsed, its driver found, its parameters checked; not connected. */
dlock_status dlock_client_prepare(struct dlock_client **out, const char *text, const dlock_client_options *opts,
                                  dlock_error *err);
/** Open the driver, load its facts, start the background threads. */
dlock_status dlock_client_connect(struct dlock_client *c, dlock_error *err);
/** Close: cancel, stop the threads, release, close the driver; frees the client when nothing holds it. */
dlock_status dlock_client_close_now(struct dlock_client *c);

/* lifetime.c: a client's memory. */
/** A new client with the log settings of `opts` (may be NULL), nothing else yet; NULL out of memory. */
struct dlock_client *dlock_client_new(const dlock_client_options *opts);
/** Free a client that no thread and no handle can reach any more (its driver closed or never opened). */
void dlock_client_free(struct dlock_client *c);
/** Free the client's memory once it is closed and its last handle is gone.  c->mu held; unlocks it. */
void dlock_client_maybe_free_locked(struct dlock_client *c);

/* errmsg.c: thread-safe without c->mu (which may be held or not). */
/** A client's empty set of per-thread messages; DLOCK_ENOMEM when out of memory or thread keys. */
dlock_status dlock_errs_open(struct dlock_errs **out);
/** Free every thread's message of the client (accepts NULL).  No thread may use the client any more. */
void dlock_errs_close(struct dlock_errs *errs);
/** Make `msg` the calling thread's message; kept until its next set, the close, or the thread's exit. */
void dlock_errs_set(struct dlock_errs *errs, const char *msg);
/** The calling thread's message, or "". */
const char *dlock_errs_get(struct dlock_errs *errs);
/** Number of threads with a message (for tests): a thread's goes when it exits. */
size_t dlock_errs_count(struct dlock_errs *errs);

/* lock.c */
/** Driver-release every held handle of a closing client and finalise their driver state. */
void dlock_locks_shutdown(struct dlock_client *c);
/** Cancel every acquire in progress on `l`.  c->mu held on entry and exit (dropped inside). */
void dlock_lock_cancel_locked(struct dlock_lock *l);
/** Wait until no driver call runs on `l`, then mark one running.  c->mu held. */
void dlock_lock_begin_call(struct dlock_lock *l);
/** The call begun by dlock_lock_begin_call(), or a loop call (loop_call), has ended.  c->mu held. */
void dlock_lock_end_call(struct dlock_lock *l);

/* held.c: what the core keeps of a hold.  c->mu held throughout. */
/** Count `l` among the holders of its name (a new acquisition). */
void dlock_holder_add_locked(struct dlock_lock *l);
/** No longer count `l` among the holders, and let the local contenders look again. */
void dlock_holder_remove_locked(struct dlock_lock *l);
/** Lease accounting after a request sent at `sent_ns` succeeded. */
void dlock_lock_lease_renewed(struct dlock_lock *l, int64_t sent_ns, int64_t lease_ns);
/** Why the server no longer has `l` when a request sent at `sent_ns` says so:
 *  EXPIRED if the lease had ended by then, else TAKEN. */
dlock_lost_reason dlock_lock_gone_reason(const struct dlock_lock *l, int64_t sent_ns);
/** Longest loss detail kept, in bytes. */
#define DLOCK_LOST_DETAIL_MAX 255
/** The loss detail of `l`, "" when none. */
const char *dlock_lock_lost_text(const struct dlock_lock *l);
/** Declare the current acquisition lost and queue its callback. */
void dlock_lock_declare_lost(struct dlock_lock *l, dlock_lost_reason reason, const char *detail);
/** After the driver released a lost acquisition: let the next local contender go. */
void dlock_lock_loss_cleaned(struct dlock_lock *l);
/** What a release of the core's own (after a loss, at a linger's end, closing) answered: counted, and
 *  logged at `level` as `what` when it failed.  c->mu held. */
void dlock_lock_release_answered_locked(struct dlock_lock *l, dlock_log_level level, const char *what,
                                        dlock_status st, const char *msg);
/* What a failed release at a minimum hold's end is logged as (linger.c, background.c). */
#define DLOCK_LINGER_END_FAILED "minimum hold: releasing at the bound failed"
/**
 * Release `l` on the server for the core (a loss cleaned up, a linger ended), whoever holds it: the
 * handle is busy meanwhile (it may already be), server_releases counts it, and a failure other than
 * DLOCK_ENOTHELD is logged at `level` after `what`.  c->mu dropped inside.
 */
void dlock_lock_server_release_locked(struct dlock_lock *l, dlock_log_level level, const char *what);
/** Mark `l` free locally (no level left) and let the next local contender go. */
void dlock_lock_drop_hold_locked(struct dlock_lock *l);

/* options.c: `in` (NULL: the defaults), of any version, as current options in *out: renewal and fence
 * DLOCK_DEFAULT, DLOCK_ON or DLOCK_OFF, hold bounds 0, DLOCK_HOLD_NONE or >0.  DLOCK_EVERSION or
 * DLOCK_EINVAL with a static message in *why. */
/* lock.c: the parts of an acquisition, for the loop's engine (loop_acquire.c). */
/** An acquisition's parameters, from its options and the URI. */
struct dlock_acquire_params {
	int64_t wait_ms, lease_ms;
	int renew;
	int fencing;
	dlock_lock_mode mode;
	dlock_lost_fn on_lost;
	void *lost_userdata;
	int64_t min_hold_ms, max_hold_ms; /* 0: none */
};
/** Resolve `opts` (any version) for handle `l`; on failure *why says what is wrong. */
dlock_status dlock_acquire_params_resolve(const struct dlock_lock *l, const dlock_acquire_options *opts,
                                          struct dlock_acquire_params *p, const char **why);
/** Refuse another kind of the name, or answer a reentry; 1 when that decided the acquisition (*st). c->mu held. */
int dlock_acquire_admit_locked(struct dlock_lock *l, const struct dlock_acquire_params *p, dlock_status *st);
/** The local FIFO of a name's contenders. c->mu held. */
void dlock_queue_push(struct dlock_entry *e, struct dlock_queued *q);
void dlock_queue_remove(struct dlock_entry *e, struct dlock_queued *q);
/** 1 when `q` may ask the server now: nobody of the client contends, its turn, room among the holders. */
int dlock_queue_may_go(const struct dlock_entry *e, const struct dlock_queued *q);
/** The driver granted it: the handle becomes a holder, into the timetables. c->mu held. */
void dlock_become_holder_locked(struct dlock_lock *l, const struct dlock_acquire_params *p,
                                const dlock_acquired *acq, int64_t started_ns);
/** The message of a failed acquisition without the driver's own. */
const char *dlock_acquire_failure_text(dlock_status st, char *buf, size_t len, int64_t wait_ms);

/* lock.c: release, extend and check around their driver call, so that a loop client of a driver on
 * the loop (async.c) makes that call with the driver's _start method.  `nowait`: answer
 * DLOCK_STEP_ELSEWHERE, having changed nothing, where the call would wait (another call on the handle, a
 * lost callback running elsewhere) or make a driver call of its own (a minimum hold's linger).  After
 * DLOCK_STEP_DRIVER, the driver call, then the _end with its answer and message: the call's status. */
enum dlock_step { DLOCK_STEP_DONE, DLOCK_STEP_DRIVER, DLOCK_STEP_ELSEWHERE };
enum dlock_step dlock_release_begin(struct dlock_lock *l, int nowait, dlock_status *st, int *was_lost);
dlock_status dlock_release_end(struct dlock_lock *l, int was_lost, dlock_status st, const char *msg);
enum dlock_step dlock_extend_begin(struct dlock_lock *l, int64_t lease_ms, int nowait, dlock_status *st,
                                   int64_t *lease_ns);
dlock_status dlock_extend_end(struct dlock_lock *l, int64_t sent, int64_t lease_ns, dlock_status st, const char *msg);
enum dlock_step dlock_check_begin(struct dlock_lock *l, int nowait, dlock_status *st);
dlock_status dlock_check_end(struct dlock_lock *l, int64_t sent, dlock_status st, const char *msg);

/* lock.c, for loop clients (async.c). */
/** Check `opts` for handle `l` as dlock_acquire() would, and copy them as the current version into *copy. */
dlock_status dlock_acquire_check(const struct dlock_lock *l, const dlock_acquire_options *opts,
                                 dlock_acquire_options *copy, const char **why);
/** The handle's cancellation sequence now (raised by each dlock_cancel()). */
uint64_t dlock_lock_cancel_seq(struct dlock_lock *l);
/** dlock_acquire(), cancelled at once if `cancel_seq` (unless DLOCK_CANCEL_SEQ_NOW) is no longer the handle's. */
dlock_status dlock_acquire_since(dlock_lock *l, const dlock_acquire_options *opts, uint64_t cancel_seq);
/* election.c, the same for a campaign. */
dlock_status dlock_campaign_check(dlock_election *e, const dlock_acquire_options *opts, dlock_acquire_options *copy,
                                  const char **why);
dlock_status dlock_campaign_since(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                                  uint64_t *term, uint64_t cancel_seq);

dlock_status dlock_options_read(const dlock_acquire_options *in, dlock_acquire_options *out, const char **why);

/* hold.c: the bounds of a hold.  c->mu held throughout. */
/** Set the bounds of the acquisition that `l` just made (held_since now). */
void dlock_hold_begin(struct dlock_lock *l, int64_t min_hold_ms, int64_t max_hold_ms);
/** The lease to ask of a renewal of `l` at `now`: its lease, cut so that it ends at max_at. */
int64_t dlock_hold_renew_lease(const struct dlock_lock *l, int64_t now);
/** Why the watch thread finds `l` due: DLOCK_LOST_MAX_HOLD when its maximum is what ran out. */
dlock_lost_reason dlock_hold_due_reason(const struct dlock_lock *l, int64_t now);
/** Forget the hold of `l` (no longer held). */
void dlock_hold_clear(struct dlock_lock *l);

/* linger.c: the minimum hold.  c->mu held throughout (dropped where said). */
/**
 * A release of the last level of `l` (held, not lost, a call begun on it): when its minimum hold has
 * not passed, make it linger (on a TTL backend the lease is first set to end at the bound, c->mu
 * dropped for that driver call) and return 1; else 0 (release it now).
 */
int dlock_linger_begin_locked(struct dlock_lock *l);
/** End the linger of `l` (its bound passed, or the handle is freed): release it on the server
 *  (unless `leave_ttl` and its lease ends at the bound by itself) and let the name go.  c->mu dropped inside. */
void dlock_linger_end_locked(struct dlock_lock *l, int leave_ttl);

/* feature.c */
/** Ask the driver its facts into c->caps and c->kinds (a driver without kinds: "mutexes only").  Right after open(). */
void dlock_facts_load(struct dlock_client *c);

/* background.c */
/** Start the client's two threads; DLOCK_ENOMEM when one cannot be made (then none runs). */
dlock_status dlock_background_start(struct dlock_client *c);
/** Stop and join them (closing).  c->mu not held. */
void dlock_background_stop(struct dlock_client *c);
/** 1 if the calling thread is `c`'s watch thread, the one that calls lost-lock callbacks. */
int dlock_background_is_self(struct dlock_client *c);

/* sched.c: the background threads' timetables.  c->mu held throughout. */
/** Grow the timetables to hold `handles` handles, so that updates never allocate.  DLOCK_ENOMEM. */
dlock_status dlock_sched_reserve(struct dlock_client *c, size_t handles);
/** Free the timetables (the client's last handle is gone). */
void dlock_sched_free(struct dlock_client *c);
/** Put `l` where its fields say (held, busy, lost, loss_cleaned, next_renew, valid_until), and wake a
 *  background thread that would sleep past its new due time.  Call after every change of those. */
void dlock_sched_update(struct dlock_lock *l);
/** Take `l` out of both timetables (before it is freed). */
void dlock_sched_forget(struct dlock_lock *l);
/** The handle due first in timetable `which`, NULL when it is empty. */
struct dlock_lock *dlock_sched_first(struct dlock_client *c, int which);
/** Wake both background threads to look at the handles again (a loss to deliver or clean up). */
void dlock_sched_wake(struct dlock_client *c);

#endif
