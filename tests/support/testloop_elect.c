/*
 * The calls of an election of a loop client, mapped onto the client's loop
 * thread (testloop.h, testloop_call.h): making, freeing (after resigning)
 * and observing at once there; campaign, proclaim, resign and the leader's
 * read through their _async forms.
 */
#include "testloop.h"
#include "testloop_call.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------- elections */

static void start_election_new(tl_call *k)
{
	dlock_election **out = k->out;
	dlock_status st = dlock_election_new(k->client, k->text, out);
	if (st == DLOCK_OK && out && *out) {
		tl_register(*out, k->c, 1);
		tl_register(dlock_election_lock(*out), k->c, 0);
	}
	tl_finish(k, st);
}

dlock_status testloop_election_new(dlock_client *client, const char *name, dlock_election **out)
{
	tl_client *c = tl_find(client);
	if (!c)
		return dlock_election_new(client, name, out);
	tl_call *k = tl_call_new("dlock_election_new", start_election_new);
	k->client = client;
	k->text = name;
	k->out = out;
	if (tl_is_loop(c)) {
		k->c = c;
		start_election_new(k);
	} else {
		tl_do(c, k);
	}
	dlock_status st = k->status;
	free(k);
	return st;
}

static void tl_election_free_here(tl_client *c, dlock_election *e)
{
	tl_forget(dlock_election_lock(e), c);
	tl_forget(e, c);
	dlock_election_free(e);
}

static void on_resigned_for_free(dlock_election *e, dlock_status st, uint64_t term, void *ud)
{
	tl_call *k = ud;
	(void)st, (void)term;
	if (!k->starting)
		tl_election_free_here(k->c, e);
	tl_callback_end(k, DLOCK_OK);
}

/*
 * dlock_election_free() has resigned when it returns; on a loop client the
 * free resigns later, with no callback to await.  So: resign (not leading:
 * refused, which is fine), await it, then free.
 */
static void start_election_free(tl_call *k)
{
	k->starting = 1;
	dlock_status st = dlock_resign_async(k->e, on_resigned_for_free, k);
	k->starting = 0;
	if (st == DLOCK_OK && !k->early)
		return; /* freed once the resignation has called back */
	tl_election_free_here(k->c, k->e);
	tl_finish(k, DLOCK_OK);
}

void testloop_election_free(dlock_election *e)
{
	tl_client *c = tl_find(e);
	if (!c) {
		dlock_election_free(e);
		return;
	}
	if (tl_is_loop(c)) {
		tl_election_free_here(c, e);
		return;
	}
	tl_call *k = tl_call_new("dlock_election_free", start_election_free);
	k->e = e;
	tl_run_then_reap(c, k);
}

static void start_election_lock(tl_call *k)
{
	k->result = dlock_election_lock(k->e);
	tl_finish(k, DLOCK_OK);
}

dlock_lock *testloop_election_lock(dlock_election *e)
{
	tl_client *c = tl_find(e);
	if (!c || tl_is_loop(c))
		return dlock_election_lock(e);
	tl_call *k = tl_call_new("dlock_election_lock", start_election_lock);
	k->e = e;
	tl_do(c, k);
	dlock_lock *lock = (dlock_lock *)(uintptr_t)k->result;
	free(k);
	return lock;
}

static void on_election_done(dlock_election *e, dlock_status st, uint64_t term, void *ud)
{
	tl_call *k = ud;
	(void)e;
	k->term = term;
	tl_callback_end(k, st);
}

static void start_campaign(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_campaign_async(k->e, k->text, k->opts, on_election_done, k));
}

static void start_proclaim(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_proclaim_async(k->e, k->text, on_election_done, k));
}

static void start_resign(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_resign_async(k->e, on_election_done, k));
}

static void on_leader_read(dlock_election *e, dlock_status st, dlock_leader *leader, void *ud)
{
	tl_call *k = ud;
	(void)e;
	k->result = leader;
	tl_callback_end(k, st);
}

static void start_election_leader(tl_call *k)
{
	if (!k->out) { /* no _async form for a missing answer pointer: the blocking form's refusal */
		tl_finish(k, dlock_election_leader(k->e, NULL));
		return;
	}
	k->starting = 1;
	tl_started(k, dlock_election_leader_async(k->e, on_leader_read, k));
}

static void tl_never_election(dlock_election *e, dlock_status st, uint64_t term, void *ud)
{
	(void)e, (void)st, (void)term, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

static void tl_never_leader(dlock_election *e, dlock_status st, dlock_leader *leader, void *ud)
{
	(void)e, (void)st, (void)leader, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

/* An operation of election `e` on its loop thread. */
static tl_call *tl_election_op(dlock_election *e, const char *what, void (*start)(tl_call *k), const char *value,
                               const dlock_acquire_options *opts, void *out, dlock_status *st)
{
	tl_call *k = tl_call_new(what, start);
	k->e = e;
	k->text = value;
	k->opts = opts;
	k->out = out;
	*st = tl_do(tl_find(e), k);
	return k;
}

dlock_status testloop_campaign(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                               uint64_t *term)
{
	dlock_status st;
	if (!e) {
		if (term)
			*term = 0;
		return tl_null_start(dlock_campaign_async(NULL, value, opts, tl_never_election, NULL), "dlock_campaign_async");
	}
	if (tl_direct(e))
		return dlock_campaign(e, value, opts, term);
	tl_call *k = tl_election_op(e, "dlock_campaign_async", start_campaign, value, opts, NULL, &st);
	if (term)
		*term = k->term;
	free(k);
	return st;
}

dlock_status testloop_proclaim(dlock_election *e, const char *value)
{
	dlock_status st;
	if (!e)
		return tl_null_start(dlock_proclaim_async(NULL, value, tl_never_election, NULL), "dlock_proclaim_async");
	if (tl_direct(e))
		return dlock_proclaim(e, value);
	free(tl_election_op(e, "dlock_proclaim_async", start_proclaim, value, NULL, NULL, &st));
	return st;
}

dlock_status testloop_resign(dlock_election *e)
{
	dlock_status st;
	if (!e)
		return tl_null_start(dlock_resign_async(NULL, tl_never_election, NULL), "dlock_resign_async");
	if (tl_direct(e))
		return dlock_resign(e);
	free(tl_election_op(e, "dlock_resign_async", start_resign, NULL, NULL, NULL, &st));
	return st;
}

dlock_status testloop_election_leader(dlock_election *e, dlock_leader **out)
{
	dlock_status st;
	if (!e) {
		if (out)
			*out = NULL;
		return tl_null_start(dlock_election_leader_async(NULL, tl_never_leader, NULL),
		                     "dlock_election_leader_async");
	}
	if (tl_direct(e))
		return dlock_election_leader(e, out);
	tl_call *k = tl_election_op(e, "dlock_election_leader_async", start_election_leader, NULL, NULL, out, &st);
	if (out)
		*out = (dlock_leader *)(uintptr_t)k->result;
	free(k);
	return st;
}

static void start_observe(tl_call *k)
{
	tl_finish(k, dlock_observe(k->e, k->observer, k->userdata));
}

dlock_status testloop_observe(dlock_election *e, dlock_leader_fn fn, void *userdata)
{
	if (tl_direct(e))
		return dlock_observe(e, fn, userdata);
	tl_call *k = tl_call_new("dlock_observe", start_observe);
	k->e = e;
	k->observer = fn;
	k->userdata = userdata;
	return tl_run(e, k);
}
