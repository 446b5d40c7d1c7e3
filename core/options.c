/*
 * Acquire options of every version, read as the current one: the one place
 * that knows what each version's fields meant (DLOCK_ACQUIRE_OPTIONS_VERSION).
 *
 * Versions 1 to 4 took a negative `renew` or `fencing` for the URI's, 0 for
 * off and any other value for on, and a hold bound of -1 for the URI's, 0
 * for none; version 5 has the same layout with those fields renamed, and 0
 * there is the URI's (DLOCK_OFF and DLOCK_HOLD_NONE say off and none).  A
 * binary built against an older header keeps its meanings.  Only the fields
 * of the caller's version are read: an older caller's struct ends before the
 * others, which keep their defaults.
 *
 * Pure functions: thread-safe, no allocation.  Errors: a status and a static
 * message in *why.
 */
#include <stddef.h>
#include <string.h>

#include "internal.h"

/* Bytes of the caller's struct, per version: each version ends where the next one's fields begin. */
static const size_t size_of[DLOCK_ACQUIRE_OPTIONS_VERSION + 1] = {
	0,
	offsetof(dlock_acquire_options, fence),
	offsetof(dlock_acquire_options, mode),
	offsetof(dlock_acquire_options, min_hold),
	sizeof(dlock_acquire_options),
	sizeof(dlock_acquire_options),
};

/* `renew` or `fencing` of versions 1 to 4 as a dlock_switch. */
static int switch_of_v4(int v)
{
	return v < 0 ? DLOCK_DEFAULT : v == 0 ? DLOCK_OFF : DLOCK_ON;
}

/* `min_hold_ms` or `max_hold_ms` of version 4 as a bound of version 5; -1 for a value that was wrong then. */
static int64_t hold_of_v4(int64_t v)
{
	return v == -1 ? 0 : v == 0 ? DLOCK_HOLD_NONE : v < 0 ? -1 : v;
}

static int switch_ok(int v)
{
	return v == DLOCK_DEFAULT || v == DLOCK_ON || v == DLOCK_OFF;
}

static int hold_ok(int64_t v)
{
	return v >= 0 || v == DLOCK_HOLD_NONE;
}

dlock_status dlock_options_read(const dlock_acquire_options *in, dlock_acquire_options *out, const char **why)
{
	const dlock_acquire_options init = DLOCK_ACQUIRE_OPTIONS_INIT;
	*out = init;
	if (!in)
		return DLOCK_OK;
	if (in->version < 1 || in->version > DLOCK_ACQUIRE_OPTIONS_VERSION) {
		*why = "dlock_acquire: options version is not 1 to DLOCK_ACQUIRE_OPTIONS_VERSION";
		return DLOCK_EVERSION;
	}
	memcpy(out, in, size_of[in->version]);
	out->version = DLOCK_ACQUIRE_OPTIONS_VERSION;
	if (in->version <= 4) {
		out->renewal = switch_of_v4(in->renewal);
		if (in->version >= 2)
			out->fence = switch_of_v4(in->fence);
		if (in->version == 4) {
			out->min_hold = hold_of_v4(in->min_hold);
			out->max_hold = hold_of_v4(in->max_hold);
			if (!hold_ok(out->min_hold) || !hold_ok(out->max_hold)) {
				*why = "dlock_acquire: min_hold_ms and max_hold_ms (options version 4) are -1 (the URI's), "
				       "0 (none) or a duration";
				return DLOCK_EINVAL;
			}
		}
	}
	if (!switch_ok(out->renewal) || !switch_ok(out->fence)) {
		*why = "dlock_acquire: renewal and fence are 0 (the URI's), DLOCK_ON or DLOCK_OFF";
		return DLOCK_EINVAL;
	}
	if (!hold_ok(out->min_hold) || !hold_ok(out->max_hold)) {
		*why = "dlock_acquire: min_hold and max_hold are 0 (the URI's), DLOCK_HOLD_NONE or a duration";
		return DLOCK_EINVAL;
	}
	return DLOCK_OK;
}
