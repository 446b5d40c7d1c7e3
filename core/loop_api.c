/*
 * The public face of a loop client's reactor (dlock/loop.h): what the
 * application's loop calls.  A descriptor of the client's driver (driver
 * contract 9) goes to the driver's callback first; then every entry runs
 * what was posted and, after a close has been called back, ends the
 * client's reactor; none waits.
 *
 * Threads: the loop's, except dlock_loop_wake() (any, also a signal
 * handler).  Errors: none; a client that is not a loop client, or whose
 * close has finished, is ignored (-1 for the descriptor).
 */
#include "async.h"
#include "reactor.h"

void dlock_loop_ready(dlock_client *c, int fd, unsigned events)
{
	if (!c || !c->reactor)
		return;
	/* A driver's descriptor: its callback first (what it ends is posted), then the turn. */
	if (dlock_reactor_owns_fd(c->reactor, fd) || dlock_reactor_dispatch(c->reactor, fd, events))
		dlock_async_run(c);
}

void dlock_loop_timer_fired(dlock_client *c)
{
	if (c && c->reactor)
		dlock_reactor_hook_timer_fired(c->reactor);
	dlock_async_run(c);
}

int dlock_loop_fd(const dlock_client *c)
{
	return c && c->reactor ? dlock_reactor_fd(c->reactor) : -1;
}

int64_t dlock_loop_timeout_ms(dlock_client *c)
{
	return c && c->reactor ? dlock_reactor_timeout_ms(c->reactor) : -1;
}

void dlock_loop_run(dlock_client *c)
{
	if (c && c->reactor)
		dlock_reactor_poll_io(c->reactor); /* the drivers' descriptors share the pull-mode epoll set */
	dlock_async_run(c);
}

void dlock_loop_wake(dlock_client *c)
{
	if (c && c->reactor)
		dlock_reactor_wake(c->reactor);
}
