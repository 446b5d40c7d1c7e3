/*
 * leader_observer: a client of a replicated service that follows its
 * leader's address without campaigning itself.
 *
 *   leader_observer [URI [ELECTION [SECONDS]]]
 *
 * It observes the election ELECTION (default "service-leader", as
 * leader_service.c campaigns in) and prints a line for who leads now and
 * then for each change:
 *
 *   leader ADDRESS term T      (send requests to ADDRESS)
 *   no leader                  (hold requests until there is one)
 *
 * The library calls back on a thread of its own, once at once and then
 * at each change: woken by the server where it notifies, and reading
 * again at least once per lease in any case (the URI's ttl), since a
 * notification is lost while disconnected.  Terms never go back: a
 * leader that was replaced is never shown again after its successor.
 * The callback only records and prints: it must return quickly and may
 * not free its own election.
 *
 * It runs SECONDS seconds (0, the default: until SIGTERM or SIGINT).  URI
 * defaults to file:///tmp/dlock-examples-UID.  Exit status: 0, 1 on
 * failure, 2 on a usage error or a backend without elections.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Where requests go: the leader's address as last heard, for the application's threads. */
struct following {
	pthread_mutex_t mu;
	char address[DLOCK_VALUE_MAX + 1]; /* "" with no leader */
	uint64_t term;
};

static const char *why(dlock_client *client, dlock_status st)
{
	const char *msg = dlock_client_errmsg(client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

/* Called on the library's observer thread. */
static void on_leader(dlock_election *e, const dlock_leader *leader, void *userdata)
{
	struct following *f = userdata;

	(void)e;
	pthread_mutex_lock(&f->mu);
	snprintf(f->address, sizeof f->address, "%s", leader->elected ? leader->value : "");
	f->term = leader->term;
	pthread_mutex_unlock(&f->mu);
	if (leader->elected && leader->value[0] == '\0')
		printf("leader (no address yet) term %" PRIu64 "\n", leader->term); /* elected, not yet proclaimed */
	else if (leader->elected)
		printf("leader %s term %" PRIu64 "\n", leader->value, leader->term);
	else
		printf("no leader\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	char default_uri[64], err[256];
	const char *uri, *name = argc > 2 && argv[2][0] ? argv[2] : "service-leader";
	long seconds = 0;
	struct following f = {PTHREAD_MUTEX_INITIALIZER, "", 0};
	dlock_client *client = NULL;
	dlock_election *e = NULL;
	sigset_t signals;
	int64_t elections = -1;
	int rc = 1;
	dlock_status st;

	if (argc > 3) {
		char *end;

		errno = 0;
		seconds = strtol(argv[3], &end, 10);
		if (errno != 0 || end == argv[3] || *end != '\0' || seconds < 0) {
			fprintf(stderr, "usage: leader_observer [URI [ELECTION [SECONDS]]]\n");
			return 2;
		}
	}
	snprintf(default_uri, sizeof default_uri, "file:///tmp/dlock-examples-%ld", (long)getuid());
	uri = argc > 1 && argv[1][0] ? argv[1] : default_uri;

	/* Blocked before the client starts its threads: the main thread takes them with sigtimedwait(). */
	sigemptyset(&signals);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);

	if (dlock_client_open(&client, uri, NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "leader_observer: cannot open %s: %s\n", uri, err);
		return 1;
	}
	if (dlock_client_feature(client, DLOCK_FEATURE_ELECTION, &elections) != DLOCK_OK || elections < 0) {
		fprintf(stderr, "leader_observer: %s has no leader election\n", dlock_client_uri(client));
		rc = 2;
		goto out;
	}
	st = dlock_election_new(client, name, &e);
	if (st == DLOCK_OK)
		st = dlock_observe(e, on_leader, &f);
	if (st != DLOCK_OK) {
		fprintf(stderr, "leader_observer: %s\n", why(client, st));
		goto out;
	}
	printf("observing %s (%s)\n", name,
	       elections == DLOCK_WAKEUP_NOTIFY ? "notified by the server" : "reading once per lease");
	fflush(stdout);

	/* The application's work would go here, sending requests to f.address; this one only waits. */
	if (seconds > 0) {
		struct timespec ts = {seconds, 0};

		while (sigtimedwait(&signals, NULL, &ts) < 0 && errno == EINTR)
			;
	} else {
		int sig;

		sigwait(&signals, &sig);
	}
	rc = 0;
out:
	dlock_election_free(e); /* stops observing, after a callback that is running returns */
	if (dlock_client_close(client) != DLOCK_OK)
		rc = 1;
	pthread_mutex_lock(&f.mu);
	if (rc == 0 && f.address[0])
		printf("last leader %s term %" PRIu64 "\n", f.address, f.term);
	pthread_mutex_unlock(&f.mu);
	return rc;
}
