/*
 * worker_pool: workers in many processes (on many hosts, with a network
 * backend) that call a rate-limited service, never more than PERMITS of
 * them at once.
 *
 *   worker_pool [URI [WORKERS [PERMITS]]]
 *
 * Each worker is a process of its own with its own client, as on separate
 * hosts.  Before each call it takes a permit of the semaphore "api-quota"
 * (dlock_semaphore_new() with N = PERMITS): at most N holders across every
 * process, the others wait for one to leave.  A worker that dies frees its
 * permit after its lease (Redis) or with its session (ZooKeeper,
 * PostgreSQL, file://), so the quota is never lost for good.  Every user
 * of the name must give the same N: another N while the name is in use is
 * refused with DLOCK_EKIND.
 *
 * The "call" here sleeps 100 ms and counts, in memory the workers share,
 * how many are inside at once; the parent prints the most it saw.  Where
 * the backend gives permits a slot (0..N-1), a worker passes it with the
 * fencing token to the service, which can keep the last token per slot
 * and refuse a permit that is gone.
 *
 * The same from a shell with the dlock command (see dlock(1)):
 *
 *   dlock --uri redis://locks:6379 --limit 4 api-quota -- ./call-the-api
 *
 * URI defaults to file:///tmp/dlock-examples-UID; WORKERS to 6, PERMITS to
 * 2.  Exit status: 0 when every call ran and never more than PERMITS at
 * once, 1 otherwise, 2 on a usage error, a backend without semaphores
 * (RedLock) or one whose locks do not reach other processes (mem://).
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CALLS_PER_WORKER 3

/* What the workers share: how many are inside a call now, and the most seen. */
struct pool_stats {
	atomic_int inside;
	atomic_int most;
	atomic_int calls;
};

static const char *why(dlock_client *client, dlock_status st)
{
	const char *msg = dlock_client_errmsg(client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

/* The rate-limited call: 100 ms, counted while inside. */
static void call_service(int worker, struct pool_stats *stats, dlock_lock *permit)
{
	uint64_t token = 0;
	uint32_t slot = 0;
	int now = atomic_fetch_add(&stats->inside, 1) + 1;
	int most = atomic_load(&stats->most);

	while (now > most && !atomic_compare_exchange_weak(&stats->most, &most, now))
		;
	if (dlock_lock_permit_slot(permit, &slot) == DLOCK_OK &&
	    dlock_lock_fencing_token(permit, &token) == DLOCK_OK)
		printf("worker %d: calling with permit slot %" PRIu32 ", token %" PRIu64 " (%d inside)\n", worker,
		       slot, token, now);
	else
		printf("worker %d: calling (%d inside)\n", worker, now);
	fflush(stdout);
	nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 * 1000 }, NULL);
	atomic_fetch_sub(&stats->inside, 1);
	atomic_fetch_add(&stats->calls, 1);
}

/* One worker process: its own client, one permit per call.  Returns the exit status. */
static int worker_main(int worker, const char *uri, uint32_t permits, struct pool_stats *stats)
{
	dlock_client *client = NULL;
	dlock_lock *permit = NULL;
	char err[256];
	int rc = 0;
	dlock_status st = dlock_client_open(&client, uri, NULL, err, sizeof err);

	if (st != DLOCK_OK) {
		fprintf(stderr, "worker %d: cannot open %s: %s\n", worker, uri, err);
		return 1;
	}
	st = dlock_semaphore_new(client, "api-quota", permits, &permit);
	if (st != DLOCK_OK) {
		fprintf(stderr, "worker %d: %s\n", worker, why(client, st));
		dlock_client_close(client);
		return 1;
	}
	for (int i = 0; i < CALLS_PER_WORKER && rc == 0; i++) {
		dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT;
		opts.wait_ms = 60000; /* a permit frees up well before this */
		st = dlock_acquire(permit, &opts);
		if (st != DLOCK_OK) {
			fprintf(stderr, "worker %d: no permit: %s\n", worker, why(client, st));
			rc = 1;
			break;
		}
		call_service(worker, stats, permit);
		st = dlock_release(permit);
		if (st != DLOCK_OK) {
			/* DLOCK_ENOTHELD: the permit was lost during the call (a lease that ran out); the
			 * call may have overlapped with PERMITS others. */
			fprintf(stderr, "worker %d: %s\n", worker, why(client, st));
			rc = 1;
		}
	}
	dlock_lock_free(permit);
	dlock_client_close(client);
	return rc;
}

/* The backend must have semaphores, and its locks must reach the other processes (mem:// locks stay in
 * one). */
static int backend_fits(const char *uri)
{
	dlock_client *client = NULL;
	dlock_capabilities caps;
	int64_t order = DLOCK_SEMAPHORE_NONE;
	char err[256];
	int ok = 0;

	if (dlock_client_open(&client, uri, NULL, err, sizeof err) != DLOCK_OK) {
		fprintf(stderr, "cannot open %s: %s\n", uri, err);
		return 0;
	}
	if (dlock_client_feature(client, DLOCK_FEATURE_SEMAPHORE, &order) != DLOCK_OK ||
	    order == DLOCK_SEMAPHORE_NONE)
		fprintf(stderr, "%s: this backend has no semaphores\n", uri);
	else if (dlock_client_capabilities(client, &caps) != DLOCK_OK || caps.scope == DLOCK_SCOPE_PROCESS)
		fprintf(stderr, "%s: its locks do not reach other processes; use file://, redis://, zk:// or "
		                "postgres://\n",
		        uri);
	else
		ok = 1;
	dlock_client_close(client);
	return ok;
}

int main(int argc, char **argv)
{
	char default_uri[64];
	const char *uri = argc > 1 ? argv[1] : default_uri;
	int workers = argc > 2 ? atoi(argv[2]) : 6;
	long permits = argc > 3 ? atol(argv[3]) : 2;
	int failed = 0;

	snprintf(default_uri, sizeof default_uri, "file:///tmp/dlock-examples-%lu", (unsigned long)getuid());
	if (workers < 1 || workers > 64 || permits < 1 || permits > DLOCK_PERMITS_MAX) {
		fprintf(stderr, "usage: worker_pool [URI [WORKERS (1-64) [PERMITS (1-%d)]]]\n", DLOCK_PERMITS_MAX);
		return 2;
	}
	if (!backend_fits(uri))
		return 2;
	struct pool_stats *stats =
	        mmap(NULL, sizeof *stats, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (stats == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	atomic_init(&stats->inside, 0);
	atomic_init(&stats->most, 0);
	atomic_init(&stats->calls, 0);
	fflush(NULL);
	for (int i = 0; i < workers; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			failed = 1;
			break;
		}
		if (pid == 0)
			_exit(worker_main(i, uri, (uint32_t)permits, stats));
	}
	int status;
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	int most = atomic_load(&stats->most), calls = atomic_load(&stats->calls);
	printf("%d calls by %d workers, at most %d at once (limit %ld)\n", calls, workers, most, permits);
	if (most > permits)
		failed = 1;
	return failed || calls != workers * CALLS_PER_WORKER ? 1 : 0;
}
