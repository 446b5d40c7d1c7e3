/*
 * The public face of a loop client's reactor (dlock/loop.h): what the
 * application's loop calls.  Every entry runs what was posted and, after a
 * close has been called back, ends the client's reactor; none waits.
 *
 * Threads: the loop's, except dlock_loop_wake() (any, also a signal
 * handler).  Errors: none; a client that is not a loop client, or whose
 * close has finished, is ignored (-1 for the descriptor).
 */
#include "async.h"
#include "reactor.h"

void dlock_loop_ready(dlock_client *c, int fd, unsigned events)
{
	(void)events;
	if (c && c->reactor && dlock_reactor_owns_fd(c->reactor, fd))
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
	dlock_async_run(c);
}

void dlock_loop_wake(dlock_client *c)
{
	if (c && c->reactor)
		dlock_reactor_wake(c->reactor);
}
