/*
 * Clients: open from a URI, close, per-thread error detail, logging,
 * capabilities and counters.  Lock handles live in lock.c; the background
 * thread in background.c.
 */
#include "internal.h"
#include "registry.h"
#include "uri.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ errors */

/* The text lives in errmsg.c, one record per thread and client. */
dlock_status dlock_client_fail_locked(struct dlock_client *c, dlock_status status, const char *msg)
{
	dlock_errs_set(c->errs, msg && *msg ? msg : dlock_strerror(status));
	return status;
}

dlock_status dlock_client_fail(struct dlock_client *c, dlock_status status, const char *msg)
{
	return dlock_client_fail_locked(c, status, msg);
}

const char *dlock_client_errmsg(dlock_client *c)
{
	if (!c)
		return "client is NULL";
	return dlock_errs_get(c->errs);
}

/* ------------------------------------------------------------ logging */

static void vlog(struct dlock_client *c, dlock_log_level level, const char *fmt, va_list ap)
{
	if (!c->log || level > c->log_level)
		return;
	char buf[1024];
	vsnprintf(buf, sizeof buf, fmt, ap);
	c->log(c->log_userdata, level, buf);
}

void dlock_client_logf(struct dlock_client *c, dlock_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(c, level, fmt, ap);
	va_end(ap);
}

void dlock_host_log(dlock_host *host, dlock_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(host->client, level, fmt, ap);
	va_end(ap);
}

const char *dlock_host_owner(dlock_host *host, size_t *len)
{
	if (len)
		*len = host->client->owner.record_len;
	return host->client->owner.record;
}

void *dlock_host_shared(dlock_host *host, void *(*create)(void))
{
	return dlock_registry_shared(host->client->driver, create);
}

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

static struct dlock_client *client_new(const dlock_client_options *opts)
{
	struct dlock_client *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->nbuckets = 64;
	c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
	if (!c->buckets || dlock_errs_open(&c->errs) != DLOCK_OK) {
		free(c->buckets);
		free(c);
		return NULL;
	}
	pthread_mutex_init(&c->mu, NULL);
	dlock_cond_init_monotonic(&c->cond);
	dlock_cond_init_monotonic(&c->bg_cond);
	dlock_cond_init_monotonic(&c->renew_cond);
	dlock_cond_init_monotonic(&c->observe_cond);
	c->host.client = c;
	c->bg_sleep_until = c->renew_sleep_until = INT64_MIN;
	c->log_level = DLOCK_LOG_WARN;
	if (opts) {
		c->log = opts->log;
		c->log_userdata = opts->log_userdata;
		c->log_level = opts->log_level;
	}
	return c;
}

static void client_free(struct dlock_client *c)
{
	dlock_errs_close(c->errs);
	dlock_uri_free(c->uri);
	free(c->buckets);
	dlock_sched_free(c);
	pthread_cond_destroy(&c->bg_cond);
	pthread_cond_destroy(&c->renew_cond);
	pthread_cond_destroy(&c->observe_cond);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

dlock_status dlock_client_open(dlock_client **out, const char *text, const dlock_client_options *opts,
                               char *errbuf, size_t errlen)
{
	dlock_error err = { "" };
	struct dlock_client *c = NULL;
	dlock_status st;

	if (out)
		*out = NULL;
	if (!out || !text)
		return fail_open(errbuf, errlen, DLOCK_EINVAL, "dlock_client_open: out and uri must not be NULL");
	if (opts && (opts->version < 1 || opts->version > DLOCK_CLIENT_OPTIONS_VERSION))
		return fail_open(errbuf, errlen, DLOCK_EVERSION,
		                 "dlock_client_options.version is not 1 to DLOCK_CLIENT_OPTIONS_VERSION");
	const char *identity = opts && opts->version >= 2 ? opts->identity : NULL;
	if (identity && dlock_identity_check(identity, &err) != DLOCK_OK)
		return fail_open(errbuf, errlen, DLOCK_EINVAL, err.msg);
	c = client_new(opts);
	if (!c)
		return fail_open(errbuf, errlen, DLOCK_ENOMEM, "out of memory");
	st = dlock_uri_parse(text, &c->uri, &err);
	if (st != DLOCK_OK)
		goto fail;
	c->driver = dlock_registry_find(c->uri->scheme);
	if (!c->driver) {
		const char *refused = dlock_registry_refused_reason(c->uri->scheme);
		if (refused)
			st = dlock_error_set(&err, DLOCK_ENOBACKEND, "driver '%s' refused at registration: %s (URI %s)",
			                     c->uri->scheme, refused, c->uri->masked);
		else
			st = dlock_error_set(&err, DLOCK_ENOBACKEND, "no backend for scheme '%s' (built in: %s) in %s",
			                     c->uri->scheme, dlock_backends(), c->uri->masked);
		goto fail;
	}
	st = check_params(c->driver, c->uri, &err);
	if (st != DLOCK_OK)
		goto fail;
	dlock_owner_init(&c->owner, identity ? identity : c->uri->identity);
	c->uri->identity = c->owner.identity;
	st = c->driver->open(c->uri, &c->host, &c->backend, &err);
	if (st != DLOCK_OK) {
		c->backend = NULL;
		goto fail;
	}
	dlock_facts_load(c);
	/* The core waits for drivers that answer single attempts, except where the server queues the
	 * waiters itself and the driver can wait in that queue (driver.h, try_acquire). */
	c->retry_loop = dlock_driver_try_acquire_of(c->driver) &&
	                (!c->driver->acquire || c->caps.wakeup != DLOCK_WAKEUP_SERVER_QUEUE);
	st = dlock_background_start(c);
	if (st != DLOCK_OK) {
		dlock_error_set(&err, st, "cannot start the client's background thread");
		c->driver->close(c->backend);
		goto fail;
	}
	*out = c;
	return DLOCK_OK;
fail:
	fail_open(errbuf, errlen, st, err.msg);
	client_free(c);
	return st;
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

dlock_status dlock_client_close(dlock_client *c)
{
	if (!c)
		return DLOCK_OK;
	if (dlock_background_is_self(c))
		return dlock_client_fail(c, DLOCK_EDEADLK,
		                         "dlock_client_close called from a lost-lock callback of the same client");
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
	c->driver->close(c->backend);
	c->backend = NULL;

	pthread_mutex_lock(&c->mu);
	c->closed = 1;
	dlock_client_maybe_free_locked(c);
	return DLOCK_OK;
}

void dlock_client_maybe_free_locked(struct dlock_client *c)
{
	int free_now = c->closed && c->nlocks == 0;
	pthread_mutex_unlock(&c->mu);
	if (free_now)
		client_free(c);
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
