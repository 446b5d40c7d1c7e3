/*
 * The table of built-in drivers for dlock_show_cli, a build of the dlock
 * command for test_cli.sh: it takes the place of the generated
 * builtin_drivers.c and adds "show://", a driver with no server whose
 * inspection answers fixed, hostile holders, so that the verbs' output
 * (escaping, JSON, fields left unknown, unnamed locks) is checked on every
 * byte whatever the backends of the build can see.
 *
 *   show://x          inspect NAME: held by two holders when NAME starts
 *                     with "held", else free; list: three locks, one with
 *                     hostile bytes in every string and one without a
 *                     name; break NAME: 2 holders for "held...", else 0
 *   show://x?denied   break answers DLOCK_EPERM
 *
 * Acquiring is refused (DLOCK_ENOTSUP): no lock is ever held.  No state.
 */
#include "dlock/sys/driver.h"

#include <string.h>

extern const dlock_driver dlock_mem_driver;
extern const dlock_driver dlock_file_driver;

/* Every string a holder has, with a terminal escape, a bell, a newline, a
 * backslash, a quote and a byte that is not UTF-8. */
static const char hostile[] = "id\x1b[31m\a\n\\\"\xff-\xc3\xa9";
/* The owner record a driver stores: identity, host and pid percent-encoded. */
static const char owner[] = "id=job%201&host=web-1&pid=4242";

struct show {
	int denied;
};

static dlock_status show_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	static struct show plain = {0}, denied = {1};

	(void)host;
	(void)err;
	*backend = &plain;
	for (size_t i = 0; i < uri->nparams; i++)
		if (strcmp(uri->params[i].key, "denied") == 0)
			*backend = &denied;
	return DLOCK_OK;
}

static void show_close(void *backend)
{
	(void)backend;
}

/* Local, no token, polled; inspection sees everything, breaking ends sessions. */
static dlock_status show_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	(void)backend;
	(void)kind;
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "show"; return DLOCK_OK;
	case DLOCK_FEATURE_CONSISTENCY: out->value = DLOCK_CONSISTENCY_LOCAL; return DLOCK_OK;
	case DLOCK_FEATURE_FENCING: out->value = DLOCK_FENCING_NONE; return DLOCK_OK;
	case DLOCK_FEATURE_LEASE: out->value = DLOCK_LEASE_SESSION; return DLOCK_OK;
	case DLOCK_FEATURE_WAKEUP: out->value = DLOCK_WAKEUP_POLL; return DLOCK_OK;
	case DLOCK_FEATURE_SCOPE: out->value = DLOCK_SCOPE_PROCESS; return DLOCK_OK;
	case DLOCK_FEATURE_INSPECT:
		out->value = DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_LEASE |
		             DLOCK_INSPECT_TOKEN | DLOCK_INSPECT_WAITERS | DLOCK_INSPECT_LIST | DLOCK_INSPECT_NAMES |
		             DLOCK_INSPECT_SESSION;
		return DLOCK_OK;
	case DLOCK_FEATURE_BREAK: out->value = DLOCK_BREAK_SESSION; return DLOCK_OK;
	default: return DLOCK_ENOTSUP;
	}
}

static int show_knows_param(const char *key)
{
	return strcmp(key, "denied") == 0;
}

static dlock_status show_lock_init(void *backend, void *lk, const char *name, size_t len, dlock_error *err)
{
	(void)backend;
	(void)lk;
	(void)name;
	(void)len;
	(void)err;
	return DLOCK_OK;
}

static dlock_status show_try_acquire(void *backend, void *lk, int64_t lease_ms, dlock_wait *w,
                                     dlock_retry *retry, dlock_acquired *out, dlock_error *err)
{
	(void)backend;
	(void)lk;
	(void)lease_ms;
	(void)w;
	(void)retry;
	(void)out;
	return dlock_error_set(err, DLOCK_ENOTSUP, "show:// holds no lock");
}

static dlock_status show_release(void *backend, void *lk, dlock_error *err)
{
	(void)backend;
	(void)lk;
	return dlock_error_set(err, DLOCK_ENOTHELD, "show:// holds no lock");
}

/* NAME held by a reader known to the last byte and one known only by its owner record. */
static dlock_status describe(dlock_info *info, const char *name, size_t len)
{
	dlock_holder known = DLOCK_HOLDER_INIT, recorded = DLOCK_HOLDER_INIT;
	dlock_status st = dlock_info_lock(info, name, len, "show:\x1b]0;title\a", DLOCK_KIND_RWLOCK, 1, 3);

	if (st != DLOCK_OK)
		return st;
	known.identity = hostile;
	known.host = hostile;
	known.pid = 1234;
	known.acquired_ms = 1764082651123; /* 2025-11-25T14:57:31.123Z */
	known.lease_left_ms = 29500;
	known.token = 18446744073709551615u;
	known.mode = DLOCK_MODE_SHARED;
	known.session = hostile;
	st = dlock_info_holder(info, &known, NULL, 0);
	if (st != DLOCK_OK)
		return st;
	recorded.mode = DLOCK_MODE_SHARED;
	return dlock_info_holder(info, &recorded, owner, sizeof owner - 1);
}

static dlock_status show_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err)
{
	(void)backend;
	(void)err;
	if (len >= 4 && memcmp(name, "held", 4) == 0)
		return describe(info, name, len);
	return DLOCK_OK;
}

static dlock_status show_list(void *backend, dlock_info *info, dlock_error *err)
{
	static const char name[] = "held-\x1b[2J\t\xff";
	dlock_holder h = DLOCK_HOLDER_INIT;
	dlock_status st = describe(info, name, sizeof name - 1);

	(void)backend;
	(void)err;
	if (st == DLOCK_OK)
		st = describe(info, "held-plain", 10);
	if (st == DLOCK_OK)
		st = dlock_info_lock(info, NULL, 0, "show:unnamed", DLOCK_KIND_MUTEX, 1, -1);
	if (st == DLOCK_OK)
		st = dlock_info_holder(info, &h, NULL, 0);
	return st;
}

static dlock_status show_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	const struct show *s = backend;

	if (s->denied)
		return dlock_error_set(err, DLOCK_EPERM, "show:// may not break '%.*s'", (int)len, name);
	*broken = len >= 4 && memcmp(name, "held", 4) == 0 ? 2 : 0;
	return DLOCK_OK;
}

static const dlock_driver show_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "show",
	.lock_size = 1,
	.open = show_open,
	.close = show_close,
	.feature = show_feature,
	.knows_param = show_knows_param,
	.lock_init = show_lock_init,
	.release = show_release,
	.try_acquire = show_try_acquire,
	.inspect = show_inspect,
	.list = show_list,
	.break_lock = show_break,
};

const dlock_driver *const dlock_builtin_drivers[] = {
	&dlock_mem_driver,
	&dlock_file_driver,
	&show_driver,
	NULL,
};
