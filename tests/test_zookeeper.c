/*
 * zk:// against real ZooKeeper servers started by ci/servers/zookeeper.sh,
 * which exports:
 *
 *   DLOCK_TEST_ZK_URI, DLOCK_TEST_ZK_PORT              a standalone server
 *   DLOCK_TEST_ZK_ENSEMBLE_URI, DLOCK_TEST_ZK_ENSEMBLE_PORTS   a 3-node ensemble
 *   DLOCK_TEST_ZK_CTL    "... stop N | start N | leader" for ensemble member N
 *
 * Without them the program says SKIPPED and passes, unless
 * DLOCK_TEST_REQUIRE_ALL=1.  Every test works under its own base path, and
 * a raw ZooKeeper handle looks at what the backend left on the server.
 * Queue order is established by watching the server (children of the lock
 * node), never by sleeping.
 */
#define THREADED /* the client library's synchronous API */

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include "dlock/dlock.h"
#include "dlock/sys/driver.h"
#include "dlock/sys/zookeeper.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000 /* an acquire that must succeed: a hang becomes a failure */
#define AWAIT_MS 20000
#define SLACK_MS 1500
#define FIFO_CONTENDERS 50
#define HERD_WAITERS 12

static const char *zk_uri, *ens_uri, *ctl;
static char zk_hosts[256], ens_hosts[512];
static int ens_ports[3];
static unsigned base_counter;

/* ------------------------------------------------------------ helpers */

static void new_base(char *out, size_t len)
{
	snprintf(out, len, "/dlock-zkt-%d-%u", (int)getpid(), ++base_counter);
}

/* "zk://[auth@]HOSTS" + base + "?query" */
static void make_uri(char *out, size_t len, const char *auth, const char *hosts, const char *base,
                     const char *query)
{
	snprintf(out, len, "zk://%s%s%s%s%s%s", auth ? auth : "", auth ? "@" : "", hosts, base, *query ? "?" : "",
	         query);
}

static void parent_of(char *out, size_t len, const char *base, const char *name)
{
	char comp[DLOCK_COMPONENT_MAX + 1];
	dlock_name_component(name, strlen(name), comp);
	snprintf(out, len, "%s/%s", base, comp);
}

/* A fresh base path on the standalone server: its URI (with `query`), and the parent node of lock `name`. */
static void fresh_base(char *uri, size_t urilen, const char *query, char *parent, size_t parentlen,
                       const char *name)
{
	char base[64];
	new_base(base, sizeof base);
	make_uri(uri, urilen, NULL, zk_hosts, base, query);
	parent_of(parent, parentlen, base, name);
}

/* What a client's log said. */
struct logcap {
	atomic_int woke;        /* watch events on the node a waiter waits for that woke it */
	atomic_int lines;       /* lines from the client library */
	atomic_int secret_seen; /* a line carried the password */
	atomic_int server_port; /* port of the latest "connected to" */
	const char *secret;
	atomic_int waits;       /* "zk: OURS waits for NODE" lines */
	char waits_for[128];    /* NODE of the latest one (logcap_mu) */
	atomic_int own_watch;   /* "zk: OURS watches its own node" lines */
	atomic_int handed;      /* "zk: OURS leads: the node it waited for is gone" lines */
};

static pthread_mutex_t logcap_mu = PTHREAD_MUTEX_INITIALIZER;

/* The node a client's waiter said it waits for, latest first ("" if none). */
static void logcap_waits_for(struct logcap *l, char *out, size_t len)
{
	pthread_mutex_lock(&logcap_mu);
	snprintf(out, len, "%s", l->waits_for);
	pthread_mutex_unlock(&logcap_mu);
}

static void logcap_fn(void *userdata, dlock_log_level level, const char *msg)
{
	struct logcap *l = userdata;
	(void)level;
	if (strstr(msg, "woke a waiter"))
		atomic_fetch_add(&l->woke, 1);
	const char *wf = strncmp(msg, "zk: ", 4) == 0 ? strstr(msg, " waits for ") : NULL;
	if (wf) {
		pthread_mutex_lock(&logcap_mu);
		snprintf(l->waits_for, sizeof l->waits_for, "%s", wf + 11);
		pthread_mutex_unlock(&logcap_mu);
		atomic_fetch_add(&l->waits, 1);
	}
	if (strncmp(msg, "zk: ", 4) == 0 && strstr(msg, " watches its own node"))
		atomic_fetch_add(&l->own_watch, 1);
	if (strncmp(msg, "zk: ", 4) == 0 && strstr(msg, " leads: the node it waited for is gone"))
		atomic_fetch_add(&l->handed, 1);
	if (strncmp(msg, "zookeeper: ", 11) == 0)
		atomic_fetch_add(&l->lines, 1);
	if (l->secret && strstr(msg, l->secret))
		atomic_store(&l->secret_seen, 1);
	const char *at = strstr(msg, "zk: connected to ");
	const char *colon = at ? strchr(at + 17, ':') : NULL;
	if (colon)
		atomic_store(&l->server_port, atoi(colon + 1));
}

static dlock_client *open_client(const char *uri, struct logcap *log)
{
	dlock_client *c = dlock_test_open(uri, log ? logcap_fn : NULL, log);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_lock *new_lock(dlock_client *c, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(c, name);
	CU_ASSERT_PTR_NOT_NULL_FATAL(l);
	return l;
}

static dlock_status acquire(dlock_lock *l, int64_t wait_ms)
{
	return dlock_test_acquire(l, wait_ms, 0, -1, NULL, NULL);
}

/* ------------------------------------------------------------ lost callback */

struct lost_rec {
	atomic_int calls;
	atomic_int reason;
	_Atomic int64_t at_ms;
};

static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct lost_rec *r = userdata;
	(void)lock;
	(void)detail;
	atomic_store(&r->reason, (int)reason);
	atomic_store(&r->at_ms, dlock_test_now_ms());
	atomic_fetch_add(&r->calls, 1);
}

static dlock_status acquire_watched(dlock_lock *l, int64_t wait_ms, struct lost_rec *r)
{
	return dlock_test_acquire(l, wait_ms, 0, -1, on_lost, r);
}

static int lost_called(void *arg)
{
	return atomic_load(&((struct lost_rec *)arg)->calls) > 0;
}

/* ------------------------------------------------------------ raw handle */

static void raw_log(const char *msg)
{
	(void)msg; /* keep the test's own handles off stderr */
}

static void raw_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	(void)zh, (void)type, (void)state, (void)path, (void)ctx;
}

static int raw_connected(void *arg)
{
	return zoo_state(arg) == ZOO_CONNECTED_STATE;
}

/* A plain handle on `hosts`, with digest credentials `auth` ("user:pass") or none. */
static zhandle_t *raw_open(const char *hosts, const char *auth, const clientid_t *id)
{
	zhandle_t *zh = zookeeper_init2(hosts, raw_watcher, 10000, id, NULL, 0, raw_log);
	CU_ASSERT_PTR_NOT_NULL_FATAL(zh);
	CU_ASSERT_FATAL(dlock_test_await(raw_connected, zh, AWAIT_MS));
	if (auth)
		CU_ASSERT_EQUAL(zoo_add_auth(zh, "digest", auth, (int)strlen(auth), NULL, NULL), ZOK);
	return zh;
}

/* Number of children of `path`; -1 when it does not exist. */
static int raw_count(zhandle_t *zh, const char *path)
{
	struct String_vector v = { 0, NULL };
	int rc = zoo_get_children(zh, path, 0, &v);
	int n = rc == ZOK ? v.count : -1;
	if (rc == ZOK)
		deallocate_String_vector(&v);
	return n;
}

/* The one child of `path` (its full path into out); 0 if not exactly one. */
static int raw_only_child(zhandle_t *zh, const char *path, char *out, size_t len)
{
	struct String_vector v = { 0, NULL };
	if (zoo_get_children(zh, path, 0, &v) != ZOK)
		return 0;
	int ok = v.count == 1;
	if (ok)
		snprintf(out, len, "%s/%s", path, v.data[0]);
	deallocate_String_vector(&v);
	return ok;
}

struct count_cond {
	zhandle_t *zh;
	const char *path;
	int want;
};

static int count_is(void *arg)
{
	struct count_cond *cc = arg;
	return raw_count(cc->zh, cc->path) == cc->want;
}

static int await_count(zhandle_t *zh, const char *path, int want)
{
	struct count_cond cc = { zh, path, want };
	return dlock_test_await(count_is, &cc, AWAIT_MS);
}

/* ------------------------------------------------------------ ensemble control */

static int run_ctl(const char *cmd, int member)
{
	char line[1024];
	snprintf(line, sizeof line, "%s %s %d >/dev/null", ctl, cmd, member);
	return system(line);
}

static int ensemble_leader(void)
{
	char line[1024];
	snprintf(line, sizeof line, "%s leader", ctl);
	FILE *p = popen(line, "r");
	int n = 0;
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = 0;
		pclose(p);
	}
	return n;
}

static int member_of_port(int port)
{
	for (int i = 0; i < 3; i++)
		if (ens_ports[i] == port)
			return i + 1;
	return 0;
}

/* ------------------------------------------------------------ URIs, capabilities */

static void test_bad_uris(void)
{
	static const char *paths[] = { "/a/../b", "/a/./b", "/a//b", "/zookeeper", "/zookeeper/x", "/a%20b", "/%C3%A9" };
	char uri[1024], err[512];
	dlock_client *c = NULL;
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
		make_uri(uri, sizeof uri, NULL, zk_hosts, paths[i], "");
		CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, err, sizeof err), DLOCK_EURI);
	}
	make_uri(uri, sizeof uri, NULL, zk_hosts, "/ok", "session_timeout=soon");
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, err, sizeof err), DLOCK_EURI);
	make_uri(uri, sizeof uri, NULL, zk_hosts, "/ok", "chroot=/x");
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, err, sizeof err), DLOCK_EURI);
	CU_ASSERT_EQUAL(dlock_client_open(&c, "zk:///dlock", NULL, err, sizeof err), DLOCK_EURI);
	make_uri(uri, sizeof uri, ":secret", zk_hosts, "/ok", "");
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, err, sizeof err), DLOCK_EURI);
	CU_ASSERT_PTR_NULL(strstr(err, "secret"));
	CU_ASSERT_PTR_NULL(c);
}

static void test_dead_port_fast(void)
{
	char err[512];
	dlock_client *c = NULL;
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_client_open(&c, "zk://127.0.0.1:1/x?open_timeout=300ms", NULL, err, sizeof err),
	                DLOCK_ECONNECT);
	CU_ASSERT(dlock_test_now_ms() - t0 < 300 + SLACK_MS);
	CU_ASSERT_PTR_NULL(c);
	/* The message names the servers it tried (never the password). */
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "zk://127.0.0.1:1: cannot connect"));
	CU_ASSERT_EQUAL(dlock_client_open(&c, "zk://u:Pw0rdXy9@127.0.0.1:1,127.0.0.1:2/x?open_timeout=300ms", NULL,
	                                  err, sizeof err),
	                DLOCK_ECONNECT);
	CU_ASSERT_PTR_NOT_NULL(strstr(err, "zk://127.0.0.1:1,127.0.0.1:2: cannot connect"));
	CU_ASSERT_PTR_NULL(strstr(err, "Pw0rdXy9"));
	if (!strstr(err, "zk://127.0.0.1:1,127.0.0.1:2: cannot connect"))
		printf("\n    message: %s", err);
}

static void test_capabilities(void)
{
	char base[64], uri[1024];
	new_base(base, sizeof base);
	make_uri(uri, sizeof uri, NULL, zk_hosts, base, "");
	dlock_client *c = open_client(uri, NULL);
	dlock_capabilities caps;
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(caps.backend, "zk");
	CU_ASSERT_EQUAL(caps.consistency, DLOCK_CONSISTENCY_CP);
	CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_STRICT);
	CU_ASSERT_EQUAL(caps.fair, 1);
	CU_ASSERT_EQUAL(caps.lease, DLOCK_LEASE_SESSION);
	CU_ASSERT_EQUAL(caps.wakeup, DLOCK_WAKEUP_NOTIFY);
	CU_ASSERT_EQUAL(caps.scope, DLOCK_SCOPE_NETWORK);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_SEMAPHORE, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_SEMAPHORE_FIFO);
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_PERMIT_FENCING, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, DLOCK_FENCING_NONE);
	dlock_lock *l = new_lock(c, "caps");
	CU_ASSERT_EQUAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(l, 1000), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
}

/* The base path is created on demand; the lock node and its parent are where the docs say. */
static void test_layout_and_token(void)
{
	char base[64], uri[1024], parent[512], node[1024];
	new_base(base, sizeof base);
	snprintf(base + strlen(base), sizeof base - strlen(base), "/deeper/still");
	make_uri(uri, sizeof uri, NULL, zk_hosts, base, "");
	dlock_client *c = open_client(uri, NULL);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_lock *l = new_lock(c, "layout");
	CU_ASSERT_EQUAL(raw_count(zh, base), 0);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
	parent_of(parent, sizeof parent, base, "layout");
	CU_ASSERT_FATAL(raw_only_child(zh, parent, node, sizeof node));
	struct Stat st;
	CU_ASSERT_EQUAL(zoo_exists(zh, node, 0, &st), ZOK);
	CU_ASSERT_EQUAL(dlock_test_token(l), (uint64_t)st.czxid);
	CU_ASSERT(st.ephemeralOwner != 0);
	CU_ASSERT_PTR_NOT_NULL(strstr(node, "/_c_"));
	CU_ASSERT_PTR_NOT_NULL(strstr(node, "-lock-"));
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(raw_count(zh, parent) <= 0, 1);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zookeeper_close(zh);
}

/* Odd names: each one parent node, one path component, all distinct. */
static void test_names_safe_paths(void)
{
	static const char *names[] = { "a/b", "..", ".", "a b", "{x}", "\xff\xfe", "a%2Fb", "a/../b",
		                       "/", "zookeeper", "tab\there", "{\"json\": [1, 2]}" };
	enum { N = sizeof names / sizeof names[0] };
	char base[64], uri[1024], parent[512];
	new_base(base, sizeof base);
	make_uri(uri, sizeof uri, NULL, zk_hosts, base, "");
	dlock_client *c = open_client(uri, NULL);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_lock *locks[N + 1];
	char longname[DLOCK_NAME_MAX + 1];
	memset(longname, '/', DLOCK_NAME_MAX);
	longname[DLOCK_NAME_MAX] = '\0';
	for (size_t i = 0; i <= N; i++) {
		locks[i] = new_lock(c, i < N ? names[i] : longname);
		CU_ASSERT_EQUAL(acquire(locks[i], 0), DLOCK_OK);
	}
	struct String_vector kids = { 0, NULL };
	CU_ASSERT_EQUAL_FATAL(zoo_get_children(zh, base, 0, &kids), ZOK);
	CU_ASSERT_EQUAL(kids.count, N + 1);
	for (int32_t i = 0; i < kids.count; i++) {
		const char *k = kids.data[i];
		CU_ASSERT(strcmp(k, ".") != 0 && strcmp(k, "..") != 0 && !strchr(k, '/'));
		CU_ASSERT(strlen(k) <= DLOCK_COMPONENT_MAX);
		for (const char *p = k; *p; p++)
			CU_ASSERT(*p > 0x20 && *p < 0x7f);
	}
	deallocate_String_vector(&kids);
	for (size_t i = 0; i < N; i++) {
		parent_of(parent, sizeof parent, base, names[i]);
		CU_ASSERT_EQUAL(raw_count(zh, parent), 1);
	}
	for (size_t i = 0; i <= N; i++) {
		CU_ASSERT_EQUAL(dlock_release(locks[i]), DLOCK_OK);
		dlock_lock_free(locks[i]);
	}
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zookeeper_close(zh);
}

/* The library writes nothing on stderr; its lines reach the client's log. */
static void test_library_quiet(void)
{
	char path[] = "/tmp/dlock-zk-stderr-XXXXXX", base[64], uri[1024];
	int fd = mkstemp(path);
	CU_ASSERT_FATAL(fd >= 0);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	struct logcap log = { 0 };
	dlock_client *c = NULL;
	char err[512];
	CU_ASSERT_EQUAL(dlock_test_try_open(&c, "zk://127.0.0.1:1/x?open_timeout=300ms", logcap_fn, &log, err,
	                                    sizeof err),
	                DLOCK_ECONNECT);
	new_base(base, sizeof base);
	make_uri(uri, sizeof uri, NULL, zk_hosts, base, "");
	if (dlock_test_try_open(&c, uri, logcap_fn, &log, err, sizeof err) == DLOCK_OK) {
		dlock_lock *l = new_lock(c, "quiet");
		CU_ASSERT_EQUAL(acquire(l, 0), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		dlock_lock_free(l);
		dlock_client_close(c);
	}
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	struct stat sb;
	CU_ASSERT(fstat(fd, &sb) == 0 && sb.st_size == 0);
	close(fd);
	unlink(path);
	CU_ASSERT(atomic_load(&log.lines) > 0);
}

/* ------------------------------------------------------------ queue */

/* One contender in its own client: acquire, take a ticket, release. */
struct waiter {
	dlock_client *client;
	dlock_lock *lock;
	struct logcap log;
	atomic_uint *order;
	pthread_t thread;
	atomic_int done;
	dlock_status status;
	unsigned ticket;
	uint64_t token;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	w->status = acquire(w->lock, LONG_WAIT_MS);
	if (w->status == DLOCK_OK) {
		w->ticket = atomic_fetch_add(w->order, 1);
		dlock_lock_fencing_token(w->lock, &w->token);
		w->status = dlock_release(w->lock);
	}
	atomic_store(&w->done, 1);
	return NULL;
}

/* Start `n` waiters on `name`, each queued (seen on the server) before the next starts. */
static void start_queue(struct waiter *ws, int n, const char *uri, const char *name, zhandle_t *zh,
                        const char *parent, atomic_uint *order)
{
	for (int i = 0; i < n; i++) {
		struct waiter *w = &ws[i];
		memset(w, 0, sizeof *w);
		w->client = open_client(uri, &w->log);
		w->lock = new_lock(w->client, name);
		w->order = order;
		CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, waiter_main, w) == 0);
		CU_ASSERT_FATAL(await_count(zh, parent, i + 2)); /* the holder and waiters 0..i */
	}
}

static void finish_queue(struct waiter *ws, int n)
{
	for (int i = 0; i < n; i++) {
		pthread_join(ws[i].thread, NULL);
		dlock_lock_free(ws[i].lock);
		CU_ASSERT_EQUAL(dlock_client_close(ws[i].client), DLOCK_OK);
	}
}

/* FIFO: contenders of separate clients get the lock in the order they queued. */
static void test_fifo_many(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "fifo");
	dlock_client *c = open_client(uri, NULL);
	dlock_lock *held = new_lock(c, "fifo");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(held, 0), DLOCK_OK);
	uint64_t last = dlock_test_token(held);
	static struct waiter ws[FIFO_CONTENDERS];
	atomic_uint order = 0;
	start_queue(ws, FIFO_CONTENDERS, uri, "fifo", zh, parent, &order);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	finish_queue(ws, FIFO_CONTENDERS);
	for (int i = 0; i < FIFO_CONTENDERS; i++) {
		CU_ASSERT_EQUAL(ws[i].status, DLOCK_OK);
		CU_ASSERT_EQUAL(ws[i].ticket, (unsigned)i);
		CU_ASSERT(ws[i].token > last);
		last = ws[i].token;
	}
	CU_ASSERT(raw_count(zh, parent) <= 0);
	dlock_lock_free(held);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zookeeper_close(zh);
}

/* No herd: each release wakes exactly one waiter, so each waiter is woken once. */
static void test_no_herd(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "herd");
	dlock_client *c = open_client(uri, NULL);
	dlock_lock *held = new_lock(c, "herd");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(held, 0), DLOCK_OK);
	struct waiter ws[HERD_WAITERS];
	atomic_uint order = 0;
	start_queue(ws, HERD_WAITERS, uri, "herd", zh, parent, &order);
	for (int i = 0; i < HERD_WAITERS; i++)
		CU_ASSERT_EQUAL(atomic_load(&ws[i].log.woke), 0);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	finish_queue(ws, HERD_WAITERS);
	for (int i = 0; i < HERD_WAITERS; i++) {
		CU_ASSERT_EQUAL(ws[i].status, DLOCK_OK);
		CU_ASSERT_EQUAL(ws[i].ticket, (unsigned)i);
		if (atomic_load(&ws[i].log.woke) != 1)
			printf("\n    waiter %d was woken %d times", i, atomic_load(&ws[i].log.woke));
		CU_ASSERT_EQUAL(atomic_load(&ws[i].log.woke), 1);
	}
	dlock_lock_free(held);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zookeeper_close(zh);
}

struct canceller {
	dlock_lock *lock;
	zhandle_t *zh;
	const char *parent;
	int want;
};

static void *cancel_when_queued(void *arg)
{
	struct canceller *k = arg;
	await_count(k->zh, k->parent, k->want);
	dlock_cancel(k->lock);
	return NULL;
}

/* Giving up (try once, deadline, cancel) removes the contender's node. */
static void test_give_up_leaves_nothing(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "giveup");
	dlock_client *a = open_client(uri, NULL), *b = open_client(uri, NULL);
	dlock_lock *held = new_lock(a, "giveup"), *other = new_lock(b, "giveup");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(held, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(other, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(raw_count(zh, parent), 1);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(acquire(other, 300), DLOCK_ETIMEDOUT);
	CU_ASSERT(dlock_test_now_ms() - t0 >= 300 && dlock_test_now_ms() - t0 < 300 + SLACK_MS);
	CU_ASSERT_EQUAL(raw_count(zh, parent), 1);
	struct canceller k = { other, zh, parent, 2 };
	pthread_t th;
	CU_ASSERT_FATAL(pthread_create(&th, NULL, cancel_when_queued, &k) == 0);
	CU_ASSERT_EQUAL(acquire(other, LONG_WAIT_MS), DLOCK_ECANCELED);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(raw_count(zh, parent), 1);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(other, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(other), DLOCK_OK);
	dlock_lock_free(held);
	dlock_lock_free(other);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	zookeeper_close(zh);
}

/* An empty parent is a container the server reaps; the next holder's token is still larger. */
static void test_parent_reaped(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "reaped");
	dlock_client *c = open_client(uri, NULL);
	dlock_lock *l = new_lock(c, "reaped");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	/* ci/servers/zookeeper.sh makes the server look for empty containers every 500 ms. */
	CU_ASSERT_FATAL(await_count(zh, parent, -1));
	CU_ASSERT_EQUAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT(dlock_test_token(l) > first);
	CU_ASSERT_EQUAL(raw_count(zh, parent), 1);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zookeeper_close(zh);
}

/* ------------------------------------------------------------ own node deleted */

static int waiter_done(void *arg);

/* The child of `parent` other than `not` (full path into out); 0 if there is not exactly one such. */
static int raw_other_child(zhandle_t *zh, const char *parent, const char *not, char *out, size_t len)
{
	struct String_vector v = { 0, NULL };
	if (zoo_get_children(zh, parent, 0, &v) != ZOK)
		return 0;
	int n = 0;
	for (int32_t i = 0; i < v.count; i++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", parent, v.data[i]);
		if (!not || strcmp(path, not) != 0) {
			snprintf(out, len, "%s", path);
			n++;
		}
	}
	deallocate_String_vector(&v);
	return n == 1;
}

/*
 * Without credentials anyone may delete a holder's node, and the next
 * contender then holds the lock: the holder is told at once (its own node
 * is watched), not at its next check().
 */
static void test_deleted_node_lost(void)
{
	char uri[1024], parent[512], node[1024];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "deleted");
	dlock_client *h = open_client(uri, NULL), *o = open_client(uri, NULL);
	dlock_lock *l = new_lock(h, "deleted"), *ol = new_lock(o, "deleted");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	struct lost_rec r = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(l, 0, &r), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	CU_ASSERT_FATAL(raw_only_child(zh, parent, node, sizeof node));
	CU_ASSERT_EQUAL(acquire(ol, 0), DLOCK_EBUSY);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(zoo_delete(zh, node, -1), ZOK);
	CU_ASSERT(dlock_test_await(lost_called, &r, 2000));
	if (lost_called(&r))
		printf("\n    lost callback %lld ms after the delete", (long long)(atomic_load(&r.at_ms) - t0));
	CU_ASSERT_EQUAL(atomic_load(&r.reason), DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL(acquire(ol, 0), DLOCK_OK);
	CU_ASSERT(dlock_test_token(ol) > first);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(ol), DLOCK_OK);
	/* The next acquisition of the same handle is watched afresh, and its release is no loss. */
	struct lost_rec r2 = { 0 };
	CU_ASSERT_EQUAL(acquire_watched(l, 0, &r2), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire_watched(l, 0, &r2), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&r2.calls), 0);
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 1);
	dlock_lock_free(l);
	dlock_lock_free(ol);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(o), DLOCK_OK);
	zookeeper_close(zh);
}

/*
 * Once another contender came and went, the holder watches its node itself;
 * setting data on the node uses that watch up: it is set again, and a later
 * delete is still seen.
 */
static void test_changed_then_deleted(void)
{
	char uri[1024], parent[512], node[1024];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "changed");
	dlock_client *h = open_client(uri, NULL), *o = open_client(uri, NULL);
	dlock_lock *l = new_lock(h, "changed"), *ol = new_lock(o, "changed");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	struct lost_rec r = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(l, 0, &r), DLOCK_OK);
	CU_ASSERT_FATAL(raw_only_child(zh, parent, node, sizeof node));
	CU_ASSERT_EQUAL(acquire(ol, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	for (int i = 0; i < 3; i++)
		CU_ASSERT_EQUAL(zoo_set(zh, node, "x", 1, -1), ZOK);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 0);
	CU_ASSERT_EQUAL(zoo_delete(zh, node, -1), ZOK);
	CU_ASSERT(dlock_test_await(lost_called, &r, 2000));
	CU_ASSERT_EQUAL(atomic_load(&r.reason), DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	dlock_lock_free(l);
	dlock_lock_free(ol);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(o), DLOCK_OK);
	zookeeper_close(zh);
}

/* Releasing (and giving up) deletes our own node: that is never reported as a loss. */
static void test_release_is_no_loss(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "noloss");
	dlock_client *h = open_client(uri, NULL), *o = open_client(uri, NULL);
	dlock_lock *l = new_lock(h, "noloss"), *ol = new_lock(o, "noloss");
	struct lost_rec r = { 0 };
	for (int i = 0; i < 20; i++) {
		CU_ASSERT_EQUAL(acquire_watched(l, 0, &r), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(acquire_watched(ol, 0, &r), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire_watched(l, 0, &r), DLOCK_EBUSY); /* its node is deleted again */
	CU_ASSERT_EQUAL(acquire_watched(l, 100, &r), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(dlock_release(ol), DLOCK_OK);
	/* Events come in order: those of every node deleted before the acquires below
	 * arrive before the answers of their looks at the queue. */
	CU_ASSERT_EQUAL(acquire_watched(l, 0, &r), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire_watched(ol, 0, &r), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(ol), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(ol), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 0);
	dlock_lock_free(l);
	dlock_lock_free(ol);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(o), DLOCK_OK);
}

struct requeued {
	zhandle_t *zh;
	const char *parent, *holder, *old;
	char now[1024];
};

static int waiter_requeued(void *arg)
{
	struct requeued *q = arg;
	return raw_count(q->zh, q->parent) == 2 && raw_other_child(q->zh, q->parent, q->holder, q->now, sizeof q->now) &&
	       strcmp(q->now, q->old) != 0;
}

/* A waiter whose node is deleted queues again at once (it watches its own node too), then gets the lock. */
static void test_deleted_waiter_requeues(void)
{
	char uri[1024], parent[512], holder[1024], old[1024];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "requeue");
	dlock_client *h = open_client(uri, NULL);
	dlock_lock *l = new_lock(h, "requeue");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT_FATAL(raw_only_child(zh, parent, holder, sizeof holder));
	struct waiter w;
	atomic_uint order = 0;
	start_queue(&w, 1, uri, "requeue", zh, parent, &order);
	CU_ASSERT_FATAL(raw_other_child(zh, parent, holder, old, sizeof old));
	CU_ASSERT_EQUAL(zoo_delete(zh, old, -1), ZOK);
	struct requeued q = { zh, parent, holder, old, "" };
	CU_ASSERT(dlock_test_await(waiter_requeued, &q, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT(dlock_test_await(waiter_done, &w, AWAIT_MS));
	finish_queue(&w, 1);
	CU_ASSERT_EQUAL(w.status, DLOCK_OK);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	zookeeper_close(zh);
}

/* A contender that waits in its own thread with a lost callback, and keeps the lock it gets. */
struct keeper {
	dlock_lock *lock;
	struct lost_rec lost;
	pthread_t thread;
	atomic_int done;
	dlock_status status;
};

static void *keeper_main(void *arg)
{
	struct keeper *k = arg;
	k->status = acquire_watched(k->lock, LONG_WAIT_MS, &k->lost);
	atomic_store(&k->done, 1);
	return NULL;
}

static int keeper_done(void *arg)
{
	return atomic_load(&((struct keeper *)arg)->done);
}

static int own_watched(void *arg)
{
	return atomic_load(&((struct logcap *)arg)->own_watch) > 0;
}

/*
 * A contender that got the lock after waiting learns at once of its node's
 * deletion, as one that found it free: whether its node was only covered by
 * the child watch of its looks at the queue (nobody came after it), or
 * watched by itself since a change of the queue while it waited (a
 * try-once contender came and went), when its later looks set no child
 * watch.  In that second case the release hands the lock over without a
 * look at the queue: the holder's node was the first, and the waiter's
 * own is known to be there.
 */
static void test_waiter_then_deleted(void)
{
	for (int behind = 0; behind <= 1; behind++) {
		char uri[1024], parent[512], node[1024];
		fresh_base(uri, sizeof uri, "", parent, sizeof parent, "wdel");
		struct logcap log = { 0 };
		dlock_client *h = open_client(uri, NULL), *o = open_client(uri, &log), *t = open_client(uri, NULL);
		dlock_lock *l = new_lock(h, "wdel"), *tl = new_lock(t, "wdel");
		zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
		CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
		struct keeper k = { .lock = new_lock(o, "wdel") };
		CU_ASSERT_FATAL(pthread_create(&k.thread, NULL, keeper_main, &k) == 0);
		CU_ASSERT(await_count(zh, parent, 2));
		if (behind) { /* its node and its removal: two changes of the queue */
			CU_ASSERT_EQUAL(acquire(tl, 0), DLOCK_EBUSY);
			CU_ASSERT(dlock_test_await(own_watched, &log, AWAIT_MS));
		}
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		CU_ASSERT(dlock_test_await(keeper_done, &k, AWAIT_MS));
		pthread_join(k.thread, NULL);
		CU_ASSERT_EQUAL(k.status, DLOCK_OK);
		if (behind)
			CU_ASSERT_EQUAL(atomic_load(&log.handed), 1);
		uint64_t first = dlock_test_token(k.lock);
		CU_ASSERT_FATAL(raw_only_child(zh, parent, node, sizeof node));
		CU_ASSERT_EQUAL(acquire(tl, 0), DLOCK_EBUSY);
		CU_ASSERT_EQUAL_FATAL(zoo_delete(zh, node, -1), ZOK);
		CU_ASSERT(dlock_test_await(lost_called, &k.lost, AWAIT_MS));
		CU_ASSERT_EQUAL(atomic_load(&k.lost.reason), DLOCK_LOST_TAKEN);
		CU_ASSERT_EQUAL(acquire(tl, 0), DLOCK_OK);
		CU_ASSERT(dlock_test_token(tl) > first);
		CU_ASSERT_EQUAL(dlock_release(k.lock), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(dlock_release(tl), DLOCK_OK);
		CU_ASSERT_EQUAL(atomic_load(&k.lost.calls), 1);
		dlock_lock_free(l);
		dlock_lock_free(k.lock);
		dlock_lock_free(tl);
		CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_client_close(o), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_client_close(t), DLOCK_OK);
		zookeeper_close(zh);
	}
}

struct waits_for_arg {
	struct logcap *log;
	const char *node; /* the name of the node, without its parent */
};

static int waits_for_node(void *arg)
{
	struct waits_for_arg *q = arg;
	char now[128];
	logcap_waits_for(q->log, now, sizeof now);
	return strcmp(now, q->node) == 0;
}

/*
 * The node a waiter waits for goes, but another one before it still holds
 * the lock (a contender in the middle gave up): the waiter looks again and
 * waits for the holder, even with its own node known to be there.
 */
static void test_middle_gives_up(void)
{
	char uri[1024], parent[512], holder[1024];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "middle");
	struct logcap log = { 0 };
	dlock_client *h = open_client(uri, NULL), *m = open_client(uri, NULL), *o = open_client(uri, &log);
	dlock_lock *l = new_lock(h, "middle"), *ml = new_lock(m, "middle");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT_FATAL(raw_only_child(zh, parent, holder, sizeof holder));
	dlock_test_waiter mw;
	dlock_test_waiter_start(&mw, ml, LONG_WAIT_MS, 0);
	CU_ASSERT(await_count(zh, parent, 2));
	struct keeper k = { .lock = new_lock(o, "middle") };
	CU_ASSERT_FATAL(pthread_create(&k.thread, NULL, keeper_main, &k) == 0);
	CU_ASSERT(await_count(zh, parent, 3));
	dlock_client *t = open_client(uri, NULL);
	dlock_lock *tl = new_lock(t, "middle");
	CU_ASSERT_EQUAL(acquire(tl, 0), DLOCK_EBUSY); /* the queue changes: the waiter watches its own node */
	CU_ASSERT(dlock_test_await(own_watched, &log, AWAIT_MS));
	dlock_cancel(ml);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&mw, AWAIT_MS), DLOCK_ECANCELED);
	struct waits_for_arg q = { &log, strrchr(holder, '/') + 1 };
	CU_ASSERT(dlock_test_await(waits_for_node, &q, AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&k.done), 0);
	CU_ASSERT_EQUAL(atomic_load(&log.handed), 0);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT(dlock_test_await(keeper_done, &k, AWAIT_MS));
	pthread_join(k.thread, NULL);
	CU_ASSERT_EQUAL(k.status, DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&log.handed), 1); /* now its node was the first */
	CU_ASSERT_EQUAL(dlock_release(k.lock), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&k.lost.calls), 0);
	dlock_lock_free(l);
	dlock_lock_free(ml);
	dlock_lock_free(k.lock);
	dlock_lock_free(tl);
	CU_ASSERT_EQUAL(dlock_client_close(t), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(o), DLOCK_OK);
	zookeeper_close(zh);
}

/* ------------------------------------------------------------ sequence numbers */

/* "_c_" + 32 x `g` + "-lock-" + seq, as the server names a node: the
 * layout on the server (README, "zk://"), written out here on purpose, so
 * that a change of it fails this test rather than follow it silently. */
#define NODE_GUID_HEX 32
static void node_name(char *out, size_t len, char g, const char *seq)
{
	char guid[NODE_GUID_HEX + 1];
	memset(guid, g, NODE_GUID_HEX);
	guid[NODE_GUID_HEX] = '\0';
	snprintf(out, len, "_c_%s-lock-%s", guid, seq);
}

/*
 * End to end, with a node named as the server names it after the wrap: a
 * contender at "-000000002" (created by hand, ephemeral) comes before our
 * node (the server's next number, small and positive): we wait for it,
 * then get the lock when it goes.  (A real wrap needs 2^31 creates under
 * one parent; backends/zookeeper/test_zk_seq.c covers 2147483647 -> -2147483648.)
 */
static void test_seq_negative_queued(void)
{
	char uri[1024], parent[512], base[64], node[1024], name[128];
	new_base(base, sizeof base);
	make_uri(uri, sizeof uri, NULL, zk_hosts, base, "");
	parent_of(parent, sizeof parent, base, "wrapped");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, base, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
	node_name(name, sizeof name, 'e', "-000000002");
	snprintf(node, sizeof node, "%s/%s", parent, name);
	CU_ASSERT_EQUAL_FATAL(zoo_create(zh, node, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0), ZOK);
	dlock_client *c = open_client(uri, NULL);
	dlock_lock *l = new_lock(c, "wrapped");
	CU_ASSERT_EQUAL(acquire(l, 0), DLOCK_EBUSY);
	struct waiter w;
	atomic_uint order = 0;
	start_queue(&w, 1, uri, "wrapped", zh, parent, &order);
	CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
	CU_ASSERT_EQUAL(zoo_delete(zh, node, -1), ZOK);
	CU_ASSERT(dlock_test_await(waiter_done, &w, AWAIT_MS));
	finish_queue(&w, 1);
	CU_ASSERT_EQUAL(w.status, DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zoo_delete(zh, parent, -1);
	zoo_delete(zh, base, -1);
	zookeeper_close(zh);
}

/* ------------------------------------------------------------ ACL */

/* With digest credentials, another identity (or none) can delete neither our node nor its parent. */
static void test_acl(void)
{
	char base[64], uri[1024], other[1024], parent[512], node[1024];
	new_base(base, sizeof base);
	make_uri(uri, sizeof uri, "alice:s3cret-pw", zk_hosts, base, "");
	make_uri(other, sizeof other, "bob:bobs-pw", zk_hosts, base, "");
	parent_of(parent, sizeof parent, base, "acl");
	struct logcap log = { .secret = "s3cret-pw" };
	dlock_client *c = open_client(uri, &log);
	CU_ASSERT_PTR_NULL(strstr(dlock_client_uri(c), "s3cret-pw"));
	dlock_lock *l = new_lock(c, "acl");
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
	zhandle_t *mine = raw_open(zk_hosts, "alice:s3cret-pw", NULL);
	zhandle_t *mallory = raw_open(zk_hosts, "mallory:guess", NULL);
	zhandle_t *anon = raw_open(zk_hosts, NULL, NULL);
	CU_ASSERT_FATAL(raw_only_child(mine, parent, node, sizeof node));
	struct ACL_vector acl;
	struct Stat st;
	CU_ASSERT_EQUAL_FATAL(zoo_get_acl(mine, node, &acl, &st), ZOK);
	CU_ASSERT_EQUAL(acl.count, 1);
	if (acl.count == 1) {
		CU_ASSERT_STRING_EQUAL(acl.data[0].id.scheme, "digest");
		CU_ASSERT_EQUAL(strncmp(acl.data[0].id.id, "alice:", 6), 0);
		CU_ASSERT_EQUAL(acl.data[0].perms, ZOO_PERM_ALL);
	}
	deallocate_ACL_vector(&acl);
	CU_ASSERT_EQUAL(zoo_delete(mallory, node, -1), ZNOAUTH);
	CU_ASSERT_EQUAL(zoo_delete(anon, node, -1), ZNOAUTH);
	CU_ASSERT_EQUAL(zoo_delete(mallory, parent, -1), ZNOAUTH);
	CU_ASSERT_EQUAL(zoo_delete(anon, parent, -1), ZNOAUTH);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	/* Another identity cannot even queue under this parent. */
	dlock_client *bob = open_client(other, NULL);
	dlock_lock *bl = new_lock(bob, "acl");
	CU_ASSERT_EQUAL(acquire(bl, 0), DLOCK_EPERM);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(zoo_delete(mallory, parent, -1), ZNOAUTH);
	CU_ASSERT_EQUAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(atomic_load(&log.secret_seen), 0);
	dlock_lock_free(bl);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(bob), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zookeeper_close(mine);
	zookeeper_close(mallory);
	zookeeper_close(anon);
}

/* ------------------------------------------------------------ sessions */

static int waiter_done(void *arg)
{
	return atomic_load(&((struct waiter *)arg)->done);
}

static clientid_t session_of_client(dlock_client *client)
{
	clientid_t id = { 0 };
	CU_ASSERT_EQUAL(dlock_client_control(client, DLOCK_ZK_CTL_SESSION_ID, &id), DLOCK_OK);
	CU_ASSERT(id.client_id != 0);
	return id;
}

/*
 * Close `client`'s session from outside (a second handle with its id) until
 * the holder, watched by `r`, is told.  The holder's library may win its
 * session back before the close: repeat until it is gone.  Told SESSION,
 * or TAKEN when the library had won it back just before the close: the
 * server then tells that connection of its node's deletion before it
 * ends the session.
 */
static void expire_from_outside(dlock_client *client, struct lost_rec *r)
{
	clientid_t id = session_of_client(client);
	for (int i = 0; i < 10 && !lost_called(r); i++) {
		zookeeper_close(raw_open(zk_hosts, NULL, &id));
		dlock_test_await(lost_called, r, 3000);
	}
	CU_ASSERT_FATAL(lost_called(r));
	int reason = atomic_load(&r->reason);
	if (reason != DLOCK_LOST_SESSION)
		printf("\n    told with reason %s", reason == DLOCK_LOST_TAKEN ? "TAKEN" : "other");
	CU_ASSERT(reason == DLOCK_LOST_SESSION || reason == DLOCK_LOST_TAKEN);
}

/* Expire the holder's session from outside (a second handle with its id closes it). */
static void test_session_expiry_steal(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "session_timeout=4s", parent, sizeof parent, "steal");
	dlock_client *h = open_client(uri, NULL);
	dlock_lock *l = new_lock(h, "steal");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	struct lost_rec r = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(l, 0, &r), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	struct waiter w;
	atomic_uint order = 0;
	start_queue(&w, 1, uri, "steal", zh, parent, &order);
	expire_from_outside(h, &r);
	CU_ASSERT(dlock_test_await(waiter_done, &w, AWAIT_MS));
	finish_queue(&w, 1);
	CU_ASSERT_EQUAL(w.status, DLOCK_OK);
	CU_ASSERT(w.token > first);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 1);
	/* A new session serves the next acquire. */
	CU_ASSERT_EQUAL(acquire(l, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(dlock_test_token(l) > w.token);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	zookeeper_close(zh);
}

/* The same with a second handle of the holder's client waiting: the loss lets it in (Curator's testKilledSession). */
static void test_session_expiry_local_waiter(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "session_timeout=4s", parent, sizeof parent, "killed");
	dlock_client *h = open_client(uri, NULL);
	dlock_lock *l1 = new_lock(h, "killed"), *l2 = new_lock(h, "killed");
	struct lost_rec r = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(l1, 0, &r), DLOCK_OK);
	uint64_t first = dlock_test_token(l1);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, l2, 2 * AWAIT_MS, 0);
	clientid_t id = session_of_client(h);
	for (int i = 0; i < 10 && !lost_called(&r); i++) {
		zookeeper_close(raw_open(zk_hosts, NULL, &id));
		dlock_test_await(lost_called, &r, 3000);
	}
	CU_ASSERT_FATAL(lost_called(&r));
	dlock_status st = dlock_test_waiter_join(&w, AWAIT_MS);
	CU_ASSERT_EQUAL(st, DLOCK_OK);
	if (st == DLOCK_OK) {
		CU_ASSERT(w.token > first);
		CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(dlock_check(l2), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 1);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
}

/* What a holder in a child process saw. */
struct child_view {
	atomic_int held, lost, reason, done;
	uint64_t token;
	dlock_status release_st;
};

static void child_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct child_view *v = userdata;
	(void)lock, (void)detail;
	atomic_store(&v->reason, (int)reason);
	atomic_store(&v->lost, 1);
}

static int child_lost_cond(void *arg)
{
	return atomic_load(&((struct child_view *)arg)->lost);
}

static void child_holder(const char *uri, struct child_view *v)
{
	dlock_client *c = NULL;
	dlock_lock *l = NULL;
	if (dlock_client_open(&c, uri, NULL, NULL, 0) != DLOCK_OK || dlock_lock_new(c, "stopped", &l) != DLOCK_OK ||
	    dlock_test_acquire(l, 0, 0, -1, child_lost, v) != DLOCK_OK)
		_exit(2);
	dlock_lock_fencing_token(l, &v->token);
	atomic_store(&v->held, 1);
	dlock_test_await(child_lost_cond, v, 60000);
	v->release_st = dlock_release(l);
	dlock_lock_free(l);
	dlock_client_close(c);
	atomic_store(&v->done, 1);
	_exit(0);
}

static int child_held(void *arg)
{
	return atomic_load(&((struct child_view *)arg)->held);
}

static int child_done(void *arg)
{
	return atomic_load(&((struct child_view *)arg)->done);
}

/* A holder stopped past its session timeout: the next contender gets the lock, the holder is told. */
static void test_session_expiry_stopped_holder(void)
{
	char uri[1024], parent[512];
	fresh_base(uri, sizeof uri, "session_timeout=2s", parent, sizeof parent, "stopped");
	struct child_view *v = dlock_test_shared_alloc(sizeof *v);
	fflush(stdout);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		child_holder(uri, v);
	CU_ASSERT_FATAL(dlock_test_await(child_held, v, AWAIT_MS));
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	struct waiter w;
	atomic_uint order = 0;
	start_queue(&w, 1, uri, "stopped", zh, parent, &order);
	int64_t t0 = dlock_test_now_ms();
	kill(pid, SIGSTOP);
	CU_ASSERT(dlock_test_await(waiter_done, &w, AWAIT_MS));
	int64_t took = dlock_test_now_ms() - t0;
	kill(pid, SIGCONT);
	finish_queue(&w, 1);
	CU_ASSERT_EQUAL(w.status, DLOCK_OK);
	CU_ASSERT(w.token > v->token);
	CU_ASSERT(took < 2000 + 2 * SLACK_MS);
	CU_ASSERT(dlock_test_await(child_done, v, AWAIT_MS));
	int status = 0;
	waitpid(pid, &status, 0);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Told once, by whichever runs first after SIGCONT: the core, which sees
	 * the session's timeout long past (EXPIRED), the client library's
	 * session-expired event (SESSION), or the deletion of the holder's node,
	 * which the server, expiring the session, may send to its connection
	 * before it closes it (TAKEN).  On a loaded machine any can. */
	int reason = atomic_load(&v->reason);
	if (reason != DLOCK_LOST_SESSION)
		printf("\n    told with reason %d", reason);
	CU_ASSERT(reason == DLOCK_LOST_SESSION || reason == DLOCK_LOST_EXPIRED || reason == DLOCK_LOST_TAKEN);
	CU_ASSERT_EQUAL(v->release_st, DLOCK_ENOTHELD);
	dlock_test_shared_free(v, sizeof *v);
	zookeeper_close(zh);
}

static int check_is_uncertain(void *arg)
{
	return dlock_check(arg) == DLOCK_EUNCERTAIN;
}

/*
 * The only server a client knows stops: check() is uncertain, then the lock
 * is declared lost one session timeout after the last answer, while the
 * rest of the ensemble expires the session and lets another client in.
 */
static void test_disconnected_then_lost(void)
{
	char base[64], uri[1024], rest[1024], one[64], two[128], parent[512];
	new_base(base, sizeof base);
	snprintf(one, sizeof one, "127.0.0.1:%d", ens_ports[0]);
	snprintf(two, sizeof two, "127.0.0.1:%d,127.0.0.1:%d", ens_ports[1], ens_ports[2]);
	make_uri(uri, sizeof uri, NULL, one, base, "session_timeout=3s");
	make_uri(rest, sizeof rest, NULL, two, base, "session_timeout=3s");
	parent_of(parent, sizeof parent, base, "cut");
	dlock_client *c = open_client(uri, NULL), *other = open_client(rest, NULL);
	dlock_lock *l = new_lock(c, "cut"), *ol = new_lock(other, "cut");
	struct lost_rec r = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(l, 0, &r), DLOCK_OK);
	uint64_t first = dlock_test_token(l);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL_FATAL(run_ctl("stop", 1), 0);
	int64_t t1 = dlock_test_now_ms();
	CU_ASSERT(dlock_test_await(check_is_uncertain, l, 3000) || lost_called(&r));
	CU_ASSERT(dlock_test_await(lost_called, &r, AWAIT_MS));
	int64_t at = atomic_load(&r.at_ms);
	CU_ASSERT_EQUAL(atomic_load(&r.reason), DLOCK_LOST_SESSION);
	CU_ASSERT(at - t0 <= 3000 + SLACK_MS);
	CU_ASSERT(at - t1 >= 3000 / 3 - 100);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(acquire(ol, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(dlock_test_token(ol) > first);
	CU_ASSERT_EQUAL(dlock_release(ol), DLOCK_OK);
	CU_ASSERT_EQUAL(run_ctl("start", 1), 0);
	CU_ASSERT_EQUAL(acquire(l, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(dlock_test_token(l) > first);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_lock_free(ol);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(other), DLOCK_OK);
}

/* ------------------------------------------------------------ ensemble */

static int check_is_ok(void *arg)
{
	return dlock_check(arg) == DLOCK_OK;
}

/* A try-once from a client that may itself be reconnecting after a server
 * stopped: ECONNECT until it has a server again, then the answer. */
struct probe_try {
	dlock_lock *lock;
	dlock_status rc;
};

static int probe_answered(void *arg)
{
	struct probe_try *p = arg;
	p->rc = acquire(p->lock, 0);
	if (p->rc == DLOCK_OK)
		dlock_release(p->lock);
	return p->rc != DLOCK_ECONNECT;
}

/* The answer a try-once of `probe` settles on. */
static dlock_status probe_answer(dlock_lock *probe)
{
	struct probe_try p = { probe, DLOCK_ECONNECT };
	CU_ASSERT(dlock_test_await(probe_answered, &p, AWAIT_MS));
	return p.rc;
}

/* The leader stops: a held lock stays held, new locks work with two of three. */
static void test_ensemble_leader_down(void)
{
	char base[64], uri[1024];
	new_base(base, sizeof base);
	make_uri(uri, sizeof uri, NULL, ens_hosts, base, "session_timeout=10s");
	dlock_client *a = open_client(uri, NULL), *b = open_client(uri, NULL);
	dlock_lock *held = new_lock(a, "held"), *probe = new_lock(b, "held"), *fresh = new_lock(b, "fresh");
	struct lost_rec r = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(held, 0, &r), DLOCK_OK);
	uint64_t first = dlock_test_token(held);
	int leader = ensemble_leader();
	CU_ASSERT_FATAL(leader >= 1 && leader <= 3);
	CU_ASSERT_EQUAL_FATAL(run_ctl("stop", leader), 0);
	CU_ASSERT_EQUAL(acquire(fresh, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(dlock_test_token(fresh) > first);
	CU_ASSERT_EQUAL(dlock_release(fresh), DLOCK_OK);
	CU_ASSERT(dlock_test_await(check_is_ok, held, AWAIT_MS));
	CU_ASSERT_EQUAL(probe_answer(probe), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 0);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(probe, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(probe), DLOCK_OK);
	CU_ASSERT_EQUAL(run_ctl("start", leader), 0);
	dlock_lock_free(held);
	dlock_lock_free(probe);
	dlock_lock_free(fresh);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
}

struct moved {
	struct logcap *log;
	int from;
};

static int moved_away(void *arg)
{
	struct moved *m = arg;
	int port = atomic_load(&m->log->server_port);
	return port != 0 && port != m->from;
}

/* The server a holder is connected to stops: it moves to another, the lock still held. */
static void test_ensemble_client_moves(void)
{
	char base[64], uri[1024];
	new_base(base, sizeof base);
	make_uri(uri, sizeof uri, NULL, ens_hosts, base, "session_timeout=10s");
	struct logcap log = { 0 };
	dlock_client *a = open_client(uri, &log), *b = open_client(uri, NULL);
	dlock_lock *held = new_lock(a, "moving"), *probe = new_lock(b, "moving");
	struct lost_rec r = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(held, 0, &r), DLOCK_OK);
	int from = atomic_load(&log.server_port), member = member_of_port(from);
	CU_ASSERT_FATAL(member != 0);
	CU_ASSERT_EQUAL_FATAL(run_ctl("stop", member), 0);
	struct moved m = { &log, from };
	CU_ASSERT(dlock_test_await(moved_away, &m, AWAIT_MS));
	CU_ASSERT(dlock_test_await(check_is_ok, held, AWAIT_MS));
	CU_ASSERT_EQUAL(probe_answer(probe), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(atomic_load(&r.calls), 0);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(probe, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(probe), DLOCK_OK);
	CU_ASSERT_EQUAL(run_ctl("start", member), 0);
	dlock_lock_free(held);
	dlock_lock_free(probe);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
}

/* ------------------------------------------------------------ read-write locks */

static dlock_lock *new_rwlock(dlock_client *c, const char *name)
{
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(c, name, &l), DLOCK_OK);
	return l;
}

static dlock_status acquire_mode(dlock_lock *l, dlock_lock_mode mode, int64_t wait_ms, struct lost_rec *r)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.mode = mode;
	o.on_lost = r ? on_lost : NULL;
	o.lost_userdata = r;
	return dlock_acquire(l, &o);
}

/* A contender in its own client that holds until told to go: a reader, a writer, or a mutex. */
enum rw_role { ROLE_READER, ROLE_WRITER, ROLE_MUTEX };

struct rwc {
	dlock_client *client;
	dlock_lock *lock;
	struct logcap log;
	enum rw_role role;
	atomic_uint *order;
	pthread_t thread;
	atomic_int held, go, done;
	dlock_status status, release_st;
	unsigned ticket;
	uint64_t token;
	dlock_status token_st;
};

static int rwc_go(void *arg)
{
	return atomic_load(&((struct rwc *)arg)->go);
}

static int rwc_held(void *arg)
{
	return atomic_load(&((struct rwc *)arg)->held);
}

static int rwc_done(void *arg)
{
	return atomic_load(&((struct rwc *)arg)->done);
}

static void *rwc_main(void *arg)
{
	struct rwc *w = arg;
	w->status = acquire_mode(w->lock, w->role == ROLE_READER ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE,
	                         LONG_WAIT_MS, NULL);
	if (w->status == DLOCK_OK) {
		w->ticket = atomic_fetch_add(w->order, 1);
		w->token_st = dlock_lock_fencing_token(w->lock, &w->token);
		atomic_store(&w->held, 1);
		dlock_test_await(rwc_go, w, 2 * LONG_WAIT_MS);
		w->release_st = dlock_release(w->lock);
	}
	atomic_store(&w->done, 1);
	return NULL;
}

/* Start a contender on `name` and await its node on the server (`parent` then has `children`). */
static void rwc_start(struct rwc *w, enum rw_role role, const char *uri, const char *name, zhandle_t *zh,
                      const char *parent, int children, atomic_uint *order)
{
	memset(w, 0, sizeof *w);
	w->role = role;
	w->order = order;
	w->client = open_client(uri, &w->log);
	w->lock = role == ROLE_MUTEX ? new_lock(w->client, name) : new_rwlock(w->client, name);
	CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, rwc_main, w) == 0);
	CU_ASSERT_FATAL(await_count(zh, parent, children));
}

/* Let it release, join it, close its client. */
static void rwc_finish(struct rwc *w)
{
	atomic_store(&w->go, 1);
	pthread_join(w->thread, NULL);
	if (w->status == DLOCK_OK)
		CU_ASSERT_EQUAL(w->release_st, DLOCK_OK);
	dlock_lock_free(w->lock);
	CU_ASSERT_EQUAL(dlock_client_close(w->client), DLOCK_OK);
}

/* The children of `parent` in queue order (by sequence number, all of ours are positive); their count. */
static int raw_queue(zhandle_t *zh, const char *parent, char names[][128], int max)
{
	struct String_vector v = { 0, NULL };
	if (zoo_get_children(zh, parent, 0, &v) != ZOK)
		return -1;
	int n = 0;
	for (int32_t i = 0; i < v.count && n < max; i++)
		snprintf(names[n++], 128, "%s", v.data[i]);
	deallocate_String_vector(&v);
	for (int i = 1; i < n; i++) /* insertion sort on the 10 digits at the end */
		for (int j = i; j > 0 && strcmp(names[j - 1] + strlen(names[j - 1]) - 10, names[j] + strlen(names[j]) - 10) > 0;
		     j--) {
			char t[128];
			memcpy(t, names[j], sizeof t);
			memcpy(names[j], names[j - 1], sizeof t);
			memcpy(names[j - 1], t, sizeof t);
		}
	return n;
}

/* "_c_" + 32 lower-case hex digits + "-" + mark + 10 digits: dlock's form.  Curator's recipes write a
 * 36-character UUID (with hyphens) where dlock writes 32 hex digits; both start "_c_" and end "-MARK"
 * and 10 digits, which is what the recipes of either look at to order the nodes. */
static int curator_form(const char *node, const char *mark)
{
	size_t m = strlen(mark), n = strlen(node);
	if (n != 3 + 32 + 1 + m + 10 || strncmp(node, "_c_", 3) != 0 || node[35] != '-' ||
	    strncmp(node + 36, mark, m) != 0)
		return 0;
	return strspn(node + 3, "0123456789abcdef") >= 32 && strspn(node + 36 + m, "0123456789") == 10;
}

/*
 * Node names as Curator's InterProcessReadWriteLock writes them, and its
 * testGetParticipantNodes: readers hold, writers wait, and the parent has
 * one __READ__ node per reader and one __WRIT__ node per writer.  Readers
 * get no token; a writer's is its node's czxid.
 */
static void test_rw_node_names(void)
{
	enum { READERS = 3, WRITERS = 2 };
	char uri[1024], parent[512], names[READERS + WRITERS][128];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "participants");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *rc[READERS];
	dlock_lock *rl[READERS];
	for (int i = 0; i < READERS; i++) {
		rc[i] = open_client(uri, NULL);
		rl[i] = new_rwlock(rc[i], "participants");
		CU_ASSERT_EQUAL_FATAL(acquire_mode(rl[i], DLOCK_MODE_SHARED, 0, NULL), DLOCK_OK);
		uint64_t t;
		CU_ASSERT_EQUAL(dlock_lock_fencing_token(rl[i], &t), DLOCK_ENOTSUP);
	}
	struct rwc ws[WRITERS];
	atomic_uint order = 0;
	for (int i = 0; i < WRITERS; i++)
		rwc_start(&ws[i], ROLE_WRITER, uri, "participants", zh, parent, READERS + i + 1, &order);
	CU_ASSERT_EQUAL_FATAL(raw_queue(zh, parent, names, READERS + WRITERS), READERS + WRITERS);
	int reads = 0, writes = 0;
	for (int i = 0; i < READERS + WRITERS; i++) {
		reads += curator_form(names[i], "__READ__");
		writes += curator_form(names[i], "__WRIT__");
		CU_ASSERT(curator_form(names[i], i < READERS ? "__READ__" : "__WRIT__"));
	}
	CU_ASSERT_EQUAL(reads, READERS);
	CU_ASSERT_EQUAL(writes, WRITERS);
	for (int i = 0; i < READERS; i++)
		CU_ASSERT_EQUAL(dlock_release(rl[i]), DLOCK_OK);
	CU_ASSERT_FATAL(dlock_test_await(rwc_held, &ws[0], AWAIT_MS));
	char node[1024];
	struct Stat st;
	snprintf(node, sizeof node, "%s/%s", parent, names[READERS]);
	CU_ASSERT_EQUAL(zoo_exists(zh, node, 0, &st), ZOK);
	CU_ASSERT_EQUAL(ws[0].token_st, DLOCK_OK);
	CU_ASSERT_EQUAL(ws[0].token, (uint64_t)st.czxid);
	CU_ASSERT(!rwc_held(&ws[1]));
	for (int i = 0; i < WRITERS; i++)
		rwc_finish(&ws[i]);
	CU_ASSERT(ws[1].token > ws[0].token);
	CU_ASSERT(raw_count(zh, parent) <= 0);
	for (int i = 0; i < READERS; i++) {
		dlock_lock_free(rl[i]);
		CU_ASSERT_EQUAL(dlock_client_close(rc[i]), DLOCK_OK);
	}
	zookeeper_close(zh);
}

/* 1 once `w` said which node it waits for (after its watch was set). */
static int rwc_waiting(void *arg)
{
	return atomic_load(&((struct rwc *)arg)->log.waits) > 0;
}

/* 1 when `w` said it waits for `node`. */
static int waits_for(struct rwc *w, const char *node)
{
	char got[128];
	logcap_waits_for(&w->log, got, sizeof got);
	if (strcmp(got, node) != 0)
		printf("\n    waits for \"%s\", not \"%s\"", got, node);
	return strcmp(got, node) == 0;
}

/*
 * Each waiter watches only the node that can block it, so a release wakes
 * only those it lets in.  Queue: W0 (held) R1 R2 W3 R4 W5.  R1 and R2
 * watch W0, W3 watches R2, R4 watches W3, W5 watches R4.  Then the order
 * (kazoo's test_rw_lock): R1 and R2 together, then W3, R4, W5.
 */
static void test_rw_watch_only_blocker(void)
{
	enum { N = 5 };
	static const enum rw_role roles[N] = { ROLE_READER, ROLE_READER, ROLE_WRITER, ROLE_READER, ROLE_WRITER };
	char uri[1024], parent[512], names[N + 1][128];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "blocker");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *h = open_client(uri, NULL);
	dlock_lock *w0 = new_rwlock(h, "blocker");
	CU_ASSERT_EQUAL_FATAL(acquire_mode(w0, DLOCK_MODE_EXCLUSIVE, 0, NULL), DLOCK_OK);
	struct rwc ws[N];
	atomic_uint order = 0;
	for (int i = 0; i < N; i++)
		rwc_start(&ws[i], roles[i], uri, "blocker", zh, parent, i + 2, &order);
	CU_ASSERT_EQUAL_FATAL(raw_queue(zh, parent, names, N + 1), N + 1);
	for (int i = 0; i < N; i++)
		CU_ASSERT(dlock_test_await(rwc_waiting, &ws[i], AWAIT_MS));
	CU_ASSERT(waits_for(&ws[0], names[0]));
	CU_ASSERT(waits_for(&ws[1], names[0]));
	CU_ASSERT(waits_for(&ws[2], names[2]));
	CU_ASSERT(waits_for(&ws[3], names[3]));
	CU_ASSERT(waits_for(&ws[4], names[4]));
	for (int i = 0; i < N; i++)
		CU_ASSERT_EQUAL(atomic_load(&ws[i].log.woke), 0);

	/* W0 goes: R1 and R2 are woken and hold together; nobody else is woken. */
	CU_ASSERT_EQUAL(dlock_release(w0), DLOCK_OK);
	CU_ASSERT(dlock_test_await(rwc_held, &ws[0], AWAIT_MS));
	CU_ASSERT(dlock_test_await(rwc_held, &ws[1], AWAIT_MS));
	int expected_woke[N] = { 1, 1, 0, 0, 0 };
	/* R1 goes: W3 waits for R2, which still holds. */
	atomic_store(&ws[0].go, 1);
	CU_ASSERT(dlock_test_await(rwc_done, &ws[0], AWAIT_MS));
	/* R2 goes: W3 is woken and holds. */
	atomic_store(&ws[1].go, 1);
	CU_ASSERT(dlock_test_await(rwc_held, &ws[2], AWAIT_MS));
	expected_woke[2] = 1;
	CU_ASSERT(!rwc_held(&ws[3]) && !rwc_held(&ws[4]));
	/* W3 goes: R4 holds; W5 watches R4's node, which is still there. */
	atomic_store(&ws[2].go, 1);
	CU_ASSERT(dlock_test_await(rwc_held, &ws[3], AWAIT_MS));
	expected_woke[3] = 1;
	CU_ASSERT(!rwc_held(&ws[4]));
	for (int i = 0; i < N; i++) {
		if (atomic_load(&ws[i].log.woke) != expected_woke[i])
			printf("\n    contender %d was woken %d times", i + 1, atomic_load(&ws[i].log.woke));
		CU_ASSERT_EQUAL(atomic_load(&ws[i].log.woke), expected_woke[i]);
	}
	atomic_store(&ws[3].go, 1);
	CU_ASSERT(dlock_test_await(rwc_held, &ws[4], AWAIT_MS));
	CU_ASSERT_EQUAL(atomic_load(&ws[4].log.woke), 1);
	for (int i = 0; i < N; i++)
		rwc_finish(&ws[i]);
	CU_ASSERT(ws[0].ticket <= 1 && ws[1].ticket <= 1);
	CU_ASSERT_EQUAL(ws[2].ticket, 2);
	CU_ASSERT_EQUAL(ws[3].ticket, 3);
	CU_ASSERT_EQUAL(ws[4].ticket, 4);
	dlock_lock_free(w0);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	zookeeper_close(zh);
}

/*
 * A reader that comes after a waiting writer waits for it, though only
 * readers hold (writer-first; the waiting writer's node is what it
 * watches), and gets in once the writer has been and gone.  Such a reader
 * that gives up (try once, deadline, cancel) leaves no node.
 */
static void test_rw_reader_behind_writer(void)
{
	char uri[1024], parent[512], names[3][128];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "behind");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *a = open_client(uri, NULL), *b = open_client(uri, NULL);
	dlock_lock *r0 = new_rwlock(a, "behind"), *probe = new_rwlock(b, "behind");
	CU_ASSERT_EQUAL_FATAL(acquire_mode(r0, DLOCK_MODE_SHARED, 0, NULL), DLOCK_OK);
	struct rwc w1, r2;
	atomic_uint order = 0;
	rwc_start(&w1, ROLE_WRITER, uri, "behind", zh, parent, 2, &order);
	rwc_start(&r2, ROLE_READER, uri, "behind", zh, parent, 3, &order);
	CU_ASSERT_EQUAL_FATAL(raw_queue(zh, parent, names, 3), 3);
	CU_ASSERT(dlock_test_await(rwc_waiting, &r2, AWAIT_MS));
	CU_ASSERT(waits_for(&r2, names[1]));
	CU_ASSERT(!rwc_held(&r2));
	CU_ASSERT_EQUAL(acquire_mode(probe, DLOCK_MODE_SHARED, 0, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(acquire_mode(probe, DLOCK_MODE_SHARED, 200, NULL), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(raw_count(zh, parent), 3); /* the probe left nothing */
	struct canceller k = { probe, zh, parent, 4 };
	pthread_t th;
	CU_ASSERT_FATAL(pthread_create(&th, NULL, cancel_when_queued, &k) == 0);
	CU_ASSERT_EQUAL(acquire_mode(probe, DLOCK_MODE_SHARED, LONG_WAIT_MS, NULL), DLOCK_ECANCELED);
	pthread_join(th, NULL);
	CU_ASSERT_EQUAL(raw_count(zh, parent), 3); /* nor did the cancelled one */
	CU_ASSERT(!rwc_held(&r2) && !rwc_held(&w1));
	CU_ASSERT_EQUAL(dlock_release(r0), DLOCK_OK);
	CU_ASSERT(dlock_test_await(rwc_held, &w1, AWAIT_MS));
	CU_ASSERT(!rwc_held(&r2));
	atomic_store(&w1.go, 1);
	CU_ASSERT(dlock_test_await(rwc_held, &r2, AWAIT_MS));
	CU_ASSERT_EQUAL(acquire_mode(probe, DLOCK_MODE_SHARED, 0, NULL), DLOCK_OK); /* beside the reader */
	CU_ASSERT_EQUAL(dlock_release(probe), DLOCK_OK);
	rwc_finish(&w1);
	rwc_finish(&r2);
	CU_ASSERT_EQUAL(w1.ticket, 0);
	CU_ASSERT_EQUAL(r2.ticket, 1);
	dlock_lock_free(r0);
	dlock_lock_free(probe);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	zookeeper_close(zh);
}

/*
 * A lock lost with its session, in either mode: a reader whose session is
 * closed from outside is told (SESSION) and a waiting writer gets in; a
 * writer likewise, and a waiting reader of another client gets in
 * (Curator's testLockPath).  The lost holder's node is gone, and its
 * release is ENOTHELD.
 */
static void test_rw_lost_on_session_expiry(void)
{
	for (int m = 0; m < 2; m++) {
		dlock_lock_mode mode = m == 0 ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
		char uri[1024], parent[512], held[1024];
		fresh_base(uri, sizeof uri, "session_timeout=4s", parent, sizeof parent, "expired");
		zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
		dlock_client *h = open_client(uri, NULL);
		dlock_lock *l = new_rwlock(h, "expired");
		struct lost_rec r = { 0 };
		CU_ASSERT_EQUAL_FATAL(acquire_mode(l, mode, 0, &r), DLOCK_OK);
		CU_ASSERT_FATAL(raw_only_child(zh, parent, held, sizeof held));
		CU_ASSERT_PTR_NOT_NULL(strstr(held, m == 0 ? "-__READ__" : "-__WRIT__"));
		struct rwc w;
		atomic_uint order = 0;
		rwc_start(&w, m == 0 ? ROLE_WRITER : ROLE_READER, uri, "expired", zh, parent, 2, &order);
		expire_from_outside(h, &r);
		CU_ASSERT(dlock_test_await(rwc_held, &w, AWAIT_MS));
		struct Stat st;
		CU_ASSERT_EQUAL(zoo_exists(zh, held, 0, &st), ZNONODE);
		CU_ASSERT_EQUAL(dlock_check(l), DLOCK_ENOTHELD);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
		rwc_finish(&w);
		/* The client's next session serves the handle again. */
		CU_ASSERT_EQUAL(acquire_mode(l, mode, LONG_WAIT_MS, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		CU_ASSERT_EQUAL(atomic_load(&r.calls), 1);
		dlock_lock_free(l);
		CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
		zookeeper_close(zh);
	}
}

/*
 * One kind per name needs no refusal across clients here: mutex and
 * read-write nodes share one queue.  A reader queued behind another
 * client's mutex waits for the mutex's node, a mutex behind the reader
 * waits for the reader's; and a writer node made as Curator's own
 * InterProcessReadWriteLock names it (a UUID for GUID) keeps dlock's
 * readers and mutexes out.
 */
static void test_rw_mixed_kinds(void)
{
	char uri[1024], parent[512], names[3][128], curator[1024], made[1024];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "mixed");
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *a = open_client(uri, NULL), *b = open_client(uri, NULL);
	dlock_lock *m = new_lock(a, "mixed"), *probe_r = new_rwlock(b, "mixed"), *probe_m = new_lock(b, "mixed");
	CU_ASSERT_EQUAL_FATAL(acquire(m, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire_mode(probe_r, DLOCK_MODE_SHARED, 0, NULL), DLOCK_EBUSY); /* not EKIND */
	CU_ASSERT_EQUAL(acquire_mode(probe_r, DLOCK_MODE_EXCLUSIVE, 0, NULL), DLOCK_EBUSY);
	struct rwc r, m2;
	atomic_uint order = 0;
	rwc_start(&r, ROLE_READER, uri, "mixed", zh, parent, 2, &order);
	rwc_start(&m2, ROLE_MUTEX, uri, "mixed", zh, parent, 3, &order);
	CU_ASSERT_EQUAL_FATAL(raw_queue(zh, parent, names, 3), 3);
	CU_ASSERT(curator_form(names[0], "lock-") && curator_form(names[1], "__READ__") &&
	          curator_form(names[2], "lock-"));
	CU_ASSERT(dlock_test_await(rwc_waiting, &r, AWAIT_MS) && waits_for(&r, names[0]));
	CU_ASSERT(dlock_test_await(rwc_waiting, &m2, AWAIT_MS) && waits_for(&m2, names[1]));
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT(dlock_test_await(rwc_held, &r, AWAIT_MS));
	CU_ASSERT_EQUAL(acquire(probe_m, 0), DLOCK_EBUSY); /* a mutex is not let in beside a reader */
	CU_ASSERT(!rwc_held(&m2));
	atomic_store(&r.go, 1);
	CU_ASSERT(dlock_test_await(rwc_held, &m2, AWAIT_MS));
	rwc_finish(&r);
	rwc_finish(&m2);
	CU_ASSERT_EQUAL(r.ticket, 0);
	CU_ASSERT_EQUAL(m2.ticket, 1);

	/* Curator's writer, by hand: ephemeral sequential, its name as Curator writes it. */
	snprintf(curator, sizeof curator, "%s/_c_8eb60557-ba51-40da-87ee-fc47467d3f34-__WRIT__", parent);
	int rc = zoo_create(zh, curator, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, made, sizeof made);
	if (rc == ZNONODE) { /* the container was reaped meanwhile */
		zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0);
		rc = zoo_create(zh, curator, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, made, sizeof made);
	}
	CU_ASSERT_EQUAL_FATAL(rc, ZOK);
	CU_ASSERT_EQUAL(acquire_mode(probe_r, DLOCK_MODE_SHARED, 0, NULL), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(acquire(probe_m, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(zoo_delete(zh, made, -1), ZOK);
	CU_ASSERT_EQUAL(acquire_mode(probe_r, DLOCK_MODE_SHARED, 0, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(probe_r), DLOCK_OK);
	dlock_lock_free(m);
	dlock_lock_free(probe_r);
	dlock_lock_free(probe_m);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	zookeeper_close(zh);
}

/* ------------------------------------------------------------ semaphores */

static dlock_lock *new_sem(dlock_client *c, const char *name, uint32_t permits)
{
	dlock_lock *l = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(c, name, permits, &l), DLOCK_OK);
	return l;
}

/* The "locks" and "leases" children of a semaphore's node. */
static void sem_paths(const char *parent, char *locks, char *leases, size_t len)
{
	snprintf(locks, len, "%s/locks", parent);
	snprintf(leases, len, "%s/leases", parent);
}

/* A semaphore contender of N permits in its own client, started once `path` has `children` (its node queued). */
static void semc_start(struct rwc *w, const char *uri, const char *name, uint32_t permits, zhandle_t *zh,
                       const char *path, int children, atomic_uint *order)
{
	memset(w, 0, sizeof *w);
	w->role = ROLE_MUTEX; /* exclusive mode, as every permit */
	w->order = order;
	w->client = open_client(uri, &w->log);
	w->lock = new_sem(w->client, name, permits);
	CU_ASSERT_FATAL(pthread_create(&w->thread, NULL, rwc_main, w) == 0);
	CU_ASSERT_FATAL(await_count(zh, path, children));
}

/* The data of node `path` into out (NUL-terminated); 0 if it cannot be read. */
static int raw_data(zhandle_t *zh, const char *path, char *out, int len)
{
	struct Stat st;
	int n = len - 1;
	if (zoo_get(zh, path, 0, out, &n, &st) != ZOK || n < 0)
		return 0;
	out[n] = '\0';
	return 1;
}

/*
 * N permits across clients, each a lease node named as Curator's
 * InterProcessSemaphoreV2 names it (leases/_c_GUID-lease-N) with N in its
 * data; the (N+1)th contender waits, holding the internal mutex
 * (locks/_c_GUID-lock-N), and gets in when a holder leaves.  Permits get
 * neither token nor slot; release leaves nothing.
 */
static void test_sem_permits(void)
{
	enum { N = 3 };
	char uri[1024], parent[512], locks[600], leases[600], names[N + 1][128], node[2048], data[64];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "permits");
	sem_paths(parent, locks, leases, sizeof locks);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *cs[N];
	dlock_lock *ls[N];
	for (int i = 0; i < N; i++) {
		cs[i] = open_client(uri, NULL);
		ls[i] = new_sem(cs[i], "permits", N);
		CU_ASSERT_EQUAL_FATAL(acquire(ls[i], i == 0 ? 0 : LONG_WAIT_MS), DLOCK_OK);
		uint64_t t;
		uint32_t slot;
		CU_ASSERT_EQUAL(dlock_lock_fencing_token(ls[i], &t), DLOCK_ENOTSUP);
		CU_ASSERT_EQUAL(dlock_lock_permit_slot(ls[i], &slot), DLOCK_ENOTSUP);
		CU_ASSERT_EQUAL(dlock_check(ls[i]), DLOCK_OK);
	}
	CU_ASSERT_EQUAL(raw_count(zh, leases), N);
	CU_ASSERT(raw_count(zh, locks) <= 0); /* the internal mutex is let go once a permit is held */
	struct rwc w;
	atomic_uint order = 0;
	semc_start(&w, uri, "permits", N, zh, leases, N + 1, &order);
	CU_ASSERT_EQUAL_FATAL(raw_queue(zh, leases, names, N + 1), N + 1);
	for (int i = 0; i < N + 1; i++) {
		CU_ASSERT(curator_form(names[i], "lease-"));
		snprintf(node, sizeof node, "%s/%s", leases, names[i]);
		/* N, then the owner record for inspection (the internal mutex's nodes carry N alone). */
		CU_ASSERT(raw_data(zh, node, data, sizeof data) && strncmp(data, "dlock:permits=3\nid=", 19) == 0);
	}
	char lock_node[1024];
	CU_ASSERT_FATAL(raw_only_child(zh, locks, lock_node, sizeof lock_node));
	CU_ASSERT(curator_form(strrchr(lock_node, '/') + 1, "lock-"));
	CU_ASSERT(raw_data(zh, lock_node, data, sizeof data) && strcmp(data, "dlock:permits=3") == 0);
	CU_ASSERT(dlock_test_await(rwc_waiting, &w, AWAIT_MS));
	CU_ASSERT(!rwc_held(&w));
	CU_ASSERT_EQUAL(dlock_release(ls[1]), DLOCK_OK);
	CU_ASSERT(dlock_test_await(rwc_held, &w, AWAIT_MS));
	CU_ASSERT(await_count(zh, locks, 0) || raw_count(zh, locks) < 0);
	CU_ASSERT_EQUAL(raw_count(zh, leases), N);
	CU_ASSERT_EQUAL(w.token_st, DLOCK_ENOTSUP);
	rwc_finish(&w);
	for (int i = 0; i < N; i++) {
		if (i != 1)
			CU_ASSERT_EQUAL(dlock_release(ls[i]), DLOCK_OK);
		dlock_lock_free(ls[i]);
		CU_ASSERT_EQUAL(dlock_client_close(cs[i]), DLOCK_OK);
	}
	CU_ASSERT(raw_count(zh, leases) <= 0);
	zookeeper_close(zh);
}

/*
 * Waiters get permits in the order they asked (Curator's internal mutex):
 * the first holds the mutex and waits for the leases to change, the others
 * queue for the mutex.  Each is let in by the previous one's release.
 */
static void test_sem_fifo(void)
{
	enum { W = 4 };
	char uri[1024], parent[512], locks[600], leases[600];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "semfifo");
	sem_paths(parent, locks, leases, sizeof locks);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *h = open_client(uri, NULL);
	dlock_lock *held = new_sem(h, "semfifo", 1);
	CU_ASSERT_EQUAL_FATAL(acquire(held, 0), DLOCK_OK);
	struct rwc ws[W];
	atomic_uint order = 0;
	for (int i = 0; i < W; i++)
		semc_start(&ws[i], uri, "semfifo", 1, zh, locks, i + 1, &order);
	CU_ASSERT_EQUAL(raw_count(zh, leases), 2); /* the holder's and the first waiter's */
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	for (int i = 0; i < W; i++) {
		CU_ASSERT(dlock_test_await(rwc_held, &ws[i], AWAIT_MS));
		for (int j = i + 1; j < W; j++)
			CU_ASSERT(!rwc_held(&ws[j]));
		atomic_store(&ws[i].go, 1);
	}
	for (int i = 0; i < W; i++) {
		rwc_finish(&ws[i]);
		CU_ASSERT_EQUAL(ws[i].ticket, (unsigned)i);
	}
	CU_ASSERT(raw_count(zh, leases) <= 0);
	CU_ASSERT(raw_count(zh, locks) <= 0);
	dlock_lock_free(held);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	zookeeper_close(zh);
}

/* Two handles of one client: with N = 1 the second waits for the first; with N = 2 both hold, two leases. */
static void test_sem_one_client(void)
{
	char uri[1024], parent[512], locks[600], leases[600];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "oneclient");
	sem_paths(parent, locks, leases, sizeof locks);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *c = open_client(uri, NULL);
	dlock_lock *a = new_sem(c, "oneclient", 1), *b = new_sem(c, "oneclient", 1);
	CU_ASSERT_EQUAL_FATAL(acquire(a, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(b, 0), DLOCK_EBUSY);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, b, LONG_WAIT_MS, 0);
	dlock_test_sleep_ms(300);
	CU_ASSERT(!atomic_load(&w.done));
	CU_ASSERT_EQUAL(raw_count(zh, leases), 1);
	CU_ASSERT_EQUAL(dlock_release(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, AWAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(raw_count(zh, leases), 1);
	CU_ASSERT_EQUAL(dlock_release(b), DLOCK_OK);
	dlock_lock_free(a);
	dlock_lock_free(b);

	a = new_sem(c, "oneclient", 2);
	b = new_sem(c, "oneclient", 2);
	dlock_lock *third = new_sem(c, "oneclient", 2);
	CU_ASSERT_EQUAL(acquire(a, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(b, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(raw_count(zh, leases), 2);
	dlock_test_waiter_start(&w, third, 200, 0); /* another thread: this one holds all N */
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, AWAIT_MS), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(dlock_release(a), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(third, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(b), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(third), DLOCK_OK);
	CU_ASSERT(raw_count(zh, leases) <= 0);
	dlock_lock_free(a);
	dlock_lock_free(b);
	dlock_lock_free(third);
	CU_ASSERT_EQUAL(dlock_client_close(c), DLOCK_OK);
	zookeeper_close(zh);
}

/*
 * A client whose session is closed from outside loses both its permits
 * (each reported once) and frees them: another client's waiter gets in,
 * and the lost handles' release is ENOTHELD.
 */
static void test_sem_session_expiry(void)
{
	char uri[1024], parent[512], locks[600], leases[600];
	fresh_base(uri, sizeof uri, "session_timeout=4s", parent, sizeof parent, "semexpired");
	sem_paths(parent, locks, leases, sizeof locks);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *h = open_client(uri, NULL);
	dlock_lock *l1 = new_sem(h, "semexpired", 2), *l2 = new_sem(h, "semexpired", 2);
	struct lost_rec r1 = { 0 }, r2 = { 0 };
	CU_ASSERT_EQUAL_FATAL(acquire_watched(l1, 0, &r1), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire_watched(l2, 0, &r2), DLOCK_OK);
	struct rwc w;
	atomic_uint order = 0;
	semc_start(&w, uri, "semexpired", 2, zh, leases, 3, &order);
	expire_from_outside(h, &r1);
	CU_ASSERT(dlock_test_await(lost_called, &r2, AWAIT_MS));
	CU_ASSERT(dlock_test_await(rwc_held, &w, AWAIT_MS));
	CU_ASSERT(await_count(zh, leases, 1));
	CU_ASSERT_EQUAL(dlock_check(l1), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l2), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(atomic_load(&r1.calls), 1);
	CU_ASSERT_EQUAL(atomic_load(&r2.calls), 1);
	/* The client's next session serves its handles again, beside the other holder. */
	CU_ASSERT_EQUAL(acquire(l1, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(l2, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_release(l1), DLOCK_OK);
	rwc_finish(&w);
	dlock_lock_free(l1);
	dlock_lock_free(l2);
	CU_ASSERT_EQUAL(dlock_client_close(h), DLOCK_OK);
	zookeeper_close(zh);
}

/* 1 if the client's last message names both numbers, as "of A permits, not B". */
static int names_both(dlock_client *c, unsigned a, unsigned b)
{
	char want[64];
	snprintf(want, sizeof want, "of %u permits, not %u", a, b);
	const char *msg = dlock_client_errmsg(c);
	if (!strstr(msg, want))
		printf("\n    message \"%s\"", msg);
	return strstr(msg, want) != NULL;
}

/*
 * All clients agree on N: another N is refused (DLOCK_EKIND, naming both)
 * against the holders' leases, and against a waiter queued for the
 * internal mutex, and leaves no node.  A lease node of Curator's (its data
 * the creator's address) counts as a permit but says no N.  Once nobody
 * holds or waits, a new N applies.
 */
static void test_sem_n_mismatch(void)
{
	char uri[1024], parent[512], locks[600], leases[600], curator[1024], made[1024];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "semn");
	sem_paths(parent, locks, leases, sizeof locks);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *a = open_client(uri, NULL), *b = open_client(uri, NULL);
	dlock_lock *held = new_sem(a, "semn", 2), *four = new_sem(b, "semn", 4);
	CU_ASSERT_EQUAL_FATAL(acquire(held, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(four, 0), DLOCK_EKIND);
	CU_ASSERT(names_both(b, 2, 4));
	CU_ASSERT_EQUAL(acquire(four, LONG_WAIT_MS), DLOCK_EKIND);
	CU_ASSERT(names_both(b, 2, 4));
	CU_ASSERT_EQUAL(raw_count(zh, leases), 1);
	CU_ASSERT(raw_count(zh, locks) <= 0);

	/* Full, with a waiter holding the internal mutex and one queued behind it: refused behind them. */
	dlock_lock *second = new_sem(a, "semn", 2);
	CU_ASSERT_EQUAL_FATAL(acquire(second, 0), DLOCK_OK);
	struct rwc w1, w2;
	atomic_uint order = 0;
	semc_start(&w1, uri, "semn", 2, zh, leases, 3, &order);
	semc_start(&w2, uri, "semn", 2, zh, locks, 2, &order);
	CU_ASSERT_EQUAL(acquire(four, LONG_WAIT_MS), DLOCK_EKIND);
	CU_ASSERT(names_both(b, 2, 4));
	CU_ASSERT_EQUAL(raw_count(zh, locks), 2);
	CU_ASSERT_EQUAL(raw_count(zh, leases), 3);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(second), DLOCK_OK);
	CU_ASSERT(dlock_test_await(rwc_held, &w1, AWAIT_MS) && dlock_test_await(rwc_held, &w2, AWAIT_MS));
	rwc_finish(&w1);
	rwc_finish(&w2);
	CU_ASSERT(raw_count(zh, leases) <= 0);

	/* Nobody holds or waits: N = 4 applies now. */
	CU_ASSERT_EQUAL(acquire(four, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(held, 0), DLOCK_EKIND);
	CU_ASSERT(names_both(a, 4, 2));
	CU_ASSERT_EQUAL(dlock_release(four), DLOCK_OK);

	/* Curator's lease, by hand, with N = 1 here: it takes the one permit, and says no N. */
	snprintf(curator, sizeof curator, "%s/_c_8eb60557-ba51-40da-87ee-fc47467d3f34-lease-", leases);
	int rc = ZNONODE;
	for (int i = 0; i < 3 && rc == ZNONODE; i++) { /* the containers may be reaped meanwhile */
		zoo_create(zh, parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0);
		zoo_create(zh, leases, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0);
		rc = zoo_create(zh, curator, "127.0.1.1", 9, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, made,
		                sizeof made);
	}
	CU_ASSERT_EQUAL_FATAL(rc, ZOK);
	dlock_lock *one = new_sem(b, "semn", 1);
	CU_ASSERT_EQUAL(acquire(one, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(zoo_delete(zh, made, -1), ZOK);
	CU_ASSERT_EQUAL(acquire(one, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(one), DLOCK_OK);
	dlock_lock_free(one);
	dlock_lock_free(held);
	dlock_lock_free(second);
	dlock_lock_free(four);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	zookeeper_close(zh);
}

/*
 * One kind per name across clients: a semaphore's permit refuses another
 * client's mutex and read-write lock, and a mutex or a writer (held, or
 * waiting) refuses a semaphore, with DLOCK_EKIND and no node left behind.
 */
static void test_sem_vs_mutex(void)
{
	char uri[1024], parent[512], locks[600], leases[600];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "semkind");
	sem_paths(parent, locks, leases, sizeof locks);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *a = open_client(uri, NULL), *b = open_client(uri, NULL);
	dlock_lock *sem = new_sem(a, "semkind", 2), *m = new_lock(b, "semkind"), *rw = new_rwlock(b, "semkind");
	CU_ASSERT_EQUAL_FATAL(acquire(sem, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(m, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(b), "semaphore"));
	CU_ASSERT_EQUAL(acquire(m, LONG_WAIT_MS), DLOCK_EKIND);
	CU_ASSERT_EQUAL(acquire_mode(rw, DLOCK_MODE_SHARED, 0, NULL), DLOCK_EKIND);
	CU_ASSERT_EQUAL(acquire_mode(rw, DLOCK_MODE_EXCLUSIVE, LONG_WAIT_MS, NULL), DLOCK_EKIND);
	CU_ASSERT_EQUAL(raw_count(zh, parent), 1); /* "leases" only: no mutex or read-write node left */
	CU_ASSERT_EQUAL(dlock_release(sem), DLOCK_OK);
	CU_ASSERT(await_count(zh, leases, 0) || raw_count(zh, leases) < 0);

	CU_ASSERT_EQUAL_FATAL(acquire(m, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(sem, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "mutex"));
	CU_ASSERT_EQUAL(acquire(sem, LONG_WAIT_MS), DLOCK_EKIND);
	CU_ASSERT(raw_count(zh, leases) <= 0);
	CU_ASSERT(raw_count(zh, locks) <= 0);
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire_mode(rw, DLOCK_MODE_SHARED, 0, NULL), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(sem, 0), DLOCK_EKIND);
	CU_ASSERT_PTR_NOT_NULL(strstr(dlock_client_errmsg(a), "read-write"));
	CU_ASSERT_EQUAL(dlock_release(rw), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(sem, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(sem), DLOCK_OK);
	dlock_lock_free(sem);
	dlock_lock_free(m);
	dlock_lock_free(rw);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	zookeeper_close(zh);
}

/*
 * A waiter for a permit gives up on its deadline and on dlock_cancel(),
 * leaving neither lease nor lock node, and the holders keep theirs; try
 * once is EBUSY at once.
 */
static void test_sem_give_up(void)
{
	char uri[1024], parent[512], locks[600], leases[600];
	fresh_base(uri, sizeof uri, "", parent, sizeof parent, "semgiveup");
	sem_paths(parent, locks, leases, sizeof locks);
	zhandle_t *zh = raw_open(zk_hosts, NULL, NULL);
	dlock_client *a = open_client(uri, NULL), *b = open_client(uri, NULL);
	dlock_lock *held = new_sem(a, "semgiveup", 1), *other = new_sem(b, "semgiveup", 1);
	CU_ASSERT_EQUAL_FATAL(acquire(held, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(other, 0), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(raw_count(zh, leases), 1);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(acquire(other, 300), DLOCK_ETIMEDOUT);
	CU_ASSERT(dlock_test_now_ms() - t0 >= 300 && dlock_test_now_ms() - t0 < 300 + SLACK_MS);
	CU_ASSERT_EQUAL(raw_count(zh, leases), 1);
	CU_ASSERT(raw_count(zh, locks) <= 0);
	struct canceller k = { other, zh, leases, 2 };
	pthread_t th;
	CU_ASSERT_FATAL(pthread_create(&th, NULL, cancel_when_queued, &k) == 0);
	t0 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(acquire(other, LONG_WAIT_MS), DLOCK_ECANCELED);
	pthread_join(th, NULL);
	CU_ASSERT(dlock_test_now_ms() - t0 < AWAIT_MS);
	CU_ASSERT_EQUAL(raw_count(zh, leases), 1);
	CU_ASSERT(raw_count(zh, locks) <= 0);
	CU_ASSERT_EQUAL(dlock_check(held), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(held), DLOCK_OK);
	CU_ASSERT_EQUAL(acquire(other, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(other), DLOCK_OK);
	dlock_lock_free(held);
	dlock_lock_free(other);
	CU_ASSERT_EQUAL(dlock_client_close(a), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_client_close(b), DLOCK_OK);
	zookeeper_close(zh);
}

/* ------------------------------------------------------------ teardown */

/* Threads of this process; the client library runs two per open handle. */
static int thread_count(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static int threads_before_tests;

static int threads_back(void *arg)
{
	(void)arg;
	return thread_count() == threads_before_tests;
}

/* Every handle closed: no thread of the library (or of dlock) outlives the clients.  ASan's leak
 * check leaves the library's own allocations alone (tests/lsan.supp), so this is what catches a
 * handle that is never closed. */
static void test_every_handle_closed(void)
{
	CU_ASSERT_FATAL(threads_before_tests > 0);
	CU_ASSERT(dlock_test_await(threads_back, NULL, AWAIT_MS));
}

/* ------------------------------------------------------------ main */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("zookeeper", NULL, NULL);
	CU_add_test(s, "malformed URIs are EURI", test_bad_uris);
	CU_add_test(s, "a dead port is ECONNECT within open_timeout", test_dead_port_fast);
	CU_add_test(s, "capabilities", test_capabilities);
	CU_add_test(s, "base path on demand, node layout, czxid token", test_layout_and_token);
	CU_add_test(s, "odd names map to safe, distinct components", test_names_safe_paths);
	CU_add_test(s, "the client library writes nothing on stderr", test_library_quiet);
	CU_add_test(s, "FIFO over 50 contenders of separate clients", test_fifo_many);
	CU_add_test(s, "no herd: each waiter is woken once", test_no_herd);
	CU_add_test(s, "try once, timeout and cancel leave no node", test_give_up_leaves_nothing);
	CU_add_test(s, "a reaped parent is made again; the token still grows", test_parent_reaped);
	CU_add_test(s, "holder's node deleted by another client: lost at once, TAKEN", test_deleted_node_lost);
	CU_add_test(s, "holder's node changed, then deleted: still lost at once", test_changed_then_deleted);
	CU_add_test(s, "release and giving up report no loss", test_release_is_no_loss);
	CU_add_test(s, "a waiter's node deleted: it queues again at once", test_deleted_waiter_requeues);
	CU_add_test(s, "a waiter that got the lock: its node deleted is lost at once", test_waiter_then_deleted);
	CU_add_test(s, "a contender in the middle gives up: the next one waits for the holder", test_middle_gives_up);
	CU_add_test(s, "a node numbered after the wrap queues before ours", test_seq_negative_queued);
	CU_add_test(s, "ACL: another identity deletes neither node nor parent", test_acl);
	CU_add_test(s, "session closed from outside: lost, next holder, larger token", test_session_expiry_steal);
	CU_add_test(s, "session closed from outside: the client's next handle gets the lock", test_session_expiry_local_waiter);
	CU_add_test(s, "holder stopped past its session: lost, next holder", test_session_expiry_stopped_holder);
	CU_pSuite e = CU_add_suite("zookeeper ensemble", NULL, NULL);
	CU_add_test(e, "disconnected: uncertain, then lost after the session timeout", test_disconnected_then_lost);
	CU_add_test(e, "leader stopped: held lock survives, new locks work", test_ensemble_leader_down);
	CU_add_test(e, "the holder's server stops: it moves, the lock stays", test_ensemble_client_moves);
	CU_pSuite rw = CU_add_suite("zookeeper read-write", NULL, NULL);
	CU_add_test(rw, "Curator's node names: one __READ__ per reader, one __WRIT__ per writer", test_rw_node_names);
	CU_add_test(rw, "each waiter watches only its blocker; queue order", test_rw_watch_only_blocker);
	CU_add_test(rw, "a reader behind a waiting writer waits for it", test_rw_reader_behind_writer);
	CU_add_test(rw, "a read or write lock lost with its session; the other mode gets in", test_rw_lost_on_session_expiry);
	CU_add_test(rw, "mutex, read-write and Curator's nodes share one queue", test_rw_mixed_kinds);
	CU_pSuite sem = CU_add_suite("zookeeper semaphore", NULL, NULL);
	CU_add_test(sem, "N permits across clients, Curator's lease and lock nodes; the next waits", test_sem_permits);
	CU_add_test(sem, "waiters get permits in FIFO order", test_sem_fifo);
	CU_add_test(sem, "two permits of one client: N = 1 makes the second wait, N = 2 not", test_sem_one_client);
	CU_add_test(sem, "a session closed from outside: every permit lost and freed", test_sem_session_expiry);
	CU_add_test(sem, "another N is EKIND naming both, against holders and queued waiters", test_sem_n_mismatch);
	CU_add_test(sem, "a semaphore and a mutex or read-write lock refuse each other", test_sem_vs_mutex);
	CU_add_test(sem, "deadline, cancel and try once leave no node", test_sem_give_up);
	CU_pSuite t = CU_add_suite("zookeeper teardown", NULL, NULL);
	CU_add_test(t, "every handle closed: no thread outlives its client", test_every_handle_closed);
}

int main(void)
{
	zk_uri = dlock_test_env("DLOCK_TEST_ZK_URI");
	ens_uri = dlock_test_env("DLOCK_TEST_ZK_ENSEMBLE_URI");
	ctl = dlock_test_env("DLOCK_TEST_ZK_CTL");
	const char *ports = dlock_test_env("DLOCK_TEST_ZK_ENSEMBLE_PORTS");
	if (!zk_uri || !ens_uri || !ctl || !ports || strncmp(zk_uri, "zk://", 5) != 0 ||
	    strncmp(ens_uri, "zk://", 5) != 0 ||
	    sscanf(ports, "%d %d %d", &ens_ports[0], &ens_ports[1], &ens_ports[2]) != 3) {
		return dlock_test_skip("no ZooKeeper server (DLOCK_TEST_ZK_URI unset)");
	}
	snprintf(zk_hosts, sizeof zk_hosts, "%s", zk_uri + 5);
	snprintf(ens_hosts, sizeof ens_hosts, "%s", ens_uri + 5);
	setvbuf(stdout, NULL, _IOLBF, 0);
	threads_before_tests = thread_count();
	return dlock_test_main(add_suites);
}
