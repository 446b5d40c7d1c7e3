/*
 * file:// — open file description (OFD) locks on one host.
 *
 * file:///ABSOLUTE/DIR: one lock file per name, DIR/<component>.lock, where
 * the component is dlock_name_component(name): every name maps to its own
 * valid file name inside DIR, whatever bytes it holds.  DIR is created on
 * demand.
 *
 * The lock is an F_OFD_SETLK write lock on the whole file.  OFD locks
 * belong to the open file description, not to the process, so two handles
 * of one process exclude each other like two processes do, and the kernel
 * drops the lock when the holder dies.  DIR must be on a local file system
 * (on NFS the kernel may lose a lock while the descriptor stays open).
 *
 * Lock files are NEVER unlinked.  Unlinking on release races with a
 * contender that has already opened the old file: it locks the unlinked
 * inode while a third process creates and locks a new file under the same
 * name, and both believe they hold the lock.  Keeping the file also keeps
 * the fencing token, which lives in it.
 *
 * Descriptor lifetime: a handle keeps its descriptor open only while it
 * acquires or holds the lock, and closes it on release or failure.  Idle
 * handles then cost no descriptor, and nothing of a failed attempt stays.
 *
 * Fencing: the token is 8 bytes little-endian at offset 0, bumped while the
 * lock is held and made durable with fdatasync() before acquire returns
 * (and the directory entries with fsync() when they are new), so the token
 * never goes back, even across a crash of the host: the class is STRICT.
 * The sync costs about 0.3 ms per acquire+release on ext4 (5 us without);
 * an acquisition that asks for no token skips the bump and the sync.
 *
 * Read-write locks: a reader takes F_RDLCK and a writer (or a mutex)
 * F_WRLCK on the same whole file, so the kernel lets readers overlap and
 * keeps a writer alone; mutexes and read-write locks are one kind here (a
 * mutex is a read-write lock that only writes), and mixing them on a name
 * is safe.  fcntl locks give waiters no order, and a non-blocking attempt
 * has no place in any queue: whoever tries while the lock is compatible
 * gets it, so readers that keep overlapping can starve a writer (policy
 * NO_PREFERENCE).  A reader reads the token under its read lock, without
 * bumping it: the latest writer's, 0 before any writer.
 *
 * Semaphores of N permits: byte ranges in the same lock file, far above
 * the token (locks past the end of a file are allowed and never grow it):
 *   - slot i (0..N-1) is an F_WRLCK on the byte SEM_SLOT_BASE + i; a permit
 *     holds one slot, so permits never conflict with each other, while a
 *     mutex or read-write lock (the whole file) excludes them and is
 *     excluded by them: the kinds exclude each other, mixing them on a
 *     name is safe, and nothing is refused (kind_checked 0, as for
 *     read-write locks);
 *   - N in use: a holder, and a contender during its attempt, holds an
 *     F_RDLCK on the byte SEM_MARK_BASE + N.  After taking its own, an
 *     attempt asks (F_OFD_GETLK F_WRLCK) for a lock on the marker bytes
 *     of every other N: one there is a semaphore of another N in use, and
 *     the attempt fails with DLOCK_EKIND naming both numbers.  Of two
 *     racing contenders with different N, the later one sees the earlier's
 *     marker, so permits of two Ns never coexist.  Waiters hold no marker
 *     between their attempts (a failed attempt leaves nothing), so N is
 *     compared with the holders' and with the attempts in flight;
 *   - an attempt tries the N slots once, from a random one (to spread
 *     contenders), and the first it locks is its permit (UNORDERED: no
 *     queue; the core's loop polls, as for the other kinds).  Every handle
 *     has its own open file description, so two handles of one client
 *     hold two different slots, like two processes.  An attempt costs up
 *     to N + 3 fcntl() calls, each linear in the locks on the file: about
 *     5 us with a permit free, 40 us at N = 64 with every permit held,
 *     4 ms at N = 1000 (the core's polls are at most 50 ms apart).
 * A permit's token is the name's counter at offset 0, bumped with bytes
 * [0, 8) locked: only other permit holders can hold those bytes (a mutex
 * or read-write lock cannot coexist with a held slot), and only for the
 * read-modify-write and fdatasync, so the wait is short; it is tried
 * without blocking, with short pauses, and ends on cancellation
 * (sem_bump_token()).  The token is strictly greater than
 * every earlier token of the name, mutexes' included (STRICT), so it is
 * increasing per (name, slot) too.  Release unlocks the whole file (slot
 * and marker) and closes the descriptor; a holder that dies frees its
 * permit with it.
 *
 * Lease: the lock lives as long as the descriptor (SESSION); lease_ms does
 * not apply and is ignored, and there is no extend().  OFD locks have no
 * timed wait, so each try_acquire() makes one attempt and the core's
 * waiting loop polls with its backoff.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dlock/sys/driver.h"

#define FILE_SUFFIX ".lock"

/* The token's bytes, and a semaphore's, in the lock file (see the top of the file). */
#define TOKEN_LEN 8                                                  /* the token: bytes [0, 8) */
#define TOKEN_WAIT_LATE_NS (100 * 1000000LL) /* how long past its deadline a permit waits for the token bytes */
#define SEM_SLOT_BASE ((off_t)1 << 30)                               /* slot i: SEM_SLOT_BASE + i */
#define SEM_MARK_BASE (SEM_SLOT_BASE + 2 * (off_t)DLOCK_PERMITS_MAX) /* N in use: SEM_MARK_BASE + N */

struct file_client {
	char *dir; /* absolute, without trailing '/' (except "/" itself) */
	dlock_host *host;
};

struct file_lock {
	char *path; /* DIR/<component>.lock */
	int fd;     /* open and locked while held; -1 otherwise */
	short type; /* F_RDLCK or F_WRLCK while held */
	uint32_t permits; /* a semaphore's N; 0 for a mutex or read-write lock */
	uint32_t slot;    /* a semaphore's slot while held */
};

/* --------------------------------------------------------------- errors */

static dlock_status errno_status(int e)
{
	return (e == EACCES || e == EPERM) ? DLOCK_EPERM : DLOCK_EIO;
}

/* Fail with the text of errno `e`: "<what> <path>: <strerror>". */
static dlock_status fail_errno(dlock_error *err, int e, const char *what, const char *path)
{
	char buf[128];
	/* GNU strerror_r (we build with _GNU_SOURCE): returns the text, maybe not in buf. */
	const char *text = strerror_r(e, buf, sizeof buf);
	return dlock_error_set(err, errno_status(e), "file://: %s %s: %s", what, path, text);
}

/* ------------------------------------------------------------ directory */

/*
 * The status for a lock directory that cannot be set up: missing and not
 * creatable, no directory, or refused by the file system (read-only,
 * "operation not permitted") is the URI's problem, DLOCK_ENOTFOUND; a
 * permission denied stays DLOCK_EPERM and a real I/O error DLOCK_EIO.
 */
static dlock_status dir_fail(dlock_error *err, int e, const char *what, const char *path)
{
	dlock_status st = fail_errno(err, e, what, path);
	switch (e) {
	case ENOENT:
	case ENOTDIR:
	case ELOOP:
	case ENAMETOOLONG:
	case EROFS:
	case EPERM:
		return DLOCK_ENOTFOUND;
	default:
		return st;
	}
}

/* Make a new directory entry durable: fsync the directory that holds it. */
static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

/* Create `buf` (a writable copy of the path) and its parents, as mkdir -p. */
static dlock_status make_path(char *buf, dlock_error *err)
{
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(buf, 0700) == 0) {
			char *slash = strrchr(buf, '/');
			*slash = '\0';
			int rc = sync_dir(slash == buf ? "/" : buf);
			*slash = '/';
			if (rc != 0)
				return fail_errno(err, errno, "cannot sync the directory above", buf);
		} else if (errno != EEXIST) {
			return dir_fail(err, errno, "cannot create directory", buf);
		}
		*p = c;
		if (c == '\0')
			return DLOCK_OK;
	}
}

/*
 * mkdir -p DIR.  Directories we create are 0700: the lock files are private
 * to the user unless the directory was prepared otherwise beforehand.  Each
 * new entry is synced into its parent, since losing DIR in a crash would
 * lose the fencing tokens with it.
 */
static dlock_status make_dirs(const char *dir, dlock_error *err)
{
	struct stat sb;
	char *buf = strdup(dir);
	if (!buf)
		return dlock_error_set(err, DLOCK_ENOMEM, "file://: out of memory");
	dlock_status st = make_path(buf, err);
	free(buf);
	if (st != DLOCK_OK)
		return st;
	if (stat(dir, &sb) != 0)
		return dir_fail(err, errno, "cannot use directory", dir);
	if (!S_ISDIR(sb.st_mode))
		return dir_fail(err, ENOTDIR, "cannot use directory", dir);
	return DLOCK_OK;
}

/* ---------------------------------------------------------------- locks */

/* fcntl(cmd) on the bytes [start, start + len) of `fd` (len 0: to the end, and beyond). */
static int ofd_range(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	int rc;
	do
		rc = fcntl(fd, cmd, &fl);
	while (rc != 0 && errno == EINTR && cmd == F_OFD_SETLKW);
	return rc;
}

/* The whole file: the lock of a mutex or read-write lock, and the release of every kind. */
static int ofd_lock(int fd, short type)
{
	return ofd_range(fd, F_OFD_SETLK, type, 0, 0);
}

/* Open the lock file, creating it (and DIR, if it went away) as needed.  -1: failure in err. */
static int open_lock_file(struct file_client *c, struct file_lock *lk, dlock_status *st, dlock_error *err)
{
	/* O_NOFOLLOW: a symlink planted in DIR must not make us lock (and write) another file. */
	int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
	int fd = open(lk->path, flags, 0644);
	if (fd < 0 && errno == ENOENT) {
		*st = make_dirs(c->dir, err);
		if (*st != DLOCK_OK)
			return -1;
		fd = open(lk->path, flags, 0644);
	}
	if (fd < 0)
		*st = fail_errno(err, errno, "cannot open lock file", lk->path);
	return fd;
}

/* The token stored in the locked file `fd` (0 when none was written yet). */
static dlock_status read_token(int fd, const char *path, uint64_t *token, dlock_error *err)
{
	unsigned char b[8];
	uint64_t t = 0;
	ssize_t n = pread(fd, b, sizeof b, 0);
	if (n < 0)
		return fail_errno(err, errno, "cannot read the fencing token of", path);
	if (n != 0 && n != (ssize_t)sizeof b)
		return dlock_error_set(err, DLOCK_EIO, "file://: %s holds a truncated fencing token", path);
	for (int i = 7; n != 0 && i >= 0; i--)
		t = t << 8 | b[i];
	*token = t;
	return DLOCK_OK;
}

/*
 * Bump the token of the locked file `fd` and make it durable.  A file with
 * no token yet is new: its directory entry is synced too, or a crash could
 * take the file, and the token, away.
 */
static dlock_status bump_token(struct file_client *c, int fd, const char *path, uint64_t *token,
                               dlock_error *err)
{
	unsigned char b[8];
	uint64_t t = 0;
	dlock_status st = read_token(fd, path, &t, err);
	if (st != DLOCK_OK)
		return st;
	if (t == UINT64_MAX)
		return dlock_error_set(err, DLOCK_EIO, "file://: the fencing token of %s is exhausted", path);
	uint64_t next = t + 1;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(next >> (8 * i));
	ssize_t n = pwrite(fd, b, sizeof b, 0);
	if (n != (ssize_t)sizeof b)
		return fail_errno(err, n < 0 ? errno : EIO, "cannot write the fencing token of", path);
	if (fdatasync(fd) != 0)
		return fail_errno(err, errno, "cannot sync the fencing token of", path);
	if (t == 0 && sync_dir(c->dir) != 0)
		return fail_errno(err, errno, "cannot sync directory", c->dir);
	*token = next;
	return DLOCK_OK;
}

/* What a failed F_OFD_SETLK on `lk` means: DLOCK_EBUSY when another owner holds a conflicting lock. */
static dlock_status lock_failed(struct file_lock *lk, int e, dlock_error *err)
{
	if (e != EAGAIN && e != EACCES)
		return fail_errno(err, e, "cannot lock", lk->path);
	return dlock_error_set(err, DLOCK_EBUSY, "file://: %s is locked by another owner", lk->path);
}

/* One try at the OFD lock of `type` on `fd`: DLOCK_OK, DLOCK_EBUSY, or an error. */
static dlock_status lock_fd(struct file_lock *lk, int fd, short type, int64_t *sent_ns, dlock_error *err)
{
	*sent_ns = dlock_monotonic_ns();
	if (ofd_lock(fd, type) == 0)
		return DLOCK_OK;
	return lock_failed(lk, errno, err);
}

/* ----------------------------------------------------------- semaphores */

/*
 * After taking our own marker: DLOCK_OK when no semaphore of another N is
 * in use on the name, DLOCK_EKIND naming both numbers when one is, and
 * DLOCK_EBUSY when a lock of another kind covers the markers (a reader's
 * F_RDLCK on the whole file, which our F_RDLCK did not conflict with).
 */
static dlock_status sem_check_permits(struct file_lock *lk, int fd, dlock_error *err)
{
	const off_t n = lk->permits;
	/* Below our marker and above it, up to the highest N. */
	const off_t from[2] = { SEM_MARK_BASE + 1, SEM_MARK_BASE + n + 1 };
	const off_t len[2] = { n - 1, (off_t)DLOCK_PERMITS_MAX - n };
	for (int i = 0; i < 2; i++) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = from[i], .l_len = len[i] };
		if (len[i] == 0)
			continue;
		if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
			return fail_errno(err, errno, "cannot query the locks on", lk->path);
		if (fl.l_type == F_UNLCK)
			continue;
		if (fl.l_len == 1 && fl.l_start > SEM_MARK_BASE && fl.l_start <= SEM_MARK_BASE + DLOCK_PERMITS_MAX)
			return dlock_error_set(err, DLOCK_EKIND,
			                       "file://: %s is in use as a semaphore of %lld permits, not %lu",
			                       lk->path, (long long)(fl.l_start - SEM_MARK_BASE),
			                       (unsigned long)lk->permits);
		return dlock_error_set(err, DLOCK_EBUSY, "file://: %s is locked by another owner", lk->path);
	}
	return DLOCK_OK;
}

/* A random slot to start from, so that contenders spread over the slots. */
static uint32_t sem_first_slot(const struct file_lock *lk)
{
	/* splitmix64's finalizer over the clock, the process and the handle */
	uint64_t x = (uint64_t)dlock_monotonic_ns() ^ (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)lk;
	x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9u;
	x = (x ^ x >> 27) * 0x94d049bb133111ebu;
	x ^= x >> 31;
	return (uint32_t)(x % lk->permits);
}

/* Lock the first free slot, trying each once: DLOCK_OK with *slot, DLOCK_EBUSY when all N are held. */
static dlock_status sem_take_slot(struct file_lock *lk, int fd, uint32_t *slot, dlock_error *err)
{
	const uint32_t n = lk->permits;
	const uint32_t first = sem_first_slot(lk);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = (first + k) % n;
		if (ofd_range(fd, F_OFD_SETLK, F_WRLCK, SEM_SLOT_BASE + (off_t)i, 1) == 0) {
			*slot = i;
			return DLOCK_OK;
		}
		if (errno != EAGAIN && errno != EACCES)
			return fail_errno(err, errno, "cannot lock", lk->path);
	}
	return dlock_error_set(err, DLOCK_EBUSY, "file://: the %lu permits of %s are held", (unsigned long)n,
	                       lk->path);
}

/*
 * Bump the name's token while holding a slot, with bytes [0, 8) locked.  Another permit holder keeps
 * those bytes only for its own bump (read, write, fdatasync: well under a millisecond), so the lock
 * is tried without blocking and again after a short pause, doubling from 20 us to 2 ms: a blocking
 * F_OFD_SETLKW could not be cancelled, nor bounded if that holder were stopped half way (and under
 * valgrind, which does not know the OFD command blocks, it would stall every thread of the process).
 * Cancellation ends the wait; past the acquisition's deadline (at once for try-once), 100 ms more.
 */
static dlock_status sem_bump_token(struct file_client *c, struct file_lock *lk, int fd, dlock_wait *w,
                                   uint64_t *token, dlock_error *err)
{
	int64_t pause_ns = 20000, late_ns = 0;
	while (ofd_range(fd, F_OFD_SETLK, F_WRLCK, 0, TOKEN_LEN) != 0) {
		if (errno != EAGAIN && errno != EACCES)
			return fail_errno(err, errno, "cannot lock the fencing token of", lk->path);
		if (dlock_wait_cancelled(w) != DLOCK_OK)
			return dlock_error_set(err, DLOCK_ECANCELED, "file://: acquire cancelled");
		if (dlock_wait_remaining_ms(w) == 0 && (late_ns += pause_ns) > TOKEN_WAIT_LATE_NS)
			return dlock_error_set(err, DLOCK_EBUSY, "file://: the fencing token of %s stayed locked",
			                       lk->path);
		nanosleep(&(struct timespec){ .tv_sec = 0, .tv_nsec = pause_ns }, NULL);
		if (pause_ns < 2000000)
			pause_ns *= 2;
	}
	dlock_status st = bump_token(c, fd, lk->path, token, err);
	if (ofd_range(fd, F_OFD_SETLK, F_UNLCK, 0, TOKEN_LEN) != 0 && st == DLOCK_OK)
		st = fail_errno(err, errno, "cannot unlock the fencing token of", lk->path);
	return st;
}

/*
 * One attempt at a permit: our marker, the others' checked, a slot, and
 * the token when one is wanted.  Returns the descriptor in *fdp (-1 when
 * not opened); on failure the caller unlocks and closes it.
 */
static dlock_status sem_attempt(struct file_client *c, struct file_lock *lk, dlock_wait *w, int *fdp,
                                dlock_acquired *out, dlock_error *err)
{
	dlock_status st = DLOCK_OK;
	uint32_t slot = 0;
	uint64_t token = 0;
	int64_t sent_ns = dlock_monotonic_ns();
	int fd = *fdp = open_lock_file(c, lk, &st, err);
	if (fd < 0)
		return st;
	/* Ours first, then the others': of two contenders with different N, the later sees the earlier. */
	if (ofd_range(fd, F_OFD_SETLK, F_RDLCK, SEM_MARK_BASE + (off_t)lk->permits, 1) != 0)
		return lock_failed(lk, errno, err); /* a mutex or writer holds the whole file */
	st = sem_check_permits(lk, fd, err);
	if (st == DLOCK_OK)
		st = sem_take_slot(lk, fd, &slot, err);
	if (st == DLOCK_OK && dlock_wait_wants_token(w))
		st = sem_bump_token(c, lk, fd, w, &token, err);
	if (st == DLOCK_OK)
		*out = (dlock_acquired){ .token = token, .sent_ns = sent_ns, .slot = slot };
	return st;
}

/* ------------------------------------------------------------ the driver */

static dlock_status file_check_uri(const dlock_uri *uri, dlock_error *err)
{
	/* file://relative/dir parses as host "relative": say what to write instead. */
	if (uri->nhosts == 1 && uri->hosts[0].host[0] != '\0')
		return dlock_error_set(err, DLOCK_EURI,
		                       "file:// takes no host ('%s' here): write file:///ABSOLUTE/DIR "
		                       "(three slashes), not %s",
		                       uri->hosts[0].host, uri->masked);
	if (uri->nhosts != 1 || uri->hosts[0].port != 0)
		return dlock_error_set(err, DLOCK_EURI, "file:// takes no port or host list: %s", uri->masked);
	if (uri->user || uri->password)
		return dlock_error_set(err, DLOCK_EURI, "file:// takes no user or password: %s", uri->masked);
	if (uri->path[0] != '/')
		return dlock_error_set(err, DLOCK_EURI, "file:// needs an absolute directory (file:///DIR): %s",
		                       uri->masked);
	if (uri->nparams != 0)
		return dlock_error_set(err, DLOCK_EURI, "file:// has no parameter '%s': %s", uri->params[0].key,
		                       uri->masked);
	/* Honouring it would rename the lock files, and two dlock versions on one
	 * host would then lock different files for the same name. */
	if (uri->prefix_given)
		return dlock_error_set(err, DLOCK_EURI,
		                       "file:// takes no 'prefix': lock files are named after the lock name "
		                       "alone (use another directory to separate applications): %s",
		                       uri->masked);
	if (strlen(uri->path) + 1 + DLOCK_COMPONENT_MAX + sizeof FILE_SUFFIX > PATH_MAX)
		return dlock_error_set(err, DLOCK_EURI, "file://: the directory path is too long: %s",
		                       uri->masked);
	return DLOCK_OK;
}

static dlock_status file_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	struct file_client *c = NULL;
	dlock_status st = file_check_uri(uri, err);
	if (st != DLOCK_OK)
		return st;
	c = calloc(1, sizeof *c);
	if (!c || !(c->dir = strdup(uri->path))) {
		st = dlock_error_set(err, DLOCK_ENOMEM, "file://: out of memory");
		goto fail;
	}
	for (size_t n = strlen(c->dir); n > 1 && c->dir[n - 1] == '/'; n--)
		c->dir[n - 1] = '\0';
	c->host = host;
	st = make_dirs(c->dir, err);
	if (st != DLOCK_OK)
		goto fail;
	*backend = c;
	return DLOCK_OK;
fail:
	if (c)
		free(c->dir);
	free(c);
	return st;
}

static void file_close(void *backend)
{
	struct file_client *c = backend;
	free(c->dir);
	free(c);
}

static void file_capabilities(void *backend, dlock_capabilities *caps)
{
	(void)backend;
	*caps = (dlock_capabilities){
		.backend = "file",
		.consistency = DLOCK_CONSISTENCY_LOCAL,
		.fencing = DLOCK_FENCING_STRICT,
		.fencing_note = "",
		.fair = 0,
		.lease = DLOCK_LEASE_SESSION,
		.wakeup = DLOCK_WAKEUP_POLL,
		.scope = DLOCK_SCOPE_HOST,
	};
}

/* Mutexes and read-write locks, one kind on this backend (see the top of the file). */
static void file_kind_capabilities(void *backend, dlock_lock_kind kind, dlock_kind_caps *caps)
{
	(void)backend;
	caps->supported = kind == DLOCK_KIND_MUTEX || kind == DLOCK_KIND_RWLOCK || kind == DLOCK_KIND_SEMAPHORE;
	caps->kind_checked = 0;
	if (kind == DLOCK_KIND_RWLOCK) {
		caps->policy = DLOCK_RWLOCK_NO_PREFERENCE;
		caps->read_fencing = DLOCK_FENCING_STRICT;
	}
	if (kind == DLOCK_KIND_SEMAPHORE) {
		caps->order = DLOCK_SEMAPHORE_UNORDERED;
		caps->slots = 1;
		caps->read_fencing = DLOCK_FENCING_STRICT;
		caps->core_waits = 1;
	}
}

static dlock_status file_lock_init(void *backend, void *lkp, const char *name, size_t len,
                                   dlock_error *err)
{
	struct file_client *c = backend;
	struct file_lock *lk = lkp;
	char component[DLOCK_COMPONENT_MAX + 1];
	size_t size = strlen(c->dir) + 1 + DLOCK_COMPONENT_MAX + sizeof FILE_SUFFIX;

	lk->fd = -1;
	lk->permits = 0;
	lk->path = malloc(size);
	if (!lk->path)
		return dlock_error_set(err, DLOCK_ENOMEM, "file://: out of memory");
	dlock_name_component(name, len, component);
	/* "/" + component, except under the root directory, which already ends in '/'. */
	snprintf(lk->path, size, "%s%s%s" FILE_SUFFIX, c->dir, strcmp(c->dir, "/") ? "/" : "", component);
	return DLOCK_OK;
}

/* Every kind locks the same file; a semaphore keeps its N for the byte ranges it locks. */
static dlock_status file_lock_init_kind(void *backend, void *lkp, const char *name, size_t len,
                                        const dlock_kind_spec *spec, dlock_error *err)
{
	struct file_lock *lk = lkp;
	dlock_status st = file_lock_init(backend, lkp, name, len, err);
	if (st == DLOCK_OK && spec->kind == DLOCK_KIND_SEMAPHORE)
		lk->permits = spec->permits;
	return st;
}

static void file_lock_fini(void *backend, void *lkp)
{
	struct file_lock *lk = lkp;
	(void)backend;
	if (lk->fd >= 0)
		close(lk->fd);
	lk->fd = -1;
	free(lk->path);
	lk->path = NULL;
}

/* One attempt: OFD locks have no timed wait, so the core's loop polls (retry left as is: its backoff). */
static dlock_status file_try_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                     dlock_acquired *out, dlock_error *err)
{
	struct file_client *c = backend;
	struct file_lock *lk = lkp;
	dlock_status st = DLOCK_OK;
	int64_t sent_ns = 0;
	uint64_t token = 0;
	short type = dlock_wait_mode(w) == DLOCK_MODE_SHARED ? F_RDLCK : F_WRLCK;

	(void)lease_ms; /* the lock lives with the descriptor: there is no lease */
	(void)retry;
	int fd = -1;
	if (lk->permits != 0) {
		st = sem_attempt(c, lk, w, &fd, out, err);
		if (st != DLOCK_OK)
			goto fail;
		lk->fd = fd;
		lk->type = F_WRLCK;
		lk->slot = out->slot;
		return DLOCK_OK;
	}
	fd = open_lock_file(c, lk, &st, err);
	if (fd < 0)
		goto fail;
	st = lock_fd(lk, fd, type, &sent_ns, err);
	if (st != DLOCK_OK)
		goto fail;
	if (dlock_wait_wants_token(w))
		st = type == F_RDLCK ? read_token(fd, lk->path, &token, err) : bump_token(c, fd, lk->path, &token, err);
	if (st != DLOCK_OK)
		goto fail;
	lk->fd = fd;
	lk->type = type;
	*out = (dlock_acquired){ .token = token, .sent_ns = sent_ns };
	return DLOCK_OK;
fail:
	/* Unlock first, as in release (a no-op when the lock was not taken). */
	if (fd >= 0) {
		ofd_lock(fd, F_UNLCK);
		close(fd);
	}
	return st;
}

/*
 * Unlock explicitly before closing: a child forked while we held the lock
 * shares the open file description, and close() alone would leave the lock
 * held until the child closes it too.
 */
static dlock_status file_release(void *backend, void *lkp, dlock_error *err)
{
	struct file_lock *lk = lkp;
	(void)backend;
	if (lk->fd < 0)
		return dlock_error_set(err, DLOCK_ENOTHELD, "file://: %s is not held by this handle", lk->path);
	int rc = ofd_lock(lk->fd, F_UNLCK);
	int e = errno;
	close(lk->fd);
	lk->fd = -1;
	if (rc != 0)
		return fail_errno(err, e, "cannot unlock", lk->path);
	return DLOCK_OK;
}

/*
 * While our descriptor is open the kernel keeps our lock, so the answer is
 * normally OK.  F_OFD_GETLK still asks: it reports a conflicting lock only
 * if another description holds one, which means ours was lost.
 */
static dlock_status file_check(void *backend, void *lkp, dlock_error *err)
{
	struct file_lock *lk = lkp;
	(void)backend;
	/* a permit: its slot, which no other owner may lock while we hold it */
	struct flock fl = { .l_type = lk->type, .l_whence = SEEK_SET,
		            .l_start = lk->permits ? SEM_SLOT_BASE + (off_t)lk->slot : 0,
		            .l_len = lk->permits ? 1 : 0 };
	if (lk->fd < 0)
		return dlock_error_set(err, DLOCK_ENOTHELD, "file://: %s is not held by this handle", lk->path);
	if (fcntl(lk->fd, F_OFD_GETLK, &fl) != 0)
		return fail_errno(err, errno, "cannot query the lock on", lk->path);
	if (fl.l_type != F_UNLCK)
		return dlock_error_set(err, DLOCK_ENOTHELD, "file://: %s is locked by another owner", lk->path);
	return DLOCK_OK;
}

const dlock_driver dlock_file_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "file",
	.lock_size = sizeof(struct file_lock),
	.open = file_open,
	.close = file_close,
	.capabilities = file_capabilities,
	.knows_param = NULL,
	.lock_init = file_lock_init,
	.lock_fini = file_lock_fini,
	.kind_capabilities = file_kind_capabilities,
	.lock_init_kind = file_lock_init_kind,
	.try_acquire = file_try_acquire,
	.release = file_release,
	.extend = NULL,
	.check = file_check,
};
