/*
 * The loop side of the inflight scenario (inflight.c runs it): one thread,
 * one loop client in pull mode (dlock_client_open_async() without hooks,
 * poll() on dlock_loop_fd(), dlock_loop_run()), and N slots each going
 * round on a name of its own: acquire, on DLOCK_OK release, on the
 * release's completion acquire again.  A cycle counts as the blocking
 * workers' do (bench_count_cycle): acquire latency from the start call to
 * its callback, release likewise.
 *
 * The client is opened on this thread, which becomes its loop thread,
 * before the worker says it is ready: the open is not measured.  While it
 * runs, the thread samples /proc/self every SAMPLE_NS, and once more
 * before closing: the process's threads, descriptors and sockets (every
 * socket of this process is a connection of the client), the most of each
 * going to the slot.  Those threads include the process's main thread,
 * which only waits for this one: a client that creates no thread shows 2.
 *
 * Stop: no acquisition is started after the shared region's stop; those
 * in flight complete and are released, then the handles are freed and the
 * client closed on this thread.  The region's stop is another process's
 * store, with no descriptor to wake poll(): poll() waits at most TICK_MS.
 *
 * Threads: this one (callbacks run inside dlock_loop_run()).  Errors: in
 * the slot (bench_slot_error), a slot that failed starting again after
 * ERROR_BACKOFF_NS; a client that cannot open fails the phase.
 */
#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock/loop.h>

#include "bench.h"

#define ACQUIRE_WAIT_MS 30000
#define ERROR_BACKOFF_NS (20 * BENCH_NS_PER_MS)
#define SAMPLE_NS (50 * BENCH_NS_PER_MS)
#define TICK_MS 10

struct inflight;

/* One of the N names. */
struct slot {
	struct inflight *in;
	dlock_lock *lock;
	int64_t t0, t1; /* the acquire started; it completed, and the release started */
	int busy;       /* an operation of this slot is in flight */
	int dead;       /* a release that could not start: the lock stays held until freed */
	int64_t retry_at; /* after an error: start again then; 0: not waiting */
};

struct inflight {
	struct bench_worker *w;
	dlock_client *client;
	dlock_acquire_options opts;
	struct slot *slots;
	int n, busy, stopping;
	int waiting;               /* slots in their backoff after an error */
	int opened;                /* the open's callback came */
	dlock_status open_status;
	int64_t next_sample;
};

/* ------------------------------------------------------------ /proc */

/* Entries of a /proc/self directory, and of them those that are sockets (`sockets` NULL: not asked). */
static int count_entries(const char *dir, int *sockets)
{
	DIR *d = opendir(dir);
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		if (e->d_name[0] == '.')
			continue;
		n++;
		char path[64], link[32];
		ssize_t len;
		if (sockets && snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path &&
		    (len = readlink(path, link, sizeof link - 1)) > 0 && (link[len] = '\0', strncmp(link, "socket:", 7) == 0))
			(*sockets)++;
	}
	closedir(d);
	return sockets ? n - 1 : n; /* the fd list counts the descriptor of its own opendir */
}

static void sample(struct inflight *in)
{
	struct bench_slot *s = in->w->slot;
	int sockets = 0, threads = count_entries("/proc/self/task", NULL), fds = count_entries("/proc/self/fd", &sockets);
	s->threads_seen = threads > s->threads_seen ? threads : s->threads_seen;
	s->fds_seen = fds > s->fds_seen ? fds : s->fds_seen;
	s->sockets_seen = sockets > s->sockets_seen ? sockets : s->sockets_seen;
	in->next_sample = bench_now_ns() + SAMPLE_NS;
}

/* ------------------------------------------------------------ the slots */

static void start(struct slot *sl);

static void slot_failed(struct slot *sl)
{
	sl->busy = 0;
	sl->in->busy--;
	sl->in->waiting++;
	sl->retry_at = bench_now_ns() + ERROR_BACKOFF_NS;
}

static void on_released(dlock_lock *lock, dlock_status st, void *userdata)
{
	struct slot *sl = userdata;
	struct inflight *in = sl->in;
	int64_t t2 = bench_now_ns();
	(void)lock;
	if (st != DLOCK_OK) {
		bench_slot_error(in->w->slot, "release: %s: %s", dlock_status_name(st), dlock_client_errmsg(in->client));
		slot_failed(sl);
		return;
	}
	bench_count_cycle(in->w, sl->t1 - sl->t0, t2 - sl->t1, t2);
	sl->busy = 0;
	in->busy--;
	start(sl);
}

static void on_acquired(dlock_lock *lock, dlock_status st, void *userdata)
{
	struct slot *sl = userdata;
	struct inflight *in = sl->in;
	sl->t1 = bench_now_ns();
	if (st != DLOCK_OK) {
		bench_slot_error(in->w->slot, "acquire: %s: %s", dlock_status_name(st), dlock_client_errmsg(in->client));
		slot_failed(sl);
		return;
	}
	st = dlock_release_async(lock, on_released, sl);
	if (st != DLOCK_OK) {
		bench_slot_error(in->w->slot, "release_async: %s: %s", dlock_status_name(st),
		                 dlock_client_errmsg(in->client));
		sl->dead = 1; /* never started again */
		sl->busy = 0;
		in->busy--;
	}
}

/* The next acquisition of `sl`, unless the run is stopping. */
static void start(struct slot *sl)
{
	struct inflight *in = sl->in;
	if (in->stopping || sl->dead)
		return;
	in->waiting -= sl->retry_at != 0;
	sl->retry_at = 0;
	sl->t0 = bench_now_ns();
	dlock_status st = dlock_acquire_async(sl->lock, &in->opts, on_acquired, sl);
	if (st != DLOCK_OK) {
		bench_slot_error(in->w->slot, "acquire_async: %s: %s", dlock_status_name(st),
		                 dlock_client_errmsg(in->client));
		in->waiting++;
		sl->retry_at = bench_now_ns() + ERROR_BACKOFF_NS;
		return;
	}
	sl->busy = 1;
	in->busy++;
}

/* Slots whose backoff is over start again; the time until the next one's, in ms (TICK_MS at most). */
static int restart_due(struct inflight *in)
{
	int64_t now = bench_now_ns(), next = now + TICK_MS * BENCH_NS_PER_MS;
	for (int i = 0; in->waiting > 0 && i < in->n; i++) {
		struct slot *sl = &in->slots[i];
		if (!sl->retry_at || sl->busy)
			continue;
		if (sl->retry_at <= now)
			start(sl);
		else if (sl->retry_at < next)
			next = sl->retry_at;
	}
	return (int)((next - now + BENCH_NS_PER_MS - 1) / BENCH_NS_PER_MS);
}

/* ------------------------------------------------------------ the loop */

/* One turn: wait for the client's descriptor (at most `ms`), then do what is due. */
static void turn(struct inflight *in, int ms)
{
	int64_t due = dlock_loop_timeout_ms(in->client);
	struct pollfd pfd = { .fd = dlock_loop_fd(in->client), .events = POLLIN };
	if (due >= 0 && due < ms)
		ms = (int)due;
	poll(&pfd, 1, ms);
	dlock_loop_run(in->client);
	if (bench_now_ns() >= in->next_sample)
		sample(in);
}

static void on_open(dlock_client *client, dlock_status status, void *userdata)
{
	struct inflight *in = userdata;
	(void)client;
	in->opened = 1;
	in->open_status = status;
}

/* Open the loop client and make the N handles; 0, or -1 (noted in the slot). */
static int open_client(struct inflight *in)
{
	struct bench_worker *w = in->w;
	char err[256];
	dlock_status st = dlock_client_open_async(&in->client, w->ph->uri, NULL, NULL, on_open, in, err, sizeof err);
	if (st != DLOCK_OK) {
		bench_slot_error(w->slot, "dlock_client_open_async: %s", err);
		return -1;
	}
	while (!in->opened && !atomic_load(&w->ph->sh->stop))
		turn(in, TICK_MS);
	if (in->open_status != DLOCK_OK || !in->opened) {
		bench_slot_error(w->slot, "open: %s: %s", dlock_status_name(in->opened ? in->open_status : DLOCK_ECANCELED),
		                 in->opened ? dlock_client_errmsg(in->client) : "stopped before the client opened");
		return -1;
	}
	int64_t native = 0;
	if (dlock_client_feature(in->client, DLOCK_FEATURE_LOOP_NATIVE, &native) == DLOCK_OK)
		w->slot->loop_native = (int)native;
	for (int i = 0; i < in->n; i++) {
		char name[192];
		snprintf(name, sizeof name, "%s-%d", w->ph->name, i);
		in->slots[i].in = in;
		if (dlock_lock_new(in->client, name, &in->slots[i].lock) != DLOCK_OK) {
			bench_slot_error(w->slot, "dlock_lock_new: %s", dlock_client_errmsg(in->client));
			return -1;
		}
	}
	return 0;
}

/* Every slot going round until stop, then until the last one in flight is done. */
static void run(struct inflight *in)
{
	struct bench_shared *sh = in->w->ph->sh;
	for (int i = 0; i < in->n; i++)
		start(&in->slots[i]);
	while (!in->stopping || in->busy > 0) {
		if (!in->stopping && atomic_load(&sh->stop))
			in->stopping = 1;
		turn(in, in->stopping ? TICK_MS : restart_due(in));
	}
}

void bench_work_inflight(struct bench_worker *w)
{
	struct bench_shared *sh = w->ph->sh;
	struct inflight in = { .w = w, .n = w->ph->locks, .opts = DLOCK_ACQUIRE_OPTIONS_INIT };
	in.opts.wait_ms = ACQUIRE_WAIT_MS;
	in.opts.fence = w->ph->o->fencing ? DLOCK_ON : DLOCK_OFF;
	in.slots = calloc((size_t)in.n, sizeof *in.slots);
	sample(&in);
	if (!in.slots) {
		bench_slot_error(w->slot, "out of memory for %d slots", in.n);
		goto fail;
	}
	if (open_client(&in) != 0)
		goto fail;
	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load(&sh->go) && !atomic_load(&sh->stop))
		turn(&in, 1);
	run(&in);
	sample(&in); /* worker threads, if any, are kept until the close: the most of them is here */
	goto out;
fail:
	atomic_store(&sh->failed, 1);
out:
	for (int i = 0; in.slots && i < in.n; i++)
		dlock_lock_free(in.slots[i].lock); /* NULL is fine; a dead slot's lock is released here */
	if (in.client)
		dlock_client_close(in.client); /* on the loop's thread: every callback runs inside it */
	free(in.slots);
}
