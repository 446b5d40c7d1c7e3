/*
 * lost_lock_worker: a worker that stops as soon as its lock is lost.
 *
 *   lost_lock_worker [URI [STEPS]]
 *
 * The worker holds "worker:batch" while it processes STEPS steps (default
 * 10, 200 ms each).  If the lock is lost meanwhile (the lease ran out, the
 * server gave it to someone else, the session ended), another worker may
 * already be doing the same work: going on would do it twice.  The lost-lock
 * callback runs on the library's own thread, so it does no work itself: it
 * sets a flag that the worker checks before each step.
 *
 * See it stop: a one-second lease that is not renewed runs out after about
 * five steps (mem:// and redis:// have leases; file:// holds the lock for as
 * long as the process lives):
 *
 *   lost_lock_worker 'mem://demo?ttl=1s&renew=off'
 *
 * URI defaults to file:///tmp/dlock-examples-UID.  Exit status: 0 when every
 * step was done, 1 on failure, 3 when the worker stopped because the lock
 * was lost.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define EXIT_LOST 3

static const char *why(dlock_client *client, dlock_status st)
{
	const char *msg = dlock_client_errmsg(client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

static const char *reason_name(dlock_lost_reason reason)
{
	switch (reason) {
	case DLOCK_LOST_EXPIRED:
		return "lease expired";
	case DLOCK_LOST_TAKEN:
		return "taken by another owner";
	case DLOCK_LOST_SESSION:
		return "session ended";
	default:
		return "lost";
	}
}

/* Called on the library's thread: set the flag and return quickly. */
static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	atomic_int *lost = userdata;

	fprintf(stderr, "lost_lock_worker: lock %s lost (%s): %s\n", dlock_lock_name(lock),
	        reason_name(reason), detail);
	atomic_store(lost, 1);
}

static void do_step(void)
{
	struct timespec ts = {0, 200 * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* A count from the command line: a whole number >= 0, else -1. */
static long count_arg(const char *text)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(text, &end, 10);
	return errno == 0 && end != text && *end == '\0' && n >= 0 ? n : -1;
}

int main(int argc, char **argv)
{
	char default_uri[64], err[256];
	const char *uri;
	long steps = argc > 2 ? count_arg(argv[2]) : 10;
	long done = 0;
	atomic_int lost = 0;
	dlock_client *client = NULL;
	dlock_lock *lock = NULL;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	dlock_status st;
	int rc = 1;

	if (steps < 0) {
		fprintf(stderr, "usage: lost_lock_worker [URI [STEPS]]\n");
		return 1;
	}
	snprintf(default_uri, sizeof default_uri, "file:///tmp/dlock-examples-%ld", (long)getuid());
	uri = argc > 1 && argv[1][0] != '\0' ? argv[1] : default_uri;
	if (dlock_client_open(&client, uri, NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "lost_lock_worker: cannot open %s: %s\n", uri, err);
		return 1;
	}
	st = dlock_lock_new(client, "worker:batch", &lock);
	if (st != DLOCK_OK) {
		fprintf(stderr, "lost_lock_worker: %s\n", why(client, st));
		goto out;
	}
	opts.wait_ms = 10000;
	opts.on_lost = on_lost;
	opts.lost_userdata = &lost;
	st = dlock_acquire(lock, &opts);
	if (st != DLOCK_OK) {
		fprintf(stderr, "lost_lock_worker: cannot lock worker:batch: %s\n", why(client, st));
		goto out;
	}
	while (done < steps && !atomic_load(&lost)) {
		do_step();
		done++;
	}
	/* After a loss, release reports DLOCK_ENOTHELD: expected here. */
	st = dlock_release(lock);
	if (atomic_load(&lost)) {
		printf("stopped after %ld of %ld steps: the lock was lost\n", done, steps);
		rc = EXIT_LOST;
	} else if (st != DLOCK_OK) {
		fprintf(stderr, "lost_lock_worker: release worker:batch: %s\n", why(client, st));
	} else {
		printf("all %ld steps done\n", steps);
		rc = 0;
	}
out:
	dlock_lock_free(lock);
	if (dlock_client_close(client) != DLOCK_OK)
		rc = 1;
	return rc;
}
