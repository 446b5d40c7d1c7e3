/*
 * Status text, capability names, driver error messages and durations.
 * Everything here is a pure function of its arguments.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dlock/sys/driver.h"

const char *dlock_version(void)
{
	return DLOCK_VERSION_STRING;
}

/* Both tables come from the one X-macro, so they cannot drift from the enum. */
static const char *const status_text[] = {
#define DLOCK_STATUS_TEXT_(name, text) text,
	DLOCK_STATUS_MAP(DLOCK_STATUS_TEXT_)
#undef DLOCK_STATUS_TEXT_
};

static const char *const status_names[] = {
#define DLOCK_STATUS_NAME_(name, text) #name,
	DLOCK_STATUS_MAP(DLOCK_STATUS_NAME_)
#undef DLOCK_STATUS_NAME_
};

_Static_assert(sizeof status_text / sizeof status_text[0] == DLOCK_STATUS_COUNT_,
               "one text per status");

/* A status from a bad integer is out of range, negative ones included. */
static int status_known(dlock_status status)
{
	return (int)status >= 0 && (int)status < DLOCK_STATUS_COUNT_;
}

const char *dlock_strerror(dlock_status status)
{
	return status_known(status) ? status_text[status] : "unknown status";
}

const char *dlock_status_name(dlock_status status)
{
	return status_known(status) ? status_names[status] : "UNKNOWN";
}

/* ------------------------------------------------------- capability names */

/*
 * The enums are switched on rather than indexed so that a value cast from
 * a bad integer still yields a static string.
 */
const char *dlock_consistency_name(dlock_consistency c)
{
	switch (c) {
	case DLOCK_CONSISTENCY_LOCAL:
		return "local";
	case DLOCK_CONSISTENCY_CP:
		return "CP";
	case DLOCK_CONSISTENCY_AP:
		return "AP";
	}
	return "unknown";
}

const char *dlock_fencing_name(dlock_fencing f)
{
	switch (f) {
	case DLOCK_FENCING_NONE:
		return "none";
	case DLOCK_FENCING_STRICT:
		return "strict";
	case DLOCK_FENCING_CONDITIONAL:
		return "conditional";
	}
	return "unknown";
}

const char *dlock_lease_kind_name(dlock_lease_kind k)
{
	switch (k) {
	case DLOCK_LEASE_TTL:
		return "ttl";
	case DLOCK_LEASE_SESSION:
		return "session";
	}
	return "unknown";
}

const char *dlock_wakeup_name(dlock_wakeup w)
{
	switch (w) {
	case DLOCK_WAKEUP_NOTIFY:
		return "notify";
	case DLOCK_WAKEUP_SERVER_QUEUE:
		return "server-queue";
	case DLOCK_WAKEUP_POLL:
		return "poll";
	}
	return "unknown";
}

const char *dlock_scope_name(dlock_scope s)
{
	switch (s) {
	case DLOCK_SCOPE_PROCESS:
		return "process";
	case DLOCK_SCOPE_HOST:
		return "host";
	case DLOCK_SCOPE_NETWORK:
		return "network";
	}
	return "unknown";
}

/* ------------------------------------------------------------ error text */

dlock_status dlock_error_set(dlock_error *err, dlock_status status, const char *fmt, ...)
{
	if (!err)
		return status;
	if (!fmt) {
		err->msg[0] = '\0';
		return status;
	}
	va_list ap;
	va_start(ap, fmt);
	/* vsnprintf truncates and always terminates: a long detail is cut, not lost. */
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	return status;
}

/* ------------------------------------------------------------- durations */

/* Milliseconds per unit, or -1 for an unknown unit.  "" is the bare number. */
static int64_t unit_ms(const char *unit, int64_t bare_unit_ms)
{
	if (unit[0] == '\0')
		return bare_unit_ms;
	if (strcmp(unit, "ms") == 0)
		return 1;
	if (strcmp(unit, "s") == 0)
		return 1000;
	if (strcmp(unit, "m") == 0)
		return INT64_C(60) * 1000;
	if (strcmp(unit, "h") == 0)
		return INT64_C(60) * 60 * 1000;
	return -1;
}

/*
 * ceil(0.F * mult) for the fraction digits [f, end): the digits times mult,
 * done by hand from the last digit up, so that no digit is lost to a
 * binary fraction.  The carry stays below mult, so nothing overflows when
 * mult <= INT64_MAX / 10.
 */
static int64_t fraction_ms(const char *f, const char *end, int64_t mult)
{
	int64_t carry = 0;
	int below = 0; /* a digit below a millisecond is not 0 */
	for (const char *p = end; p > f; p--) {
		carry += (p[-1] - '0') * mult;
		below |= carry % 10 != 0;
		carry /= 10;
	}
	return carry + below;
}

dlock_status dlock_duration_parse(const char *text, int64_t bare_unit_ms, int64_t *out_ms)
{
	if (!text || !out_ms || bare_unit_ms <= 0)
		return DLOCK_EINVAL;
	/*
	 * Only digits may start the text: this one test rejects "", signs,
	 * leading spaces and ".5".  Digits are compared by value rather than
	 * with isdigit() so that the locale cannot widen what is accepted.
	 */
	const char *p = text;
	if (*p < '0' || *p > '9')
		return DLOCK_EINVAL;
	int64_t n = 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		int d = *p - '0';
		if (n > (INT64_MAX - d) / 10)
			return DLOCK_EINVAL;
		n = n * 10 + d;
	}
	/* A fraction: "." and at least one digit ("1.5s"; not "1." nor "1.2.3"). */
	const char *frac = NULL, *frac_end = NULL;
	if (*p == '.') {
		frac = frac_end = p + 1;
		while (*frac_end >= '0' && *frac_end <= '9')
			frac_end++;
		if (frac_end == frac)
			return DLOCK_EINVAL;
		p = frac_end;
	}
	int64_t mult = unit_ms(p, bare_unit_ms);
	if (mult <= 0 || n > INT64_MAX / mult)
		return DLOCK_EINVAL;
	int64_t ms = n * mult;
	if (frac) {
		/* Rounded up to a whole millisecond: "0.0001s" is 1 ms, not 0. */
		if (mult > INT64_MAX / 10)
			return DLOCK_EINVAL;
		int64_t extra = fraction_ms(frac, frac_end, mult);
		if (ms > INT64_MAX - extra)
			return DLOCK_EINVAL;
		ms += extra;
	}
	*out_ms = ms;
	return DLOCK_OK;
}
