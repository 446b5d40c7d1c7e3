/*
 * create_order: create order 42 exactly once, however many processes try.
 *
 *   create_order [URI [ORDER_ID [STORE_DIR]]]
 *
 * Two requests to create the same order can reach two processes (or two
 * hosts) at the same moment.  Each takes the lock of its business key,
 * "order:42", and only then checks whether the order exists and creates it
 * if not: the check and the act happen under one lock, so no two processes
 * can both see "no order yet".  The record is written with the fencing token
 * of the acquisition, so that the store can tell a late write from a holder
 * whose lock had expired (see store_order()).
 *
 * Run it several times at once; one prints "created", the others "already
 * exists":
 *
 *   for i in 1 2 3 4; do ./create_order file:///tmp/locks & done; wait
 *
 * URI defaults to file:///tmp/dlock-examples-UID; ORDER_ID to 42; STORE_DIR,
 * the stand-in for the order database, to /tmp/dlock-example-orders-UID.
 * With mem:// each process has its own locks: use it for one process only.
 * Exit status: 0 when the order exists at the end, 1 on failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The detail of a failed call, or the status text when there is none. */
static const char *why(dlock_client *client, dlock_status st)
{
	const char *msg = dlock_client_errmsg(client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int order_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/*
 * Write the order under a temporary name and rename it into place, so that
 * a reader never sees half a record.  The fencing token goes with the data.
 * In a database, write it in the same row and make the write conditional,
 * e.g. INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE orders.fence < $token:
 * a holder paused past its lease then cannot overwrite the next holder.
 */
static int store_order(const char *path, const char *id, const char *token)
{
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	f = fopen(tmp, "w");
	if (f == NULL)
		return -1;
	fprintf(f, "order %s\ncreated_by_pid %ld\nfencing_token %s\n", id, (long)getpid(), token);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		remove(tmp);
		return -1;
	}
	return 0;
}

/* Under the lock: check, then act.  Returns 0 when the order exists at the end. */
static int create_once(dlock_client *client, dlock_lock *lock, const char *id, const char *path)
{
	char token_text[32] = "none";
	uint64_t token;
	dlock_status st;

	if (order_exists(path)) {
		printf("order %s already exists: nothing to do\n", id);
		return 0;
	}
	st = dlock_lock_fencing_token(lock, &token);
	if (st == DLOCK_OK) {
		snprintf(token_text, sizeof token_text, "%" PRIu64, token);
	} else if (st != DLOCK_ENOTSUP) { /* ENOTSUP: this backend has no tokens */
		fprintf(stderr, "create_order: fencing token: %s\n", why(client, st));
		return -1;
	}
	/* Charge the card, reserve the stock...: without the lock, a second
	 * request would pass the check above during this time. */
	sleep_ms(200);
	if (store_order(path, id, token_text) != 0) {
		fprintf(stderr, "create_order: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	printf("order %s created (fencing token %s)\n", id, token_text);
	return 0;
}

int main(int argc, char **argv)
{
	char default_uri[64], default_store[64], name[256], path[4096], err[256];
	const char *uri, *id, *store;
	dlock_client *client = NULL;
	dlock_lock *lock = NULL;
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
	dlock_status st;
	int rc = 1;

	snprintf(default_uri, sizeof default_uri, "file:///tmp/dlock-examples-%ld", (long)getuid());
	snprintf(default_store, sizeof default_store, "/tmp/dlock-example-orders-%ld", (long)getuid());
	uri = argc > 1 && argv[1][0] != '\0' ? argv[1] : default_uri;
	id = argc > 2 ? argv[2] : "42";
	store = argc > 3 ? argv[3] : default_store;
	if (mkdir(store, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, "create_order: cannot create %s: %s\n", store, strerror(errno));
		return 1;
	}
	if ((size_t)snprintf(path, sizeof path, "%s/order-%s", store, id) >= sizeof path ||
	    (size_t)snprintf(name, sizeof name, "order:%s", id) >= sizeof name) { /* one lock per business key */
		fprintf(stderr, "create_order: ORDER_ID or STORE_DIR too long\n");
		return 1;
	}

	if (dlock_client_open(&client, uri, NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "create_order: cannot open %s: %s\n", uri, err);
		return 1;
	}
	st = dlock_lock_new(client, name, &lock);
	if (st != DLOCK_OK) {
		fprintf(stderr, "create_order: %s\n", why(client, st));
		goto out;
	}
	opts.wait_ms = 30000; /* requests for the same order wait their turn */
	st = dlock_acquire(lock, &opts);
	if (st != DLOCK_OK) {
		fprintf(stderr, "create_order: cannot lock %s: %s\n", name, why(client, st));
		goto out;
	}
	rc = create_once(client, lock, id, path) == 0 ? 0 : 1;
	st = dlock_release(lock);
	if (st != DLOCK_OK) {
		/* DLOCK_ENOTHELD: the lock was lost while we worked, so another
		 * process may have created the order too; the fencing tokens in
		 * the store say which write came last. */
		fprintf(stderr, "create_order: release %s: %s\n", name, why(client, st));
		rc = 1;
	}
out:
	dlock_lock_free(lock);
	if (dlock_client_close(client) != DLOCK_OK)
		rc = 1;
	return rc;
}
