/*
 * Kinds of lock: the names of the read-write policies and semaphore
 * orders.  What the client's driver does with each kind is asked once
 * after open (feature.c, into c->kinds).
 */
#include "internal.h"

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
