/*
 * The calls of a loop client and of its lock handles, mapped onto the
 * client's loop thread (testloop.h, testloop_call.h): getters and the
 * making and freeing of handles at once there; acquire, release, extend,
 * check, inspect, list and break through their _async forms; dlock_gc()
 * on a blocking client of the same URI.
 */
#include "testloop.h"
#include "testloop_call.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------- clients */

/* Calls that do not talk to the server run on the loop thread at once. */
static void start_uri(tl_call *k)
{
	k->result = dlock_client_uri(k->client);
	tl_finish(k, DLOCK_OK);
}

const char *testloop_client_uri(const dlock_client *client)
{
	tl_client *c = tl_find(client);
	if (!c || tl_is_loop(c))
		return dlock_client_uri(client);
	tl_call *k = tl_call_new("dlock_client_uri", start_uri);
	k->client = (dlock_client *)(uintptr_t)client;
	tl_do(c, k);
	const char *uri = k->result;
	free(k);
	return uri;
}

static void start_get_stats(tl_call *k)
{
	tl_finish(k, dlock_client_get_stats(k->client, k->out));
}

static void start_capabilities(tl_call *k)
{
	tl_finish(k, dlock_client_capabilities(k->client, k->out));
}

static void start_feature(tl_call *k)
{
	tl_finish(k, dlock_client_feature(k->client, (dlock_feature)k->n, k->out));
}

/* A call of `client` that answers through `out` and does not talk to the server, on its loop thread. */
static dlock_status tl_client_get(dlock_client *client, const char *what, void (*start)(tl_call *k), int64_t n,
                                  void *out)
{
	tl_call *k = tl_call_new(what, start);
	k->client = client;
	k->n = n;
	k->out = out;
	return tl_run(client, k);
}

dlock_status testloop_client_get_stats(dlock_client *client, dlock_client_stats *stats)
{
	return tl_direct(client) ? dlock_client_get_stats(client, stats)
	                         : tl_client_get(client, "dlock_client_get_stats", start_get_stats, 0, stats);
}

dlock_status testloop_client_capabilities(dlock_client *client, dlock_capabilities *caps)
{
	return tl_direct(client) ? dlock_client_capabilities(client, caps)
	                         : tl_client_get(client, "dlock_client_capabilities", start_capabilities, 0, caps);
}

dlock_status testloop_client_feature(dlock_client *client, dlock_feature feature, int64_t *value)
{
	return tl_direct(client) ? dlock_client_feature(client, feature, value)
	                         : tl_client_get(client, "dlock_client_feature", start_feature, feature, value);
}

/* ------------------------------------------------------- handles */

/* dlock_lock_new(), dlock_rwlock_new() or dlock_semaphore_new(), as `kind` says. */
static dlock_status tl_make_lock(dlock_client *client, const char *name, dlock_lock_kind kind, uint32_t permits,
                                 dlock_lock **out)
{
	switch (kind) {
	case DLOCK_KIND_RWLOCK:
		return dlock_rwlock_new(client, name, out);
	case DLOCK_KIND_SEMAPHORE:
		return dlock_semaphore_new(client, name, permits, out);
	default:
		return dlock_lock_new(client, name, out);
	}
}

static void start_lock_new(tl_call *k)
{
	dlock_lock **out = k->out;
	dlock_status st = tl_make_lock(k->client, k->text, (dlock_lock_kind)k->n, k->permits, out);
	if (st == DLOCK_OK && out && *out)
		tl_register(*out, k->c, 1);
	tl_finish(k, st);
}

static dlock_status tl_lock_new(dlock_client *client, const char *name, dlock_lock_kind kind, uint32_t permits,
                                dlock_lock **out)
{
	tl_client *c = tl_find(client);
	if (!c) /* NULL or not a loop client: the library's own answer */
		return tl_make_lock(client, name, kind, permits, out);
	tl_call *k = tl_call_new("dlock_lock_new", start_lock_new);
	k->client = client;
	k->text = name;
	k->n = kind;
	k->permits = permits;
	k->out = out;
	if (tl_is_loop(c)) {
		k->c = c;
		start_lock_new(k);
	} else {
		tl_do(c, k);
	}
	dlock_status st = k->status;
	free(k);
	return st;
}

dlock_status testloop_lock_new(dlock_client *client, const char *name, dlock_lock **out)
{
	return tl_lock_new(client, name, DLOCK_KIND_MUTEX, 0, out);
}

dlock_status testloop_rwlock_new(dlock_client *client, const char *name, dlock_lock **out)
{
	return tl_lock_new(client, name, DLOCK_KIND_RWLOCK, 0, out);
}

dlock_status testloop_semaphore_new(dlock_client *client, const char *name, uint32_t permits, dlock_lock **out)
{
	return tl_lock_new(client, name, DLOCK_KIND_SEMAPHORE, permits, out);
}

static void start_lock_free(tl_call *k)
{
	tl_forget(k->lock, k->c);
	dlock_lock_free(k->lock);
	tl_finish(k, DLOCK_OK);
}

void testloop_lock_free(dlock_lock *lock)
{
	tl_client *c = tl_find(lock);
	if (!c || tl_is_loop(c)) {
		if (c)
			tl_forget(lock, c);
		dlock_lock_free(lock);
		return;
	}
	tl_call *k = tl_call_new("dlock_lock_free", start_lock_free);
	k->lock = lock;
	tl_run_then_reap(c, k);
}

/* Getters of a handle, on its loop thread. */
static void start_lock_name(tl_call *k)
{
	k->result = dlock_lock_name(k->lock);
	tl_finish(k, DLOCK_OK);
}

static void start_lock_kind(tl_call *k)
{
	k->n = dlock_lock_get_kind(k->lock);
	tl_finish(k, DLOCK_OK);
}

static void start_lock_permits(tl_call *k)
{
	k->n = dlock_lock_permits(k->lock);
	tl_finish(k, DLOCK_OK);
}

/* A getter `start` of `lock` run on its loop thread; NULL when `lock` is not a loop client's (then run here). */
static tl_call *tl_getter(const dlock_lock *lock, const char *what, void (*start)(tl_call *k))
{
	tl_client *c = tl_find(lock);
	if (!c || tl_is_loop(c))
		return NULL;
	tl_call *k = tl_call_new(what, start);
	k->lock = (dlock_lock *)(uintptr_t)lock;
	tl_do(c, k);
	return k;
}

const char *testloop_lock_name(const dlock_lock *lock)
{
	tl_call *k = tl_getter(lock, "dlock_lock_name", start_lock_name);
	if (!k)
		return dlock_lock_name(lock);
	const char *name = k->result;
	free(k);
	return name;
}

dlock_lock_kind testloop_lock_get_kind(const dlock_lock *lock)
{
	tl_call *k = tl_getter(lock, "dlock_lock_get_kind", start_lock_kind);
	if (!k)
		return dlock_lock_get_kind(lock);
	dlock_lock_kind kind = (dlock_lock_kind)k->n;
	free(k);
	return kind;
}

uint32_t testloop_lock_permits(const dlock_lock *lock)
{
	tl_call *k = tl_getter(lock, "dlock_lock_permits", start_lock_permits);
	if (!k)
		return dlock_lock_permits(lock);
	uint32_t permits = (uint32_t)k->n;
	free(k);
	return permits;
}

static void start_fencing_token(tl_call *k)
{
	tl_finish(k, dlock_lock_fencing_token(k->lock, k->out));
}

static void start_permit_slot(tl_call *k)
{
	tl_finish(k, dlock_lock_permit_slot(k->lock, k->out));
}

/* ------------------------------------------------------- operations on a handle */

static void on_lock_done(dlock_lock *lock, dlock_status st, void *ud)
{
	tl_call *k = ud;
	(void)lock;
	tl_callback_end(k, st);
}

static void start_acquire(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_acquire_async(k->lock, k->opts, on_lock_done, k));
}

static void start_release(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_release_async(k->lock, on_lock_done, k));
}

static void start_extend(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_extend_async(k->lock, k->n, on_lock_done, k));
}

static void start_check(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_check_async(k->lock, on_lock_done, k));
}

/* A call of `lock`, a loop client's handle, on its loop thread. */
static dlock_status tl_lock_op(dlock_lock *lock, const char *what, void (*start)(tl_call *k),
                               const dlock_acquire_options *opts, int64_t n, void *out)
{
	tl_call *k = tl_call_new(what, start);
	k->lock = lock;
	k->opts = opts;
	k->n = n;
	k->out = out;
	return tl_run(lock, k);
}


dlock_status testloop_lock_fencing_token(dlock_lock *lock, uint64_t *token)
{
	if (tl_direct(lock))
		return dlock_lock_fencing_token(lock, token);
	return tl_lock_op(lock, "dlock_lock_fencing_token", start_fencing_token, NULL, 0, token);
}

dlock_status testloop_lock_permit_slot(dlock_lock *lock, uint32_t *slot)
{
	if (tl_direct(lock))
		return dlock_lock_permit_slot(lock, slot);
	return tl_lock_op(lock, "dlock_lock_permit_slot", start_permit_slot, NULL, 0, slot);
}

dlock_status testloop_acquire(dlock_lock *lock, const dlock_acquire_options *opts)
{
	if (!lock)
		return tl_null_start(dlock_acquire_async(NULL, opts, tl_never_lock, NULL), "dlock_acquire_async");
	if (tl_direct(lock))
		return dlock_acquire(lock, opts);
	return tl_lock_op(lock, "dlock_acquire_async", start_acquire, opts, 0, NULL);
}

dlock_status testloop_release(dlock_lock *lock)
{
	if (!lock)
		return tl_null_start(dlock_release_async(NULL, tl_never_lock, NULL), "dlock_release_async");
	if (tl_direct(lock))
		return dlock_release(lock);
	return tl_lock_op(lock, "dlock_release_async", start_release, NULL, 0, NULL);
}

dlock_status testloop_extend(dlock_lock *lock, int64_t lease_ms)
{
	if (!lock)
		return tl_null_start(dlock_extend_async(NULL, lease_ms, tl_never_lock, NULL), "dlock_extend_async");
	if (tl_direct(lock))
		return dlock_extend(lock, lease_ms);
	return tl_lock_op(lock, "dlock_extend_async", start_extend, NULL, lease_ms, NULL);
}

dlock_status testloop_check(dlock_lock *lock)
{
	if (!lock)
		return tl_null_start(dlock_check_async(NULL, tl_never_lock, NULL), "dlock_check_async");
	if (tl_direct(lock))
		return dlock_check(lock);
	return tl_lock_op(lock, "dlock_check_async", start_check, NULL, 0, NULL);
}

/* ------------------------------------------------------- inspection */

static void on_inspect(dlock_client *client, dlock_status st, dlock_lock_info *info, void *ud)
{
	tl_call *k = ud;
	(void)client;
	k->result = info;
	tl_callback_end(k, st);
}

static void start_inspect(tl_call *k)
{
	if (!k->out) { /* no _async form for a missing answer pointer: the blocking form's refusal */
		tl_finish(k, dlock_inspect(k->client, k->text, NULL));
		return;
	}
	k->starting = 1;
	tl_started(k, dlock_inspect_async(k->client, k->text, on_inspect, k));
}

static void on_list(dlock_client *client, dlock_status st, dlock_lock_list *list, void *ud)
{
	tl_call *k = ud;
	(void)client;
	k->result = list;
	tl_callback_end(k, st);
}

static void start_list(tl_call *k)
{
	if (!k->out) {
		tl_finish(k, dlock_list(k->client, k->text, NULL));
		return;
	}
	k->starting = 1;
	tl_started(k, dlock_list_async(k->client, k->text, on_list, k));
}

static void on_break(dlock_client *client, dlock_status st, size_t broken, void *ud)
{
	tl_call *k = ud;
	(void)client;
	k->broken = broken;
	tl_callback_end(k, st);
}

static void start_break(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_break_async(k->client, k->text, on_break, k));
}

static void tl_never_inspect(dlock_client *c, dlock_status st, dlock_lock_info *info, void *ud)
{
	(void)c, (void)st, (void)info, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

static void tl_never_list(dlock_client *c, dlock_status st, dlock_lock_list *list, void *ud)
{
	(void)c, (void)st, (void)list, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

static void tl_never_break(dlock_client *c, dlock_status st, size_t broken, void *ud)
{
	(void)c, (void)st, (void)broken, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

/* A client operation on its loop thread; k->result and k->broken hold what it answered. */
static tl_call *tl_client_op(dlock_client *client, const char *what, void (*start)(tl_call *k), const char *text,
                             void *out, dlock_status *st)
{
	tl_call *k = tl_call_new(what, start);
	k->client = client;
	k->text = text;
	k->out = out;
	*st = tl_do(tl_find(client), k);
	return k;
}

dlock_status testloop_inspect(dlock_client *client, const char *name, dlock_lock_info **out)
{
	dlock_status st;
	if (!client) {
		if (out)
			*out = NULL;
		return tl_null_start(dlock_inspect_async(NULL, name, tl_never_inspect, NULL), "dlock_inspect_async");
	}
	if (tl_direct(client))
		return dlock_inspect(client, name, out);
	tl_call *k = tl_client_op(client, "dlock_inspect_async", start_inspect, name, out, &st);
	if (out)
		*out = (dlock_lock_info *)(uintptr_t)k->result;
	free(k);
	return st;
}

dlock_status testloop_list(dlock_client *client, const char *name_prefix, dlock_lock_list **out)
{
	dlock_status st;
	if (!client) {
		if (out)
			*out = NULL;
		return tl_null_start(dlock_list_async(NULL, name_prefix, tl_never_list, NULL), "dlock_list_async");
	}
	if (tl_direct(client))
		return dlock_list(client, name_prefix, out);
	tl_call *k = tl_client_op(client, "dlock_list_async", start_list, name_prefix, out, &st);
	if (out)
		*out = (dlock_lock_list *)(uintptr_t)k->result;
	free(k);
	return st;
}

dlock_status testloop_break(dlock_client *client, const char *name, size_t *broken)
{
	dlock_status st;
	if (!client) {
		if (broken)
			*broken = 0;
		return tl_null_start(dlock_break_async(NULL, name, tl_never_break, NULL), "dlock_break_async");
	}
	if (tl_direct(client))
		return dlock_break(client, name, broken);
	tl_call *k = tl_client_op(client, "dlock_break_async", start_break, name, NULL, &st);
	if (broken)
		*broken = k->broken;
	free(k);
	return st;
}

/*
 * dlock_gc() has no asynchronous form (it is an administrator's sweep, not
 * something a loop waits on): run it on a blocking client of the same URI,
 * opened for the call on the calling thread.
 */
dlock_status testloop_gc(dlock_client *client, const char *name_prefix, unsigned flags, dlock_gc_fn fn,
                         void *userdata, size_t *count)
{
	tl_client *c = tl_find(client);
	if (!c || tl_is_loop(c) || !c->uri)
		return dlock_gc(client, name_prefix, flags, fn, userdata, count);
	dlock_client *blocking = NULL;
	char text[TL_TEXT_MAX] = "";
	dlock_status st = dlock_client_open(&blocking, c->uri, NULL, text, sizeof text);
	if (st == DLOCK_OK) {
		st = dlock_gc(blocking, name_prefix, flags, fn, userdata, count);
		if (st != DLOCK_OK)
			snprintf(text, sizeof text, "%s", dlock_client_errmsg(blocking));
		dlock_client_close(blocking);
	} else if (count) {
		*count = 0;
	}
	if (st != DLOCK_OK)
		tl_note_text(client, text);
	return st;
}
