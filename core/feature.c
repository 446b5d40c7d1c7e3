/*
 * dlock_client_feature(): facts about a client's backend, one code at a
 * time, so that new facts need no new struct (dlock_capabilities is
 * frozen).  The core answers what it knows — the capabilities the driver
 * gave at open and which methods the driver has — and asks the driver,
 * through its control door (DLOCK_CTL_FEATURE), only for codes it cannot
 * answer itself; a driver without the door, or that does not know the
 * code, makes it DLOCK_ENOTSUP.
 *
 * Threads: any; a question to the driver counts as a call in progress
 * (c->inflight), so that dlock_client_close() waits for it.
 */
#include "internal.h"
#include "registry.h"

#include "dlock/sys/control.h"

#include <stdio.h>

/* The core's answer; 0 when only the driver can say. */
static int core_answer(const struct dlock_client *c, dlock_feature f, int64_t *value)
{
	const dlock_capabilities *k = &c->caps;
	switch (f) {
	case DLOCK_FEATURE_CONSISTENCY: *value = k->consistency; return 1;
	case DLOCK_FEATURE_FENCING: *value = k->fencing; return 1;
	case DLOCK_FEATURE_FAIR: *value = k->fair; return 1;
	case DLOCK_FEATURE_LEASE: *value = k->lease; return 1;
	case DLOCK_FEATURE_WAKEUP: *value = k->wakeup; return 1;
	case DLOCK_FEATURE_SCOPE: *value = k->scope; return 1;
	case DLOCK_FEATURE_EXTEND: *value = c->driver->extend != NULL; return 1;
	case DLOCK_FEATURE_CHECK: *value = c->driver->check != NULL; return 1;
	case DLOCK_FEATURE_CONTROL: *value = dlock_driver_control_of(c->driver) != NULL; return 1;
	case DLOCK_FEATURE_RWLOCK:
		*value = c->kinds[DLOCK_KIND_RWLOCK].supported ? c->kinds[DLOCK_KIND_RWLOCK].policy : DLOCK_RWLOCK_NONE;
		return 1;
	case DLOCK_FEATURE_READ_FENCING:
		*value = c->kinds[DLOCK_KIND_RWLOCK].supported ? c->kinds[DLOCK_KIND_RWLOCK].read_fencing
		                                               : DLOCK_FENCING_NONE;
		return 1;
	case DLOCK_FEATURE_KIND_CHECK: *value = c->kinds[DLOCK_KIND_RWLOCK].kind_checked != 0; return 1;
	case DLOCK_FEATURE_SEMAPHORE:
		*value = c->kinds[DLOCK_KIND_SEMAPHORE].supported ? c->kinds[DLOCK_KIND_SEMAPHORE].order
		                                                  : DLOCK_SEMAPHORE_NONE;
		return 1;
	case DLOCK_FEATURE_PERMIT_FENCING:
		*value = c->kinds[DLOCK_KIND_SEMAPHORE].supported ? c->kinds[DLOCK_KIND_SEMAPHORE].read_fencing
		                                                  : DLOCK_FENCING_NONE;
		return 1;
	case DLOCK_FEATURE_INSPECT:
		if (dlock_driver_inspect_of(c->driver))
			return 0; /* the driver says what it sees */
		*value = 0;
		return 1;
	case DLOCK_FEATURE_BREAK:
		if (dlock_driver_break_of(c->driver))
			return 0;
		*value = DLOCK_BREAK_NONE;
		return 1;
	case DLOCK_FEATURE_ELECTION:
		if (k->fencing == DLOCK_FENCING_NONE) { /* a term is a fencing token */
			*value = -1;
			return 1;
		}
		if (dlock_driver_proclaim_of(c->driver) && dlock_driver_control_of(c->driver))
			return 0; /* the driver may say more: one driver serves RedLock too, which has none */
		if (!dlock_driver_proclaim_of(c->driver))
			*value = -1;
		else
			*value = dlock_driver_watch_of(c->driver) ? DLOCK_WAKEUP_NOTIFY : DLOCK_WAKEUP_POLL;
		return 1;
	case DLOCK_FEATURE_GC:
		if (dlock_driver_gc_of(c->driver))
			return 0; /* the driver may have the method only to say why it has nothing to collect */
		*value = 0;
		return 1;
	}
	return 0;
}

/* The core's answer when a driver with inspection or breaking does not say more: the least it sees. */
static int core_default(const struct dlock_client *c, dlock_feature f, int64_t *value)
{
	if (f == DLOCK_FEATURE_INSPECT) {
		*value = DLOCK_INSPECT_HELD | (dlock_driver_list_of(c->driver) ? DLOCK_INSPECT_LIST : 0);
		return 1;
	}
	if (f == DLOCK_FEATURE_BREAK) {
		*value = DLOCK_BREAK_DELETE;
		return 1;
	}
	if (f == DLOCK_FEATURE_ELECTION) {
		*value = dlock_driver_watch_of(c->driver) ? DLOCK_WAKEUP_NOTIFY : DLOCK_WAKEUP_POLL;
		return 1;
	}
	if (f == DLOCK_FEATURE_GC) {
		*value = 1;
		return 1;
	}
	return 0;
}

const char *dlock_feature_name(dlock_feature f)
{
	switch (f) {
	case DLOCK_FEATURE_CONSISTENCY: return "consistency";
	case DLOCK_FEATURE_FENCING: return "fencing";
	case DLOCK_FEATURE_FAIR: return "fair";
	case DLOCK_FEATURE_LEASE: return "lease";
	case DLOCK_FEATURE_WAKEUP: return "wakeup";
	case DLOCK_FEATURE_SCOPE: return "scope";
	case DLOCK_FEATURE_EXTEND: return "extend";
	case DLOCK_FEATURE_CHECK: return "check";
	case DLOCK_FEATURE_CONTROL: return "control";
	case DLOCK_FEATURE_RWLOCK: return "rwlock";
	case DLOCK_FEATURE_READ_FENCING: return "read-fencing";
	case DLOCK_FEATURE_KIND_CHECK: return "kind-check";
	case DLOCK_FEATURE_SEMAPHORE: return "semaphore";
	case DLOCK_FEATURE_PERMIT_FENCING: return "permit-fencing";
	case DLOCK_FEATURE_INSPECT: return "inspect";
	case DLOCK_FEATURE_BREAK: return "break";
	case DLOCK_FEATURE_ELECTION: return "election";
	case DLOCK_FEATURE_GC: return "gc";
	}
	return "unknown";
}

static dlock_status unknown_locked(struct dlock_client *c, dlock_feature f)
{
	char buf[160];
	snprintf(buf, sizeof buf, "feature %d is not known to this library or to %s://", (int)f, c->driver->scheme);
	return dlock_client_fail_locked(c, DLOCK_ENOTSUP, buf);
}

dlock_status dlock_client_feature(dlock_client *c, dlock_feature f, int64_t *value)
{
	if (!c)
		return DLOCK_EINVAL;
	if (!value)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_client_feature: value must not be NULL");
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		dlock_client_fail_locked(c, DLOCK_ECLOSED, "client is closed");
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ECLOSED;
	}
	if (core_answer(c, f, value)) {
		pthread_mutex_unlock(&c->mu);
		return DLOCK_OK;
	}
	dlock_driver_control_fn *control = dlock_driver_control_of(c->driver);
	if (!control) {
		if (core_default(c, f, value)) {
			pthread_mutex_unlock(&c->mu);
			return DLOCK_OK;
		}
		dlock_status st = unknown_locked(c, f);
		pthread_mutex_unlock(&c->mu);
		return st;
	}
	c->inflight++; /* close waits until the driver has returned */
	pthread_mutex_unlock(&c->mu);

	struct dlock_feature_query q = { .feature = (int)f, .value = 0 };
	dlock_error err = { "" };
	dlock_status st = control(c->backend, NULL, DLOCK_CTL_FEATURE, &q, &err);

	pthread_mutex_lock(&c->mu);
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	if (st == DLOCK_OK)
		*value = q.value;
	else if (st == DLOCK_ENOTSUP && core_default(c, f, value))
		st = DLOCK_OK;
	else if (st == DLOCK_ENOTSUP)
		unknown_locked(c, f);
	else
		dlock_client_fail_locked(c, st, err.msg[0] ? err.msg : dlock_strerror(st));
	pthread_mutex_unlock(&c->mu);
	return st;
}
