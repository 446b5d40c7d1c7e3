/*
 * loop_libuv: COUNT locks held on the one thread of a libuv loop.
 *
 *   loop_libuv URI COUNT SECONDS
 *
 * Shows a loop client (dlock/loop.h) in push mode on libuv, through the
 * header-only adapter dlock/adapters/libuv.h: the client is opened on the
 * application's uv_loop_t with dlock_client_open_async(); COUNT mutexes
 * named loop-1 ... loop-COUNT are acquired with dlock_acquire_async(), held
 * for SECONDS while the library renews their leases from the loop, released
 * with dlock_release_async(), and the client is closed with
 * dlock_client_close_async().  Nothing here blocks: every result comes back
 * as a callback on the loop's thread, lost locks too (on_lost).
 *
 * It prints one line, `acquired=COUNT lost=0 max_threads=N loop_native=0|1`:
 * max_threads is the most entries seen in /proc/self/task, sampled by a uv
 * timer every 100 ms; loop_native is DLOCK_FEATURE_LOOP_NATIVE: where it is
 * 1 the backend runs on the loop alone (max_threads stays 1), where it is 0
 * the library runs the backend's blocking calls on worker threads of the
 * client and hands their results to the loop.
 *
 *   loop_libuv 'redis://127.0.0.1:6379?ttl=1s' 100 3
 *
 * Exit status: 0 when every lock was acquired and none was lost, 1
 * otherwise, 2 on a usage error or when the client cannot open.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/adapters/libuv.h>
#include <dlock/dlock.h>
#include <dlock/loop.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

struct app {
	uv_loop_t loop;
	uv_timer_t sampler, hold;
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

static void sample_threads(uv_timer_t *timer)
{
	struct app *app = timer->data;
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
	app->client = NULL;
	/* The adapter's handles are closed by now: these are the last ones. */
	uv_close((uv_handle_t *)&app->sampler, NULL);
	uv_close((uv_handle_t *)&app->hold, NULL);
}

static void close_client(struct app *app)
{
	dlock_client_close_async(app->client, on_closed, app); /* fails only when already closing */
}

static void on_released(dlock_lock *lock, dlock_status status, void *userdata)
{
	struct entry *e = userdata;

	if (status != DLOCK_OK) {
		fprintf(stderr, "loop_libuv: release %s: %s\n", dlock_lock_name(lock), dlock_strerror(status));
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

static void on_hold_over(uv_timer_t *timer)
{
	release_all(timer->data);
}

static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct entry *e = userdata;

	fprintf(stderr, "loop_libuv: lost %s (reason %d): %s\n", dlock_lock_name(lock), (int)reason,
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
		fprintf(stderr, "loop_libuv: acquire %s: %s\n", dlock_lock_name(lock), dlock_strerror(status));
		app->failed++;
	}
	if (--app->pending > 0)
		return;
	if (app->failed > 0)
		release_all(app);
	else
		uv_timer_start(&app->hold, on_hold_over, (uint64_t)app->seconds * 1000, 0);
}

static void on_open(dlock_client *client, dlock_status status, void *userdata)
{
	struct app *app = userdata;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	char name[32];

	if (status != DLOCK_OK) {
		fprintf(stderr, "loop_libuv: cannot open the client: %s\n", dlock_client_errmsg(client));
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
		fprintf(stderr, "usage: loop_libuv URI COUNT SECONDS   (COUNT >= 1)\n");
		return 2;
	}
	app.entries = calloc((size_t)app.count, sizeof *app.entries);
	if (app.entries == NULL || uv_loop_init(&app.loop) != 0 || dlock_libuv_hooks(&app.loop, &hooks) != DLOCK_OK) {
		fprintf(stderr, "loop_libuv: out of memory\n");
		return 2;
	}
	if (dlock_client_open_async(&app.client, argv[1], NULL, &hooks, on_open, &app, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "loop_libuv: cannot open the client: %s\n", err);
		hooks.cleanup(hooks.userdata); /* not handed over */
		return 2;
	}
	uv_timer_init(&app.loop, &app.sampler);
	uv_timer_init(&app.loop, &app.hold);
	app.sampler.data = app.hold.data = &app;
	sample_threads(&app.sampler);
	uv_timer_start(&app.sampler, sample_threads, 100, 100);

	uv_run(&app.loop, UV_RUN_DEFAULT); /* until the client is closed and every handle with it */

	for (int i = 0; i < app.count; i++)
		dlock_lock_free(app.entries[i].lock);
	free(app.entries);
	uv_loop_close(&app.loop);
	printf("acquired=%d lost=%d max_threads=%d loop_native=%d\n", app.acquired, app.lost, app.max_threads,
	       (int)app.loop_native);
	if (app.open_failed)
		return 2;
	return app.acquired == app.count && app.lost == 0 && app.failed == 0 ? 0 : 1;
}
