/*
 * Inspection, listing and breaking: who holds a name, which names are held
 * under the base path, and taking a name from its holders.  Read from the
 * tree that the recipes keep (zk_path.c), as Curator's
 * getParticipantNodes() and kazoo's contenders() do:
 *
 *   - a mutex, reader or writer: the lock nodes of BASE/NAME in sequence
 *     order; the holder is the first node, or, when it is a reader, every
 *     reader before the first mutex or writer node; the others wait;
 *   - a semaphore: the lease nodes of BASE/NAME/leases in sequence order;
 *     the first N hold a permit (N from the leases' data), the others and
 *     the nodes of its internal queue (BASE/NAME/locks) wait.
 *
 * Each holder: its node's ctime (the server's clock), its ephemeralOwner
 * (the session, in hex), its czxid as the token of a mutex or a writer (what
 * dlock_lock_fencing_token() gave it; readers and permits have none), and
 * the owner record in its data (identity, host, pid), and after it a
 * leader's value (zk_elect.c); a node without a record (the previous
 * release, Curator) is a holder whose owner is unknown.  No lease:
 * a node lives as long as its session.  Cost: a sync first (so that what
 * another client did before the call is seen, whichever server answers),
 * one get-children (two for a semaphore, three with its queue) and one
 * get-data per holder; a holder that goes between the two is looked at
 * again, a few times at most.
 *
 * A listing reads the children of the base path (one request: ZooKeeper
 * has no paging) and describes each child as above.  Names come back from
 * the component (dlock_name_component() escapes reversibly), or, for a
 * hashed component, from the data of the lock's node, which the create of
 * that node wrote; names are bytes, checked by encoding them again.  A
 * component that is not ours (another application's node) is skipped, and
 * so is a name whose nodes another identity made under credentials (not
 * readable by us); a hashed one without the name (made by the previous
 * release) is listed without a name.
 *
 * Breaking deletes the holders' nodes (any version).  The watches fire: the
 * holder reports the loss (DLOCK_LOST_TAKEN, zk_own.c) and the next waiter
 * proceeds; the next token is a later czxid, so larger.  With credentials
 * the nodes are creator-only (zk_path.c): another identity gets
 * DLOCK_EPERM.
 *
 * Threads: any, beside every other call; each call uses the current
 * session for its duration and takes `mu` only for that.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zookeeper_internal.h"

#define NS_PER_MS 1000000LL
#define LOOKS_MAX 5      /* looks at a name whose holders keep changing */
#define SESSION_HEX 24   /* "0x" + 16 hex digits + NUL */
/* Why ZooKeeper says ZNOAUTH to inspection or breaking (zk_path.c, ACLs). */
#define ACL_NOTE                                                                                        \
	"the lock's nodes were made with credentials, and only the identity that created them (or a "    \
	"superuser) may read or delete them"

/* One lock or lease node, in the order of its sequence number. */
struct qnode {
	const char *child;
	int32_t seq;
	enum zk_node_kind kind;
};

/* One holder as read: its node's stat and data. */
struct holder_node {
	char path[ZK_PATH_MAX];
	enum zk_node_kind kind;
	struct Stat st;
	char data[ZK_LEADER_DATA_MAX > ZK_NODE_DATA_MAX ? ZK_LEADER_DATA_MAX : ZK_NODE_DATA_MAX];
	int len;
};

/* What a name looks like now. */
struct view {
	dlock_lock_kind kind;
	uint32_t permits; /* 0 unknown */
	int64_t waiters;
	struct holder_node *holders;
	size_t n, cap;
};

/* A connected session for this call, within the connect timeout; DLOCK_ECONNECT. */
static void synced(int rc, const char *value, const void *data)
{
	(void)rc, (void)value, (void)data; /* the read behind it answers for both */
}

/*
 * The current session, its server asked first to catch up with the leader
 * (sync): a follower may not yet have applied what another client did
 * before this call, and reads are answered by the session's own server.
 * The session's requests are answered in order, so the reads sent behind
 * the sync wait for it; a sync that fails fails them too.
 */
static dlock_status session_get(struct zk_client *c, struct zk_session **out, dlock_error *err)
{
	int64_t deadline = dlock_monotonic_ns() + c->cfg.connect_timeout_ms * NS_PER_MS;
	pthread_mutex_lock(&c->mu);
	while (c->cur->state != ZK_CONNECTED && !c->stop &&
	       dlock_cond_wait_until(&c->cond, &c->mu, deadline) != ETIMEDOUT)
		;
	struct zk_session *s = c->cur;
	int up = s->state == ZK_CONNECTED;
	if (up)
		s->refs++;
	pthread_mutex_unlock(&c->mu);
	*out = s;
	if (!up)
		return dlock_error_set(err, DLOCK_ECONNECT, "zk://: not connected to ZooKeeper within %lld ms",
		                       (long long)c->cfg.connect_timeout_ms);
	(void)zoo_async(s->zh, c->cfg.base, synced, NULL);
	return DLOCK_OK;
}

static int answered(struct zk_session *s, int rc, int64_t sent)
{
	if (dlock_zk_rc_answered(rc))
		dlock_zk_session_answered(s, sent);
	return rc;
}

static int children(struct zk_session *s, const char *path, struct String_vector *kids)
{
	int64_t sent = dlock_monotonic_ns();
	return answered(s, zoo_get_children(s->zh, path, 0, kids), sent);
}

static int serial_cmp(const void *x, const void *y)
{
	const struct qnode *a = x, *b = y;
	return dlock_zk_seq_before(a->seq, b->seq) ? -1 : dlock_zk_seq_before(b->seq, a->seq) ? 1 : 0;
}

/* The children of `kids` that are nodes of the kinds in `lease` (1: leases, 0: lock nodes), in order. */
static struct qnode *queue_of(const struct String_vector *kids, int lease, int32_t *n)
{
	struct qnode *q = malloc(((size_t)kids->count + 1) * sizeof *q);
	*n = 0;
	for (int32_t i = 0; q && i < kids->count; i++) {
		int32_t seq;
		enum zk_node_kind k = dlock_zk_child_kind(kids->data[i], &seq);
		if (k != ZK_NODE_NONE && (k == ZK_NODE_LEASE) == lease)
			q[(*n)++] = (struct qnode){ kids->data[i], seq, k };
	}
	if (q && *n > 1)
		qsort(q, (size_t)*n, sizeof *q, serial_cmp);
	return q;
}

/* 1 if `child` is among `kids`. */
static int has_child(const struct String_vector *kids, const char *child)
{
	for (int32_t i = 0; i < kids->count; i++)
		if (strcmp(kids->data[i], child) == 0)
			return 1;
	return 0;
}

/* Read holder `dir/child` into v; ZOK, ZNONODE (gone meanwhile) or a code. */
static int read_holder(struct zk_session *s, struct view *v, const char *dir, const struct qnode *q)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 4;
		struct holder_node *h = realloc(v->holders, cap * sizeof *h);
		if (!h)
			return ZSYSTEMERROR;
		v->holders = h;
		v->cap = cap;
	}
	struct holder_node *h = &v->holders[v->n];
	int n = snprintf(h->path, sizeof h->path, "%s/%s", dir, q->child);
	if (n < 0 || (size_t)n >= sizeof h->path)
		return ZBADARGUMENTS;
	h->kind = q->kind;
	h->len = (int)sizeof h->data;
	int64_t sent = dlock_monotonic_ns();
	int rc = answered(s, zoo_get(s->zh, h->path, 0, h->data, &h->len, &h->st), sent);
	if (rc == ZOK) {
		if (h->len < 0)
			h->len = 0; /* a node without data */
		v->n++;
	}
	return rc;
}

/* The queue of mutex, reader and writer nodes: its holders (read) and waiters. */
static int look_queue(struct zk_session *s, struct view *v, const char *dir, const struct qnode *q, int32_t n)
{
	v->kind = q[0].kind == ZK_NODE_MUTEX ? DLOCK_KIND_MUTEX : DLOCK_KIND_RWLOCK;
	v->permits = 1;
	int32_t i = 0;
	if (q[0].kind == ZK_NODE_READ)
		while (i < n && q[i].kind == ZK_NODE_READ)
			i++;
	else
		i = 1;
	v->waiters = n - i;
	for (int32_t k = 0; k < i; k++) {
		int rc = read_holder(s, v, dir, &q[k]);
		if (rc != ZOK)
			return rc;
	}
	return ZOK;
}

/* A semaphore: the first N leases hold; N from their data (0 while unknown: then every lease holds). */
static int look_leases(struct zk_session *s, struct view *v, const char *parent)
{
	char leases[ZK_PATH_MAX], locks[ZK_PATH_MAX];
	snprintf(leases, sizeof leases, "%s/" ZK_SEM_LEASES, parent);
	snprintf(locks, sizeof locks, "%s/" ZK_SEM_LOCKS, parent);
	struct String_vector kids = { 0, NULL };
	int rc = children(s, leases, &kids);
	if (rc == ZNONODE)
		return ZOK;
	if (rc != ZOK)
		return rc;
	int32_t n = 0;
	struct qnode *q = queue_of(&kids, 1, &n);
	v->kind = DLOCK_KIND_SEMAPHORE;
	for (int32_t i = 0; q && rc == ZOK && i < n && (v->permits == 0 || v->n < v->permits); i++) {
		rc = read_holder(s, v, leases, &q[i]);
		uint32_t permits;
		if (rc == ZOK && !v->permits &&
		    dlock_zk_permits_parse(v->holders[v->n - 1].data, v->holders[v->n - 1].len, &permits))
			v->permits = permits;
	}
	int64_t extra = n - (int64_t)v->n;
	free(q);
	deallocate_String_vector(&kids);
	if (!q)
		return ZSYSTEMERROR;
	if (rc != ZOK)
		return rc;
	/* Waiters: the leases past N, and the internal queue (whose head, once it has a lease, is one of those). */
	kids = (struct String_vector){ 0, NULL };
	rc = children(s, locks, &kids);
	int64_t queued = 0;
	if (rc == ZOK) {
		int32_t m = 0;
		struct qnode *lq = queue_of(&kids, 0, &m);
		queued = m;
		free(lq);
		deallocate_String_vector(&kids);
	}
	v->waiters = extra + queued - (extra > 0 && queued > 0);
	return rc == ZNONODE ? ZOK : rc;
}

/* Look at the name's node `parent` once: ZOK with v filled (no holder: free), ZNONODE when a holder went. */
static int look_once(struct zk_session *s, struct view *v, const char *parent)
{
	struct String_vector kids = { 0, NULL };
	v->n = 0;
	v->kind = DLOCK_KIND_MUTEX;
	v->permits = 1;
	v->waiters = 0;
	int rc = children(s, parent, &kids);
	if (rc == ZNONODE)
		return ZOK; /* never used, or reaped: free */
	if (rc != ZOK)
		return rc;
	int32_t n = 0;
	struct qnode *q = queue_of(&kids, 0, &n);
	if (!q)
		rc = ZSYSTEMERROR;
	else if (n > 0)
		rc = look_queue(s, v, parent, q, n);
	else if (has_child(&kids, ZK_SEM_LEASES)) {
		v->permits = 0;
		rc = look_leases(s, v, parent);
		if (rc == ZOK && v->n == 0) { /* no lease: a free semaphore's empty nodes */
			v->kind = DLOCK_KIND_MUTEX;
			v->permits = 1;
		}
	}
	free(q);
	deallocate_String_vector(&kids);
	return rc;
}

/* Look until a consistent snapshot (no holder gone between the listing and its read). */
static dlock_status look(struct zk_session *s, struct view *v, const char *parent, dlock_error *err)
{
	int rc = ZOK;
	for (int tries = 0; tries < 3 * LOOKS_MAX; tries++) {
		rc = look_once(s, v, parent);
		if (rc == ZOK)
			return DLOCK_OK;
		if (rc == ZNONODE && tries < LOOKS_MAX)
			continue; /* a holder went meanwhile */
		if (dlock_zk_rc_connection(rc) && dlock_zk_session_await(s, 1))
			continue;
		break;
	}
	if (rc == ZNONODE)
		return dlock_error_set(err, DLOCK_EBUSY, "zk://: the holders kept changing while they were read");
	if (rc == ZSYSTEMERROR)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory reading the lock's nodes");
	if (rc == ZNOAUTH)
		return dlock_error_set(err, DLOCK_EPERM, "zk://: ZooKeeper refused to show the lock's nodes: " ACL_NOTE);
	return dlock_zk_fail(err, rc, "reading the lock's nodes");
}

/* Describe v as lock `name` (NULL: unknown) in info. */
static dlock_status describe(const struct view *v, const char *name, size_t len, const char *parent,
                             dlock_info *info)
{
	dlock_status st = dlock_info_lock(info, name, len, parent, v->kind, v->permits, v->waiters);
	for (size_t i = 0; st == DLOCK_OK && i < v->n; i++) {
		const struct holder_node *h = &v->holders[i];
		char session[SESSION_HEX];
		snprintf(session, sizeof session, "0x%llx", (unsigned long long)h->st.ephemeralOwner);
		dlock_holder d = DLOCK_HOLDER_INIT;
		d.acquired_ms = h->st.ctime;
		d.token = h->kind == ZK_NODE_MUTEX || h->kind == ZK_NODE_WRITE ? (uint64_t)h->st.czxid : 0;
		d.mode = h->kind == ZK_NODE_READ ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
		d.session = session;
		char value[DLOCK_VALUE_MAX + 1] = "";
		size_t olen, vlen;
		const char *v = d.token ? dlock_zk_data_value(h->data, h->len, &vlen) : NULL;
		if (v) { /* a leader's value: bytes without NUL as proclaim() wrote them, cut at the longest */
			vlen = vlen > DLOCK_VALUE_MAX ? DLOCK_VALUE_MAX : vlen;
			memcpy(value, v, vlen);
			value[vlen] = '\0';
		}
		d.value = value;
		const char *owner = dlock_zk_data_owner(h->data, h->len, &olen);
		st = dlock_info_holder(info, &d, owner, olen);
	}
	return st;
}

dlock_status dlock_zk_inspect(struct zk_client *c, const char *name, size_t len, dlock_info *info,
                              dlock_error *err)
{
	char parent[ZK_PATH_MAX];
	struct view v = { 0 };
	struct zk_session *s;
	dlock_status st = dlock_zk_name_parent(c, name, len, parent, err);
	if (st != DLOCK_OK)
		return st;
	st = session_get(c, &s, err);
	if (st != DLOCK_OK)
		return st;
	st = look(s, &v, parent, err);
	dlock_zk_session_put(s);
	if (st == DLOCK_OK)
		st = describe(&v, name, len, parent, info);
	free(v.holders);
	return st;
}

/* ------------------------------------------------------------ listing */

/*
 * The name a component stands for, into out (DLOCK_NAME_MAX bytes): its
 * length, 0 for a hashed component (the name is in the node's data), -1 for
 * a child that is no component of ours.  Checked by encoding it again.
 */
static int component_name(const char *comp, char *out)
{
	return dlock_name_component_decode(comp, strlen(comp), out);
}

/* A hashed component's name from the data of its node (bytes, checked); its length, 0 unknown. */
static int kept_name(struct zk_session *s, const char *parent, const char *comp, char *out)
{
	int len = DLOCK_NAME_MAX;
	struct Stat st;
	int64_t sent = dlock_monotonic_ns();
	int rc = answered(s, zoo_get(s->zh, parent, 0, out, &len, &st), sent);
	if (rc != ZOK || len <= 0 || len > DLOCK_NAME_MAX || st.dataLength != len || memchr(out, '\0', (size_t)len))
		return 0;
	char again[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(out, (size_t)len, again);
	return strcmp(again, comp) == 0 ? len : 0;
}

dlock_status dlock_zk_list(struct zk_client *c, dlock_info *info, dlock_error *err)
{
	struct String_vector kids = { 0, NULL };
	struct view v = { 0 };
	struct zk_session *s;
	char *name = malloc(DLOCK_NAME_MAX);
	if (!name)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	dlock_status st = session_get(c, &s, err);
	if (st != DLOCK_OK) {
		free(name);
		return st;
	}
	int rc;
	while ((rc = children(s, c->cfg.base, &kids)) != ZOK && dlock_zk_rc_connection(rc) &&
	       dlock_zk_session_await(s, 1))
		;
	if (rc == ZNONODE)
		rc = ZOK; /* no base: nothing held */
	else if (rc == ZNOAUTH)
		st = dlock_error_set(err, DLOCK_EPERM, "zk://: ZooKeeper refused to list the base path: " ACL_NOTE);
	else if (rc != ZOK)
		st = dlock_zk_fail(err, rc, "listing the base path");
	for (int32_t i = 0; rc == ZOK && st == DLOCK_OK && i < kids.count; i++) {
		char parent[ZK_PATH_MAX];
		int len = component_name(kids.data[i], name);
		int n = snprintf(parent, sizeof parent, "%s/%s", c->cfg.base, kids.data[i]);
		if (len < 0 || n < 0 || (size_t)n >= sizeof parent)
			continue; /* not one of our names */
		st = look(s, &v, parent, err);
		if (st == DLOCK_EPERM) { /* another identity's name (credentials): not ours to see */
			err->msg[0] = '\0';
			st = DLOCK_OK;
			continue;
		}
		if (st == DLOCK_OK && v.n > 0) {
			if (len == 0)
				len = kept_name(s, parent, kids.data[i], name);
			st = describe(&v, len ? name : NULL, (size_t)len, parent, info);
		}
	}
	dlock_zk_session_put(s);
	deallocate_String_vector(&kids);
	free(v.holders);
	free(name);
	return st;
}

/* ------------------------------------------------------------ breaking */

/* Delete a holder's node, across a lost connection; a ZooKeeper code (ZNONODE: it went by itself). */
static int delete_holder(struct zk_session *s, const char *path)
{
	for (int retried = 0;; retried = 1) {
		int64_t sent = dlock_monotonic_ns();
		int rc = answered(s, zoo_delete(s->zh, path, -1), sent);
		if (rc == ZNONODE && retried)
			return ZOK; /* the attempt whose answer was lost went through */
		if (!dlock_zk_rc_connection(rc) || !dlock_zk_session_await(s, 1))
			return rc;
	}
}

dlock_status dlock_zk_break(struct zk_client *c, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	char parent[ZK_PATH_MAX];
	struct view v = { 0 };
	struct zk_session *s;
	*broken = 0;
	dlock_status st = dlock_zk_name_parent(c, name, len, parent, err);
	if (st != DLOCK_OK)
		return st;
	st = session_get(c, &s, err);
	if (st != DLOCK_OK)
		return st;
	st = look(s, &v, parent, err);
	for (size_t i = 0; st == DLOCK_OK && i < v.n; i++) {
		int rc = delete_holder(s, v.holders[i].path);
		if (rc == ZOK)
			++*broken;
		else if (rc == ZNOAUTH)
			st = dlock_error_set(err, DLOCK_EPERM, "zk://: ZooKeeper refused to delete the holder's node: " ACL_NOTE);
		else if (rc != ZNONODE)
			st = dlock_zk_fail(err, rc, "deleting the holder's node");
	}
	dlock_zk_session_put(s);
	free(v.holders);
	return st;
}
