/*
 * What the core offers its drivers through the dlock_host of a client
 * (dlock/sys/driver.h, "core services"): logging, the client's owner
 * record, the driver's process-wide object, and the report of a lost lock.
 * The waits handed to a driver have their own services (wait.c).
 *
 * Threads: any, also from a driver's own threads and with its mutexes held;
 * only dlock_report_lost() takes c->mu, which the core never holds while it
 * calls a driver.  Errors: none to return; a report for a handle that is
 * not held is ignored (held.c).
 */
#include "internal.h"
#include "registry.h"

void dlock_host_log(dlock_host *host, dlock_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	dlock_client_vlogf(host->client, level, fmt, ap);
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

static struct dlock_lock *lock_from_lk(void *lk)
{
	return (struct dlock_lock *)(void *)((char *)lk - DLOCK_LK_OFFSET);
}

void dlock_report_lost(dlock_host *host, void *lk, dlock_lost_reason reason, const char *detail)
{
	struct dlock_client *c = host->client;
	pthread_mutex_lock(&c->mu);
	dlock_lock_declare_lost(lock_from_lk(lk), reason, detail);
	pthread_mutex_unlock(&c->mu);
}
