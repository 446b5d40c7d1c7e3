/*
 * Kinds of lock: what the client's driver does with each (dlock_kind_caps,
 * asked once after open), and the names of the read-write policies and
 * semaphore orders.
 *
 * A driver older than ABI version 3, or one without kind_capabilities(),
 * has mutexes only: the core then answers DLOCK_ENOTSUP for every other
 * kind and DLOCK_RWLOCK_NONE for DLOCK_FEATURE_RWLOCK.  The answers are
 * kept in the client (c->kinds) and never change; they are read under
 * c->mu or before the client is handed out.
 */
#include "internal.h"
#include "registry.h"

void dlock_kind_caps_load(struct dlock_client *c)
{
	dlock_driver_kind_capabilities_fn *fn = dlock_driver_kind_capabilities_of(c->driver);
	for (int k = 0; k < DLOCK_KINDS; k++) {
		dlock_kind_caps caps = { 0 };
		if (fn)
			fn(c->backend, (dlock_lock_kind)k, &caps);
		if (k == DLOCK_KIND_MUTEX)
			caps.supported = 1; /* every driver has mutexes */
		if (k == DLOCK_KIND_SEMAPHORE && caps.supported) {
			if (caps.order != DLOCK_SEMAPHORE_FIFO)
				caps.order = DLOCK_SEMAPHORE_UNORDERED;
			if (!caps.slots) /* a token without a slot would refuse the other live permits */
				caps.read_fencing = DLOCK_FENCING_NONE;
		}
		c->kinds[k] = caps;
	}
}

const char *dlock_semaphore_order_name(dlock_semaphore_order o)
{
	switch (o) {
	case DLOCK_SEMAPHORE_NONE: return "none";
	case DLOCK_SEMAPHORE_FIFO: return "fifo";
	case DLOCK_SEMAPHORE_UNORDERED: return "unordered";
	}
	return "unknown";
}

const char *dlock_rwlock_policy_name(dlock_rwlock_policy p)
{
	switch (p) {
	case DLOCK_RWLOCK_NONE: return "none";
	case DLOCK_RWLOCK_WRITER_FIRST: return "writer-first";
	case DLOCK_RWLOCK_NO_PREFERENCE: return "no-preference";
	}
	return "unknown";
}
