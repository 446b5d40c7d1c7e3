/*
 * The reactor of a loop client: the eventfd through which work reaches the
 * loop's thread, and the descriptor the application watches.
 *
 * Push mode registers the eventfd with the application's `watch` hook;
 * pull mode puts it in an epoll set whose descriptor the application
 * polls (so that descriptors of the client's own connections can join it
 * later without the application seeing a change).  Work posted from any
 * thread is queued under the reactor's mutex and the eventfd is written;
 * the loop drains the eventfd and runs the queue as it stood, so that work
 * posted by that work runs on the next turn, never starving the loop.
 *
 * Ownership: the reactor belongs to its client and is destroyed on the
 * loop's thread when the client's close completes.  Threads: see reactor.h.
 */
#include "reactor.h"
#include "registry.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct dlock_reactor {
	dlock_client *client;
	dlock_loop_hooks hooks;
	int push;
	int wake_fd;    /* eventfd: readable while work is posted */
	void *wake_slot; /* push mode: the application's pointer for wake_fd */
	int epoll_fd;   /* pull mode: the descriptor the application watches; -1 in push mode */
	uint64_t thread; /* dlock_registry_thread_id() of the loop's thread */

	pthread_mutex_t mu; /* guards the queue */
	struct dlock_reactor_item *head, *tail;

	/* Timers: a binary min-heap by due time, the loop's thread only. */
	struct dlock_reactor_timer **heap;
	size_t n, cap;
	int64_t armed_ms_due; /* push mode: the due time the hook's timer was last armed for; INT64_MAX: none */
	int running_timers;   /* inside dlock_reactor_run_timers(): the hook is called once at its end */

	/* The driver's descriptors (a few per client: a linear array), the loop's thread only. */
	struct reactor_watch *watches;
	size_t nwatches, capwatches;
};

/* One descriptor a driver watches through the reactor. */
struct reactor_watch {
	int fd;
	unsigned events;
	void (*ready)(void *arg, int fd, unsigned events);
	void *arg;
	void *slot; /* push mode: the application's pointer for fd */
};

dlock_status dlock_reactor_create(dlock_client *c, const dlock_loop_hooks *hooks, struct dlock_reactor **out,
                                  dlock_error *err)
{
	*out = NULL;
	if (hooks && hooks->version != DLOCK_LOOP_HOOKS_VERSION)
		return dlock_error_set(err, DLOCK_EVERSION, "dlock_loop_hooks.version is not DLOCK_LOOP_HOOKS_VERSION");
	if (hooks && (!hooks->watch || !hooks->timer))
		return dlock_error_set(err, DLOCK_EINVAL, "dlock_loop_hooks needs both watch and timer");
	struct dlock_reactor *r = calloc(1, sizeof *r);
	if (!r)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	dlock_status st = DLOCK_EIO;
	r->client = c;
	r->epoll_fd = -1;
	r->armed_ms_due = INT64_MAX;
	r->thread = dlock_registry_thread_id();
	pthread_mutex_init(&r->mu, NULL);
	r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->wake_fd < 0) {
		dlock_error_set(err, DLOCK_EIO, "eventfd: %s", strerror(errno));
		goto fail;
	}
	if (hooks) {
		r->hooks = *hooks;
		r->push = 1;
		if (r->hooks.watch(c, r->hooks.userdata, r->wake_fd, DLOCK_IO_READ, &r->wake_slot) != 0) {
			r->push = 0; /* nothing to take back from the hooks */
			dlock_error_set(err, DLOCK_EIO, "the loop's watch hook refused the client's descriptor");
			goto fail;
		}
	} else {
		r->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = r->wake_fd };
		if (r->epoll_fd < 0 || epoll_ctl(r->epoll_fd, EPOLL_CTL_ADD, r->wake_fd, &ev) != 0) {
			dlock_error_set(err, DLOCK_EIO, "epoll: %s", strerror(errno));
			goto fail;
		}
	}
	*out = r;
	return DLOCK_OK;
fail:
	if (r->epoll_fd >= 0)
		close(r->epoll_fd);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	pthread_mutex_destroy(&r->mu);
	free(r);
	return st;
}

void dlock_reactor_destroy(struct dlock_reactor *r)
{
	if (!r)
		return;
	if (r->push) {
		r->hooks.timer(r->client, r->hooks.userdata, -1);
		/* A driver stops watching before its close; what it left is taken back here all the same. */
		for (size_t i = 0; i < r->nwatches; i++)
			r->hooks.watch(r->client, r->hooks.userdata, r->watches[i].fd, 0, &r->watches[i].slot);
		r->hooks.watch(r->client, r->hooks.userdata, r->wake_fd, 0, &r->wake_slot);
	}
	free(r->watches);
	if (r->epoll_fd >= 0)
		close(r->epoll_fd);
	close(r->wake_fd);
	if (r->push && r->hooks.cleanup)
		r->hooks.cleanup(r->hooks.userdata);
	pthread_mutex_destroy(&r->mu);
	free(r->heap);
	free(r);
}

void dlock_reactor_wake(struct dlock_reactor *r)
{
	uint64_t one = 1;
	/* EAGAIN means the counter is already non-zero: the loop will turn anyway. */
	ssize_t n = write(r->wake_fd, &one, sizeof one);
	(void)n;
}

void dlock_reactor_post(struct dlock_reactor *r, struct dlock_reactor_item *item)
{
	item->next = NULL;
	pthread_mutex_lock(&r->mu);
	int was_empty = r->head == NULL;
	if (r->tail)
		r->tail->next = item;
	else
		r->head = item;
	r->tail = item;
	pthread_mutex_unlock(&r->mu);
	if (was_empty)
		dlock_reactor_wake(r);
}

int dlock_reactor_run(struct dlock_reactor *r)
{
	uint64_t count;
	while (read(r->wake_fd, &count, sizeof count) > 0)
		;
	pthread_mutex_lock(&r->mu);
	struct dlock_reactor_item *batch = r->head;
	r->head = r->tail = NULL;
	pthread_mutex_unlock(&r->mu);
	int ran = batch != NULL;
	while (batch) {
		struct dlock_reactor_item *it = batch;
		batch = it->next;
		it->run(it); /* may free it */
	}
	return ran;
}

int dlock_reactor_is_loop_thread(const struct dlock_reactor *r)
{
	return r && r->thread == dlock_registry_thread_id();
}

int dlock_reactor_fd(const struct dlock_reactor *r)
{
	return r ? r->epoll_fd : -1;
}

int dlock_reactor_wake_fd(const struct dlock_reactor *r)
{
	return r->wake_fd;
}

int dlock_reactor_owns_fd(const struct dlock_reactor *r, int fd)
{
	return r && fd == r->wake_fd;
}

/* ------------------------------------------------------------ timers */

static void heap_place(struct dlock_reactor *r, size_t i, struct dlock_reactor_timer *t)
{
	r->heap[i] = t;
	t->pos = i + 1;
}

static void heap_up(struct dlock_reactor *r, size_t i)
{
	struct dlock_reactor_timer *t = r->heap[i];
	while (i > 0 && r->heap[(i - 1) / 2]->due_ns > t->due_ns) {
		heap_place(r, i, r->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_place(r, i, t);
}

static void heap_down(struct dlock_reactor *r, size_t i)
{
	struct dlock_reactor_timer *t = r->heap[i];
	for (;;) {
		size_t k = 2 * i + 1;
		if (k >= r->n)
			break;
		if (k + 1 < r->n && r->heap[k + 1]->due_ns < r->heap[k]->due_ns)
			k++;
		if (r->heap[k]->due_ns >= t->due_ns)
			break;
		heap_place(r, i, r->heap[k]);
		i = k;
	}
	heap_place(r, i, t);
}

/* Push mode: keep the application's timer on the first due time. */
static void rearm(struct dlock_reactor *r)
{
	if (!r->push || r->running_timers)
		return;
	int64_t due = r->n ? r->heap[0]->due_ns : INT64_MAX;
	if (due == r->armed_ms_due)
		return;
	r->armed_ms_due = due;
	r->hooks.timer(r->client, r->hooks.userdata, dlock_reactor_timeout_ms(r));
}

void dlock_reactor_timer_clear(struct dlock_reactor *r, struct dlock_reactor_timer *t)
{
	if (!t->pos)
		return;
	size_t i = t->pos - 1;
	t->pos = 0;
	struct dlock_reactor_timer *last = r->heap[--r->n];
	if (i < r->n) {
		heap_place(r, i, last);
		heap_up(r, i);
		heap_down(r, last->pos - 1);
	}
	rearm(r);
}

dlock_status dlock_reactor_timer_set(struct dlock_reactor *r, struct dlock_reactor_timer *t, int64_t due_ns)
{
	if (t->pos) {
		t->due_ns = due_ns;
		heap_up(r, t->pos - 1);
		heap_down(r, t->pos - 1);
		rearm(r);
		return DLOCK_OK;
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		struct dlock_reactor_timer **v = realloc(r->heap, cap * sizeof *v);
		if (!v)
			return DLOCK_ENOMEM;
		r->heap = v;
		r->cap = cap;
	}
	t->due_ns = due_ns;
	r->heap[r->n] = t;
	heap_up(r, r->n++);
	rearm(r);
	return DLOCK_OK;
}

int64_t dlock_reactor_timeout_ms(const struct dlock_reactor *r)
{
	if (!r->n)
		return -1;
	int64_t left = r->heap[0]->due_ns - dlock_monotonic_ns();
	if (left <= 0)
		return 0;
	return (left + 999999) / 1000000; /* rounded up: waking early would only spin */
}

int dlock_reactor_run_timers(struct dlock_reactor *r)
{
	int ran = 0;
	int64_t now = dlock_monotonic_ns();
	r->running_timers = 1; /* one hook call after the run, not one per timer */
	while (r->n && r->heap[0]->due_ns <= now) {
		struct dlock_reactor_timer *t = r->heap[0];
		dlock_reactor_timer_clear(r, t);
		t->run(t);
		ran = 1;
	}
	r->running_timers = 0;
	if (ran)
		r->armed_ms_due = INT64_MIN; /* the application's one-shot timer has fired: arm it again */
	rearm(r);
	return ran;
}

void dlock_reactor_hook_timer_fired(struct dlock_reactor *r)
{
	r->armed_ms_due = INT64_MIN; /* fired early, nothing is due: without this the timer would stay unarmed */
}

/* ------------------------------------------------------------ descriptors */

static struct reactor_watch *find_watch(struct dlock_reactor *r, int fd)
{
	for (size_t i = 0; i < r->nwatches; i++)
		if (r->watches[i].fd == fd)
			return &r->watches[i];
	return NULL;
}

static uint32_t epoll_events(unsigned events)
{
	return (events & DLOCK_IO_READ ? EPOLLIN : 0u) | (events & DLOCK_IO_WRITE ? EPOLLOUT : 0u);
}

static void forget_watch(struct dlock_reactor *r, struct reactor_watch *w)
{
	if (r->push)
		r->hooks.watch(r->client, r->hooks.userdata, w->fd, 0, &w->slot);
	else
		(void)epoll_ctl(r->epoll_fd, EPOLL_CTL_DEL, w->fd, NULL);
	*w = r->watches[--r->nwatches];
}

dlock_status dlock_reactor_watch(struct dlock_reactor *r, int fd, unsigned events,
                                 void (*ready)(void *arg, int fd, unsigned events), void *arg)
{
	events &= DLOCK_IO_READ | DLOCK_IO_WRITE;
	if (fd < 0 || fd == r->wake_fd || (events && !ready))
		return DLOCK_EINVAL;
	struct reactor_watch *w = find_watch(r, fd);
	if (!events) {
		if (w)
			forget_watch(r, w);
		return DLOCK_OK;
	}
	int added = 0;
	if (!w) {
		if (r->nwatches == r->capwatches) {
			size_t cap = r->capwatches ? r->capwatches * 2 : 4;
			struct reactor_watch *v = realloc(r->watches, cap * sizeof *v);
			if (!v)
				return DLOCK_ENOMEM;
			r->watches = v;
			r->capwatches = cap;
		}
		w = &r->watches[r->nwatches++];
		*w = (struct reactor_watch){ .fd = fd };
		added = 1;
	}
	w->ready = ready;
	w->arg = arg;
	if (w->events != events) {
		int rc;
		if (r->push) {
			rc = r->hooks.watch(r->client, r->hooks.userdata, fd, events, &w->slot);
		} else {
			struct epoll_event ev = { .events = epoll_events(events), .data.fd = fd };
			rc = epoll_ctl(r->epoll_fd, added ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
		}
		if (rc != 0) {
			if (added)
				r->nwatches--; /* the loop never took it: nothing to take back */
			return DLOCK_EIO;
		}
		w->events = events;
	}
	return DLOCK_OK;
}

int dlock_reactor_dispatch(struct dlock_reactor *r, int fd, unsigned events)
{
	struct reactor_watch *w = find_watch(r, fd);
	if (!w)
		return 0;
	/* A hang-up or error reads as readable: the driver's read finds it. */
	if (events & DLOCK_IO_ERROR)
		events |= w->events & DLOCK_IO_READ ? DLOCK_IO_READ : w->events;
	events &= w->events | DLOCK_IO_ERROR;
	if (!(events & (DLOCK_IO_READ | DLOCK_IO_WRITE)))
		return 1;
	void (*ready)(void *, int, unsigned) = w->ready;
	void *arg = w->arg; /* the callback may change or drop the watch (the array moves) */
	ready(arg, fd, events);
	return 1;
}

void dlock_reactor_poll_io(struct dlock_reactor *r)
{
	if (r->push || r->nwatches == 0)
		return;
	struct epoll_event ev[16];
	int n = epoll_wait(r->epoll_fd, ev, 16, 0);
	for (int i = 0; i < n; i++) {
		if (ev[i].data.fd == r->wake_fd)
			continue; /* drained by dlock_reactor_run() */
		unsigned e = (ev[i].events & EPOLLIN ? DLOCK_IO_READ : 0u) | (ev[i].events & EPOLLOUT ? DLOCK_IO_WRITE : 0u) |
		             (ev[i].events & (EPOLLERR | EPOLLHUP) ? DLOCK_IO_ERROR : 0u);
		dlock_reactor_dispatch(r, ev[i].data.fd, e); /* gone meanwhile (an earlier callback): nothing */
	}
}

void dlock_reactor_wait(struct dlock_reactor *r)
{
	struct pollfd p[1 + 16];
	nfds_t n = 0;
	p[n++] = (struct pollfd){ .fd = r->wake_fd, .events = POLLIN };
	for (size_t i = 0; i < r->nwatches && n < 1 + 16; i++)
		p[n++] = (struct pollfd){ .fd = r->watches[i].fd,
			                  .events = (short)((r->watches[i].events & DLOCK_IO_READ ? POLLIN : 0) |
			                                    (r->watches[i].events & DLOCK_IO_WRITE ? POLLOUT : 0)) };
	int64_t t = dlock_reactor_timeout_ms(r);
	if (poll(p, n, t > INT_MAX ? INT_MAX : (int)t) <= 0)
		return;
	for (nfds_t i = 1; i < n; i++) {
		if (!p[i].revents)
			continue;
		unsigned e = (p[i].revents & POLLIN ? DLOCK_IO_READ : 0u) | (p[i].revents & POLLOUT ? DLOCK_IO_WRITE : 0u) |
		             (p[i].revents & (POLLERR | POLLHUP | POLLNVAL) ? DLOCK_IO_ERROR : 0u);
		dlock_reactor_dispatch(r, p[i].fd, e); /* dropped meanwhile by an earlier callback: nothing */
	}
}
