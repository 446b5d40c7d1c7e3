/*
 * zk:// — the ZooKeeper backend's private declarations, shared by the
 * files of backends/zookeeper/ (its unit test and fuzz harness too).
 *
 * The files, each above those it uses (none uses a file above it):
 *
 *   zk.c          the driver object and its methods; sets the sessions' hooks
 *   zk_acquire.c  acquire: attempts on one session after another
 *   zk_sem.c      the semaphore recipe: an internal mutex, then a lease node counted among the leases
 *   zk_recipe.c   the lock recipes (mutex, read-write): the queue and the blocker watch
 *   zk_pipe.c     the create and the first look at the queue in one round trip
 *   zk_attempt.c  one attempt on one session: protected create, reading the queue, giving up
 *   zk_inspect.c  inspection, listing and breaking: who holds a name, taking it from them
 *   zk_elect.c    elections: a leader's value in its node's data, observers' watches
 *   zk_hold.c     held locks: release, check, loss reports
 *   zk_path.c     lock name -> znode paths, ACLs, base and parent creation
 *   zk_monitor.c  the monitor thread: pings, loss timing, replacing dead sessions
 *   zk_session.c  one zhandle per session: connection state, use by calls
 *   zk_own.c      the watch on our own node: a deleted node is a lost lock
 *   zk_slot.c     watch contexts that wake a waiting acquire
 *   zk_config.c   URI -> connect string, base path, credentials, session timeout
 *   zk_log.c      the client library's log, routed to the dlock client's log
 *   zk_error.c    ZooKeeper result codes -> dlock statuses
 *
 * Locking: one mutex per client (`mu`) guards every field marked "mu".  It
 * is never held across a ZooKeeper call, so the library's completion thread
 * (which runs our watchers and completions, and takes `mu`) never waits for
 * a call that waits for it.  Under `mu` we call only dlock_wait_wake() and
 * dlock_report_lost(), which take short-lived core locks and never call a
 * driver.
 */
#ifndef DLOCK_ZOOKEEPER_INTERNAL_H
#define DLOCK_ZOOKEEPER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <zookeeper/zookeeper.h>

#include "dlock/sys/driver.h"

#define ZK_DEFAULT_PORT 2181
/*
 * Node names, as Apache Curator's recipes write them: "_c_" + 32 hex digits
 * of a per-acquisition GUID + "-" + the recipe's lock name (+ 10 digits from
 * the server): "lock-" for a mutex (InterProcessMutex), "__READ__" for a
 * reader and "__WRIT__" for a writer (InterProcessReadWriteLock), "lease-"
 * for a semaphore's permit (InterProcessSemaphoreV2, in the name's
 * "leases" child; its internal mutex's "lock-" nodes in "locks").  The kind
 * of a node is told by the mark just before its number.
 */
#define ZK_GUID_HEX 32
#define ZK_NODE_PREFIX "_c_"
#define ZK_NODE_MARK "-lock-"
#define ZK_READ_MARK "__READ__"
#define ZK_WRITE_MARK "__WRIT__"
#define ZK_LEASE_MARK "-lease-"
#define ZK_SEM_LOCKS "locks"   /* child of a semaphore's node: its internal mutex's queue */
#define ZK_SEM_LEASES "leases" /* child of a semaphore's node: one lease node per permit held or awaited */
/* Data of a semaphore's lock and lease nodes: "dlock:permits=" + N in decimal (zk_path.c). */
#define ZK_PERMITS_DATA "dlock:permits="
#define ZK_PERMITS_DATA_MAX 32
/* Between the permits and the owner record in a lease node's data (zk_path.c). */
#define ZK_DATA_SEP '\n'
/* Longest data we write on a lock or lease node: "dlock:permits=N" + ZK_DATA_SEP + the owner record. */
#define ZK_NODE_DATA_MAX (ZK_PERMITS_DATA_MAX + 1 + DLOCK_OWNER_MAX)
/* Longest data of a leader's node: the owner record, ZK_DATA_SEP, the value it proclaimed (zk_elect.c). */
#define ZK_LEADER_DATA_MAX (DLOCK_OWNER_MAX + 1 + DLOCK_VALUE_MAX)
#define ZK_PATH_MAX 2048

/* Kinds of node in a lock's queue. */
enum zk_node_kind {
	ZK_NODE_NONE = 0,  /* not a lock node: not in the queue */
	ZK_NODE_MUTEX = 1, /* "-lock-": exclusive */
	ZK_NODE_READ = 2,  /* "__READ__": shared */
	ZK_NODE_WRITE = 3, /* "__WRIT__": exclusive */
	ZK_NODE_LEASE = 4  /* "-lease-": a semaphore's permit, in its "leases" child; never in a queue */
};

/* ------------------------------------------------------------ config */

struct zk_config {
	char *hosts;            /* "host:port,host:port" for zookeeper_init2 */
	char *base;             /* base path, e.g. "/dlock"; never "/" */
	char *auth;             /* "user:password" for digest auth, or NULL; a secret */
	const char *password;   /* inside `auth`, for scrubbing log lines; NULL without auth */
	int session_timeout_ms; /* requested; the server negotiates it */
	int64_t connect_timeout_ms;
	const char *masked;     /* the URI with its password hidden (owned by the core) */
};

dlock_status dlock_zk_config_parse(const dlock_uri *uri, struct zk_config *cfg, dlock_error *err);
void dlock_zk_config_free(struct zk_config *cfg);

/* ------------------------------------------------------------ sessions */

enum zk_state {
	ZK_CONNECTING = 0, /* no connection now; the session may live */
	ZK_CONNECTED = 1,
	ZK_DEAD = 2        /* expired, or presumed expired: nothing of it is ours any more */
};

struct zk_client;

/* One ZooKeeper session: a zhandle and what we know of its state. */
struct zk_session {
	struct zk_client *c;
	zhandle_t *zh;
	uint64_t gen;           /* distinct per session of a client */
	enum zk_state state;    /* mu */
	int refs;               /* calls using `zh` now (mu); closed only at 0 */
	int64_t id;             /* session id, once connected (mu) */
	int timeout_ms;         /* negotiated session timeout, once connected (mu) */
	int64_t last_ok_ns;     /* send time of the newest request the server answered (mu) */
	int64_t ping_sent_ns;   /* mu */
	int64_t next_ping_ns;   /* mu */
	int ping_out;           /* a ping is in flight (mu) */
	struct zk_session *next_retired;
};

/* A watch context: lives as long as the client, so a watch that fires late finds it. */
struct zk_slot {
	struct zk_client *c;
	struct zk_slot *next;   /* every slot of the client (mu) */
	int in_use;             /* taken by a lock handle (mu) */
	struct zk_lock *lk;     /* that lock handle (mu) */
	dlock_wait *w;          /* the acquire to wake, or NULL (mu) */
	/* The watch on our own node (zk_own.c), all mu: */
	char own[ZK_PATH_MAX];  /* the node of the current acquisition, or "" */
	int own_gone;           /* its deletion was seen */
	int own_watched;        /* an exists-watch is set on it */
	int own_checking;       /* an exists (with a watch) is on its way */
	int own_recheck;        /* that exists failed for a lost connection: send it again once connected */
	/* The node the acquire waits for (zk_recipe.c), all mu: */
	char pred[ZK_PATH_MAX]; /* its path, or "" */
	int pred_gone;          /* its deletion was seen */
};

struct zk_lock;
struct zk_watch;

/*
 * What the layers above the sessions do when a session changes: set by
 * zk.c at open, before the first session starts, so that the session files
 * (zk_session.c, zk_monitor.c) call nothing above them.  Each runs with `mu`
 * held.
 */
struct zk_session_hooks {
	/* A session connected (the session watcher, on the completion thread): mark what must be armed again. */
	void (*reconnected_locked)(struct zk_client *c);
	/* Each turn of the monitor thread (mu may be dropped inside and taken again): arm what was marked. */
	void (*rearm_locked)(struct zk_client *c);
	/* Session `gen` is dead: what was held in it is lost, for the reason `why`. */
	void (*expired_locked)(struct zk_client *c, uint64_t gen, const char *why);
};

struct zk_client {
	dlock_host *host;
	struct zk_config cfg;
	pthread_mutex_t mu;
	pthread_cond_t cond;         /* any session state change, refs, stop (mu) */
	struct zk_session *cur;      /* the session new calls use (mu) */
	struct zk_session *retired;  /* dead sessions waiting to be closed (mu) */
	uint64_t next_gen;           /* mu */
	struct zk_slot *slots;       /* mu */
	struct zk_lock *held;        /* locks held now (mu) */
	struct zk_watch *watches;    /* observers' watches, in use or free for reuse (mu; zk_elect.c) */
	struct zk_session_hooks hooks; /* set at open, before the first session; never changed after */
	const char *owner;           /* the owner record written on every lock and lease node (core's, static) */
	size_t owner_len;
	int stop;                    /* mu */
	pthread_t monitor;
	int monitor_started;
};

/* A new session (connecting) with the next generation number. */
dlock_status dlock_zk_session_new(struct zk_client *c, struct zk_session **out, dlock_error *err);
/* Close its handle and free it; never with `mu` held. */
void dlock_zk_session_free(struct zk_session *s);
/* Start the first session and wait until it is connected (open; c->hooks set). */
dlock_status dlock_zk_session_start(struct zk_client *c, dlock_error *err);
/* Start the monitor thread: pings, loss timing, replacing dead sessions. */
dlock_status dlock_zk_monitor_start(struct zk_client *c, dlock_error *err);
/* Stop the monitor and close every session (close). */
void dlock_zk_sessions_close(struct zk_client *c);

/*
 * The current session, referenced, once it is connected: waits for a
 * connection within `w` (woken through the acquire's slot).  DLOCK_ECONNECT
 * when not connected by the deadline (at once for try-once), ECANCELED.
 */
dlock_status dlock_zk_session_wait(struct zk_client *c, dlock_wait *w, struct zk_session **out,
                                   dlock_error *err);
/* The current session, referenced, if it is session `gen` and not dead; else NULL. */
struct zk_session *dlock_zk_session_of(struct zk_client *c, uint64_t gen);
void dlock_zk_session_put(struct zk_session *s);
/*
 * Wait until `s` is connected (1) or dead (0); bounded by the session
 * timeout.  `after_loss`: a call just failed with a connection error.
 */
int dlock_zk_session_await(struct zk_session *s, int after_loss);
/* 1 if `s` is still connected. */
int dlock_zk_session_connected(struct zk_session *s);
/* A request sent at `sent_ns` was answered: the server had the session then. */
void dlock_zk_session_answered(struct zk_session *s, int64_t sent_ns);
/* Declare `s` dead (mu held): report its locks lost (c->hooks), wake waiters, let the monitor replace it. */
void dlock_zk_session_kill_locked(struct zk_session *s, const char *why);

/* ------------------------------------------------------------ logging */

/* The client the calling thread logs for; returns the previous one to restore. */
struct zk_client *dlock_zk_log_enter(struct zk_client *c);
void dlock_zk_log_leave(struct zk_client *prev);
/* log_callback_fn for zookeeper_init2. */
void dlock_zk_log_line(const char *message);

/* ------------------------------------------------------------ slots */

struct zk_slot *dlock_zk_slot_take(struct zk_client *c, struct zk_lock *lk);
void dlock_zk_slot_give(struct zk_slot *slot);
/* Attach or detach (w NULL) the acquire that a slot wakes. */
void dlock_zk_slot_attach(struct zk_slot *slot, dlock_wait *w);
/* Wake every attached acquire (mu held): the session changed. */
void dlock_zk_slots_wake_locked(struct zk_client *c);
/* The acquire now waits for the node `path` (NULL: for none): its deletion is noted. */
void dlock_zk_slot_await(struct zk_slot *slot, const char *path);
/* 1 if the deletion of the node the acquire waits for was seen since dlock_zk_slot_await(). */
int dlock_zk_slot_awaited_gone(struct zk_slot *slot);
/* watcher_fn for the exists-watch on the node a waiter waits for; the context is the slot. */
void dlock_zk_slot_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);
void dlock_zk_slots_free(struct zk_client *c);

/* ------------------------------------------------------------ paths */

/* Per lock handle: the driver's `lk`. */
struct zk_lock {
	char *parent;            /* base + "/" + escaped name */
	char *kept;              /* the name itself when its component is hashed, written as the data of
	                            `parent` when we create it (zk_path.c), else NULL */
	size_t kept_len;
	struct zk_slot *slot;
	dlock_lock_kind kind;    /* mutex, read-write lock or semaphore, for the handle's life */
	uint32_t permits;        /* a semaphore's N (1 for the other kinds) */
	/* The current acquisition (while acquiring or held). */
	char node[ZK_PATH_MAX];  /* our node's full path */
	int64_t czxid;           /* the fencing token */
	int32_t version;         /* version it was created with: release deletes that one */
	uint64_t gen;            /* session that created it */
	int held;                /* in c->held (mu) */
	struct zk_lock *prev, *next;
};

/* Paths of one lock name; DLOCK_ENOMEM. */
dlock_status dlock_zk_lock_paths(const struct zk_config *cfg, struct zk_lock *lk, const char *name,
                                 size_t len, dlock_error *err);
/* Free what dlock_zk_lock_paths() allocated. */
void dlock_zk_lock_paths_free(struct zk_lock *lk);
/* The name's node, BASE/ + its component, into out (ZK_PATH_MAX bytes); DLOCK_EINVAL when too long. */
dlock_status dlock_zk_name_parent(const struct zk_client *c, const char *name, size_t len, char *out,
                                  dlock_error *err);
/* The ACL for every node we create: creator-only with credentials, else open. */
struct ACL_vector *dlock_zk_acl(const struct zk_client *c);
/* Create the base path's missing components (persistent).  Returns a ZooKeeper code. */
int dlock_zk_ensure_base(struct zk_session *s);
/*
 * Create `parent` (a container) and whatever it needs below the base: the
 * lock's node (lk->parent, with lk->kept as its data), and for a semaphore
 * its "locks" or "leases" child under it (containers too), and the base.
 * Returns a ZooKeeper code.
 */
int dlock_zk_ensure_parent(struct zk_session *s, const char *parent, const struct zk_lock *lk);
/*
 * Kind and sequence number of a child: a mark (ZK_NODE_MARK, ZK_READ_MARK,
 * ZK_WRITE_MARK) + the server's "%010d" of a signed 32-bit counter
 * ("0000000042", "-000000002", "-2147483648") at the end of its name: the
 * kind and *seq, or ZK_NODE_NONE for a name that is not a lock node.
 */
enum zk_node_kind dlock_zk_child_kind(const char *child, int32_t *seq);
/* The same, 1 for a lock node of any kind, 0 otherwise. */
int dlock_zk_child_seq(const char *child, int32_t *seq);
/* The mark of a kind of node ("-lock-", "__READ__", "__WRIT__", "-lease-"); NULL for ZK_NODE_NONE. */
const char *dlock_zk_node_mark(enum zk_node_kind kind);
/* 1 if sequence number `a` was given before `b`, across the counter's wrap. */
int dlock_zk_seq_before(int32_t a, int32_t b);
/*
 * Where our node `own` stands among the children `kids` of its parent: 1 if
 * it is one of them, with *pred the index of the node that keeps it waiting
 * (-1: none, the lock is ours); 0 if it is gone.  That node is the nearest
 * one before ours that ours cannot be held beside: for a mutex or a writer,
 * the lock node just before it, of any kind; for a reader, the nearest
 * mutex or writer node before it.  Names that are not lock nodes (lease
 * nodes included), and other nodes with our GUID (duplicates), are not in
 * the queue.
 */
int dlock_zk_queue_place(char *const *kids, int32_t n, const char *own, const char *guid, int32_t *pred);
/* The data of a semaphore's nodes for N permits into buf (ZK_PERMITS_DATA_MAX bytes); its length. */
int dlock_zk_permits_format(uint32_t permits, char *buf);
/*
 * N from the data of a node: 1 and *permits for exactly ZK_PERMITS_DATA + a
 * decimal 1..DLOCK_PERMITS_MAX without leading zeros; 0 for anything else
 * (a node of Curator's, whose data is the creator's address or the user's).
 */
int dlock_zk_permits_parse(const char *data, int len, uint32_t *permits);
/*
 * A lease node's data: ZK_PERMITS_DATA + N, ZK_DATA_SEP, the owner record
 * (dlock_host_owner()), into buf (ZK_NODE_DATA_MAX bytes); its length.
 */
int dlock_zk_lease_data_format(uint32_t permits, const char *owner, size_t owner_len, char *buf);
/*
 * The owner record inside a node's data: the data of a mutex, reader or
 * writer node up to ZK_DATA_SEP (a leader's value follows it) or its end,
 * what follows ZK_DATA_SEP after a semaphore's permits; NULL (and *olen 0)
 * when there is none (a node of the previous release, or Curator's, whose
 * data is its creator's address or the user's).
 */
const char *dlock_zk_data_owner(const char *data, int len, size_t *olen);
/*
 * A leader's value inside a mutex or writer node's data: what follows the
 * owner record and ZK_DATA_SEP; NULL (and *vlen 0) when there is none (no
 * value proclaimed, a lease node, a node not in our form).
 */
const char *dlock_zk_data_value(const char *data, int len, size_t *vlen);
/* 1 if `child` carries the GUID `guid` (ZK_GUID_HEX hex digits) in our protected form "_c_GUID-". */
int dlock_zk_child_has_guid(const char *child, const char *guid);

/* ------------------------------------------------------------ own node */

/* watcher_fn of every look at the queue (child watch) and of the watch on our node; the context is the slot. */
void dlock_zk_own_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);
/* lk->node was just created: from now on its deletion is a loss (held) or a reason to look again. */
void dlock_zk_own_start(struct zk_client *c, struct zk_lock *lk);
/* Stop treating lk's node as ours (before deleting it ourselves, or when done). */
void dlock_zk_own_forget_locked(struct zk_lock *lk);
void dlock_zk_own_forget(struct zk_client *c, struct zk_lock *lk);
/* 1 while lk's node has no exists-watch of its own, set or on its way: a look at the queue then sets a child watch. */
int dlock_zk_own_unwatched(struct zk_client *c, const struct zk_lock *lk);
/* 1 once lk's node has an exists-watch of its own that the server answered (the node was there). */
int dlock_zk_own_watched(struct zk_client *c, const struct zk_lock *lk);
/* 1 if the deletion of lk's current node was seen (mu held). */
int dlock_zk_own_gone_locked(const struct zk_lock *lk);
/* Session `s` is connected again: send the checks of our nodes that a lost connection failed. */
void dlock_zk_own_reconnected(struct zk_session *s);

/* ------------------------------------------------------------ errors */

/* 1 for codes after which the request may or may not have been applied. */
int dlock_zk_rc_connection(int rc);
/* 1 for codes that mean the session is gone. */
int dlock_zk_rc_session_gone(int rc);
/* 1 for codes that are answers from the server (the session was alive). */
int dlock_zk_rc_answered(int rc);
/* Write `what` and the ZooKeeper code into err; returns the matching status. */
dlock_status dlock_zk_fail(dlock_error *err, int rc, const char *what);

/* ------------------------------------------------------------ holds (zk_hold.c) */

/* Record `lk` as held in session `s`; 0 if `s` died or our node was deleted meanwhile. */
int dlock_zk_hold(struct zk_client *c, struct zk_session *s, struct zk_lock *lk);
void dlock_zk_unhold(struct zk_client *c, struct zk_lock *lk);
/* Report every lock held in session `gen` lost (mu held; the sessions' expiry hook, zk.c). */
void dlock_zk_report_lost_locked(struct zk_client *c, uint64_t gen, const char *why);
dlock_status dlock_zk_release(struct zk_client *c, struct zk_lock *lk, dlock_error *err);
dlock_status dlock_zk_check(struct zk_client *c, struct zk_lock *lk, dlock_error *err);
/* Delete our node of session `s` with its version, across connection loss; a ZooKeeper code. */
int dlock_zk_delete_own(struct zk_session *s, const char *node, int32_t version);

/* ------------------------------------------------------------ attempts (zk_attempt.c) */

/* What one look at the queue saw (dlock_zk_look_at). */
struct zk_look {
	int found;               /* our node is among the children */
	int sem;                 /* a semaphore's "leases" child is among them */
	int dups;                /* other nodes with our GUID: creates whose lost answers went through after all */
	char pred[ZK_PATH_MAX];  /* the child that keeps us waiting, or "" when the lock is ours */
	int pred_first;          /* nothing before `pred` keeps us waiting: once it goes, the lock is ours */
};

/* One attempt to acquire, on one session (the recipes: zk_recipe.c, zk_sem.c). */
struct zk_attempt {
	struct zk_client *c;
	struct zk_session *s;
	struct zk_lock *lk;
	dlock_wait *w;
	dlock_error *err;
	char guid[ZK_GUID_HEX + 1];
	enum zk_node_kind kind;  /* of the node we create now: mutex, reader, writer or lease */
	const char *parent;      /* where it goes: lk->parent, or a semaphore's "locks" or "leases" child */
	const char *data;        /* its data, or NULL */
	int datalen;
	int check_leases;        /* a mutex or read-write node: refuse a name in use as a semaphore */
	int sem_queue;           /* a semaphore's internal mutex: refuse a node ahead with another N */
	const char *own;         /* our node's name: the last component of lk->node */
	int again;               /* the session died or our node vanished: start over */
	struct zk_look look;     /* the first look at the queue, answered with the create (zk_pipe.c) */
	int have_look;           /* `look` is there and not used yet */
};

/* dlock_zk_protected_create() with no create of this attempt sent yet (every ZooKeeper code is <= 0). */
#define ZK_CREATE_UNSENT 1

/* rc, after noting that the server answered a request sent at `sent` (the session lived then). */
int dlock_zk_answered(struct zk_attempt *a, int rc, int64_t sent);
/* A ZooKeeper code that ends this attempt: set `again` (session gone) or an error. */
dlock_status dlock_zk_attempt_failed(struct zk_attempt *a, int rc, const char *what);
/* After a connection error: 1 to retry the call, 0 when the session died (again is set). */
int dlock_zk_reconnected(struct zk_attempt *a);
/* A fresh GUID for the next node. */
dlock_status dlock_zk_new_guid(struct zk_attempt *a);
/* a->parent + "/_c_GUID-" + the kind's mark: the path the server appends the sequence number to. */
void dlock_zk_node_prefix(const struct zk_attempt *a, char *out, size_t len);
/*
 * Create a->parent/_c_GUID-MARK as ephemeral sequential into lk->node,
 * across lost answers.  `rc`: the answer to a create of it already sent
 * (lk->node, czxid and version filled on ZOK), or ZK_CREATE_UNSENT.
 */
dlock_status dlock_zk_protected_create(struct zk_attempt *a, int rc);
/* What the children `kids` of a->parent say of our node a->own (no request). */
void dlock_zk_look_at(const struct zk_attempt *a, const struct String_vector *kids, struct zk_look *out);
/* Delete our node (lk->node) after failure `st`; returns the status to report. */
dlock_status dlock_zk_give_up(struct zk_attempt *a, dlock_status st);

/* ------------------------------------------------------------ recipes (zk_pipe.c, zk_recipe.c, zk_sem.c) */

/*
 * The create and the first look at the queue sent together (zk_pipe.c):
 * as dlock_zk_protected_create() followed by dlock_zk_own_start(), and
 * a->look filled (have_look) when the look came back with our node in it.
 */
dlock_status dlock_zk_create_and_look(struct zk_attempt *a);
/* Wait in a->parent's queue until our node leads (mutex recipe); EBUSY for try-once, EKIND. */
dlock_status dlock_zk_queue_wait(struct zk_attempt *a);
/*
 * The mutex's or read-write lock's attempt on session a->s: ours once
 * *out is filled, an error, or DLOCK_OK with `again` when the session died
 * or our node vanished (start over on the next one).
 */
dlock_status dlock_zk_mutex_attempt(struct zk_attempt *a, dlock_acquired *out);
/* The semaphore's attempt (zk_sem.c): same contract as the mutex's. */
dlock_status dlock_zk_sem_attempt(struct zk_attempt *a, dlock_acquired *out);

/* ------------------------------------------------------------ acquire (zk_acquire.c) */

/* Attempts on one session after another until the lock is ours, an error, or the wait ends. */
dlock_status dlock_zk_acquire(struct zk_client *c, struct zk_lock *lk, dlock_wait *w, dlock_acquired *out,
                              dlock_error *err);

/* ------------------------------------------------------------ inspection (zk_inspect.c) */

/* What inspection sees (DLOCK_FEATURE_INSPECT) and what breaking does (DLOCK_FEATURE_BREAK). */
#define ZK_INSPECT_FLAGS                                                                                   \
	(DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_TOKEN |              \
	 DLOCK_INSPECT_WAITERS | DLOCK_INSPECT_LIST | DLOCK_INSPECT_NAMES | DLOCK_INSPECT_SESSION)

dlock_status dlock_zk_inspect(struct zk_client *c, const char *name, size_t len, dlock_info *info,
                              dlock_error *err);
dlock_status dlock_zk_list(struct zk_client *c, dlock_info *info, dlock_error *err);
dlock_status dlock_zk_break(struct zk_client *c, const char *name, size_t len, size_t *broken, dlock_error *err);

/* ------------------------------------------------------------ elections (zk_elect.c) */

/* Write `value` beside the owner record in held lk's node (owner-only: ENOTHELD when not ours). */
dlock_status dlock_zk_proclaim(struct zk_client *c, struct zk_lock *lk, const char *value, size_t len,
                               dlock_error *err);
/* Arm watches on the name's queue and leader node; `changed` is called after each change is re-armed. */
dlock_status dlock_zk_watch(struct zk_client *c, const char *name, size_t len, void (*changed)(void *arg),
                            void *arg, void **out, dlock_error *err);
void dlock_zk_unwatch(struct zk_client *c, struct zk_watch *w);
/* A session connected (mu held): every watch in use is armed again on it, and told (hook, zk.c). */
void dlock_zk_watches_reconnected_locked(struct zk_client *c);
/* The monitor's turn (mu held, dropped inside): arm the watches that wait for a connection (hook, zk.c). */
void dlock_zk_watches_rearm_locked(struct zk_client *c);
/* Free every watch context (close, after the sessions). */
void dlock_zk_watches_free(struct zk_client *c);

#endif
