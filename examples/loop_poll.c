/*
 * loop_poll: COUNT locks held on the one thread of a bare poll() loop.
 *
 *   loop_poll URI COUNT SECONDS
 *
 * loop_libuv.c without an event library: a loop client (dlock/loop.h) in
 * pull mode, opened with no hooks.  The loop waits in poll() on the one
 * descriptor dlock_loop_fd() gives, for at most dlock_loop_timeout_ms()
 * (or less, when a timer of its own is due sooner), then calls
 * dlock_loop_run(), which does what is due and runs the callbacks.  COUNT
 * mutexes named loop-1 ... loop-COUNT are acquired with
 * dlock_acquire_async(), held for SECONDS while the library renews them,
 * released with dlock_release_async(), and the client is closed with
 * dlock_client_close_async().
 *
 * It prints `acquired=COUNT lost=0 max_threads=N loop_native=0|1`, as
 * loop_libuv does (max_threads: the most entries of /proc/self/task, read
 * every 100 ms; loop_native: DLOCK_FEATURE_LOOP_NATIVE).
 *
 * Exit status: 0 when every lock was acquired and none was lost, 1
 * otherwise, 2 on a usage error or when the client cannot open.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>
#include <dlock/loop.h>

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct app {
	dlock_client *client; /* NULL once closed */
	struct entry *entries;
	int count, seconds;
	int pending; /* operations started whose callback has not come yet */
	int acquired, lost, failed, open_failed;
	int max_threads;
	int64_t loop_native;
	int64_t release_at; /* when to release them all (now_ms()); -1: not yet */
};

/* One lock: the callbacks' userdata. */
struct entry {
	struct app *app;
	dlock_lock *lock;
	int held;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A whole number from the command line, or -1. */
static int number(const char *text)
{
	char *end;
	long n = strtol(text, &end, 10);

	return end != text && *end == '\0' && n >= 0 && n <= 1000000 ? (int)n : -1;
}

static void sample_threads(struct app *app)
{
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

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
	app->client = NULL; /* ends the loop: its descriptor is no longer to be watched */
}

static void close_client(struct app *app)
{
	dlock_client_close_async(app->client, on_closed, app); /* fails only when already closing */
}

static void on_released(dlock_lock *lock, dlock_status status, void *userdata)
{
	struct entry *e = userdata;

	if (status != DLOCK_OK) {
		fprintf(stderr, "loop_poll: release %s: %s\n", dlock_lock_name(lock), dlock_strerror(status));
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

static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct entry *e = userdata;

	fprintf(stderr, "loop_poll: lost %s (reason %d): %s\n", dlock_lock_name(lock), (int)reason,
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
		fprintf(stderr, "loop_poll: acquire %s: %s\n", dlock_lock_name(lock), dlock_strerror(status));
		app->failed++;
	}
	if (--app->pending > 0)
		return;
	if (app->failed > 0)
		release_all(app);
	else
		app->release_at = now_ms() + (int64_t)app->seconds * 1000;
}

static void on_open(dlock_client *client, dlock_status status, void *userdata)
{
	struct app *app = userdata;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	char name[32];

	if (status != DLOCK_OK) {
		fprintf(stderr, "loop_poll: cannot open the client: %s\n", dlock_client_errmsg(client));
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
	struct app app = { .release_at = -1 };
	char err[256];

	if (argc != 4 || (app.count = number(argv[2])) < 1 || (app.seconds = number(argv[3])) < 0) {
		fprintf(stderr, "usage: loop_poll URI COUNT SECONDS   (COUNT >= 1)\n");
		return 2;
	}
	app.entries = calloc((size_t)app.count, sizeof *app.entries);
	if (app.entries == NULL) {
		fprintf(stderr, "loop_poll: out of memory\n");
		return 2;
	}
	if (dlock_client_open_async(&app.client, argv[1], NULL, NULL, on_open, &app, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "loop_poll: cannot open the client: %s\n", err);
		return 2;
	}
	for (int64_t next_sample = now_ms(); app.client != NULL;) {
		int64_t now = now_ms(), wait, until;
		struct pollfd pfd = { .fd = dlock_loop_fd(app.client), .events = POLLIN };

		if (now >= next_sample) {
			sample_threads(&app);
			next_sample = now + 100;
		}
		if (app.release_at >= 0 && now >= app.release_at) {
			app.release_at = -1;
			release_all(&app);
		}
		/* Until the descriptor turns readable, or dlock's time or ours comes. */
		until = app.release_at >= 0 && app.release_at < next_sample ? app.release_at : next_sample;
		wait = dlock_loop_timeout_ms(app.client);
		if (wait < 0 || wait > until - now)
			wait = until - now;
		if (poll(&pfd, 1, (int)wait) < 0 && errno != EINTR) {
			perror("loop_poll: poll");
			return 2;
		}
		dlock_loop_run(app.client); /* the callbacks run in here */
	}

	for (int i = 0; i < app.count; i++)
		dlock_lock_free(app.entries[i].lock);
	free(app.entries);
	printf("acquired=%d lost=%d max_threads=%d loop_native=%d\n", app.acquired, app.lost, app.max_threads,
	       (int)app.loop_native);
	if (app.open_failed)
		return 2;
	return app.acquired == app.count && app.lost == 0 && app.failed == 0 ? 0 : 1;
}
