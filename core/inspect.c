/*
 * Inspection, breaking and collecting: dlock_inspect(), dlock_list(),
 * dlock_break(), dlock_gc(), and the dlock_info builder through which a driver describes what the
 * server holds.  The core owns every byte it hands out here: a driver's
 * strings are copied as it adds them, so a driver frees nothing and an
 * application frees one object.
 *
 * Threads: any; a driver call here counts as a call in progress
 * (c->inflight), so that dlock_client_close() waits for it.  Errors: a
 * status, its text through dlock_client_errmsg().
 */
#include "internal.h"
#include "owner.h"
#include "registry.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest resource kept, in bytes. */
#define RESOURCE_MAX 512

/* A lock_info with the storage of its strings and holders. */
struct info_store {
	dlock_lock_info pub;
	dlock_holder **holders;
	size_t cap;
};

struct dlock_info {
	int single;               /* inspect(): one lock at most */
	unsigned abi;             /* the driver's ABI version: a dlock_holder of version 4 ends before `value` */
	struct info_store **v;    /* the locks described so far */
	size_t n, cap;
};

/* ----------------------------------------------------------- the builder */

static char *copy_bytes(const char *s, size_t len)
{
	char *out = malloc(len + 1);
	if (out) {
		if (len)
			memcpy(out, s, len);
		out[len] = '\0';
	}
	return out;
}

static void store_free(struct info_store *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->pub.nholders; i++)
		free(st->holders[i]);
	free(st->holders);
	free((char *)st->pub.name);
	free((char *)st->pub.resource);
	free(st);
}

dlock_status dlock_info_lock(dlock_info *info, const char *name, size_t len, const char *resource,
                             dlock_lock_kind kind, uint32_t permits, int64_t waiters)
{
	if (!info || (info->single && info->n > 0))
		return DLOCK_EINVAL;
	if (info->n == info->cap) {
		size_t cap = info->cap ? info->cap * 2 : 8;
		struct info_store **v = realloc(info->v, cap * sizeof *v);
		if (!v)
			return DLOCK_ENOMEM;
		info->v = v;
		info->cap = cap;
	}
	struct info_store *st = calloc(1, sizeof *st);
	if (!st)
		return DLOCK_ENOMEM;
	size_t rlen = resource ? strnlen(resource, RESOURCE_MAX) : 0;
	st->pub.name = name ? copy_bytes(name, strnlen(name, len)) : NULL;
	st->pub.resource = copy_bytes(resource ? resource : "", rlen);
	if ((name && !st->pub.name) || !st->pub.resource) {
		store_free(st);
		return DLOCK_ENOMEM;
	}
	st->pub.kind = kind;
	st->pub.permits = permits;
	st->pub.waiters = waiters < 0 ? -1 : waiters;
	info->v[info->n++] = st;
	return DLOCK_OK;
}

/* Append the NUL-terminated `s` at *at, return its copy. */
static const char *place(char **at, const char *s)
{
	size_t len = strlen(s) + 1;
	memcpy(*at, s, len);
	const char *out = *at;
	*at += len;
	return out;
}

dlock_status dlock_info_holder(dlock_info *info, const dlock_holder *h, const char *owner, size_t owner_len)
{
	if (!info || info->n == 0 || !h)
		return DLOCK_EINVAL;
	struct info_store *st = info->v[info->n - 1];
	char identity[DLOCK_IDENTITY_MAX + 1] = "", host[256] = "";
	int64_t pid = h->pid;
	snprintf(identity, sizeof identity, "%s", h->identity ? h->identity : "");
	snprintf(host, sizeof host, "%s", h->host ? h->host : "");
	if (owner) {
		char oid[DLOCK_IDENTITY_MAX + 1] = "", ohost[256] = "";
		int64_t opid = pid;
		if (dlock_owner_parse(owner, owner_len, oid, sizeof oid, ohost, sizeof ohost, &opid)) {
			memcpy(identity, oid, sizeof identity);
			memcpy(host, ohost, sizeof host);
			pid = opid;
		}
	}
	const char *session = h->session ? h->session : "";
	size_t ses_len = strnlen(session, 255);
	const char *value = info->abi >= 5 && h->value ? h->value : "";
	size_t value_len = strnlen(value, DLOCK_VALUE_MAX);
	if (st->pub.nholders == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 4;
		dlock_holder **v = realloc(st->holders, cap * sizeof *v);
		if (!v)
			return DLOCK_ENOMEM;
		st->holders = v;
		st->cap = cap;
		st->pub.holders = (const dlock_holder *const *)v;
	}
	dlock_holder *out = malloc(sizeof *out + strlen(identity) + strlen(host) + ses_len + value_len + 4);
	if (!out)
		return DLOCK_ENOMEM;
	if (info->abi >= 5) {
		*out = *h;
	} else { /* a version-4 holder ends before `value` */
		dlock_holder blank = DLOCK_HOLDER_INIT;
		*out = blank;
		memcpy(out, h, offsetof(dlock_holder, value));
	}
	char *at = (char *)(out + 1);
	char ses[256];
	memcpy(ses, session, ses_len);
	ses[ses_len] = '\0';
	out->identity = place(&at, identity);
	out->host = place(&at, host);
	out->session = place(&at, ses);
	memcpy(at, value, value_len);
	at[value_len] = '\0';
	out->value = at;
	out->pid = pid;
	if (out->acquired_ms < 0)
		out->acquired_ms = -1;
	if (out->lease_left_ms < 0)
		out->lease_left_ms = -1;
	if (out->slot < 0)
		out->slot = -1;
	st->holders[st->pub.nholders++] = out;
	return DLOCK_OK;
}

static void info_clear(struct dlock_info *info)
{
	for (size_t i = 0; i < info->n; i++)
		store_free(info->v[i]);
	free(info->v);
}

/* ------------------------------------------------------------- the calls */

/* DLOCK_OK for a name a lock may have, else DLOCK_EINVAL, recorded: bad input is refused first. */
static dlock_status check_name(struct dlock_client *c, const char *name)
{
	if (!name)
		return dlock_client_fail(c, DLOCK_EINVAL, "the name must not be NULL");
	size_t len = strnlen(name, DLOCK_NAME_MAX + 1);
	if (len == 0 || len > DLOCK_NAME_MAX) {
		char buf[96];
		snprintf(buf, sizeof buf, "a name is 1 to %d bytes, this one is %s", DLOCK_NAME_MAX,
		         len ? "longer" : "empty");
		return dlock_client_fail(c, DLOCK_EINVAL, buf);
	}
	return DLOCK_OK;
}

/* Check that the client is open; count a call in progress.  DLOCK_OK or the failure, recorded. */
static dlock_status begin(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		dlock_client_fail_locked(c, DLOCK_ECLOSED, "client is closed");
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ECLOSED;
	}
	c->inflight++;
	pthread_mutex_unlock(&c->mu);
	return DLOCK_OK;
}

static dlock_status end(struct dlock_client *c, dlock_status st, const dlock_error *err)
{
	pthread_mutex_lock(&c->mu);
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	if (st != DLOCK_OK)
		dlock_client_fail_locked(c, st, err->msg[0] ? err->msg : dlock_strerror(st));
	pthread_mutex_unlock(&c->mu);
	return st;
}

static dlock_status not_supported(struct dlock_client *c, const char *what)
{
	char buf[160];
	snprintf(buf, sizeof buf, "%s:// has no %s (see DLOCK_FEATURE_INSPECT and DLOCK_FEATURE_BREAK)",
	         c->driver->scheme, what);
	return dlock_client_fail(c, DLOCK_ENOTSUP, buf);
}

dlock_status dlock_inspect(dlock_client *c, const char *name, dlock_lock_info **out)
{
	if (out)
		*out = NULL;
	if (!c)
		return DLOCK_EINVAL;
	if (!out)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_inspect: out must not be NULL");
	if (dlock_seam_refuse_blocking(c, "dlock_inspect") != DLOCK_OK)
		return DLOCK_EDEADLK;
	dlock_status st = check_name(c, name);
	if (st != DLOCK_OK)
		return st;
	dlock_driver_inspect_fn *inspect = dlock_driver_inspect_of(c->driver);
	if (!inspect)
		return not_supported(c, "inspection");
	st = begin(c);
	if (st != DLOCK_OK)
		return st;
	struct dlock_info info = { .single = 1, .abi = c->driver->abi_version };
	dlock_error err = { "" };
	size_t len = strlen(name);
	st = inspect(c->backend, name, len, &info, &err);
	if (st == DLOCK_OK && info.n == 0)
		st = dlock_info_lock(&info, name, len, NULL, DLOCK_KIND_MUTEX, 0, -1);
	if (st == DLOCK_OK && (!info.v[0]->pub.name || strcmp(info.v[0]->pub.name, name) != 0)) {
		char *copy = copy_bytes(name, len);
		if (!copy) {
			st = DLOCK_ENOMEM;
		} else {
			free((char *)info.v[0]->pub.name);
			info.v[0]->pub.name = copy;
		}
	}
	if (st == DLOCK_ENOMEM && !err.msg[0])
		dlock_error_set(&err, st, "out of memory describing '%.64s'", name);
	if (st != DLOCK_OK) {
		info_clear(&info);
		return end(c, st, &err);
	}
	*out = &info.v[0]->pub;
	free(info.v);
	return end(c, DLOCK_OK, &err);
}

void dlock_lock_info_free(dlock_lock_info *info)
{
	store_free((struct info_store *)info);
}

/* The list and its items, in one allocation with the items' pointers. */
struct list_store {
	dlock_lock_list pub;
	struct info_store **items;
};

static int by_name(const void *a, const void *b)
{
	const dlock_lock_info *x = &(*(struct info_store *const *)a)->pub;
	const dlock_lock_info *y = &(*(struct info_store *const *)b)->pub;
	if (x->name && y->name)
		return strcmp(x->name, y->name);
	if (x->name || y->name)
		return x->name ? -1 : 1;
	return strcmp(x->resource, y->resource);
}

static int keep(const dlock_lock_info *i, const char *prefix)
{
	if (!prefix || !*prefix)
		return 1;
	return i->name && strncmp(i->name, prefix, strlen(prefix)) == 0;
}

dlock_status dlock_list(dlock_client *c, const char *prefix, dlock_lock_list **out)
{
	if (out)
		*out = NULL;
	if (!c)
		return DLOCK_EINVAL;
	if (!out)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_list: out must not be NULL");
	if (dlock_seam_refuse_blocking(c, "dlock_list") != DLOCK_OK)
		return DLOCK_EDEADLK;
	dlock_driver_list_fn *list = dlock_driver_list_of(c->driver);
	if (!list)
		return not_supported(c, "listing of held locks");
	if (prefix && strnlen(prefix, DLOCK_NAME_MAX + 1) > DLOCK_NAME_MAX)
		return dlock_client_fail(c, DLOCK_EINVAL, "the name prefix is longer than a name can be");
	dlock_status st = begin(c);
	if (st != DLOCK_OK)
		return st;
	struct dlock_info info = { .single = 0, .abi = c->driver->abi_version };
	dlock_error err = { "" };
	st = list(c->backend, &info, &err);
	struct list_store *ls = NULL;
	if (st == DLOCK_OK) {
		ls = calloc(1, sizeof *ls);
		if (!ls)
			st = dlock_error_set(&err, DLOCK_ENOMEM, "out of memory listing locks");
	}
	if (st != DLOCK_OK) {
		info_clear(&info);
		free(ls);
		return end(c, st, &err);
	}
	size_t kept = 0;
	for (size_t i = 0; i < info.n; i++) {
		if (keep(&info.v[i]->pub, prefix))
			info.v[kept++] = info.v[i];
		else
			store_free(info.v[i]);
	}
	if (kept > 1)
		qsort(info.v, kept, sizeof *info.v, by_name);
	ls->items = info.v;
	ls->pub.count = kept;
	ls->pub.items = (const dlock_lock_info *const *)info.v;
	*out = &ls->pub;
	return end(c, DLOCK_OK, &err);
}

void dlock_lock_list_free(dlock_lock_list *list)
{
	if (!list)
		return;
	struct list_store *ls = (struct list_store *)list;
	for (size_t i = 0; i < ls->pub.count; i++)
		store_free(ls->items[i]);
	free(ls->items);
	free(ls);
}

dlock_status dlock_break(dlock_client *c, const char *name, size_t *broken)
{
	if (broken)
		*broken = 0;
	if (!c)
		return DLOCK_EINVAL;
	if (dlock_seam_refuse_blocking(c, "dlock_break") != DLOCK_OK)
		return DLOCK_EDEADLK;
	dlock_status st = check_name(c, name);
	if (st != DLOCK_OK)
		return st;
	dlock_driver_break_fn *brk = dlock_driver_break_of(c->driver);
	if (!brk)
		return not_supported(c, "breaking of locks");
	st = begin(c);
	if (st != DLOCK_OK)
		return st;
	size_t n = 0;
	dlock_error err = { "" };
	st = brk(c->backend, name, strlen(name), &n, &err);
	if (st == DLOCK_OK && broken)
		*broken = n;
	if (st == DLOCK_OK)
		dlock_client_logf(c, DLOCK_LOG_INFO, "broke a lock: %zu holder%s removed", n, n == 1 ? "" : "s");
	return end(c, st, &err);
}

/* What dlock_gc() hands the driver: the user's callback, and a buffer to make each name a C string. */
struct gc_relay {
	dlock_gc_fn fn;
	void *userdata;
	char name[DLOCK_NAME_MAX + 1];
};

static void gc_removed(void *arg, const char *name, size_t len, const char *resource)
{
	struct gc_relay *r = arg;
	if (!r->fn)
		return;
	if (name && len > DLOCK_NAME_MAX)
		len = DLOCK_NAME_MAX; /* a driver's bug; never past the buffer */
	if (name)
		memcpy(r->name, name, len);
	if (name)
		r->name[len] = '\0';
	r->fn(name ? r->name : NULL, resource ? resource : "", r->userdata);
}

dlock_status dlock_gc(dlock_client *c, const char *prefix, unsigned flags, dlock_gc_fn fn, void *userdata,
                      size_t *count)
{
	if (count)
		*count = 0;
	if (!c)
		return DLOCK_EINVAL;
	if (dlock_seam_refuse_blocking(c, "dlock_gc") != DLOCK_OK)
		return DLOCK_EDEADLK;
	if (flags & ~(unsigned)DLOCK_GC_DRY_RUN)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_gc: unknown flags");
	if (prefix && strnlen(prefix, DLOCK_NAME_MAX + 1) > DLOCK_NAME_MAX)
		return dlock_client_fail(c, DLOCK_EINVAL, "the name prefix is longer than a name can be");
	dlock_driver_gc_fn *gc = dlock_driver_gc_of(c->driver);
	if (!gc) {
		char buf[160];
		snprintf(buf, sizeof buf, "%s:// has no garbage collection (see DLOCK_FEATURE_GC)", c->driver->scheme);
		return dlock_client_fail(c, DLOCK_ENOTSUP, buf);
	}
	dlock_status st = begin(c);
	if (st != DLOCK_OK)
		return st;
	struct gc_relay *r = malloc(sizeof *r);
	if (!r)
		return end(c, DLOCK_ENOMEM, &(dlock_error){ "out of memory collecting names" });
	*r = (struct gc_relay){ .fn = fn, .userdata = userdata };
	size_t n = 0;
	dlock_error err = { "" };
	st = gc(c->backend, prefix ? prefix : "", prefix ? strlen(prefix) : 0, flags, gc_removed, r, &n, &err);
	free(r);
	if (count)
		*count = n;
	if (n > 0 && !(flags & DLOCK_GC_DRY_RUN))
		dlock_client_logf(c, DLOCK_LOG_INFO, "collected %zu unused name%s", n, n == 1 ? "" : "s");
	return end(c, st, &err);
}

const char *dlock_break_effect_name(dlock_break_effect e)
{
	switch (e) {
	case DLOCK_BREAK_NONE: return "none";
	case DLOCK_BREAK_DELETE: return "delete";
	case DLOCK_BREAK_SESSION: return "session";
	}
	return "unknown";
}
