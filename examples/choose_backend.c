/*
 * choose_backend: the same program on any backend, and a refusal where the
 * backend cannot give what the program needs.
 *
 *   choose_backend [URI]
 *
 * Only the URI changes from one backend to another:
 *
 *   choose_backend file:///var/lock/payments
 *   choose_backend zk://zk1:2181,zk2:2181,zk3:2181/payments
 *   choose_backend 'postgres://app@db1,db2/app?target_session_attrs=read-write&fencing_durability=commit'
 *   choose_backend redis://cache:6379                    (refused: AP)
 *
 * The program moves money between accounts, so two holders at once must
 * never happen.  An AP backend (Redis, RedLock) may let a second holder in
 * after a failover or a long pause, so the program reads the capabilities
 * and refuses it instead of trusting whatever URI it was configured with;
 * it also refuses a backend without fencing tokens, which it writes with
 * every transfer.  Tokens that are only conditional (postgres://, whose
 * tokens can come again after a crash or a failover) are taken, but the
 * program says on stderr when they can go back, from fencing_note: the
 * ledger then refuses the writes of a holder whose token came again, and
 * whoever runs it should know when that can happen.
 * local backends (mem://, file://) are exact, for the processes they serve.
 *
 * URI defaults to file:///tmp/dlock-examples-UID.  Exit status: 0 when the
 * locked work was done, 1 on failure, 3 when the backend was refused.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#define EXIT_REFUSED 3

static const char *why(dlock_client *client, dlock_status st)
{
	const char *msg = dlock_client_errmsg(client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

static void print_capabilities(const dlock_capabilities *caps)
{
	printf("backend      %s\n", caps->backend);
	printf("consistency  %s\n", dlock_consistency_name(caps->consistency));
	printf("fencing      %s%s%s\n", dlock_fencing_name(caps->fencing),
	       caps->fencing_note[0] ? ": " : "", caps->fencing_note);
	printf("fair         %s\n", caps->fair ? "yes" : "no");
	printf("lease        %s\n", dlock_lease_kind_name(caps->lease));
	printf("wakeup       %s\n", dlock_wakeup_name(caps->wakeup));
	printf("scope        %s\n", dlock_scope_name(caps->scope));
}

/* The work that needs the lock. */
static int transfer(dlock_client *client, dlock_lock *lock)
{
	uint64_t token;
	dlock_status st = dlock_lock_fencing_token(lock, &token);

	if (st != DLOCK_OK) {
		fprintf(stderr, "choose_backend: fencing token: %s\n", why(client, st));
		return -1;
	}
	printf("transfer done under %s, fencing token %" PRIu64 "\n", dlock_lock_name(lock), token);
	return 0;
}

int main(int argc, char **argv)
{
	char default_uri[64], err[256];
	const char *uri;
	dlock_client *client = NULL;
	dlock_lock *lock = NULL;
	dlock_capabilities caps;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	dlock_status st;
	int rc = 1;

	snprintf(default_uri, sizeof default_uri, "file:///tmp/dlock-examples-%ld", (long)getuid());
	uri = argc > 1 && argv[1][0] != '\0' ? argv[1] : default_uri;
	if (dlock_client_open(&client, uri, NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "choose_backend: cannot open %s: %s\n", uri, err);
		return 1;
	}
	st = dlock_client_capabilities(client, &caps);
	if (st != DLOCK_OK) {
		fprintf(stderr, "choose_backend: capabilities: %s\n", why(client, st));
		goto out;
	}
	print_capabilities(&caps);
	if (caps.consistency == DLOCK_CONSISTENCY_AP) {
		fprintf(stderr, "choose_backend: refusing %s: an AP backend may give the lock to two "
		        "holders after a failover; use a CP backend (zk://, postgres://)\n",
		        dlock_client_uri(client));
		rc = EXIT_REFUSED;
		goto out;
	}
	if (caps.fencing == DLOCK_FENCING_NONE) {
		fprintf(stderr, "choose_backend: refusing %s: no fencing tokens for the ledger\n",
		        dlock_client_uri(client));
		rc = EXIT_REFUSED;
		goto out;
	}
	if (caps.fencing == DLOCK_FENCING_CONDITIONAL)
		fprintf(stderr, "choose_backend: note: the fencing tokens of %s can go back: %s\n",
		        dlock_client_uri(client), caps.fencing_note);
	st = dlock_lock_new(client, "account:7", &lock);
	if (st != DLOCK_OK) {
		fprintf(stderr, "choose_backend: %s\n", why(client, st));
		goto out;
	}
	opts.wait_ms = 5000;
	st = dlock_acquire(lock, &opts);
	if (st != DLOCK_OK) {
		fprintf(stderr, "choose_backend: cannot lock account:7: %s\n", why(client, st));
		goto out;
	}
	rc = transfer(client, lock) == 0 ? 0 : 1;
	st = dlock_release(lock);
	if (st != DLOCK_OK) {
		fprintf(stderr, "choose_backend: release account:7: %s\n", why(client, st));
		rc = 1;
	}
out:
	dlock_lock_free(lock);
	if (dlock_client_close(client) != DLOCK_OK)
		rc = 1;
	return rc;
}
