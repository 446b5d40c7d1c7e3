/*
 * A loop client's PostgreSQL connection on its loop (pg_nbconn.h).
 *
 * Connecting: PQconnectStartParams with the keywords of pg_conn.c, plus
 * hostaddr= resolved once at open (pg_loop.c), so that libpq never calls
 * the blocking getaddrinfo inside PQconnectPoll (host= stays, for TLS).
 * PQconnectPoll runs each time the socket is ready as it asked
 * (PGRES_POLLING_READING or WRITING); the socket may change between two
 * polls (another address, TLS refused and tried without), so the old one
 * is unwatched first.  Once up, the connection is refused on a hot standby
 * as the blocking path refuses it (dlock_pg_connected) and made
 * non-blocking.  A failure to connect maps to the blocking path's status
 * (dlock_pg_connect_failed: EAUTH for a refused password ...).
 *
 * Statements: the prepared sets the statement needs first, as pg_exec.c
 * sends them (one PQsendQuery of b->prepare[missing]; a failure sends
 * DEALLOCATE ALL, as there), then the statement (dlock_pg_send_stmt);
 * PQflush until it answers 0 (write watched while it answers 1);
 * PQconsumeInput when readable, then PQgetResult while !PQisBusy until it
 * answers NULL; the result sorted out by dlock_pg_outcome, as the blocking
 * path does.  Statements with `begin` or `unsynced` (a pipeline) are not
 * sent here: pg_loop.c sends none.  The read watch stays while the
 * connection lives, also when nothing is due, so a session the server ends
 * (idle timeout, pg_terminate_backend) is seen at once.
 *
 * libpq closes its socket when a read finds the server gone, so a
 * readable socket is peeked first (MSG_PEEK): at its end it is unwatched
 * before libpq reads it.
 *
 * A connection that fails (its socket closed, an error of libpq, no answer
 * within io_timeout) is dead: every lock on it is reported lost once
 * (dlock_pg_pool_broken), and every request ends with DLOCK_ECONNECT (or
 * the refusal's status) on the timer's next turn, never inside a send.
 * Then the pool's settle() decides when to free it.
 *
 * Ownership, threads, errors: pg_nbconn.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pg_nbconn.h"

#define NS_PER_MS 1000000LL

enum { PHASE_PREPARE = 0, PHASE_DEALLOC = 1, PHASE_STMT = 2 };

static void ready(void *arg, int fd, unsigned events);
static void step(struct dlock_pg_nbconn *nb);

/* Watch `fd` for `events` (and stop watching the old descriptor first when it changed). */
static void watch(struct dlock_pg_nbconn *nb, int fd, unsigned events)
{
	if (nb->fd >= 0 && nb->fd != fd) {
		dlock_io_watch(nb->loop->io, nb->fd, 0, ready, nb);
		nb->fd = -1;
		nb->events = 0;
	}
	if (fd < 0 || (fd == nb->fd && events == nb->events))
		return;
	if (dlock_io_watch(nb->loop->io, fd, events, ready, nb) == DLOCK_OK) {
		nb->fd = fd;
		nb->events = events;
	}
}

static void arm_timer(struct dlock_pg_nbconn *nb)
{
	int64_t at = nb->connecting ? nb->connect_deadline_ns
	             : nb->head && nb->head->sent_ns && nb->b->io_timeout_ms > 0
	                     ? nb->head->sent_ns + nb->b->io_timeout_ms * NS_PER_MS
	                     : -1;
	if (nb->failed)
		at = 0;
	int64_t ms = at < 0 ? -1 : at == 0 ? 0 : (at - dlock_monotonic_ns()) / NS_PER_MS + 1;
	dlock_io_timer_set(nb->timer, ms < 0 && at >= 0 ? 0 : ms);
}

/* The connection is gone with `st` and a message: its locks are lost, its requests end on the next turn. */
static void fail(struct dlock_pg_nbconn *nb, dlock_status st, const char *msg)
{
	if (!nb->failed) {
		nb->failed = 1;
		nb->fail_st = st;
		snprintf(nb->fail_msg, sizeof nb->fail_msg, "%s", msg);
	}
	nb->c.dead = 1;
	if (!nb->c.broken)
		dlock_pg_pool_broken(nb->b, &nb->c, nb->fail_msg);
	watch(nb, -1, 0);
	arm_timer(nb);
}

/* libpq lost the connection: the blocking path's message (dlock_pg_lost). */
static void lost(struct dlock_pg_nbconn *nb)
{
	dlock_error why;
	dlock_pg_lost(nb->b, &nb->c, &why);
	fail(nb, DLOCK_ECONNECT, why.msg);
}

/* End every request with the failure (the timer's turn, or the client closing). */
static void end_all(struct dlock_pg_nbconn *nb)
{
	while (nb->head) {
		struct dlock_pg_nbreq *rq = nb->head;
		nb->head = rq->next;
		if (!nb->head)
			nb->tail = NULL;
		rq->next = NULL;
		dlock_error_set(rq->err, nb->fail_st, "%s", nb->fail_msg);
		rq->done(rq, nb->fail_st, NULL, "");
	}
	PQclear(nb->keep);
	nb->keep = NULL;
}

static void fire(void *arg)
{
	struct dlock_pg_nbconn *nb = arg;
	struct dlock_pg_nbloop *loop = nb->loop;
	pthread_mutex_lock(&loop->mu);
	if (!nb->failed) {
		char msg[DLOCK_ERROR_MAX];
		if (nb->connecting)
			snprintf(msg, sizeof msg, "%s: no connection within %lld ms", nb->b->masked,
			         (long long)nb->b->open_timeout_ms);
		else if (nb->head && nb->head->sent_ns)
			snprintf(msg, sizeof msg, "%s: no answer from the server within %lld ms", nb->b->masked,
			         (long long)nb->b->io_timeout_ms);
		else
			goto out;
		fail(nb, DLOCK_ECONNECT, msg);
	}
	end_all(nb);
	loop->settle(loop, nb);
out:
	pthread_cond_broadcast(&loop->quiet);
	pthread_mutex_unlock(&loop->mu);
}

/* ------------------------------------------------------------ sending */

/* Send what the head request needs next; 0 when libpq refused (the connection is lost). */
static int send_head(struct dlock_pg_nbconn *nb)
{
	struct dlock_pg_nbreq *rq = nb->head;
	const struct dlock_pg_backend *b = nb->b;
	unsigned missing = b->prepare[DLOCK_PG_SET_PLAIN] && rq->s.prepared ? dlock_pg_sets_missing(&nb->c, &rq->s) : 0;
	int ok;
	if (rq->phase == PHASE_PREPARE && missing) {
		ok = PQsendQuery(nb->c.pg, b->prepare[missing]);
	} else if (rq->phase == PHASE_DEALLOC) {
		ok = PQsendQuery(nb->c.pg, "DEALLOCATE ALL");
	} else {
		rq->phase = PHASE_STMT;
		ok = dlock_pg_send_stmt(b, &nb->c, &rq->s);
	}
	if (!ok)
		return 0;
	if (!rq->sent_ns)
		rq->sent_ns = dlock_monotonic_ns();
	int f = PQflush(nb->c.pg);
	if (f < 0)
		return 0;
	watch(nb, PQsocket(nb->c.pg), DLOCK_IO_READ | (f ? DLOCK_IO_WRITE : 0));
	return 1;
}

/* Start the next request when nothing is in flight. */
static void step(struct dlock_pg_nbconn *nb)
{
	if (nb->connecting || nb->failed || !nb->head || nb->head->sent_ns)
		return;
	if (!send_head(nb))
		lost(nb);
	arm_timer(nb);
}

/* The head request's phase ended with `r` (owned, NULL: no result): its next phase, or its end. */
static void phase_done(struct dlock_pg_nbconn *nb, PGresult *r)
{
	struct dlock_pg_nbreq *rq = nb->head;
	PGresult *res = NULL;
	char sqlstate[6] = "";
	dlock_status st = dlock_pg_outcome(nb->b, &nb->c, r, &res, sqlstate, rq->err);
	if (rq->phase == PHASE_PREPARE || rq->phase == PHASE_DEALLOC) {
		PQclear(res);
		if (rq->phase == PHASE_PREPARE && st == DLOCK_OK) {
			nb->c.prepared |= dlock_pg_sets_missing(&nb->c, &rq->s);
			rq->phase = PHASE_STMT;
		} else if (rq->phase == PHASE_PREPARE && !nb->c.dead) {
			rq->phase = PHASE_DEALLOC; /* as pg_exec.c: the session starts afresh, then the error ends it */
			rq->failed_st = st;
			memcpy(rq->sqlstate, sqlstate, sizeof sqlstate);
		} else {
			nb->c.prepared = 0;
			if (st != DLOCK_OK)
				nb->c.dead = 1;
			st = rq->failed_st;
			goto end;
		}
		if (nb->c.dead || !send_head(nb))
			lost(nb);
		arm_timer(nb);
		return;
	}
	memcpy(rq->sqlstate, sqlstate, sizeof sqlstate);
end:
	nb->head = rq->next;
	if (!nb->head)
		nb->tail = NULL;
	rq->next = NULL;
	if (nb->c.dead && !nb->failed) {
		dlock_error why;
		dlock_error_set(&why, DLOCK_ECONNECT, "%s", rq->err->msg);
		fail(nb, DLOCK_ECONNECT, why.msg); /* the others end on the next turn */
	}
	rq->done(rq, st, res, rq->sqlstate);
	if (nb->c.dead && !nb->failed) /* its caller ended the session (an undo that failed) */
		fail(nb, DLOCK_ECONNECT, "connection closed: its session's state was unsure");
	step(nb);
	arm_timer(nb);
}

/* Read what came: the head request's results while libpq has them whole. */
static void readable(struct dlock_pg_nbconn *nb)
{
	char peek;
	ssize_t n = recv(nb->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		watch(nb, -1, 0); /* the server is gone: unwatched before libpq closes the socket as it reads that */
	if (!PQconsumeInput(nb->c.pg)) {
		lost(nb);
		return;
	}
	while (!nb->failed && nb->head && nb->head->sent_ns && !PQisBusy(nb->c.pg)) {
		PGresult *r = PQgetResult(nb->c.pg);
		if (r) {
			nb->keep = dlock_pg_keep_result(nb->keep, r);
			continue;
		}
		r = nb->keep;
		nb->keep = NULL;
		phase_done(nb, r);
	}
	if (!nb->failed && PQstatus(nb->c.pg) == CONNECTION_BAD)
		lost(nb);
}

/* ------------------------------------------------------------ connecting */

static void connect_poll(struct dlock_pg_nbconn *nb)
{
	PostgresPollingStatusType ps = PQconnectPoll(nb->c.pg);
	dlock_error why;
	if (ps == PGRES_POLLING_FAILED) {
		watch(nb, -1, 0); /* before the socket closes */
		dlock_status st = dlock_pg_connect_failed(nb->b, nb->c.pg, &why); /* PQfinish'd: the socket is closed */
		nb->c.pg = NULL;
		nb->connecting = 0;
		fail(nb, st, why.msg);
		return;
	}
	if (ps == PGRES_POLLING_OK) {
		int fd = PQsocket(nb->c.pg);
		dlock_status st = dlock_pg_connected(nb->b, nb->c.pg, &why);
		if (st != DLOCK_OK) { /* unwatched (fail) before it is closed (settle, then free) */
			nb->connecting = 0;
			fail(nb, st, why.msg);
			return;
		}
		nb->connecting = 0;
		if (PQsetnonblocking(nb->c.pg, 1) != 0) {
			lost(nb);
			return;
		}
		watch(nb, fd, DLOCK_IO_READ);
		step(nb);
		arm_timer(nb);
		return;
	}
	watch(nb, PQsocket(nb->c.pg), ps == PGRES_POLLING_READING ? DLOCK_IO_READ : DLOCK_IO_WRITE);
}

static void ready(void *arg, int fd, unsigned events)
{
	struct dlock_pg_nbconn *nb = arg;
	struct dlock_pg_nbloop *loop = nb->loop;
	(void)fd;
	pthread_mutex_lock(&loop->mu);
	if (nb->failed)
		goto out;
	if (nb->connecting) {
		connect_poll(nb);
	} else {
		if (events & DLOCK_IO_WRITE) {
			int f = PQflush(nb->c.pg);
			if (f < 0)
				lost(nb);
			else
				watch(nb, PQsocket(nb->c.pg), DLOCK_IO_READ | (f ? DLOCK_IO_WRITE : 0));
		}
		if (!nb->failed && (events & (DLOCK_IO_READ | DLOCK_IO_ERROR)))
			readable(nb);
	}
	if (!nb->failed && dlock_pg_nbconn_quiet(nb))
		loop->settle(loop, nb);
out:
	pthread_cond_broadcast(&loop->quiet);
	pthread_mutex_unlock(&loop->mu);
}

/* ------------------------------------------------------------ the API */

dlock_status dlock_pg_nbconn_new(struct dlock_pg_backend *b, struct dlock_pg_nbloop *loop,
                                 struct dlock_pg_nbconn **out, dlock_error *err)
{
	*out = NULL;
	struct dlock_pg_nbconn *nb = calloc(1, sizeof *nb);
	if (!nb)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	nb->b = b;
	nb->loop = loop;
	nb->fd = -1;
	nb->c.wake_fd = -1;
	nb->c.idle_set_ms = -1;
	nb->c.on_loop = 1;
	pthread_mutex_init(&nb->c.mu, NULL);
	if (dlock_io_timer_new(loop->io, fire, nb, &nb->timer) != DLOCK_OK) {
		dlock_pg_nbconn_free(nb);
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	}
	nb->c.pg = dlock_pg_connect_start(&loop->params);
	if (!nb->c.pg || PQstatus(nb->c.pg) == CONNECTION_BAD) {
		dlock_status st = dlock_pg_connect_failed(b, nb->c.pg, err);
		nb->c.pg = NULL;
		dlock_pg_nbconn_free(nb);
		return st;
	}
	nb->connecting = 1;
	nb->connect_deadline_ns = dlock_monotonic_ns() + b->open_timeout_ms * NS_PER_MS;
	watch(nb, PQsocket(nb->c.pg), DLOCK_IO_WRITE);
	arm_timer(nb);
	*out = nb;
	return DLOCK_OK;
}

dlock_status dlock_pg_nbconn_send(struct dlock_pg_nbconn *nb, struct dlock_pg_nbreq *rq, dlock_error *err)
{
	if (nb->failed || nb->c.dead)
		return dlock_error_set(err, DLOCK_ECONNECT, "%s: connection lost earlier", nb->b->masked);
	rq->next = NULL;
	rq->sent_ns = 0;
	rq->phase = PHASE_PREPARE;
	rq->sqlstate[0] = '\0';
	if (nb->tail)
		nb->tail->next = rq;
	else
		nb->head = rq;
	nb->tail = rq;
	step(nb); /* sends at once when nothing is in flight: its end still comes from the loop */
	return DLOCK_OK;
}

int dlock_pg_nbconn_quiet(const struct dlock_pg_nbconn *nb)
{
	return nb->head == NULL;
}

void dlock_pg_nbconn_free(struct dlock_pg_nbconn *nb)
{
	if (!nb)
		return;
	if (nb->head) {
		if (!nb->failed) {
			nb->failed = 1;
			nb->fail_st = DLOCK_ECONNECT;
			snprintf(nb->fail_msg, sizeof nb->fail_msg, "%s: the client closed", nb->b->masked);
		}
		end_all(nb);
	}
	PQclear(nb->keep);
	watch(nb, -1, 0); /* before PQfinish closes the socket */
	if (nb->c.pg)
		PQfinish(nb->c.pg);
	dlock_io_timer_free(nb->timer);
	pthread_mutex_destroy(&nb->c.mu);
	free(nb);
}
