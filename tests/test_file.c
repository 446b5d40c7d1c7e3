/*
 * file:// backend: what is file://'s own: its capabilities, the lock
 * directory (made on demand, its errors), lock file names inside it, lock
 * files never unlinked, tokens kept in the file (counting acquisitions
 * across clients and processes), and the OS releasing a dead holder's
 * lock, also with a forked child holding the descriptor.  The contract
 * every backend keeps (URIs, waiting, cancelling, exclusion between
 * threads and processes) is the conformance suite's, which runs on file://
 * too.
 *
 * Every test works in its own temporary directory.  Child processes are
 * forked only while the parent has no client open (clients are not
 * fork-safe); they report through shared memory and their exit status and
 * never call CUnit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000 /* an acquire that must succeed: a hang becomes a failure */
#define AWAIT_MS 10000     /* awaiting a condition that must come true */

/* ------------------------------------------------------------ helpers */

static dlock_client *open_dir(const char *dir)
{
	char uri[PATH_MAX + 16];
	snprintf(uri, sizeof uri, "file://%s", dir);
	return dlock_test_open(uri, NULL, NULL);
}

static dlock_status open_status(const char *uri, char *errbuf, size_t errlen)
{
	dlock_client *c = NULL;
	dlock_status st = dlock_client_open(&c, uri, NULL, errbuf, errlen);
	dlock_client_close(c);
	return st;
}

static dlock_status acquire(dlock_lock *l, int64_t wait_ms)
{
	return dlock_test_acquire(l, wait_ms, 0, -1, NULL, NULL);
}

static char *path_join(const char *a, const char *b)
{
	char *p = malloc(strlen(a) + strlen(b) + 2);
	CU_ASSERT_FATAL(p != NULL);
	sprintf(p, "%s/%s", a, b);
	return p;
}

/* Names of the entries of `dir` (without "." and ".."); returns the count. */
static size_t list_dir(const char *dir, char names[][NAME_MAX + 1], size_t max)
{
	size_t n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (n < max)
			snprintf(names[n], NAME_MAX + 1, "%s", e->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/* The only entry of `dir` is `name`. */
static int only_entry(const char *dir, const char *name)
{
	char names[2][NAME_MAX + 1];
	return list_dir(dir, names, 2) == 1 && strcmp(names[0], name) == 0;
}

static int exited_ok(pid_t pid)
{
	int status = 0;
	if (waitpid(pid, &status, 0) != pid)
		return 0;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* --------------------------------------------------------------- capabilities */

static void test_capabilities(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *c = open_dir(tmp);
	dlock_capabilities caps;
	CU_ASSERT_FATAL(c != NULL);
	CU_ASSERT_EQUAL(dlock_client_capabilities(c, &caps), DLOCK_OK);
	CU_ASSERT_STRING_EQUAL(caps.backend, "file");
	CU_ASSERT_EQUAL(caps.consistency, DLOCK_CONSISTENCY_LOCAL);
	CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_STRICT);
	CU_ASSERT_EQUAL(caps.fair, 0);
	CU_ASSERT_EQUAL(caps.lease, DLOCK_LEASE_SESSION);
	CU_ASSERT_EQUAL(caps.wakeup, DLOCK_WAKEUP_POLL);
	CU_ASSERT_EQUAL(caps.scope, DLOCK_SCOPE_HOST);

	/* No lease: nothing to extend; check asks the OS. */
	dlock_lock *l = dlock_test_new_lock(c, "n");
	CU_ASSERT_FATAL(l != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_extend(l, 1000), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	dlock_lock_free(l);
	dlock_client_close(c);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ---------------------------------------------------------- directory */

static void test_dir_on_demand(void)
{
	char *tmp = dlock_test_mkdtemp();
	char *dir = path_join(tmp, "a/b/c");
	struct stat sb;
	CU_ASSERT_EQUAL(stat(dir, &sb), -1);
	dlock_client *c = open_dir(dir);
	CU_ASSERT_FATAL(c != NULL);
	CU_ASSERT_EQUAL_FATAL(stat(dir, &sb), 0);
	CU_ASSERT(S_ISDIR(sb.st_mode));
	CU_ASSERT_EQUAL(sb.st_mode & 0777, 0700);

	/* Removed while the client is open: the next acquire makes it again. */
	dlock_test_rmtree(dir);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "n"), DLOCK_OK);
	CU_ASSERT_EQUAL(stat(dir, &sb), 0);
	dlock_client_close(c);
	free(dir);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* What a child that meets an unwritable parent reports (shared memory). */
struct eacces_report {
	int ran;               /* 1: it tried the URI; 0: it could not become an ordinary user */
	dlock_status status;
	char why[256];         /* when it did not run */
	char errbuf[512];
};

/* Become `uid`/`gid` for good (groups, then gid, then uid); -1 with the reason in `why`. */
static int drop_root(uid_t uid, gid_t gid, char *why, size_t len)
{
	if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
		snprintf(why, len, "cannot become uid %u: %s", (unsigned)uid, strerror(errno));
		return -1;
	}
	if (geteuid() == 0 || setuid(0) == 0) {
		snprintf(why, len, "still root after setuid(%u)", (unsigned)uid);
		return -1;
	}
	return 0;
}

/*
 * In a child: as an ordinary user (root drops to `uid`, since permission
 * bits do not bind root), make BASE/ro mode 0500 and open file://BASE/ro/sub.
 * Never returns; never calls CUnit.
 */
static void child_eacces(const char *base, uid_t uid, gid_t gid, struct eacces_report *r)
{
	char ro[PATH_MAX], uri[PATH_MAX + 16];
	if (geteuid() == 0 && drop_root(uid, gid, r->why, sizeof r->why) != 0)
		_exit(0);
	snprintf(ro, sizeof ro, "%s/ro", base);
	if (mkdir(ro, 0500) != 0) {
		snprintf(r->why, sizeof r->why, "mkdir DIR/ro: %s", strerror(errno));
		_exit(1);
	}
	snprintf(uri, sizeof uri, "file://%s/sub", ro);
	r->status = open_status(uri, r->errbuf, sizeof r->errbuf);
	r->ran = 1;
	_exit(0);
}

static void test_dir_errors(void)
{
	char *tmp = dlock_test_mkdtemp();
	char *file = path_join(tmp, "file");
	char *under = path_join(file, "sub");
	char uri[PATH_MAX + 16], errbuf[256] = "";
	int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	CU_ASSERT_FATAL(fd >= 0);
	close(fd);

	/* A regular file where a directory belongs, root or not: the URI's
	 * fault, ENOTFOUND, not EIO. */
	snprintf(uri, sizeof uri, "file://%s", under);
	CU_ASSERT_EQUAL(open_status(uri, errbuf, sizeof errbuf), DLOCK_ENOTFOUND);
	CU_ASSERT_PTR_NOT_NULL(strstr(errbuf, strerror(ENOTDIR)));
	snprintf(uri, sizeof uri, "file://%s", file);
	CU_ASSERT_EQUAL(open_status(uri, errbuf, sizeof errbuf), DLOCK_ENOTFOUND);
	CU_ASSERT_EQUAL(open_status("file:///proc/dlock-no-such-dir/x", errbuf, sizeof errbuf), DLOCK_ENOTFOUND);

	/*
	 * An unwritable parent is EPERM, tried in a child that is an ordinary
	 * user: this one, or nobody when the suite runs as root (as in CI).
	 * BASE belongs to that user; root lets it through TMP.
	 */
	struct passwd *pw = getpwnam("nobody");
	uid_t uid = pw ? pw->pw_uid : 65534;
	gid_t gid = pw ? pw->pw_gid : 65534;
	char *base = path_join(tmp, "user");
	CU_ASSERT_FATAL(mkdir(base, 0700) == 0);
	if (geteuid() == 0) {
		CU_ASSERT_FATAL(chown(base, uid, gid) == 0);
		CU_ASSERT_FATAL(chmod(tmp, 0711) == 0);
	}
	struct eacces_report *r = dlock_test_shared_alloc(sizeof *r);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		child_eacces(base, uid, gid, r);
	int ok = exited_ok(pid);
	if (!ok)
		printf("\n    the child failed: %s", r->why);
	CU_ASSERT(ok);
	if (ok && !r->ran) {
		char why[300];
		snprintf(why, sizeof why, "EPERM for an unwritable parent: %s", r->why);
		dlock_test_skip_part(why);
	} else if (ok) {
		if (r->status != DLOCK_EPERM)
			printf("\n    unwritable parent: %s: %s", dlock_status_name(r->status), r->errbuf);
		CU_ASSERT_EQUAL(r->status, DLOCK_EPERM);
		CU_ASSERT_PTR_NOT_NULL(strstr(r->errbuf, strerror(EACCES)));
	}
	dlock_test_shared_free(r, sizeof *r);
	free(base);
	free(under);
	free(file);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* -------------------------------------------------------- file names */

#define NNAMES 12

static void test_names(void)
{
	char *tmp = dlock_test_mkdtemp();
	char *outer = path_join(tmp, "outer");
	char *dir = path_join(outer, "locks");
	static char long1[DLOCK_NAME_MAX + 1], long2[DLOCK_NAME_MAX + 1];
	memset(long1, 'x', DLOCK_NAME_MAX);
	memcpy(long2, long1, DLOCK_NAME_MAX);
	long2[DLOCK_NAME_MAX - 1] = 'y';
	const char *names[NNAMES] = {
		"a/b", "a%2Fb", "a_b", "..", "../escape", ".", "with space", "ctl\x01\n\t",
		"\xff\xfe not utf-8 \xc3", "/abs", long1, long2,
	};
	dlock_client *c = open_dir(dir);
	CU_ASSERT_FATAL(c != NULL);
	for (int i = 0; i < NNAMES; i++) {
		dlock_lock *l = dlock_test_new_lock(c, names[i]);
		CU_ASSERT_FATAL(l != NULL);
		CU_ASSERT_EQUAL(acquire(l, 0), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
		dlock_lock_free(l);
	}
	/* The same name again maps to the same file. */
	CU_ASSERT_EQUAL(dlock_test_probe(c, "a/b"), DLOCK_OK);
	dlock_client_close(c);

	static char listed[NNAMES + 4][NAME_MAX + 1];
	CU_ASSERT_EQUAL(list_dir(dir, listed, NNAMES + 4), NNAMES);
	for (int i = 0; i < NNAMES; i++) {
		size_t len = strlen(listed[i]);
		CU_ASSERT(len > strlen(".lock") && len < NAME_MAX);
		CU_ASSERT_STRING_EQUAL(listed[i] + len - strlen(".lock"), ".lock");
		CU_ASSERT(listed[i][0] != '.');
	}
	/* Nothing was created next to DIR or above it. */
	CU_ASSERT(only_entry(outer, "locks"));
	CU_ASSERT(only_entry(tmp, "outer"));
	free(dir);
	free(outer);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* Lock files stay after release: the next holder locks the same inode. */
static void test_never_unlinked(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *a = open_dir(tmp), *b = open_dir(tmp);
	char listed[2][NAME_MAX + 1];
	struct stat s1, s2;
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = dlock_test_new_lock(a, "n"), *lb = dlock_test_new_lock(b, "n");
	CU_ASSERT_FATAL(la && lb);

	CU_ASSERT_EQUAL_FATAL(acquire(la, 0), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(list_dir(tmp, listed, 2), 1);
	char *path = path_join(tmp, listed[0]);
	CU_ASSERT_EQUAL_FATAL(stat(path, &s1), 0);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(stat(path, &s2), 0);
	CU_ASSERT_EQUAL(s1.st_ino, s2.st_ino);

	CU_ASSERT_EQUAL_FATAL(acquire(lb, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(a);
	dlock_client_close(b);
	CU_ASSERT_EQUAL(stat(path, &s2), 0);
	CU_ASSERT_EQUAL(s1.st_ino, s2.st_ino);
	CU_ASSERT_EQUAL(list_dir(tmp, listed, 2), 1);
	free(path);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ------------------------------------------------------- processes */

/* What a child reports to its parent. */
struct child_report {
	atomic_int state; /* 0: running, 1: holds the lock, -1: failed */
	uint64_t token;
};

/* In a child: open, acquire, report; then release or wait to be killed. */
static void child_lock(const char *dir, struct child_report *r, int hold_forever)
{
	dlock_client *c = open_dir(dir);
	dlock_lock *l = dlock_test_new_lock(c, "n");
	if (!l || acquire(l, LONG_WAIT_MS) != DLOCK_OK || dlock_lock_fencing_token(l, &r->token) != DLOCK_OK) {
		atomic_store(&r->state, -1);
		_exit(1);
	}
	atomic_store(&r->state, 1);
	while (hold_forever)
		pause();
	int ok = dlock_release(l) == DLOCK_OK;
	dlock_lock_free(l);
	dlock_client_close(c);
	_exit(ok ? 0 : 1);
}

static uint64_t token_once(const char *dir)
{
	dlock_client *c = open_dir(dir);
	dlock_lock *l = dlock_test_new_lock(c, "n");
	uint64_t t = 0;
	CU_ASSERT_FATAL(l != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(l, LONG_WAIT_MS), DLOCK_OK);
	t = dlock_test_token(l);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
	return t;
}

static uint64_t file_token(const char *dir)
{
	char listed[2][NAME_MAX + 1];
	unsigned char b[8];
	uint64_t t = 0;
	if (list_dir(dir, listed, 2) != 1)
		return 0;
	char *path = path_join(dir, listed[0]);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return 0;
	if (pread(fd, b, 8, 0) == 8)
		for (int i = 7; i >= 0; i--)
			t = t << 8 | b[i];
	close(fd);
	return t;
}

/*
 * The token lives in the file: it counts the name's acquisitions (the n-th
 * holder, from 1, gets n) across clients and processes, and the file's
 * first 8 bytes are the last one.
 */
static void test_fencing_processes(void)
{
	char *tmp = dlock_test_mkdtemp();
	struct child_report *r = dlock_test_shared_alloc(sizeof *r);
	CU_ASSERT_EQUAL(token_once(tmp), 1);
	CU_ASSERT_EQUAL(token_once(tmp), 2);

	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		child_lock(tmp, r, 0);
	CU_ASSERT(exited_ok(pid));
	CU_ASSERT_EQUAL(atomic_load(&r->state), 1);
	CU_ASSERT_EQUAL(r->token, 3);

	uint64_t t4 = token_once(tmp);
	CU_ASSERT_EQUAL(t4, 4);
	CU_ASSERT_EQUAL(file_token(tmp), t4);
	dlock_test_shared_free(r, sizeof *r);
	dlock_test_rmtree(tmp);
	free(tmp);
}

static int child_holds(void *arg)
{
	return atomic_load(&((struct child_report *)arg)->state) != 0;
}

/* The OS releases the lock of a holder killed with SIGKILL. */
static void test_holder_killed(void)
{
	char *tmp = dlock_test_mkdtemp();
	struct child_report *r = dlock_test_shared_alloc(sizeof *r);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0)
		child_lock(tmp, r, 1);
	int held = dlock_test_await(child_holds, r, AWAIT_MS) && atomic_load(&r->state) == 1;
	CU_ASSERT(held);

	dlock_client *c = open_dir(tmp);
	CU_ASSERT_FATAL(c != NULL);
	if (held)
		CU_ASSERT_EQUAL(dlock_test_probe(c, "n"), DLOCK_EBUSY);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* The child's descriptors are closed once it can be reaped. */
	CU_ASSERT_EQUAL(dlock_test_probe(c, "n"), DLOCK_OK);
	dlock_client_close(c);
	dlock_test_shared_free(r, sizeof *r);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/*
 * A child forked while the lock is held shares the open file description;
 * release must still free the lock (an explicit unlock, not just close).
 * The child does nothing with the client: it only waits to be killed.
 */
static void test_release_with_forked_child(void)
{
	char *tmp = dlock_test_mkdtemp();
	dlock_client *a = open_dir(tmp), *b = open_dir(tmp);
	CU_ASSERT_FATAL(a && b);
	dlock_lock *la = dlock_test_new_lock(a, "n");
	CU_ASSERT_FATAL(la != NULL);
	CU_ASSERT_EQUAL_FATAL(acquire(la, 0), DLOCK_OK);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		for (;;)
			pause();
	}
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(b, "n"), DLOCK_OK);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	dlock_lock_free(la);
	dlock_client_close(a);
	dlock_client_close(b);
	dlock_test_rmtree(tmp);
	free(tmp);
}

/* ------------------------------------------------------------- main */

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("file", NULL, NULL);
	CU_add_test(s, "capabilities, check and extend", test_capabilities);
	CU_add_test(s, "the directory is created on demand", test_dir_on_demand);
	CU_add_test(s, "directory errors", test_dir_errors);
	CU_add_test(s, "every name maps to its own file inside DIR", test_names);
	CU_add_test(s, "lock files are never unlinked", test_never_unlinked);
	CU_add_test(s, "fencing tokens count acquisitions across processes", test_fencing_processes);
	CU_add_test(s, "a killed holder's lock is released", test_holder_killed);
	CU_add_test(s, "release works while a forked child has the descriptor", test_release_with_forked_child);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
