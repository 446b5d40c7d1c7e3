/*
 * The dlock command's `leader` verb: who leads the election NAME now (one
 * read, dlock_election_leader()), or with --watch who leads at each change
 * until dlock is interrupted (dlock_observe()).
 *
 * Output, one line per state: in text "TERM<TAB>VALUE<TAB>IDENTITY", the
 * value and the identity escaped as `status` escapes them (so a tab is
 * always a separator), "?" for a term or identity the backend cannot see,
 * and "none" alone when nobody leads; with --json one object per line.
 * The value and identity come from other processes: never printed raw.
 *
 * Threads: one read runs on the main thread.  With --watch the main
 * thread only waits for a signal or a failed write, and the library's
 * observer thread prints each change (it alone writes stdout then; it has
 * every signal blocked, so a closed pipe is an EPIPE, reported back).
 * Errors: printed on stderr ("dlock: "); exit statuses as the other verbs,
 * 1 when nobody leads (one read), 0 when --watch is ended by SIGINT or
 * SIGTERM.
 */
#include "dlock_leader.h"

#include "dlock_out.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

/* --watch: what the observer thread tells the main thread. */
struct watch {
	const struct cli_verb_args *a;
	int wake[2];      /* pipe: observer -> main, "stdout failed" */
	atomic_int failed; /* set (release) after err */
	int err;          /* errno of the failed write */
};

static void print_leader(const struct cli_verb_args *a, const dlock_leader *l)
{
	const char *id = l->holder != NULL && l->holder->identity != NULL ? l->holder->identity : "";

	if (a->json) {
		putchar('{');
		cli_out_json_field(stdout, "name", a->name);
		printf(",\"elected\":%s", l->elected ? "true" : "false");
		if (l->elected && l->term > 0)
			printf(",\"term\":%" PRIu64 ",", l->term);
		else
			fputs(",\"term\":null,", stdout);
		cli_out_json_field(stdout, "value", l->elected ? l->value : NULL);
		fputs(",\"holder\":", stdout);
		if (l->holder != NULL)
			cli_json_holder(l->holder);
		else
			fputs("null", stdout);
		fputs("}\n", stdout);
		return;
	}
	if (!l->elected) {
		puts("none");
		return;
	}
	if (l->term > 0)
		printf("%" PRIu64 "\t", l->term);
	else
		fputs("?\t", stdout);
	cli_out_text(stdout, l->value);
	putchar('\t');
	cli_out_text(stdout, id[0] ? id : "?");
	putchar('\n');
}

/* The election handle of NAME: 0, or prints why and returns the exit status. */
static int open_election(dlock_client *c, const char *name, dlock_election **e)
{
	dlock_status st = dlock_election_new(c, name, e);
	char msg[512];
	const char *text;

	if (st == DLOCK_OK)
		return 0;
	text = dlock_client_errmsg(c);
	cli_say("leader: %s: %s", dlock_client_uri(c), cli_text(msg, sizeof msg, text[0] ? text : dlock_strerror(st)));
	return cli_status_exit(st, EX_USAGE);
}

static int flushed(int rc)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_say("cannot write to stdout: %s", strerror(errno));
		return EX_OSERR;
	}
	return rc;
}

static int read_once(dlock_client *c, dlock_election *e, const struct cli_verb_args *a)
{
	dlock_leader *l = NULL;
	dlock_status st = dlock_election_leader(e, &l);
	char msg[512];
	const char *text;
	int rc;

	if (st != DLOCK_OK) {
		text = dlock_client_errmsg(c);
		cli_say("leader: %s: %s", dlock_client_uri(c),
		        cli_text(msg, sizeof msg, text[0] ? text : dlock_strerror(st)));
		return cli_status_exit(st, EX_USAGE);
	}
	rc = l->elected ? 0 : CLI_EXIT_FREE;
	if (!a->quiet)
		print_leader(a, l);
	dlock_leader_free(l);
	return flushed(rc);
}

/* Observer callback, on the library's observer thread: one line per change. */
static void on_change(dlock_election *e, const dlock_leader *l, void *userdata)
{
	struct watch *w = userdata;
	ssize_t n;

	(void)e;
	if (atomic_load_explicit(&w->failed, memory_order_acquire))
		return;
	print_leader(w->a, l);
	if (fflush(stdout) == 0 && !ferror(stdout))
		return;
	w->err = errno;
	atomic_store_explicit(&w->failed, 1, memory_order_release);
	n = write(w->wake[1], "x", 1);
	(void)n; /* the flag is what counts; the byte only wakes poll() */
}

/* Wait for SIGINT/SIGTERM (exit 0), another signal (128+N) or a failed write. */
static int watch_until_done(const struct cli_signals *sig, struct watch *w)
{
	struct pollfd p[2] = {{.fd = sig->fd, .events = POLLIN}, {.fd = w->wake[0], .events = POLLIN}};
	int s;

	for (;;) {
		if (poll(p, 2, -1) < 0 && errno != EINTR) {
			cli_say("poll: %s", strerror(errno));
			return EX_OSERR;
		}
		if (atomic_load_explicit(&w->failed, memory_order_acquire)) {
			if (w->err == EPIPE)
				return 128 + SIGPIPE; /* the reader is gone, as a shell would say */
			cli_say("cannot write to stdout: %s", strerror(w->err));
			return EX_OSERR;
		}
		s = cli_signals_pending(sig);
		if (s == SIGINT || s == SIGTERM)
			return 0;
		if (s != 0)
			return 128 + s;
	}
}

static int watch(dlock_client *c, dlock_election *e, const struct cli_verb_args *a,
                 const struct cli_signals *sig)
{
	struct watch w = {.a = a};
	dlock_status st;
	int rc;

	atomic_init(&w.failed, 0);
	if (pipe2(w.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		cli_say("cannot create a pipe: %s", strerror(errno));
		return EX_OSERR;
	}
	st = dlock_observe(e, on_change, &w);
	if (st != DLOCK_OK) {
		cli_say("leader: cannot observe: %s", dlock_client_errmsg(c));
		rc = cli_status_exit(st, EX_OSERR);
	} else {
		rc = watch_until_done(sig, &w);
		dlock_observe(e, NULL, NULL); /* returns once no callback runs */
	}
	close(w.wake[0]);
	close(w.wake[1]);
	return rc;
}

int cli_leader_run(const struct cli_verb_args *a, dlock_client *c, const struct cli_signals *sig)
{
	dlock_election *e = NULL;
	int rc = open_election(c, a->name, &e);

	if (rc == 0)
		rc = a->watch ? watch(c, e, a, sig) : read_once(c, e, a);
	dlock_election_free(e);
	return rc;
}
