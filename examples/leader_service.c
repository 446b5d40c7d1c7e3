/*
 * leader_service: one of several replicas of a service, of which only the
 * elected leader does the work; the others wait to take over.
 *
 *   leader_service [URI [ELECTION [ADDRESS [SECONDS]]]]
 *
 * It campaigns in the election ELECTION (default "service-leader") with
 * its ADDRESS (default HOST:PID) as the leader's value, so that clients
 * find the leader by observing the election (see leader_observer.c).  Once
 * elected it does its work — here a line a second — until SECONDS have
 * passed (0, the default: until SIGTERM or SIGINT), then resigns, and the
 * next replica is elected at once.
 *
 * Its term (the fencing token of its leadership) goes with everything it
 * writes: storage that keeps the highest term it has seen refuses a
 * leader that was replaced while paused.  Losing leadership (the lease ran
 * out, the session ended, an administrator broke the lock) is reported by
 * the lost-lock callback on the library's thread: the service stops its
 * work at once and exits 76, as `dlock elect` does, for its supervisor to
 * start it again as a candidate.
 *
 * Signals are taken by a thread of their own (sigwait), which may call
 * dlock_cancel() to end a campaign that is still waiting.
 *
 * URI defaults to file:///tmp/dlock-examples-UID.  Exit status: 0 after
 * resigning (or stopped before being elected), 1 on failure, 2 on a usage
 * error or a backend without elections, 76 when leadership was lost.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_LOST 76

struct service {
	dlock_election *election;
	sigset_t signals;
	atomic_int stop; /* a signal came */
	atomic_int lost; /* leadership was lost */
};

static const char *why(dlock_client *client, dlock_status st)
{
	const char *msg = dlock_client_errmsg(client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

/* The signal thread: a signal stops the service, and cancels a campaign still waiting. */
static void *signal_thread(void *arg)
{
	struct service *s = arg;
	int sig;

	if (sigwait(&s->signals, &sig) == 0) {
		atomic_store(&s->stop, 1);
		dlock_cancel(dlock_election_lock(s->election));
	}
	return NULL;
}

/* Called on the library's thread: note the loss and return quickly. */
static void on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	struct service *s = userdata;

	(void)reason;
	fprintf(stderr, "leader_service: leadership of %s lost: %s\n", dlock_lock_name(lock), detail);
	atomic_store(&s->lost, 1);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The leader's work until told to stop, the time is up, or leadership is lost. */
static void lead(struct service *s, uint64_t term, long seconds)
{
	double end = now_s() + (double)seconds;
	long ticks = 0;

	while (!atomic_load(&s->stop) && !atomic_load(&s->lost) && (seconds == 0 || now_s() < end)) {
		if (ticks++ % 10 == 0) {
			printf("working as leader, term %" PRIu64 "\n", term);
			fflush(stdout);
		}
		sleep_ms(100);
	}
}

int main(int argc, char **argv)
{
	char default_uri[64], address[300], host[256], err[256];
	const char *uri, *name = argc > 2 && argv[2][0] ? argv[2] : "service-leader";
	long seconds = 0;
	struct service s = {0};
	dlock_client *client = NULL;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	pthread_t signals;
	int has_thread = 0, rc = 1;
	uint64_t term = 0;
	int64_t elections = -1;
	dlock_status st;

	if (argc > 4) {
		char *end;

		errno = 0;
		seconds = strtol(argv[4], &end, 10);
		if (errno != 0 || end == argv[4] || *end != '\0' || seconds < 0) {
			fprintf(stderr, "usage: leader_service [URI [ELECTION [ADDRESS [SECONDS]]]]\n");
			return 2;
		}
	}
	if (gethostname(host, sizeof host) != 0)
		snprintf(host, sizeof host, "localhost");
	host[sizeof host - 1] = '\0';
	snprintf(address, sizeof address, "%s:%ld", host, (long)getpid());
	if (argc > 3 && argv[3][0])
		snprintf(address, sizeof address, "%s", argv[3]);
	snprintf(default_uri, sizeof default_uri, "file:///tmp/dlock-examples-%ld", (long)getuid());
	uri = argc > 1 && argv[1][0] ? argv[1] : default_uri;

	/* Blocked before the client starts its threads, which inherit the mask: only sigwait() takes them. */
	sigemptyset(&s.signals);
	sigaddset(&s.signals, SIGTERM);
	sigaddset(&s.signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &s.signals, NULL);

	if (dlock_client_open(&client, uri, NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "leader_service: cannot open %s: %s\n", uri, err);
		return 1;
	}
	if (dlock_client_feature(client, DLOCK_FEATURE_ELECTION, &elections) != DLOCK_OK || elections < 0) {
		fprintf(stderr, "leader_service: %s has no leader election\n", dlock_client_uri(client));
		rc = 2;
		goto out;
	}
	st = dlock_election_new(client, name, &s.election);
	if (st != DLOCK_OK) {
		fprintf(stderr, "leader_service: %s\n", why(client, st));
		goto out;
	}
	if (pthread_create(&signals, NULL, signal_thread, &s) != 0) {
		fprintf(stderr, "leader_service: cannot start the signal thread\n");
		goto out;
	}
	has_thread = 1;

	printf("campaigning in %s as %s\n", name, address);
	fflush(stdout);
	opts.wait_ms = DLOCK_WAIT_FOREVER;
	opts.on_lost = on_lost;
	opts.lost_userdata = &s;
	st = dlock_campaign(s.election, address, &opts, &term);
	if (st == DLOCK_ECANCELED && atomic_load(&s.stop)) {
		printf("stopped before being elected\n");
		rc = 0;
		goto out;
	}
	if (st != DLOCK_OK) {
		fprintf(stderr, "leader_service: campaign in %s: %s\n", name, why(client, st));
		goto out;
	}
	printf("elected: %s leads %s, term %" PRIu64 "\n", address, name, term);
	fflush(stdout);

	lead(&s, term, seconds);

	/* After a loss, resigning reports DLOCK_ENOTHELD: expected here. */
	st = dlock_resign(s.election);
	if (atomic_load(&s.lost)) {
		printf("lost leadership of term %" PRIu64 ": stopped\n", term);
		rc = EXIT_LOST;
	} else if (st != DLOCK_OK) {
		fprintf(stderr, "leader_service: resign: %s\n", why(client, st));
	} else {
		printf("resigned term %" PRIu64 "\n", term);
		rc = 0;
	}
out:
	fflush(stdout);
	if (has_thread) {
		pthread_kill(signals, SIGTERM); /* still in sigwait() unless a signal came: end it */
		pthread_join(signals, NULL);
	}
	dlock_election_free(s.election);
	if (dlock_client_close(client) != DLOCK_OK && rc == 0)
		rc = 1;
	return rc;
}
