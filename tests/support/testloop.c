/* Loop clients driven by the test (testloop.h). */
#include "testloop.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "dlock/loop.h"

#define TL_TEXT_MAX 1024
/* Clients whose last failure text each thread keeps (testloop_client_errmsg()). */
#define TL_TEXTS 8

typedef struct tl_client tl_client;
typedef struct tl_call tl_call;

/*
 * One call posted to a loop thread.  `start` runs on that thread: it makes
 * the call there, or starts its _async form, and tl_finish() ends it (at
 * once, or from the callback).  The posting thread owns the record.
 */
struct tl_call {
	tl_call *next;
	tl_client *c;
	const char *what;
	void (*start)(tl_call *k);
	/* arguments */
	dlock_client *client;
	dlock_lock *lock;
	dlock_election *e;
	const char *text; /* a name, a value or a prefix */
	const dlock_acquire_options *opts;
	int64_t n;        /* a lease, a feature code, a lock's kind */
	uint32_t permits;
	void *out;        /* the caller's pointer for what a call answers, passed through */
	dlock_leader_fn observer;
	void *userdata;
	void (*fn)(void *arg);
	/* results */
	dlock_status status;
	uint64_t term;
	size_t broken;
	const void *result; /* an info, list, leader, name or lock */
	int starting;       /* inside the start call (a callback then breaks the contract) */
	int broke_contract;
	int early;          /* called back inside the start call, with early_status: ended by tl_started() */
	dlock_status early_status;
	int has_text;       /* a failure: `text_out` holds the client's detail */
	char text_out[TL_TEXT_MAX];
	int done;           /* under c->mu */
};

/* A loop client and the thread that drives it. */
struct tl_client {
	dlock_client *client; /* the key it is known by, also once closed */
	char *uri;
	pthread_t thread;
	int wake_fd;          /* eventfd: calls were posted, or `stop` set */
	pthread_mutex_t mu;   /* guards the queue, `stop` and the calls' `done` */
	pthread_cond_t cv;
	tl_call *head, *tail;
	int stop;
	int live;             /* loop thread only: open and not yet closed */
	/* Under registry_mu: */
	int closed;           /* its close has completed */
	size_t handles;       /* locks and elections made on it and not yet freed */
	int reaped;
	/* The open (the loop thread's first call). */
	const dlock_client_options *open_opts;
	char *open_errbuf;
	size_t open_errlen;
	tl_call *open_call;
	dlock_status open_failed;
};

/* Which loop client each key (a client, lock, election or an election's lock) belongs to. */
typedef struct tl_entry {
	const void *key;
	tl_client *c;
	int is_handle; /* counts in c->handles */
	struct tl_entry *next;
} tl_entry;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static tl_entry *registry;

/* The client whose loop this thread drives (NULL on the test's threads). */
static _Thread_local tl_client *tl_self;

/* The last failure text of this thread's calls, per client. */
static _Thread_local struct {
	const dlock_client *client;
	char text[TL_TEXT_MAX];
} tl_texts[TL_TEXTS];
static _Thread_local unsigned tl_texts_next;

/* ------------------------------------------------------- registry */

static tl_entry **tl_slot(const void *key)
{
	tl_entry **p = &registry;
	while (*p && (*p)->key != key)
		p = &(*p)->next;
	return p;
}

static tl_client *tl_find(const void *key)
{
	if (!key)
		return NULL;
	pthread_mutex_lock(&registry_mu);
	tl_entry *e = *tl_slot(key);
	tl_client *c = e ? e->c : NULL;
	pthread_mutex_unlock(&registry_mu);
	return c;
}

/* Forget `key` (a stale entry whose memory the library reused), under registry_mu. */
static void tl_unlink(const void *key, tl_client *only)
{
	tl_entry **p = tl_slot(key);
	tl_entry *e = *p;
	if (!e || (only && e->c != only))
		return;
	*p = e->next;
	if (e->is_handle && e->c->handles > 0)
		e->c->handles--;
	free(e);
}

static void tl_register(const void *key, tl_client *c, int is_handle)
{
	tl_entry *e = calloc(1, sizeof *e);
	if (!e)
		abort();
	*e = (tl_entry){ key, c, is_handle, NULL };
	pthread_mutex_lock(&registry_mu);
	tl_unlink(key, NULL);
	e->next = registry;
	registry = e;
	c->handles += is_handle != 0;
	pthread_mutex_unlock(&registry_mu);
}

static void tl_forget(const void *key, tl_client *c)
{
	pthread_mutex_lock(&registry_mu);
	tl_unlink(key, c);
	pthread_mutex_unlock(&registry_mu);
}

/* 1 where `key` is no loop client's (NULL) or this is its loop thread: there, the library's own call. */
static int tl_direct(const void *key)
{
	tl_client *c = tl_find(key);
	return !c || tl_self == c;
}

/* ------------------------------------------------------- failure texts */

static void tl_note_text(const dlock_client *client, const char *text)
{
	unsigned i = 0;
	while (i < TL_TEXTS && tl_texts[i].client != client)
		i++;
	if (i == TL_TEXTS)
		i = tl_texts_next++ % TL_TEXTS;
	tl_texts[i].client = client;
	snprintf(tl_texts[i].text, sizeof tl_texts[i].text, "%s", text);
}

const char *testloop_client_errmsg(dlock_client *client)
{
	tl_client *c = tl_find(client);
	if (!c || tl_self == c)
		return dlock_client_errmsg(client);
	for (unsigned i = 0; i < TL_TEXTS; i++)
		if (tl_texts[i].client == client)
			return tl_texts[i].text;
	return "";
}

/* ------------------------------------------------------- calls */

static tl_call *tl_call_new(const char *what, void (*start)(tl_call *k))
{
	tl_call *k = calloc(1, sizeof *k);
	if (!k)
		abort();
	k->what = what;
	k->start = start;
	k->status = DLOCK_STATUS_COUNT_;
	return k;
}

static void tl_wake(tl_client *c)
{
	uint64_t one = 1;
	if (write(c->wake_fd, &one, sizeof one) != (ssize_t)sizeof one && errno != EAGAIN) {
		perror("testloop: eventfd");
		abort();
	}
}

/*
 * The client that `k`'s failure text is read from, on the loop thread: the
 * loop client, while it is open or `k` is a call of one of its handles
 * (which keep it in memory once closed); else none.
 */
static dlock_client *tl_text_client(const tl_call *k)
{
	return k->c->live || k->lock || k->e ? k->c->client : NULL;
}

/* End `k` with `st` (on the loop thread); a failure takes the client's text with it. */
static void tl_finish(tl_call *k, dlock_status st)
{
	tl_client *c = k->c;
	dlock_client *client = tl_text_client(k);
	k->status = st;
	if (st != DLOCK_OK && client) {
		k->has_text = 1;
		snprintf(k->text_out, sizeof k->text_out, "%s", dlock_client_errmsg(client));
	}
	pthread_mutex_lock(&c->mu);
	k->done = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/*
 * A callback's end of `k`.  One that comes inside its start call breaks
 * the contract (dlock/loop.h): it is said, and left for tl_started() to
 * end, since the poster may free `k` as soon as it ends.
 */
static void tl_callback_end(tl_call *k, dlock_status st)
{
	if (k->starting) {
		printf("\n    LOOP CONTRACT BROKEN: %s called back inside its start call", k->what);
		fflush(stdout);
		k->broke_contract = 1;
		k->early = 1;
		k->early_status = st;
		return;
	}
	tl_finish(k, st);
}

/* The start call returned `st`: a failure ends `k` now (no callback will come). */
static void tl_started(tl_call *k, dlock_status st)
{
	k->starting = 0;
	if (k->early)
		tl_finish(k, k->early_status);
	else if (st != DLOCK_OK)
		tl_finish(k, st);
}

static void tl_wait(tl_call *k)
{
	tl_client *c = k->c;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += TESTLOOP_WAIT_MS / 1000;
	pthread_mutex_lock(&c->mu);
	while (!k->done) {
		if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT && !k->done) {
			printf("\nFATAL: %s: no callback after %d ms (a start call that returned DLOCK_OK must call back"
			       " exactly once)\n",
			       k->what, TESTLOOP_WAIT_MS);
			fflush(stdout);
			abort();
		}
	}
	pthread_mutex_unlock(&c->mu);
}

/*
 * Run `k` on `c`'s loop thread and wait for it to end; the calling thread
 * then sees its failure text.  Returns its status (DLOCK_STATUS_COUNT_, and
 * a line said, when the library broke the callback contract doing it).
 */
static dlock_status tl_do(tl_client *c, tl_call *k)
{
	k->c = c;
	pthread_mutex_lock(&c->mu);
	if (c->tail)
		c->tail->next = k;
	else
		c->head = k;
	c->tail = k;
	pthread_mutex_unlock(&c->mu);
	tl_wake(c);
	tl_wait(k);
	if (k->has_text)
		tl_note_text(c->client, k->text_out);
	return k->broke_contract ? DLOCK_STATUS_COUNT_ : k->status;
}

/* tl_do() on the client of `key`, for a call whose status is all it answers; frees `k`. */
static dlock_status tl_run(const void *key, tl_call *k)
{
	dlock_status st = tl_do(tl_find(key), k);
	free(k);
	return st;
}

/* The start of an _async form given a NULL handle: it must refuse, and never call back. */
static dlock_status tl_null_start(dlock_status st, const char *what)
{
	if (st == DLOCK_OK) {
		printf("\n    LOOP CONTRACT BROKEN: %s accepted a NULL argument", what);
		return DLOCK_STATUS_COUNT_;
	}
	return st;
}

static void tl_never_lock(dlock_lock *lock, dlock_status st, void *ud)
{
	(void)lock, (void)st, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

static void tl_never_open(dlock_client *client, dlock_status st, void *ud)
{
	(void)client, (void)st, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

/* Run every posted call, in order (loop thread). */
static void tl_run_posted(tl_client *c)
{
	pthread_mutex_lock(&c->mu);
	tl_call *k = c->head;
	c->head = c->tail = NULL;
	pthread_mutex_unlock(&c->mu);
	while (k) {
		tl_call *next = k->next;
		k->start(k); /* may end k, and its poster free it */
		k = next;
	}
}

/* ------------------------------------------------------- the loop thread */

static void tl_stop(tl_client *c)
{
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_mutex_unlock(&c->mu);
}

/* A failed open's client is closed: the open ends with the status it failed with. */
static void on_failed_open_closed(dlock_status st, void *ud)
{
	tl_client *c = ud;
	(void)st;
	c->live = 0;
	tl_stop(c);
	tl_finish(c->open_call, c->open_failed);
}

static void on_open(dlock_client *client, dlock_status st, void *ud)
{
	tl_client *c = ud;
	tl_call *k = c->open_call;
	if (st == DLOCK_OK) {
		tl_callback_end(k, DLOCK_OK);
		return;
	}
	/* Failed: keep its text, then close the client (dlock/loop.h: in either case). */
	k->has_text = 1;
	snprintf(k->text_out, sizeof k->text_out, "%s", dlock_client_errmsg(client));
	c->open_failed = st;
	dlock_status cst = dlock_client_close_async(client, on_failed_open_closed, c);
	if (cst != DLOCK_OK) {
		printf("\n    dlock_client_close_async after a failed open: %s", dlock_status_name(cst));
		on_failed_open_closed(cst, c);
	}
}

static int tl_timeout(int64_t ms)
{
	return ms < 0 ? -1 : ms > INT_MAX ? INT_MAX : (int)ms;
}

static void *tl_loop_main(void *arg)
{
	tl_client *c = arg;
	tl_self = c;
	c->open_call->starting = 1;
	dlock_status st = dlock_client_open_async(&c->client, c->uri, c->open_opts, NULL, on_open, c, c->open_errbuf,
	                                          c->open_errlen);
	c->live = st == DLOCK_OK;
	if (st != DLOCK_OK)
		tl_stop(c);
	tl_started(c->open_call, st);
	for (;;) {
		pthread_mutex_lock(&c->mu);
		int stop = c->stop;
		pthread_mutex_unlock(&c->mu);
		if (stop)
			break;
		struct pollfd fds[2] = { { c->wake_fd, POLLIN, 0 }, { c->live ? dlock_loop_fd(c->client) : -1, POLLIN, 0 } };
		int timeout = c->live ? tl_timeout(dlock_loop_timeout_ms(c->client)) : -1;
		if (poll(fds, 2, timeout) < 0 && errno != EINTR) {
			perror("testloop: poll");
			abort();
		}
		uint64_t n;
		if ((fds[0].revents & POLLIN) && read(c->wake_fd, &n, sizeof n) < 0 && errno != EAGAIN) {
			perror("testloop: eventfd");
			abort();
		}
		tl_run_posted(c);
		if (c->live)
			dlock_loop_run(c->client);
	}
	return NULL;
}

static void tl_client_free(tl_client *c)
{
	close(c->wake_fd);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c->uri);
	free(c);
}

/* Once `c` is closed and its last handle freed: end its thread (not from that thread). */
static void tl_reap_if_done(tl_client *c)
{
	if (tl_self == c)
		return;
	pthread_mutex_lock(&registry_mu);
	int reap = c->closed && c->handles == 0 && !c->reaped;
	if (reap) {
		c->reaped = 1;
		tl_unlink(c->client, c);
	}
	pthread_mutex_unlock(&registry_mu);
	if (!reap)
		return;
	tl_stop(c);
	tl_wake(c);
	pthread_join(c->thread, NULL);
	tl_client_free(c);
}

/* ------------------------------------------------------- clients */

dlock_status testloop_client_open(dlock_client **out, const char *uri, const dlock_client_options *opts,
                                  char *errbuf, size_t errlen)
{
	if (!out)
		return tl_null_start(dlock_client_open_async(NULL, uri, opts, NULL, tl_never_open, NULL, errbuf, errlen),
		                     "dlock_client_open_async");
	*out = NULL;
	tl_client *c = calloc(1, sizeof *c);
	if (!c)
		abort();
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &attr);
	pthread_condattr_destroy(&attr);
	c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->uri = uri ? strdup(uri) : NULL;
	if (c->wake_fd < 0 || (uri && !c->uri))
		abort();
	c->open_opts = opts;
	c->open_errbuf = errbuf;
	c->open_errlen = errlen;
	tl_call *k = tl_call_new("dlock_client_open_async", NULL);
	k->c = c;
	c->open_call = k;
	if (pthread_create(&c->thread, NULL, tl_loop_main, c) != 0)
		abort();
	tl_wait(k);
	dlock_status st = k->broke_contract ? DLOCK_STATUS_COUNT_ : k->status;
	if (st != DLOCK_OK) {
		/* A start that failed wrote errbuf itself; a failure called back gives its text here. */
		if (k->has_text && errbuf && errlen)
			snprintf(errbuf, errlen, "%s", k->text_out);
		pthread_join(c->thread, NULL);
		free(k);
		tl_client_free(c);
		return st;
	}
	free(k);
	tl_register(c->client, c, 0);
	*out = c->client;
	return DLOCK_OK;
}

static void on_closed(dlock_status st, void *ud)
{
	tl_call *k = ud;
	tl_client *c = k->c;
	c->live = 0; /* pull mode: the descriptor is no longer watched from here on */
	pthread_mutex_lock(&registry_mu);
	c->closed = 1;
	pthread_mutex_unlock(&registry_mu);
	tl_callback_end(k, st);
}

static void start_close(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_client_close_async(k->client, on_closed, k));
}

dlock_status testloop_client_close(dlock_client *client)
{
	tl_client *c = tl_find(client);
	if (!c || tl_self == c)
		return dlock_client_close(client);
	tl_call *k = tl_call_new("dlock_client_close_async", start_close);
	k->client = client;
	dlock_status st = tl_do(c, k);
	free(k);
	tl_reap_if_done(c);
	return st;
}

/* Calls that do not talk to the server run on the loop thread at once. */
static void start_uri(tl_call *k)
{
	k->result = dlock_client_uri(k->client);
	tl_finish(k, DLOCK_OK);
}

const char *testloop_client_uri(const dlock_client *client)
{
	tl_client *c = tl_find(client);
	if (!c || tl_self == c)
		return dlock_client_uri(client);
	tl_call *k = tl_call_new("dlock_client_uri", start_uri);
	k->client = (dlock_client *)(uintptr_t)client;
	tl_do(c, k);
	const char *uri = k->result;
	free(k);
	return uri;
}

static void start_get_stats(tl_call *k)
{
	tl_finish(k, dlock_client_get_stats(k->client, k->out));
}

static void start_capabilities(tl_call *k)
{
	tl_finish(k, dlock_client_capabilities(k->client, k->out));
}

static void start_feature(tl_call *k)
{
	tl_finish(k, dlock_client_feature(k->client, (dlock_feature)k->n, k->out));
}

/* A call of `client` that answers through `out` and does not talk to the server, on its loop thread. */
static dlock_status tl_client_get(dlock_client *client, const char *what, void (*start)(tl_call *k), int64_t n,
                                  void *out)
{
	tl_call *k = tl_call_new(what, start);
	k->client = client;
	k->n = n;
	k->out = out;
	return tl_run(client, k);
}

dlock_status testloop_client_get_stats(dlock_client *client, dlock_client_stats *stats)
{
	return tl_direct(client) ? dlock_client_get_stats(client, stats)
	                         : tl_client_get(client, "dlock_client_get_stats", start_get_stats, 0, stats);
}

dlock_status testloop_client_capabilities(dlock_client *client, dlock_capabilities *caps)
{
	return tl_direct(client) ? dlock_client_capabilities(client, caps)
	                         : tl_client_get(client, "dlock_client_capabilities", start_capabilities, 0, caps);
}

dlock_status testloop_client_feature(dlock_client *client, dlock_feature feature, int64_t *value)
{
	return tl_direct(client) ? dlock_client_feature(client, feature, value)
	                         : tl_client_get(client, "dlock_client_feature", start_feature, feature, value);
}

/* ------------------------------------------------------- handles */

/* dlock_lock_new(), dlock_rwlock_new() or dlock_semaphore_new(), as `kind` says. */
static dlock_status tl_make_lock(dlock_client *client, const char *name, dlock_lock_kind kind, uint32_t permits,
                                 dlock_lock **out)
{
	switch (kind) {
	case DLOCK_KIND_RWLOCK:
		return dlock_rwlock_new(client, name, out);
	case DLOCK_KIND_SEMAPHORE:
		return dlock_semaphore_new(client, name, permits, out);
	default:
		return dlock_lock_new(client, name, out);
	}
}

static void start_lock_new(tl_call *k)
{
	dlock_lock **out = k->out;
	dlock_status st = tl_make_lock(k->client, k->text, (dlock_lock_kind)k->n, k->permits, out);
	if (st == DLOCK_OK && out && *out)
		tl_register(*out, k->c, 1);
	tl_finish(k, st);
}

static dlock_status tl_lock_new(dlock_client *client, const char *name, dlock_lock_kind kind, uint32_t permits,
                                dlock_lock **out)
{
	tl_client *c = tl_find(client);
	if (!c) /* NULL or not a loop client: the library's own answer */
		return tl_make_lock(client, name, kind, permits, out);
	tl_call *k = tl_call_new("dlock_lock_new", start_lock_new);
	k->client = client;
	k->text = name;
	k->n = kind;
	k->permits = permits;
	k->out = out;
	if (tl_self == c) {
		k->c = c;
		start_lock_new(k);
	} else {
		tl_do(c, k);
	}
	dlock_status st = k->status;
	free(k);
	return st;
}

dlock_status testloop_lock_new(dlock_client *client, const char *name, dlock_lock **out)
{
	return tl_lock_new(client, name, DLOCK_KIND_MUTEX, 0, out);
}

dlock_status testloop_rwlock_new(dlock_client *client, const char *name, dlock_lock **out)
{
	return tl_lock_new(client, name, DLOCK_KIND_RWLOCK, 0, out);
}

dlock_status testloop_semaphore_new(dlock_client *client, const char *name, uint32_t permits, dlock_lock **out)
{
	return tl_lock_new(client, name, DLOCK_KIND_SEMAPHORE, permits, out);
}

static void start_lock_free(tl_call *k)
{
	tl_forget(k->lock, k->c);
	dlock_lock_free(k->lock);
	tl_finish(k, DLOCK_OK);
}

void testloop_lock_free(dlock_lock *lock)
{
	tl_client *c = tl_find(lock);
	if (!c || tl_self == c) {
		if (c)
			tl_forget(lock, c);
		dlock_lock_free(lock);
		return;
	}
	tl_call *k = tl_call_new("dlock_lock_free", start_lock_free);
	k->lock = lock;
	tl_do(c, k);
	free(k);
	tl_reap_if_done(c);
}

/* Getters of a handle, on its loop thread. */
static void start_lock_name(tl_call *k)
{
	k->result = dlock_lock_name(k->lock);
	tl_finish(k, DLOCK_OK);
}

static void start_lock_kind(tl_call *k)
{
	k->n = dlock_lock_get_kind(k->lock);
	tl_finish(k, DLOCK_OK);
}

static void start_lock_permits(tl_call *k)
{
	k->n = dlock_lock_permits(k->lock);
	tl_finish(k, DLOCK_OK);
}

/* A getter `start` of `lock` run on its loop thread; NULL when `lock` is not a loop client's (then run here). */
static tl_call *tl_getter(const dlock_lock *lock, const char *what, void (*start)(tl_call *k))
{
	tl_client *c = tl_find(lock);
	if (!c || tl_self == c)
		return NULL;
	tl_call *k = tl_call_new(what, start);
	k->lock = (dlock_lock *)(uintptr_t)lock;
	tl_do(c, k);
	return k;
}

const char *testloop_lock_name(const dlock_lock *lock)
{
	tl_call *k = tl_getter(lock, "dlock_lock_name", start_lock_name);
	if (!k)
		return dlock_lock_name(lock);
	const char *name = k->result;
	free(k);
	return name;
}

dlock_lock_kind testloop_lock_get_kind(const dlock_lock *lock)
{
	tl_call *k = tl_getter(lock, "dlock_lock_get_kind", start_lock_kind);
	if (!k)
		return dlock_lock_get_kind(lock);
	dlock_lock_kind kind = (dlock_lock_kind)k->n;
	free(k);
	return kind;
}

uint32_t testloop_lock_permits(const dlock_lock *lock)
{
	tl_call *k = tl_getter(lock, "dlock_lock_permits", start_lock_permits);
	if (!k)
		return dlock_lock_permits(lock);
	uint32_t permits = (uint32_t)k->n;
	free(k);
	return permits;
}

static void start_fencing_token(tl_call *k)
{
	tl_finish(k, dlock_lock_fencing_token(k->lock, k->out));
}

static void start_permit_slot(tl_call *k)
{
	tl_finish(k, dlock_lock_permit_slot(k->lock, k->out));
}

/* ------------------------------------------------------- operations on a handle */

static void on_lock_done(dlock_lock *lock, dlock_status st, void *ud)
{
	tl_call *k = ud;
	(void)lock;
	tl_callback_end(k, st);
}

static void start_acquire(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_acquire_async(k->lock, k->opts, on_lock_done, k));
}

static void start_release(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_release_async(k->lock, on_lock_done, k));
}

static void start_extend(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_extend_async(k->lock, k->n, on_lock_done, k));
}

static void start_check(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_check_async(k->lock, on_lock_done, k));
}

/* A call of `lock`, a loop client's handle, on its loop thread. */
static dlock_status tl_lock_op(dlock_lock *lock, const char *what, void (*start)(tl_call *k),
                               const dlock_acquire_options *opts, int64_t n, void *out)
{
	tl_call *k = tl_call_new(what, start);
	k->lock = lock;
	k->opts = opts;
	k->n = n;
	k->out = out;
	return tl_run(lock, k);
}


dlock_status testloop_lock_fencing_token(dlock_lock *lock, uint64_t *token)
{
	if (tl_direct(lock))
		return dlock_lock_fencing_token(lock, token);
	return tl_lock_op(lock, "dlock_lock_fencing_token", start_fencing_token, NULL, 0, token);
}

dlock_status testloop_lock_permit_slot(dlock_lock *lock, uint32_t *slot)
{
	if (tl_direct(lock))
		return dlock_lock_permit_slot(lock, slot);
	return tl_lock_op(lock, "dlock_lock_permit_slot", start_permit_slot, NULL, 0, slot);
}

dlock_status testloop_acquire(dlock_lock *lock, const dlock_acquire_options *opts)
{
	if (!lock)
		return tl_null_start(dlock_acquire_async(NULL, opts, tl_never_lock, NULL), "dlock_acquire_async");
	if (tl_direct(lock))
		return dlock_acquire(lock, opts);
	return tl_lock_op(lock, "dlock_acquire_async", start_acquire, opts, 0, NULL);
}

dlock_status testloop_release(dlock_lock *lock)
{
	if (!lock)
		return tl_null_start(dlock_release_async(NULL, tl_never_lock, NULL), "dlock_release_async");
	if (tl_direct(lock))
		return dlock_release(lock);
	return tl_lock_op(lock, "dlock_release_async", start_release, NULL, 0, NULL);
}

dlock_status testloop_extend(dlock_lock *lock, int64_t lease_ms)
{
	if (!lock)
		return tl_null_start(dlock_extend_async(NULL, lease_ms, tl_never_lock, NULL), "dlock_extend_async");
	if (tl_direct(lock))
		return dlock_extend(lock, lease_ms);
	return tl_lock_op(lock, "dlock_extend_async", start_extend, NULL, lease_ms, NULL);
}

dlock_status testloop_check(dlock_lock *lock)
{
	if (!lock)
		return tl_null_start(dlock_check_async(NULL, tl_never_lock, NULL), "dlock_check_async");
	if (tl_direct(lock))
		return dlock_check(lock);
	return tl_lock_op(lock, "dlock_check_async", start_check, NULL, 0, NULL);
}

/* ------------------------------------------------------- inspection */

static void on_inspect(dlock_client *client, dlock_status st, dlock_lock_info *info, void *ud)
{
	tl_call *k = ud;
	(void)client;
	k->result = info;
	tl_callback_end(k, st);
}

static void start_inspect(tl_call *k)
{
	if (!k->out) { /* no _async form for a missing answer pointer: the blocking form's refusal */
		tl_finish(k, dlock_inspect(k->client, k->text, NULL));
		return;
	}
	k->starting = 1;
	tl_started(k, dlock_inspect_async(k->client, k->text, on_inspect, k));
}

static void on_list(dlock_client *client, dlock_status st, dlock_lock_list *list, void *ud)
{
	tl_call *k = ud;
	(void)client;
	k->result = list;
	tl_callback_end(k, st);
}

static void start_list(tl_call *k)
{
	if (!k->out) {
		tl_finish(k, dlock_list(k->client, k->text, NULL));
		return;
	}
	k->starting = 1;
	tl_started(k, dlock_list_async(k->client, k->text, on_list, k));
}

static void on_break(dlock_client *client, dlock_status st, size_t broken, void *ud)
{
	tl_call *k = ud;
	(void)client;
	k->broken = broken;
	tl_callback_end(k, st);
}

static void start_break(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_break_async(k->client, k->text, on_break, k));
}

static void tl_never_inspect(dlock_client *c, dlock_status st, dlock_lock_info *info, void *ud)
{
	(void)c, (void)st, (void)info, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

static void tl_never_list(dlock_client *c, dlock_status st, dlock_lock_list *list, void *ud)
{
	(void)c, (void)st, (void)list, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

static void tl_never_break(dlock_client *c, dlock_status st, size_t broken, void *ud)
{
	(void)c, (void)st, (void)broken, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

/* A client operation on its loop thread; k->result and k->broken hold what it answered. */
static tl_call *tl_client_op(dlock_client *client, const char *what, void (*start)(tl_call *k), const char *text,
                             void *out, dlock_status *st)
{
	tl_call *k = tl_call_new(what, start);
	k->client = client;
	k->text = text;
	k->out = out;
	*st = tl_do(tl_find(client), k);
	return k;
}

dlock_status testloop_inspect(dlock_client *client, const char *name, dlock_lock_info **out)
{
	dlock_status st;
	if (!client) {
		if (out)
			*out = NULL;
		return tl_null_start(dlock_inspect_async(NULL, name, tl_never_inspect, NULL), "dlock_inspect_async");
	}
	if (tl_direct(client))
		return dlock_inspect(client, name, out);
	tl_call *k = tl_client_op(client, "dlock_inspect_async", start_inspect, name, out, &st);
	if (out)
		*out = (dlock_lock_info *)(uintptr_t)k->result;
	free(k);
	return st;
}

dlock_status testloop_list(dlock_client *client, const char *name_prefix, dlock_lock_list **out)
{
	dlock_status st;
	if (!client) {
		if (out)
			*out = NULL;
		return tl_null_start(dlock_list_async(NULL, name_prefix, tl_never_list, NULL), "dlock_list_async");
	}
	if (tl_direct(client))
		return dlock_list(client, name_prefix, out);
	tl_call *k = tl_client_op(client, "dlock_list_async", start_list, name_prefix, out, &st);
	if (out)
		*out = (dlock_lock_list *)(uintptr_t)k->result;
	free(k);
	return st;
}

dlock_status testloop_break(dlock_client *client, const char *name, size_t *broken)
{
	dlock_status st;
	if (!client) {
		if (broken)
			*broken = 0;
		return tl_null_start(dlock_break_async(NULL, name, tl_never_break, NULL), "dlock_break_async");
	}
	if (tl_direct(client))
		return dlock_break(client, name, broken);
	tl_call *k = tl_client_op(client, "dlock_break_async", start_break, name, NULL, &st);
	if (broken)
		*broken = k->broken;
	free(k);
	return st;
}

/*
 * dlock_gc() has no asynchronous form (it is an administrator's sweep, not
 * something a loop waits on): run it on a blocking client of the same URI,
 * opened for the call on the calling thread.
 */
dlock_status testloop_gc(dlock_client *client, const char *name_prefix, unsigned flags, dlock_gc_fn fn,
                         void *userdata, size_t *count)
{
	tl_client *c = tl_find(client);
	if (!c || tl_self == c || !c->uri)
		return dlock_gc(client, name_prefix, flags, fn, userdata, count);
	dlock_client *blocking = NULL;
	char text[TL_TEXT_MAX] = "";
	dlock_status st = dlock_client_open(&blocking, c->uri, NULL, text, sizeof text);
	if (st == DLOCK_OK) {
		st = dlock_gc(blocking, name_prefix, flags, fn, userdata, count);
		if (st != DLOCK_OK)
			snprintf(text, sizeof text, "%s", dlock_client_errmsg(blocking));
		dlock_client_close(blocking);
	} else if (count) {
		*count = 0;
	}
	if (st != DLOCK_OK)
		tl_note_text(client, text);
	return st;
}

/* ------------------------------------------------------- elections */

static void start_election_new(tl_call *k)
{
	dlock_election **out = k->out;
	dlock_status st = dlock_election_new(k->client, k->text, out);
	if (st == DLOCK_OK && out && *out) {
		tl_register(*out, k->c, 1);
		tl_register(dlock_election_lock(*out), k->c, 0);
	}
	tl_finish(k, st);
}

dlock_status testloop_election_new(dlock_client *client, const char *name, dlock_election **out)
{
	tl_client *c = tl_find(client);
	if (!c)
		return dlock_election_new(client, name, out);
	tl_call *k = tl_call_new("dlock_election_new", start_election_new);
	k->client = client;
	k->text = name;
	k->out = out;
	if (tl_self == c) {
		k->c = c;
		start_election_new(k);
	} else {
		tl_do(c, k);
	}
	dlock_status st = k->status;
	free(k);
	return st;
}

static void tl_election_free_here(tl_client *c, dlock_election *e)
{
	tl_forget(dlock_election_lock(e), c);
	tl_forget(e, c);
	dlock_election_free(e);
}

static void on_resigned_for_free(dlock_election *e, dlock_status st, uint64_t term, void *ud)
{
	tl_call *k = ud;
	(void)st, (void)term;
	if (!k->starting)
		tl_election_free_here(k->c, e);
	tl_callback_end(k, DLOCK_OK);
}

/*
 * dlock_election_free() has resigned when it returns; on a loop client the
 * free resigns later, with no callback to await.  So: resign (not leading:
 * refused, which is fine), await it, then free.
 */
static void start_election_free(tl_call *k)
{
	k->starting = 1;
	dlock_status st = dlock_resign_async(k->e, on_resigned_for_free, k);
	k->starting = 0;
	if (st == DLOCK_OK && !k->early)
		return; /* freed once the resignation has called back */
	tl_election_free_here(k->c, k->e);
	tl_finish(k, DLOCK_OK);
}

void testloop_election_free(dlock_election *e)
{
	tl_client *c = tl_find(e);
	if (!c) {
		dlock_election_free(e);
		return;
	}
	if (tl_self == c) {
		tl_election_free_here(c, e);
		return;
	}
	tl_call *k = tl_call_new("dlock_election_free", start_election_free);
	k->e = e;
	tl_do(c, k);
	free(k);
	tl_reap_if_done(c);
}

static void start_election_lock(tl_call *k)
{
	k->result = dlock_election_lock(k->e);
	tl_finish(k, DLOCK_OK);
}

dlock_lock *testloop_election_lock(dlock_election *e)
{
	tl_client *c = tl_find(e);
	if (!c || tl_self == c)
		return dlock_election_lock(e);
	tl_call *k = tl_call_new("dlock_election_lock", start_election_lock);
	k->e = e;
	tl_do(c, k);
	dlock_lock *lock = (dlock_lock *)(uintptr_t)k->result;
	free(k);
	return lock;
}

static void on_election_done(dlock_election *e, dlock_status st, uint64_t term, void *ud)
{
	tl_call *k = ud;
	(void)e;
	k->term = term;
	tl_callback_end(k, st);
}

static void start_campaign(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_campaign_async(k->e, k->text, k->opts, on_election_done, k));
}

static void start_proclaim(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_proclaim_async(k->e, k->text, on_election_done, k));
}

static void start_resign(tl_call *k)
{
	k->starting = 1;
	tl_started(k, dlock_resign_async(k->e, on_election_done, k));
}

static void on_leader_read(dlock_election *e, dlock_status st, dlock_leader *leader, void *ud)
{
	tl_call *k = ud;
	(void)e;
	k->result = leader;
	tl_callback_end(k, st);
}

static void start_election_leader(tl_call *k)
{
	if (!k->out) { /* no _async form for a missing answer pointer: the blocking form's refusal */
		tl_finish(k, dlock_election_leader(k->e, NULL));
		return;
	}
	k->starting = 1;
	tl_started(k, dlock_election_leader_async(k->e, on_leader_read, k));
}

static void tl_never_election(dlock_election *e, dlock_status st, uint64_t term, void *ud)
{
	(void)e, (void)st, (void)term, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

static void tl_never_leader(dlock_election *e, dlock_status st, dlock_leader *leader, void *ud)
{
	(void)e, (void)st, (void)leader, (void)ud;
	printf("\n    LOOP CONTRACT BROKEN: a refused start called back");
}

/* An operation of election `e` on its loop thread. */
static tl_call *tl_election_op(dlock_election *e, const char *what, void (*start)(tl_call *k), const char *value,
                               const dlock_acquire_options *opts, void *out, dlock_status *st)
{
	tl_call *k = tl_call_new(what, start);
	k->e = e;
	k->text = value;
	k->opts = opts;
	k->out = out;
	*st = tl_do(tl_find(e), k);
	return k;
}

dlock_status testloop_campaign(dlock_election *e, const char *value, const dlock_acquire_options *opts,
                               uint64_t *term)
{
	dlock_status st;
	if (!e) {
		if (term)
			*term = 0;
		return tl_null_start(dlock_campaign_async(NULL, value, opts, tl_never_election, NULL), "dlock_campaign_async");
	}
	if (tl_direct(e))
		return dlock_campaign(e, value, opts, term);
	tl_call *k = tl_election_op(e, "dlock_campaign_async", start_campaign, value, opts, NULL, &st);
	if (term)
		*term = k->term;
	free(k);
	return st;
}

dlock_status testloop_proclaim(dlock_election *e, const char *value)
{
	dlock_status st;
	if (!e)
		return tl_null_start(dlock_proclaim_async(NULL, value, tl_never_election, NULL), "dlock_proclaim_async");
	if (tl_direct(e))
		return dlock_proclaim(e, value);
	free(tl_election_op(e, "dlock_proclaim_async", start_proclaim, value, NULL, NULL, &st));
	return st;
}

dlock_status testloop_resign(dlock_election *e)
{
	dlock_status st;
	if (!e)
		return tl_null_start(dlock_resign_async(NULL, tl_never_election, NULL), "dlock_resign_async");
	if (tl_direct(e))
		return dlock_resign(e);
	free(tl_election_op(e, "dlock_resign_async", start_resign, NULL, NULL, NULL, &st));
	return st;
}

dlock_status testloop_election_leader(dlock_election *e, dlock_leader **out)
{
	dlock_status st;
	if (!e) {
		if (out)
			*out = NULL;
		return tl_null_start(dlock_election_leader_async(NULL, tl_never_leader, NULL),
		                     "dlock_election_leader_async");
	}
	if (tl_direct(e))
		return dlock_election_leader(e, out);
	tl_call *k = tl_election_op(e, "dlock_election_leader_async", start_election_leader, NULL, NULL, out, &st);
	if (out)
		*out = (dlock_leader *)(uintptr_t)k->result;
	free(k);
	return st;
}

static void start_observe(tl_call *k)
{
	tl_finish(k, dlock_observe(k->e, k->observer, k->userdata));
}

dlock_status testloop_observe(dlock_election *e, dlock_leader_fn fn, void *userdata)
{
	if (tl_direct(e))
		return dlock_observe(e, fn, userdata);
	tl_call *k = tl_call_new("dlock_observe", start_observe);
	k->e = e;
	k->observer = fn;
	k->userdata = userdata;
	return tl_run(e, k);
}

/* ------------------------------------------------------- for the loop-only cases */

int testloop_on_loop_thread(const dlock_client *client)
{
	tl_client *c = tl_find(client);
	return c && tl_self == c;
}

static void start_run(tl_call *k)
{
	k->fn(k->userdata);
	tl_finish(k, DLOCK_OK);
}

dlock_status testloop_run_on_loop(dlock_client *client, void (*fn)(void *arg), void *arg)
{
	tl_client *c = tl_find(client);
	if (!c || !fn)
		return DLOCK_EINVAL;
	if (tl_self == c) {
		fn(arg);
		return DLOCK_OK;
	}
	tl_call *k = tl_call_new("testloop_run_on_loop", start_run);
	k->fn = fn;
	k->userdata = arg;
	return tl_run(client, k);
}
