/*
 * scheduled_job: a job that cron starts on several hosts, and that must run
 * on one host at a time.
 *
 *   scheduled_job [URI [SECONDS [AT_LEAST]]]
 *
 * Every host has the same crontab line; the first to take the lock runs the
 * job, the others try once (wait_ms = 0), find the lock held and skip this
 * run: the next tick comes anyway, and a queue of late runs would be worse.
 * The job here just works for SECONDS (default 1).
 *
 * A short job needs a minimum hold: if it finishes in 200 ms on host A, host
 * B, whose clock or cron is a second late, would find the lock free and run
 * it again.  So the lock is held for AT_LEAST seconds (default 2) after it
 * was taken, even when the job is done sooner (min_hold, after
 * ShedLock's "lock at least for").  On a TTL backend (Redis) the lease
 * then ends at the bound by itself; on a session backend (ZooKeeper,
 * PostgreSQL, file://) the lock goes with the process, so the program
 * stays until the bound before it exits.
 *
 * The same with the dlock command and no C at all (see dlock(1)): --no-wait
 * tries once, --conflict-exit-code 0 makes a skipped run a success for cron,
 * --quiet keeps it out of cron's mail:
 *
 *   0 2 * * * dlock --uri redis://locks:6379 --no-wait --quiet --conflict-exit-code 0 --min-hold 2m nightly-report -- /usr/local/bin/make-report
 *
 * URI defaults to file:///tmp/dlock-examples-UID.  Exit status: 0 when the
 * job ran or was skipped, 1 on failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const char *why(dlock_client *client, dlock_status st)
{
	const char *msg = dlock_client_errmsg(client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

/* The job itself.  The library renews the lease while it runs. */
static void make_report(long seconds)
{
	struct timespec ts = {seconds, 0};

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

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Stay until `until_ms` (monotonic), so that a session backend keeps the lock's minimum hold. */
static void stay_until(int64_t until_ms)
{
	int64_t left = until_ms - now_ms();
	struct timespec ts = {(time_t)(left / 1000), (long)(left % 1000) * 1000000L};

	while (left > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int main(int argc, char **argv)
{
	char default_uri[64], err[256];
	const char *uri;
	long seconds = argc > 2 ? count_arg(argv[2]) : 1;
	long at_least = argc > 3 ? count_arg(argv[3]) : 2;
	dlock_client *client = NULL;
	dlock_lock *lock = NULL;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	dlock_capabilities caps;
	int64_t acquired_at;
	uint64_t token;
	dlock_status st;
	int rc = 1;

	if (seconds < 0 || at_least < 0) {
		fprintf(stderr, "usage: scheduled_job [URI [SECONDS [AT_LEAST]]]\n");
		return 1;
	}
	snprintf(default_uri, sizeof default_uri, "file:///tmp/dlock-examples-%ld", (long)getuid());
	uri = argc > 1 && argv[1][0] != '\0' ? argv[1] : default_uri;
	if (dlock_client_open(&client, uri, NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "scheduled_job: cannot open %s: %s\n", uri, err);
		return 1;
	}
	st = dlock_lock_new(client, "nightly-report", &lock);
	if (st != DLOCK_OK) {
		fprintf(stderr, "scheduled_job: %s\n", why(client, st));
		goto out;
	}
	opts.wait_ms = 0; /* try once */
	opts.min_hold = at_least > 0 ? (int64_t)at_least * 1000 : DLOCK_HOLD_NONE; /* 0 would be the URI's */
	acquired_at = now_ms();
	st = dlock_acquire(lock, &opts);
	if (st == DLOCK_EBUSY) {
		printf("nightly-report is running elsewhere: skipped\n");
		rc = 0;
		goto out;
	}
	if (st != DLOCK_OK) {
		fprintf(stderr, "scheduled_job: cannot lock nightly-report: %s\n", why(client, st));
		goto out;
	}
	st = dlock_lock_fencing_token(lock, &token);
	if (st == DLOCK_OK)
		printf("nightly-report running (fencing token %" PRIu64 ")\n", token);
	else
		printf("nightly-report running (no fencing token: %s)\n", dlock_strerror(st));
	fflush(stdout); /* say so now: whoever watches the log sees the run start */
	make_report(seconds);
	/* Before the minimum hold has passed this returns at once, and the lock stays until the bound. */
	st = dlock_release(lock);
	if (st != DLOCK_OK) {
		/* The lock was lost during the run: another host may have started it. */
		fprintf(stderr, "scheduled_job: release nightly-report: %s\n", why(client, st));
		goto out;
	}
	printf("nightly-report done\n");
	fflush(stdout);
	if (dlock_client_capabilities(client, &caps) == DLOCK_OK && caps.lease == DLOCK_LEASE_SESSION)
		stay_until(acquired_at + (int64_t)at_least * 1000);
	rc = 0;
out:
	dlock_lock_free(lock);
	if (dlock_client_close(client) != DLOCK_OK)
		rc = 1;
	return rc;
}
