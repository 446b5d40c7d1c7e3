/*
 * v1proxy:// — a driver written against the version-1 contract (the copy
 * in tests/driver_v1/dlock/sys/driver.h, found first on this file's
 * include path), to prove that today's library still registers such a
 * driver and that it passes the conformance suite.
 *
 *   v1proxy://NS   locks of mem://v1proxy-NS, through a client of its own
 *
 * Each call forwards to that inner client through the public API: the
 * blocking acquire() of version 1 waits in the inner dlock_acquire() (the
 * deadline from dlock_wait_remaining_ms(), cancellation through the wait's
 * interrupt hook), extend() and check() forward, and the inner lock's
 * lost-lock callback becomes dlock_report_lost().
 *
 * Ownership: a client owns its inner client; a lock state owns its inner
 * handle (made in lock_init(), freed in lock_fini()).  Threads: whatever
 * the contract allows; the inner library is thread-safe.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/sys/driver.h"

#include "v1proxy.h"

#if DLOCK_DRIVER_ABI_VERSION != 1
#error "v1proxy.c must be compiled against the version-1 copy of driver.h"
#endif

struct v1proxy {
	dlock_client *inner;
	dlock_host *host;
};

struct v1proxy_lock {
	dlock_lock *inner;
	dlock_host *host;
};

static dlock_status v1_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	char inner_uri[512], msg[256] = "";
	if (uri->nhosts != 1 || uri->hosts[0].port != 0 || uri->path[0] != '\0' || uri->nparams != 0 ||
	    uri->prefix_given)
		return dlock_error_set(err, DLOCK_EURI, "v1proxy:// takes a namespace only: %s", uri->masked);
	int n = snprintf(inner_uri, sizeof inner_uri, "mem://v1proxy-%s", uri->hosts[0].host);
	if (n < 0 || (size_t)n >= sizeof inner_uri)
		return dlock_error_set(err, DLOCK_EURI, "v1proxy://: the namespace is too long");
	struct v1proxy *p = calloc(1, sizeof *p);
	if (!p)
		return dlock_error_set(err, DLOCK_ENOMEM, "v1proxy://: out of memory");
	dlock_status st = dlock_client_open(&p->inner, inner_uri, NULL, msg, sizeof msg);
	if (st != DLOCK_OK) {
		free(p);
		return dlock_error_set(err, st, "v1proxy://: %s", msg);
	}
	p->host = host;
	*backend = p;
	return DLOCK_OK;
}

static void v1_close(void *backend)
{
	struct v1proxy *p = backend;
	dlock_client_close(p->inner);
	free(p);
}

static void v1_capabilities(void *backend, dlock_capabilities *caps)
{
	struct v1proxy *p = backend;
	dlock_client_capabilities(p->inner, caps);
	caps->backend = "v1proxy";
}

static dlock_status v1_lock_init(void *backend, void *lkp, const char *name, size_t len, dlock_error *err)
{
	struct v1proxy *p = backend;
	struct v1proxy_lock *lk = lkp;
	char *copy = malloc(len + 1);
	if (!copy)
		return dlock_error_set(err, DLOCK_ENOMEM, "v1proxy://: out of memory");
	memcpy(copy, name, len);
	copy[len] = '\0';
	dlock_status st = dlock_lock_new(p->inner, copy, &lk->inner);
	free(copy);
	lk->host = p->host;
	if (st != DLOCK_OK)
		return dlock_error_set(err, st, "v1proxy://: %s", dlock_client_errmsg(p->inner));
	return DLOCK_OK;
}

static void v1_lock_fini(void *backend, void *lkp)
{
	struct v1proxy_lock *lk = lkp;
	(void)backend;
	dlock_lock_free(lk->inner);
	lk->inner = NULL;
}

/* The inner lock was lost: so is ours. */
static void forward_lost(dlock_lock *inner, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct v1proxy_lock *lk = userdata;
	(void)inner;
	dlock_report_lost(lk->host, lk, reason, detail);
}

static void cancel_inner(void *arg)
{
	dlock_cancel(((struct v1proxy_lock *)arg)->inner);
}

/* The inner status, with its message, as the version-1 contract wants it. */
static dlock_status failed(struct v1proxy *p, dlock_status st, dlock_error *err)
{
	if (st == DLOCK_ETIMEDOUT)
		st = DLOCK_EBUSY; /* version 1: EBUSY when the lock stayed held until the deadline */
	return dlock_error_set(err, st, "v1proxy://: %s", dlock_client_errmsg(p->inner));
}

static dlock_status v1_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                               dlock_error *err)
{
	struct v1proxy *p = backend;
	struct v1proxy_lock *lk = lkp;
	int64_t left = dlock_wait_remaining_ms(w);
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = dlock_wait_try_once(w) ? 0 : left < 0 ? DLOCK_WAIT_FOREVER : left;
	o.lease_ms = lease_ms;
	o.renewal = DLOCK_OFF; /* the outer core renews through extend() */
	o.fence = dlock_wait_wants_token(w) ? DLOCK_ON : DLOCK_OFF;
	o.on_lost = forward_lost;
	o.lost_userdata = lk;
	if (!dlock_wait_try_once(w) && left == 0)
		return dlock_error_set(err, DLOCK_EBUSY, "v1proxy://: no time left");
	int64_t sent = dlock_monotonic_ns();
	dlock_wait_set_interrupt(w, cancel_inner, lk);
	dlock_status st = dlock_acquire(lk->inner, &o);
	dlock_wait_set_interrupt(w, NULL, NULL);
	if (st != DLOCK_OK)
		return failed(p, st, err);
	uint64_t token = 0;
	if (o.fence == DLOCK_ON && dlock_lock_fencing_token(lk->inner, &token) != DLOCK_OK)
		token = 0;
	*out = (dlock_acquired){ .token = token, .sent_ns = sent };
	return DLOCK_OK;
}

static dlock_status v1_release(void *backend, void *lkp, dlock_error *err)
{
	struct v1proxy_lock *lk = lkp;
	dlock_status st = dlock_release(lk->inner);
	return st == DLOCK_OK ? st : failed(backend, st, err);
}

static dlock_status v1_extend(void *backend, void *lkp, int64_t lease_ms, dlock_error *err)
{
	struct v1proxy_lock *lk = lkp;
	dlock_status st = dlock_extend(lk->inner, lease_ms);
	return st == DLOCK_OK ? st : failed(backend, st, err);
}

static dlock_status v1_check(void *backend, void *lkp, dlock_error *err)
{
	struct v1proxy_lock *lk = lkp;
	dlock_status st = dlock_check(lk->inner);
	return st == DLOCK_OK ? st : failed(backend, st, err);
}

const dlock_driver v1proxy_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION, /* 1, from the copied header */
	.scheme = "v1proxy",
	.lock_size = sizeof(struct v1proxy_lock),
	.open = v1_open,
	.close = v1_close,
	.capabilities = v1_capabilities,
	.lock_init = v1_lock_init,
	.lock_fini = v1_lock_fini,
	.acquire = v1_acquire,
	.release = v1_release,
	.extend = v1_extend,
	.check = v1_check,
};
