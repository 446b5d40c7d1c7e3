/* The test's own event loops for loop clients, and callback records (see looprig.h). */
#include "looprig.h"

#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "testsupport.h"

#define LR_TURN_MS 10      /* longest wait of one turn in lr_run_until() */
#define LR_CLIENTS_MAX 16  /* clients of one loop */
#define LR_EVENTS_MAX 64   /* epoll events handled per turn */

/* A descriptor as the push loop knows it (indexed by descriptor). */
struct lr_fd {
	lr_client *tc;  /* the client that watches it */
	int watched;
	uint32_t gen;   /* which registration an epoll event belongs to */
	void *slot;     /* what the hook stored in dlock's slot */
};

/* What the hook keeps in a descriptor's slot: its own descriptor and client, to be checked. */
struct lr_slot {
	int fd;
	lr_client *tc;
};

struct lr_loop {
	lr_mode mode;
	pthread_t thread;
	int starting; /* start calls running (LR_START) */
	int64_t seq;
	int epfd;     /* push mode */
	struct lr_fd *fds;
	size_t nfds;
	uint32_t gen;
	lr_client *clients;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int on_loop(const lr_loop *lp)
{
	return pthread_equal(pthread_self(), lp->thread);
}

/* ------------------------------------------------------------ the loop */

lr_loop *lr_loop_new(lr_mode mode)
{
	lr_loop *lp = calloc(1, sizeof *lp);
	CU_ASSERT_PTR_NOT_NULL_FATAL(lp);
	lp->mode = mode;
	lp->thread = pthread_self();
	lp->epfd = -1;
	if (mode == LR_PUSH) {
		lp->epfd = epoll_create1(EPOLL_CLOEXEC);
		CU_ASSERT_FATAL(lp->epfd >= 0);
	}
	return lp;
}

void lr_loop_free(lr_loop *lp)
{
	if (!lp)
		return;
	for (lr_client *tc = lp->clients; tc; tc = tc->next)
		if (!tc->gone && tc->client)
			CU_ASSERT_EQUAL(lr_close_blocking(tc), DLOCK_OK);
	while (lp->clients) {
		lr_client *tc = lp->clients;
		lp->clients = tc->next;
		lr_op_clear(&tc->opened);
		lr_op_clear(&tc->closed);
		free(tc);
	}
	for (size_t i = 0; i < lp->nfds; i++)
		free(lp->fds[i].slot); /* left only by a client that never asked to stop watching */
	free(lp->fds);
	if (lp->epfd >= 0)
		close(lp->epfd);
	free(lp);
}

lr_mode lr_loop_mode(const lr_loop *lp)
{
	return lp->mode;
}

int64_t lr_loop_seq(const lr_loop *lp)
{
	return lp->seq;
}

void lr_begin(lr_loop *lp)
{
	lp->starting++;
}

dlock_status lr_end(lr_loop *lp, dlock_status st)
{
	lp->starting--;
	return st;
}

/* ------------------------------------------------------------ push mode: the hooks */

static struct lr_fd *fd_entry(lr_loop *lp, int fd)
{
	if (fd < 0)
		return NULL;
	if ((size_t)fd >= lp->nfds) {
		size_t n = (size_t)fd + 64;
		struct lr_fd *f = realloc(lp->fds, n * sizeof *f);
		if (!f)
			return NULL;
		memset(f + lp->nfds, 0, (n - lp->nfds) * sizeof *f);
		lp->fds = f;
		lp->nfds = n;
	}
	return &lp->fds[fd];
}

static void note_hook(lr_client *tc)
{
	if (!on_loop(tc->lp))
		tc->hooks_off_loop++;
	if (tc->cleanups)
		tc->hooks_after_cleanup++;
}

static uint32_t to_epoll(unsigned events)
{
	return (events & DLOCK_IO_READ ? EPOLLIN : 0) | (events & DLOCK_IO_WRITE ? EPOLLOUT : 0);
}

static void unwatch(lr_loop *lp, struct lr_fd *f, int fd)
{
	epoll_ctl(lp->epfd, EPOLL_CTL_DEL, fd, NULL); /* fails only when it was closed already */
	free(f->slot);
	f->slot = NULL;
	f->watched = 0;
	f->tc->watched--;
}

static int hook_watch(dlock_client *client, void *userdata, int fd, unsigned events, void **slot)
{
	lr_client *tc = userdata;
	lr_loop *lp = tc->lp;
	(void)client;
	note_hook(tc);
	tc->watch_calls++;
	if (events & ~(unsigned)(DLOCK_IO_READ | DLOCK_IO_WRITE))
		tc->bad_events++;
	struct lr_fd *f = fd_entry(lp, fd);
	if (!f || !slot) {
		tc->slot_errors++;
		return -1;
	}
	/* NULL on the first call for a descriptor, then what this hook stored, until the removal. */
	if (f->watched ? (*slot != f->slot || f->tc != tc) : *slot != NULL)
		tc->slot_errors++;
	if (events == 0) {
		if (fcntl(fd, F_GETFD) == -1) /* removal reported after the close */
			tc->removed_closed++;
		if (f->watched && f->tc == tc)
			unwatch(lp, f, fd);
		return 0;
	}
	if (tc->fail_watch)
		return -1;
	struct epoll_event ev = { .events = to_epoll(events) };
	if (f->watched) {
		ev.data.u64 = (uint64_t)f->gen << 32 | (uint32_t)fd;
		return epoll_ctl(lp->epfd, EPOLL_CTL_MOD, fd, &ev) == 0 ? 0 : -1;
	}
	struct lr_slot *s = malloc(sizeof *s);
	if (!s)
		return -1;
	s->fd = fd;
	s->tc = tc;
	f->gen = ++lp->gen;
	ev.data.u64 = (uint64_t)f->gen << 32 | (uint32_t)fd;
	if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		free(s);
		return -1;
	}
	f->tc = tc;
	f->slot = s;
	f->watched = 1;
	tc->watched++;
	*slot = s;
	return 0;
}

static int hook_timer(dlock_client *client, void *userdata, int64_t ms)
{
	lr_client *tc = userdata;
	(void)client;
	note_hook(tc);
	tc->timer_calls++;
	if (ms < -1) {
		tc->bad_events++;
		return -1;
	}
	tc->timer_at_ns = ms < 0 ? -1 : now_ns() + ms * 1000000;
	return 0;
}

static void hook_cleanup(void *userdata)
{
	lr_client *tc = userdata;
	note_hook(tc);
	tc->cleanups++;
	if (tc->timer_at_ns >= 0)
		tc->timer_armed_at_cleanup++;
}

/* ------------------------------------------------------------ turns */

/* Every descriptor still watched must still be open whenever dlock has returned to the loop. */
static void check_watched_open(lr_loop *lp)
{
	for (size_t fd = 0; fd < lp->nfds; fd++) {
		struct lr_fd *f = &lp->fds[fd];
		if (f->watched && fcntl((int)fd, F_GETFD) == -1) {
			f->tc->closed_watched++;
			printf("\n    descriptor %zu was closed while watched", fd);
			unwatch(lp, f, (int)fd);
		}
	}
}

static unsigned from_epoll(uint32_t ev)
{
	return (ev & EPOLLIN ? DLOCK_IO_READ : 0u) | (ev & EPOLLOUT ? DLOCK_IO_WRITE : 0u) |
	       (ev & (EPOLLERR | EPOLLHUP) ? DLOCK_IO_ERROR : 0u);
}

static int turn_push(lr_loop *lp, int64_t max_ms, int io_only)
{
	check_watched_open(lp);
	int64_t now = now_ns(), wait = max_ms;
	int ready = 0;
	for (lr_client *tc = lp->clients; tc; tc = tc->next) {
		if (io_only || tc->gone || !tc->client || tc->timer_at_ns < 0)
			continue;
		int64_t at = tc->timer_at_ns - (int64_t)tc->timer_early_ms * 1000000;
		int64_t left = at <= now ? 0 : (at - now + 999999) / 1000000;
		if (left < wait)
			wait = left;
	}
	struct epoll_event ev[LR_EVENTS_MAX];
	int n = epoll_wait(lp->epfd, ev, LR_EVENTS_MAX, (int)wait);
	for (int i = 0; i < n; i++) {
		int fd = (int)(uint32_t)ev[i].data.u64;
		uint32_t gen = (uint32_t)(ev[i].data.u64 >> 32);
		struct lr_fd *f = (size_t)fd < lp->nfds ? &lp->fds[fd] : NULL;
		/* An event of a registration removed meanwhile (by an earlier dispatch) is dropped. */
		if (!f || !f->watched || f->gen != gen || f->tc->gone)
			continue;
		ready++;
		dlock_loop_ready(f->tc->client, fd, from_epoll(ev[i].events));
	}
	now = now_ns();
	for (lr_client *tc = lp->clients; tc && !io_only; tc = tc->next) {
		if (tc->gone || !tc->client || tc->timer_at_ns < 0 ||
		    tc->timer_at_ns - (int64_t)tc->timer_early_ms * 1000000 > now)
			continue;
		tc->timer_at_ns = -1; /* it fires once */
		dlock_loop_timer_fired(tc->client);
	}
	return ready;
}

static int turn_pull(lr_loop *lp, int64_t max_ms, int io_only)
{
	struct pollfd pfd[LR_CLIENTS_MAX];
	lr_client *who[LR_CLIENTS_MAX];
	int64_t due[LR_CLIENTS_MAX], now = now_ns(), wait = max_ms;
	int n = 0, ready = 0;
	for (lr_client *tc = lp->clients; tc && n < LR_CLIENTS_MAX; tc = tc->next) {
		if (tc->gone || !tc->client)
			continue;
		int fd = dlock_loop_fd(tc->client);
		int64_t t = dlock_loop_timeout_ms(tc->client);
		if (fd < 0)
			tc->no_fd++;
		pfd[n] = (struct pollfd){ .fd = fd, .events = POLLIN };
		who[n] = tc;
		due[n] = t < 0 || io_only ? -1 : now + t * 1000000;
		if (due[n] >= 0 && t < wait)
			wait = t;
		n++;
	}
	if (poll(pfd, (nfds_t)n, (int)wait) < 0 && errno != EINTR)
		CU_FAIL("poll");
	now = now_ns();
	for (int i = 0; i < n; i++) {
		if (who[i]->gone)
			continue;
		if (pfd[i].revents & POLLNVAL)
			who[i]->closed_watched++;
		ready += pfd[i].revents != 0;
		if (pfd[i].revents || (due[i] >= 0 && now >= due[i]))
			dlock_loop_run(who[i]->client);
	}
	return ready;
}

static int turn(lr_loop *lp, int64_t max_ms, int io_only)
{
	if (max_ms < 0)
		max_ms = 0;
	return lp->mode == LR_PUSH ? turn_push(lp, max_ms, io_only) : turn_pull(lp, max_ms, io_only);
}

void lr_turn(lr_loop *lp, int64_t max_ms)
{
	turn(lp, max_ms, 0);
}

int lr_wait_io(lr_loop *lp, int64_t max_ms)
{
	return turn(lp, max_ms, 1);
}

int lr_run_until(lr_loop *lp, int (*cond)(void *arg), void *arg, int64_t bound_ms)
{
	int64_t end = dlock_test_now_ms() + bound_ms;
	for (;;) {
		if (cond(arg))
			return 1;
		int64_t left = end - dlock_test_now_ms();
		if (left <= 0)
			return 0;
		lr_turn(lp, left < LR_TURN_MS ? left : LR_TURN_MS);
	}
}

int lr_op_done(void *arg)
{
	return ((lr_op *)arg)->calls > 0;
}

int lr_run_done(lr_loop *lp, lr_op *op, int64_t bound_ms)
{
	return lr_run_until(lp, lr_op_done, op, bound_ms);
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

void lr_run_for(lr_loop *lp, int64_t ms)
{
	lr_run_until(lp, never, NULL, ms);
}

/* ------------------------------------------------------------ clients */

lr_client *lr_client_new(lr_loop *lp)
{
	lr_client *tc = calloc(1, sizeof *tc);
	CU_ASSERT_PTR_NOT_NULL_FATAL(tc);
	tc->lp = lp;
	tc->timer_at_ns = -1;
	lr_op_init(&tc->opened, tc);
	lr_op_init(&tc->closed, tc);
	tc->next = lp->clients;
	lp->clients = tc;
	return tc;
}

dlock_status lr_open(lr_client *tc, const char *uri, const dlock_client_options *opts, char *errbuf, size_t errlen)
{
	lr_loop *lp = tc->lp;
	dlock_loop_hooks hooks = { .version = DLOCK_LOOP_HOOKS_VERSION, .userdata = tc, .watch = hook_watch,
		                   .timer = hook_timer, .cleanup = hook_cleanup };
	dlock_client *c = NULL;
	dlock_status st = LR_START(lp, dlock_client_open_async(&c, uri, opts, lp->mode == LR_PUSH ? &hooks : NULL,
	                                                       lr_on_open, &tc->opened, errbuf, errlen));
	tc->client = c;
	tc->opened_ok = st == DLOCK_OK;
	if (st != DLOCK_OK) {
		CU_ASSERT_PTR_NULL(c);
		tc->gone = 1;
	}
	return st;
}

lr_client *lr_open_ready(lr_loop *lp, const char *uri)
{
	char err[512] = "";
	lr_client *tc = lr_client_new(lp);
	dlock_client_options o = DLOCK_CLIENT_OPTIONS_INIT;
	o.identity = LR_IDENTITY; /* told apart from the test's ordinary clients in inspections */
	dlock_status st = lr_open(tc, uri, &o, err, sizeof err);
	if (st != DLOCK_OK) {
		char masked[1024];
		dlock_test_mask_uri(uri, masked, sizeof masked);
		printf("\n    cannot start opening %s: %s: %s", masked, dlock_status_name(st), err);
		CU_FAIL("dlock_client_open_async");
		return NULL;
	}
	if (!lr_run_done(lp, &tc->opened, LR_AWAIT_MS) || !LR_ASSERT_ONCE(&tc->opened, DLOCK_OK))
		return NULL;
	return tc;
}

dlock_status lr_close_async(lr_client *tc)
{
	return LR_START(tc->lp, dlock_client_close_async(tc->client, lr_on_close, &tc->closed));
}

void lr_close(lr_client *tc)
{
	if (!tc || tc->gone)
		return;
	CU_ASSERT_EQUAL(lr_close_async(tc), DLOCK_OK);
	CU_ASSERT(lr_run_done(tc->lp, &tc->closed, LR_AWAIT_MS));
	if (!tc->gone) {
		/* Never completed: a blocking close would wait for the same thing.  Leave the client be
		 * (the loop no longer drives it), so that the test program goes on. */
		printf("\n    the close of a loop client never completed: the client is abandoned");
		CU_FAIL("the close never completed");
		tc->gone = 1;
		return;
	}
	LR_ASSERT_ONCE(&tc->closed, DLOCK_OK);
	LR_ASSERT_CLEAN(tc);
}

dlock_status lr_close_blocking(lr_client *tc)
{
	dlock_status st = dlock_client_close(tc->client);
	tc->watched_at_close = tc->watched;
	tc->gone = 1;
	return st;
}

void lr_assert_clean(const lr_client *tc, const char *file, unsigned line)
{
	char what[512];
	int ok = tc->gone && tc->closed_watched == 0;
	if (tc->lp->mode == LR_PUSH)
		ok = ok && tc->cleanups == (tc->opened_ok ? 1 : 0) && tc->watched == 0 &&
		     tc->removed_closed == 0 && tc->slot_errors == 0 && tc->bad_events == 0 &&
		     tc->hooks_off_loop == 0 && tc->hooks_after_cleanup == 0 && tc->timer_armed_at_cleanup == 0;
	else
		ok = ok && tc->no_fd == 0;
	snprintf(what, sizeof what,
	         "loop client: gone %d, cleanups %d (open %s), watched now %d / at the close's callback %d, "
	         "removed after close %d, closed while watched %d, slot errors %d, bad events %d, hooks off the "
	         "loop %d / after cleanup %d, timer armed at cleanup %d, no descriptor %d",
	         tc->gone, tc->cleanups, tc->opened_ok ? "ok" : "failed", tc->watched, tc->watched_at_close,
	         tc->removed_closed, tc->closed_watched, tc->slot_errors, tc->bad_events, tc->hooks_off_loop,
	         tc->hooks_after_cleanup, tc->timer_armed_at_cleanup, tc->no_fd);
	if (!ok)
		printf("\n    %s:%u: %s", file, line, what);
	CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line, "loop client hooks clean", file, "", CU_FALSE);
}

/* ------------------------------------------------------------ callbacks */

void lr_op_init(lr_op *op, lr_client *tc)
{
	memset(op, 0, sizeof *op);
	op->tc = tc;
	op->status = DLOCK_STATUS_COUNT_;
}

void lr_op_clear(lr_op *op)
{
	dlock_lock_info_free(op->info);
	dlock_lock_list_free(op->list);
	dlock_leader_free(op->leader);
	op->info = NULL;
	op->list = NULL;
	op->leader = NULL;
}

static void record(lr_op *op, dlock_status st, const char *detail)
{
	lr_loop *lp = op->tc->lp;
	op->calls++;
	if (lp->starting)
		op->in_start++;
	if (!on_loop(lp))
		op->off_loop++;
	op->seq = ++lp->seq;
	if (op->calls == 1)
		op->at_ms = dlock_test_now_ms();
	op->status = st;
	if (detail)
		snprintf(op->msg, sizeof op->msg, "%s", detail);
	else if (op->tc->client && !op->tc->gone)
		snprintf(op->msg, sizeof op->msg, "%s", dlock_client_errmsg(op->tc->client));
}

static void then(lr_op *op)
{
	void (*fn)(void *) = op->then;
	op->then = NULL;
	if (fn)
		fn(op->then_arg);
}

void lr_on_open(dlock_client *client, dlock_status status, void *userdata)
{
	lr_op *op = userdata;
	char msg[sizeof op->msg] = "";
	if (client)
		snprintf(msg, sizeof msg, "%s", dlock_client_errmsg(client));
	record(op, status, msg);
	then(op);
}

void lr_on_close(dlock_status status, void *userdata)
{
	lr_op *op = userdata;
	op->tc->watched_at_close = op->tc->watched;
	op->tc->gone = 1; /* "the client is gone by then" */
	record(op, status, "");
	then(op);
}

void lr_on_lock(dlock_lock *lock, dlock_status status, void *userdata)
{
	(void)lock;
	record(userdata, status, NULL);
	then(userdata);
}

void lr_on_inspect(dlock_client *client, dlock_status status, dlock_lock_info *info, void *userdata)
{
	lr_op *op = userdata;
	(void)client;
	dlock_lock_info_free(op->info);
	op->info = info;
	record(op, status, NULL);
	then(op);
}

void lr_on_list(dlock_client *client, dlock_status status, dlock_lock_list *list, void *userdata)
{
	lr_op *op = userdata;
	(void)client;
	dlock_lock_list_free(op->list);
	op->list = list;
	record(op, status, NULL);
	then(op);
}

void lr_on_break(dlock_client *client, dlock_status status, size_t broken, void *userdata)
{
	lr_op *op = userdata;
	(void)client;
	op->broken = broken;
	record(op, status, NULL);
	then(op);
}

void lr_on_election(dlock_election *e, dlock_status status, uint64_t term, void *userdata)
{
	lr_op *op = userdata;
	(void)e;
	op->term = term;
	record(op, status, NULL);
	then(op);
}

void lr_on_leader(dlock_election *e, dlock_status status, dlock_leader *leader, void *userdata)
{
	lr_op *op = userdata;
	(void)e;
	dlock_leader_free(op->leader);
	op->leader = leader;
	record(op, status, NULL);
	then(op);
}

void lr_on_lost(dlock_lock *lock, dlock_lost_reason reason, const char *detail, void *userdata)
{
	lr_op *op = userdata;
	(void)lock;
	op->reason = reason;
	record(op, DLOCK_OK, detail ? detail : "(no detail)");
	then(op);
}

/* ------------------------------------------------------------ assertions */

int lr_assert_once(const lr_op *op, dlock_status want, const char *what, const char *file, unsigned line)
{
	int ok = op->calls == 1 && op->in_start == 0 && op->off_loop == 0 && op->status == want;
	if (!ok)
		printf("\n    %s:%u: %s: %d calls (%d inside the start call, %d off the loop's thread), status %s, "
		       "expected one call with %s%s%s",
		       file, line, what, op->calls, op->in_start, op->off_loop,
		       op->calls ? dlock_status_name(op->status) : "-", dlock_status_name(want), op->msg[0] ? ": " : "",
		       op->msg);
	CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line, what, file, "", CU_FALSE);
	return ok;
}

int lr_assert_never(const lr_op *op, const char *what, const char *file, unsigned line)
{
	int ok = op->calls == 0;
	if (!ok)
		printf("\n    %s:%u: %s: called back %d times (status %s), expected never", file, line, what, op->calls,
		       dlock_status_name(op->status));
	CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line, what, file, "", CU_FALSE);
	return ok;
}

/* ------------------------------------------------------------ operations */

dlock_status lr_acquire(dlock_lock *lock, int64_t wait_ms, int64_t lease_ms, int renew, dlock_lock_mode mode,
                        lr_op *lost, lr_op *done)
{
	dlock_acquire_options o = DLOCK_ACQUIRE_OPTIONS_INIT;
	o.wait_ms = wait_ms;
	o.lease_ms = lease_ms;
	o.renewal = dlock_test_switch(renew);
	o.mode = mode;
	o.on_lost = lost ? lr_on_lost : NULL;
	o.lost_userdata = lost;
	return LR_START(done->tc->lp, dlock_acquire_async(lock, &o, lr_on_lock, done));
}

dlock_status lr_finish(lr_op *op, dlock_status started)
{
	if (started != DLOCK_OK)
		return started;
	if (!lr_run_done(op->tc->lp, op, LR_AWAIT_MS)) {
		CU_FAIL("no callback within the bound");
		return DLOCK_STATUS_COUNT_;
	}
	int ok = op->calls == 1 && op->in_start == 0 && op->off_loop == 0;
	if (!ok)
		printf("\n    %d calls, %d inside the start call, %d off the loop's thread", op->calls, op->in_start,
		       op->off_loop);
	CU_ASSERT(ok);
	return op->status;
}

dlock_status lr_acquire_now(lr_client *tc, dlock_lock *lock, int64_t wait_ms)
{
	lr_op op;
	lr_op_init(&op, tc);
	return lr_finish(&op, lr_acquire(lock, wait_ms, 0, -1, DLOCK_MODE_EXCLUSIVE, NULL, &op));
}

dlock_status lr_release_now(lr_client *tc, dlock_lock *lock)
{
	lr_op op;
	lr_op_init(&op, tc);
	return lr_finish(&op, LR_START(tc->lp, dlock_release_async(lock, lr_on_lock, &op)));
}

dlock_status lr_check_now(lr_client *tc, dlock_lock *lock)
{
	lr_op op;
	lr_op_init(&op, tc);
	return lr_finish(&op, LR_START(tc->lp, dlock_check_async(lock, lr_on_lock, &op)));
}

/* ------------------------------------------------------------ threads */

static void *thread_main(void *arg)
{
	lr_thread *t = arg;
	if (t->start)
		pthread_barrier_wait(t->start);
	switch (t->action) {
	case LR_DO_ACQUIRE: t->status = dlock_test_acquire(t->lock, t->wait_ms, 0, -1, NULL, NULL); break;
	case LR_DO_RELEASE: t->status = dlock_release(t->lock); break;
	case LR_DO_CANCEL: t->status = dlock_cancel(t->lock); break;
	case LR_DO_WAKE:
		dlock_loop_wake(t->client);
		t->status = DLOCK_OK;
		break;
	default: t->status = DLOCK_EINVAL;
	}
	atomic_store(&t->done, 1);
	return NULL;
}

void lr_thread_start(lr_thread *t)
{
	atomic_init(&t->done, 0);
	t->status = DLOCK_STATUS_COUNT_;
	CU_ASSERT_FATAL(pthread_create(&t->thread, NULL, thread_main, t) == 0);
}

int lr_thread_done(void *arg)
{
	return atomic_load(&((lr_thread *)arg)->done);
}

dlock_status lr_thread_join(lr_thread *t)
{
	pthread_join(t->thread, NULL);
	return t->status;
}

void lr_name(char *out, size_t len, const char *tag)
{
	static atomic_uint counter;
	snprintf(out, len, "loop-%ld-%u-%s", (long)getpid(), atomic_fetch_add(&counter, 1) + 1, tag);
}
