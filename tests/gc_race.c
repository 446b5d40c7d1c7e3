/* The race of dlock_gc() against holders (gc_race.h). */
#include "gc_race.h"

#include <CUnit/CUnit.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testsupport.h"

#define WAIT_MS 30000 /* an acquisition that must succeed: a hang becomes a failure */

/* What the processes share. */
struct race {
	atomic_uint taken;          /* acquisitions claimed (a worker stops past GC_RACE_ACQUISITIONS) */
	atomic_uint backwards;      /* a token not above the name's previous one */
	atomic_uint failures;       /* acquisitions, releases or gc calls that failed */
	atomic_uint workers_done;
	atomic_ulong gc_rounds, gc_removed;
	uint64_t last[GC_RACE_NAMES]; /* each name's latest token, written by its holder only */
	atomic_int sem_inside;       /* permits held now */
	atomic_uint sem_over;        /* entries that found GC_RACE_PERMITS already inside */
	atomic_uint sem_entries;
	uint64_t slot_last[GC_RACE_PERMITS]; /* each slot's latest token, written by its holder only */
	char why[256];               /* the first failure */
};

static void failed(struct race *r, const char *what, dlock_client *c, dlock_status st)
{
	if (atomic_fetch_add(&r->failures, 1) == 0)
		snprintf(r->why, sizeof r->why, "%s: %s %s", what, dlock_status_name(st), c ? dlock_client_errmsg(c) : "");
}

/* Inside the semaphore: never more than GC_RACE_PERMITS, and the slot's token above its last. */
static void permit_held(struct race *r, dlock_lock *sem)
{
	uint64_t token = 0;
	uint32_t slot = UINT32_MAX;
	atomic_fetch_add(&r->sem_entries, 1);
	if (atomic_fetch_add(&r->sem_inside, 1) >= GC_RACE_PERMITS)
		atomic_fetch_add(&r->sem_over, 1);
	if (dlock_lock_fencing_token(sem, &token) != DLOCK_OK || dlock_lock_permit_slot(sem, &slot) != DLOCK_OK ||
	    slot >= GC_RACE_PERMITS || token <= r->slot_last[slot])
		atomic_fetch_add(&r->backwards, 1);
	else
		r->slot_last[slot] = token;
	atomic_fetch_sub(&r->sem_inside, 1);
}

static int worker(struct race *r, dlock_test_overlap **ov, const char *uri, const char *prefix, unsigned seed)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	dlock_lock *l[GC_RACE_NAMES + 1] = { NULL };
	char name[128];
	for (int i = 0; c && i < GC_RACE_NAMES; i++) {
		snprintf(name, sizeof name, "%s%d", prefix, i);
		l[i] = dlock_test_new_lock(c, name);
	}
	snprintf(name, sizeof name, "%ssem", prefix);
	if (c && dlock_semaphore_new(c, name, GC_RACE_PERMITS, &l[GC_RACE_NAMES]) != DLOCK_OK)
		failed(r, "semaphore", c, DLOCK_EINVAL);
	dlock_acquire_options opts = DLOCK_ACQUIRE_OPTIONS_INIT, once = DLOCK_ACQUIRE_OPTIONS_INIT;
	opts.wait_ms = WAIT_MS;
	once.wait_ms = 0; /* a permit is tried again at once: waiting would poll, slowly */
	while (c && atomic_fetch_add(&r->taken, 1) < GC_RACE_ACQUISITIONS) {
		int i = (int)(rand_r(&seed) % (GC_RACE_NAMES + 1));
		dlock_status st = l[i] ? dlock_acquire(l[i], i == GC_RACE_NAMES ? &once : &opts) : DLOCK_EINVAL;
		for (int64_t until = dlock_test_now_ms() + WAIT_MS; st == DLOCK_EBUSY && dlock_test_now_ms() < until;)
			st = dlock_acquire(l[i], &once); /* a try-once meeting gc's moment is busy too */
		if (st != DLOCK_OK) {
			failed(r, "acquire", c, st);
			break;
		}
		if (i == GC_RACE_NAMES) {
			permit_held(r, l[i]);
			st = dlock_release(l[i]);
			if (st != DLOCK_OK) {
				failed(r, "release", c, st);
				break;
			}
			continue;
		}
		dlock_test_overlap_enter(ov[i]);
		uint64_t token = 0;
		if (dlock_lock_fencing_token(l[i], &token) != DLOCK_OK || token <= r->last[i])
			atomic_fetch_add(&r->backwards, 1);
		r->last[i] = token;
		dlock_test_overlap_leave(ov[i]);
		st = dlock_release(l[i]);
		if (st != DLOCK_OK) {
			failed(r, "release", c, st);
			break;
		}
	}
	for (int i = 0; i <= GC_RACE_NAMES; i++)
		dlock_lock_free(l[i]);
	dlock_client_close(c);
	atomic_fetch_add(&r->workers_done, 1);
	return c ? 0 : 1;
}

static int collector(struct race *r, const char *uri, const char *prefix)
{
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	while (c && atomic_load(&r->workers_done) < GC_RACE_WORKERS) {
		size_t n = 0;
		dlock_status st = dlock_gc(c, prefix, 0, NULL, NULL, &n);
		if (st != DLOCK_OK) {
			failed(r, "gc", c, st);
			break;
		}
		atomic_fetch_add(&r->gc_removed, n);
		atomic_fetch_add(&r->gc_rounds, 1);
	}
	dlock_client_close(c);
	return c ? 0 : 1;
}

dlock_status gc_try(dlock_lock *l, int shared)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = 0;
	o.mode = shared ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
	return dlock_acquire(l, &o);
}

void gc_race(const char *uri, const char *prefix)
{
	struct race *r = dlock_test_shared_alloc(sizeof *r);
	dlock_test_overlap *ov[GC_RACE_NAMES];
	pid_t pid[GC_RACE_WORKERS + 1];
	for (int i = 0; i < GC_RACE_NAMES; i++)
		ov[i] = dlock_test_overlap_new();
	int64_t t0 = dlock_test_now_ms();
	for (int p = 0; p <= GC_RACE_WORKERS; p++) {
		pid[p] = fork();
		if (pid[p] == 0)
			_exit(p < GC_RACE_WORKERS ? worker(r, ov, uri, prefix, (unsigned)(getpid() * 7919 + p))
			                          : collector(r, uri, prefix));
		CU_ASSERT_FATAL(pid[p] > 0);
	}
	for (int p = 0; p <= GC_RACE_WORKERS; p++) {
		int status = 0;
		CU_ASSERT_EQUAL(waitpid(pid[p], &status, 0), pid[p]);
		CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	uint64_t entered = 0, violations = 0;
	for (int i = 0; i < GC_RACE_NAMES; i++) {
		entered += dlock_test_overlap_count(ov[i]);
		violations += dlock_test_overlap_violations(ov[i]);
		dlock_test_overlap_free(ov[i]);
	}
	entered += atomic_load(&r->sem_entries);
	printf("\n    %s: %llu acquisitions (%u permits) in %lld ms, %lu gc rounds removed %lu names, %llu overlaps, "
	       "%u permits past %d, %u tokens not increasing%s%s",
	       uri, (unsigned long long)entered, atomic_load(&r->sem_entries), (long long)(dlock_test_now_ms() - t0),
	       atomic_load(&r->gc_rounds), atomic_load(&r->gc_removed), (unsigned long long)violations,
	       atomic_load(&r->sem_over), GC_RACE_PERMITS, atomic_load(&r->backwards),
	       r->failures ? ", first failure: " : "", r->why);
	CU_ASSERT_EQUAL(atomic_load(&r->failures), 0);
	CU_ASSERT_EQUAL(entered, GC_RACE_ACQUISITIONS);
	CU_ASSERT_EQUAL(violations, 0);
	CU_ASSERT_EQUAL(atomic_load(&r->sem_over), 0);
	CU_ASSERT_EQUAL(atomic_load(&r->backwards), 0);
	CU_ASSERT(atomic_load(&r->gc_removed) > 0);
	dlock_test_shared_free(r, sizeof *r);
}

void gc_seen_removed(const char *name, const char *resource, void *userdata)
{
	struct gc_seen *s = userdata;
	size_t n = strlen(s->names);
	CU_ASSERT_PTR_NOT_NULL(resource);
	snprintf(s->names + n, sizeof s->names - n, "%s%s", n ? "," : "", name ? name : "?");
	s->calls++;
}
