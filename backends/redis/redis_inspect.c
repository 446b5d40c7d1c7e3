/*
 * Redis backend: who holds a lock (inspect), the held names of the
 * client's prefix (list) and taking a lock from its holders (break); what
 * they can do is stated with the backend's other facts (redis.c,
 * DLOCK_FEATURE_INSPECT, DLOCK_FEATURE_BREAK).
 *
 * What the server keeps (redis_scripts.c): a mutex's or a writer's lock
 * key holds "OWNER TOKEN ACQUIRED_MS RECORD" (RECORD: the holder client's
 * dlock_host_owner(), a writer's ending in "&kind=rwlock": the key alone
 * cannot tell a writer from a mutex, and the name is in use as the kind of
 * its holder; TOKEN 0 and ACQUIRED_MS -1 after a plain SET NX, that is
 * without a token, and on RedLock), or only "OWNER" when an older release
 * wrote it (a writer of an older release shows as a mutex); readers and
 * permits have their records in
 * PREFIX:{D}:holders.  Inspecting a name is one read-only script on the
 * server of the name's slot (KEYS: every key of the name, which share one
 * hash slot); on RedLock, the same script on every instance, the holder
 * being the owner a majority shows.  Names are hashed into keys and are
 * not kept on the server: a listing (SCAN with MATCH on the prefix, COUNT
 * bounded, on every master of a cluster, then one inspection per key)
 * gives each lock's key but not its name.  Breaking is one script that
 * deletes the lock key, the readers or permits and their records, never
 * the fencing counter, and wakes the waiters as a release does.
 *
 * Threads: any; each call takes pooled connections as a lock's commands
 * do.  Errors: statuses and messages of redis_conn.c; names are hashed
 * before they reach a key, and bytes read back are only copied.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_cluster.h"
#include "redis_elect.h"
#include "redis_inspect.h"
#include "redis_key.h"
#include "redis_route.h"

#define INSPECT_NKEYS 10
#define SCAN_COUNT "200"       /* keys a SCAN step looks at */
#define LIST_MASTERS_MAX 256   /* a cluster's masters a listing visits */
#define SHARED_MARK "shared"   /* the lock key while readers hold it */
#define SEMAPHORE_MARK "semaphore"

/* ------------------------------------------------------------ the keys of a name */

/* Every key of one name (the scripts' KEYS order), its channel, and a lock handle that routes them. */
struct name_keys {
	char *block;          /* the names, NUL-terminated, PREFIX:{D}:lock first */
	struct redis_lock lk; /* digest and slot only: what dlock_redis_call() routes by */
	const char *chan;     /* the channel, in `block` */
	size_t chanlen;
	struct redis_args a;
};

static const char *const key_suffix[INSPECT_NKEYS] = {
	"lock", "queue", "waiters", "fence", "readers", "permits", "slots", "holders", "pwaiters", "npermits",
};

/* The names of the keys whose digest is `digest` (redis_key.c), and the handle that routes them. */
static dlock_status name_keys_init(const struct redis_client *c, const char digest[REDIS_DIGEST_HEX],
                                   struct name_keys *nk, dlock_error *err)
{
	size_t one = c->prefixlen + REDIS_DIGEST_HEX + 16; /* ":{" "}:" the longest suffix, NUL */
	*nk = (struct name_keys){ .block = malloc(one * (INSPECT_NKEYS + 1)) };
	if (!nk->block)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	memcpy(nk->lk.digest, digest, REDIS_DIGEST_HEX);
	char *p = nk->block;
	for (int i = 0; i <= INSPECT_NKEYS; i++, p += one) {
		size_t len = dlock_redis_key(c, &nk->lk, i < INSPECT_NKEYS ? key_suffix[i] : "released", NULL, p);
		if (i < INSPECT_NKEYS)
			dlock_redis_argn(&nk->a, p, len);
		if (i == INSPECT_NKEYS) {
			nk->chan = p;
			nk->chanlen = len;
		}
	}
	nk->lk.slot = dlock_redis_key_slot(nk->a.argv[0], nk->a.len[0]); /* PREFIX:{D}:lock */
	return DLOCK_OK;
}

static dlock_status name_keys_of(const struct redis_client *c, const char *name, size_t len, struct name_keys *nk,
                                 dlock_error *err)
{
	struct redis_lock lk;
	dlock_redis_lock_name(&lk, name, len);
	return name_keys_init(c, lk.digest, nk, err);
}

/* ------------------------------------------------------------ running the scripts */

/* One script for the name on its server (the one instance, or its slot's master). */
static dlock_status run_routed(struct redis_client *c, struct name_keys *nk, enum redis_script_id id,
                               const char *what, redisReply **out, dlock_error *err)
{
	struct redis_call call = { .id = id, .nkeys = INSPECT_NKEYS, .a = &nk->a, .what = what };
	long long acked = -1;
	int maybe_ran = 0;
	return dlock_redis_call(c, &nk->lk, &call, &acked, out, &maybe_ran, err);
}

/* One script on RedLock instance i: its reply, or NULL with the failure in *err. */
static redisReply *run_on(struct redis_client *c, size_t i, struct name_keys *nk, enum redis_script_id id,
                          const char *what, dlock_error *err)
{
	struct redis_conn *ctx = NULL;
	if (dlock_redis_pool_get(&c->pools[i], &ctx, err) != DLOCK_OK)
		return NULL;
	redisReply *r = dlock_redis_script_run(ctx, &c->scripts, id, INSPECT_NKEYS, &nk->a);
	if (!r)
		dlock_redis_io_error(ctx, &c->pools[i].ep, err);
	else if (r->type == REDIS_REPLY_ERROR) {
		dlock_redis_reply_error(r, &c->pools[i].ep, what, err);
		freeReplyObject(r);
		r = NULL;
	}
	dlock_redis_pool_put(&c->pools[i], ctx);
	return r;
}

static int is_redlock(const struct redis_client *c)
{
	return !c->cluster && c->npools > 1;
}

/* ------------------------------------------------------------ what the inspect script answers */

static int64_t int_at(const redisReply *r, size_t i)
{
	return i < r->elements && r->element[i]->type == REDIS_REPLY_INTEGER ? (int64_t)r->element[i]->integer : -1;
}

static const redisReply *str_at(const redisReply *r, size_t i)
{
	return i < r->elements && r->element[i]->type == REDIS_REPLY_STRING ? r->element[i] : NULL;
}

static int well_formed(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ARRAY && r->elements >= 6 && (r->elements - 6) % 4 == 0 && str_at(r, 0);
}

/* The length of the first word of `s` (`len` bytes): an owner value. */
static size_t first_word(const char *s, size_t len)
{
	const char *sp = memchr(s, ' ', len);
	return sp ? (size_t)(sp - s) : len;
}

/* Parse "TOKEN ACQUIRED_MS RECORD" (`s`, `len` bytes) into h and the record; 0 when it does not parse. */
static int parse_entry(const char *s, size_t len, dlock_holder *h, const char **rec, size_t *reclen)
{
	char num[2][24];
	size_t at = 0;
	for (int i = 0; i < 2; i++) {
		size_t n = 0;
		while (at < len && s[at] != ' ' && n < sizeof num[i] - 1)
			num[i][n++] = s[at++];
		num[i][n] = '\0';
		if (n == 0 || at >= len || s[at] != ' ')
			return 0;
		at++;
	}
	char *end = NULL;
	unsigned long long token = strtoull(num[0], &end, 10);
	if (*end)
		return 0;
	long long acquired = strtoll(num[1], &end, 10);
	if (*end)
		return 0;
	h->token = token;
	h->acquired_ms = acquired >= 0 ? acquired : -1;
	*rec = s + at;
	*reclen = len - at;
	return 1;
}

/* A mutex's (or writer's) lock key value `v` as its holder: "OWNER ENTRY" or an older release's "OWNER"; a
 * leader's value is the record's `value` field (redis_elect.c). */
static dlock_status add_key_holder(dlock_info *info, const redisReply *v, int64_t pttl)
{
	dlock_holder h = DLOCK_HOLDER_INIT;
	const char *rec = NULL;
	char value[DLOCK_VALUE_MAX + 1];
	size_t reclen = 0, ow = first_word(v->str, v->len);
	h.lease_left_ms = pttl >= 0 ? pttl : -1;
	if (ow < v->len && !parse_entry(v->str + ow + 1, v->len - ow - 1, &h, &rec, &reclen))
		rec = NULL;
	if (rec && dlock_redis_record_value(rec, reclen, value))
		h.value = value;
	return dlock_info_holder(info, &h, rec, reclen);
}

/* 1 when the lock key's value `v` is a read-write lock's writer's: its record has REDIS_RWLOCK_FIELD (the
 * record's fields are percent-encoded, so no other bytes of it can read so). */
static int writer_of_rwlock(const redisReply *v)
{
	size_t n = strlen(REDIS_RWLOCK_FIELD);
	for (size_t i = 0; i + n <= v->len; i++)
		if (memcmp(v->str + i, REDIS_RWLOCK_FIELD, n) == 0 && (i + n == v->len || v->str[i + n] == '&'))
			return 1;
	return 0;
}

/* Describe the name from one inspect reply.  `name` NULL: a listing that does not know it. */
static dlock_status describe(const struct redis_client *c, dlock_info *info, const char *name, size_t len,
                             const struct name_keys *nk, const redisReply *r)
{
	const redisReply *v = str_at(r, 0);
	int64_t pttl = int_at(r, 1), queued = int_at(r, 3), pw = int_at(r, 4), n = int_at(r, 5);
	int shared = v->len == strlen(SHARED_MARK) && memcmp(v->str, SHARED_MARK, v->len) == 0;
	int sem = v->len == strlen(SEMAPHORE_MARK) && memcmp(v->str, SEMAPHORE_MARK, v->len) == 0;
	dlock_lock_kind kind = shared || writer_of_rwlock(v) ? DLOCK_KIND_RWLOCK
	                       : sem                          ? DLOCK_KIND_SEMAPHORE
	                                                      : DLOCK_KIND_MUTEX;
	/* Waiters the server sees: a semaphore's (any mode), the queue's (fair=1, a mutex's); readers' and
	 * writers' wait in their clients, and fair=0's too. */
	int64_t waiters = sem || (v->len == 0 && pw > 0) ? pw : c->fair && kind == DLOCK_KIND_MUTEX ? queued : -1;
	uint32_t permits = sem ? (n > 0 && n <= UINT32_MAX ? (uint32_t)n : 0) : 1;
	dlock_status st = dlock_info_lock(info, name, len, nk->block /* its first name: PREFIX:{D}:lock */, kind, permits, waiters);
	if (st != DLOCK_OK || v->len == 0)
		return st;
	if (!shared && !sem)
		return add_key_holder(info, v, pttl);
	for (size_t i = 6; i + 3 < r->elements && st == DLOCK_OK; i += 4) {
		const redisReply *entry = str_at(r, i + 3);
		dlock_holder h = DLOCK_HOLDER_INIT;
		const char *rec = NULL;
		size_t reclen = 0;
		h.lease_left_ms = int_at(r, i + 1) >= 0 ? int_at(r, i + 1) : 0;
		h.mode = shared ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
		h.slot = sem ? int_at(r, i + 2) : -1;
		if (!entry || !parse_entry(entry->str, entry->len, &h, &rec, &reclen))
			rec = NULL;
		st = dlock_info_holder(info, &h, rec, reclen);
	}
	return st;
}

/*
 * RedLock: the holder is the owner whose value a majority of instances
 * hold (its shortest TTL among them); no majority, nobody.  Fewer than a
 * majority answering is DLOCK_ECONNECT: the answer could be either.
 */
static dlock_status inspect_redlock(struct redis_client *c, dlock_info *info, const char *name, size_t len,
                                    struct name_keys *nk, dlock_error *err)
{
	redisReply *r[REDIS_REDLOCK_MAX] = { NULL };
	dlock_error one = { "" };
	size_t answered = 0;
	for (size_t i = 0; i < c->npools; i++) {
		r[i] = run_on(c, i, nk, REDIS_SCRIPT_INSPECT, "inspect", &one);
		if (r[i] && !well_formed(r[i])) {
			freeReplyObject(r[i]);
			r[i] = NULL;
		}
		answered += r[i] != NULL;
	}
	dlock_status st = DLOCK_OK;
	size_t best = c->npools;
	int64_t pttl = -1;
	for (size_t i = 0; i < c->npools && best == c->npools; i++) {
		const redisReply *v = r[i] ? str_at(r[i], 0) : NULL;
		if (!v || v->len == 0)
			continue;
		size_t ow = first_word(v->str, v->len), votes = 0;
		pttl = int_at(r[i], 1);
		for (size_t j = 0; j < c->npools; j++) {
			const redisReply *w = r[j] ? str_at(r[j], 0) : NULL;
			if (w && first_word(w->str, w->len) == ow && memcmp(w->str, v->str, ow) == 0) {
				votes++;
				if (int_at(r[j], 1) >= 0 && (pttl < 0 || int_at(r[j], 1) < pttl))
					pttl = int_at(r[j], 1);
			}
		}
		if (votes >= c->quorum)
			best = i;
	}
	if (answered < c->quorum)
		st = dlock_error_set(err, DLOCK_ECONNECT, "RedLock: %zu of %zu instances answered, %zu needed (%s)",
		                     answered, c->npools, c->quorum, one.msg);
	else
		st = dlock_info_lock(info, name, len, nk->block /* its first name: PREFIX:{D}:lock */, DLOCK_KIND_MUTEX, 1, -1);
	if (st == DLOCK_OK && best < c->npools)
		st = add_key_holder(info, str_at(r[best], 0), pttl);
	for (size_t i = 0; i < c->npools; i++)
		freeReplyObject(r[i]);
	return st;
}

static dlock_status bad_reply(const struct redis_client *c, dlock_error *err)
{
	return dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to the inspect script", c->label);
}

static dlock_status inspect_keys(struct redis_client *c, dlock_info *info, const char *name, size_t len,
                                 struct name_keys *nk, dlock_error *err)
{
	if (is_redlock(c))
		return inspect_redlock(c, info, name, len, nk, err);
	redisReply *r = NULL;
	dlock_status st = run_routed(c, nk, REDIS_SCRIPT_INSPECT, "inspect", &r, err);
	if (st == DLOCK_OK)
		st = well_formed(r) ? describe(c, info, name, len, nk, r) : bad_reply(c, err);
	freeReplyObject(r);
	if (st == DLOCK_ENOMEM)
		dlock_error_set(err, st, "redis: out of memory");
	return st;
}

dlock_status dlock_redis_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err)
{
	struct redis_client *c = backend;
	struct name_keys nk;
	dlock_status st = name_keys_of(c, name, len, &nk, err);
	if (st == DLOCK_OK && !is_redlock(c))
		dlock_redis_elect_rearm(c, nk.chan, nk.chanlen); /* an observer's read: its watch where it belongs */
	if (st == DLOCK_OK)
		st = inspect_keys(c, info, name, len, &nk, err);
	free(nk.block);
	return st;
}

/* ------------------------------------------------------------ list */

/* `s` with the glob characters of SCAN's MATCH escaped, into out (room for 2 * len + 1). */
static size_t glob_escape(const char *s, size_t len, char *out)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (strchr("*?[]\\", s[i]))
			out[n++] = '\\';
		out[n++] = s[i];
	}
	return n;
}

/* The digest of `key` when it is exactly PREFIX:{32 hex}:lock. */
static int digest_of(const struct redis_client *c, const char *key, size_t len, char digest[REDIS_DIGEST_HEX + 1])
{
	size_t p = c->prefixlen;
	if (len != p + 2 + REDIS_DIGEST_HEX + 6 || memcmp(key, c->prefix, p) != 0 || memcmp(key + p, ":{", 2) != 0 ||
	    memcmp(key + p + 2 + REDIS_DIGEST_HEX, "}:lock", 6) != 0)
		return 0;
	for (size_t i = 0; i < REDIS_DIGEST_HEX; i++) {
		char ch = key[p + 2 + i];
		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
			return 0;
		digest[i] = ch;
	}
	digest[REDIS_DIGEST_HEX] = '\0';
	return 1;
}

/* One key a SCAN found: inspected (it may have gone meanwhile: then nothing is listed). */
static dlock_status list_key(struct redis_client *c, dlock_info *info, const char *key, size_t len, dlock_error *err)
{
	char digest[REDIS_DIGEST_HEX + 1];
	if (!digest_of(c, key, len, digest))
		return DLOCK_OK;
	struct name_keys nk;
	dlock_status st = name_keys_init(c, digest, &nk, err);
	redisReply *r = NULL;
	if (st == DLOCK_OK)
		st = run_routed(c, &nk, REDIS_SCRIPT_INSPECT, "list", &r, err);
	if (st == DLOCK_OK && !well_formed(r))
		st = bad_reply(c, err);
	else if (st == DLOCK_OK && r->element[0]->len > 0)
		st = describe(c, info, NULL, 0, &nk, r);
	if (st == DLOCK_ENOMEM)
		dlock_error_set(err, st, "redis: out of memory");
	freeReplyObject(r);
	free(nk.block);
	return st;
}

/* SCAN one server's keys with MATCH `pattern`, COUNT bounded, and list each lock key. */
static dlock_status scan_pool(struct redis_client *c, struct redis_pool *pool, const char *pattern, size_t plen,
                              dlock_info *info, dlock_error *err)
{
	char cursor[32] = "0";
	dlock_status st = DLOCK_OK;
	do {
		struct redis_args a = { 0 };
		dlock_redis_arg(&a, "SCAN");
		dlock_redis_arg(&a, cursor);
		dlock_redis_arg(&a, "MATCH");
		dlock_redis_argn(&a, pattern, plen);
		dlock_redis_arg(&a, "COUNT");
		dlock_redis_arg(&a, SCAN_COUNT);
		struct redis_conn *ctx = NULL;
		if ((st = dlock_redis_pool_get(pool, &ctx, err)) != DLOCK_OK)
			return st;
		redisReply *r = dlock_redis_command(ctx, &a);
		if (!r)
			st = dlock_redis_io_error(ctx, &pool->ep, err);
		else if (r->type == REDIS_REPLY_ERROR)
			st = dlock_redis_reply_error(r, &pool->ep, "SCAN", err);
		dlock_redis_pool_put(pool, ctx);
		if (st == DLOCK_OK && (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !str_at(r, 0) ||
		                       r->element[1]->type != REDIS_REPLY_ARRAY || r->element[0]->len >= sizeof cursor))
			st = dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to SCAN", pool->ep.label);
		if (st == DLOCK_OK) {
			memcpy(cursor, r->element[0]->str, r->element[0]->len);
			cursor[r->element[0]->len] = '\0';
			const redisReply *keys = r->element[1];
			for (size_t i = 0; i < keys->elements && st == DLOCK_OK; i++)
				if (keys->element[i]->type == REDIS_REPLY_STRING)
					st = list_key(c, info, keys->element[i]->str, keys->element[i]->len, err);
		}
		freeReplyObject(r);
	} while (st == DLOCK_OK && strcmp(cursor, "0") != 0);
	return st;
}

dlock_status dlock_redis_list(void *backend, dlock_info *info, dlock_error *err)
{
	struct redis_client *c = backend;
	if (is_redlock(c))
		return dlock_error_set(err, DLOCK_ENOTSUP,
		                       "RedLock: no listing (the instances are independent: a key on one says nothing of "
		                       "the lock); inspect a name instead");
	/* PREFIX:{32 times ?}:lock, the prefix's glob characters escaped */
	size_t room = 2 * c->prefixlen + REDIS_DIGEST_HEX + 16;
	char *pattern = malloc(room);
	if (!pattern)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	size_t n = glob_escape(c->prefix, c->prefixlen, pattern);
	int tail = snprintf(pattern + n, room - n, ":{%.*s}:lock", REDIS_DIGEST_HEX,
	                    "????????????????????????????????????????");
	n += tail > 0 ? (size_t)tail : 0;
	dlock_status st = DLOCK_OK;
	if (!c->cluster) {
		st = scan_pool(c, &c->pools[0], pattern, n, info, err);
	} else {
		struct redis_node *masters[LIST_MASTERS_MAX];
		size_t count = 0;
		st = dlock_redis_cluster_masters(c->cluster, masters, LIST_MASTERS_MAX, &count, err);
		for (size_t i = 0; i < count && st == DLOCK_OK; i++)
			st = scan_pool(c, &masters[i]->pool, pattern, n, info, err);
	}
	free(pattern);
	return st;
}

/* ------------------------------------------------------------ break */

static void add_break_args(const struct redis_client *c, struct name_keys *nk)
{
	dlock_redis_argn(&nk->a, nk->chan, nk->chanlen);
	dlock_redis_arg(&nk->a, c->publish);
}

/* RedLock: every instance that answers loses the key; fewer than a majority answering is an error. */
static dlock_status break_redlock(struct redis_client *c, struct name_keys *nk, size_t *broken, dlock_error *err)
{
	dlock_error one = { "" };
	size_t answered = 0;
	*broken = 0;
	for (size_t i = 0; i < c->npools; i++) {
		redisReply *r = run_on(c, i, nk, REDIS_SCRIPT_BREAK, "break", &one);
		answered += r != NULL;
		if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0)
			*broken = 1;
		freeReplyObject(r);
	}
	if (answered < c->quorum)
		return dlock_error_set(err, DLOCK_ECONNECT, "RedLock: broken on %zu of %zu instances, %zu needed (%s)",
		                       answered, c->npools, c->quorum, one.msg);
	return DLOCK_OK;
}

dlock_status dlock_redis_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	struct redis_client *c = backend;
	struct name_keys nk;
	size_t none = 0;
	broken = broken ? broken : &none;
	*broken = 0;
	dlock_status st = name_keys_of(c, name, len, &nk, err);
	if (st == DLOCK_OK)
		add_break_args(c, &nk);
	if (st == DLOCK_OK && is_redlock(c)) {
		st = break_redlock(c, &nk, broken, err);
	} else if (st == DLOCK_OK) {
		redisReply *r = NULL;
		st = run_routed(c, &nk, REDIS_SCRIPT_BREAK, "break", &r, err);
		if (st == DLOCK_OK && r->type != REDIS_REPLY_INTEGER)
			st = dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to the break script", c->label);
		else if (st == DLOCK_OK)
			*broken = r->integer > 0 ? (size_t)r->integer : 0;
		freeReplyObject(r);
	}
	free(nk.block);
	return st;
}

/* Collection: nothing to do here, every key of a name has a TTL.  A method only to say why. */
dlock_status dlock_redis_gc(void *backend, const char *prefix, size_t len, unsigned flags,
                            dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err)
{
	struct redis_client *c = backend;
	(void)prefix, (void)len, (void)flags, (void)removed, (void)arg;
	*count = 0;
	if (is_redlock(c))
		return dlock_error_set(err, DLOCK_ENOTSUP,
		                       "redis %s collects nothing: RedLock writes only a name's lock key, which expires "
		                       "with the lease", c->label);
	return dlock_error_set(err, DLOCK_ENOTSUP,
	                       "redis %s collects nothing: every key of a name expires by itself, the fencing "
	                       "counter (:fence) last, 100 leases (at least 7 days) after the name's last "
	                       "acquisition, and until then it must stay so that tokens never go back",
	                       c->label);
}
