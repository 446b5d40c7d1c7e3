/*
 * Clients: open from a URI, close, and what a client tells about itself
 * (its masked URI, capabilities and counters).  Its memory is lifetime.c's,
 * its error text and log report.c's, the services its driver gets host.c's;
 * lock handles live in lock.c, the background threads in background.c, the
 * observer thread in observe.c.
 *
 * Threads: any.  Close cancels the acquires in progress and waits for
 * every call on the client to return; from a lost-lock callback of the
 * same client it refuses (DLOCK_EDEADLK).  Errors: open writes its message
 * into the caller's buffer (there is no client yet); close through
 * dlock_client_errmsg().
 */
#include "internal.h"
#include "registry.h"
#include "uri.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ open */

static dlock_status fail_open(char *errbuf, size_t errlen, dlock_status st, const char *msg)
{
	if (errbuf && errlen)
		snprintf(errbuf, errlen, "%s", msg && *msg ? msg : dlock_strerror(st));
	return st;
}

/* Every backend parameter left in the URI must be one the driver knows. */
static dlock_status check_params(const dlock_driver *d, const dlock_uri *uri, dlock_error *err)
{
	for (size_t i = 0; i < uri->nparams; i++) {
		const char *key = uri->params[i].key;
		if (!d->knows_param || !d->knows_param(key))
			return dlock_error_set(err, DLOCK_EURI, "unknown parameter '%s' for %s:// in %s", key,
			                       d->scheme, uri->masked);
	}
	return DLOCK_OK;
}

dlock_status dlock_client_prepare(struct dlock_client **out, const char *text, const dlock_client_options *opts,
                                  dlock_error *err)
{
	*out = NULL;
	if (!text)
		return dlock_error_set(err, DLOCK_EINVAL, "dlock_client_open: out and uri must not be NULL");
	if (opts && (opts->version < 1 || opts->version > DLOCK_CLIENT_OPTIONS_VERSION))
		return dlock_error_set(err, DLOCK_EVERSION,
		                       "dlock_client_options.version is not 1 to DLOCK_CLIENT_OPTIONS_VERSION");
	const char *identity = opts && opts->version >= 2 ? opts->identity : NULL;
	if (identity && dlock_identity_check(identity, err) != DLOCK_OK)
		return DLOCK_EINVAL;
	struct dlock_client *c = dlock_client_new(opts);
	if (!c)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	dlock_status st = dlock_uri_parse(text, &c->uri, err);
	if (st != DLOCK_OK)
		goto fail;
	c->driver = dlock_registry_find(c->uri->scheme);
	if (!c->driver) {
		const char *refused = dlock_registry_refused_reason(c->uri->scheme);
		if (refused)
			st = dlock_error_set(err, DLOCK_ENOBACKEND, "driver '%s' refused at registration: %s (URI %s)",
			                     c->uri->scheme, refused, c->uri->masked);
		else
			st = dlock_error_set(err, DLOCK_ENOBACKEND, "no backend for scheme '%s' (built in: %s) in %s",
			                     c->uri->scheme, dlock_backends(), c->uri->masked);
		goto fail;
	}
	st = check_params(c->driver, c->uri, err);
	if (st != DLOCK_OK)
		goto fail;
	dlock_owner_init(&c->owner, identity ? identity : c->uri->identity);
	c->uri->identity = c->owner.identity;
	*out = c;
	return DLOCK_OK;
fail:
	dlock_client_free(c);
	return st;
}

dlock_status dlock_client_connect(struct dlock_client *c, dlock_error *err)
{
	dlock_status st = c->driver->open(c->uri, &c->host, &c->backend, err);
	if (st != DLOCK_OK) {
		c->backend = NULL;
		return st;
	}
	dlock_facts_load(c);
	/* The core waits for drivers that answer single attempts, except where the server queues the
	 * waiters itself and the driver can wait in that queue (driver.h, try_acquire). */
	c->retry_loop = dlock_driver_try_acquire_of(c->driver) &&
	                (!c->driver->acquire || c->caps.wakeup != DLOCK_WAKEUP_SERVER_QUEUE);
	if (c->loop_io && !dlock_driver_loop_io_for(c->driver, c->backend)) {
		pthread_mutex_lock(&c->mu); /* this backend's mode runs on workers after all */
		c->loop_io = 0;
		pthread_mutex_unlock(&c->mu);
	}
	c->loop_bg = c->loop_native || c->loop_io;
	st = c->loop_bg ? c->seam->start_background(c) : dlock_background_start(c);
	if (st != DLOCK_OK) {
		dlock_error_set(err, st, "cannot start the client's background thread");
		c->driver->close(c->backend);
		c->backend = NULL;
	}
	return st;
}

dlock_status dlock_client_open(dlock_client **out, const char *text, const dlock_client_options *opts,
                               char *errbuf, size_t errlen)
{
	dlock_error err = { "" };
	struct dlock_client *c = NULL;

	if (out)
		*out = NULL;
	if (!out)
		return fail_open(errbuf, errlen, DLOCK_EINVAL, "dlock_client_open: out and uri must not be NULL");
	dlock_status st = dlock_client_prepare(&c, text, opts, &err);
	if (st != DLOCK_OK)
		return fail_open(errbuf, errlen, st, err.msg);
	st = dlock_client_connect(c, &err);
	if (st != DLOCK_OK) {
		fail_open(errbuf, errlen, st, err.msg);
		dlock_client_free(c);
		return st;
	}
	*out = c;
	return DLOCK_OK;
}

/* ------------------------------------------------------------ close */

/* Cancel every acquire in progress and wait until they have all returned. */
static void cancel_acquires_locked(struct dlock_client *c)
{
	for (struct dlock_lock *l = c->locks; l; l = l->next)
		dlock_lock_cancel_locked(l);
	while (c->inflight > 0)
		pthread_cond_wait(&c->cond, &c->mu);
}

dlock_status dlock_client_close_now(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		pthread_mutex_unlock(&c->mu);
		return dlock_client_fail(c, DLOCK_ECLOSED, "client is already closed");
	}
	c->closing = 1;
	cancel_acquires_locked(c);
	pthread_mutex_unlock(&c->mu);

	dlock_observer_stop(c);

	dlock_background_stop(c);
	dlock_locks_shutdown(c);
	if (c->backend && !c->loop_io) { /* a loop client whose open failed has none */
		c->driver->close(c->backend);
		c->backend = NULL;
	} /* a driver on the loop is closed there, when the close is called back (async.c) */

	pthread_mutex_lock(&c->mu);
	c->closed = 1;
	dlock_client_maybe_free_locked(c);
	return DLOCK_OK;
}

dlock_status dlock_client_close(dlock_client *c)
{
	if (!c)
		return DLOCK_OK;
	if (c->seam)
		return c->seam->close(c);
	if (dlock_background_is_self(c))
		return dlock_client_fail(c, DLOCK_EDEADLK,
		                         "dlock_client_close called from a lost-lock callback of the same client");
	return dlock_client_close_now(c);
}

/* ------------------------------------------------------------ queries */

const char *dlock_client_uri(const dlock_client *c)
{
	return c ? c->uri->masked : "";
}

dlock_status dlock_client_capabilities(dlock_client *c, dlock_capabilities *caps)
{
	if (!c || !caps)
		return DLOCK_EINVAL;
	dlock_status unopened = dlock_seam_refuse_unopened(c, "dlock_client_capabilities");
	if (unopened != DLOCK_OK)
		return unopened;
	*caps = c->caps;
	return DLOCK_OK;
}

dlock_status dlock_client_get_stats(dlock_client *c, dlock_client_stats *stats)
{
	if (!c || !stats)
		return DLOCK_EINVAL;
	pthread_mutex_lock(&c->mu);
	*stats = c->stats;
	pthread_mutex_unlock(&c->mu);
	return DLOCK_OK;
}
