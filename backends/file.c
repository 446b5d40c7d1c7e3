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
 * Lock files are never unlinked on release.  Unlinking on release races
 * with a contender that has already opened the old file: it locks the
 * unlinked inode while a third process creates and locks a new file under
 * the same name, and both believe they hold the lock.  Keeping the file
 * also keeps the fencing token, which lives in it.
 *
 * Collection (dlock_gc(), file_gc()) removes the files of unused names
 * all the same, safely: gc takes a file's whole-file lock without waiting
 * (so no holder of any kind, and no attempt in progress, has it), raises
 * the directory's token floor (DIR/.dlock-floor: 8 bytes little-endian,
 * replaced whole by rename, made durable before any unlink) to the file's
 * token, and unlinks the file while still holding its lock.  Every
 * acquirer, once it has locked a file, checks that its descriptor is still
 * the file at the path (open_and_lock(): a link left, which is enough as
 * gc only unlinks): when gc removed it between the open and the lock, the
 * acquirer lets it go and opens the name again.  A file without a token yet starts
 * from the floor, so a name's tokens never go back across a removal.  A
 * try-once acquisition that meets gc's moment on a file answers busy.
 * Collections of one directory take turns (flock on DIR).  A dlock
 * without this check (before collection existed) must not run beside gc
 * on the same directory: it would keep locking the unlinked inode.
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
 * Inspection reads the lock file without locking it (F_OFD_GETLK from a
 * description of its own): a whole-file F_WRLCK is a mutex or writer, a
 * whole-file F_RDLCK readers (GETLK shows one; their number comes from the
 * kernel's table, /proc/locks, else 1), a semaphore's marker gives its N
 * and each locked slot byte one permit.  A mutex or writer writes an owner
 * block after the token: "dlk1", its kind, its record's length, the wall
 * clock, its token, the owner record (dlock_host_owner) and an FNV-1a
 * check, in the token's own write (no extra call), or alone without a
 * token (one pwrite, no sync).  A torn block (read while written) fails the
 * check and is read again, then left unknown; a block whose token is not
 * the file's is an earlier holder's and is ignored.  Readers and permits
 * write none: their owners stay unknown (only HELD is promised), and no
 * waiter is visible (fcntl keeps no queue).  A listing reads DIR: names
 * come back from the file names, except hashed long ones (NULL).  Breaking
 * is not possible: only the holding description can drop an OFD lock.
 *
 * Lease: the lock lives as long as the descriptor (SESSION); lease_ms does
 * not apply and is ignored, and there is no extend().  OFD locks have no
 * timed wait, so each try_acquire() makes one attempt and the core's
 * waiting loop polls with its backoff.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "dlock/sys/driver.h"

#define FILE_SUFFIX ".lock"
#define FLOOR_FILE ".dlock-floor"      /* the directory's token floor, written by gc (see the top of the file) */
#define FLOOR_NEW ".dlock-floor.new"   /* the next floor, renamed over FLOOR_FILE */
#define RELOCK_TRIES 1000              /* attempts at a file that gc keeps removing before EBUSY */
#define GC_BATCH 64                    /* files gc holds at once: one floor write per batch */

/* The token's bytes, and a semaphore's, in the lock file (see the top of the file). */
#define TOKEN_LEN 8                                                  /* the token: bytes [0, 8) */
#define TOKEN_WAIT_LATE_NS (100 * 1000000LL) /* how long past its deadline a permit waits for the token bytes */
#define SEM_SLOT_BASE ((off_t)1 << 30)                               /* slot i: SEM_SLOT_BASE + i */
#define SEM_MARK_BASE (SEM_SLOT_BASE + 2 * (off_t)DLOCK_PERMITS_MAX) /* N in use: SEM_MARK_BASE + N */

/* The exclusive holder's owner block, after the token: "dlk1", kind, record length, acquisition time,
 * token, record, FNV-1a of all that (see "Inspection" at the top of the file). */
#define OWNER_AT TOKEN_LEN
#define OWNER_HEAD 23
#define OWNER_BLOCK_MAX (OWNER_HEAD + DLOCK_OWNER_MAX + 4)

struct file_client {
	char *dir; /* absolute, without trailing '/' (except "/" itself) */
	char *floor; /* DIR/.dlock-floor */
	dlock_host *host;
	const char *owner; /* the client's owner record (dlock_host_owner) */
	size_t owner_len;
};

struct file_lock {
	char *path; /* DIR/<component>.lock */
	int fd;     /* open and locked while held; -1 otherwise */
	short type; /* F_RDLCK or F_WRLCK while held */
	uint32_t permits; /* a semaphore's N; 0 for a mutex or read-write lock */
	uint32_t slot;    /* a semaphore's slot while held */
	dlock_lock_kind kind;
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

/* The directory's token floor (0 when gc never wrote one): where a new lock file's tokens start. */
static dlock_status read_floor(const struct file_client *c, uint64_t *floor, dlock_error *err)
{
	*floor = 0;
	int fd = open(c->floor, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		return DLOCK_OK;
	if (fd < 0)
		return fail_errno(err, errno, "cannot open the token floor", c->floor);
	dlock_status st = read_token(fd, c->floor, floor, err);
	close(fd);
	return st;
}

/* The token of the locked file `fd`: its own, or the floor for a file that has none yet (new, or made
 * again after gc removed it). */
static dlock_status file_token(const struct file_client *c, int fd, const char *path, uint64_t *token,
                               dlock_error *err)
{
	dlock_status st = read_token(fd, path, token, err);
	if (st == DLOCK_OK && *token == 0)
		st = read_floor(c, token, err);
	return st;
}

/* FNV-1a, 32 bits: tells a whole owner block from a torn one. */
static uint32_t fnv32(const unsigned char *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The owner block of an exclusive acquisition of `kind` with `token` (0: none) into `out`; its length. */
static size_t owner_block(const struct file_client *c, dlock_lock_kind kind, uint64_t token, unsigned char *out)
{
	static const unsigned char magic[4] = { 'd', 'l', 'k', '1' };
	memcpy(out, magic, sizeof magic);
	out[4] = (unsigned char)kind;
	put_le(out + 5, c->owner_len, 2);
	put_le(out + 7, (uint64_t)wall_ms(), 8);
	put_le(out + 15, token, 8);
	memcpy(out + OWNER_HEAD, c->owner, c->owner_len);
	put_le(out + OWNER_HEAD + c->owner_len, fnv32(out, OWNER_HEAD + c->owner_len), 4);
	return OWNER_HEAD + c->owner_len + 4;
}

/*
 * Bump the token of the locked file `fd` and make it durable; with
 * `owner`, the owner block goes after the token in the same write.  A
 * file with no token yet is new: its directory entry is synced too, or a
 * crash could take the file, and the token, away.
 */
static dlock_status bump_token_with(struct file_client *c, int fd, const char *path, uint64_t *token,
                                    const struct file_lock *owner, dlock_error *err)
{
	unsigned char b[TOKEN_LEN + OWNER_BLOCK_MAX];
	uint64_t own = 0, t = 0;
	dlock_status st = read_token(fd, path, &own, err);
	t = own;
	if (st == DLOCK_OK && own == 0) /* a new file: its tokens start from the floor */
		st = read_floor(c, &t, err);
	if (st != DLOCK_OK)
		return st;
	if (t == UINT64_MAX)
		return dlock_error_set(err, DLOCK_EIO, "file://: the fencing token of %s is exhausted", path);
	uint64_t next = t + 1;
	put_le(b, next, TOKEN_LEN);
	size_t len = TOKEN_LEN + (owner ? owner_block(c, owner->kind, next, b + TOKEN_LEN) : 0);
	ssize_t n = pwrite(fd, b, len, 0);
	if (n != (ssize_t)len)
		return fail_errno(err, n < 0 ? errno : EIO, "cannot write the fencing token of", path);
	if (fdatasync(fd) != 0)
		return fail_errno(err, errno, "cannot sync the fencing token of", path);
	if (own == 0 && sync_dir(c->dir) != 0)
		return fail_errno(err, errno, "cannot sync directory", c->dir);
	*token = next;
	return DLOCK_OK;
}

static dlock_status bump_token(struct file_client *c, int fd, const char *path, uint64_t *token,
                               dlock_error *err)
{
	return bump_token_with(c, fd, path, token, NULL, err);
}

/* What a failed F_OFD_SETLK on `lk` means: DLOCK_EBUSY when another owner holds a conflicting lock. */
static dlock_status lock_failed(struct file_lock *lk, int e, dlock_error *err)
{
	if (e != EAGAIN && e != EACCES)
		return fail_errno(err, e, "cannot lock", lk->path);
	return dlock_error_set(err, DLOCK_EBUSY, "file://: %s is locked by another owner", lk->path);
}

/*
 * 1: `fd` is still linked; 0: gc removed it; -1: errno.  A link count is
 * enough to tell that `fd` is still the file at its path: gc only ever
 * unlinks a lock file (dlock never renames nor links one), and an
 * unlinked inode stays unlinked.  So an acquirer's check is one statx()
 * that asks for the link count alone (a whole fstat() cost 60 us here,
 * against 10 us, on a 150 us acquisition with a token; a second lookup of
 * the path, lstat(), measurably slowed one without); gc's own check
 * (`by_path`) compares the inode at the path as well.
 */
static int still_linked(int fd, const char *path, int by_path)
{
	struct statx links;
	struct stat mine, there;
	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_NLINK, &links) != 0)
		return -1;
	if (!(links.stx_mask & STATX_NLINK)) { /* a file system that did not say: ask for everything */
		if (fstat(fd, &mine) != 0)
			return -1;
		links.stx_nlink = (uint32_t)mine.st_nlink;
	}
	if (links.stx_nlink == 0)
		return 0;
	if (!by_path)
		return 1;
	if (fstat(fd, &mine) != 0)
		return -1;
	if (lstat(path, &there) != 0)
		return errno == ENOENT ? 0 : -1;
	return mine.st_dev == there.st_dev && mine.st_ino == there.st_ino;
}

/*
 * Open the lock file and take `type` on [start, start + len) without
 * waiting, on the file that is at the path once locked.  gc unlinks a file
 * only while it holds the whole file locked, so a lock we hold keeps the
 * file in place; a file found removed after our lock was collected between
 * our open() and our lock: let it go and open the name again.  *fdp: the
 * descriptor (-1 when none), which the caller unlocks and closes on failure.
 */
static dlock_status open_and_lock(struct file_client *c, struct file_lock *lk, short type, off_t start, off_t len,
                                  int *fdp, dlock_error *err)
{
	for (int tries = 0; tries < RELOCK_TRIES; tries++) {
		dlock_status st = DLOCK_OK;
		int fd = *fdp = open_lock_file(c, lk, &st, err);
		if (fd < 0)
			return st;
		if (ofd_range(fd, F_OFD_SETLK, type, start, len) != 0)
			return lock_failed(lk, errno, err);
		int linked = still_linked(fd, lk->path, 0);
		if (linked > 0)
			return DLOCK_OK;
		if (linked < 0)
			return fail_errno(err, errno, "cannot look at lock file", lk->path);
		ofd_lock(fd, F_UNLCK);
		close(fd);
		*fdp = -1;
	}
	return dlock_error_set(err, DLOCK_EBUSY, "file://: %s kept being removed by gc", lk->path);
}

/* Without a token: the owner block alone after the token bytes (one write, no sync: it is only shown). */
static dlock_status write_owner(struct file_client *c, const struct file_lock *lk, int fd, dlock_error *err)
{
	unsigned char b[OWNER_BLOCK_MAX];
	size_t len = owner_block(c, lk->kind, 0, b);
	ssize_t n = pwrite(fd, b, len, OWNER_AT);
	if (n != (ssize_t)len)
		return fail_errno(err, n < 0 ? errno : EIO, "cannot write the owner of", lk->path);
	return DLOCK_OK;
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
	/* Ours first, then the others': of two contenders with different N, the later sees the earlier.
	 * Busy: a mutex or writer holds the whole file. */
	st = open_and_lock(c, lk, F_RDLCK, SEM_MARK_BASE + (off_t)lk->permits, 1, fdp, err);
	if (st != DLOCK_OK)
		return st;
	int fd = *fdp;
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
	if (asprintf(&c->floor, "%s%s" FLOOR_FILE, c->dir, strcmp(c->dir, "/") ? "/" : "") < 0) {
		c->floor = NULL;
		st = dlock_error_set(err, DLOCK_ENOMEM, "file://: out of memory");
		goto fail;
	}
	c->host = host;
	c->owner = dlock_host_owner(host, &c->owner_len);
	st = make_dirs(c->dir, err);
	if (st != DLOCK_OK)
		goto fail;
	*backend = c;
	return DLOCK_OK;
fail:
	if (c) {
		free(c->dir);
		free(c->floor);
	}
	free(c);
	return st;
}

static void file_close(void *backend)
{
	struct file_client *c = backend;
	free(c->dir);
	free(c->floor);
	free(c);
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
	lk->kind = DLOCK_KIND_MUTEX;
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
	lk->kind = spec->kind;
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
	sent_ns = dlock_monotonic_ns();
	st = open_and_lock(c, lk, type, 0, 0, &fd, err);
	if (st != DLOCK_OK)
		goto fail;
	if (type == F_RDLCK && dlock_wait_wants_token(w))
		st = file_token(c, fd, lk->path, &token, err);
	else if (type == F_WRLCK && dlock_wait_wants_token(w))
		st = bump_token_with(c, fd, lk->path, &token, lk, err);
	else if (type == F_WRLCK)
		st = write_owner(c, lk, fd, err);
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

/* ------------------------------------------------------------ inspection */

/* What inspection sees here (see "Inspection" at the top of the file). */
#define FILE_INSPECT (DLOCK_INSPECT_HELD | DLOCK_INSPECT_LIST | DLOCK_INSPECT_NAMES)

/* The first lock of another open file description in [start, start + len) (F_UNLCK: none). */
static int first_lock(int fd, off_t start, off_t len, struct flock *fl)
{
	*fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	return fcntl(fd, F_OFD_GETLK, fl);
}

/*
 * The exclusive holder's owner block, read without a lock (inspection
 * takes none): a torn block (a write in progress) is read again, then
 * left unknown; a block whose token is not the file's was written by an
 * earlier holder (the holder now wrote none: an older library) and is
 * ignored.  *rlen 0: unknown.
 */
static void read_owner(int fd, dlock_holder *h, dlock_lock_kind *kind, char *record, size_t *rlen)
{
	unsigned char b[TOKEN_LEN + OWNER_BLOCK_MAX];
	*rlen = 0;
	for (int tries = 0; tries < 3; tries++) {
		ssize_t n = pread(fd, b, sizeof b, 0);
		const unsigned char *o = b + TOKEN_LEN;
		if (n < TOKEN_LEN + OWNER_HEAD + 4 || memcmp(o, "dlk1", 4) != 0)
			return;
		size_t len = (size_t)get_le(o + 5, 2);
		if (len > DLOCK_OWNER_MAX || (size_t)n < TOKEN_LEN + OWNER_HEAD + len + 4 ||
		    get_le(o + OWNER_HEAD + len, 4) != fnv32(o, OWNER_HEAD + len))
			continue;
		uint64_t token = get_le(o + 15, 8);
		if (token != 0 && token != get_le(b, TOKEN_LEN))
			return;
		*kind = o[4] == DLOCK_KIND_RWLOCK ? DLOCK_KIND_RWLOCK : DLOCK_KIND_MUTEX;
		h->acquired_ms = (int64_t)get_le(o + 7, 8);
		h->token = token;
		memcpy(record, o + OWNER_HEAD, len);
		*rlen = len;
		return;
	}
}

/* Readers of the file: the kernel's table of locks (/proc/locks) lists each; GETLK shows only one. */
static size_t count_readers(int fd)
{
	struct stat sb;
	char want[96], line[256];
	size_t n = 0;
	if (fstat(fd, &sb) != 0)
		return 1;
	snprintf(want, sizeof want, " %02x:%02x:%llu 0 EOF", major(sb.st_dev), minor(sb.st_dev),
	         (unsigned long long)sb.st_ino);
	FILE *f = fopen("/proc/locks", "re");
	if (!f)
		return 1;
	while (fgets(line, sizeof line, f))
		n += strstr(line, "OFDLCK") && strstr(line, " READ ") && !strstr(line, "->") && strstr(line, want);
	fclose(f);
	return n ? n : 1;
}

/*
 * The permits held of a semaphore of `permits`, in slot order.  GETLK
 * shows one lock of a range, not the lowest, so each one found splits its
 * range in two (2k + 1 calls for k permits held); the ranges still to ask
 * wait on a stack, the slots found in a bitmap.
 */
static dlock_status describe_permits(dlock_info *info, int fd, uint32_t permits)
{
	uint16_t stack[DLOCK_PERMITS_MAX + 1][2];
	unsigned char held[(DLOCK_PERMITS_MAX + 7) / 8] = { 0 };
	size_t top = 0;
	stack[top][0] = 0;
	stack[top++][1] = (uint16_t)permits;
	while (top > 0) {
		struct flock fl;
		off_t lo = stack[top - 1][0], hi = stack[top - 1][1];
		top--;
		if (lo >= hi || first_lock(fd, SEM_SLOT_BASE + lo, hi - lo, &fl) != 0 || fl.l_type == F_UNLCK)
			continue;
		off_t at = fl.l_start - SEM_SLOT_BASE;
		if (at < lo || at >= hi)
			continue;
		held[at / 8] |= (unsigned char)(1u << (at % 8));
		stack[top][0] = (uint16_t)lo; /* room: each range popped leaves at most two */
		stack[top++][1] = (uint16_t)at;
		stack[top][0] = (uint16_t)(at + 1);
		stack[top++][1] = (uint16_t)hi;
	}
	dlock_status st = DLOCK_OK;
	for (uint32_t slot = 0; slot < permits && st == DLOCK_OK; slot++) {
		if (!(held[slot / 8] & (1u << (slot % 8))))
			continue;
		dlock_holder h = DLOCK_HOLDER_INIT;
		h.slot = slot;
		st = dlock_info_holder(info, &h, NULL, 0);
	}
	return st;
}

/*
 * Describe the lock file `path` of `name` (NULL: a hashed name).  For a
 * listing (`listing`), a file nobody holds is left out.
 */
static dlock_status describe_file(dlock_info *info, const char *name, size_t len, const char *path, int listing,
                                  dlock_error *err)
{
	struct flock fl, mark = { .l_type = F_UNLCK };
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		return listing ? DLOCK_OK : dlock_info_lock(info, name, len, path, DLOCK_KIND_MUTEX, 1, -1);
	if (fd < 0)
		return fail_errno(err, errno, "cannot open lock file", path);
	dlock_status st = DLOCK_OK;
	if (first_lock(fd, 0, SEM_SLOT_BASE, &fl) != 0 ||
	    first_lock(fd, SEM_MARK_BASE + 1, DLOCK_PERMITS_MAX, &mark) != 0) {
		st = fail_errno(err, errno, "cannot query the locks on", path);
		goto done;
	}
	int whole = fl.l_type != F_UNLCK && !(fl.l_start == 0 && fl.l_len == TOKEN_LEN); /* not a permit's bump */
	if (whole && fl.l_type == F_WRLCK) {
		dlock_holder h = DLOCK_HOLDER_INIT;
		dlock_lock_kind kind = DLOCK_KIND_MUTEX;
		char record[DLOCK_OWNER_MAX];
		size_t rlen = 0;
		read_owner(fd, &h, &kind, record, &rlen);
		st = dlock_info_lock(info, name, len, path, kind, 1, -1);
		if (st == DLOCK_OK)
			st = dlock_info_holder(info, &h, rlen ? record : NULL, rlen);
	} else if (whole) {
		size_t n = count_readers(fd);
		uint64_t token = 0;
		dlock_error ignored;
		read_token(fd, path, &token, &ignored);
		st = dlock_info_lock(info, name, len, path, DLOCK_KIND_RWLOCK, 1, -1);
		for (size_t i = 0; i < n && st == DLOCK_OK; i++) {
			dlock_holder h = DLOCK_HOLDER_INIT;
			h.mode = DLOCK_MODE_SHARED;
			h.token = token;
			st = dlock_info_holder(info, &h, NULL, 0);
		}
	} else if (mark.l_type != F_UNLCK && mark.l_start > SEM_MARK_BASE &&
	           mark.l_start <= SEM_MARK_BASE + DLOCK_PERMITS_MAX) { /* else a lock taken between the calls */
		uint32_t permits = (uint32_t)(mark.l_start - SEM_MARK_BASE);
		st = dlock_info_lock(info, name, len, path, DLOCK_KIND_SEMAPHORE, permits, -1);
		if (st == DLOCK_OK)
			st = describe_permits(info, fd, permits);
	} else if (!listing) {
		st = dlock_info_lock(info, name, len, path, DLOCK_KIND_MUTEX, 1, -1);
	}
done:
	close(fd);
	if (st == DLOCK_ENOMEM)
		dlock_error_set(err, st, "file://: out of memory describing %s", path);
	return st;
}

static dlock_status file_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err)
{
	struct file_lock lk = { .fd = -1 };
	dlock_status st = file_lock_init(backend, &lk, name, len, err);
	if (st == DLOCK_OK)
		st = describe_file(info, name, len, lk.path, 0, err);
	free(lk.path);
	return st;
}

/* The name of the lock file `file` (a DIR entry, untrusted) into `name`: -1 when it is not a lock file
 * dlock_name_component() made, 0 when the name was hashed (too long to keep), else its length. */
static int name_of_file(const char *file, char *name)
{
	size_t n = strlen(file), suffix = sizeof FILE_SUFFIX - 1;
	if (n <= suffix || strcmp(file + n - suffix, FILE_SUFFIX) != 0)
		return -1;
	return dlock_name_component_decode(file, n - suffix, name);
}

/* Every lock file of DIR that someone holds, its name recovered from the file's (as bytes). */
static dlock_status file_list(void *backend, dlock_info *info, dlock_error *err)
{
	struct file_client *c = backend;
	DIR *d = opendir(c->dir);
	if (!d)
		return fail_errno(err, errno, "cannot read directory", c->dir);
	dlock_status st = DLOCK_OK;
	char path[PATH_MAX], name[DLOCK_COMPONENT_MAX + 1];
	for (struct dirent *e = readdir(d); e && st == DLOCK_OK; e = readdir(d)) {
		int len = name_of_file(e->d_name, name);
		if (len < 0 || e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s%s%s", c->dir, strcmp(c->dir, "/") ? "/" : "", e->d_name);
		st = describe_file(info, len ? name : NULL, (size_t)len, path, 1, err);
	}
	closedir(d);
	return st;
}

/*
 * Every kind locks one file, so the kinds exclude each other (nothing to
 * refuse: see the top of the file); waiters poll; what inspection sees;
 * no breaking (file_break_lock() says why); collection (file_gc()).
 */
static dlock_status file_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	(void)backend;
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "file"; break;
	case DLOCK_FACT_INLINE: out->value = 1; break; /* OFD locks are tried without waiting; files are local */
	case DLOCK_FEATURE_CONSISTENCY: out->value = DLOCK_CONSISTENCY_LOCAL; break;
	case DLOCK_FEATURE_FENCING:
	case DLOCK_FEATURE_READ_FENCING:
	case DLOCK_FEATURE_PERMIT_FENCING: out->value = DLOCK_FENCING_STRICT; break;
	case DLOCK_FEATURE_FAIR: out->value = 0; break;
	case DLOCK_FEATURE_LEASE: out->value = DLOCK_LEASE_SESSION; break;
	case DLOCK_FEATURE_WAKEUP: out->value = DLOCK_WAKEUP_POLL; break;
	case DLOCK_FEATURE_SCOPE: out->value = DLOCK_SCOPE_HOST; break;
	case DLOCK_FEATURE_RWLOCK: out->value = DLOCK_RWLOCK_NO_PREFERENCE; break;
	case DLOCK_FEATURE_SEMAPHORE: out->value = DLOCK_SEMAPHORE_UNORDERED; break;
	case DLOCK_FACT_SLOTS: out->value = 1; break;
	case DLOCK_FEATURE_KIND_CHECK: out->value = 0; break;
	case DLOCK_FACT_CORE_WAITS: out->value = kind == DLOCK_KIND_SEMAPHORE; break;
	case DLOCK_FEATURE_INSPECT: out->value = FILE_INSPECT; break;
	case DLOCK_FEATURE_BREAK: out->value = DLOCK_BREAK_NONE; break;
	case DLOCK_FEATURE_GC: out->value = 1; break;
	default: return DLOCK_ENOTSUP;
	}
	return DLOCK_OK;
}

/* Breaking: never possible here.  A method of its own only to say why, after the core's checks. */
static dlock_status file_break_lock(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	(void)backend;
	(void)name;
	(void)len;
	*broken = 0;
	return dlock_error_set(err, DLOCK_ENOTSUP,
	                       "file:// cannot break a lock: an OFD lock is released only by the process that holds "
	                       "it (or when that process exits); stop the holder to free it");
}

/* ---------------------------------------------------------- collection */

/* Files gc holds locked until the floor is written and they are unlinked. */
struct gc_batch {
	size_t n;
	uint64_t top; /* the highest token among them */
	int fd[GC_BATCH];
	int len[GC_BATCH]; /* the name's length; 0: hashed */
	char name[GC_BATCH][DLOCK_COMPONENT_MAX + 1];
	char path[GC_BATCH][PATH_MAX];
};

/* Raise the floor to `top` (never lower it): a new file written whole, made durable, renamed over the old. */
static dlock_status raise_floor(struct file_client *c, uint64_t top, dlock_error *err)
{
	uint64_t floor = 0;
	unsigned char b[TOKEN_LEN];
	char next[PATH_MAX];
	dlock_status st = read_floor(c, &floor, err);
	if (st != DLOCK_OK || top <= floor)
		return st;
	snprintf(next, sizeof next, "%s%s" FLOOR_NEW, c->dir, strcmp(c->dir, "/") ? "/" : "");
	int fd = open(next, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return fail_errno(err, errno, "cannot create", next);
	put_le(b, top, TOKEN_LEN);
	ssize_t n = pwrite(fd, b, sizeof b, 0);
	int e = n < 0 ? errno : EIO;
	if (n == (ssize_t)sizeof b && fdatasync(fd) != 0)
		n = -1, e = errno;
	close(fd);
	if (n != (ssize_t)sizeof b)
		return fail_errno(err, e, "cannot write", next);
	if (rename(next, c->floor) != 0)
		return fail_errno(err, errno, "cannot rename the token floor to", c->floor);
	if (sync_dir(c->dir) != 0)
		return fail_errno(err, errno, "cannot sync directory", c->dir);
	return DLOCK_OK;
}

/* Let the files of the batch go: with `unlink_them` (and DLOCK_OK in *st), unlink each first and report it. */
static void gc_flush(struct file_client *c, struct gc_batch *b, int unlink_them, dlock_gc_removed_fn *removed,
                     void *arg, size_t *count, dlock_status *st, dlock_error *err)
{
	if (*st == DLOCK_OK && unlink_them && b->n > 0)
		*st = raise_floor(c, b->top, err);
	size_t done = 0;
	for (size_t i = 0; i < b->n; i++) {
		if (*st == DLOCK_OK && unlink_them && unlink(b->path[i]) != 0)
			*st = fail_errno(err, errno, "cannot remove", b->path[i]);
		if (*st == DLOCK_OK)
			done = i + 1;
		ofd_lock(b->fd[i], F_UNLCK);
		close(b->fd[i]);
	}
	for (size_t i = 0; i < done; i++) /* told once nothing is locked: the callback may lock the name */
		removed(arg, b->len[i] ? b->name[i] : NULL, (size_t)b->len[i], b->path[i]);
	*count += done;
	b->n = 0;
	b->top = 0;
}

/* Lock `path` whole without waiting, as gc: *fdp the descriptor when nobody uses it, -1 when it is in
 * use or gone; DLOCK_OK, or an error. */
static dlock_status gc_take(const char *path, int *fdp, uint64_t *token, dlock_error *err)
{
	*fdp = -1;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && (errno == ENOENT || errno == ELOOP || errno == EISDIR))
		return DLOCK_OK; /* gone, or not a lock file (a symlink, a directory): never ours to remove */
	if (fd < 0)
		return fail_errno(err, errno, "cannot open lock file", path);
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd); /* a FIFO or a device planted under a lock file's name */
		return DLOCK_OK;
	}
	dlock_status st = DLOCK_OK;
	if (ofd_lock(fd, F_WRLCK) != 0) {
		if (errno != EAGAIN && errno != EACCES) /* else held, or an attempt in progress */
			st = fail_errno(err, errno, "cannot lock", path);
		close(fd);
		return st;
	}
	int linked = still_linked(fd, path, 1);
	if (linked < 0)
		st = fail_errno(err, errno, "cannot look at lock file", path);
	else if (linked > 0)
		st = read_token(fd, path, token, err);
	if (st == DLOCK_OK && linked > 0) {
		*fdp = fd;
		return DLOCK_OK;
	}
	ofd_lock(fd, F_UNLCK);
	close(fd);
	return st;
}

/*
 * Remove the lock files nobody holds or tries (see "Collection" at the top
 * of the file), those of the names starting with `prefix` (hashed names
 * only without a prefix).  Collections of one directory take turns (flock
 * on DIR, held throughout), so the floor is only ever raised.
 */
static dlock_status file_gc(void *backend, const char *prefix, size_t plen, unsigned flags,
                            dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err)
{
	struct file_client *c = backend;
	int unlink_them = !(flags & DLOCK_GC_DRY_RUN);
	*count = 0;
	int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return fail_errno(err, errno, "cannot open directory", c->dir);
	int rc;
	do
		rc = flock(dfd, LOCK_EX);
	while (rc != 0 && errno == EINTR);
	if (rc != 0) {
		dlock_status st = fail_errno(err, errno, "cannot lock directory", c->dir);
		close(dfd);
		return st;
	}
	DIR *d = opendir(c->dir);
	struct gc_batch *b = calloc(1, sizeof *b);
	dlock_status st = DLOCK_OK;
	if (!d || !b) {
		st = !d ? fail_errno(err, errno, "cannot read directory", c->dir)
		        : dlock_error_set(err, DLOCK_ENOMEM, "file://: out of memory");
		goto done;
	}
	for (struct dirent *e = readdir(d); e && st == DLOCK_OK; e = readdir(d)) {
		int len = name_of_file(e->d_name, b->name[b->n]);
		if (len < 0 || e->d_name[0] == '.')
			continue;
		if (plen > 0 && ((size_t)len < plen || memcmp(b->name[b->n], prefix, plen) != 0))
			continue;
		snprintf(b->path[b->n], PATH_MAX, "%s%s%s", c->dir, strcmp(c->dir, "/") ? "/" : "", e->d_name);
		uint64_t token = 0;
		st = gc_take(b->path[b->n], &b->fd[b->n], &token, err);
		if (b->fd[b->n] < 0)
			continue;
		b->len[b->n] = len;
		if (token > b->top)
			b->top = token;
		if (++b->n == GC_BATCH)
			gc_flush(c, b, unlink_them, removed, arg, count, &st, err);
	}
	gc_flush(c, b, unlink_them, removed, arg, count, &st, err);
	if (st == DLOCK_OK && unlink_them && *count > 0 && sync_dir(c->dir) != 0)
		st = fail_errno(err, errno, "cannot sync directory", c->dir);
done:
	if (d)
		closedir(d);
	free(b);
	close(dfd); /* and the flock with it */
	return st;
}

const dlock_driver dlock_file_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "file",
	.lock_size = sizeof(struct file_lock),
	.open = file_open,
	.close = file_close,
	.knows_param = NULL,
	.lock_fini = file_lock_fini,
	.lock_init_kind = file_lock_init_kind,
	.try_acquire = file_try_acquire,
	.release = file_release,
	.extend = NULL,
	.check = file_check,
	.inspect = file_inspect,
	.list = file_list,
	.break_lock = file_break_lock,
	.gc = file_gc,
	.feature = file_feature,
};
