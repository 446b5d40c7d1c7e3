/*
 * A backend whose client reports DLOCK_FENCING_STRICT promises that a
 * token never goes back.  This program holds every such backend to it
 * through the failures and restarts it is meant to survive, one row per
 * backend in `rows`:
 *
 *   mem    every client of a namespace closed, then a new one opened in
 *          the same process (namespaces outlive their clients)
 *   file   the directory reopened by a new client, and by another process
 *          (the counter lives in the lock file)
 *   zk     the ensemble's leader killed as in a crash ($DLOCK_TEST_ZK_CTL
 *          kill-leader), tokens taken through the new leader, the member
 *          started again, then a new client (the token is the node's czxid)
 *
 * Each scenario takes tokens of one name before, between and after its
 * events and asserts that each is larger than every one before.  Which
 * backends report STRICT is asked, not assumed: the clients of mem://,
 * file:// and every URI of DLOCK_TEST_URIS are opened, and a backend that
 * reports STRICT without a row here fails the test; a row's scenario runs
 * only for a backend seen reporting STRICT.  Backends that report
 * CONDITIONAL (redis://, postgres://) name in their fencing_note when
 * tokens go back, and their own tests show it (test_pg_failover, the Redis
 * failover tests).
 *
 * A scenario that needs servers the environment lacks (the ZooKeeper
 * ensemble and its control command) is skipped, loudly.
 */
#define _POSIX_C_SOURCE 200809L
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testsupport.h"

#define ROUND 5            /* tokens taken between two events */
#define AFTER_EVENT_MS 20000 /* wait bound of the first acquisition after an event */

/* The tokens of one scenario, in the order taken. */
struct seen {
	uint64_t last;
	int taken, back;
	int skipped; /* the scenario could not run here (said with dlock_test_skip_part) */
};

static void saw(struct seen *s, uint64_t token, const char *when)
{
	if (s->taken > 0 && token <= s->last) {
		printf("\n    token %llu %s is not above %llu", (unsigned long long)token, when,
		       (unsigned long long)s->last);
		s->back++;
	}
	s->last = token;
	s->taken++;
}

/* ROUND acquisitions of `name` on `uri` by a new client, each token recorded; 0 when the client
 * could not open or lock. */
static int round_on(const char *uri, const char *name, struct seen *s, const char *when)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	dlock_lock *l = dlock_test_new_lock(c, name);
	int ok = l != NULL;
	for (int i = 0; ok && i < ROUND; i++) {
		dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
		o.wait_ms = i == 0 ? AFTER_EVENT_MS : 5000;
		dlock_status st = dlock_acquire(l, &o);
		if (st != DLOCK_OK) {
			printf("\n    %s: acquire %s: %s: %s", uri, when, dlock_status_name(st), dlock_client_errmsg(c));
			ok = 0;
			break;
		}
		saw(s, dlock_test_token(l), when);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	CU_ASSERT(ok);
	dlock_lock_free(l);
	dlock_client_close(c);
	return ok;
}

/* ------------------------------------------------------------ scenarios */

static void mem_reopen(struct seen *s)
{
	char uri[64];
	snprintf(uri, sizeof uri, "mem://strict-tokens-%ld", (long)getpid());
	round_on(uri, "name", s, "first client");
	round_on(uri, "name", s, "after every client closed, a new one");
	round_on(uri, "name", s, "and another");
}

static void file_reopen(struct seen *s)
{
	char *dir = dlock_test_mkdtemp(), uri[512];
	CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
	snprintf(uri, sizeof uri, "file://%s", dir);
	round_on(uri, "name", s, "first client");
	round_on(uri, "name", s, "reopened");
	/* Another process: its tokens come back through a pipe. */
	int fds[2];
	CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		struct seen child = { 0 };
		int ok = round_on(uri, "name", &child, "in another process");
		ssize_t n = write(fds[1], &child, sizeof child);
		_exit(ok && n == (ssize_t)sizeof child ? 0 : 1);
	}
	close(fds[1]);
	struct seen child = { 0 };
	ssize_t n = read(fds[0], &child, sizeof child);
	close(fds[0]);
	int status = 0;
	CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
	CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CU_ASSERT_EQUAL(n, (ssize_t)sizeof child);
	CU_ASSERT_EQUAL(child.back, 0);
	if (n == (ssize_t)sizeof child && child.taken > 0)
		saw(s, child.last, "in another process");
	round_on(uri, "name", s, "back in this process");
	dlock_test_rmtree(dir);
	free(dir);
}

static void zk_leader_killed(struct seen *s)
{
	const char *uri = dlock_test_env("DLOCK_TEST_ZK_ENSEMBLE_URI"), *ctl = dlock_test_env("DLOCK_TEST_ZK_CTL");
	if (!uri || !ctl) {
		dlock_test_skip_part("zk: no ensemble to fail over (DLOCK_TEST_ZK_ENSEMBLE_URI, DLOCK_TEST_ZK_CTL)");
		s->skipped = 1;
		return;
	}
	char name[64], cmd[512], killed[16] = "", ignored[64];
	snprintf(name, sizeof name, "strict-tokens-%ld", (long)getpid());
	round_on(uri, name, s, "before the leader was killed");
	snprintf(cmd, sizeof cmd, "%s kill-leader", ctl);
	int rc = dlock_test_run(cmd, killed, sizeof killed);
	killed[strcspn(killed, "\n")] = '\0';
	CU_ASSERT_EQUAL(rc, 0);
	printf("\n    zk: member %s (the leader) killed", killed);
	round_on(uri, name, s, "with the leader killed");
	if (rc == 0 && killed[0]) {
		snprintf(cmd, sizeof cmd, "%s start %s", ctl, killed);
		CU_ASSERT_EQUAL(dlock_test_run(cmd, ignored, sizeof ignored), 0);
	}
	round_on(uri, name, s, "with the member started again");
}

/* ------------------------------------------------------------ the table */

static const struct row {
	const char *backend; /* dlock_capabilities.backend */
	const char *scenario;
	void (*run)(struct seen *s);
} rows[] = {
	{ "mem", "every client closed, a new one in the same process", mem_reopen },
	{ "file", "reopened, and from another process", file_reopen },
	{ "zk", "the ensemble's leader killed, then started again", zk_leader_killed },
};

#define NROWS (sizeof rows / sizeof rows[0])

static const struct row *row_of(const char *backend)
{
	for (size_t i = 0; i < NROWS; i++)
		if (strcmp(rows[i].backend, backend) == 0)
			return &rows[i];
	return NULL;
}

/* Open `uri`; when it reports STRICT, mark its backend's row (failing when there is none). */
static void classify(const char *uri, int strict[NROWS])
{
	dlock_client *c = NULL;
	char err[512] = "", masked[512];
	dlock_test_mask_uri(uri, masked, sizeof masked);
	dlock_status st = dlock_client_open(&c, uri, NULL, err, sizeof err);
	if (st != DLOCK_OK) {
		printf("\n    %s: not reached (%s): %s", masked, dlock_status_name(st), err);
		return;
	}
	dlock_capabilities caps;
	CU_ASSERT_EQUAL_FATAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	const struct row *r = row_of(caps.backend);
	printf("\n    %s: %s, fencing %s%s", masked, caps.backend, dlock_fencing_name(caps.fencing),
	       caps.fencing == DLOCK_FENCING_STRICT ? (r ? "" : ": NO ROW in this test's table") : "");
	if (caps.fencing == DLOCK_FENCING_STRICT) {
		CU_ASSERT_PTR_NOT_NULL(r);
		if (r)
			strict[r - rows] = 1;
	}
	dlock_client_close(c);
}

static void test_strict_backends_have_rows(void)
{
	int strict[NROWS] = { 0 };
	char *dir = dlock_test_mkdtemp(), file_uri[512];
	CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
	snprintf(file_uri, sizeof file_uri, "file://%s", dir);
	classify("mem://", strict);
	classify(file_uri, strict);
	const char *env = getenv("DLOCK_TEST_URIS");
	char *copy = env ? strdup(env) : NULL, *save = NULL;
	for (char *u = copy ? strtok_r(copy, " \t\n", &save) : NULL; u; u = strtok_r(NULL, " \t\n", &save))
		classify(u, strict);
	free(copy);
	dlock_test_rmtree(dir);
	free(dir);

	for (size_t i = 0; i < NROWS; i++) {
		if (!strict[i]) {
			printf("\n    %s: not seen reporting strict here; scenario not run", rows[i].backend);
			continue;
		}
		struct seen s = { 0 };
		printf("\n    %s: %s", rows[i].backend, rows[i].scenario);
		rows[i].run(&s);
		if (s.skipped)
			continue;
		printf(": %d tokens, %d not above the one before, last %llu", s.taken, s.back,
		       (unsigned long long)s.last);
		CU_ASSERT(s.taken > 0);
		CU_ASSERT_EQUAL(s.back, 0);
	}
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("strict tokens", NULL, NULL);
	CU_add_test(s, "every backend reporting strict fencing: its restarts and failovers never give a token back",
	            test_strict_backends_have_rows);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
