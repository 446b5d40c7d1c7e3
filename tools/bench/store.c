/*
 * The storage that the faults scenario protects: a counter in a file that
 * every worker process shares, outside the lock service.  Each operation
 * takes an OFD lock on the file for its own duration only (that is the
 * storage's own atomicity, not the lock under test).  A write carries the
 * writer's fencing token; the store keeps the highest token it has seen
 * and refuses a lower one, as Kleppmann's fencing scheme asks of storage.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "bench.h"

struct record {
	uint64_t counter, highest, accepted, rejected, lost_updates;
};

static int lock_file(int fd, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
	while (fcntl(fd, F_OFD_SETLKW, &fl) != 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

/* Open and lock the store; the record read into *r.  The descriptor, or -1. */
static int store_open(const char *path, struct record *r)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (lock_file(fd, F_WRLCK) != 0 || pread(fd, r, sizeof *r, 0) != (ssize_t)sizeof *r) {
		close(fd);
		return -1;
	}
	return fd;
}

static int store_close(int fd, const struct record *r)
{
	int rc = r && pwrite(fd, r, sizeof *r, 0) != (ssize_t)sizeof *r ? -1 : 0;
	close(fd); /* drops the OFD lock */
	return rc;
}

int bench_store_create(const char *path)
{
	struct record r = { 0 };
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	return store_close(fd, &r);
}

int bench_store_read(const char *path, uint64_t *value)
{
	struct record r;
	int fd = store_open(path, &r);
	if (fd < 0)
		return -1;
	*value = r.counter;
	return store_close(fd, NULL);
}

/*
 * A write of `value` that is not counter + 1 means another writer got in
 * between this writer's read and its write: a lost update, the harm that
 * overlapping critical sections do when fencing does not stop them.
 */
enum bench_write bench_store_write(const char *path, uint64_t value, uint64_t token, int fenced)
{
	struct record r;
	int fd = store_open(path, &r);
	if (fd < 0)
		return BENCH_WRITE_ERROR;
	enum bench_write res = BENCH_WRITE_OK;
	if (fenced && token < r.highest) {
		r.rejected++;
		res = BENCH_WRITE_STALE;
	} else {
		if (value != r.counter + 1)
			r.lost_updates++;
		r.counter = value;
		r.accepted++;
		if (fenced)
			r.highest = token;
	}
	return store_close(fd, &r) == 0 ? res : BENCH_WRITE_ERROR;
}

int bench_store_totals(const char *path, struct bench_store_totals *t)
{
	struct record r;
	int fd = store_open(path, &r);
	if (fd < 0)
		return -1;
	*t = (struct bench_store_totals){ .accepted = r.accepted, .rejected = r.rejected,
		                          .lost_updates = r.lost_updates, .counter = r.counter,
		                          .highest = r.highest };
	return store_close(fd, NULL);
}
