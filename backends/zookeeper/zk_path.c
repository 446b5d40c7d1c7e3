/*
 * Where locks live in the tree, and who may touch them.
 *
 *   BASE/NAME                 one container node per lock name: NAME is the
 *                             name escaped into one safe component by
 *                             dlock_name_component() (no '/', '.', '..',
 *                             control or non-ASCII bytes; long names hashed)
 *   BASE/NAME/_c_GUID-lock-N  one ephemeral sequential node per contender;
 *                             GUID is per acquisition, N the server's sequence
 *   BASE/NAME/_c_GUID-__READ__N, _c_GUID-__WRIT__N
 *                             the same for a reader and a writer of a
 *                             read-write lock, in the same queue
 *   BASE/NAME/locks/_c_GUID-lock-N
 *                             a semaphore's internal mutex (zk_sem.c)
 *   BASE/NAME/leases/_c_GUID-lease-N
 *                             one per permit held or awaited; "locks" and
 *                             "leases" are containers, as Curator's
 *                             InterProcessSemaphoreV2 lays them out
 *
 * Data, all ASCII without NUL:
 *   - a mutex, reader or writer node: the client's owner record
 *     (dlock_host_owner(): "id=..&host=..&pid=.."), for inspection in any
 *     process (zk_inspect.c);
 *   - a semaphore's lock node (its internal mutex): "dlock:permits=N", the
 *     N its client uses, which the next acquirers compare with theirs;
 *   - a lease node: "dlock:permits=N", a newline, the owner record;
 *   - a leader's node (an election's mutex, zk_elect.c): the owner record,
 *     and once the leader proclaims a value, a newline and the value's
 *     bytes (any but NUL; the record itself never holds a newline).
 *   Each is written by the create that makes the node: no extra request.
 *   Readers are tolerant: N is read up to the newline or the end (a node
 *   of the previous release has no record; it still counts, its owner
 *   unknown), a record is taken only when it parses.  Curator writes the
 *   creator's address or the user's bytes there and never reads them back,
 *   so it is not disturbed; a node whose data is not in these forms
 *   (Curator's own) is neither compared nor named.  The previous release
 *   compares N only on data that is exactly "dlock:permits=N": it still
 *   does so on the lock nodes of the internal queue, not on the leases.
 *   - the lock's node BASE/NAME: nothing, unless the name was hashed into
 *     its component (too long): then the name's bytes, so that a listing
 *     can give it back (checked against the hash before it is believed).
 *
 * ACLs: ZooKeeper checks the permission to delete a node on its parent.
 * With credentials, the base path, every parent and every lock node are
 * created with ZOO_CREATOR_ALL_ACL, which after digest authentication
 * means "this user, and only this user, may do anything": another identity
 * can neither delete a holder's node nor the parent it sits in.  Without
 * credentials every node is created with ZOO_OPEN_ACL_UNSAFE: anyone who can
 * reach the server can delete any lock node, that is, break any lock.
 * Nodes that already exist keep the ACL they were created with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zookeeper_internal.h"

dlock_status dlock_zk_lock_paths(const struct zk_config *cfg, struct zk_lock *lk, const char *name,
                                 size_t len, dlock_error *err)
{
	char comp[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(name, len, comp);
	size_t n = strlen(cfg->base) + 1 + strlen(comp) + 1;
	lk->parent = malloc(n);
	if (!lk->parent)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	snprintf(lk->parent, n, "%s/%s", cfg->base, comp);
	if (strchr(comp, '~')) { /* hashed: keep the name on the server, for listings */
		lk->kept = malloc(len);
		if (!lk->kept) {
			dlock_zk_lock_paths_free(lk);
			return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
		}
		memcpy(lk->kept, name, len);
		lk->kept_len = len;
	}
	return DLOCK_OK;
}

void dlock_zk_lock_paths_free(struct zk_lock *lk)
{
	free(lk->parent);
	free(lk->kept);
	lk->parent = lk->kept = NULL;
	lk->kept_len = 0;
}

dlock_status dlock_zk_name_parent(const struct zk_client *c, const char *name, size_t len, char *out,
                                  dlock_error *err)
{
	char comp[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(name, len, comp);
	int n = snprintf(out, ZK_PATH_MAX, "%s/%s", c->cfg.base, comp);
	if (n < 0 || n >= ZK_PATH_MAX)
		return dlock_error_set(err, DLOCK_EINVAL, "zk://: the base path is too long for this name");
	return DLOCK_OK;
}

struct ACL_vector *dlock_zk_acl(const struct zk_client *c)
{
	return c->cfg.auth ? &ZOO_CREATOR_ALL_ACL : &ZOO_OPEN_ACL_UNSAFE;
}

static int create_node(struct zk_session *s, const char *path, int mode, const char *data, size_t len)
{
	int64_t sent = dlock_monotonic_ns();
	int rc = zoo_create(s->zh, path, data, data ? (int)len : -1, dlock_zk_acl(s->c), mode, NULL, 0);
	if (dlock_zk_rc_answered(rc))
		dlock_zk_session_answered(s, sent);
	return rc == ZNODEEXISTS ? ZOK : rc;
}

/* Each component is looked up first: creating one that exists would need
 * the create permission on its parent, which another owner may not give. */
int dlock_zk_ensure_base(struct zk_session *s)
{
	const char *base = s->c->cfg.base;
	char path[ZK_PATH_MAX];
	for (size_t i = 1;; i++) {
		if (base[i] != '/' && base[i] != '\0')
			continue;
		memcpy(path, base, i);
		path[i] = '\0';
		struct Stat st;
		int64_t sent = dlock_monotonic_ns();
		int rc = zoo_exists(s->zh, path, 0, &st);
		if (dlock_zk_rc_answered(rc))
			dlock_zk_session_answered(s, sent);
		if (rc == ZNONODE)
			rc = create_node(s, path, ZOO_PERSISTENT, NULL, 0);
		if (rc != ZOK || base[i] == '\0')
			return rc;
	}
}

/* The parent is a container: the server removes it some time after its
 * last child is gone, so a later create may find it missing again.  A
 * semaphore's "locks" and "leases" sit one level deeper, under the lock's
 * node: what is above them is made first, from the base down. */
int dlock_zk_ensure_parent(struct zk_session *s, const char *parent, const struct zk_lock *lk)
{
	int top = strcmp(parent, lk->parent) == 0;
	int rc = create_node(s, parent, ZOO_CONTAINER, top ? lk->kept : NULL, lk->kept_len);
	if (rc != ZNONODE)
		return rc;
	rc = dlock_zk_ensure_base(s);
	const char *base = s->c->cfg.base;
	size_t blen = strlen(base), plen = strlen(parent);
	char path[ZK_PATH_MAX];
	if (plen >= sizeof path || plen <= blen || strncmp(parent, base, blen) != 0 || parent[blen] != '/')
		return rc == ZOK ? create_node(s, parent, ZOO_CONTAINER, NULL, 0) : rc;
	/* Each container from the base down to `parent`. */
	for (size_t i = blen + 1; rc == ZOK && i <= plen; i++) {
		if (parent[i] != '/' && parent[i] != '\0')
			continue;
		memcpy(path, parent, i);
		path[i] = '\0';
		top = strcmp(path, lk->parent) == 0;
		rc = create_node(s, path, ZOO_CONTAINER, top ? lk->kept : NULL, lk->kept_len);
	}
	return rc;
}

/*
 * The server names a sequential node PREFIX + String.format("%010d", n),
 * n the parent's 32-bit child version, which wraps from 2147483647 to
 * -2147483648 after 2^31 creates: "0000000042", "-000000002",
 * "-2147483648".  Exactly those forms are accepted (parsed, then written
 * again and compared), so no other spelling of a number is a lock node.
 * The number is at the end of the name: 1 and *seq if `text` is one.
 */
static int server_number(const char *text, int32_t *seq)
{
	const char *p = text;
	int neg = *p == '-';
	p += neg;
	if (*p == '\0' || strlen(p) > 10)
		return 0;
	long long v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		v = v * 10 + (*p - '0');
	}
	v = neg ? -v : v;
	if (v < INT32_MIN || v > INT32_MAX)
		return 0;
	char again[16];
	snprintf(again, sizeof again, "%010d", (int)v);
	if (strcmp(again, text) != 0)
		return 0;
	*seq = (int32_t)v;
	return 1;
}

const char *dlock_zk_node_mark(enum zk_node_kind kind)
{
	switch (kind) {
	case ZK_NODE_MUTEX: return ZK_NODE_MARK;
	case ZK_NODE_READ: return ZK_READ_MARK;
	case ZK_NODE_WRITE: return ZK_WRITE_MARK;
	case ZK_NODE_LEASE: return ZK_LEASE_MARK;
	case ZK_NODE_NONE: break;
	}
	return NULL;
}

/*
 * The number follows the last occurrence of its mark.  A name can end in a
 * mark and a number for one mark at most: a number has no letters, so the
 * last letter of the name would be the mark's last letter, 'k', 'D', 'T' or
 * 'e'.
 */
enum zk_node_kind dlock_zk_child_kind(const char *child, int32_t *seq)
{
	for (int k = ZK_NODE_MUTEX; k <= ZK_NODE_LEASE; k++) {
		const char *name = dlock_zk_node_mark((enum zk_node_kind)k), *mark = NULL;
		for (const char *p = strstr(child, name); p; p = strstr(p + 1, name))
			mark = p;
		if (mark && server_number(mark + strlen(name), seq))
			return (enum zk_node_kind)k;
	}
	return ZK_NODE_NONE;
}

int dlock_zk_child_seq(const char *child, int32_t *seq)
{
	return dlock_zk_child_kind(child, seq) != ZK_NODE_NONE;
}

/* Serial-number order (RFC 1982) on 32 bits: right across the wrap while
 * the live nodes of a parent span less than 2^31 creates, which they do. */
int dlock_zk_seq_before(int32_t a, int32_t b)
{
	uint32_t d = (uint32_t)b - (uint32_t)a;
	return d != 0 && d < UINT32_C(0x80000000);
}

/* 1 for the kinds that hold the lock alone. */
static int exclusive(enum zk_node_kind k)
{
	return k == ZK_NODE_MUTEX || k == ZK_NODE_WRITE;
}

int dlock_zk_queue_place(char *const *kids, int32_t n, const char *own, const char *guid, int32_t *pred)
{
	int32_t mine, best = 0;
	int found = 0;
	*pred = -1;
	enum zk_node_kind ours = dlock_zk_child_kind(own, &mine);
	if (ours == ZK_NODE_NONE || ours == ZK_NODE_LEASE)
		return 0;
	for (int32_t i = 0; i < n; i++) {
		int32_t seq;
		enum zk_node_kind k = dlock_zk_child_kind(kids[i], &seq);
		if (k == ZK_NODE_NONE || k == ZK_NODE_LEASE)
			continue; /* not a lock node: not in the queue */
		if (strcmp(kids[i], own) == 0)
			found = 1;
		else if (dlock_zk_child_has_guid(kids[i], guid))
			continue; /* a duplicate of ours: the recipe deletes it */
		else if ((exclusive(ours) || exclusive(k)) && dlock_zk_seq_before(seq, mine) &&
		         (*pred < 0 || dlock_zk_seq_before(best, seq))) {
			best = seq;
			*pred = i;
		}
	}
	return found;
}

int dlock_zk_child_has_guid(const char *child, const char *guid)
{
	size_t pre = strlen(ZK_NODE_PREFIX);
	return strncmp(child, ZK_NODE_PREFIX, pre) == 0 && strncmp(child + pre, guid, ZK_GUID_HEX) == 0 &&
	       child[pre + ZK_GUID_HEX] == '-';
}

int dlock_zk_permits_format(uint32_t permits, char *buf)
{
	return snprintf(buf, ZK_PERMITS_DATA_MAX, ZK_PERMITS_DATA "%lu", (unsigned long)permits);
}

/* N is read up to ZK_DATA_SEP or the end: a lease node carries the owner record after it. */
int dlock_zk_permits_parse(const char *data, int len, uint32_t *permits)
{
	size_t pre = strlen(ZK_PERMITS_DATA);
	if (data && len > (int)pre) {
		const char *sep = memchr(data + pre, ZK_DATA_SEP, (size_t)len - pre);
		if (sep)
			len = (int)(sep - data);
	}
	if (!data || len <= (int)pre || len > (int)pre + 4 || memcmp(data, ZK_PERMITS_DATA, pre) != 0 ||
	    data[pre] == '0')
		return 0;
	uint32_t v = 0;
	for (int i = (int)pre; i < len; i++) {
		if (data[i] < '0' || data[i] > '9')
			return 0;
		v = v * 10 + (uint32_t)(data[i] - '0');
	}
	if (v > DLOCK_PERMITS_MAX)
		return 0;
	*permits = v;
	return 1;
}

int dlock_zk_lease_data_format(uint32_t permits, const char *owner, size_t owner_len, char *buf)
{
	int n = dlock_zk_permits_format(permits, buf);
	if (owner_len > DLOCK_OWNER_MAX)
		owner_len = DLOCK_OWNER_MAX;
	buf[n++] = ZK_DATA_SEP;
	memcpy(buf + n, owner, owner_len);
	return n + (int)owner_len;
}

const char *dlock_zk_data_owner(const char *data, int len, size_t *olen)
{
	*olen = 0;
	if (!data || len <= 0)
		return NULL;
	size_t pre = strlen(ZK_PERMITS_DATA);
	if ((size_t)len > pre && memcmp(data, ZK_PERMITS_DATA, pre) == 0) {
		const char *sep = memchr(data, ZK_DATA_SEP, (size_t)len);
		if (!sep)
			return NULL;
		len -= (int)(sep + 1 - data);
		data = sep + 1;
	}
	if (len < 3 || memcmp(data, "id=", 3) != 0)
		return NULL;
	const char *sep = memchr(data, ZK_DATA_SEP, (size_t)len); /* a leader's value follows it */
	*olen = sep ? (size_t)(sep - data) : (size_t)len;
	return data;
}

const char *dlock_zk_data_value(const char *data, int len, size_t *vlen)
{
	*vlen = 0;
	if (!data || len < 3 || memcmp(data, "id=", 3) != 0)
		return NULL; /* a lease node starts with its permits; another's node is not ours to read */
	const char *sep = memchr(data, ZK_DATA_SEP, (size_t)len);
	if (!sep)
		return NULL;
	*vlen = (size_t)(len - (sep + 1 - data));
	return sep + 1;
}
