/*
 * A backend's facts: asked of the driver once after open (the frozen
 * dlock_capabilities and what it does with each kind, kept in c->caps and
 * c->kinds), and dlock_client_feature(), one code at a time, so that new
 * facts need no new struct.  The core answers what it keeps and which
 * methods the driver has, and asks the driver only for the codes it
 * cannot answer itself.
 *
 * Where a driver states its facts depends on its ABI version: from 7, its
 * one feature() method, for every fact; before, capabilities() (1 to 6),
 * kind_capabilities() (3 to 6) and the control door's DLOCK_CTL_FEATURE
 * (2 to 6).  Everything below the two loaders is the same for both.  A
 * code the driver does not answer gets the core's default, or
 * DLOCK_ENOTSUP for one the core does not know either.
 *
 * Threads: the loaders run on the opening thread before the client is
 * handed out; c->caps and c->kinds never change after.  A question to the
 * driver from dlock_client_feature() counts as a call in progress
 * (c->inflight), so that dlock_client_close() waits for it.
 */
#include "internal.h"
#include "registry.h"

#include "dlock/sys/control.h"

#include <stdio.h>

/* ------------------------------------------------------------ loading */

/* The driver's answer to `code` for `kind` (ABI version 7), `dflt` when it gives none. */
static int64_t fact_value(const struct dlock_client *c, dlock_lock_kind kind, int code, int64_t dflt)
{
	dlock_fact f = { 0, NULL };
	return dlock_driver_feature_of(c->driver)(c->backend, kind, code, &f) == DLOCK_OK ? f.value : dflt;
}

static const char *fact_text(const struct dlock_client *c, int code, const char *dflt)
{
	dlock_fact f = { 0, NULL };
	dlock_status st = dlock_driver_feature_of(c->driver)(c->backend, DLOCK_KIND_MUTEX, code, &f);
	return st == DLOCK_OK && f.text ? f.text : dflt;
}

/* One kind of a version-7 driver: what it said, all zero for a kind it does not have. */
static dlock_kind_caps kind_facts(const struct dlock_client *c, dlock_lock_kind k)
{
	dlock_kind_caps caps = { 0 };
	int kinds = dlock_driver_lock_init_kind_of(c->driver) != NULL;
	if (k == DLOCK_KIND_RWLOCK && kinds) {
		caps.policy = (dlock_rwlock_policy)fact_value(c, k, DLOCK_FEATURE_RWLOCK, DLOCK_RWLOCK_NONE);
		caps.supported = caps.policy != DLOCK_RWLOCK_NONE;
		caps.read_fencing = (dlock_fencing)fact_value(c, k, DLOCK_FEATURE_READ_FENCING, DLOCK_FENCING_NONE);
	}
	if (k == DLOCK_KIND_SEMAPHORE && kinds) {
		caps.order = (dlock_semaphore_order)fact_value(c, k, DLOCK_FEATURE_SEMAPHORE, DLOCK_SEMAPHORE_NONE);
		caps.supported = caps.order != DLOCK_SEMAPHORE_NONE;
		caps.slots = fact_value(c, k, DLOCK_FACT_SLOTS, 0) != 0;
		caps.read_fencing = (dlock_fencing)fact_value(c, k, DLOCK_FEATURE_PERMIT_FENCING, DLOCK_FENCING_NONE);
	}
	if (k == DLOCK_KIND_MUTEX)
		caps.supported = 1;
	if (!caps.supported)
		return (dlock_kind_caps){ 0 };
	caps.kind_checked = fact_value(c, k, DLOCK_FEATURE_KIND_CHECK, 0) != 0;
	caps.core_waits = fact_value(c, k, DLOCK_FACT_CORE_WAITS, 0) != 0;
	return caps;
}

/* A version-7 driver: everything through feature(). */
static void load_facts(struct dlock_client *c)
{
	c->caps = (dlock_capabilities){
		.backend = fact_text(c, DLOCK_FACT_BACKEND, c->driver->scheme),
		.consistency = (dlock_consistency)fact_value(c, DLOCK_KIND_MUTEX, DLOCK_FEATURE_CONSISTENCY, 0),
		.fencing = (dlock_fencing)fact_value(c, DLOCK_KIND_MUTEX, DLOCK_FEATURE_FENCING, 0),
		.fencing_note = fact_text(c, DLOCK_FACT_FENCING_NOTE, ""),
		.fair = (int)fact_value(c, DLOCK_KIND_MUTEX, DLOCK_FEATURE_FAIR, 0),
		.lease = (dlock_lease_kind)fact_value(c, DLOCK_KIND_MUTEX, DLOCK_FEATURE_LEASE, 0),
		.wakeup = (dlock_wakeup)fact_value(c, DLOCK_KIND_MUTEX, DLOCK_FEATURE_WAKEUP, 0),
		.scope = (dlock_scope)fact_value(c, DLOCK_KIND_MUTEX, DLOCK_FEATURE_SCOPE, 0),
	};
	for (int k = 0; k < DLOCK_KINDS; k++)
		c->kinds[k] = kind_facts(c, (dlock_lock_kind)k);
}

/* A driver of ABI version 1 to 6: capabilities(), and kind_capabilities() from version 3. */
static void load_older_facts(struct dlock_client *c)
{
	dlock_driver_kind_capabilities_fn *fn = dlock_driver_kind_capabilities_of(c->driver);
	dlock_driver_capabilities_of(c->driver)(c->backend, &c->caps);
	for (int k = 0; k < DLOCK_KINDS; k++) {
		c->kinds[k] = (dlock_kind_caps){ 0 };
		if (fn)
			fn(c->backend, (dlock_lock_kind)k, &c->kinds[k]);
	}
	c->kinds[DLOCK_KIND_MUTEX].supported = 1; /* every driver has mutexes */
}

void dlock_facts_load(struct dlock_client *c)
{
	if (dlock_driver_feature_of(c->driver))
		load_facts(c);
	else
		load_older_facts(c);
	dlock_kind_caps *sem = &c->kinds[DLOCK_KIND_SEMAPHORE];
	if (sem->supported) {
		if (sem->order != DLOCK_SEMAPHORE_FIFO)
			sem->order = DLOCK_SEMAPHORE_UNORDERED;
		if (!sem->slots) /* a token without a slot would refuse the other live permits */
			sem->read_fencing = DLOCK_FENCING_NONE;
	}
}

/* ------------------------------------------------------------ answering */

/* 1 when the driver can answer codes the core cannot: feature() (version 7) or the control door (2 to 6). */
static int driver_answers(const struct dlock_client *c)
{
	return dlock_driver_feature_of(c->driver) || dlock_driver_control_of(c->driver);
}

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
		if (dlock_driver_proclaim_of(c->driver) && driver_answers(c))
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
	case DLOCK_FEATURE_LOOP_NATIVE:
		/* Inline drivers run on the loop; the others' calls run on worker threads of a loop client. */
		*value = dlock_driver_is_inline(c->driver);
		return 1;
	case DLOCK_FEATURE_LOOP_RENEWS: /* what a loop client's background runs on (client.c, c->loop_bg) */
		*value = dlock_driver_is_inline(c->driver) || dlock_driver_loop_io_for(c->driver, c->backend);
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
	case DLOCK_FEATURE_LOOP_NATIVE: return "loop-native";
	case DLOCK_FEATURE_LOOP_RENEWS: return "loop-renews";
	}
	return "unknown";
}

static dlock_status unknown_locked(struct dlock_client *c, dlock_feature f)
{
	char buf[160];
	snprintf(buf, sizeof buf, "feature %d is not known to this library or to %s://", (int)f, c->driver->scheme);
	return dlock_client_fail_locked(c, DLOCK_ENOTSUP, buf);
}

/* Ask the driver for `f`: feature() from version 7 (DLOCK_OK or DLOCK_ENOTSUP), else the control door. */
static dlock_status ask_driver(struct dlock_client *c, dlock_feature f, int64_t *value, dlock_error *err)
{
	dlock_driver_feature_fn *feature = dlock_driver_feature_of(c->driver);
	if (feature) {
		dlock_fact fact = { 0, NULL };
		dlock_status st = feature(c->backend, DLOCK_KIND_MUTEX, (int)f, &fact);
		*value = fact.value;
		return st == DLOCK_OK ? DLOCK_OK : DLOCK_ENOTSUP;
	}
	struct dlock_feature_query q = { .feature = (int)f, .value = 0 };
	dlock_status st = dlock_driver_control_of(c->driver)(c->backend, NULL, DLOCK_CTL_FEATURE, &q, err);
	*value = q.value;
	return st;
}

dlock_status dlock_client_feature(dlock_client *c, dlock_feature f, int64_t *value)
{
	if (!c)
		return DLOCK_EINVAL;
	if (!value)
		return dlock_client_fail(c, DLOCK_EINVAL, "dlock_client_feature: value must not be NULL");
	dlock_status unopened = dlock_seam_refuse_unopened(c, "dlock_client_feature");
	if (unopened != DLOCK_OK)
		return unopened;
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
	if (!driver_answers(c) || (int)f >= DLOCK_FACT_FIRST) { /* the contract's own facts are not an application's */
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

	int64_t answer = 0;
	dlock_error err = { "" };
	dlock_status st = ask_driver(c, f, &answer, &err);

	pthread_mutex_lock(&c->mu);
	c->inflight--;
	pthread_cond_broadcast(&c->cond);
	if (st == DLOCK_OK)
		*value = answer;
	else if (st == DLOCK_ENOTSUP && core_default(c, f, value))
		st = DLOCK_OK;
	else if (st == DLOCK_ENOTSUP)
		unknown_locked(c, f);
	else
		dlock_client_fail_locked(c, st, err.msg[0] ? err.msg : dlock_strerror(st));
	pthread_mutex_unlock(&c->mu);
	return st;
}
