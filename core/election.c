/*
 * Leader election: an election is a mutex whose holder tells everyone who
 * it is.  Campaigning acquires the mutex `name` and proclaims a value
 * beside it (the driver's proclaim()); the term is the acquisition's
 * fencing token; resigning releases it; losing leadership is the mutex's
 * loss, with the same callback.  Reading who leads is an inspection of the
 * name (observe.c tells the leader from it).  Observing runs on the
 * client's observer thread (observe.c).
 *
 * Ownership: an election owns its mutex handle and a copy of its name;
 * the application frees it with dlock_election_free() (also after the
 * client closed).  Threads: every call may come from any thread; the
 * observing fields are guarded by c->mu.  Errors: statuses, with the text
 * through dlock_client_errmsg().
 */
#include "internal.h"
#include "registry.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dlock_status no_elections(struct dlock_client *c)
{
	char buf[160];
	snprintf(buf, sizeof buf, "%s:// has no leader election (DLOCK_FEATURE_ELECTION)", c->driver->scheme);
	return dlock_client_fail(c, DLOCK_ENOTSUP, buf);
}

dlock_status dlock_election_new(dlock_client *c, const char *name, dlock_election **out)
{
	if (out)
		*out = NULL;
	if (!c || !out)
		return c ? dlock_client_fail(c, DLOCK_EINVAL, "dlock_election_new: out must not be NULL") : DLOCK_EINVAL;
	dlock_status unopened = dlock_seam_refuse_unopened(c, "dlock_election_new");
	if (unopened != DLOCK_OK)
		return unopened;
	int64_t elections = -1;
	if (!dlock_driver_proclaim_of(c->driver) || dlock_client_feature(c, DLOCK_FEATURE_ELECTION, &elections) != DLOCK_OK ||
	    elections < 0)
		return no_elections(c);
	struct dlock_election *e = calloc(1, sizeof *e);
	if (!e)
		return dlock_client_fail(c, DLOCK_ENOMEM, "out of memory");
	dlock_status st = dlock_lock_new(c, name, &e->lock);
	if (st != DLOCK_OK) {
		free(e);
		return st;
	}
	e->client = c;
	e->name = dlock_lock_name(e->lock);
	*out = e;
	return DLOCK_OK;
}

dlock_lock *dlock_election_lock(dlock_election *e)
{
	return e ? e->lock : NULL;
}

static dlock_status check_value(struct dlock_client *c, const char *value, size_t *len)
{
	*len = value ? strnlen(value, DLOCK_VALUE_MAX + 1) : 0;
	if (*len > DLOCK_VALUE_MAX) {
		char buf[96];
		snprintf(buf, sizeof buf, "a leader's value is at most %d bytes", DLOCK_VALUE_MAX);
		return dlock_client_fail(c, DLOCK_EINVAL, buf);
	}
	return DLOCK_OK;
}

/* The driver's proclaim() on the held mutex, as one call on the handle. */
static dlock_status proclaim_held(struct dlock_election *e, const char *value, size_t len)
{
	struct dlock_client *c = e->client;
	struct dlock_lock *l = e->lock;
	dlock_error err = { "" };
	pthread_mutex_lock(&c->mu);
	if (!l->held || l->lost || l->lingering || c->closing) {
		pthread_mutex_unlock(&c->mu);
		return dlock_client_fail(c, DLOCK_ENOTHELD, "not leading this election");
	}
	dlock_lock_begin_call(l);
	pthread_mutex_unlock(&c->mu);
	dlock_status st = dlock_driver_proclaim_of(c->driver)(c->backend, l->lk, value ? value : "", len, &err);
	pthread_mutex_lock(&c->mu);
	if (st == DLOCK_ENOTHELD)
		dlock_lock_declare_lost(l, DLOCK_LOST_TAKEN, err.msg[0] ? err.msg : "proclaim found the lock gone");
	dlock_lock_end_call(l);
	pthread_mutex_unlock(&c->mu);
	if (st != DLOCK_OK)
		return dlock_client_fail(c, st, err.msg[0] ? err.msg : dlock_strerror(st));
	return DLOCK_OK;
}

dlock_status dlock_campaign_check(dlock_election *e, const dlock_acquire_options *opts, dlock_acquire_options *copy,
                                  const char **why)
{
	dlock_status st = dlock_options_read(opts, copy, why); /* of whichever version, as current ones */
	if (st != DLOCK_OK)
		return st;
	if (copy->fence == DLOCK_OFF || copy->mode != DLOCK_MODE_EXCLUSIVE) {
		*why = "dlock_campaign: a term is the acquisition's fencing token: fencing must be on, and the mode "
		       "exclusive";
		return DLOCK_EINVAL;
	}
	copy->fence = DLOCK_ON;
	dlock_acquire_options checked;
	return dlock_acquire_check(e->lock, copy, &checked, why);
}

dlock_status dlock_campaign(dlock_election *e, const char *value, const dlock_acquire_options *opts, uint64_t *term)
{
	if (term)
		*term = 0;
	if (!e)
		return DLOCK_EINVAL;
	dlock_status st = dlock_seam_refuse_blocking(e->client, "dlock_campaign");
	return st == DLOCK_OK ? dlock_campaign_since(e, value, opts, term, DLOCK_CANCEL_SEQ_NOW) : st;
}

dlock_status dlock_campaign_since(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                                  uint64_t *term, uint64_t cancel_seq)
{
	if (term)
		*term = 0;
	struct dlock_client *c = e->client;
	size_t len;
	dlock_acquire_options o;
	dlock_status st = check_value(c, value, &len);
	if (st != DLOCK_OK)
		return st;
	const char *bad = "";
	st = dlock_campaign_check(e, opts, &o, &bad);
	if (st != DLOCK_OK)
		return dlock_client_fail(c, st, bad);
	st = dlock_acquire_since(e->lock, &o, cancel_seq);
	if (st != DLOCK_OK)
		return st;
	st = proclaim_held(e, value, len);
	if (st != DLOCK_OK) {
		char why[DLOCK_ERROR_MAX];
		snprintf(why, sizeof why, "%s", dlock_client_errmsg(c));
		dlock_release(e->lock);
		return dlock_client_fail(c, st, why);
	}
	if (term && dlock_lock_fencing_token(e->lock, term) != DLOCK_OK)
		*term = 0;
	return DLOCK_OK;
}

dlock_status dlock_proclaim(dlock_election *e, const char *value)
{
	if (!e)
		return DLOCK_EINVAL;
	dlock_status refused = dlock_seam_refuse_blocking(e->client, "dlock_proclaim");
	if (refused != DLOCK_OK)
		return refused;
	size_t len;
	dlock_status st = check_value(e->client, value, &len);
	return st == DLOCK_OK ? proclaim_held(e, value, len) : st;
}

dlock_status dlock_resign(dlock_election *e)
{
	if (!e)
		return DLOCK_EINVAL;
	struct dlock_client *c = e->client;
	dlock_status refused = dlock_seam_refuse_blocking(c, "dlock_resign");
	if (refused != DLOCK_OK)
		return refused;
	pthread_mutex_lock(&c->mu);
	unsigned depth = e->lock->held && !e->lock->lingering ? e->lock->depth : 0;
	pthread_mutex_unlock(&c->mu);
	dlock_status st = dlock_release(e->lock); /* not leading: says why */
	for (unsigned i = 1; st == DLOCK_OK && i < depth; i++) /* every reentrant level: resigning is not nested */
		st = dlock_release(e->lock);
	return st;
}

/* ----------------------------------------------------------- who leads */

struct leader_store {
	dlock_leader pub;
	dlock_lock_info *info;
};

dlock_status dlock_election_leader(dlock_election *e, dlock_leader **out)
{
	if (out)
		*out = NULL;
	if (!e || !out)
		return e ? dlock_client_fail(e->client, DLOCK_EINVAL, "dlock_election_leader: out must not be NULL")
		         : DLOCK_EINVAL;
	dlock_status refused = dlock_seam_refuse_blocking(e->client, "dlock_election_leader");
	if (refused != DLOCK_OK)
		return refused;
	struct leader_store *ls = calloc(1, sizeof *ls);
	if (!ls)
		return dlock_client_fail(e->client, DLOCK_ENOMEM, "out of memory");
	dlock_status st = dlock_inspect(e->client, e->name, &ls->info);
	if (st != DLOCK_OK) {
		free(ls);
		return st;
	}
	dlock_election_leader_of(ls->info, &ls->pub);
	*out = &ls->pub;
	return DLOCK_OK;
}

dlock_status dlock_leader_get(dlock_election *e, dlock_leader **out)
{
	return dlock_election_leader(e, out);
}

void dlock_leader_free(dlock_leader *leader)
{
	if (!leader)
		return;
	struct leader_store *ls = (struct leader_store *)leader;
	dlock_lock_info_free(ls->info);
	free(ls);
}

void dlock_election_free(dlock_election *e)
{
	if (!e)
		return;
	if (dlock_observe(e, NULL, NULL) != DLOCK_OK)
		return; /* from its own observer callback: freeing now would pull the election from under it */
	if (e->client->seam && e->client->seam->lock_free(e->lock, e))
		return; /* a loop client's: freed on a worker once its callbacks have run */
	dlock_lock_free(e->lock); /* releases every level: resigns */
	free(e);
}
