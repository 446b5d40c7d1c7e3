/*
 * file:// inspection: the writer's owner block (with and without a
 * token), readers counted from the kernel's lock table, permits by slot,
 * a torn or stale owner block shown as an unknown owner, a holder that
 * wrote no block (an older library: a bare OFD lock), listing with names
 * recovered from the file names (a hashed long name without its name),
 * and breaking refused.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testsupport.h"

static char *dir;

static dlock_client *open_as(const char *identity)
{
	char uri[1024];
	snprintf(uri, sizeof uri, "file://%s%s%s", dir, identity ? "?identity=" : "", identity ? identity : "");
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	return c;
}

static dlock_status acquire_opts(dlock_lock *l, dlock_lock_mode mode, int fencing)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.mode = mode;
	o.fence = dlock_test_switch(fencing);
	return dlock_acquire(l, &o);
}

static void test_writer_owner(void)
{
	dlock_client *c = open_as("writer-1"), *v = open_as(NULL);
	int64_t flags = 0;
	CU_ASSERT_EQUAL(dlock_client_feature(v, DLOCK_FEATURE_INSPECT, &flags), DLOCK_OK);
	CU_ASSERT_EQUAL(flags, DLOCK_INSPECT_HELD | DLOCK_INSPECT_LIST | DLOCK_INSPECT_NAMES);
	dlock_lock *l = dlock_test_new_lock(c, "w");
	for (int fencing = 1; fencing >= 0; fencing--) {
		CU_ASSERT_EQUAL_FATAL(acquire_opts(l, DLOCK_MODE_EXCLUSIVE, fencing), DLOCK_OK);
		dlock_lock_info *info = dlock_test_inspect(v, "w");
		CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_MUTEX);
		CU_ASSERT_FATAL(info->nholders == 1);
		const dlock_holder *h = info->holders[0];
		CU_ASSERT_STRING_EQUAL(h->identity, "writer-1");
		CU_ASSERT_EQUAL(h->pid, getpid());
		CU_ASSERT(h->acquired_ms > 0);
		CU_ASSERT_EQUAL(h->lease_left_ms, -1);
		CU_ASSERT_EQUAL(h->token, fencing ? dlock_test_token(l) : 0);
		CU_ASSERT_PTR_NOT_NULL(strstr(info->resource, "/w.lock"));
		dlock_lock_info_free(info);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	dlock_lock_info *info = dlock_test_inspect(v, "w");
	CU_ASSERT_EQUAL(info->nholders, 0);
	dlock_lock_info_free(info);
	size_t broken = 5;
	CU_ASSERT_EQUAL(dlock_break(v, "w", &broken), DLOCK_ENOTSUP);
	CU_ASSERT_EQUAL(broken, 0);
	dlock_lock_free(l);
	dlock_client_close(v);
	dlock_client_close(c);
}

/* Two readers (their token: the latest writer's), a writer of a read-write lock (kind kept in its block). */
static void test_readers_and_writer(void)
{
	dlock_client *a = open_as("ra"), *b = open_as("rb"), *v = open_as(NULL);
	dlock_lock *la = NULL, *lb = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(a, "rw", &la), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(dlock_rwlock_new(b, "rw", &lb), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire_opts(la, DLOCK_MODE_EXCLUSIVE, 1), DLOCK_OK);
	uint64_t wtoken = dlock_test_token(la);
	dlock_lock_info *info = dlock_test_inspect(v, "rw");
	CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
	CU_ASSERT(info->nholders == 1 && strcmp(info->holders[0]->identity, "ra") == 0);
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire_opts(la, DLOCK_MODE_SHARED, 1), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(acquire_opts(lb, DLOCK_MODE_SHARED, 1), DLOCK_OK);
	info = dlock_test_inspect(v, "rw");
	CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_RWLOCK);
	CU_ASSERT_EQUAL_FATAL(info->nholders, 2);
	for (size_t i = 0; i < 2; i++) {
		CU_ASSERT_EQUAL(info->holders[i]->mode, DLOCK_MODE_SHARED);
		CU_ASSERT_STRING_EQUAL(info->holders[i]->identity, "");
		CU_ASSERT_EQUAL(info->holders[i]->token, wtoken);
	}
	dlock_lock_info_free(info);
	dlock_release(la);
	dlock_release(lb);
	dlock_lock_free(la);
	dlock_lock_free(lb);
	dlock_client_close(v);
	dlock_client_close(b);
	dlock_client_close(a);
}

static void test_permits(void)
{
	dlock_client *c = open_as(NULL);
	dlock_lock *p[3];
	for (int i = 0; i < 3; i++) {
		CU_ASSERT_EQUAL_FATAL(dlock_semaphore_new(c, "sem", 5, &p[i]), DLOCK_OK);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(p[i], 0, 0, -1, NULL, NULL), DLOCK_OK);
	}
	dlock_lock_info *info = dlock_test_inspect(c, "sem");
	CU_ASSERT_EQUAL(info->kind, DLOCK_KIND_SEMAPHORE);
	CU_ASSERT_EQUAL(info->permits, 5);
	CU_ASSERT_EQUAL_FATAL(info->nholders, 3);
	int seen = 0;
	for (size_t i = 0; i < 3; i++)
		seen |= 1 << info->holders[i]->slot;
	for (int i = 0; i < 3; i++) {
		uint32_t slot = 9;
		CU_ASSERT_EQUAL(dlock_lock_permit_slot(p[i], &slot), DLOCK_OK);
		CU_ASSERT(seen & (1 << slot));
	}
	dlock_lock_info_free(info);
	for (int i = 0; i < 3; i++) {
		dlock_release(p[i]);
		dlock_lock_free(p[i]);
	}
	dlock_client_close(c);
}

/* A torn owner block, and a holder that writes none (a bare OFD lock over an earlier holder's block). */
static void test_torn_and_old_holder(void)
{
	dlock_client *c = open_as("first"), *v = open_as(NULL);
	dlock_lock *l = dlock_test_new_lock(c, "old");
	CU_ASSERT_EQUAL_FATAL(acquire_opts(l, DLOCK_MODE_EXCLUSIVE, 1), DLOCK_OK);
	char path[1024];
	snprintf(path, sizeof path, "%s/old.lock", dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL(pwrite(fd, "X", 1, 40), 1); /* inside the record: the check fails */
	dlock_lock_info *info = dlock_test_inspect(v, "old");
	CU_ASSERT(info->nholders == 1 && strcmp(info->holders[0]->identity, "") == 0 && info->holders[0]->pid == 0);
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	/* A valid block again, then an older library: it bumps the token and writes no block. */
	CU_ASSERT_EQUAL_FATAL(acquire_opts(l, DLOCK_MODE_EXCLUSIVE, 1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	CU_ASSERT_EQUAL_FATAL(fcntl(fd, F_OFD_SETLK, &fl), 0);
	unsigned char tok[8] = { 0xff, 0xff, 0, 0, 0, 0, 0, 0 };
	CU_ASSERT_EQUAL(pwrite(fd, tok, 8, 0), 8);
	info = dlock_test_inspect(v, "old");
	CU_ASSERT(info->nholders == 1 && strcmp(info->holders[0]->identity, "") == 0 && info->holders[0]->token == 0);
	dlock_lock_info_free(info);
	CU_ASSERT_EQUAL(dlock_test_probe(v, "old"), DLOCK_EBUSY);
	close(fd);
	/* The new library goes on from the old one's token. */
	CU_ASSERT_EQUAL_FATAL(acquire_opts(l, DLOCK_MODE_EXCLUSIVE, 1), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_token(l), 0xffff + 1);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(v);
	dlock_client_close(c);
}

/* Names come back from the file names; a hashed long name is listed without one, under "" only. */
static void test_list_names(void)
{
	dlock_client *c = open_as("lister"), *v = open_as(NULL);
	char longname[600];
	memset(longname, 'L', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	const char *names[] = { "list/a b", "list/%41\xff", longname };
	dlock_lock *l[3];
	for (int i = 0; i < 3; i++) {
		l[i] = dlock_test_new_lock(c, names[i]);
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l[i], 0, 0, -1, NULL, NULL), DLOCK_OK);
	}
	/* A file that is no lock file of ours, and one with a bad escape: ignored. */
	char path[1024];
	snprintf(path, sizeof path, "%s/%%zz.lock", dir);
	FILE *f = fopen(path, "w");
	if (f)
		fclose(f);
	dlock_lock_list *list = NULL;
	CU_ASSERT_EQUAL_FATAL(dlock_list(v, "list/", &list), DLOCK_OK);
	CU_ASSERT_EQUAL_FATAL(list->count, 2);
	CU_ASSERT_STRING_EQUAL(list->items[0]->name, "list/%41\xff");
	CU_ASSERT_STRING_EQUAL(list->items[1]->name, "list/a b");
	CU_ASSERT_STRING_EQUAL(list->items[1]->holders[0]->identity, "lister");
	dlock_lock_list_free(list);
	CU_ASSERT_EQUAL_FATAL(dlock_list(v, "", &list), DLOCK_OK);
	size_t unnamed = 0;
	for (size_t i = 0; i < list->count; i++)
		unnamed += list->items[i]->name == NULL && list->items[i]->nholders == 1;
	CU_ASSERT_EQUAL(unnamed, 1);
	CU_ASSERT_PTR_NULL(list->items[list->count - 1]->name);
	dlock_lock_list_free(list);
	for (int i = 0; i < 3; i++) {
		dlock_release(l[i]);
		dlock_lock_free(l[i]);
	}
	dlock_client_close(v);
	dlock_client_close(c);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("file inspect", NULL, NULL);
	CU_add_test(s, "the writer's owner, with and without a token", test_writer_owner);
	CU_add_test(s, "readers counted, a read-write writer", test_readers_and_writer);
	CU_add_test(s, "permits by slot", test_permits);
	CU_add_test(s, "a torn block and an older library's holder", test_torn_and_old_holder);
	CU_add_test(s, "names from the file names", test_list_names);
}

int main(void)
{
	dir = dlock_test_mkdtemp();
	int rc = dlock_test_main(add_suites);
	dlock_test_rmtree(dir);
	free(dir);
	return rc;
}
