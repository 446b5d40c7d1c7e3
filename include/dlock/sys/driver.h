/**
 * @file
 * @brief dlock driver contract — for people who write a backend.
 *
 * A backend is one `const dlock_driver` object filled with designated
 * initializers and registered under its URI scheme (built-in drivers are
 * listed in core/builtin_drivers.c; others call dlock_register_driver()).
 * Applications never call a driver: the core checks arguments, handles
 * reentrancy, in-process queueing (coalescing), deadlines, cancellation,
 * the waiting loop (backoff and wake-ups, for drivers that answer single
 * attempts through try_acquire()), renewal scheduling, lost-lock callbacks
 * and error text, and then calls the driver for what is particular to its
 * server.  examples/kv_driver.c is a network driver of the whole contract
 * to start from.
 *
 * Guarantees the core gives a driver:
 *   - open() is called once per client, close() once after every other
 *     call on that client has returned.
 *   - Per-lock state: the core allocates `lock_size` zeroed bytes per lock
 *     handle and passes them to every lock method as `lk`.  Calls on one
 *     `lk` never overlap.  Calls on different `lk` of one client may run
 *     concurrently from any threads, so a driver's client state must be
 *     thread-safe.
 *   - acquire() is never called for a name that another handle of the same
 *     client holds or is acquiring (coalescing happens in the core), with
 *     two exceptions, for the kinds with several holders: a shared
 *     acquisition of a read-write lock may be sent while other handles of
 *     the client hold the name shared (never while one holds it
 *     exclusive), and a semaphore's acquisition while fewer than N other
 *     handles of the client hold a permit of the name (so a driver must
 *     never count a permit that another `lk` of its client holds as this
 *     one's: a session that holds slot 0 cannot take slot 0 again); still
 *     never two acquisitions of one name at once; and
 *     release()/extend()/check() only on an `lk` whose acquire() succeeded
 *     and that was not released since.  One exception to the first: a
 *     handle whose loss the core declared (a report, an expired lease, an
 *     ENOTHELD from extend() or check()).  The core then calls release()
 *     on it from its background thread, whatever the server still has
 *     (for a lease that ran out: once the lease has ended on the server
 *     too), and only after that release() returned lets another handle of
 *     the client acquire the name; that acquisition of the lost handle
 *     gets no further call.  So release() must remove only what is still this
 *     `lk`'s own, and, when it cannot tell whether it did (an I/O error
 *     on a session that other handles share), leave nothing of it that
 *     would let another `lk` of the client be granted the lock on the
 *     strength of this one (for example end that session).
 *   - Names reaching lock_init() are 1..DLOCK_NAME_MAX bytes without NUL;
 *     their content is untrusted (escape or hash it, pass it as a parameter).
 *   - Kinds (ABI version 3): a handle made by dlock_rwlock_new() or
 *     dlock_semaphore_new() reaches the driver through lock_init_kind() only, and
 *     only when the driver said the kind is supported (feature(), or
 *     kind_capabilities() before version 7); a driver without
 *     lock_init_kind() has mutexes only, and the core answers
 *     DLOCK_ENOTSUP for every other kind.  For a driver that has it, the
 *     core calls lock_init_kind() for every handle, mutexes included (so
 *     the driver knows each handle's kind), and never lock_init().  The
 *     mode of an acquisition is read with dlock_wait_mode(); it is
 *     DLOCK_MODE_SHARED only on a handle of a kind that has a shared mode.
 *     Within one client the core refuses a name in use as another kind
 *     (DLOCK_EKIND), or as a semaphore of another N, before calling the
 *     driver; across clients the driver compares N with what the server
 *     keeps of the name's live holders and waiters (DLOCK_EKIND, with both
 *     numbers in the message).
 *
 * What a driver promises:
 *   - Every method returns a dlock_status and, on failure, writes a message
 *     with dlock_error_set() (never containing the password).
 *   - A lock that is lost while held (session expired, connection gone,
 *     taken over) is reported once through dlock_report_lost(), from any
 *     thread; the core delivers the user's callback on its own thread.
 *   - Every descriptor it opens is close-on-exec.
 *
 * Versioning: methods are only ever appended; each appended block raises
 * DLOCK_DRIVER_ABI_VERSION and is marked in struct dlock_driver with the
 * version that brought it:
 *   - version 1: open ... check;
 *   - version 2: control (the door for backend-specific operations),
 *     try_acquire and disarm (one attempt; the core owns the waiting);
 *   - version 3: kind_capabilities and lock_init_kind (kinds of lock other
 *     than the mutex: read-write locks, semaphores); extend_many (renewals
 *     batched).
 *   - version 4: inspect, list and break_lock (who holds a lock, and taking
 *     it from a stuck holder); dlock_host_owner() and the owner record.
 *   - version 5: proclaim, watch and unwatch (leader election: a leader's
 *     value beside its lock, and observers woken by the server).
 *   - version 6: gc (removing what unused names left on the server).
 *   - version 7: feature, the one place where a driver states its facts
 *     (one code for one kind): it replaces capabilities, kind_capabilities
 *     and the DLOCK_CTL_FEATURE code of the control door, which the core
 *     no longer reads from a driver of version 7 (leave them NULL); and
 *     lock_init is needed only by a driver without lock_init_kind (from
 *     any version).
 *   - version 8: no new method; the core asks a driver of version 8 for
 *     DLOCK_FACT_INLINE before open(), with `backend` NULL, so feature()
 *     must answer a code it does not know (or cannot answer without its
 *     client) with DLOCK_ENOTSUP before it touches `backend`.
 *   - version 9: try_acquire_start, release_start, extend_start and
 *     check_start, the non-blocking forms that a loop client calls on its
 *     loop's thread, with the loop's services (dlock_host_io(): descriptor
 *     watches and timers) and dlock_call_done(); DLOCK_FACT_LOOP_IO says a
 *     driver has them.
 * Registration accepts every version from 1 through DLOCK_DRIVER_ABI_VERSION
 * (DLOCK_EVERSION otherwise: a driver built for a newer library), and the
 * core never reads a slot past the version a driver declares, so a driver
 * built against an older header keeps working, its later slots counting as
 * absent.  The same rule holds for every struct that crosses this boundary
 * (dlock_uri, dlock_acquired, ...): fields are only appended, and the side
 * that did not allocate a struct reads only the fields of the version it
 * knows.  Registration also refuses a missing MUST method and a scheme that
 * is already registered.  A missing MAY method (or one past the driver's
 * version) makes the matching API call return DLOCK_ENOTSUP.
 */
#ifndef DLOCK_SYS_DRIVER_H
#define DLOCK_SYS_DRIVER_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"
#include "dlock/loop.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Version of struct dlock_driver; raised with each appended block of methods. */
#define DLOCK_DRIVER_ABI_VERSION 9

/* ------------------------------------------------------------ error text */

/** Size of dlock_error::msg, the NUL included; longer messages are truncated. */
#define DLOCK_ERROR_MAX 512

/** Where a driver call writes its failure detail.  Owned by the core. */
typedef struct dlock_error {
	char msg[DLOCK_ERROR_MAX]; /**< NUL-terminated; written by dlock_error_set() */
} dlock_error;

/**
 * Format a message into `err` (truncated to fit) and return `status`, so a
 * driver can write `return dlock_error_set(err, DLOCK_ECONNECT, "...", ...)`.
 * `err` may be NULL.
 */
DLOCK_API dlock_status dlock_error_set(dlock_error *err, dlock_status status, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/* ------------------------------------------------------------ parsed URI */

/** One host of a URI's comma-separated host list. */
typedef struct dlock_uri_host {
	const char *host; /**< "" when the authority is empty (file:///dir) */
	int port;         /**< 0 when not given */
} dlock_uri_host;

/** One backend parameter of a URI's query, `?key=value`. */
typedef struct dlock_uri_param {
	const char *key;   /**< percent-decoded */
	const char *value; /**< percent-decoded; "" for "?key" or "?key=" */
} dlock_uri_param;

/**
 * A URI parsed by the core: scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&...]
 * All strings are percent-decoded, NUL-terminated and owned by the core for
 * the life of the client.  The common parameters are taken out of `params`
 * and resolved into the fields below; `params` keeps only those the
 * driver's knows_param() accepted.
 */
typedef struct dlock_uri {
	const char *scheme;        /**< lower case, e.g. "redis" */
	const char *user;          /**< NULL when absent */
	const char *password;      /**< NULL when absent; never log it */
	size_t nhosts;             /**< at least 1; one empty host for "scheme:///path" */
	const dlock_uri_host *hosts; /**< `nhosts` hosts, in the URI's order */
	const char *path;          /**< "" when absent, else starts with '/' */
	size_t nparams;            /**< number of `params` */
	const dlock_uri_param *params; /**< the backend parameters, in the URI's order */
	const char *masked;        /**< the whole URI with the password as "***": safe to print */

	/* Common parameters: same meaning on every backend. */
	int64_t ttl_ms;             /**< `ttl`: default lease, default 30s */
	int64_t wait_ms;            /**< `wait`: default wait bound, default DLOCK_WAIT_FOREVER */
	int renew;                  /**< `renew`: automatic renewal, default 1 */
	const char *prefix;         /**< `prefix`: namespace for server-side names, default "dlock" */
	int64_t connect_timeout_ms; /**< `open_timeout`: connecting, default 5s */
	int64_t io_timeout_ms;      /**< `io_timeout`: one server command, default 5s */
	int fencing;                /**< `fencing`: take fencing tokens, default 1 (see dlock_wait_wants_token) */

	/* Appended fields: the core allocates every dlock_uri, so a new field
	 * at the end never changes what an older driver reads. */
	int prefix_given;           /**< 1 when the URI gave `prefix`, 0 when `prefix` is the default: a backend
	                                 whose names never take a prefix (file://, mem://) refuses it (DLOCK_EURI) */
	const char *identity;       /**< `identity`: who the client is, shown by inspection (ABI version 4); after
	                                 dlock_uri_parse() NULL when absent, and in the URI a driver's open() gets
	                                 never NULL: dlock_client_options::identity, the parameter, or "HOST:PID" */
	int64_t min_hold_ms;        /**< `min_hold`: default minimum hold of an acquisition, 0 none (ABI version 4) */
	int64_t max_hold_ms;        /**< `max_hold`: default maximum hold, 0 none (ABI version 4) */
} dlock_uri;

/** Value of backend parameter `key` in `uri`, or NULL when absent. */
DLOCK_API const char *dlock_uri_get(const dlock_uri *uri, const char *key);

/**
 * Boolean backend parameter `key` (1, 0, true, false, on, off, yes, no)
 * into *out; *out is left alone when the parameter is absent.  Any other
 * value is DLOCK_EURI with a message naming the parameter.
 */
DLOCK_API dlock_status dlock_uri_get_bool(const dlock_uri *uri, const char *key, int *out, dlock_error *err);

/**
 * Parse `text` into a new dlock_uri, exactly as the core does before it
 * calls open(): for a backend's own tests and fuzz harnesses (a driver is
 * always handed its URI parsed).  Common parameters are resolved into the
 * struct, backend parameters left in `params` unchecked.  DLOCK_EURI with a
 * message (password masked) for a malformed URI, DLOCK_EINVAL for NULL or
 * "", DLOCK_ENOMEM.  Free with dlock_uri_free().  Thread-safe.
 */
DLOCK_API dlock_status dlock_uri_parse(const char *text, dlock_uri **out, dlock_error *err);

/** Free a dlock_uri from dlock_uri_parse() (NULL is fine). */
DLOCK_API void dlock_uri_free(dlock_uri *uri);

/* --------------------------------------------------------------- waiting */

/**
 * A waiting acquisition: its deadline and its cancellation.  Owned by the
 * core; valid during the acquire() call that receives it, or from the
 * first try_acquire() of an acquisition until its disarm() returns (or,
 * when nothing was armed, until its last try_acquire() returns).  A driver
 * that waits for a notification keeps the pointer only that long.
 */
typedef struct dlock_wait dlock_wait;

/** Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
DLOCK_API int64_t dlock_monotonic_ns(void);

/** Deadline on dlock_monotonic_ns(); INT64_MAX for "forever". */
DLOCK_API int64_t dlock_wait_deadline_ns(const dlock_wait *w);

/** 1 when this acquisition must not wait (try once), else 0. */
DLOCK_API int dlock_wait_try_once(const dlock_wait *w);

/**
 * 1 when the caller wants a fencing token from this acquisition (the
 * default), 0 when it asked for none: a driver may then skip the work the
 * token costs (a counter, a sequence, a sync) and leave
 * dlock_acquired::token at 0, which the core never hands out.
 */
DLOCK_API int dlock_wait_wants_token(const dlock_wait *w);

/**
 * Mode of this acquisition (ABI version 3): DLOCK_MODE_EXCLUSIVE, or
 * DLOCK_MODE_SHARED for a reader of a read-write lock.  A driver keeps the
 * mode of a successful acquisition in its lock state for release(),
 * extend() and check().
 */
DLOCK_API dlock_lock_mode dlock_wait_mode(const dlock_wait *w);

/**
 * Milliseconds left before the deadline, at least 1 while time remains,
 * 0 once it has passed, -1 for forever.  For server-side waits
 * (lock_timeout, session timeouts).
 */
DLOCK_API int64_t dlock_wait_remaining_ms(const dlock_wait *w);

/**
 * Sleep until dlock_wait_wake(), cancellation, the deadline, or `max_ns`
 * from now (max_ns < 0: no extra limit), whichever comes first.  A wake
 * that arrived since the previous sleep returns at once (wakes are not
 * lost).  Returns DLOCK_OK (woken or max_ns passed: try again),
 * DLOCK_ETIMEDOUT (deadline passed) or DLOCK_ECANCELED.
 */
DLOCK_API dlock_status dlock_wait_sleep(dlock_wait *w, int64_t max_ns);

/** Wake the sleeper of `w`.  Any thread; never blocks for long. */
DLOCK_API void dlock_wait_wake(dlock_wait *w);

/** DLOCK_ECANCELED once the acquisition was cancelled, else DLOCK_OK. */
DLOCK_API dlock_status dlock_wait_cancelled(const dlock_wait *w);

/**
 * Register `fn(arg)` to be called, from the cancelling thread, when the
 * acquisition is cancelled while the driver blocks in a server call (for
 * example to send the server a cancel request).  At most one; `fn` NULL
 * clears it, and after clearing returns, `fn` is no longer running.  Called
 * at once if the wait is already cancelled.
 */
DLOCK_API void dlock_wait_set_interrupt(dlock_wait *w, void (*fn)(void *arg), void *arg);

/* ------------------------------------------------------- core services */

/** The core's side of one open client, handed to open().  Owned by the core. */
typedef struct dlock_host dlock_host;

/** Log through the client's log callback (message must not contain secrets). */
DLOCK_API void dlock_host_log(dlock_host *host, dlock_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

/**
 * Report that the lock whose state is `lk` was lost while held.  Any thread,
 * any time, also from inside a driver method and with the driver's own
 * mutexes held (the core never holds its locks while calling a driver, so
 * this cannot deadlock); it only queues the report.  Report only for the
 * current acquisition of `lk`.
 * The core ignores a report for an `lk` that is not held, and reports each
 * acquisition at most once.
 */
DLOCK_API void dlock_report_lost(dlock_host *host, void *lk, dlock_lost_reason reason, const char *detail);

/**
 * The driver's process-wide object, kept by the registry so that drivers
 * stay const and hold no globals: made by `create()` on the first call for
 * this driver (under the registry's lock), the same pointer on every later
 * call from any client, never freed.  For backends whose clients in one
 * process share state (mem://).  NULL if create() returned NULL.
 */
DLOCK_API void *dlock_host_shared(dlock_host *host, void *(*create)(void));

/**
 * The client's owner record (ABI version 4): its identity, host name and
 * process id, encoded as `id=IDENTITY&host=HOST&pid=PID` with every byte
 * outside [A-Za-z0-9._~:-] written as %XX, at most DLOCK_OWNER_MAX bytes.
 * A driver stores it beside each lock the client holds (in the value, the
 * node's data) so that inspection in any process can show the holder
 * (dlock_info_holder() reads it back).  Static for the client's life;
 * *len (may be NULL) gets its length.  Holds no secret.
 */
DLOCK_API const char *dlock_host_owner(dlock_host *host, size_t *len);

/* ------------------------------------------------- the loop (ABI version 9) */

/**
 * The event loop of a loop client (dlock/loop.h), as a driver that runs on
 * it sees it (ABI version 9): a driver that answers DLOCK_FACT_LOOP_IO 1
 * is opened by a loop client on the loop's thread, and dlock_host_io()
 * gives it this loop.  Such a driver keeps its blocking methods for the
 * blocking clients (and for what a loop client does not yet do on the
 * loop), and adds the non-blocking forms (try_acquire_start,
 * release_start, extend_start, check_start): they send their request, ask
 * the loop to watch their descriptors and set their timers here, and
 * finish later with dlock_call_done().  Nothing of this is ever used from
 * another thread: every function here, every callback it makes and every
 * _start method runs on the loop's thread, and none of them may block.
 * Owned by the core; valid from open() until close() returns.
 */
typedef struct dlock_io dlock_io;

/**
 * The loop of the client being opened, or NULL: a blocking client (or a
 * driver without DLOCK_FACT_LOOP_IO), whose methods block as ever.  Ask in
 * open() and keep it.
 */
DLOCK_API dlock_io *dlock_host_io(dlock_host *host);

/** A watched descriptor is ready: `events` DLOCK_IO_READ, DLOCK_IO_WRITE, DLOCK_IO_ERROR (dlock/loop.h). */
typedef void dlock_io_ready_fn(void *arg, int fd, unsigned events);

/**
 * Watch `fd` for `events` (DLOCK_IO_READ, DLOCK_IO_WRITE or both) and call
 * `ready(arg, fd, events)` on the loop when it is ready, until the next
 * call for `fd` replaces the watch; `events` 0 stops watching it (do so
 * before closing `fd`: the application's loop hears of the removal while
 * the descriptor is open).  An error or hang-up comes as readable (and
 * DLOCK_IO_ERROR).  Level-triggered: `ready` is called again while the
 * condition holds.  DLOCK_OK, DLOCK_ENOMEM, or DLOCK_EIO when the loop
 * refuses the descriptor.
 */
DLOCK_API dlock_status dlock_io_watch(dlock_io *io, int fd, unsigned events, dlock_io_ready_fn *ready, void *arg);

/** A one-shot timer of the loop (dlock_io_timer_new()). */
typedef struct dlock_io_timer dlock_io_timer;

/** A timer that calls `fire(arg)` on the loop once it is due; not set yet.  DLOCK_OK or DLOCK_ENOMEM. */
DLOCK_API dlock_status dlock_io_timer_new(dlock_io *io, void (*fire)(void *arg), void *arg, dlock_io_timer **out);

/**
 * Set `t` to fire `ms` milliseconds from now (0: on the loop's next turn),
 * replacing the time set before; `ms` < 0 stops it.  DLOCK_OK or
 * DLOCK_ENOMEM.
 */
DLOCK_API dlock_status dlock_io_timer_set(dlock_io_timer *t, int64_t ms);

/** Stop and free `t` (NULL is fine), also from inside its own `fire`. */
DLOCK_API void dlock_io_timer_free(dlock_io_timer *t);

/**
 * One call of a _start method in progress (ABI version 9).  Owned by the
 * core, as are the out-parameters the method was given with it (`retry`,
 * `out`, `err`), which stay valid until dlock_call_done().
 */
typedef struct dlock_call dlock_call;

/**
 * End `call` with `status`, the answer the blocking method would have
 * returned (its out-parameters and message written first).  Exactly once
 * per call that its _start method started (returned DLOCK_OK); on the
 * loop's thread, from a watch or timer callback, or from inside the _start
 * method itself.  The core goes on after the callback returns, so the
 * driver may keep using its state around the call.
 */
DLOCK_API void dlock_call_done(dlock_call *call, dlock_status status);

/**
 * Run `fn(arg)` on a worker thread of the client, then end `call` with the
 * status it returns, as dlock_call_done() would (ABI version 9): for a
 * _start method with no non-blocking form yet for this lock (a kind, or a
 * lock taken some other way, that the driver does not run on the loop), so
 * that its blocking form never blocks the loop.  `fn` may block; it runs
 * beside the loop's calls on other locks, under the rules of the blocking
 * methods, and no other call on this lock comes before `call` ends.  From
 * the _start method, on the loop's thread.  DLOCK_OK (then `call` ends
 * later, never inside this call), or DLOCK_ENOMEM when no thread can be
 * had (`fn` does not run; the _start method fails with it).
 */
DLOCK_API dlock_status dlock_call_offload(dlock_call *call, dlock_status (*fn)(void *arg), void *arg);

/** Longest owner record of dlock_host_owner(), in bytes without the NUL. */
#define DLOCK_OWNER_MAX 640

/* ------------------------------------------------------------ inspection */

/**
 * Where a driver writes what inspect() or list() found (ABI version 4).
 * Owned by the core; valid during that call.
 */
typedef struct dlock_info dlock_info;

/**
 * Begin the description of one lock: its `name` (`len` bytes; NULL when
 * the server does not keep it), the `resource` where the server keeps it
 * (a key, a path: printable, NULL for none; cut at 512 bytes), the `kind`
 * it is in use as, `permits` (N of a semaphore, 1 otherwise, 0 unknown)
 * and `waiters` (-1 unknown).  inspect() calls it at most once (the core
 * fills in the name and an empty lock when it does not); list() once per
 * lock.  Strings are copied.  DLOCK_ENOMEM, or DLOCK_EINVAL after a
 * second call from inspect().
 */
DLOCK_API dlock_status dlock_info_lock(dlock_info *info, const char *name, size_t len, const char *resource,
                                       dlock_lock_kind kind, uint32_t permits, int64_t waiters);

/**
 * Add a holder to the lock begun last: what the server says of it in `h`
 * (strings copied, NULL taken as ""), and, when `owner` is not NULL, the
 * holder's owner record (`owner_len` bytes, as dlock_host_owner() made it,
 * possibly by an older or newer library): its identity, host and pid
 * replace those of `h`; a record that does not parse is ignored.
 * DLOCK_ENOMEM, or DLOCK_EINVAL when no lock was begun.
 */
DLOCK_API dlock_status dlock_info_holder(dlock_info *info, const dlock_holder *h, const char *owner,
                                         size_t owner_len);

/** A dlock_holder with every field "unknown" (pass to dlock_info_holder() after setting what is known). */
#define DLOCK_HOLDER_INIT { "", "", 0, -1, -1, 0, DLOCK_MODE_EXCLUSIVE, -1, "", "" }

/* ------------------------------------------------------- helpers */

/** Fill `buf` with `len` bytes from the OS random source.  DLOCK_EIO on failure. */
DLOCK_API dlock_status dlock_random_bytes(void *buf, size_t len);

/** SHA-256 of `data`.  Thread-safe. */
DLOCK_API void dlock_sha256(const void *data, size_t len, unsigned char out[32]);

/** Lower-case hex of `len` bytes into `out` (2*len+1 bytes, NUL-terminated). */
DLOCK_API void dlock_hex(const unsigned char *bytes, size_t len, char *out);

/**
 * @fn void dlock_name_component(const char *name, size_t len, char *out)
 * Map a name to one safe path component for file names and znodes:
 * bytes [A-Za-z0-9_-] are kept, every other byte (including '.', '/', '%',
 * spaces, controls, non-ASCII) becomes "%XX"; a result longer than
 * DLOCK_COMPONENT_MAX is cut and given "~" and the hex SHA-256 of the whole
 * name.  Distinct names give distinct components; never "", "." or "..".
 * `out` needs DLOCK_COMPONENT_MAX + 1 bytes.
 */
#define DLOCK_COMPONENT_MAX 200 /**< Longest result of dlock_name_component(), in bytes without the NUL. */
DLOCK_API void dlock_name_component(const char *name, size_t len, char *out);

/**
 * The name a component of dlock_name_component() stands for (ABI version
 * 4), for a driver that lists what it finds on its server (file names,
 * znodes): `comp_len` bytes of `comp` (untrusted) decoded into `out`
 * (DLOCK_NAME_MAX bytes, not NUL-terminated).  Returns the name's length;
 * 0 for a long name's cut-and-digest form (the name is not in it); -1 for
 * anything dlock_name_component() does not write (checked by encoding the
 * result again).  Pure, thread-safe.
 */
DLOCK_API int dlock_name_component_decode(const char *comp, size_t comp_len, char *out);

/**
 * Append `len` bytes of `s` to `out` percent-encoded as the owner record
 * encodes its fields (dlock_host_owner()), for a driver that stores more
 * fields beside it or writes its parts elsewhere: bytes [A-Za-z0-9._~:-]
 * as they are, every other byte (NUL included) as "%XX", upper-case hex.
 * Writes from out[n] on, `cap` being the size of `out` (more than n), and
 * NUL-terminates; stops early, never inside an escape, when fewer than
 * five bytes of `out` are left before a byte, so the whole of `s` needs
 * cap >= n + 3 * len + 2.  Returns the new length (where the NUL is).
 * The caller owns both buffers; pure, thread-safe.
 */
DLOCK_API size_t dlock_percent_encode(char *out, size_t cap, size_t n, const char *s, size_t len);

/**
 * Decode `len` bytes of `s`, percent-encoded as dlock_percent_encode()
 * writes them (any "%XX", either case, and any other byte as it is), into
 * `out` of `cap` bytes (at least 1): at most cap - 1 bytes, NUL-terminated.
 * Returns the length of the whole decoded text, which may be more than
 * was written (as snprintf() does), or -1 for a bad escape or a decoded
 * NUL byte.  The caller owns both buffers; pure, thread-safe.
 */
DLOCK_API long dlock_percent_decode(char *out, size_t cap, const char *s, size_t len);

/** Longest text of dlock_decimal(), in bytes without the NUL: "-9223372036854775808". */
#define DLOCK_DECIMAL_MAX 20

/**
 * `v` in decimal ('-' first when negative) and a NUL into `out`, which
 * DLOCK_DECIMAL_MAX + 1 bytes always fit; returns the length without the
 * NUL.  No locale and no printf, for a driver's hot path (a protocol's
 * lengths, a statement's parameters).  The caller owns `out`; pure,
 * thread-safe; cannot fail.
 */
DLOCK_API size_t dlock_decimal(char *out, int64_t v);

/**
 * Initialise `cond` on CLOCK_MONOTONIC, the clock of dlock_monotonic_ns(),
 * so that dlock_cond_wait_until() can wait for a deadline taken from it.
 * The caller owns `cond` and destroys it (pthread_cond_destroy()).
 */
DLOCK_API void dlock_cond_init_monotonic(pthread_cond_t *cond);

/**
 * Wait on `cond` (made by dlock_cond_init_monotonic()) with `mu` held
 * until it is signalled or `deadline_ns` (dlock_monotonic_ns() time;
 * INT64_MAX: no deadline) has passed; `mu` is held again on return.
 * Returns ETIMEDOUT once the deadline has passed, else 0: signalled, or
 * woken for no reason, so the caller checks its condition again.  Any
 * thread, as pthread_cond_timedwait().
 */
DLOCK_API int dlock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ns);

/* --------------------------------------------------------------- driver */

/** What an acquire() reports on success. */
typedef struct dlock_acquired {
	uint64_t token;      /**< fencing token (ignored when the class is NONE) */
	int64_t sent_ns;     /**< drivers with extend(): monotonic time from which the lease runs (when the
	                          winning request was sent, at the latest when the server granted it); 0: the
	                          time acquire() was called */
	uint32_t slot;       /**< semaphores, where the driver says DLOCK_FACT_SLOTS: the permit's slot, 0..N-1,
	                          held by no other live permit of the name (ABI version 3; the core zeroes it first) */
} dlock_acquired;

/**
 * What a handle is (ABI version 3), handed to lock_init_kind().  Owned by
 * the core; fields are only appended.
 */
typedef struct dlock_kind_spec {
	dlock_lock_kind kind; /**< DLOCK_KIND_MUTEX, DLOCK_KIND_RWLOCK, DLOCK_KIND_SEMAPHORE */
	uint32_t permits;     /**< holders allowed at once: N (1..DLOCK_PERMITS_MAX) for a semaphore, 1 for a
	                           mutex and a read-write lock */
} dlock_kind_spec;

/**
 * What a backend does with one kind of lock, filled by kind_capabilities()
 * (ABI versions 3 to 6; from version 7 feature() answers each field's
 * code).  The core zeroes it first, so a field a driver does not know
 * stays 0; fields are only appended.
 */
typedef struct dlock_kind_caps {
	int supported;              /**< 1: lock_init_kind() accepts this kind */
	dlock_rwlock_policy policy; /**< read-write locks: who goes first (DLOCK_FEATURE_RWLOCK) */
	dlock_fencing read_fencing; /**< read-write locks: the token of a shared acquisition; semaphores: the
	                                 token of a permit (only with `slots`); NONE: the core asks no token
	                                 of such an acquisition (dlock_wait_wants_token() is 0) */
	int kind_checked;           /**< 1: acquire fails with DLOCK_EKIND while the server shows the name in use
	                                 as another kind (DLOCK_FEATURE_KIND_CHECK); 0: the kinds exclude each
	                                 other on this backend, so there is nothing to refuse */
	int core_waits;             /**< 1: acquisitions of this kind always go through try_acquire() and the core's
	                                 waiting loop, also on a client whose wake-up is DLOCK_WAKEUP_SERVER_QUEUE
	                                 (the server queues the waiters of the other kinds only); 0: the client's
	                                 rule (see try_acquire) */
	dlock_semaphore_order order; /**< semaphores: in which order waiters get a permit (DLOCK_FEATURE_SEMAPHORE;
	                                  NONE is taken as UNORDERED for a supported kind) */
	int slots;                  /**< semaphores: 1: acquire() reports the permit's slot (dlock_acquired::slot);
	                                 0: permits have no slot, and so no token either */
} dlock_kind_caps;

/*
 * The methods.  Every one that returns a dlock_status writes, on failure,
 * a message into `err` with dlock_error_set() (no password, no key); the
 * core adds nothing to it but the status.  "Threads" says from where the
 * core may call a method; per-lock calls never overlap on one `lk`.
 */

/**
 * Open one client: parse what the core left in `uri` (the backend
 * parameters the driver accepted, hosts, path), connect or check what it
 * needs, and store its state in *backend.  `host` is the core's side of
 * the client, for dlock_host_log(), dlock_report_lost() and
 * dlock_host_shared(); keep it for the client's life.  `uri` stays valid
 * until close().  Returns DLOCK_OK, DLOCK_EURI (a URI this backend cannot
 * use: say which part), DLOCK_ECONNECT (unreachable within
 * uri->connect_timeout_ms), DLOCK_EAUTH, DLOCK_ENOTFOUND, DLOCK_ENOMEM...;
 * on failure nothing is left open and close() is not called.
 * Threads: the thread of dlock_client_open().  MUST.
 */
typedef dlock_status dlock_driver_open_fn(const dlock_uri *uri, dlock_host *host, void **backend,
                                          dlock_error *err);

/**
 * Free the client's state: close connections (ending sessions, so that
 * the server frees what they held) and descriptors.  Called once, after
 * every other call on the client has returned and every lock_fini().
 * Must not block for longer than an I/O timeout.  Threads: the thread of
 * dlock_client_close().  MUST.
 */
typedef void dlock_driver_close_fn(void *backend);

/**
 * Fill *caps with what the backend promises for this client (the URI may
 * change it: RedLock is AP, fair=1 queues).  Strings static.  Called once,
 * right after open(); the core keeps the answer.  MUST in versions 1 to 6;
 * from version 7 feature() answers these facts and the slot is not read.
 */
typedef void dlock_driver_capabilities_fn(void *backend, dlock_capabilities *caps);

/**
 * 1 if `key` is a backend parameter this driver accepts in a URI, else 0:
 * the core refuses a URI with a parameter no one knows (DLOCK_EURI), so
 * open() sees only known ones.  Pure; any thread.  MAY (absent: none).
 */
typedef int dlock_driver_knows_param_fn(const char *key);

/**
 * Prepare the zeroed `lock_size` bytes at `lk` for the lock `name` (1 to
 * DLOCK_NAME_MAX bytes, no NUL, untrusted: hash or escape it, never splice
 * it into a command, script or path).  May allocate (freed in lock_fini())
 * but should not talk to the server.  DLOCK_OK, DLOCK_ENOMEM, or
 * DLOCK_EINVAL for a name the backend cannot map.  Threads: the thread of
 * dlock_lock_new().  MUST, unless the driver has lock_init_kind(), which
 * the core then calls instead for every handle.
 */
typedef dlock_status dlock_driver_lock_init_fn(void *backend, void *lk, const char *name, size_t len,
                                               dlock_error *err);

/**
 * Free what lock_init() allocated.  Called when the core no longer counts
 * the lock as held; if the driver still holds it on the server (a lease
 * the core declared lost), it drops that hold here.  Threads: the thread
 * of dlock_lock_free() or dlock_client_close().  MAY.
 */
typedef void dlock_driver_lock_fini_fn(void *backend, void *lk);

/**
 * Acquire `lk` within `w`'s deadline with a lease of `lease_ms`, waiting
 * itself: for a server that queues the waiters (a lock queue, a
 * predecessor watch).  MUST in version 1; from version 2 a driver has this
 * or try_acquire() (below), whose waiting the core does.
 * Returns DLOCK_OK (fill *out), DLOCK_EBUSY when it gave up because the
 * lock stayed held until the deadline (the core turns it into ETIMEDOUT
 * for bounded waits), DLOCK_ECANCELED when dlock_wait_sleep() or
 * dlock_wait_cancelled() said so (register dlock_wait_set_interrupt() to
 * cut a blocking server call short), or an error.  On any failure the
 * driver leaves nothing of this attempt on the server.  A loss noticed
 * before it returns may be reported at once (dlock_report_lost()); the
 * core delivers it after the acquisition.  Threads: the acquiring thread.
 */
typedef dlock_status dlock_driver_acquire_fn(void *backend, void *lk, int64_t lease_ms, dlock_wait *w,
                                             dlock_acquired *out, dlock_error *err);

/**
 * Release `lk`, owner-only: remove the lock on the server only if it is
 * still this acquisition's.  DLOCK_OK, DLOCK_ENOTHELD when it was no longer
 * ours (expired, taken, session gone), or an error (DLOCK_ECONNECT...:
 * the lock then ends with its lease or session).  Threads: any thread
 * (the application's, or the core's background thread after a loss).
 * MUST.
 */
typedef dlock_status dlock_driver_release_fn(void *backend, void *lk, dlock_error *err);

/**
 * Extend the lease of held `lk` to `lease_ms` from now (TTL backends) or
 * send the session's heartbeat (session backends).  DLOCK_OK,
 * DLOCK_ENOTHELD if no longer ours (the core then declares the loss), or
 * an error such as DLOCK_ECONNECT (the core tries again until the lease
 * runs out).  Threads: the core's renewal thread, or the application's
 * in dlock_extend().  MAY: without it there is nothing to renew.
 */
typedef dlock_status dlock_driver_extend_fn(void *backend, void *lk, int64_t lease_ms, dlock_error *err);

/** The most locks the core hands to one extend_many() call. */
#define DLOCK_RENEW_BATCH_MAX 128

/**
 * Renew several held locks at once (ABI version 3; MAY): what extend()
 * does for each of lks[0..n), with a lease of lease_ms[i] each, in as few
 * round trips as the server allows (Redis: one pipeline per connection;
 * a session backend: one heartbeat per session).  out[i] gets what
 * extend() would have answered for lks[i]; `err` the message of the first
 * failure.  Threads: the core's renewal thread, with at most
 * DLOCK_RENEW_BATCH_MAX locks, each held and in no other call meanwhile.
 * Without it the core calls extend() once per lock.
 */
typedef void dlock_driver_extend_many_fn(void *backend, void *const *lks, const int64_t *lease_ms, size_t n,
                                         dlock_status *out, dlock_error *err);

/**
 * Ask the server whether held `lk` is still ours: DLOCK_OK, DLOCK_ENOTHELD
 * (the core then declares the loss), or DLOCK_EUNCERTAIN when it cannot
 * tell now (unreachable, session may live) — never another status.
 * Threads: the application's, in dlock_check().  MAY.
 */
typedef dlock_status dlock_driver_check_fn(void *backend, void *lk, dlock_error *err);

/**
 * What a try_acquire() that did not acquire tells the core's waiting loop
 * (ABI version 2).  The core sets `after_ms` to -1 and the rest to 0
 * before each attempt.
 */
typedef struct dlock_retry {
	int64_t after_ms; /**< -1: when the core's backoff says; 0: at once; > 0: at the latest after this
	                       many ms (for example when the holder's lease ends), earlier if woken */
	int armed;        /**< 1: a wake-up is armed for this acquisition and can fire: the driver will call
	                       dlock_wait_wake() when the lock may have come free, so the core sleeps until
	                       then (or `after_ms`) instead of backing off.  Once any attempt set it, the core
	                       calls disarm() when the acquisition ends; an attempt whose wake-up cannot fire
	                       for now (a subscription being re-established) answers 0, and the core then
	                       polls with its backoff.  Honoured only from a driver that has disarm(). */
	int transient;    /**< with a failure other than DLOCK_EBUSY: 1 when trying again may succeed (a
	                       server unreachable for now); the core then tries again within the deadline
	                       and, once the deadline passes, returns this failure and its message */
} dlock_retry;

/**
 * One attempt to acquire `lk` with a lease of `lease_ms` (ABI version 2;
 * MAY, but a driver needs this or acquire()).  The core owns the wait: it
 * calls this again after a backoff or a wake-up until the lock is acquired,
 * the deadline passes (DLOCK_ETIMEDOUT, or DLOCK_EBUSY for a try-once
 * acquisition), the acquisition is cancelled or the client closes.  Returns
 * at once, after at most one exchange with the server, without sleeping:
 *   - DLOCK_OK: acquired; fill *out.
 *   - DLOCK_EBUSY: someone else holds it; say in *retry when to try again,
 *     and write why in `err` (kept as the message if the wait ends here).
 *   - any other failure: the acquisition ends with it, unless
 *     retry->transient says that trying again may help.
 * On every failure the driver leaves nothing of this attempt on the server.
 *
 * Wake-ups: to be woken by a release instead of polling, the driver arms a
 * notification for `w` (a subscription, a watch, a place in a queue) and
 * sets retry->armed.  It arms *before* sending the attempt whose EBUSY it
 * reports, so that a release between that answer and the core's sleep is
 * not missed (dlock_wait remembers a wake that arrives early); a driver
 * that arms only after a first EBUSY (so that an uncontended acquire costs
 * nothing) answers that EBUSY with after_ms 0, and the core tries again at
 * once.  What is armed stays armed across the attempts of one acquisition
 * (keep it in the lock state `lk`) until disarm(); `w` stays valid until
 * then.  `w` is the same
 * for all attempts of one acquisition; dlock_wait_wants_token() and
 * dlock_wait_try_once() may be read, dlock_wait_sleep() must not be called.
 *
 * Which method the core calls: acquire() when the driver has no
 * try_acquire(), or when it has both and the client's capabilities say
 * DLOCK_WAKEUP_SERVER_QUEUE (the server queues the waiters itself, as a
 * fair queue does), unless the handle's kind says DLOCK_FACT_CORE_WAITS
 * (a queue that serves mutexes only); try_acquire() otherwise.
 */
typedef dlock_status dlock_driver_try_acquire_fn(void *backend, void *lk, int64_t lease_ms, dlock_wait *w,
                                                 dlock_retry *retry, dlock_acquired *out, dlock_error *err);

/**
 * Undo what try_acquire() armed for `w` (ABI version 2; MAY, and needed by
 * a driver that ever sets retry->armed).  Called once per acquisition in
 * which an attempt set retry->armed, on every way out of the core's loop
 * (acquired, failed, timed out, cancelled, client closing), after the last
 * attempt, on the acquiring thread.  After it returns the driver no longer
 * uses `w`.
 */
typedef void dlock_driver_disarm_fn(void *backend, void *lk, dlock_wait *w);

/*
 * The non-blocking forms (ABI version 9; MAY, all four or none, and only
 * with DLOCK_FACT_LOOP_IO): what try_acquire(), release(), extend() and
 * check() do, started on a loop client's loop thread without waiting.
 * Each takes the arguments of its blocking form and a `call`; it returns
 * DLOCK_OK once it has started (then dlock_call_done(call, status) comes
 * exactly once, with the status the blocking form would have returned,
 * its out-parameters and `err` written), or fails at once with any other
 * status and a message in `err` (then no dlock_call_done()).  The rules of
 * the blocking forms hold — one call at a time per `lk` (the core's
 * renewals and its releases after a loss are _start calls on the loop
 * too, never beside another call on the same `lk`); the same wake-ups,
 * arming (retry->armed) and disarm() for try_acquire_start; the driver
 * bounds each call by uri->io_timeout_ms with a timer of its own, and ends
 * every call it started before close() returns (the core calls close()
 * only when none is in progress).
 */
/** try_acquire() without waiting for the server's answer (ABI version 9). */
typedef dlock_status dlock_driver_try_acquire_start_fn(void *backend, void *lk, int64_t lease_ms, dlock_wait *w,
                                                       dlock_retry *retry, dlock_acquired *out, dlock_error *err,
                                                       dlock_call *call);
/** release() without waiting for the server's answer (ABI version 9). */
typedef dlock_status dlock_driver_release_start_fn(void *backend, void *lk, dlock_error *err, dlock_call *call);
/** extend() without waiting for the server's answer (ABI version 9). */
typedef dlock_status dlock_driver_extend_start_fn(void *backend, void *lk, int64_t lease_ms, dlock_error *err,
                                                  dlock_call *call);
/** check() without waiting for the server's answer (ABI version 9). */
typedef dlock_status dlock_driver_check_start_fn(void *backend, void *lk, dlock_error *err, dlock_call *call);

/**
 * The control door (ABI version 2), after SQLite's xFileControl: a
 * backend-specific operation `op` on the client (`lk` NULL, from
 * dlock_client_control()) or on one lock handle (`lk` its state, from
 * dlock_lock_control()).  `arg` is the operation's argument, its type set
 * by the operation.  Codes are per backend, each backend in a range of its
 * own declared in a public header (include/dlock/sys/NAME.h, see
 * include/dlock/sys/control.h), so a code sent to another backend is
 * unknown there.  Returns DLOCK_ENOTSUP for an `op` the driver does not
 * know (writing no message is fine), else the operation's status with a
 * message on failure.  Calls with `lk` obey the per-lock rule above (never
 * overlapping another call on that `lk`, and only between lock_init() and
 * lock_fini()); calls with `lk` NULL may run concurrently with anything
 * but open() and close().  MAY.
 */
typedef dlock_status dlock_driver_control_fn(void *backend, void *lk, int op, void *arg, dlock_error *err);

/**
 * Fill *caps for `kind` (ABI versions 3 to 6; MAY, and needed with
 * lock_init_kind(); from version 7 feature() answers and the slot is not
 * read).  Called right after open() once per kind the core knows,
 * DLOCK_KIND_MUTEX included; the core keeps the answers.  A kind the
 * driver does not know is left unsupported (all zero).
 */
typedef void dlock_driver_kind_capabilities_fn(void *backend, dlock_lock_kind kind, dlock_kind_caps *caps);

/**
 * Prepare `lk` for the lock `name` of the kind in `spec`, as lock_init()
 * does for a mutex (ABI version 3; MAY: without it a driver has mutexes
 * only; in versions 3 to 6 it comes with kind_capabilities()).  Called
 * for every handle of a driver that has it, mutexes included, and only
 * for kinds the driver said it supports.  Same rules and statuses as
 * lock_init().  Threads: the thread that makes the handle.
 */
typedef dlock_status dlock_driver_lock_init_kind_fn(void *backend, void *lk, const char *name, size_t len,
                                                    const dlock_kind_spec *spec, dlock_error *err);

/**
 * Describe the lock `name` (`len` bytes, untrusted, as for lock_init()) as
 * the server has it now, in any kind, through dlock_info_lock() and
 * dlock_info_holder() on `info` (ABI version 4; MAY: without it
 * dlock_inspect() answers DLOCK_ENOTSUP).  Read-only: it must not change
 * the lock.  Held by nobody is DLOCK_OK with no holder.  What it can see
 * the driver says through DLOCK_FEATURE_INSPECT (feature(); the core
 * answers DLOCK_INSPECT_HELD, and DLOCK_INSPECT_LIST with list(), when
 * the driver does not answer the code).
 * Threads: any; may run beside every other call of the client.
 */
typedef dlock_status dlock_driver_inspect_fn(void *backend, const char *name, size_t len, dlock_info *info,
                                             dlock_error *err);

/**
 * Describe every lock held now under the client's prefix, one
 * dlock_info_lock() each with its holders (ABI version 4; MAY).  The core
 * filters by name prefix and sorts.  Bounded work per round trip (SCAN,
 * not KEYS).  Threads: any.
 */
typedef dlock_status dlock_driver_list_fn(void *backend, dlock_info *info, dlock_error *err);

/**
 * Take `name` from every holder (ABI version 4; MAY: without it
 * dlock_break() answers DLOCK_ENOTSUP): delete the lock on the server, or
 * end each holder's session (say which through DLOCK_FEATURE_BREAK), never
 * resetting anything a later fencing token is counted from.  *broken gets
 * the number of holders removed (0: the name was free: DLOCK_OK).  The
 * holders of this very client are not spared: they learn of it as any
 * other holder does.  Threads: any.
 */
typedef dlock_status dlock_driver_break_fn(void *backend, const char *name, size_t len, size_t *broken,
                                           dlock_error *err);

/**
 * Keep `value` (`len` bytes, at most DLOCK_VALUE_MAX, no NUL) beside the
 * held mutex `lk` (ABI version 5; MAY: without it the backend has no
 * elections), where inspect() of its name gives it back as the holder's
 * `value` (dlock_holder) with the holder's token as its term, and tell the
 * name's watchers (watch()).  Owner-only: DLOCK_ENOTHELD when `lk` no
 * longer holds it.  Called by the core right after an election's
 * acquisition and on dlock_proclaim().  Threads: the application's.
 */
typedef dlock_status dlock_driver_proclaim_fn(void *backend, void *lk, const char *value, size_t len,
                                              dlock_error *err);

/**
 * Arm a notification for the name `name` (`len` bytes) (ABI version 5;
 * MAY: without it observers only read again once per lease): call
 * `changed(arg)`, from any thread and with no lock of the core held, when
 * its holder or value may have changed (a release, an acquisition's
 * proclaim, a deletion; spurious calls are fine), until unwatch().  Stores
 * the driver's handle in *watch.  Armed before the core reads the name, so
 * a change between the two is not missed.  A driver that loses its
 * notifications (a reconnection) calls `changed` once they work again, so
 * the core reads again.  DLOCK_OK, or a failure (the core then reads once
 * per lease and tries to arm again).  Threads: the core's observer thread.
 */
typedef dlock_status dlock_driver_watch_fn(void *backend, const char *name, size_t len, void (*changed)(void *arg),
                                           void *arg, void **watch, dlock_error *err);

/** Disarm what watch() armed; after it returns, `changed` is no longer running nor called.  ABI 5. */
typedef void dlock_driver_unwatch_fn(void *backend, void *watch);

/**
 * Tell the core of one name whose leftovers gc() removed (or would
 * remove): `name` its `len` bytes (NULL, 0 where the server keeps only a
 * hash), `resource` where it was kept (printable, NUL-terminated).  The
 * core filters nothing: a driver calls it only for names it matched.
 */
typedef void dlock_gc_removed_fn(void *arg, const char *name, size_t len, const char *resource);

/**
 * Remove what the names of the client's prefix that start with `prefix`
 * (`len` bytes, untrusted; 0: all) left on the server while no holder or
 * waiter uses them (ABI version 6; MAY: without it dlock_gc() answers
 * DLOCK_ENOTSUP).  Never lets two holders in: what is removed is locked
 * first, without waiting, so a holder keeps it, and an acquirer that
 * meets a removal takes the name again; never resets what a later fencing
 * token is counted from.  With DLOCK_GC_DRY_RUN in `flags` it removes
 * nothing and reports what it would.  Calls `removed(arg, ...)` once per
 * name, on the calling thread, before it returns; *count gets their
 * number (also on failure: what was removed until then).  A backend with
 * nothing to collect may have the method only to answer DLOCK_ENOTSUP
 * with the reason, and answers DLOCK_FEATURE_GC 0 (feature()).
 * Threads: any; may run beside every other call of the client.
 */
typedef dlock_status dlock_driver_gc_fn(void *backend, const char *prefix, size_t len, unsigned flags,
                                        dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err);

/**
 * The contract's own facts, beside the public dlock_feature codes (ABI
 * version 7): what the core needs to know of a backend and applications
 * do not ask.  feature() answers them as it answers the public codes; the
 * core never hands a dlock_client_feature() of one of them to a driver.
 * Codes are only ever appended.
 */
typedef enum dlock_fact_code {
	DLOCK_FACT_BACKEND = 0x1000,      /**< text: the backend's name in dlock_capabilities::backend ("redis" for
	                                       rediss:// too); unanswered: the scheme */
	DLOCK_FACT_FENCING_NOTE = 0x1001, /**< text: when a CONDITIONAL token can go back
	                                       (dlock_capabilities::fencing_note); unanswered: "" */
	DLOCK_FACT_CORE_WAITS = 0x1002,   /**< per kind, 1: acquisitions of this kind always go through try_acquire()
	                                       and the core's loop, also on a client whose DLOCK_FEATURE_WAKEUP is
	                                       SERVER_QUEUE (the server queues the waiters of the other kinds only) */
	DLOCK_FACT_SLOTS = 0x1003,        /**< semaphores, 1: acquire() reports the permit's slot
	                                       (dlock_acquired::slot); 0: permits have no slot, and so no token */
	DLOCK_FACT_INLINE = 0x1004,       /**< 1: no method ever waits on a network or another process (in-process
	                                       or local-file state), and acquisitions wait only through
	                                       try_acquire() and dlock_wait_wake(): a loop client (dlock/loop.h)
	                                       calls every method on its loop's thread, with no thread of its own
	                                       (DLOCK_FEATURE_LOOP_NATIVE); 0 or unanswered: a loop client runs
	                                       them on worker threads.  Asked before open() with `backend` NULL,
	                                       of drivers of ABI version 8 and later */
	DLOCK_FACT_LOOP_IO = 0x1005       /**< 1: the driver has the non-blocking methods (try_acquire_start ...)
	                                       and a loop client opens it on its loop's thread with
	                                       dlock_host_io() set, then calls them there; its other methods
	                                       still run on worker threads.  Asked before open() with `backend`
	                                       NULL, of drivers of ABI version 9 and later; asked again with
	                                       the backend once open() succeeded: 0 there says that this
	                                       client's mode runs on worker threads after all (the driver then
	                                       leaves the loop it was given alone).  A client that runs on the
	                                       loop also renews there (extend_start) and frees a lock that is
	                                       not held there: lock_fini() must not block */
} dlock_fact_code;

/** The first code of the contract's own facts: from here on, never a dlock_feature code. */
#define DLOCK_FACT_FIRST 0x1000

/** One answer of feature() (ABI version 7).  The core zeroes it before each call; fields are only appended. */
typedef struct dlock_fact {
	int64_t value;    /**< the answer, as its code defines it */
	const char *text; /**< for the text facts (DLOCK_FACT_BACKEND, DLOCK_FACT_FENCING_NOTE): a static string */
} dlock_fact;

/**
 * Answer the fact `code` of `kind` into *out (ABI version 7; MUST): every
 * fact a driver states, in one place.  `code` is a dlock_feature of
 * dlock.h (its value means what dlock.h says) or a dlock_fact_code above;
 * `kind` is the kind of lock the fact is about, DLOCK_KIND_MUTEX for the
 * facts of the client.  Returns DLOCK_OK, or DLOCK_ENOTSUP for a code the
 * driver does not answer (no message needed).  The core asks:
 *   - right after open(), and keeps the answers for the client's life:
 *     for DLOCK_KIND_MUTEX the frozen dlock_capabilities
 *     (DLOCK_FACT_BACKEND, DLOCK_FEATURE_CONSISTENCY, _FENCING,
 *     DLOCK_FACT_FENCING_NOTE, DLOCK_FEATURE_FAIR, _LEASE, _WAKEUP,
 *     _SCOPE; unanswered: 0); for DLOCK_KIND_RWLOCK, when the driver has
 *     lock_init_kind(), DLOCK_FEATURE_RWLOCK (NONE or unanswered: no
 *     read-write locks) and DLOCK_FEATURE_READ_FENCING; for
 *     DLOCK_KIND_SEMAPHORE likewise DLOCK_FEATURE_SEMAPHORE (NONE or
 *     unanswered: no semaphores), DLOCK_FACT_SLOTS and
 *     DLOCK_FEATURE_PERMIT_FENCING (taken as NONE without slots); and for
 *     each kind the driver has (mutexes always), DLOCK_FEATURE_KIND_CHECK
 *     and DLOCK_FACT_CORE_WAITS;
 *   - at each dlock_client_feature() of a code it cannot answer from those
 *     or from which methods the driver has, for DLOCK_KIND_MUTEX:
 *     DLOCK_FEATURE_INSPECT, _BREAK, _ELECTION, _GC and codes newer than
 *     the core.  These answers may change while the client lives (an
 *     atomic read of the client's state).  Unanswered, the core says what
 *     it can see for itself: INSPECT DLOCK_INSPECT_HELD (and
 *     DLOCK_INSPECT_LIST with list()), BREAK DLOCK_BREAK_DELETE, ELECTION
 *     NOTIFY with watch() (else POLL), GC 1; a newer code is then
 *     DLOCK_ENOTSUP for the application.
 * Answers at once, without a round trip to the server.  Threads: the
 * thread of dlock_client_open() right after open(); later any thread,
 * beside every other call but open() and close().
 */
typedef dlock_status dlock_driver_feature_fn(void *backend, dlock_lock_kind kind, int code, dlock_fact *out);

/**
 * A backend: one const object per URI scheme, written with designated
 * initializers and passed to dlock_register_driver().  Each method is
 * marked MUST (registration refuses NULL) or MAY (NULL: the matching API
 * call returns DLOCK_ENOTSUP); the method types above say what each does.
 */
typedef struct dlock_driver {
	unsigned abi_version;  /**< DLOCK_DRIVER_ABI_VERSION */
	const char *scheme;    /**< lower case URI scheme, e.g. "redis" */
	size_t lock_size;      /**< bytes of per-lock state */

	/* ABI version 1 */
	dlock_driver_open_fn *open;                 /**< MUST */
	dlock_driver_close_fn *close;               /**< MUST */
	dlock_driver_capabilities_fn *capabilities; /**< MUST in versions 1 to 6; from 7 NULL (feature answers) */
	dlock_driver_knows_param_fn *knows_param;   /**< MAY */
	dlock_driver_lock_init_fn *lock_init;       /**< MUST, unless the driver has lock_init_kind */
	dlock_driver_lock_fini_fn *lock_fini;       /**< MAY */
	dlock_driver_acquire_fn *acquire;           /**< MUST in version 1; from version 2 this or try_acquire */
	dlock_driver_release_fn *release;           /**< MUST */
	dlock_driver_extend_fn *extend;             /**< MAY */
	dlock_driver_check_fn *check;               /**< MAY */

	/* ABI version 2 */
	dlock_driver_control_fn *control;           /**< MAY */
	dlock_driver_try_acquire_fn *try_acquire;   /**< MAY; a driver needs this or acquire() */
	dlock_driver_disarm_fn *disarm;             /**< MAY; needed by a driver that arms wake-ups */

	/* ABI version 3 */
	dlock_driver_kind_capabilities_fn *kind_capabilities; /**< MAY in versions 3 to 6, with lock_init_kind or
	                                                           neither; from 7 NULL (feature answers) */
	dlock_driver_lock_init_kind_fn *lock_init_kind;       /**< MAY; before version 7 with kind_capabilities */
	dlock_driver_extend_many_fn *extend_many;             /**< MAY; needs extend */

	/* ABI version 4 */
	dlock_driver_inspect_fn *inspect;  /**< MAY */
	dlock_driver_list_fn *list;        /**< MAY */
	dlock_driver_break_fn *break_lock; /**< MAY */

	/* ABI version 5 */
	dlock_driver_proclaim_fn *proclaim; /**< MAY; elections need it (and inspect) */
	dlock_driver_watch_fn *watch;       /**< MAY; with unwatch, or neither */
	dlock_driver_unwatch_fn *unwatch;   /**< MAY; with watch */

	/* ABI version 6 */
	dlock_driver_gc_fn *gc; /**< MAY */

	/* ABI version 7 */
	dlock_driver_feature_fn *feature; /**< MUST */

	/* ABI version 9: all four or none, with DLOCK_FACT_LOOP_IO */
	dlock_driver_try_acquire_start_fn *try_acquire_start; /**< MAY; with try_acquire */
	dlock_driver_release_start_fn *release_start;         /**< MAY */
	dlock_driver_extend_start_fn *extend_start;           /**< MAY; with extend */
	dlock_driver_check_start_fn *check_start;             /**< MAY; with check */
} dlock_driver;

/**
 * Register a driver (not copied: it must outlive the process's use of
 * dlock, typically a static const object).  DLOCK_EVERSION for an ABI
 * version outside 1..DLOCK_DRIVER_ABI_VERSION, DLOCK_EINVAL for a missing MUST method or a bad scheme,
 * DLOCK_EEXIST for a scheme already registered.  Thread-safe.
 */
DLOCK_API dlock_status dlock_register_driver(const dlock_driver *driver);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_SYS_DRIVER_H */
