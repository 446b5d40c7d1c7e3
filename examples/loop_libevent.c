/*
 * loop_libevent: COUNT locks held on the one thread of a libevent loop.
 *
 *   loop_libevent URI COUNT SECONDS
 *
 * loop_libuv.c on libevent: a loop client (dlock/loop.h) in push mode
 * through the header-only adapter dlock/adapters/libevent.h, opened on the
 * application's event_base.  COUNT mutexes named loop-1 ... loop-COUNT are
 * acquired with dlock_acquire_async(), held for SECONDS while the library
 * renews them from the loop, released with dlock_release_async(), and the
 * client is closed with dlock_client_close_async(); every result, and any
 * loss (on_lost), comes back as a callback on the loop's thread.
 *
 * It prints `acquired=COUNT lost=0 max_threads=N loop_native=0|1`, as
 * loop_libuv does (max_threads: the most entries of /proc/self/task, read
 * by a timer every 100 ms; loop_native: DLOCK_FEATURE_LOOP_NATIVE).
 *
 * Exit status: 0 when every lock was acquired and none was lost, 1
 * otherwise, 2 on a usage error or when the client cannot open.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/adapters/libevent.h>
#include <dlock/dlock.h>
#include <dlock/loop.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

struct app {
	struct event_base *base;
	struct event *sampler, *hold;
	dlock_client *client;
	struct entry *entries;
	int count, seconds;
	int pending; /* operations started whose callback has not come yet */
	int acquired, lost, failed, open_failed;
	int max_threads;
	int64_t loop_native;
};

/* One lock: the callbacks' userdata. */
struct entry {
	struct app *app;
	dlock_lock *lock;
	int held;
};

/* A whole number from the command line, or -1. */
static int number(const char *text)
{
	char *end;
	long n = strtol(text, &end, 10);

	return end != text && *end == '\0' && n >= 0 && n <= 1000000 ? (int)n : -1;
}

static void sample_threads(evutil_socket_t fd, short what, void *userdata)
{
	struct app *app = userdata;
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	(void)fd;
	(void)what;
	if (dir == NULL)
		return;
	while ((e = readdir(dir)) != NULL)
		n += e->d_name[0] != '.';
	closedir(dir);
	if (n > app->max_threads)
		app->max_threads = n;
}

static void on_closed(dlock_status status, void *userdata)
{
	struct app *app = userdata;

	(void)status;
	app->client = NULL;
	/* The adapter's events go with the client: these are the last ones. */
	event_del(app->sampler);
	event_del(app->hold);
}

static void close_client(struct app *app)
{
	dlock_client_close_async(app->client, on_closed, app); /* fails only when already closing */
}

static void on_released(dlock_lock *lock, dlock_status status, void *userdata)
{
	struct entry *e = userdata;

	if (status != DLOCK_OK) {
		fprintf(stderr, "loop_libevent: release %s: %s\n", dlock_lock_name(lock), dlock_strerror(status));
		e->app->failed++;
	}
	e->held = 0;
	if (--e->app->pending == 0)
		close_client(e->app);
}

static void release_all(struct app *app)
{
	for (int i = 0; i < app->count; i++) {
		struct entry *e = &app->entries[i];

		if (e->held && dlock_release_async(e->lock, on_released, e) == DLOCK_OK)
			app->pending++;
	}
	if (app->pending == 0)
		close_client(app);
}

static void on_hold_over(evutil_socket_t fd, short what, void *userdata)
{
	(void)fd;
	(void)what;
	release_all(userdata);
}

static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct entry *e = userdata;

	fprintf(stderr, "loop_libevent: lost %s (reason %d): %s\n", dlock_lock_name(lock), (int)reason,
	        detail != NULL ? detail : "");
	e->held = 0;
	e->app->lost++;
}

static void on_acquired(dlock_lock *lock, dlock_status status, void *userdata)
{
	struct entry *e = userdata;
	struct app *app = e->app;

	if (status == DLOCK_OK) {
		e->held = 1;
		app->acquired++;
	} else {
		fprintf(stderr, "loop_libevent: acquire %s: %s\n", dlock_lock_name(lock), dlock_strerror(status));
		app->failed++;
	}
	if (--app->pending > 0)
		return;
	if (app->failed > 0)
		release_all(app);
	else
		evtimer_add(app->hold, &(struct timeval){ .tv_sec = app->seconds });
}

static void on_open(dlock_client *client, dlock_status status, void *userdata)
{
	struct app *app = userdata;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	char name[32];

	if (status != DLOCK_OK) {
		fprintf(stderr, "loop_libevent: cannot open the client: %s\n", dlock_client_errmsg(client));
		app->open_failed = 1;
		close_client(app);
		return;
	}
	dlock_client_feature(client, DLOCK_FEATURE_LOOP_NATIVE, &app->loop_native);
	opts.on_lost = on_lost;
	for (int i = 0; i < app->count; i++) {
		struct entry *e = &app->entries[i];

		e->app = app;
		opts.lost_userdata = e;
		snprintf(name, sizeof name, "loop-%d", i + 1);
		if (dlock_lock_new(client, name, &e->lock) == DLOCK_OK &&
		    dlock_acquire_async(e->lock, &opts, on_acquired, e) == DLOCK_OK)
			app->pending++;
		else
			app->failed++;
	}
	if (app->pending == 0)
		release_all(app);
}

int main(int argc, char **argv)
{
	struct app app = { 0 };
	dlock_loop_hooks hooks;
	char err[256];

	if (argc != 4 || (app.count = number(argv[2])) < 1 || (app.seconds = number(argv[3])) < 0) {
		fprintf(stderr, "usage: loop_libevent URI COUNT SECONDS   (COUNT >= 1)\n");
		return 2;
	}
	app.entries = calloc((size_t)app.count, sizeof *app.entries);
	app.base = event_base_new();
	if (app.entries == NULL || app.base == NULL ||
	    (app.sampler = event_new(app.base, -1, EV_PERSIST, sample_threads, &app)) == NULL ||
	    (app.hold = evtimer_new(app.base, on_hold_over, &app)) == NULL ||
	    dlock_libevent_hooks(app.base, &hooks) != DLOCK_OK) {
		fprintf(stderr, "loop_libevent: out of memory\n");
		return 2;
	}
	if (dlock_client_open_async(&app.client, argv[1], NULL, &hooks, on_open, &app, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "loop_libevent: cannot open the client: %s\n", err);
		hooks.cleanup(hooks.userdata); /* not handed over */
		return 2;
	}
	sample_threads(-1, 0, &app);
	evtimer_add(app.sampler, &(struct timeval){ .tv_usec = 100 * 1000 });

	event_base_dispatch(app.base); /* until the client is closed and every event with it */

	for (int i = 0; i < app.count; i++)
		dlock_lock_free(app.entries[i].lock);
	free(app.entries);
	event_free(app.sampler);
	event_free(app.hold);
	event_base_free(app.base);
	printf("acquired=%d lost=%d max_threads=%d loop_native=%d\n", app.acquired, app.lost, app.max_threads,
	       (int)app.loop_native);
	if (app.open_failed)
		return 2;
	return app.acquired == app.count && app.lost == 0 && app.failed == 0 ? 0 : 1;
}
