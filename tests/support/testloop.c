/*
 * Loop clients driven by the test (testloop.h): which client each handle
 * belongs to, the calls posted to a client's loop thread, the thread that
 * drives the client in pull mode, and opening and closing.  The calls of
 * handles and elections are mapped in testloop_ops.c and testloop_elect.c.
 */
#include "testloop.h"
#include "testloop_call.h"

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

/* Clients whose last failure text each thread keeps (testloop_client_errmsg()). */
#define TL_TEXTS 8

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

tl_client *tl_find(const void *key)
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

void tl_register(const void *key, tl_client *c, int is_handle)
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

void tl_forget(const void *key, tl_client *c)
{
	pthread_mutex_lock(&registry_mu);
	tl_unlink(key, c);
	pthread_mutex_unlock(&registry_mu);
}

int tl_is_loop(const tl_client *c)
{
	return c && tl_self == c;
}

int tl_direct(const void *key)
{
	tl_client *c = tl_find(key);
	return !c || tl_self == c;
}

/* ------------------------------------------------------- failure texts */

void tl_note_text(const dlock_client *client, const char *text)
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

tl_call *tl_call_new(const char *what, void (*start)(tl_call *k))
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
void tl_finish(tl_call *k, dlock_status st)
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
void tl_callback_end(tl_call *k, dlock_status st)
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
void tl_started(tl_call *k, dlock_status st)
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
dlock_status tl_do(tl_client *c, tl_call *k)
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
dlock_status tl_run(const void *key, tl_call *k)
{
	dlock_status st = tl_do(tl_find(key), k);
	free(k);
	return st;
}

/* tl_do(), then the end of `c` if the call left it closed with no handle. */
dlock_status tl_run_then_reap(tl_client *c, tl_call *k)
{
	dlock_status st = tl_do(c, k);
	free(k);
	tl_reap_if_done(c);
	return st;
}

/* The start of an _async form given a NULL handle: it must refuse, and never call back. */
dlock_status tl_null_start(dlock_status st, const char *what)
{
	if (st == DLOCK_OK) {
		printf("\n    LOOP CONTRACT BROKEN: %s accepted a NULL argument", what);
		return DLOCK_STATUS_COUNT_;
	}
	return st;
}

void tl_never_lock(dlock_lock *lock, dlock_status st, void *ud)
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
void tl_reap_if_done(tl_client *c)
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
	return tl_run_then_reap(c, k);
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
