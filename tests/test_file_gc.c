/*
 * dlock_gc() on file://: what it removes (the lock files nobody holds or
 * tries) and what it keeps (a file held by a mutex, a reader or a permit),
 * --dry-run removing nothing, the name prefix, tokens that never go back
 * across a removal (the directory's floor), the backends that answer
 * DLOCK_ENOTSUP saying why, and the race: gc in a loop against processes
 * that acquire and release the same names (gc_race.c).
 *
 * Every test works in its own temporary directory.  Children are forked
 * only while the parent has no client open.
 */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "gc_race.h"
#include "testsupport.h"


static dlock_client *open_dir(const char *dir)
{
	char uri[PATH_MAX + 16];
	snprintf(uri, sizeof uri, "file://%s", dir);
	return dlock_test_open(uri, NULL, NULL);
}

static int file_exists(const char *dir, const char *file)
{
	char path[PATH_MAX];
	struct stat sb;
	snprintf(path, sizeof path, "%s/%s", dir, file);
	return stat(path, &sb) == 0;
}

/* Lock files in `dir`. */
static int lock_files(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d))
		n += strstr(e->d_name, ".lock") != NULL && e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

/* Acquire and release `name` once; its token. */
static uint64_t once(dlock_client *c, const char *name)
{
	dlock_lock *l = dlock_test_new_lock(c, name);
	uint64_t token = 0;
	CU_ASSERT_EQUAL(gc_try(l, 0), DLOCK_OK);
	token = dlock_test_token(l);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	return token;
}

static void test_removes_unused_keeps_held(void)
{
	char *dir = dlock_test_mkdtemp();
	dlock_client *c = open_dir(dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	once(c, "free-a");
	once(c, "free-b");
	dlock_lock *m = dlock_test_new_lock(c, "held-mutex");
	dlock_lock *rw = NULL, *sem = NULL;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "held-reader", &rw), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, "held-permit", 2, &sem), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(m, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(rw, 1), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(sem, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(lock_files(dir), 5);

	/* dry run: says what would go, removes nothing */
	struct gc_seen s = { "", 0 };
	size_t count = 99;
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, DLOCK_GC_DRY_RUN, gc_seen_removed, &s, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 2);
	CU_ASSERT_EQUAL(s.calls, 2);
	CU_ASSERT(strstr(s.names, "free-a") && strstr(s.names, "free-b") && !strstr(s.names, "held"));
	CU_ASSERT_EQUAL(lock_files(dir), 5);

	/* the real one: the two free files go, the three held stay and stay held */
	struct gc_seen s2 = { "", 0 };
	CU_ASSERT_EQUAL(dlock_gc(c, "", 0, gc_seen_removed, &s2, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 2);
	CU_ASSERT_STRING_EQUAL(s.names, s2.names);
	CU_ASSERT_EQUAL(lock_files(dir), 3);
	CU_ASSERT(!file_exists(dir, "free-a.lock") && file_exists(dir, "held-mutex.lock"));
	CU_ASSERT(file_exists(dir, ".dlock-floor"));
	CU_ASSERT_EQUAL(dlock_test_probe(c, "held-mutex"), DLOCK_EBUSY);
	CU_ASSERT_EQUAL(dlock_check(m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(rw), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(sem), DLOCK_OK);

	/* released: the next gc takes them, and nothing is left */
	CU_ASSERT_EQUAL(dlock_release(m), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(rw), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(sem), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 3);
	CU_ASSERT_EQUAL(lock_files(dir), 0);
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 0);
	dlock_lock_free(m);
	dlock_lock_free(rw);
	dlock_lock_free(sem);
	dlock_client_close(c);
	dlock_test_rmtree(dir);
	free(dir);
}

static void test_prefix(void)
{
	char *dir = dlock_test_mkdtemp();
	dlock_client *c = open_dir(dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	once(c, "order:1");
	once(c, "order:2");
	once(c, "other");
	once(c, "orde");
	struct gc_seen s = { "", 0 };
	size_t count = 0;
	CU_ASSERT_EQUAL(dlock_gc(c, "order:", 0, gc_seen_removed, &s, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 2);
	CU_ASSERT(strstr(s.names, "order:1") && strstr(s.names, "order:2"));
	CU_ASSERT_EQUAL(lock_files(dir), 2);
	/* what is not a lock file under a lock file's name is left alone, and gc goes on */
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/planted.lock", dir);
	CU_ASSERT_EQUAL(symlink("/etc/passwd", path), 0);
	snprintf(path, sizeof path, "%s/adir.lock", dir);
	CU_ASSERT_EQUAL(mkdir(path, 0700), 0);
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, DLOCK_GC_DRY_RUN, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 2);
	CU_ASSERT_EQUAL(rmdir(path), 0);
	snprintf(path, sizeof path, "%s/planted.lock", dir);
	CU_ASSERT_EQUAL(unlink(path), 0);
	/* a hashed name (too long to keep in a file name) is collected only without a prefix */
	char longname[401];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	once(c, longname);
	CU_ASSERT_EQUAL(dlock_gc(c, "x", 0, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 0);
	struct gc_seen s2 = { "", 0 };
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, gc_seen_removed, &s2, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 3);
	CU_ASSERT(strstr(s2.names, "?") != NULL);
	CU_ASSERT_EQUAL(lock_files(dir), 0);
	dlock_client_close(c);
	dlock_test_rmtree(dir);
	free(dir);
}

/* A removed name's next file starts above the floor: tokens never go back, for writers and readers. */
static void test_tokens_never_go_back(void)
{
	char *dir = dlock_test_mkdtemp();
	dlock_client *c = open_dir(dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	uint64_t t = 0;
	for (int i = 0; i < 5; i++)
		t = once(c, "tok");
	once(c, "low");
	size_t count = 0;
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &count), DLOCK_OK);
	CU_ASSERT_EQUAL(count, 2);
	dlock_lock *rw = NULL;
	CU_ASSERT_EQUAL(dlock_rwlock_new(c, "tok", &rw), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(rw, 1), DLOCK_OK);
	CU_ASSERT(dlock_test_token(rw) >= t); /* a reader: the latest writer's, or the floor */
	CU_ASSERT_EQUAL(dlock_release(rw), DLOCK_OK);
	dlock_lock_free(rw);
	CU_ASSERT(once(c, "tok") > t);
	CU_ASSERT(once(c, "low") > t); /* every new file starts above the floor */
	dlock_lock *sem = NULL;
	CU_ASSERT_EQUAL(dlock_semaphore_new(c, "fresh-sem", 2, &sem), DLOCK_OK);
	CU_ASSERT_EQUAL(gc_try(sem, 0), DLOCK_OK);
	CU_ASSERT(dlock_test_token(sem) > t);
	CU_ASSERT_EQUAL(dlock_release(sem), DLOCK_OK);
	dlock_lock_free(sem);
	dlock_client_close(c);
	dlock_test_rmtree(dir);
	free(dir);
}

static void test_bad_arguments(void)
{
	char *dir = dlock_test_mkdtemp();
	dlock_client *c = open_dir(dir);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	char toolong[DLOCK_NAME_MAX + 2];
	memset(toolong, 'p', sizeof toolong - 1);
	toolong[sizeof toolong - 1] = '\0';
	size_t count = 7;
	CU_ASSERT_EQUAL(dlock_gc(NULL, NULL, 0, NULL, NULL, &count), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(count, 0);
	CU_ASSERT_EQUAL(dlock_gc(c, toolong, 0, NULL, NULL, NULL), DLOCK_EINVAL);
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0x80, NULL, NULL, NULL), DLOCK_EINVAL);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_GC, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 1);
	CU_ASSERT_STRING_EQUAL(dlock_feature_name(DLOCK_FEATURE_GC), "gc");
	dlock_client_close(c);
	dlock_test_rmtree(dir);
	free(dir);
}

/* mem:// keeps a record per name that holds its fencing counter: nothing to collect, and it says so. */
static void test_mem_says_why(void)
{
	dlock_client *c = dlock_test_open("mem://gc-test", NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	int64_t v = -1;
	CU_ASSERT_EQUAL(dlock_client_feature(c, DLOCK_FEATURE_GC, &v), DLOCK_OK);
	CU_ASSERT_EQUAL(v, 0);
	size_t count = 5;
	CU_ASSERT_EQUAL(dlock_gc(c, NULL, 0, NULL, NULL, &count), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(count, 0);
	CU_ASSERT(strstr(dlock_client_errmsg(c), "fencing counter") != NULL);
	dlock_client_close(c);
}

static void test_race(void)
{
	char *dir = dlock_test_mkdtemp();
	char uri[PATH_MAX + 16];
	snprintf(uri, sizeof uri, "file://%s", dir);
	gc_race(uri, "race-");
	dlock_test_rmtree(dir);
	free(dir);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("file_gc", NULL, NULL);
	CU_add_test(s, "removes unused, keeps held", test_removes_unused_keeps_held);
	CU_add_test(s, "name prefix", test_prefix);
	CU_add_test(s, "tokens never go back", test_tokens_never_go_back);
	CU_add_test(s, "bad arguments", test_bad_arguments);
	CU_add_test(s, "mem says why", test_mem_says_why);
	CU_add_test(s, "race with holders", test_race);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
