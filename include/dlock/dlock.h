/**
 * @file
 * @brief dlock — distributed locks for C, one API over several backends.
 *
 * The backend is chosen at run time by the URI given to dlock_client_open():
 *
 *   mem://NAMESPACE        in-process (tests of code that uses dlock)
 *   file:///ABSOLUTE/DIR   OFD file locks on one host (the embedded default)
 *   redis://, zk://, postgres://   network backends, when compiled in
 *
 * Conventions, for every function in this header:
 *   - Functions that can fail return a dlock_status; DLOCK_OK (0) is success.
 *     dlock_strerror() names the status; dlock_client_errmsg() gives the
 *     detail of the calling thread's last failure on that client.
 *   - Objects are created and destroyed in pairs; every destroy function
 *     accepts NULL.  Strings passed in are copied; strings returned are
 *     owned by the library and stay valid as each function says.
 *   - Threads: a dlock_client may be shared by any number of threads; every
 *     function that takes a client or a lock is safe to call from several
 *     threads at once, unless its comment says otherwise.
 *   - Clients are not fork-safe: a child process must not use a client
 *     opened by its parent (open a new one).  Every descriptor the library
 *     opens is close-on-exec.
 *   - The library writes nothing to stdout or stderr; messages go to the
 *     log callback of dlock_client_options.
 *   - Durations in this API are milliseconds.
 *   - Names: a function that makes or ends an object, or reads one of its
 *     properties, starts with the object's name: dlock_lock_new(),
 *     dlock_client_close(), dlock_lock_name(), dlock_lock_permits(),
 *     dlock_election_leader(); a getter says "get" only where its name
 *     would otherwise be a type's (dlock_lock_get_kind(),
 *     dlock_client_get_stats()).  What an object does is a bare verb
 *     (dlock_acquire(), dlock_campaign(), dlock_inspect()), unless two
 *     objects share it (dlock_client_control(), dlock_lock_control()).
 *     Earlier names stay as documented aliases (dlock_lock_get_permits(),
 *     dlock_leader_get()).
 *   - Options structs (dlock_client_options, dlock_acquire_options) start
 *     with a version and have an ..._INIT macro.  A designated initializer
 *     that names `version` and one field is safe too: zero never turns a
 *     safeguard off, and each field's comment says what its zero means.
 *
 * Connections of a shared client, per backend:
 *   - redis://: a pool of up to 16 connections per server, plus one
 *     subscriber connection per client that every waiting thread shares.
 *   - zk://: one ZooKeeper session per client, shared by all its threads;
 *     every lock of the client is lost together when that session expires.
 *   - postgres://: session locks belong to a connection.  A connection that
 *     holds a lock is pinned until its last lock is released; an acquire
 *     that may wait gets a connection of its own, so waiting never blocks
 *     the other threads.  In row mode every held lock keeps a transaction,
 *     hence a connection, open.  The application never shares dlock's
 *     connections, so its own COMMIT or ROLLBACK cannot touch these locks.
 *     Local coalescing guarantees that one client never asks the server for
 *     a name it already holds (advisory locks are reentrant per session),
 *     except a shared acquisition beside the client's own shared holders
 *     (read-write locks): that one is never sent on a session that holds
 *     the name, so each reader holds on a session of its own.
 */
#ifndef DLOCK_DLOCK_H
#define DLOCK_DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Marks the functions of the public API: the only symbols the shared
 * library exports (everything else is built with hidden visibility).
 */
#if defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

/** Major version of this header; the SONAME is libdlock.so.MAJOR, and it changes when the ABI breaks. */
#define DLOCK_VERSION_MAJOR 0
/** Minor version of this header: raised when functions or options are added. */
#define DLOCK_VERSION_MINOR 5
/** Patch version of this header: raised for fixes only. */
#define DLOCK_VERSION_PATCH 0
/** Version of this header as "MAJOR.MINOR.PATCH"; dlock_version() gives the library's at run time. */
#define DLOCK_VERSION_STRING "0.5.0"

/** Run-time version of the library, as "MAJOR.MINOR.PATCH". Static string. */
DLOCK_API const char *dlock_version(void);

/**
 * Status codes.  One X-macro generates the enum, dlock_strerror() and
 * dlock_status_name().  X(NAME, text).  New codes are only ever appended.
 */
#define DLOCK_STATUS_MAP(X)                                                          \
	X(OK, "success")                                                             \
	X(EINVAL, "invalid argument")                                                \
	X(ENOMEM, "out of memory")                                                   \
	X(EURI, "malformed URI")                                                     \
	X(ENOBACKEND, "no backend registered for this URI scheme")                   \
	X(EBUSY, "lock is held by another owner")                                    \
	X(ETIMEDOUT, "wait bound expired before the lock was acquired")             \
	X(ECANCELED, "acquire was cancelled")                                        \
	X(ENOTHELD, "lock is not held by this handle (released, expired or taken)") \
	X(EUNCERTAIN, "lock state is uncertain: server unreachable, session may live") \
	X(ENOTSUP, "operation not supported by this backend")                        \
	X(ECONNECT, "cannot connect to the lock server")                             \
	X(EAUTH, "authentication failed")                                            \
	X(ENOTFOUND, "database, namespace or path does not exist")                   \
	X(ESERVER, "the lock server answered with an error")                         \
	X(EIO, "I/O or system error")                                                \
	X(ECLOSED, "client is closing")                                              \
	X(EDEADLK, "operation would deadlock or is not allowed from this thread")   \
	X(EVERSION, "driver ABI version mismatch")                                   \
	X(EEXIST, "already registered")                                              \
	X(EPERM, "permission denied")                                                \
	X(EKIND, "name in use as another kind of lock")                              \
	X(ELIMIT, "the server can hold no more locks")

/**
 * Result of every function that can fail: DLOCK_OK (0) or one of the
 * DLOCK_E* codes of DLOCK_STATUS_MAP, each described by its text there.
 */
typedef enum dlock_status {
#define DLOCK_STATUS_ENUM_(name, text) DLOCK_##name,
	DLOCK_STATUS_MAP(DLOCK_STATUS_ENUM_)
#undef DLOCK_STATUS_ENUM_
	DLOCK_STATUS_COUNT_ /**< Number of status codes; not a status. */
} dlock_status;

/** Static text describing a status; "unknown status" for values out of range.  Thread-safe. */
DLOCK_API const char *dlock_strerror(dlock_status status);
/** Static name of a status without prefix, e.g. "ENOTHELD"; "UNKNOWN" out of range.  Thread-safe. */
DLOCK_API const char *dlock_status_name(dlock_status status);

/* ---------------------------------------------------------------- logging */

/** Severity of a message passed to the log callback. */
typedef enum dlock_log_level {
	DLOCK_LOG_ERROR = 0, /**< A failure the application should see. */
	DLOCK_LOG_WARN = 1,  /**< Something went wrong but was handled (a retry, a renewal late). */
	DLOCK_LOG_INFO = 2,  /**< Connections, sessions, failovers. */
	DLOCK_LOG_DEBUG = 3  /**< Every server exchange: verbose. */
} dlock_log_level;

/**
 * Log callback.  Called from any thread of the library (an application
 * thread inside a dlock call, or the client's background thread); it must
 * be thread-safe and must not call back into dlock on the same client.
 * `msg` is valid only during the call and never contains a password.
 */
typedef void (*dlock_log_fn)(void *userdata, dlock_log_level level, const char *msg);

/* ---------------------------------------------------------------- client */

/** A connection to one lock service, opened for a URI (opaque). */
typedef struct dlock_client dlock_client;
/** A reusable handle for one lock name on a client (opaque). */
typedef struct dlock_lock dlock_lock;

/** Current value of dlock_client_options::version; version 1 (without `identity`) is still accepted. */
#define DLOCK_CLIENT_OPTIONS_VERSION 2

/** Longest identity of a client (dlock_client_options::identity, URI `identity`), in bytes. */
#define DLOCK_IDENTITY_MAX 128

/**
 * Options for dlock_client_open().  Initialise with DLOCK_CLIENT_OPTIONS_INIT, or with a designated
 * initializer that names `version`: what a field left out (zero) means is in its comment.  None of
 * them is a safeguard: the lock's own safeguards are per acquisition (dlock_acquire_options) and
 * in the URI.
 */
typedef struct dlock_client_options {
	unsigned version;          /**< DLOCK_CLIENT_OPTIONS_VERSION; 0 or a version this library does not know: DLOCK_EVERSION */
	dlock_log_fn log;          /**< NULL: messages are dropped */
	void *log_userdata;        /**< Passed to `log` as is (NULL too). */
	/** Most verbose level passed to `log`.  0 is DLOCK_LOG_ERROR: errors only, so warnings — a lock
	 *  lost with no `on_lost` callback, a renewal late — are dropped; DLOCK_CLIENT_OPTIONS_INIT
	 *  gives DLOCK_LOG_WARN.  It changes what is logged, never what the library does. */
	dlock_log_level log_level;
	/** Who this client is, as inspection shows its locks to others (dlock_inspect()): 1 to
	 *  DLOCK_IDENTITY_MAX bytes, no control byte (else DLOCK_EINVAL).  NULL (zero): the URI's
	 *  `identity`, else "HOST:PID".  Stored on the server beside every lock the client holds, so it
	 *  must not hold a secret.  (Version 2.) */
	const char *identity;
} dlock_client_options;

/** Default client options: no log callback, level DLOCK_LOG_WARN, the URI's identity. */
#define DLOCK_CLIENT_OPTIONS_INIT { DLOCK_CLIENT_OPTIONS_VERSION, NULL, NULL, DLOCK_LOG_WARN, NULL }

/**
 * Open a client for `uri` (copied).  `opts` may be NULL for defaults.
 * On success stores a new client in *out, to be closed with
 * dlock_client_close().  On failure *out is NULL and, if `errbuf` is not
 * NULL, a NUL-terminated message (password masked) is written to it.
 * Returns DLOCK_EURI for a malformed URI or an unknown parameter,
 * DLOCK_ENOBACKEND for an unknown scheme, DLOCK_ECONNECT, DLOCK_EAUTH,
 * DLOCK_ENOTFOUND ... for server failures.  Thread-safe.
 */
DLOCK_API dlock_status dlock_client_open(dlock_client **out, const char *uri,
                               const dlock_client_options *opts, char *errbuf, size_t errlen);

/**
 * Close a client: cancels every acquire waiting on it (they return
 * DLOCK_ECANCELED), releases every lock it still holds, frees its locks'
 * server resources and stops its background thread.  Lock handles of the
 * client must still be freed with dlock_lock_free() afterwards (release then
 * returns DLOCK_ENOTHELD).  Returns DLOCK_EDEADLK, and does nothing, when
 * called from a lost-lock callback of the same client.  NULL is a no-op.
 */
DLOCK_API dlock_status dlock_client_close(dlock_client *client);

/**
 * Detail of the calling thread's last failed call on `client`, or "" if
 * none.  Valid until that thread's next dlock call on the client.
 */
DLOCK_API const char *dlock_client_errmsg(dlock_client *client);

/** The client's URI with any password replaced by "***".  Valid until close. */
DLOCK_API const char *dlock_client_uri(const dlock_client *client);

/** Counters of one client, for tests and benchmarks. */
typedef struct dlock_client_stats {
	uint64_t acquired;        /**< successful dlock_acquire() calls, reentrant ones included */
	uint64_t reentered;       /**< of those, satisfied by the hold count (no server call) */
	uint64_t server_acquires; /**< driver acquire calls (one per head-of-queue attempt) */
	uint64_t server_releases; /**< driver release calls */
	uint64_t renewals;        /**< successful automatic renewals */
	uint64_t lost;            /**< acquisitions reported lost */
	uint64_t contending;      /**< driver acquire calls in progress now (waiting on the server) */
} dlock_client_stats;

/** Copy the client's counters into *stats.  Thread-safe. */
DLOCK_API dlock_status dlock_client_get_stats(dlock_client *client, dlock_client_stats *stats);

/* ---------------------------------------------------------- capabilities */

/** Whether exclusion holds through server failures (dlock_capabilities::consistency). */
typedef enum dlock_consistency {
	DLOCK_CONSISTENCY_LOCAL = 0, /**< one process or one host only */
	DLOCK_CONSISTENCY_CP = 1,    /**< consensus/transactional server */
	DLOCK_CONSISTENCY_AP = 2     /**< may break exclusion on failover or pause */
} dlock_consistency;

/** What the fencing token of a backend guarantees (dlock_capabilities::fencing). */
typedef enum dlock_fencing {
	DLOCK_FENCING_NONE = 0,        /**< no token: dlock_lock_fencing_token() fails */
	DLOCK_FENCING_STRICT = 1,      /**< can never go backwards */
	DLOCK_FENCING_CONDITIONAL = 2  /**< backwards only on the failure in fencing_note */
} dlock_fencing;

/** How long the server keeps a lock (dlock_capabilities::lease). */
typedef enum dlock_lease_kind {
	DLOCK_LEASE_TTL = 0,    /**< server forgets the lock after the lease unless extended */
	DLOCK_LEASE_SESSION = 1 /**< held while the session/connection/descriptor lives */
} dlock_lease_kind;

/** How a waiter learns that the lock was released (dlock_capabilities::wakeup). */
typedef enum dlock_wakeup {
	DLOCK_WAKEUP_NOTIFY = 0,      /**< waiters are notified by the backend */
	DLOCK_WAKEUP_SERVER_QUEUE = 1, /**< the server queues waiters */
	DLOCK_WAKEUP_POLL = 2         /**< waiters poll with backoff */
} dlock_wakeup;

/** Who contends for a name (dlock_capabilities::scope). */
typedef enum dlock_scope {
	DLOCK_SCOPE_PROCESS = 0, /**< only clients of one process contend (mem://) */
	DLOCK_SCOPE_HOST = 1,    /**< processes of one host contend (file://) */
	DLOCK_SCOPE_NETWORK = 2  /**< processes on any host that reach the server */
} dlock_scope;

/**
 * What a backend promises.  Strings are static.  Frozen: this struct never
 * grows (an application's copy of it would be too small for a newer
 * library's); facts added later come through dlock_client_feature().
 */
typedef struct dlock_capabilities {
	const char *backend;           /**< "mem", "file", "redis", ... */
	dlock_consistency consistency; /**< LOCAL, CP or AP */
	dlock_fencing fencing;         /**< what dlock_lock_fencing_token() guarantees */
	const char *fencing_note;      /**< when a conditional token can go back; else "" */
	int fair;                      /**< 1: waiters acquire in FIFO order */
	dlock_lease_kind lease;        /**< TTL or session */
	dlock_wakeup wakeup;           /**< how waiters learn of a release */
	dlock_scope scope;             /**< who contends: one process, one host, the network */
} dlock_capabilities;

/** Fill *caps for the client's backend.  Thread-safe. */
DLOCK_API dlock_status dlock_client_capabilities(dlock_client *client, dlock_capabilities *caps);

/**
 * Facts about a client's backend, asked one at a time, so that the list can
 * grow without changing any struct: codes are only ever appended, and a
 * library older than the code answers DLOCK_ENOTSUP.  Each code says what
 * its value means.
 */
typedef enum dlock_feature {
	DLOCK_FEATURE_CONSISTENCY = 1, /**< a dlock_consistency */
	DLOCK_FEATURE_FENCING = 2,     /**< a dlock_fencing */
	DLOCK_FEATURE_FAIR = 3,        /**< 1: waiters acquire in FIFO order */
	DLOCK_FEATURE_LEASE = 4,       /**< a dlock_lease_kind */
	DLOCK_FEATURE_WAKEUP = 5,      /**< a dlock_wakeup */
	DLOCK_FEATURE_SCOPE = 6,       /**< a dlock_scope */
	DLOCK_FEATURE_EXTEND = 7,      /**< 1: dlock_extend() and automatic renewal do something (a lease or a heartbeat) */
	DLOCK_FEATURE_CHECK = 8,       /**< 1: dlock_check() asks the server */
	DLOCK_FEATURE_CONTROL = 9,     /**< 1: the backend has operations of its own (dlock_client_control()) */
	DLOCK_FEATURE_RWLOCK = 10,     /**< a dlock_rwlock_policy: read-write locks, and who goes first */
	DLOCK_FEATURE_READ_FENCING = 11, /**< a dlock_fencing: the token of a shared acquisition (see
	                                      dlock_lock_fencing_token()); NONE when readers get none */
	DLOCK_FEATURE_KIND_CHECK = 12, /**< 1: a name in use as another kind of lock, in another client
	                                    too, is refused with DLOCK_EKIND; 0: the backend's kinds
	                                    exclude each other on one name, so mixing them is safe
	                                    (file://, zk://); within one client the core always refuses.
	                                    This answer is about mutexes and read-write locks; how each
	                                    backend keeps a semaphore apart from them is in the README */
	DLOCK_FEATURE_SEMAPHORE = 13,  /**< a dlock_semaphore_order: semaphores, and in which order waiters
	                                    get a permit */
	DLOCK_FEATURE_PERMIT_FENCING = 14, /**< a dlock_fencing: the token of a permit, which goes with its
	                                       slot (see dlock_lock_permit_slot()); NONE when permits get none */
	DLOCK_FEATURE_INSPECT = 15,    /**< dlock_inspect_flags, OR-ed: what dlock_inspect() and dlock_list()
	                                    can see; 0 when the backend has no inspection */
	DLOCK_FEATURE_BREAK = 16,      /**< a dlock_break_effect: what dlock_break() does to the holder */
	DLOCK_FEATURE_ELECTION = 17,   /**< a dlock_wakeup: elections (dlock_election_new()), and how observers
	                                    learn of a change besides reading at least once per lease: NOTIFY
	                                    (the server tells them) or POLL (only the reads); -1: no elections */
	DLOCK_FEATURE_GC = 18,         /**< 1: dlock_gc() removes what unused names left on the server; 0: it
	                                    answers DLOCK_ENOTSUP (nothing stays but what must, see the README) */
	DLOCK_FEATURE_LOOP_NATIVE = 19, /**< 1: a loop client (dlock/loop.h) of this backend runs on the
	                                    application's loop alone and no thread is created for it; 0: the
	                                    library runs its blocking calls on worker threads of the client and
	                                    delivers every result on the loop all the same */
	DLOCK_FEATURE_LOOP_RENEWS = 20 /**< 1: a loop client of this backend renews its leases, and releases what
	                                    a loss left, on the loop's thread: a loop that stalls past a lease
	                                    loses the lock, and hears of it first when it wakes, once; 0: a thread
	                                    of the client renews, so that a stall does not stop the renewals
	                                    (1 wherever DLOCK_FEATURE_LOOP_NATIVE is 1) */
} dlock_feature;

/**
 * What inspection sees on a backend (DLOCK_FEATURE_INSPECT), OR-ed.  A
 * field of dlock_holder whose flag is absent stays at its "unknown" value.
 */
typedef enum dlock_inspect_flags {
	DLOCK_INSPECT_HELD = 1,      /**< whether the name is held, and every holder (readers, permits) */
	DLOCK_INSPECT_OWNER = 2,     /**< each holder's identity, host and process id */
	DLOCK_INSPECT_ACQUIRED = 4,  /**< when each holder acquired it, on the server's clock */
	DLOCK_INSPECT_LEASE = 8,     /**< the lease each holder has left (TTL backends) */
	DLOCK_INSPECT_TOKEN = 16,    /**< each holder's fencing token */
	DLOCK_INSPECT_WAITERS = 32,  /**< how many wait for the name */
	DLOCK_INSPECT_LIST = 64,     /**< dlock_list() enumerates the held names of the client's prefix */
	DLOCK_INSPECT_NAMES = 128,   /**< dlock_list() gives each lock's name (else only where the server keeps it) */
	DLOCK_INSPECT_SESSION = 256  /**< each holder's session or connection, as the server names it */
} dlock_inspect_flags;

/** What dlock_break() does to the holder (DLOCK_FEATURE_BREAK).  Codes are only ever appended. */
typedef enum dlock_break_effect {
	DLOCK_BREAK_NONE = 0,    /**< no breaking: dlock_break() answers DLOCK_ENOTSUP */
	DLOCK_BREAK_DELETE = 1,  /**< the lock is deleted on the server: the holder's other locks are untouched,
	                              and it learns of the loss (DLOCK_LOST_TAKEN) at its next renewal or event */
	DLOCK_BREAK_SESSION = 2  /**< the holder's session is ended on the server: every lock of that session
	                              goes with it, and the holder sees a session loss (DLOCK_LOST_SESSION) */
} dlock_break_effect;

/**
 * Read-write locks on a backend (DLOCK_FEATURE_RWLOCK).  Codes are only
 * ever appended.
 */
typedef enum dlock_rwlock_policy {
	DLOCK_RWLOCK_NONE = 0,           /**< no read-write locks: dlock_rwlock_new() answers DLOCK_ENOTSUP */
	DLOCK_RWLOCK_WRITER_FIRST = 1,   /**< a waiting writer holds back new readers: writers never starve */
	DLOCK_RWLOCK_NO_PREFERENCE = 2   /**< whoever tries while the lock is compatible gets it: a stream of
	                                      overlapping readers can keep a writer waiting */
} dlock_rwlock_policy;

/**
 * Semaphores on a backend (DLOCK_FEATURE_SEMAPHORE): whether it has them,
 * and in which order waiters get a freed permit.  Codes are only ever
 * appended.
 */
typedef enum dlock_semaphore_order {
	DLOCK_SEMAPHORE_NONE = 0,     /**< no semaphores: dlock_semaphore_new() answers DLOCK_ENOTSUP */
	DLOCK_SEMAPHORE_FIFO = 1,     /**< waiters get permits in the order they asked (the server queues them) */
	DLOCK_SEMAPHORE_UNORDERED = 2 /**< whoever tries first once a permit is free gets it: a waiter can be
	                                   overtaken, though every waiter is woken by (or polls for) a release */
} dlock_semaphore_order;

/**
 * Store in *value what the client's backend says of `feature`.  DLOCK_OK;
 * DLOCK_ENOTSUP for a code this library (or this backend, for a fact only
 * the backend knows) does not know, with a message saying so;
 * DLOCK_EINVAL for a NULL argument; DLOCK_ECLOSED after
 * dlock_client_close().  Thread-safe.
 */
DLOCK_API dlock_status dlock_client_feature(dlock_client *client, dlock_feature feature, int64_t *value);

/** Static name of a feature code ("consistency", "extend", ...); "unknown" for a code this library does not know. */
DLOCK_API const char *dlock_feature_name(dlock_feature feature);

/** Static name of a consistency class: "CP", "AP", "local". */
DLOCK_API const char *dlock_consistency_name(dlock_consistency c);
/** Static name of a fencing class: "strict", "conditional", "none". */
DLOCK_API const char *dlock_fencing_name(dlock_fencing f);
/** Static name of a lease kind: "ttl", "session". */
DLOCK_API const char *dlock_lease_kind_name(dlock_lease_kind k);
/** Static name of a wake-up method: "notify", "server-queue", "poll". */
DLOCK_API const char *dlock_wakeup_name(dlock_wakeup w);
/** Static name of a scope: "process", "host", "network". */
DLOCK_API const char *dlock_scope_name(dlock_scope s);
/** Static name of a read-write policy: "none", "writer-first", "no-preference". */
DLOCK_API const char *dlock_rwlock_policy_name(dlock_rwlock_policy p);
/** Static name of a semaphore order: "none", "fifo", "unordered". */
DLOCK_API const char *dlock_semaphore_order_name(dlock_semaphore_order o);
/** Static name of a break effect: "none", "delete", "session". */
DLOCK_API const char *dlock_break_effect_name(dlock_break_effect e);

/**
 * Schemes of the registered backends, comma-separated ("file,mem,redis").
 * Static string, valid until the next dlock_register_driver().
 */
DLOCK_API const char *dlock_backends(void);

/**
 * Built-in backends that registration refused (a driver built for another
 * ABI version, a duplicate scheme, a missing method): for index 0, 1, ...
 * stores the driver's scheme and why it was refused ("ABI version 9, this
 * library accepts 1") and returns DLOCK_OK; DLOCK_ENOTFOUND past the last
 * one (at index 0 in a sound build), DLOCK_EINVAL for a NULL pointer.  The
 * strings are static.  Opening a URI of a refused scheme fails with
 * DLOCK_ENOBACKEND and the same reason.  Thread-safe.
 */
DLOCK_API dlock_status dlock_backend_refused(size_t index, const char **scheme, const char **reason);

/* ------------------------------------------------------------------ locks */

/** Maximum length of a lock name in bytes. */
#define DLOCK_NAME_MAX 1024

/**
 * Create a lock handle for `name` on `client`.  A name is 1 to
 * DLOCK_NAME_MAX bytes without NUL (any other byte is allowed, UTF-8 or
 * not); anything else is DLOCK_EINVAL.  Each backend maps every name to
 * its own resource.  The handle is reusable: acquire and release it any
 * number of times, then free it with dlock_lock_free().  The client must
 * outlive its handles' use (close may come before free).  Thread-safe.
 */
DLOCK_API dlock_status dlock_lock_new(dlock_client *client, const char *name, dlock_lock **out);

/**
 * Free a handle.  If it is still held, it is released first (the result
 * is lost: call dlock_release() to see it).  No other thread may be using
 * the handle.  NULL is a no-op.  On a loop client (dlock/loop.h) it returns
 * at once: operations in progress on the handle are cancelled and still
 * called back, and the release and the memory follow once they have been.
 */
DLOCK_API void dlock_lock_free(dlock_lock *lock);

/** The handle's name (a copy owned by the handle). */
DLOCK_API const char *dlock_lock_name(const dlock_lock *lock);

/**
 * Kinds of lock.  A handle has one kind for its life, set by the function
 * that made it; the kind tells the backend which server structure the name
 * maps to.  Codes are only ever appended.
 *
 * One kind per name: the server structures of two kinds need not exclude
 * each other (on Redis a `SET NX` key never conflicts with a hash of
 * readers), so a name must not be used as two kinds at once.  The kind is
 * therefore fixed when the handle is made, never per acquisition: each
 * kind has its own constructor (dlock_lock_new(), dlock_rwlock_new(),
 * dlock_semaphore_new()) and acquisitions of
 * every kind then go through the same dlock_acquire(), dlock_release(),
 * renewal, lost-lock callback and fencing.  An acquisition of a name that
 * is in use (held, or waited for) as another kind fails with DLOCK_EKIND:
 * always among the handles of one client; across clients where the
 * backend can tell (DLOCK_FEATURE_KIND_CHECK).  Once nobody holds or waits
 * for the name, it may be used as another kind.  A semaphore's number of
 * permits is part of its kind: a semaphore of N permits and one of M are
 * two kinds while the name is in use.
 */
typedef enum dlock_lock_kind {
	DLOCK_KIND_MUTEX = 0, /**< one holder at a time (dlock_lock_new()) */
	DLOCK_KIND_RWLOCK = 1, /**< any number of readers or one writer (dlock_rwlock_new()) */
	DLOCK_KIND_SEMAPHORE = 2 /**< at most N holders, each with one permit (dlock_semaphore_new()) */
} dlock_lock_kind;

/**
 * Create a read-write lock handle for `name` on `client`: its acquisitions
 * take a mode (dlock_acquire_options::mode), shared (a reader: any number
 * at once) or exclusive (a writer: alone).  Names, ownership, threads and
 * freeing are as for dlock_lock_new().  DLOCK_ENOTSUP, with a message,
 * when the backend has no read-write locks (DLOCK_FEATURE_RWLOCK is
 * DLOCK_RWLOCK_NONE); DLOCK_EINVAL for a bad name or NULL argument.
 *
 * Rules of a read-write handle (the core's, the same on every backend):
 *   - One handle holds one acquisition.  Concurrent readers in one process
 *     use one handle each (one per thread, or per task).
 *   - Reentrancy: the thread that holds a handle acquires it again with a
 *     hold count, in the mode it holds: a reader asking to read again, or
 *     a writer asking to read or to write again, goes up one level with no
 *     server call (a writer's read level stays exclusive).
 *   - No upgrade: a reader asking to write on the handle it holds gets
 *     DLOCK_EDEADLK at once (try-once too), since waiting for the other
 *     readers to leave while keeping its own read lock could wait forever.
 *     Release the read lock, then acquire in exclusive mode.
 *   - A thread that holds the name through another handle of the same
 *     client gets DLOCK_EDEADLK (DLOCK_EBUSY for try-once), in any mode: a
 *     second read while a writer waits between the two would deadlock.
 *   - Local order: the client's threads that wait for one name queue in
 *     FIFO order, so a local writer waiting holds back the local readers
 *     that come after it.  Across clients the backend decides, stated by
 *     DLOCK_FEATURE_RWLOCK: mem:// and zk:// are WRITER_FIRST (a waiting
 *     writer holds back new readers; on zk:// in the order of the server's
 *     queue, as Curator's InterProcessReadWriteLock); file:// is
 *     NO_PREFERENCE (fcntl locks give waiters no order: readers that keep
 *     overlapping can starve a writer), and so is redis:// on one server,
 *     Sentinel or Cluster (a waiting writer is not kept on the server);
 *     postgres:// is WRITER_FIRST in advisory mode (the server queues
 *     waiters in order) and NO_PREFERENCE in row mode (FOR SHARE goes
 *     beside FOR SHARE holders while a FOR UPDATE waits).  RedLock has no
 *     read-write locks: DLOCK_RWLOCK_NONE, and this function answers
 *     DLOCK_ENOTSUP there.
 *   - Fencing: a writer's token is strictly greater than every token before
 *     it (as a mutex's).  A reader takes no new token: it gets the token of
 *     the latest writer (0 when the name has had no writer yet), which
 *     tells storage which write the reader saw and goes back only where
 *     the writers' tokens can (DLOCK_FEATURE_READ_FENCING: redis:// is
 *     CONDITIONAL, as its writers' tokens are).  Where that feature is NONE
 *     (postgres://, zk://), readers get no token: dlock_lock_fencing_token()
 *     answers DLOCK_ENOTSUP for a shared acquisition, and the backend is
 *     spared the work of one.
 * Thread-safe.
 */
DLOCK_API dlock_status dlock_rwlock_new(dlock_client *client, const char *name, dlock_lock **out);

/** Most permits a semaphore may have (dlock_semaphore_new()). */
#define DLOCK_PERMITS_MAX 1024

/**
 * Create a semaphore handle for `name` on `client`: at most `permits`
 * holders of the name at once, across every client of the backend.  Each
 * handle holds at most one permit; an acquisition takes it (in exclusive
 * mode, the default: shared is DLOCK_EINVAL), and it is renewed, released,
 * reported lost and fenced like a lock, on its own lease.  A permit whose
 * holder dies is freed after its lease (TTL backends) or with its session.
 * Names, ownership, threads and freeing are as for dlock_lock_new().
 * `permits` is 1 to DLOCK_PERMITS_MAX (else DLOCK_EINVAL).  DLOCK_ENOTSUP,
 * with a message, when the backend has no semaphores
 * (DLOCK_FEATURE_SEMAPHORE is DLOCK_SEMAPHORE_NONE: RedLock).
 *
 * Rules of a semaphore (the core's, the same on every backend):
 *   - All users of a name agree on N.  An acquisition with another N than
 *     the name's live holders and waiters fails with DLOCK_EKIND, naming
 *     both; never are there more than the smaller N holders.  Within one
 *     client the core compares; across clients the backend does, on every
 *     backend that has semaphores, with N kept beside the holders on the
 *     server (the README says where).  Once nobody holds or waits, a new
 *     N applies.
 *   - Several handles of one client may hold the name at once, up to N:
 *     the client asks the server for one permit at a time, and the
 *     (N+1)th local contender waits in the client until a local holder
 *     releases or the server grants it a permit freed elsewhere.
 *   - Reentrancy: the thread that holds a handle acquires it again with a
 *     hold count (no second permit).  A thread may hold permits through
 *     several handles; when it already holds all N of the client's, a
 *     further acquisition is DLOCK_EDEADLK (DLOCK_EBUSY for try-once).
 *   - Order among waiters: DLOCK_FEATURE_SEMAPHORE (FIFO on zk:// and
 *     mem://, UNORDERED elsewhere).
 *   - Fencing: a permit has a slot, 0 to N-1, that no other live permit
 *     of the name has (dlock_lock_permit_slot()), and a token strictly
 *     greater than every token of the name before it, as a mutex's, so
 *     storage that keeps the last token per (name, slot) refuses a permit
 *     whose lease has gone.  Where DLOCK_FEATURE_PERMIT_FENCING is NONE
 *     (zk://, whose lease nodes have no slot), permits get neither.
 * Thread-safe.
 */
DLOCK_API dlock_status dlock_semaphore_new(dlock_client *client, const char *name, uint32_t permits,
                                           dlock_lock **out);

/** The handle's kind; DLOCK_KIND_MUTEX for NULL. */
DLOCK_API dlock_lock_kind dlock_lock_get_kind(const dlock_lock *lock);

/** Holders allowed at once: N for a semaphore, 1 for a mutex and a read-write lock's writer; 0 for NULL. */
DLOCK_API uint32_t dlock_lock_permits(const dlock_lock *lock);

/** The earlier name of dlock_lock_permits(): the same function, kept for existing callers and binaries. */
DLOCK_API uint32_t dlock_lock_get_permits(const dlock_lock *lock);

/** Wait bound meaning "wait until acquired, cancelled or the client closes". */
#define DLOCK_WAIT_FOREVER (-1)
/** Wait bound meaning "the URI's `wait` parameter" (forever when absent). */
#define DLOCK_WAIT_DEFAULT (-2)

/** Why a held lock was lost, as passed to the lost-lock callback. */
typedef enum dlock_lost_reason {
	DLOCK_LOST_EXPIRED = 0,   /**< lease ran out without a successful renewal */
	DLOCK_LOST_TAKEN = 1,     /**< the server says another owner has it / it is gone */
	DLOCK_LOST_SESSION = 2,   /**< session or connection holding it ended */
	DLOCK_LOST_CLOSED = 3,    /**< a loop client (dlock/loop.h) was closed while it held the lock */
	DLOCK_LOST_MAX_HOLD = 4   /**< held for its maximum (dlock_acquire_options::max_hold): the core
	                               released it */
} dlock_lost_reason;

/**
 * Lost-lock callback.  Called on the client's background thread (on a
 * loop client: on its loop, see dlock/loop.h), at most
 * once per acquisition, never after dlock_release() of that acquisition
 * has returned.  It may call dlock_release(), dlock_check() and the fencing
 * and name getters on `lock`; it must not call dlock_client_close() (that
 * returns DLOCK_EDEADLK) nor dlock_lock_free() on its lock, and should
 * return quickly.  `detail` is valid only
 * during the call.
 */
typedef void (*dlock_lost_fn)(dlock_lock *lock, dlock_lost_reason reason, const char *detail,
                              void *userdata);

/** Mode of one acquisition (dlock_acquire_options::mode).  Codes are only ever appended. */
typedef enum dlock_lock_mode {
	DLOCK_MODE_EXCLUSIVE = 0, /**< alone: a mutex, or the writer of a read-write lock */
	DLOCK_MODE_SHARED = 1     /**< beside other shared holders: a reader of a read-write lock (a
	                               semaphore's acquisitions are exclusive: each takes one permit) */
} dlock_lock_mode;

/**
 * A setting of one acquisition that is on or off (dlock_acquire_options::renewal and
 * dlock_acquire_options::fence).  Zero is the URI's setting, so that a field a designated
 * initializer leaves out keeps what the URI says (on, unless the URI turns it off) and never turns
 * a safeguard off.
 */
typedef enum dlock_switch {
	DLOCK_DEFAULT = 0, /**< the URI's parameter (`renew`, `fencing`), on when the URI does not say */
	DLOCK_ON = 1,      /**< on, whatever the URI says */
	DLOCK_OFF = 2      /**< off, whatever the URI says */
} dlock_switch;

/**
 * dlock_acquire_options::min_hold or dlock_acquire_options::max_hold: no bound, whatever the URI
 * says.  Not -1, which meant "the URI's" in version 4: a -1 carried over from there is
 * DLOCK_EINVAL, not "none".
 */
#define DLOCK_HOLD_NONE (-2)

/**
 * Current value of dlock_acquire_options::version.  Every earlier version is still accepted, with
 * the meanings it was built with; a caller's struct ends after the fields of its version, and the
 * library reads none past them:
 *   - 1: wait_ms, lease_ms, `renew`, on_lost, lost_userdata; fencing as the URI's `fencing`;
 *   - 2: adds `fencing`;
 *   - 3: adds mode (before it: exclusive);
 *   - 4: adds `min_hold_ms` and `max_hold_ms` (before them: the URI's `min_hold`, `max_hold`);
 *   - 5: the same layout, with those four fields renamed (`renew` is renewal, `fencing` fence,
 *     `min_hold_ms` min_hold, `max_hold_ms` max_hold) so that source written for an older version
 *     fails to compile rather than change meaning, since 0 in each now means the URI's.
 * In versions 1 to 4, `renew` and `fencing` are negative for the URI's, 0 for off and any other
 * value for on; `min_hold_ms` and `max_hold_ms` are -1 for the URI's, 0 for no bound, or a
 * duration.  So there a designated initializer that leaves them out turns renewal and fencing off.
 */
#define DLOCK_ACQUIRE_OPTIONS_VERSION 5

/**
 * Options of one acquisition.  Initialise with DLOCK_ACQUIRE_OPTIONS_INIT, or with a designated
 * initializer that names `version` and the fields it sets: what a field left out (zero) means is
 * in its comment, and no zero turns a safeguard off.
 */
typedef struct dlock_acquire_options {
	unsigned version;   /**< DLOCK_ACQUIRE_OPTIONS_VERSION; 0 or a version this library does not know: DLOCK_EVERSION */
	/** 0: try once (DLOCK_EBUSY when held elsewhere); >0: a bound; DLOCK_WAIT_FOREVER;
	 *  DLOCK_WAIT_DEFAULT: the URI's `wait` (what DLOCK_ACQUIRE_OPTIONS_INIT gives) */
	int64_t wait_ms;
	int64_t lease_ms;   /**< 0: the URI's `ttl`, else 30000.  TTL backends: the key's TTL; session backends: see caps */
	/** A dlock_switch: automatic renewal of the lease.  0 (DLOCK_DEFAULT): the URI's `renew` (default
	 *  on); DLOCK_ON; DLOCK_OFF: the lock is lost when its first lease runs out.  Any other value:
	 *  DLOCK_EINVAL.  (Version 1, then named `renew`.) */
	int renewal;
	dlock_lost_fn on_lost; /**< NULL: no callback (a loss is logged at WARN); when set, a loss is logged at INFO */
	void *lost_userdata;   /**< Passed to `on_lost` as is. */
	/** A dlock_switch: whether the acquisition takes a fencing token.  0 (DLOCK_DEFAULT): the URI's
	 *  `fencing` (default on); DLOCK_ON; DLOCK_OFF: none, which spares the server work a token costs
	 *  (Redis: a script instead of a plain SET; PostgreSQL: nextval; file://: a write and fdatasync)
	 *  — dlock_lock_fencing_token() then returns DLOCK_ENOTSUP.  Any other value: DLOCK_EINVAL.
	 *  (Version 2, then named `fencing`.) */
	int fence;
	/** 0 (DLOCK_MODE_EXCLUSIVE, the default) or DLOCK_MODE_SHARED; shared only on a read-write handle
	 *  (dlock_rwlock_new()), DLOCK_EINVAL on a mutex or for a value out of range.  (Version 3.) */
	dlock_lock_mode mode;
	/** Minimum hold in ms, after ShedLock's "lock at least for".  0: the URI's `min_hold` (default:
	 *  none); DLOCK_HOLD_NONE: none; else a duration (another negative value: DLOCK_EINVAL).
	 *  A release sooner than this after the acquisition returns DLOCK_OK at once, but the name stays
	 *  held until the bound has passed since the acquisition: on TTL backends the lease is set to end
	 *  at the bound (so it holds even if the process dies), on session backends the core keeps the
	 *  session's hold and releases it at the bound — a process that exits (or a client closed) before
	 *  then frees it with its session.  Meanwhile the handle counts as not held, and acquiring it
	 *  again waits for the bound.  (Version 4, then named `min_hold_ms`.) */
	int64_t min_hold;
	/** Maximum hold in ms, after ShedLock's "lock at most for".  0: the URI's `max_hold` (default:
	 *  none); DLOCK_HOLD_NONE: none; else a duration (another negative value: DLOCK_EINVAL).
	 *  When the acquisition has held the name this long, the core releases it on the server and
	 *  reports it lost with DLOCK_LOST_MAX_HOLD, as any loss (renewal does not carry it past the
	 *  bound).  At least the minimum hold when both are set (else DLOCK_EINVAL).  (Version 4, then
	 *  named `max_hold_ms`.) */
	int64_t max_hold;
} dlock_acquire_options;

/** Default acquire options: exclusive; the URI's wait bound, lease, renewal, fencing and hold bounds; no callback. */
#define DLOCK_ACQUIRE_OPTIONS_INIT \
	{ DLOCK_ACQUIRE_OPTIONS_VERSION, DLOCK_WAIT_DEFAULT, 0, DLOCK_DEFAULT, NULL, NULL, DLOCK_DEFAULT, \
	  DLOCK_MODE_EXCLUSIVE, 0, 0 }

/**
 * Acquire the lock.  `opts` may be NULL for defaults.
 *
 * Reentrancy: if the calling thread already holds this handle (on a loop
 * client: if the handle is held, whatever the thread), a hold
 * count goes up with no server round trip (release undoes one level).
 * A thread is known by an identity the process never gives to another
 * thread: an acquisition whose thread has ended is no thread's to reenter
 * (any thread may still release it), even for a new thread that the
 * system gives the same pthread_t.
 * A thread that holds the name through another handle of the same client
 * gets DLOCK_EDEADLK (DLOCK_EBUSY for try-once) instead of waiting forever.
 * Read-write handles add the rules of dlock_rwlock_new() (a reader asking
 * to write gets DLOCK_EDEADLK).
 *
 * Local coalescing: threads of one client that wait for the same name
 * queue in FIFO order inside the process and only the head asks the server;
 * shared acquisitions ask it one after another while the name is held
 * shared, so several handles of one client may hold it at once.
 * Every acquisition goes through the server and gets its own fencing token
 * (unless it asked for none: dlock_acquire_options::fence).
 *
 * Returns DLOCK_OK, DLOCK_EBUSY (try once, held elsewhere), DLOCK_ETIMEDOUT
 * (bound expired), DLOCK_ECANCELED (dlock_cancel() or client closed),
 * DLOCK_EKIND (the name is in use as another kind of lock), DLOCK_EINVAL
 * (bad options: a mode out of range, or shared on a mutex), DLOCK_EVERSION
 * (an options version this library does not know), or a connection/server
 * error.  Thread-safe; blocks up to the wait bound.
 */
DLOCK_API dlock_status dlock_acquire(dlock_lock *lock, const dlock_acquire_options *opts);

/**
 * Release one level of the lock.  Owner-only: when the lock is no longer
 * ours (never acquired, already released, expired, taken over, session
 * gone), returns DLOCK_ENOTHELD and never removes another owner's lock.
 * May be called from any thread, including the lost-lock callback.
 *
 * A lost lock: once the loss is declared (a lease that ran out: once it
 * has also ended on the server), the client's background thread releases
 * what may be left of it on the server and lets the client's other
 * handles of the name acquire it, without waiting for this call.
 * The handle itself stays lost until this call, which then returns
 * DLOCK_ENOTHELD (with the loss in the client's error text) and undoes
 * every level at once; after that cleanup it makes no server call.
 */
DLOCK_API dlock_status dlock_release(dlock_lock *lock);

/**
 * Extend the lease of a held lock to `lease_ms` from now (0: the
 * acquisition's lease).  DLOCK_ENOTHELD if it is no longer ours;
 * DLOCK_ENOTSUP on backends without a lease to extend.
 */
DLOCK_API dlock_status dlock_extend(dlock_lock *lock, int64_t lease_ms);

/**
 * Ask the backend whether the lock is still ours: DLOCK_OK (held),
 * DLOCK_ENOTHELD (not held or lost), DLOCK_EUNCERTAIN (cannot tell now:
 * the server is unreachable but the session may still live).
 */
DLOCK_API dlock_status dlock_check(dlock_lock *lock);

/**
 * Wake a dlock_acquire() blocked on this handle in another thread; it
 * returns DLOCK_ECANCELED.  Cancels only an acquire in progress (no effect
 * on later ones).  Thread-safe; never blocks for long.
 */
DLOCK_API dlock_status dlock_cancel(dlock_lock *lock);

/**
 * Fencing token of the current acquisition: strictly greater for each new
 * holder of the name (see the fencing class in the capabilities); for a
 * shared acquisition, the token of the latest writer (see dlock_rwlock_new()
 * and DLOCK_FEATURE_READ_FENCING, which may say NONE).
 * For a semaphore's permit, see dlock_semaphore_new(): the token goes with
 * the permit's slot.
 * DLOCK_ENOTSUP when the backend has no fencing or the acquisition asked
 * for no token (fencing off), DLOCK_ENOTHELD when the handle does not hold
 * the lock.
 */
DLOCK_API dlock_status dlock_lock_fencing_token(dlock_lock *lock, uint64_t *token);

/**
 * Slot of the permit a semaphore handle holds: 0 to N-1, held by no other
 * live permit of the name.  With the fencing token it lets storage refuse
 * a permit whose lease has gone (keep the last token per slot).
 * DLOCK_ENOTSUP on a handle that is not a semaphore or on a backend whose
 * permits have no slot (DLOCK_FEATURE_PERMIT_FENCING is NONE),
 * DLOCK_ENOTHELD when the handle does not hold a permit, DLOCK_EINVAL for
 * NULL.
 */
DLOCK_API dlock_status dlock_lock_permit_slot(dlock_lock *lock, uint32_t *slot);

/* ------------------------------------------------------------ inspection */

/**
 * One holder of a lock, as the server shows it to dlock_inspect() and
 * dlock_list().  Owned by the dlock_lock_info it belongs to.  Each field
 * is known for every holder where DLOCK_FEATURE_INSPECT has its flag;
 * without the flag it keeps the "unknown" value given here, or is right
 * where the backend happens to know it (file:// knows a writer's owner,
 * not a reader's).  Strings come from other processes: they
 * may hold any byte but NUL (escape them before printing), never a
 * password.  Fields are only appended (the library allocates it).
 */
typedef struct dlock_holder {
	const char *identity;   /**< the holder client's identity (dlock_client_options::identity); "" unknown.  A
	                             backend that keeps fewer bytes shows a long one cut: its first bytes, '+' and
	                             8 hex digits of a hash of the whole (PostgreSQL: past about 50 bytes) */
	const char *host;       /**< the holder's host name; "" unknown */
	int64_t pid;            /**< the holder's process id; 0 unknown */
	int64_t acquired_ms;    /**< when it acquired, Unix time in ms on the server's clock; -1 unknown */
	int64_t lease_left_ms;  /**< ms until the server lets it go unless renewed; -1 unknown or bound to a session */
	uint64_t token;         /**< the acquisition's fencing token; 0 none or unknown */
	dlock_lock_mode mode;   /**< DLOCK_MODE_SHARED for a reader of a read-write lock, else exclusive */
	int64_t slot;           /**< a semaphore's permit: its slot; -1 none or unknown */
	const char *session;    /**< the holder's session or connection as the server names it (ZooKeeper
	                             session id, PostgreSQL backend pid); "" unknown */
	const char *value;      /**< a leader's value (dlock_proclaim()); "" none, NULL in a holder made by an
	                             older driver's initializer (the builder turns it into "") */
} dlock_holder;

/**
 * What one lock name looks like on the server: dlock_inspect() answers
 * one, dlock_list() several.  Owned by the library until
 * dlock_lock_info_free() (or dlock_lock_list_free()).  Fields are only
 * appended.
 */
typedef struct dlock_lock_info {
	const char *name;       /**< the lock's name; NULL when a listing cannot tell it (names are hashed on the
	                             server and this one was not kept there) */
	const char *resource;   /**< where the server keeps it, printable: a Redis key, a znode path, a
	                             PostgreSQL advisory key, a file */
	dlock_lock_kind kind;   /**< the kind it is in use as; DLOCK_KIND_MUTEX when free */
	uint32_t permits;       /**< a semaphore's N; 1 for the other kinds; 0 unknown */
	size_t nholders;        /**< holders now: 0 when the name is free */
	const dlock_holder *const *holders; /**< `nholders` holders */
	int64_t waiters;        /**< acquisitions waiting on the server; -1 unknown (DLOCK_INSPECT_WAITERS) */
} dlock_lock_info;

/**
 * Ask the server who holds `name` (1 to DLOCK_NAME_MAX bytes, as for
 * dlock_lock_new()), in any kind.  On success *out is a new
 * dlock_lock_info (held when `nholders` > 0, every holder of a shared lock
 * or a semaphore listed), to be freed with dlock_lock_info_free().  The
 * answer is a snapshot: the lock may change hands right after.
 * DLOCK_ENOTSUP when the backend has no inspection (DLOCK_FEATURE_INSPECT
 * is 0), DLOCK_EINVAL for a bad name or NULL, DLOCK_ECLOSED after close,
 * or a server error.  Thread-safe; one or a few round trips.
 */
DLOCK_API dlock_status dlock_inspect(dlock_client *client, const char *name, dlock_lock_info **out);

/** Free what dlock_inspect() answered (NULL is fine). */
DLOCK_API void dlock_lock_info_free(dlock_lock_info *info);

/** What dlock_list() answers: `count` locks, sorted by name (those without a name last, by resource). */
typedef struct dlock_lock_list {
	size_t count;                        /**< number of `items` */
	const dlock_lock_info *const *items; /**< the held locks */
} dlock_lock_list;

/**
 * List the names held now under the client's prefix (the URI's `prefix`,
 * or its directory, or its namespace), with their holders.  `name_prefix`
 * (NULL or "": all) keeps the names that start with it; a lock whose name
 * the server does not keep is listed only when `name_prefix` is empty.
 * A snapshot, as dlock_inspect()'s.  DLOCK_ENOTSUP where the server cannot
 * enumerate (DLOCK_INSPECT_LIST absent).  Free with dlock_lock_list_free().
 * Thread-safe; may take several round trips on a server with many keys.
 */
DLOCK_API dlock_status dlock_list(dlock_client *client, const char *name_prefix, dlock_lock_list **out);

/** Free what dlock_list() answered (NULL is fine). */
DLOCK_API void dlock_lock_list_free(dlock_lock_list *list);

/**
 * Break `name`: take it from every holder, whoever they are — an
 * administrator's act for a lock whose holder is stuck, never done by
 * anything else in the library.  What it does depends on the backend
 * (DLOCK_FEATURE_BREAK): DLOCK_BREAK_DELETE removes the lock on the server
 * (on Redis the lock key, never the fencing counter, so the next token is
 * still larger), DLOCK_BREAK_SESSION ends each holder's session
 * (PostgreSQL advisory: pg_terminate_backend, which frees every lock of
 * that session).  The old holder learns of it at its next renewal or event
 * (its lost-lock callback runs), so until then it and the next holder can
 * overlap: that is what the fencing token is for.  Stores in *broken (may
 * be NULL) how many holders were removed: 0 when the name was free, which
 * is not an error.  DLOCK_ENOTSUP where the backend cannot break
 * (file://: another process's lock), DLOCK_EPERM when the server refuses
 * (credentials), DLOCK_EINVAL, DLOCK_ECLOSED or a server error.
 * Thread-safe.
 */
DLOCK_API dlock_status dlock_break(dlock_client *client, const char *name, size_t *broken);

/** Flags of dlock_gc(), OR-ed. */
typedef enum dlock_gc_flags {
	DLOCK_GC_DRY_RUN = 1 /**< remove nothing: report what would be removed now */
} dlock_gc_flags;

/**
 * Called by dlock_gc() once per name whose leftovers it removed (or would
 * remove, with DLOCK_GC_DRY_RUN), on the calling thread, before it
 * returns: `name` is the lock's name (NUL-terminated; NULL where the
 * server keeps only a hash of it), `resource` where the server kept it (a
 * file, a row), printable.  Both are valid during the call only.  It must
 * not call dlock_gc() on the same client.
 */
typedef void (*dlock_gc_fn)(const char *name, const char *resource, void *userdata);

/**
 * Remove what names whose locks nobody holds or waits for left on the
 * server (lock files, rows: see "What each name leaves behind" in the
 * README), under the client's prefix, for the names that start with
 * `name_prefix` (NULL or "": all; a name the server keeps only hashed
 * only then).  What must stay stays: nothing a later fencing token is
 * counted from goes back, and nothing a holder or a waiter uses is
 * removed, so no two holders ever come of it — an acquisition that meets
 * a removal takes the name again.  `flags`: dlock_gc_flags.  `fn` (may be
 * NULL) hears of each name; *count (may be NULL) gets how many were
 * removed (or would be).  DLOCK_ENOTSUP where the backend has nothing to
 * collect or cannot collect it safely (DLOCK_FEATURE_GC 0; the message
 * says why), DLOCK_EINVAL for a prefix longer than a name, DLOCK_ECLOSED
 * after close, DLOCK_EPERM when the server refuses, or a server error
 * (what was removed before it stays removed and counted).  Thread-safe;
 * work grows with the names the server keeps.
 */
DLOCK_API dlock_status dlock_gc(dlock_client *client, const char *name_prefix, unsigned flags, dlock_gc_fn fn,
                                void *userdata, size_t *count);

/* ------------------------------------------------------- leader election */

/** A candidate for, and an observer of, one election on a client (opaque). */
typedef struct dlock_election dlock_election;

/** Longest value a leader proclaims, in bytes. */
#define DLOCK_VALUE_MAX 1024

/**
 * An election is a lock whose holder tells everyone who it is: the leader
 * of `name` is the holder of the mutex `name` (so dlock_inspect() and
 * `dlock status` show it), its **term** is that acquisition's fencing
 * token, and its **value** (an address, say: dlock_proclaim()) is kept
 * beside the lock where any client can read it.  Make a handle for `name`
 * (as dlock_lock_new()) on `client`; free it with dlock_election_free().
 * DLOCK_ENOTSUP where the backend has no elections (DLOCK_FEATURE_ELECTION
 * is -1).  Thread-safe.
 */
DLOCK_API dlock_status dlock_election_new(dlock_client *client, const char *name, dlock_election **out);

/** Resign if leading, stop observing (waiting for a running callback), and free the handle.  From its
 *  own observer callback it frees nothing (the observer stops after that call, and the client's error
 *  text says DLOCK_EDEADLK): free it afterwards from another thread.  NULL is a no-op. */
DLOCK_API void dlock_election_free(dlock_election *e);

/**
 * The mutex behind the election: its fencing token is the term, and
 * dlock_check(), dlock_extend() and the lost-lock callback's `lock` are
 * this handle.  Owned by the election.
 */
DLOCK_API dlock_lock *dlock_election_lock(dlock_election *e);

/**
 * Campaign: wait until this handle leads, then proclaim `value` (a string
 * of at most DLOCK_VALUE_MAX bytes; NULL is "").  `opts` are those of
 * dlock_acquire(): the wait bound, the lease, and `on_lost`, which reports
 * the loss of leadership exactly as a lost lock (a session gone, a lease
 * run out while paused: a paused leader is told when it resumes, and
 * until then another can lead: the term is what storage uses to refuse
 * the old leader).  Stores the term in *term (may be NULL).  Cancel a
 * campaign with dlock_cancel(dlock_election_lock(e)).  Statuses as
 * dlock_acquire(), plus DLOCK_EINVAL for a value too long.
 */
DLOCK_API dlock_status dlock_campaign(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                                      uint64_t *term);

/** While leading, replace the value observers see.  DLOCK_ENOTHELD when not leading. */
DLOCK_API dlock_status dlock_proclaim(dlock_election *e, const char *value);

/** Stop leading (release the mutex; the next candidate is woken).  DLOCK_ENOTHELD when not leading. */
DLOCK_API dlock_status dlock_resign(dlock_election *e);

/** Who leads an election now, as dlock_election_leader() and an observer see it. */
typedef struct dlock_leader {
	int elected;                /**< 1: someone leads; 0: nobody does now */
	uint64_t term;              /**< the leader's term (its acquisition's fencing token); 0 with no leader */
	const char *value;          /**< what the leader proclaimed; "" with no leader or before its first value */
	const dlock_holder *holder; /**< who leads: identity, host, pid, since...; NULL with no leader */
} dlock_leader;

/**
 * Read who leads now (one inspection of the server), as a new
 * dlock_leader to free with dlock_leader_free().  Any client, campaigning
 * or not.  Statuses as dlock_inspect().  Thread-safe.
 */
DLOCK_API dlock_status dlock_election_leader(dlock_election *e, dlock_leader **out);

/** The earlier name of dlock_election_leader(): the same function, kept for existing callers and binaries. */
DLOCK_API dlock_status dlock_leader_get(dlock_election *e, dlock_leader **out);

/** Free what dlock_election_leader() answered (NULL is fine). */
DLOCK_API void dlock_leader_free(dlock_leader *leader);

/**
 * Observer callback: `leader` is valid only during the call.  Called on
 * the client's observer thread (on a loop client: on its loop), one call
 * at a time per client; it may
 * call any dlock function but dlock_client_close() and
 * dlock_election_free() of its own election.
 */
typedef void (*dlock_leader_fn)(dlock_election *e, const dlock_leader *leader, void *userdata);

/**
 * Observe the election: `fn` is called once with who leads now, then at
 * each change (a new term, a new value, nobody leading).  Woken by the
 * server's notifications where it has them, and reading again at least
 * once per lease (the URI's `ttl`) in any case — notifications are lost
 * while disconnected and an expiring Redis key sends none — so every
 * observer converges on the newest term within a lease.  Terms never go
 * back: a read that shows an older term than one already delivered is
 * not delivered.  `fn` NULL stops observing (after a running call has
 * returned, unless called from it).  One observer per handle: a second
 * call replaces the first.  Thread-safe.
 */
DLOCK_API dlock_status dlock_observe(dlock_election *e, dlock_leader_fn fn, void *userdata);

/* --------------------------------------------------------------- control */

/**
 * Backend-specific operation `op` on the client, with the argument `arg`
 * whose type the operation sets (after SQLite's file control).  Codes are
 * in ranges: the core's own in dlock/sys/control.h, answered by the core
 * whatever the backend; each backend's in its header (dlock/sys/zookeeper.h,
 * dlock/sys/postgres.h, ...), so a code sent to another backend is
 * DLOCK_ENOTSUP.  DLOCK_ENOTSUP also when the backend has no such door or
 * does not know `op`; DLOCK_EINVAL for a NULL client or `arg` (every
 * operation takes one); DLOCK_ECLOSED after dlock_client_close().  Failure
 * text through dlock_client_errmsg().  Thread-safe, as the backend's other
 * client calls are.
 */
DLOCK_API dlock_status dlock_client_control(dlock_client *client, int op, void *arg);

/**
 * The same on one lock handle, held or not.  Like every other call on a
 * handle it never overlaps another driver call on the same handle (it
 * waits for one in progress: an acquire, a release, a renewal), so it may
 * be called from any thread.  Same status and error text rules as
 * dlock_client_control(); core operations are not available here.
 */
DLOCK_API dlock_status dlock_lock_control(dlock_lock *lock, int op, void *arg);

/* --------------------------------------------------------------- helpers */

/**
 * Parse a duration: a decimal number with an optional unit "ms", "s", "m"
 * or "h" ("250ms", "10s", "2m", "1.5s").  The number is digits, optionally
 * followed by "." and more digits; a fraction is rounded up to a whole
 * millisecond ("0.0001s" is 1).  A bare number is multiplied by
 * `bare_unit_ms` (1 in URIs and the C API; 1000 in the dlock CLI).
 * Stores milliseconds in *out_ms.  DLOCK_EINVAL on anything else (".5",
 * "1.", "1e3", a sign), on a negative value or on overflow.  Pure
 * function, thread-safe.
 */
DLOCK_API dlock_status dlock_duration_parse(const char *text, int64_t bare_unit_ms, int64_t *out_ms);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_DLOCK_H */
