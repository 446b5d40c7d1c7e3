/*
 * A client's memory: made by dlock_client_open() (client.c), freed when
 * the client is closed and its last handle is gone, by whichever of
 * dlock_client_close() and dlock_lock_free() (lock.c) comes last, since
 * an application may free its handles after closing their client.
 *
 * Threads: dlock_client_new() and dlock_client_free() run where nothing
 * else can reach the client; dlock_client_maybe_free_locked() is called
 * with c->mu held and unlocks it.  Errors: dlock_client_new() returns NULL
 * when out of memory (or thread keys), having freed what it took.
 */
#include "internal.h"
#include "uri.h"

#include <stdlib.h>

struct dlock_client *dlock_client_new(const dlock_client_options *opts)
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

void dlock_client_free(struct dlock_client *c)
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

void dlock_client_maybe_free_locked(struct dlock_client *c)
{
	int free_now = c->closed && c->nlocks == 0 && !c->reactor; /* a loop client's reactor goes first */
	pthread_mutex_unlock(&c->mu);
	if (free_now)
		dlock_client_free(c);
}
