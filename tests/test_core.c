/*
 * Tests of the core through a controllable driver ("ctl://"): registry
 * rules, lease renewal and expiry, lost-lock delivery, cancellation of a
 * driver blocked in a server call, per-thread error text, parameters,
 * the control door and drivers of an older ABI version.
 */
#include "dlock/dlock.h"
#include "dlock/sys/control.h"
#include "dlock/sys/driver.h"
#include "testsupport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

/* ------------------------------------------------------------ the driver */

struct ctl {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	dlock_host *host;
	uint64_t fence;
	atomic_int acquires, releases, extends, interrupts;
	atomic_int extend_status;  /* what extend() answers */
	atomic_int block_acquire;  /* acquire() blocks until interrupted */
	atomic_int in_acquire;
	atomic_int lose_in_acquire; /* acquire() reports the loss before returning */
	int interrupted;
	void *last_lk; /* state of the lock acquired last, for reports */
	/* The last control() call: its arguments. */
	int controls;
	void *control_lk;
	int control_op;
	void *control_arg;
};

/* The one control operation ctl:// knows: *(int *)arg += 1. */
#define CTL_OP_BUMP 0x7f01

struct ctl_lock {
	int held;
};

/* The test reaches the backend of the client it opened last. */
static struct ctl *last_ctl;

static dlock_status ctl_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	(void)uri;
	(void)err;
	struct ctl *b = calloc(1, sizeof *b);
	if (!b)
		return DLOCK_ENOMEM;
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cond, NULL);
	b->host = host;
	*backend = last_ctl = b;
	return DLOCK_OK;
}

static void ctl_close(void *backend)
{
	struct ctl *b = backend;
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

static void ctl_caps(void *backend, dlock_capabilities *caps)
{
	(void)backend;
	*caps = (dlock_capabilities){ .backend = "ctl", .consistency = DLOCK_CONSISTENCY_LOCAL,
	                              .fencing = DLOCK_FENCING_STRICT, .fencing_note = "", .fair = 1,
	                              .lease = DLOCK_LEASE_TTL, .wakeup = DLOCK_WAKEUP_NOTIFY,
	                              .scope = DLOCK_SCOPE_PROCESS };
}

/* The same facts, as a driver of ABI version 7 states them. */
static dlock_status ctl_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	(void)backend, (void)kind;
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "ctl"; return DLOCK_OK;
	case DLOCK_FEATURE_FENCING: out->value = DLOCK_FENCING_STRICT; return DLOCK_OK;
	case DLOCK_FEATURE_FAIR: out->value = 1; return DLOCK_OK;
	case DLOCK_FEATURE_CONSISTENCY: /* LOCAL */
	case DLOCK_FEATURE_LEASE:       /* TTL */
	case DLOCK_FEATURE_WAKEUP:      /* NOTIFY */
	case DLOCK_FEATURE_SCOPE: out->value = 0; return DLOCK_OK; /* PROCESS */
	default: return DLOCK_ENOTSUP;
	}
}

static int ctl_knows(const char *key)
{
	return strcmp(key, "knob") == 0;
}

static dlock_status ctl_init(void *backend, void *lk, const char *name, size_t len, dlock_error *err)
{
	(void)backend; (void)lk; (void)name; (void)len; (void)err;
	return DLOCK_OK;
}

static void ctl_interrupt(void *arg)
{
	struct ctl *b = arg;
	pthread_mutex_lock(&b->mu);
	b->interrupted = 1;
	b->interrupts++;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->mu);
}

/* Stands for a server call that only a cancel request ends. */
static dlock_status blocked_server_call(struct ctl *b, dlock_wait *w)
{
	dlock_wait_set_interrupt(w, ctl_interrupt, b);
	pthread_mutex_lock(&b->mu);
	b->in_acquire = 1;
	pthread_cond_broadcast(&b->cond);
	while (!b->interrupted)
		pthread_cond_wait(&b->cond, &b->mu);
	b->interrupted = 0;
	b->in_acquire = 0;
	pthread_mutex_unlock(&b->mu);
	dlock_wait_set_interrupt(w, NULL, NULL);
	return DLOCK_ECANCELED;
}

static dlock_status ctl_acquire(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_acquired *out,
                                dlock_error *err)
{
	(void)lease_ms;
	(void)err;
	struct ctl *b = backend;
	if (b->block_acquire)
		return blocked_server_call(b, w);
	b->acquires++;
	((struct ctl_lock *)lk)->held = 1;
	pthread_mutex_lock(&b->mu);
	b->last_lk = lk;
	out->token = ++b->fence;
	pthread_mutex_unlock(&b->mu);
	out->sent_ns = dlock_monotonic_ns();
	if (b->lose_in_acquire)
		dlock_report_lost(b->host, lk, DLOCK_LOST_SESSION, "session died while acquiring");
	return DLOCK_OK;
}

static dlock_status ctl_release(void *backend, void *lk, dlock_error *err)
{
	(void)err;
	struct ctl *b = backend;
	b->releases++;
	((struct ctl_lock *)lk)->held = 0;
	return DLOCK_OK;
}

static dlock_status ctl_extend(void *backend, void *lk, int64_t lease_ms, dlock_error *err)
{
	(void)lk;
	(void)lease_ms;
	struct ctl *b = backend;
	b->extends++;
	dlock_status st = (dlock_status)b->extend_status;
	return st == DLOCK_OK ? DLOCK_OK : dlock_error_set(err, st, "ctl: extend answers %s", dlock_status_name(st));
}

static dlock_status ctl_control(void *backend, void *lk, int op, void *arg, dlock_error *err)
{
	struct ctl *b = backend;
	pthread_mutex_lock(&b->mu);
	b->controls++;
	b->control_lk = lk;
	b->control_op = op;
	b->control_arg = arg;
	pthread_mutex_unlock(&b->mu);
	if (op != CTL_OP_BUMP)
		return DLOCK_ENOTSUP;
	if (lk && !((struct ctl_lock *)lk)->held)
		return dlock_error_set(err, DLOCK_ENOTHELD, "ctl: bump on a lock not held");
	++*(int *)arg;
	return DLOCK_OK;
}

/* Version-3 slots, only for the registration rules: this driver has mutexes only. */
static dlock_status ctl_init_kind(void *backend, void *lk, const char *name, size_t len, const dlock_kind_spec *spec,
                                  dlock_error *err)
{
	(void)spec;
	return ctl_init(backend, lk, name, len, err);
}

static void ctl_kind_caps(void *backend, dlock_lock_kind kind, dlock_kind_caps *caps)
{
	(void)backend;
	caps->supported = kind == DLOCK_KIND_MUTEX;
}

static const dlock_driver ctl_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "ctl",
	.lock_size = sizeof(struct ctl_lock),
	.open = ctl_open,
	.close = ctl_close,
	.feature = ctl_feature,
	.knows_param = ctl_knows,
	.lock_init = ctl_init,
	.acquire = ctl_acquire,
	.release = ctl_release,
	.extend = ctl_extend,
	.control = ctl_control,
};

/* A driver built against version 1 of the contract: its struct ends right
 * after check(), so the core must never read a control slot from it (an
 * object of this prefix type has no such slot; AddressSanitizer catches
 * a read past it). */
struct driver_v1 {
	unsigned abi_version;
	const char *scheme;
	size_t lock_size;
	dlock_driver_open_fn *open;
	dlock_driver_close_fn *close;
	dlock_driver_capabilities_fn *capabilities;
	dlock_driver_knows_param_fn *knows_param;
	dlock_driver_lock_init_fn *lock_init;
	dlock_driver_lock_fini_fn *lock_fini;
	dlock_driver_acquire_fn *acquire;
	dlock_driver_release_fn *release;
	dlock_driver_extend_fn *extend;
	dlock_driver_check_fn *check;
};
_Static_assert(sizeof(struct driver_v1) == offsetof(dlock_driver, control),
               "struct driver_v1 is the version-1 prefix of dlock_driver");

/* Built-ins that registration must refuse: a driver built for another ABI
 * version, one without a required method, one with a scheme taken. */
#define CTL_MOST_METHODS                                                       \
	.lock_size = sizeof(struct ctl_lock), .open = ctl_open, .close = ctl_close, \
	.feature = ctl_feature, .lock_init = ctl_init, .acquire = ctl_acquire

static const dlock_driver bad_abi_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION + 1,
	.scheme = "badabi",
	CTL_MOST_METHODS,
	.release = ctl_release,
};

static const dlock_driver no_release_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "norelease",
	CTL_MOST_METHODS,
};

/* Of the four non-blocking methods of version 9, one alone: all four or none. */
static dlock_status half_start(void *backend, void *lk, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                               dlock_acquired *out, dlock_error *err, dlock_call *call)
{
	(void)backend, (void)lk, (void)lease_ms, (void)w, (void)retry, (void)out, (void)call;
	return dlock_error_set(err, DLOCK_ENOTSUP, "never called");
}

static const dlock_driver half_loop_driver = {
	.abi_version = 9,
	.scheme = "halfloop",
	CTL_MOST_METHODS,
	.release = ctl_release,
	.try_acquire_start = half_start,
};

static const dlock_driver second_mem_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "mem",
	CTL_MOST_METHODS,
	.release = ctl_release,
};

static const dlock_driver good_builtin_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "ctlbuiltin",
	CTL_MOST_METHODS,
	.release = ctl_release,
};

/*
 * This program's table of built-in drivers: defined here, it takes the
 * place of the generated one (linked from the static library only when
 * nothing defines the table first), so registration meets the refused
 * ones at start-up as it would a faulty build's.
 */
extern const dlock_driver dlock_mem_driver;
extern const dlock_driver dlock_file_driver;
const dlock_driver *const dlock_builtin_drivers[] = { &dlock_mem_driver,  &dlock_file_driver,
	                                              &bad_abi_driver,    &no_release_driver,
	                                              &half_loop_driver,  &second_mem_driver,
	                                              &good_builtin_driver, NULL };

/* ------------------------------------------------------------ helpers */

struct lost_log {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int calls;
	dlock_lost_reason reason;
	dlock_status release_in_cb, close_in_cb;
	dlock_client *client;
	int do_release, do_close;
};

static void on_lost(dlock_lock *l, dlock_lost_reason reason, const char *detail, void *ud)
{
	(void)detail;
	struct lost_log *log = ud;
	dlock_status rel = log->do_release ? dlock_release(l) : DLOCK_OK;
	dlock_status cls = log->do_close ? dlock_client_close(log->client) : DLOCK_OK;
	pthread_mutex_lock(&log->mu);
	log->calls++;
	log->reason = reason;
	log->release_in_cb = rel;
	log->close_in_cb = cls;
	pthread_cond_broadcast(&log->cond);
	pthread_mutex_unlock(&log->mu);
}

static void lost_log_init(struct lost_log *log)
{
	memset(log, 0, sizeof *log);
	pthread_mutex_init(&log->mu, NULL);
	pthread_cond_init(&log->cond, NULL);
}

/* Wait up to `ms` for at least `n` callbacks; returns the count. */
static int lost_wait(struct lost_log *log, int n, int ms)
{
	int64_t end = dlock_test_now_ms() + ms;
	pthread_mutex_lock(&log->mu);
	while (log->calls < n && dlock_test_now_ms() < end) {
		pthread_mutex_unlock(&log->mu);
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL); /* polling a counter the callback thread sets */
		pthread_mutex_lock(&log->mu);
	}
	int calls = log->calls;
	pthread_mutex_unlock(&log->mu);
	return calls;
}

static int await_counter(atomic_int *counter, int n, int ms)
{
	int64_t end = dlock_test_now_ms() + ms;
	while (*counter < n && dlock_test_now_ms() < end) {
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
	return *counter;
}

static dlock_client *open_ctl(const char *uri)
{
	dlock_client *c = NULL;
	char err[256];
	CU_ASSERT_EQUAL_FATAL(dlock_client_open(&c, uri, NULL, err, sizeof err), DLOCK_OK);
	return c;
}

static dlock_acquire_options opts_lease(int64_t lease_ms, int renew, struct lost_log *log)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.lease_ms = lease_ms;
	o.renewal = dlock_test_switch(renew);
	o.on_lost = log ? on_lost : NULL;
	o.lost_userdata = log;
	return o;
}

/* ------------------------------------------------------------ tests */

/* Versions 1 through the current one register; later ones do not. */
static void test_registry_versions(void)
{
	dlock_driver d = ctl_driver;
	d.scheme = "ctlv5";
	d.abi_version = DLOCK_DRIVER_ABI_VERSION + 1;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EVERSION);
	d.abi_version = 0;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EVERSION);
	CU_ASSERT_PTR_NULL(strstr(dlock_backends(), "ctlv5"));
	/* Version 3: kind_capabilities and lock_init_kind come together or not at all. */
	d.scheme = "ctlkinds";
	d.abi_version = 3;
	d.capabilities = ctl_caps;
	d.lock_init_kind = ctl_init_kind;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	d.lock_init_kind = NULL;
	d.kind_capabilities = ctl_kind_caps;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(strstr(dlock_backends(), "ctlkinds"));
	/* Version 7: the facts come from feature(); capabilities() does not stand in for it. */
	d = ctl_driver;
	d.scheme = "ctlnofeature";
	d.feature = NULL;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	d.capabilities = ctl_caps;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	/* Neither lock_init nor lock_init_kind: refused in every version. */
	d = ctl_driver;
	d.scheme = "ctlnoinit";
	d.lock_init = NULL;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	CU_ASSERT_PTR_NULL(strstr(dlock_backends(), "ctlnofeature"));
	CU_ASSERT_PTR_NULL(strstr(dlock_backends(), "ctlnoinit"));
}

/* Drivers with lock_init_kind and no lock_init: of version 7, and of version 3 with kind_capabilities. */
static const dlock_driver init_kind_v7_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "ctlinitkind",
	.lock_size = sizeof(struct ctl_lock),
	.open = ctl_open,
	.close = ctl_close,
	.feature = ctl_feature,
	.lock_init_kind = ctl_init_kind,
	.acquire = ctl_acquire,
	.release = ctl_release,
};

static const dlock_driver init_kind_v3_driver = {
	.abi_version = 3,
	.scheme = "ctlinitkind3",
	.lock_size = sizeof(struct ctl_lock),
	.open = ctl_open,
	.close = ctl_close,
	.capabilities = ctl_caps,
	.kind_capabilities = ctl_kind_caps,
	.lock_init_kind = ctl_init_kind,
	.acquire = ctl_acquire,
	.release = ctl_release,
};

/* lock_init is optional where lock_init_kind exists: the core never calls it there. */
static void test_lock_init_optional(void)
{
	static const char *uris[] = { "ctlinitkind://x", "ctlinitkind3://x" };
	CU_ASSERT_EQUAL_FATAL(dlock_register_driver(&init_kind_v7_driver), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_register_driver(&init_kind_v3_driver), DLOCK_OK);
	for (int i = 0; i < 2; i++) {
		dlock_client *c = open_ctl(uris[i]);
		dlock_capabilities caps;
		dlock_lock *l = NULL, *rw = NULL;
		dlock_acquire_options o = opts_lease(10000, 0, NULL);
		CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
		CU_ASSERT_STRING_EQUAL(caps.backend, "ctl");
		CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_STRICT);
		CU_ASSERT_EQUAL(caps.fair, 1);
		CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "init-kind", &l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_rwlock_new(c, "init-kind-rw", &rw), DLOCK_ENOTSUP); /* mutexes only, either way */
		dlock_lock_free(l);
		dlock_client_close(c);
	}
}

/* A version-1 driver works, and its door is closed without reading past it. */
static void test_driver_v1(void)
{
	struct driver_v1 *v1 = malloc(sizeof *v1); /* kept by the registry for good */
	CU_ASSERT_PTR_NOT_NULL_FATAL(v1);
	*v1 = (struct driver_v1){
		.abi_version = 1,
		.scheme = "ctlv1",
		.lock_size = sizeof(struct ctl_lock),
		.open = ctl_open,
		.close = ctl_close,
		.capabilities = ctl_caps,
		.lock_init = ctl_init,
		.acquire = ctl_acquire,
		.release = ctl_release,
		.extend = ctl_extend,
	};
	CU_ASSERT_EQUAL_FATAL(dlock_register_driver((const dlock_driver *)(const void *)v1), DLOCK_OK);

	dlock_client *c = open_ctl("ctlv1://x");
	dlock_lock *l = NULL;
	dlock_acquire_options o = opts_lease(10000, 0, NULL);
	int x = 0;
	size_t records = 99;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "v1", &l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_control(c, CTL_OP_BUMP, &x), DLOCK_ENOTSUP);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "not supported by ctlv1://"));
	CU_ASSERT_EQUAL(dlock_lock_control(l, CTL_OP_BUMP, &x), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(x, 0);
	/* The core's own operations do not depend on the driver's version. */
	CU_ASSERT_EQUAL(dlock_client_control(c, DLOCK_CTL_ERRMSG_RECORDS, &records), DLOCK_OK);
	CU_ASSERT_EQUAL(records, 1);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* The door passes the client, the handle's state, op and arg to control(). */
static void test_control_door(void)
{
	dlock_client *c = open_ctl("ctl://door");
	struct ctl *b = last_ctl;
	dlock_lock *l = NULL;
	dlock_acquire_options o = opts_lease(10000, 0, NULL);
	int x = 0;
	size_t records = 99;

	CU_ASSERT_EQUAL(dlock_client_control(c, CTL_OP_BUMP, &x), DLOCK_OK);
	CU_ASSERT_EQUAL(x, 1);
	CU_ASSERT_EQUAL(b->controls, 1);
	CU_ASSERT_PTR_NULL(b->control_lk);
	CU_ASSERT_EQUAL(b->control_op, CTL_OP_BUMP);
	CU_ASSERT_PTR_EQUAL(b->control_arg, &x);

	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "door", &l), DLOCK_OK);
	/* The driver's failure and its text. */
	CU_ASSERT_EQUAL(dlock_lock_control(l, CTL_OP_BUMP, &x), DLOCK_ENOTHELD);
	CU_ASSERT_STRING_EQUAL(dlock_client_errmsg(c), "ctl: bump on a lock not held");
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_lock_control(l, CTL_OP_BUMP, &x), DLOCK_OK);
	CU_ASSERT_EQUAL(x, 2);
	CU_ASSERT_PTR_EQUAL(b->control_lk, b->last_lk);
	CU_ASSERT_PTR_NOT_NULL(b->control_lk);

	/* An operation the driver does not know; another backend's code. */
	CU_ASSERT_EQUAL(dlock_client_control(c, 0x5a01, &x), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(b->control_op, 0x5a01);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "0x5a01 is not supported by ctl://"));
	CU_ASSERT_EQUAL(dlock_lock_control(l, 0x5001, &x), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(x, 2);

	/* Core operations are answered by the core, never passed on. */
	int before = b->controls;
	CU_ASSERT_EQUAL(dlock_client_control(c, DLOCK_CTL_ERRMSG_RECORDS, &records), DLOCK_OK);
	CU_ASSERT_EQUAL(records, 1);
	CU_ASSERT_EQUAL(dlock_client_control(c, DLOCK_CTL_CORE_LAST, &records), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(dlock_lock_control(l, DLOCK_CTL_ERRMSG_RECORDS, &records), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(b->controls, before);

	/* NULL arguments. */
	CU_ASSERT_EQUAL(dlock_client_control(NULL, CTL_OP_BUMP, &x), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_client_control(c, CTL_OP_BUMP, NULL), DLOCK_EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "arg must not be NULL"));
	CU_ASSERT_EQUAL(dlock_lock_control(NULL, CTL_OP_BUMP, &x), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_lock_control(l, CTL_OP_BUMP, NULL), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(b->controls, before);
	CU_ASSERT_EQUAL(x, 2);

	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_client_close(c);
	/* After close: refused, the driver is not called (it is gone). */
	CU_ASSERT_EQUAL(dlock_lock_control(l, CTL_OP_BUMP, &x), DLOCK_ECLOSED);
	dlock_lock_free(l);
}

static void test_registry_rules(void)
{
	dlock_driver d = ctl_driver;
	d.scheme = "ctl2";
	d.abi_version = DLOCK_DRIVER_ABI_VERSION + 1;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EVERSION);
	d.abi_version = DLOCK_DRIVER_ABI_VERSION;
	d.acquire = NULL;
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	d.acquire = ctl_acquire;
	d.scheme = "Bad Scheme";
	CU_ASSERT_EQUAL(dlock_register_driver(&d), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_register_driver(NULL), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_register_driver(&ctl_driver), DLOCK_EEXIST);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_backends(), "mem"));
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_backends(), "file"));
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_backends(), "ctl"));
}

/* The refusal of a built-in driver is kept: open says why, and it is listed. */
static void test_refused_builtins(void)
{
	const char *scheme = NULL, *reason = NULL;
	dlock_client *c = NULL;
	char err[512] = "";
	size_t n = 0;

	CU_ASSERT_EQUAL(dlock_backend_refused(0, NULL, &reason), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_client_open(&c, "badabi://x?ttl=1s", NULL, err, sizeof err), DLOCK_ENOBACKEND);
	CU_ASSERT_PTR_NULL(c);
	CU_ASSERT_PTR_NOT_NULL(
	        strstr(err, "driver 'badabi' refused at registration: ABI version 10, this library accepts 1 to 9"));
	CU_ASSERT_EQUAL(dlock_client_open(&c, "norelease://x", NULL, err, sizeof err), DLOCK_ENOBACKEND);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "driver 'norelease' refused at registration: "));
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "'release'"));
	CU_ASSERT_EQUAL(dlock_client_open(&c, "halfloop://x", NULL, err, sizeof err), DLOCK_ENOBACKEND);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "all four or none"));
	/* An unknown scheme still says there is no such backend. */
	CU_ASSERT_EQUAL(dlock_client_open(&c, "nosuch://x", NULL, err, sizeof err), DLOCK_ENOBACKEND);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "no backend for scheme 'nosuch'"));
	/* The duplicate is refused, the first "mem" still serves, the good one is added. */
	CU_ASSERT_EQUAL(dlock_client_open(&c, "mem://x", NULL, err, sizeof err), DLOCK_OK);
	dlock_client_close(c);
	CU_ASSERT_EQUAL(dlock_client_open(&c, "ctlbuiltin://x", NULL, err, sizeof err), DLOCK_OK);
	dlock_client_close(c);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_backends(), "ctlbuiltin"));
	CU_ASSERT_PTR_NULL(strstr(dlock_backends(), "badabi"));

	while (dlock_backend_refused(n, &scheme, &reason) == DLOCK_OK) {
		if (n == 0) {
			CU_ASSERT_STRING_EQUAL(scheme, "badabi");
			CU_ASSERT_STRING_EQUAL(reason, "ABI version 10, this library accepts 1 to 9");
		} else if (n == 3) {
			CU_ASSERT_STRING_EQUAL(scheme, "mem");
			CU_ASSERT_PTR_NOT_NULL(strstr(reason, "'mem'"));
		}
		n++;
	}
	CU_ASSERT_EQUAL(n, 4);
}

static void test_params_checked(void)
{
	dlock_client *c = NULL;
	char err[256] = "";
	CU_ASSERT_EQUAL(dlock_client_open(&c, "ctl://x?knob=1", NULL, err, sizeof err), DLOCK_OK);
	dlock_client_close(c);
	CU_ASSERT_EQUAL(dlock_client_open(&c, "ctl://x?knub=1", NULL, err, sizeof err), DLOCK_EURI);
	CU_ASSERT_PTR_NULL(c);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "knub"));
}

static void test_renewal_keeps_lock(void)
{
	struct lost_log log;
	lost_log_init(&log);
	dlock_client *c = open_ctl("ctl://renew");
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &l), DLOCK_OK);
	dlock_acquire_options o = opts_lease(150, 1, &log);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT(await_counter(&last_ctl->extends, 4, 5000) >= 4);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(log.calls, 0);
	dlock_client_stats st;
	dlock_client_get_stats(c, &st);
	CU_ASSERT(st.renewals >= 4);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void test_expiry_without_renewal(void)
{
	struct lost_log log;
	lost_log_init(&log);
	dlock_client *c = open_ctl("ctl://expire");
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &l), DLOCK_OK);
	dlock_acquire_options o = opts_lease(100, 0, &log);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(lost_wait(&log, 1, 5000), 1);
	CU_ASSERT_EQUAL(log.reason, DLOCK_LOST_EXPIRED);
	CU_ASSERT_EQUAL(last_ctl->extends, 0);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_extend(l, 0), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(lost_wait(&log, 2, 200), 1); /* exactly once */
	dlock_client_stats st;
	dlock_client_get_stats(c, &st);
	CU_ASSERT_EQUAL(st.lost, 1);
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void test_renewal_failing_declares_loss(void)
{
	struct lost_log log;
	lost_log_init(&log);
	dlock_client *c = open_ctl("ctl://failing");
	last_ctl->extend_status = DLOCK_ECONNECT;
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &l), DLOCK_OK);
	dlock_acquire_options o = opts_lease(200, 1, &log);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(lost_wait(&log, 1, 5000), 1);
	CU_ASSERT(dlock_test_now_ms() - t0 >= 150); /* not before the validity ran out */
	CU_ASSERT_EQUAL(log.reason, DLOCK_LOST_EXPIRED);
	CU_ASSERT(last_ctl->extends >= 2); /* it kept trying */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void test_renewal_not_held_is_taken(void)
{
	struct lost_log log;
	lost_log_init(&log);
	dlock_client *c = open_ctl("ctl://taken");
	last_ctl->extend_status = DLOCK_ENOTHELD;
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &l), DLOCK_OK);
	dlock_acquire_options o = opts_lease(150, 1, &log);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(lost_wait(&log, 1, 5000), 1);
	CU_ASSERT_EQUAL(log.reason, DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "extend answers"));
	dlock_lock_free(l);
	dlock_client_close(c);
}

static void test_driver_report_and_callback_rules(void)
{
	struct lost_log log;
	lost_log_init(&log);
	dlock_client *c = open_ctl("ctl://report");
	log.client = c;
	log.do_release = 1;
	log.do_close = 1;
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &l), DLOCK_OK);
	dlock_acquire_options o = opts_lease(60000, 0, &log);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK); /* depth 2: a loss still ends it */
	dlock_report_lost(last_ctl->host, last_ctl->last_lk, DLOCK_LOST_SESSION, "session expired");
	dlock_report_lost(last_ctl->host, last_ctl->last_lk, DLOCK_LOST_SESSION, "again");
	CU_ASSERT_EQUAL(lost_wait(&log, 1, 5000), 1);
	CU_ASSERT_EQUAL(lost_wait(&log, 2, 200), 1);
	CU_ASSERT_EQUAL(log.reason, DLOCK_LOST_SESSION);
	CU_ASSERT_EQUAL(log.release_in_cb, DLOCK_ENOTHELD); /* release from the callback works */
	CU_ASSERT_EQUAL(log.close_in_cb, DLOCK_EDEADLK);    /* close from it is refused */
	CU_ASSERT_EQUAL(last_ctl->releases, 1);              /* and it cleaned up on the server */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	/* The handle is reusable after a loss. */
	o.on_lost = NULL;
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
}

static void test_loss_during_acquire_kept(void)
{
	struct lost_log log;
	lost_log_init(&log);
	dlock_client *c = open_ctl("ctl://early");
	last_ctl->lose_in_acquire = 1;
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &l), DLOCK_OK);
	dlock_acquire_options o = opts_lease(60000, 0, &log);
	CU_ASSERT_EQUAL(dlock_acquire(l, &o), DLOCK_OK);
	CU_ASSERT_EQUAL(lost_wait(&log, 1, 5000), 1);
	CU_ASSERT_EQUAL(log.reason, DLOCK_LOST_SESSION);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(c), "while acquiring"));
	dlock_lock_free(l);
	dlock_client_close(c);
}

struct errmsg_arg {
	dlock_client *c;
	const char *name;
	pthread_barrier_t *barrier;
	int ok;
};

static void *errmsg_thread(void *p)
{
	struct errmsg_arg *a = p;
	dlock_lock *l = NULL;
	dlock_lock_new(a->c, a->name, &l); /* fails: empty or too long */
	pthread_barrier_wait(a->barrier);  /* both failed before either reads */
	const char *msg = dlock_client_errmsg(a->c);
	a->ok = strstr(msg, *a->name ? "longer" : "empty") != NULL;
	return NULL;
}

static void test_errmsg_per_thread(void)
{
	dlock_client *c = open_ctl("ctl://errmsg");
	static char long_name[DLOCK_NAME_MAX + 2];
	memset(long_name, 'x', sizeof long_name - 1);
	pthread_barrier_t barrier;
	pthread_barrier_init(&barrier, NULL, 2);
	struct errmsg_arg a = { c, "", &barrier, 0 }, b = { c, long_name, &barrier, 0 };
	pthread_t ta, tb;
	pthread_create(&ta, NULL, errmsg_thread, &a);
	pthread_create(&tb, NULL, errmsg_thread, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	CU_ASSERT(a.ok);
	CU_ASSERT(b.ok);
	pthread_barrier_destroy(&barrier);
	dlock_client_close(c);
}

struct acquirer {
	dlock_lock *l;
	dlock_status st;
};

static void *acquire_forever(void *p)
{
	struct acquirer *a = p;
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = DLOCK_WAIT_FOREVER;
	a->st = dlock_acquire(a->l, &o);
	return NULL;
}

static void *acquire_huge(void *p)
{
	struct acquirer *a = p;
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = INT64_MAX;
	a->st = dlock_acquire(a->l, &o);
	return NULL;
}

static void test_cancel_interrupts_server_call(void)
{
	dlock_client *c = open_ctl("ctl://cancel");
	last_ctl->block_acquire = 1;
	struct acquirer a = { NULL, DLOCK_OK };
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &a.l), DLOCK_OK);
	pthread_t t;
	pthread_create(&t, NULL, acquire_forever, &a);
	CU_ASSERT_EQUAL(await_counter(&last_ctl->in_acquire, 1, 5000), 1);
	CU_ASSERT_EQUAL(dlock_cancel(a.l), DLOCK_OK);
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL(a.st, DLOCK_ECANCELED);
	CU_ASSERT_EQUAL(last_ctl->interrupts, 1);
	/* A wait too long to count in nanoseconds is forever, not an overflow. */
	struct acquirer h = { a.l, DLOCK_OK };
	pthread_create(&t, NULL, acquire_huge, &h);
	CU_ASSERT_EQUAL(await_counter(&last_ctl->in_acquire, 1, 5000), 1);
	CU_ASSERT_EQUAL(dlock_cancel(a.l), DLOCK_OK);
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL(h.st, DLOCK_ECANCELED);
	/* A cancel affects only the acquire in progress. */
	last_ctl->block_acquire = 0;
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	CU_ASSERT_EQUAL(dlock_acquire(a.l, &o), DLOCK_OK);
	dlock_lock_free(a.l);
	dlock_client_close(c);
}

static void test_close_cancels_blocked_acquire(void)
{
	dlock_client *c = open_ctl("ctl://close");
	struct ctl *b = last_ctl;
	b->block_acquire = 1;
	struct acquirer a = { NULL, DLOCK_OK };
	CU_ASSERT_EQUAL_FATAL(dlock_lock_new(c, "a", &a.l), DLOCK_OK);
	pthread_t t;
	pthread_create(&t, NULL, acquire_forever, &a);
	CU_ASSERT_EQUAL(await_counter(&b->in_acquire, 1, 5000), 1);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	pthread_join(t, NULL);
	CU_ASSERT_EQUAL(a.st, DLOCK_ECANCELED);
	CU_ASSERT_EQUAL(dlock_release(a.l), DLOCK_ENOTHELD);
	dlock_lock_free(a.l); /* frees the closed client with its last handle */
}

static void add_suites(void)
{
	dlock_register_driver(&ctl_driver);
	CU_pSuite s = CU_add_suite("core", NULL, NULL);
	CU_add_test(s, "registry rules", test_registry_rules);
	CU_add_test(s, "registry accepts versions 1 to current", test_registry_versions);
	CU_add_test(s, "a version-1 driver works, its door is closed", test_driver_v1);
	CU_add_test(s, "lock_init is optional beside lock_init_kind", test_lock_init_optional);
	CU_add_test(s, "the control door reaches the driver", test_control_door);
	CU_add_test(s, "backend parameters checked", test_params_checked);
	CU_add_test(s, "a refused built-in driver says why", test_refused_builtins);
	CU_add_test(s, "renewal keeps the lock", test_renewal_keeps_lock);
	CU_add_test(s, "expiry without renewal is reported once", test_expiry_without_renewal);
	CU_add_test(s, "failing renewal declares the loss at validity end", test_renewal_failing_declares_loss);
	CU_add_test(s, "renewal finding the lock gone reports TAKEN", test_renewal_not_held_is_taken);
	CU_add_test(s, "driver report and callback rules", test_driver_report_and_callback_rules);
	CU_add_test(s, "a loss reported inside acquire is not dropped", test_loss_during_acquire_kept);
	CU_add_test(s, "error text is per thread", test_errmsg_per_thread);
	CU_add_test(s, "cancel interrupts a blocked server call", test_cancel_interrupts_server_call);
	CU_add_test(s, "close cancels a blocked acquire", test_close_cancels_blocked_acquire);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
