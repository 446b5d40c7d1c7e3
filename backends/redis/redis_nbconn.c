/*
 * A loop client's connection on its loop: one non-blocking socket to the
 * client's one server, driven by the loop's readiness and a timer of the
 * loop, never waiting in a system call.  The bytes are those of every
 * connection of the backend (redis_io.c: our formatter, hiredis's reader,
 * plain or TLS), so a command and a reply mean here what they mean on a
 * blocking connection.
 *
 *   closed       no socket; the next request connects
 *   connecting   connect() in progress to one of the addresses resolved at
 *                open (dlock_redis_resolve(): reconnecting never looks a
 *                name up); writable: done, or the next address is tried
 *   handshake    rediss: SSL_connect() steps, each watching what OpenSSL
 *                wants (WANT_READ or WANT_WRITE)
 *   ready        readable always watched (answers, and a server that
 *                closes an idle connection); writable while commands wait
 *                to be written, or while a TLS read wants it
 *
 * A new connection queues AUTH and SELECT first (what a blocking
 * connection sends: dlock_redis_hello_args()), then the requests, which
 * may be queued before the connection is up; they are written once AUTH
 * and SELECT have been answered, so that none runs as the wrong user or
 * in the wrong database.
 * Replies come in the order of the requests: the head of the queue takes
 * the next one.  A refused AUTH or SELECT, an I/O error, the end of the
 * stream, or the oldest request's deadline (io_timeout after it was sent;
 * the timer is set for the head only) drops the connection: the loop stops
 * watching the descriptor before it is closed (the loop's rule), and every
 * request still queued ends with the failure's status and message, saying
 * whether it may have reached the server (its bytes were written).  The
 * next request connects again.  Under TLS every read goes on until OpenSSL
 * wants the socket again (dlock_redis_read_some()), so no decrypted reply
 * is left in it while the loop sleeps.
 *
 * Ownership: the client owns this; requests are their callers'.  Threads:
 * the loop's only.  Errors: as the blocking connections give them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_nbconn.h"

enum nb_state { NB_CLOSED, NB_CONNECTING, NB_HANDSHAKE, NB_READY };

struct nb_hello {
	struct redis_nbreq rq; /* first member */
	struct redis_nbconn *nb;
	int step;              /* REDIS_HELLO_AUTH, REDIS_HELLO_SELECT */
};

struct redis_nbconn {
	dlock_io *io;
	const struct redis_cfg *cfg;
	struct redis_endpoint ep;
	struct redis_addrs addrs;
	dlock_io_timer *timer;
	struct redis_conn *conn;     /* the connection (its socket, TLS, reader, queued bytes), NULL when closed */
	enum nb_state state;
	int addr;                    /* the address being connected to */
	unsigned hs_want;            /* handshake: what OpenSSL waits for */
	unsigned watched;            /* what the loop watches the descriptor for */
	int refused;                 /* the loop would not watch the descriptor: dropped at the timer's next turn */
	int closing;                 /* freed: what an answer sends now fails */
	uint64_t written;            /* bytes written on `conn` */
	uint64_t hello_end;          /* bytes of `conn`'s AUTH and SELECT: nothing after them is written ... */
	int hello_waiting;           /* ... while this many of them wait for their answers */
	unsigned gen;                /* counts the drops: a caller sees whether its connection went */
	struct redis_nbreq *head, *tail;
	struct nb_hello hello[2];    /* the connection's AUTH and SELECT while they wait for their answers */
	void (*on_push)(void *arg, redisReply *r);          /* a subscriber's: replies to no request */
	void (*on_drop)(void *arg, const dlock_error *why); /* a subscriber's: its connection dropped */
	void *push_arg;
};

static void nb_ready(void *arg, int fd, unsigned events);

const char *dlock_redis_nbconn_label(const struct redis_nbconn *nb)
{
	return nb->ep.label;
}

/* ------------------------------------------------------------ the timer, the watch */

/* The timer at the oldest request's deadline (at once when the loop refused the descriptor), or stopped. */
static void timer_update(struct redis_nbconn *nb)
{
	int64_t ms = -1;
	if (nb->refused) {
		ms = 0;
	} else if (nb->head && nb->head->deadline_ns != INT64_MAX) {
		int64_t left = nb->head->deadline_ns - dlock_monotonic_ns();
		ms = left <= 0 ? 0 : (left + REDIS_NS_PER_MS - 1) / REDIS_NS_PER_MS;
	}
	dlock_io_timer_set(nb->timer, ms); /* out of memory: the request is bounded at the next update */
}

/* Bytes of the queue that may be written now: none after AUTH and SELECT until they are answered. */
static size_t sendable(const struct redis_nbconn *nb)
{
	if (nb->hello_waiting == 0)
		return nb->conn->outlen;
	return nb->hello_end > nb->written ? (size_t)(nb->hello_end - nb->written) : 0;
}

/* Watch the descriptor for what the state needs now. */
static void rewatch(struct redis_nbconn *nb)
{
	if (!nb->conn || nb->refused)
		return;
	unsigned want = DLOCK_IO_WRITE;
	if (nb->state == NB_HANDSHAKE) {
		want = nb->hs_want;
	} else if (nb->state == NB_READY) {
		want = DLOCK_IO_READ;
		if ((sendable(nb) > 0 && !nb->conn->write_wants_read) || nb->conn->read_wants_write)
			want |= DLOCK_IO_WRITE;
	}
	if (want == nb->watched)
		return;
	if (dlock_io_watch(nb->io, nb->conn->fd, want, nb_ready, nb) != DLOCK_OK) {
		nb->refused = 1; /* dropped by the timer, never inside a caller's send */
		timer_update(nb);
		return;
	}
	nb->watched = want;
}

/* ------------------------------------------------------------ dropping */

/* The descriptor unwatched, then closed; nothing is queued any more.  The next request connects. */
static void nb_close(struct redis_nbconn *nb)
{
	if (nb->conn) {
		dlock_io_watch(nb->io, nb->conn->fd, 0, NULL, NULL); /* before close(): the loop's rule */
		dlock_redis_conn_free(nb->conn);
	}
	nb->conn = NULL;
	nb->state = NB_CLOSED;
	nb->watched = 0;
	nb->refused = 0;
	nb->written = 0;
	nb->hello_waiting = 0;
	nb->gen++;
	nb->head = nb->tail = NULL;
	timer_update(nb);
}

/* Drop the connection: every request ends with `st` and `why`; `unsent`: none of them ran (a refused AUTH). */
static void nb_drop(struct redis_nbconn *nb, dlock_status st, const dlock_error *why, int unsent)
{
	struct redis_nbreq *rq = nb->head;
	uint64_t written = nb->written;
	nb_close(nb);
	while (rq) { /* detached first: an answer may send again, on a new connection */
		struct redis_nbreq *next = rq->next;
		rq->next = NULL;
		rq->answer(rq, NULL, st, why, !unsent && written > rq->start);
		rq = next;
	}
	if (nb->on_drop && !nb->closing)
		nb->on_drop(nb->push_arg, why);
}

/* Drop after an I/O failure of the connection, with the status and message of a blocking one. */
static void nb_drop_io(struct redis_nbconn *nb)
{
	dlock_error why;
	dlock_status st = dlock_redis_io_error(nb->conn, &nb->ep, &why);
	nb_drop(nb, st, &why, 0);
}

static void timer_fire(void *arg)
{
	struct redis_nbconn *nb = arg;
	dlock_error why;
	if (nb->refused) {
		dlock_error_set(&why, DLOCK_ECONNECT, "redis %s: the loop cannot watch the connection", nb->ep.label);
		nb_drop(nb, DLOCK_ECONNECT, &why, 0);
	} else if (nb->head && dlock_monotonic_ns() >= nb->head->deadline_ns) {
		dlock_error_set(&why, DLOCK_ECONNECT, "redis %s: no answer within %lld ms (io_timeout)", nb->ep.label,
		                (long long)nb->cfg->io_timeout_ms);
		nb_drop(nb, DLOCK_ECONNECT, &why, 0);
	} else {
		timer_update(nb); /* its request was answered meanwhile */
	}
}

/* ------------------------------------------------------------ the queue */

static void queue_push(struct redis_nbconn *nb, struct redis_nbreq *rq)
{
	rq->next = NULL;
	if (nb->tail)
		nb->tail->next = rq;
	else
		nb->head = rq;
	nb->tail = rq;
}

static struct redis_nbreq *queue_pop(struct redis_nbconn *nb)
{
	struct redis_nbreq *rq = nb->head;
	if (rq) {
		nb->head = rq->next;
		if (!nb->head)
			nb->tail = NULL;
		rq->next = NULL;
	}
	return rq;
}

static int64_t deadline(const struct redis_nbconn *nb)
{
	int64_t io = nb->cfg->io_timeout_ms;
	return io > 0 ? dlock_monotonic_ns() + io * REDIS_NS_PER_MS : INT64_MAX;
}

/* Append a command for `rq` to the connection and queue it.  REDIS_ERR: out of memory (not queued). */
static int queue_command(struct redis_nbconn *nb, struct redis_nbreq *rq,
                         int (*append)(struct redis_conn *conn, void *arg), void *arg)
{
	rq->start = nb->written + nb->conn->outlen;
	if (append(nb->conn, arg) != REDIS_OK)
		return REDIS_ERR;
	rq->deadline_ns = deadline(nb);
	queue_push(nb, rq);
	return REDIS_OK;
}

/* ------------------------------------------------------------ the handshake */

/* AUTH's or SELECT's answer: refused, the connection is dropped, and its requests end with that status. */
static void hello_answer(struct redis_nbreq *rq, redisReply *r, dlock_status st, const dlock_error *why,
                         int maybe_ran)
{
	struct nb_hello *h = (struct nb_hello *)rq;
	struct redis_nbconn *nb = h->nb;
	dlock_error refused;
	(void)why, (void)maybe_ran;
	st = r ? dlock_redis_hello_answer(nb->cfg, h->step, r, &nb->ep, &refused) : DLOCK_OK;
	freeReplyObject(r);
	if (st != DLOCK_OK)
		nb_drop(nb, st, &refused, 1);
	else if (r)
		nb->hello_waiting--; /* once the last is answered, the requests behind them are written */
}

static int append_args(struct redis_conn *conn, void *arg)
{
	const struct redis_args *a = arg;
	return dlock_redis_append_argv(conn, a->argc, a->argv, a->len);
}

/* Queue what a new connection sends first: AUTH, SELECT. */
static int queue_hello(struct redis_nbconn *nb)
{
	for (int step = REDIS_HELLO_AUTH; step <= REDIS_HELLO_SELECT; step++) {
		struct redis_args a;
		char buf[24];
		if (!dlock_redis_hello_args(nb->cfg, step, &a, buf))
			continue;
		nb->hello[step] = (struct nb_hello){ .rq.answer = hello_answer, .nb = nb, .step = step };
		if (queue_command(nb, &nb->hello[step].rq, append_args, &a) != REDIS_OK)
			return REDIS_ERR;
		nb->hello_waiting++;
	}
	nb->hello_end = nb->written + nb->conn->outlen;
	return REDIS_OK;
}

/* One step of TLS's handshake; done, the connection is ready. */
static void handshake(struct redis_nbconn *nb)
{
	dlock_error why;
	dlock_status st = DLOCK_ECONNECT;
	int rc = dlock_redis_tls_connect_step(nb->conn->ssl, &nb->conn->cert_missing, nb->ep.label, &nb->hs_want, &st,
	                                      &why);
	if (rc < 0)
		nb_drop(nb, st, &why, 1);
	else if (rc > 0)
		nb->state = NB_READY;
}

/* The socket connected: TLS first for rediss, else ready. */
static void connected(struct redis_nbconn *nb)
{
	if (!nb->cfg->tls) {
		nb->state = NB_READY;
		return;
	}
	dlock_error why;
	SSL *ssl = NULL;
	dlock_status st = dlock_redis_tls_session(nb->cfg->tls, nb->conn->fd, nb->ep.host, nb->ep.label, &ssl, &why);
	if (st != DLOCK_OK) {
		nb_drop(nb, st, &why, 1);
		return;
	}
	/* Writes of what the socket takes now, from a buffer that moves as commands are added. */
	SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	nb->conn->ssl = ssl;
	nb->state = NB_HANDSHAKE;
	handshake(nb);
}

/* A socket connecting to the next address that takes one, swapped into the connection; -1 when none does. */
static int connect_next(struct redis_nbconn *nb, int *saved)
{
	for (; nb->addr < nb->addrs.n; nb->addr++) {
		int fd = -1;
		if (dlock_redis_connect_start(&nb->addrs, nb->addr, &fd) >= 0)
			return fd; /* connected or in progress: writable either way once it is done */
		*saved = errno;
	}
	return -1;
}

/* The connect in progress ended: connected, or on to the next address (its failure ends the requests). */
static void connect_done(struct redis_nbconn *nb)
{
	if (dlock_redis_connect_result(nb->conn->fd) == 0) {
		connected(nb);
		return;
	}
	int saved = errno;
	dlock_io_watch(nb->io, nb->conn->fd, 0, NULL, NULL);
	nb->watched = 0;
	close(nb->conn->fd);
	nb->addr++;
	nb->conn->fd = connect_next(nb, &saved);
	if (nb->conn->fd < 0) {
		dlock_error why;
		dlock_error_set(&why, DLOCK_ECONNECT, "redis %s: cannot connect: %s", nb->ep.label, strerror(saved));
		nb_drop(nb, DLOCK_ECONNECT, &why, 1);
	}
}

/* A new connection, connecting; its AUTH and SELECT queued.  DLOCK_ECONNECT when no address takes one. */
static dlock_status nb_open(struct redis_nbconn *nb, dlock_error *err)
{
	int saved = ECONNREFUSED;
	nb->addr = 0;
	int fd = connect_next(nb, &saved);
	if (fd < 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: cannot connect: %s", nb->ep.label, strerror(saved));
	nb->conn = dlock_redis_conn_new(fd, NULL); /* closes fd when it fails */
	if (!nb->conn)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", nb->ep.label);
	nb->conn->nonblocking = 1;
	nb->state = NB_CONNECTING; /* even when connected at once: writable, its next turn goes on */
	nb->written = 0;
	if (queue_hello(nb) != REDIS_OK) {
		nb_close(nb);
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", nb->ep.label);
	}
	return DLOCK_OK;
}

/* ------------------------------------------------------------ reading, writing */

/* The answers read: each to the head of the queue, in order; then what a failure of the connection means. */
static void read_answers(struct redis_nbconn *nb)
{
	unsigned gen = nb->gen;
	dlock_redis_read_some(nb->conn); /* a failure is seen below, after the replies it read */
	for (;;) {
		void *reply = NULL;
		if (dlock_redis_buffered_reply(nb->conn, &reply) != REDIS_OK || !reply)
			break;
		struct redis_nbreq *rq = queue_pop(nb);
		if (!rq && nb->on_push) {
			nb->on_push(nb->push_arg, reply);
			freeReplyObject(reply);
			if (gen != nb->gen)
				return; /* it dropped the connection */
			continue;
		}
		if (!rq) {
			freeReplyObject(reply);
			dlock_error why;
			dlock_error_set(&why, DLOCK_ECONNECT, "redis %s: an answer to no request", nb->ep.label);
			nb_drop(nb, DLOCK_ECONNECT, &why, 0);
			return;
		}
		rq->answer(rq, reply, DLOCK_OK, NULL, 1);
		if (gen != nb->gen)
			return; /* the answer dropped it (a refused AUTH) */
	}
	if (nb->conn->err)
		nb_drop_io(nb);
	else
		timer_update(nb);
}

static void nb_ready(void *arg, int fd, unsigned events)
{
	struct redis_nbconn *nb = arg;
	unsigned gen = nb->gen;
	(void)fd, (void)events;
	switch (nb->state) {
	case NB_CONNECTING:
		connect_done(nb);
		break;
	case NB_HANDSHAKE:
		handshake(nb);
		break;
	case NB_READY:
		/* Both, whatever the event said: a TLS read may need the socket writable, a write readable,
		 * and each returns at once when the socket has nothing for it. */
		read_answers(nb);
		break;
	case NB_CLOSED:
		return;
	}
	if (gen == nb->gen && nb->state == NB_READY && sendable(nb) > 0 &&
	    dlock_redis_send_some(nb->conn, sendable(nb), &nb->written) != REDIS_OK)
		nb_drop_io(nb);
	if (gen == nb->gen)
		rewatch(nb);
}

/* ------------------------------------------------------------ the interface */

/* A connection to write on now, connecting first when there is none. */
static dlock_status nb_usable(struct redis_nbconn *nb, dlock_error *err)
{
	if (nb->closing)
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: the client closed", nb->ep.label);
	if (!nb->conn) {
		dlock_status st = nb_open(nb, err);
		if (st != DLOCK_OK)
			return st;
	}
	if (nb->conn->err) /* failed, and dropped once the answers it read are taken */
		return dlock_redis_io_error(nb->conn, &nb->ep, err);
	return DLOCK_OK;
}

dlock_status dlock_redis_nbconn_send(struct redis_nbconn *nb, struct redis_nbreq *rq,
                                     int (*append)(struct redis_conn *conn, void *arg), void *arg, dlock_error *err)
{
	dlock_status st = nb_usable(nb, err);
	if (st != DLOCK_OK)
		return st;
	int first = nb->head == NULL;
	if (queue_command(nb, rq, append, arg) != REDIS_OK)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", nb->ep.label);
	if (first)
		timer_update(nb);
	rewatch(nb); /* written at the loop's next turn, with whatever else is sent meanwhile */
	return DLOCK_OK;
}

dlock_status dlock_redis_nbconn_append(struct redis_nbconn *nb, int (*append)(struct redis_conn *conn, void *arg),
                                       void *arg, dlock_error *err)
{
	dlock_status st = nb_usable(nb, err);
	if (st != DLOCK_OK)
		return st;
	if (append(nb->conn, arg) != REDIS_OK)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis %s: out of memory", nb->ep.label);
	rewatch(nb);
	return DLOCK_OK;
}

void dlock_redis_nbconn_set_push(struct redis_nbconn *nb, void (*on_push)(void *arg, redisReply *r),
                                 void (*on_drop)(void *arg, const dlock_error *why), void *arg)
{
	nb->on_push = on_push;
	nb->on_drop = on_drop;
	nb->push_arg = arg;
}

void dlock_redis_nbconn_reset(struct redis_nbconn *nb)
{
	void (*on_drop)(void *, const dlock_error *) = nb->on_drop;
	dlock_error why;
	dlock_error_set(&why, DLOCK_ECONNECT, "redis %s: connection dropped", nb->ep.label);
	nb->on_drop = NULL;
	nb_drop(nb, DLOCK_ECONNECT, &why, 0);
	nb->on_drop = on_drop;
}

dlock_status dlock_redis_nbconn_new(dlock_io *io, const struct redis_endpoint *ep, const struct redis_cfg *cfg,
                                    struct redis_nbconn **out, dlock_error *err)
{
	struct redis_nbconn *nb = calloc(1, sizeof *nb);
	if (!nb)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	nb->io = io;
	nb->cfg = cfg;
	nb->ep = *ep;
	dlock_status st = dlock_redis_resolve(ep, &nb->addrs, err);
	if (st == DLOCK_OK && dlock_io_timer_new(io, timer_fire, nb, &nb->timer) != DLOCK_OK)
		st = dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	if (st != DLOCK_OK) {
		free(nb);
		return st;
	}
	*out = nb;
	return DLOCK_OK;
}

void dlock_redis_nbconn_free(struct redis_nbconn *nb)
{
	if (!nb)
		return;
	dlock_error why;
	dlock_error_set(&why, DLOCK_ECONNECT, "redis %s: the client closed", nb->ep.label);
	nb->closing = 1;
	nb_drop(nb, DLOCK_ECONNECT, &why, 0);
	dlock_io_timer_free(nb->timer);
	free(nb);
}
