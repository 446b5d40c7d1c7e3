/*
 * The control door: dlock_client_control() and dlock_lock_control() pass a
 * backend-specific operation to the driver's control() (ABI version 2),
 * after answering the core's own operations (dlock/sys/control.h).
 *
 * Threads: a client operation counts as a call in progress (c->inflight),
 * so dlock_client_close() waits for it before closing the driver; a lock
 * operation marks the handle busy like every other driver call on it.
 * Errors: the status, with text through dlock_client_errmsg().
 */
#include "internal.h"
#include "registry.h"

#include "dlock/sys/control.h"

#include <stdio.h>

/* Record why `op` failed; the driver's text when it wrote one. */
static dlock_status control_fail_locked(struct dlock_client *c, dlock_status st, int op, const char *msg)
{
	char buf[DLOCK_ERROR_MAX];
	if (msg && *msg)
		return dlock_client_fail_locked(c, st, msg);
	if (st == DLOCK_ENOTSUP)
		snprintf(buf, sizeof buf, "control operation 0x%x is not supported by %s://", (unsigned)op,
		         c->driver->scheme);
	else
		snprintf(buf, sizeof buf, "control operation 0x%x: %s", (unsigned)op, dlock_strerror(st));
	return dlock_client_fail_locked(c, st, buf);
}

/* The core's own operations on a client; c->mu held. */
static dlock_status core_control_locked(struct dlock_client *c, int op, void *arg)
{
	switch (op) {
	case DLOCK_CTL_ERRMSG_RECORDS:
		*(size_t *)arg = dlock_errs_count(c->errs);
		return DLOCK_OK;
	default:
		return control_fail_locked(c, DLOCK_ENOTSUP, op, "unknown core control operation");
	}
}

dlock_status dlock_client_control(dlock_client *c, int op, void *arg)
{
	dlock_error err = { "" };
	dlock_driver_control_fn *control;
	dlock_status st;

	if (!c)
		return DLOCK_EINVAL;
	if (!arg)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_client_control: arg must not be NULL");
	dlock_status unopened = dlock_seam_refuse_unopened(c, "dlock_client_control");
	if (unopened != DLOCK_OK)
		return unopened;
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		dlock_client_fail_locked(c, DLOCK_ECLOSED, "client is closed");
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ECLOSED;
	}
	if (op >= DLOCK_CTL_CORE_FIRST && op <= DLOCK_CTL_CORE_LAST) {
		st = core_control_locked(c, op, arg);
		pthread_mutex_unlock(&c->mu);
		return st;
	}
	control = dlock_driver_control_of(c->driver);
	if (!control) {
		st = control_fail_locked(c, DLOCK_ENOTSUP, op, NULL);
		pthread_mutex_unlock(&c->mu);
		return st;
	}
	c->inflight++; /* close waits until the driver has returned */
	pthread_mutex_unlock(&c->mu);

	st = control(c->backend, NULL, op, arg, &err);

	pthread_mutex_lock(&c->mu);
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	if (st != DLOCK_OK)
		control_fail_locked(c, st, op, err.msg);
	pthread_mutex_unlock(&c->mu);
	return st;
}

dlock_status dlock_lock_control(dlock_lock *l, int op, void *arg)
{
	dlock_error err = { "" };
	dlock_driver_control_fn *control;
	struct dlock_client *c;
	dlock_status st;

	if (!l)
		return DLOCK_EINVAL;
	c = l->client;
	if (!arg)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_lock_control: arg must not be NULL");
	pthread_mutex_lock(&c->mu);
	control = dlock_driver_control_of(c->driver);
	if (!control || (op >= DLOCK_CTL_CORE_FIRST && op <= DLOCK_CTL_CORE_LAST)) {
		st = control_fail_locked(c, DLOCK_ENOTSUP, op, NULL);
		pthread_mutex_unlock(&c->mu);
		return st;
	}
	int busy = !c->closing;
	if (busy)
		dlock_lock_begin_call(l); /* calls on one lk never overlap */
	if (c->closing || !l->driver_ready) {
		if (busy)
			dlock_lock_end_call(l);
		dlock_client_fail_locked(c, DLOCK_ECLOSED, "client is closed");
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ECLOSED;
	}
	pthread_mutex_unlock(&c->mu);

	st = control(c->backend, l->lk, op, arg, &err);

	pthread_mutex_lock(&c->mu);
	dlock_lock_end_call(l);
	if (st != DLOCK_OK)
		control_fail_locked(c, st, op, err.msg);
	pthread_mutex_unlock(&c->mu);
	return st;
}
