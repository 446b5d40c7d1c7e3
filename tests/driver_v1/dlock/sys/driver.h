/*
 * The driver contract as it stood at ABI version 1, kept unchanged below
 * this note so that tests/driver_v1/v1proxy.c is compiled exactly as a
 * driver written against that version was: it proves that registration
 * still accepts such drivers and that they pass the conformance suite.
 * Never edit the text below; the current contract is
 * include/dlock/sys/driver.h.
 */
/**
 * @file
 * @brief dlock driver contract — for people who write a backend.
 *
 * A backend is one `const dlock_driver` object filled with designated
 * initializers and registered under its URI scheme (built-in drivers are
 * listed in core/builtin_drivers.c; others call dlock_register_driver()).
 * Applications never call a driver: the core checks arguments, handles
 * reentrancy, in-process queueing (coalescing), deadlines, cancellation,
 * renewal scheduling, lost-lock callbacks and error text, and then calls
 * the driver for what is particular to its server.
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
 *     client holds or is acquiring (coalescing happens in the core), and
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
 * DLOCK_DRIVER_ABI_VERSION.  Registration refuses other versions, a missing
 * MUST method, and a scheme that is already registered.  A missing MAY
 * method makes the matching API call return DLOCK_ENOTSUP.
 */
#ifndef DLOCK_SYS_DRIVER_H
#define DLOCK_SYS_DRIVER_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Version of struct dlock_driver; raised with each appended block of methods. */
#define DLOCK_DRIVER_ABI_VERSION 1

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
} dlock_uri;

/** Value of backend parameter `key` in `uri`, or NULL when absent. */
DLOCK_API const char *dlock_uri_get(const dlock_uri *uri, const char *key);

/**
 * Boolean backend parameter `key` (1, 0, true, false, on, off, yes, no)
 * into *out; *out is left alone when the parameter is absent.  Any other
 * value is DLOCK_EURI with a message naming the parameter.
 */
DLOCK_API dlock_status dlock_uri_get_bool(const dlock_uri *uri, const char *key, int *out, dlock_error *err);

/* --------------------------------------------------------------- waiting */

/**
 * A waiting acquisition: its deadline and its cancellation.  Owned by the
 * core; valid during the acquire() call that receives it.  A driver that
 * waits for a notification keeps the pointer only while acquire() runs.
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

/* --------------------------------------------------------------- driver */

/** What an acquire() reports on success. */
typedef struct dlock_acquired {
	uint64_t token;      /**< fencing token (ignored when the class is NONE) */
	int64_t sent_ns;     /**< drivers with extend(): monotonic time from which the lease runs (when the
	                          winning request was sent, at the latest when the server granted it); 0: the
	                          time acquire() was called */
} dlock_acquired;

/** Open a client's backend state from `uri`; store it in *backend. MUST. */
typedef dlock_status dlock_driver_open_fn(const dlock_uri *uri, dlock_host *host, void **backend,
                                          dlock_error *err);

/** Free the backend state; locks still held are released by the server or the OS. MUST. */
typedef void dlock_driver_close_fn(void *backend);

/** Fill *caps (static strings). MUST. */
typedef void dlock_driver_capabilities_fn(void *backend, dlock_capabilities *caps);

/** 1 if `key` is a backend parameter this driver accepts in a URI. MAY (absent: none). */
typedef int dlock_driver_knows_param_fn(const char *key);

/** Map `name` into the zeroed state `lk`; may allocate.  MUST. */
typedef dlock_status dlock_driver_lock_init_fn(void *backend, void *lk, const char *name, size_t len,
                                               dlock_error *err);

/**
 * Free what lock_init() allocated.  Called when the core no longer counts
 * the lock as held; if the driver still holds it on the server (a lease the
 * core declared lost), it drops that hold here.  MAY.
 */
typedef void dlock_driver_lock_fini_fn(void *backend, void *lk);

/**
 * Acquire `lk` within `w`'s deadline with a lease of `lease_ms`.  MUST.
 * Returns DLOCK_OK (fill *out), DLOCK_EBUSY when it gave up because the
 * lock stayed held until the deadline (the core turns it into ETIMEDOUT
 * for bounded waits), DLOCK_ECANCELED when dlock_wait_sleep() or
 * dlock_wait_cancelled() said so, or an error.  On any failure the driver
 * leaves nothing of this attempt on the server.
 */
typedef dlock_status dlock_driver_acquire_fn(void *backend, void *lk, int64_t lease_ms, dlock_wait *w,
                                             dlock_acquired *out, dlock_error *err);

/** Release `lk`: DLOCK_OK, or DLOCK_ENOTHELD if it was no longer ours. MUST. */
typedef dlock_status dlock_driver_release_fn(void *backend, void *lk, dlock_error *err);

/**
 * Extend the lease of held `lk` to `lease_ms` from now (TTL backends) or
 * send the session's heartbeat (session backends).  DLOCK_ENOTHELD if no
 * longer ours.  MAY: without it there is nothing to renew.
 */
typedef dlock_status dlock_driver_extend_fn(void *backend, void *lk, int64_t lease_ms, dlock_error *err);

/** Ask the server: DLOCK_OK, DLOCK_ENOTHELD or DLOCK_EUNCERTAIN.  MAY. */
typedef dlock_status dlock_driver_check_fn(void *backend, void *lk, dlock_error *err);

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
	dlock_driver_capabilities_fn *capabilities; /**< MUST */
	dlock_driver_knows_param_fn *knows_param;   /**< MAY */
	dlock_driver_lock_init_fn *lock_init;       /**< MUST */
	dlock_driver_lock_fini_fn *lock_fini;       /**< MAY */
	dlock_driver_acquire_fn *acquire;           /**< MUST */
	dlock_driver_release_fn *release;           /**< MUST */
	dlock_driver_extend_fn *extend;             /**< MAY */
	dlock_driver_check_fn *check;               /**< MAY */
} dlock_driver;

/**
 * Register a driver (not copied: it must outlive the process's use of
 * dlock, typically a static const object).  DLOCK_EVERSION for another ABI
 * version, DLOCK_EINVAL for a missing MUST method or a bad scheme,
 * DLOCK_EEXIST for a scheme already registered.  Thread-safe.
 */
DLOCK_API dlock_status dlock_register_driver(const dlock_driver *driver);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_SYS_DRIVER_H */
