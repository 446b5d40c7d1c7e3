/*
 * kv:// on a loop client's loop (driver contract version 9): the
 * non-blocking forms of try_acquire(), release(), extend() and check(),
 * which the core calls on the application's loop thread, so that a
 * waiting acquisition holds no thread.  They send the same scripts as the
 * blocking methods (kv_driver.c builds the commands and reads the
 * answers for both) through hiredis's asynchronous API, whose descriptor
 * the loop watches (dlock_io_watch()), and end with dlock_call_done().
 *
 *   kv_loop_open()     in open(), when dlock_host_io() gives a loop: the
 *                      server's address, resolved once (reconnecting never
 *                      blocks on a name lookup), a timer, a connection
 *   *_start()          send the script; its reply callback (privdata: the
 *                      lock) ends the call
 *   kv_loop_close()    in close(): free the connection and the timer
 *
 * The connection: one per client, AUTH first when the URI has a password.
 * hiredis asks for read and write interest through ac->ev (addRead,
 * delWrite...); we keep both and watch the descriptor for their union,
 * and call redisAsyncHandleRead/Write when it is ready.  Each call is
 * bounded by the URI's io_timeout: one timer is set for the oldest call
 * waiting on the connection (answers come in order).  When it expires, or
 * the server closes the connection, or connecting fails, the connection
 * is dropped: hiredis calls every pending callback with no reply, each of
 * those calls ends with DLOCK_ECONNECT (DLOCK_EAUTH when the password was
 * refused), and the next call connects again.  As in the blocking
 * try_acquire(), an acquisition whose answer was lost on a connection
 * that had connected first sends the owner-only release of its attempt
 * (the script may have run) on the next connection, then ends with
 * DLOCK_ECONNECT and retry->transient.  Wake-ups are armed as the
 * blocking try_acquire() arms them (kv_acquire_cmd()), and woken by the
 * subscriber thread.
 *
 * Ownership: the client owns its struct kv_loop, the loop owns the live
 * connection (struct kv_conn, freed in hiredis's ev.cleanup, after the
 * last callback; a dropped connection is finished before the drop
 * returns).  A lock's struct kv_op holds its call.
 * Threads: the loop's thread only (the contract's dlock_io rule); the
 * blocking methods of kv_driver.c may run beside it on other threads,
 * sharing nothing here but the client's read-only fields and the
 * wake-ups (sub_mu).  Errors: messages name the server by the masked URI.
 */
#define _POSIX_C_SOURCE 200809L /* getaddrinfo, getnameinfo */

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/async.h>

#include "kv_driver_internal.h"

struct kv_conn;

struct kv_loop {
	struct kv_client *c;
	dlock_io *io;
	char addr[256];         /* the server's address, numeric (an IPv6 one with its scope fits) */
	struct kv_conn *conn;   /* the live connection, NULL: the next call connects */
	dlock_io_timer *timer;  /* the deadline of the oldest call waiting on `conn` */
};

struct kv_conn {
	struct kv_loop *lp;
	redisAsyncContext *ac;
	int fd;
	unsigned events;          /* what hiredis asked for (DLOCK_IO_READ, DLOCK_IO_WRITE): what is watched */
	int refused;              /* the loop would not watch `fd`: drop it at the timer's next turn */
	int in_ready;             /* inside conn_ready(): ev.cleanup leaves the freeing to it */
	int gone;                 /* ev.cleanup ran */
	struct kv_op *head, *tail; /* the calls sent, in the order of their answers */
	dlock_status why_st;      /* set when we drop it: what its calls end with */
	char why[96];
};

static const char *const op_name[] = {
	[KV_OP_ACQUIRE] = "acquire", [KV_OP_UNDO] = "release", [KV_OP_RELEASE] = "release",
	[KV_OP_EXTEND] = "extend", [KV_OP_CHECK] = "check",
};

static void conn_drop(struct kv_conn *k, dlock_status st, const char *why);

/* ------------------------------------------------------------ the timer */

/* Set the timer for the oldest call on the live connection (or stop it); drops the connection if it cannot. */
static void timer_update(struct kv_loop *lp)
{
	struct kv_conn *k = lp->conn;
	int64_t ms = -1;
	if (k && k->refused) {
		ms = 0;
	} else if (k && k->head) {
		int64_t left = k->head->deadline_ns - dlock_monotonic_ns();
		ms = left <= 0 ? 0 : (left + 999999) / 1000000;
	}
	if (dlock_io_timer_set(lp->timer, ms) != DLOCK_OK && ms >= 0)
		conn_drop(k, DLOCK_ECONNECT, "no timer for its calls (out of memory)"); /* never an unbounded call */
}

static void timer_fire(void *arg)
{
	struct kv_loop *lp = arg;
	struct kv_conn *k = lp->conn;
	char why[64];
	if (k && k->refused) {
		conn_drop(k, DLOCK_ECONNECT, "the loop cannot watch the connection");
	} else if (k && k->head && dlock_monotonic_ns() >= k->head->deadline_ns) {
		snprintf(why, sizeof why, "no answer within %lld ms", (long long)lp->c->io_timeout_ms);
		conn_drop(k, DLOCK_ECONNECT, why);
	} else {
		timer_update(lp); /* fired early, or its call was answered */
	}
}

/* ------------------------------------------------------------ hiredis's events on the loop */

static void conn_ready(void *arg, int fd, unsigned events)
{
	struct kv_conn *k = arg;
	(void)fd;
	k->in_ready = 1;
	if (events & (DLOCK_IO_READ | DLOCK_IO_ERROR)) /* also where a failed connect shows */
		redisAsyncHandleRead(k->ac);
	if (!k->gone && (events & DLOCK_IO_WRITE))
		redisAsyncHandleWrite(k->ac);
	k->in_ready = 0;
	if (k->gone)
		free(k);
}

/* Watch the descriptor for `events`: what hiredis wants now. */
static void ev_want(struct kv_conn *k, unsigned events)
{
	if (events == k->events || k->gone)
		return;
	k->events = events;
	if (dlock_io_watch(k->lp->io, k->fd, events, conn_ready, k) != DLOCK_OK && !k->refused) {
		k->refused = 1; /* dropped by the timer, not here inside hiredis; if it cannot be set, at the deadline */
		if (k->lp->conn == k)
			dlock_io_timer_set(k->lp->timer, 0);
	}
}

static void ev_add_read(void *p)
{
	struct kv_conn *k = p;
	ev_want(k, k->events | DLOCK_IO_READ);
}

static void ev_del_read(void *p)
{
	struct kv_conn *k = p;
	ev_want(k, k->events & ~(unsigned)DLOCK_IO_READ);
}

static void ev_add_write(void *p)
{
	struct kv_conn *k = p;
	ev_want(k, k->events | DLOCK_IO_WRITE);
}

static void ev_del_write(void *p)
{
	struct kv_conn *k = p;
	ev_want(k, k->events & ~(unsigned)DLOCK_IO_WRITE);
}

/* hiredis frees the context: every callback has run; the descriptor is still open. */
static void ev_cleanup(void *p)
{
	struct kv_conn *k = p;
	ev_want(k, 0);
	k->gone = 1;
	k->ac = NULL;
	if (k->lp->conn == k) {
		k->lp->conn = NULL;
		timer_update(k->lp);
	}
	if (!k->in_ready)
		free(k);
}

/* ------------------------------------------------------------ the connection */

/* Drop `k`: its calls end with `st` and `why`.  `k` may be freed when this returns. */
static void conn_drop(struct kv_conn *k, dlock_status st, const char *why)
{
	if (k->lp->conn == k)
		k->lp->conn = NULL; /* calls from now on connect again */
	if (!k->why[0]) {
		k->why_st = st;
		snprintf(k->why, sizeof k->why, "%s", why);
	}
	redisAsyncFree(k->ac); /* at once, or when the reply callback we are in returns */
}

/* AUTH's answer: the password refused drops the connection, and its calls end with DLOCK_EAUTH. */
static void on_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
	const redisReply *r = reply;
	(void)privdata;
	if (r && r->type != REDIS_REPLY_STATUS)
		conn_drop(ac->ev.data, DLOCK_EAUTH, "the server refused the password");
}

/* A new connection, the live one; NULL with a message. */
static struct kv_conn *conn_new(struct kv_loop *lp, dlock_status *st, dlock_error *err)
{
	struct kv_client *c = lp->c;
	struct kv_conn *k = calloc(1, sizeof *k);
	if (!k) {
		*st = dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
		return NULL;
	}
	redisAsyncContext *ac = redisAsyncConnect(lp->addr, c->port); /* numeric: does not block */
	if (!ac || ac->err) {
		*st = dlock_error_set(err, DLOCK_ECONNECT, "%s: cannot connect: %s", c->label,
		                      ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		free(k);
		return NULL;
	}
	kv_cloexec(ac->c.fd);
	*k = (struct kv_conn){ .lp = lp, .ac = ac, .fd = ac->c.fd };
	ac->ev.data = k;
	ac->ev.addRead = ev_add_read;
	ac->ev.delRead = ev_del_read;
	ac->ev.addWrite = ev_add_write;
	ac->ev.delWrite = ev_del_write;
	ac->ev.cleanup = ev_cleanup;
	lp->conn = k;
	const char *auth[] = { "AUTH", c->password };
	if (c->password && redisAsyncCommandArgv(ac, on_auth, NULL, 2, auth, NULL) != REDIS_OK) {
		conn_drop(k, DLOCK_ENOMEM, "out of memory");
		*st = dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
		return NULL;
	}
	ev_add_write(k); /* writable: connected (or failed), which hiredis learns from its first write event */
	*st = DLOCK_OK;
	return k;
}

/* Send `cmd` for the call of `lk` (lk->op set) on the live connection, connecting first if there is none. */
static dlock_status op_send(struct kv_loop *lp, struct kv_lock *lk, struct kv_cmd *cmd, dlock_error *err);

/* ------------------------------------------------------------ answers */

/* Take `op` off its connection's queue. */
static void queue_remove(struct kv_conn *k, struct kv_op *op)
{
	struct kv_op *prev = NULL;
	for (struct kv_op *o = k->head; o; prev = o, o = o->next) {
		if (o != op)
			continue;
		if (prev)
			prev->next = o->next;
		else
			k->head = o->next;
		if (k->tail == o)
			k->tail = prev;
		o->next = NULL;
		return;
	}
}

/* The status a call gets from `r`, its answer: NULL when the connection `ac` went first. */
static dlock_status reply_status(struct kv_client *c, redisAsyncContext *ac, const redisReply *r, dlock_error *err)
{
	const struct kv_conn *k = ac->ev.data;
	if (r)
		return kv_reply_error(c, r, err);
	if (k->why[0])
		return dlock_error_set(err, k->why_st, "%s: %s", c->label, k->why);
	return dlock_error_set(err, DLOCK_ECONNECT, "%s: %s: %s", c->label,
	                       ac->c.flags & REDIS_CONNECTED ? "no answer" : "cannot connect",
	                       ac->errstr ? ac->errstr : "connection closed");
}

/* An acquisition's answer was lost after it was sent: remove what may be ours (the script may have run).  1: sent. */
static int undo_start(struct kv_loop *lp, struct kv_lock *lk, dlock_status failed)
{
	struct kv_cmd cmd;
	dlock_error ignored;
	kv_owned_cmd(lp->c, lk, "release", 0, &cmd);
	lk->op.kind = KV_OP_UNDO;
	lk->op.failed = failed;
	return op_send(lp, lk, &cmd, &ignored) == DLOCK_OK;
}

/*
 * A script's answer, or NULL (the connection went), for the call of the
 * lock `privdata`: what its blocking form would return, into the core's
 * out-parameters, then dlock_call_done().
 */
static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct kv_lock *lk = privdata;
	struct kv_op *op = &lk->op;
	struct kv_conn *k = ac->ev.data;
	struct kv_loop *lp = k->lp;
	struct kv_client *c = lp->c;
	const redisReply *r = reply;
	queue_remove(k, op);
	if (!r && lp->conn == k)
		lp->conn = NULL; /* hiredis is dropping it: what is sent from here goes to a new connection */
	dlock_error ignored;
	dlock_status st = reply_status(c, ac, r, op->kind == KV_OP_UNDO ? &ignored : op->err);
	switch (op->kind) {
	case KV_OP_ACQUIRE:
		if (st == DLOCK_OK) {
			st = kv_acquire_answer(c, lk, r, op->sent_ns, op->retry, op->out, op->err);
		} else if (st == DLOCK_ECONNECT) {
			op->retry->transient = 1; /* the server may be back before the deadline */
			if ((ac->c.flags & REDIS_CONNECTED) && undo_start(lp, lk, st))
				return; /* (never connected: never sent) */
		}
		break;
	case KV_OP_UNDO: /* done or not, the hold ends with its lease */
		st = op->failed;
		break;
	case KV_OP_RELEASE:
	case KV_OP_EXTEND:
	case KV_OP_CHECK:
		if (st == DLOCK_OK)
			st = kv_owned_answer(c, op_name[op->kind], r, op->err);
		if (op->kind == KV_OP_CHECK)
			st = kv_check_answer(c, st, op->err);
		break;
	}
	timer_update(lp);
	dlock_call_done(op->call, st);
}

static dlock_status op_send(struct kv_loop *lp, struct kv_lock *lk, struct kv_cmd *cmd, dlock_error *err)
{
	struct kv_client *c = lp->c;
	struct kv_op *op = &lk->op;
	dlock_status st = DLOCK_OK;
	struct kv_conn *k = lp->conn ? lp->conn : conn_new(lp, &st, err);
	if (!k)
		return st;
	op->next = NULL;
	op->deadline_ns = dlock_monotonic_ns() + c->io_timeout_ms * 1000000;
	/* The first call waiting sets the timer, before it is sent: once sent, a call can only end by its callback. */
	if (!k->head && dlock_io_timer_set(lp->timer, k->refused ? 0 : c->io_timeout_ms) != DLOCK_OK)
		return dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	if (redisAsyncCommandArgv(k->ac, on_reply, lk, cmd->argc, cmd->argv, cmd->len) != REDIS_OK) {
		timer_update(lp);
		return dlock_error_set(err, DLOCK_ECONNECT, "%s: cannot send the %s", c->label, op_name[op->kind]);
	}
	if (k->tail)
		k->tail->next = op;
	else
		k->head = op;
	k->tail = op;
	return DLOCK_OK;
}

/* ------------------------------------------------------------ the methods */

dlock_status kv_try_acquire_start(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                  dlock_acquired *out, dlock_error *err, dlock_call *call)
{
	struct kv_client *c = backend;
	struct kv_lock *lk = lkp;
	struct kv_cmd cmd;
	dlock_status st = kv_acquire_cmd(c, lk, lease_ms, w, retry, &cmd, err);
	if (st != DLOCK_OK)
		return st;
	lk->op = (struct kv_op){ .kind = KV_OP_ACQUIRE, .call = call, .retry = retry, .out = out, .err = err,
		                 .sent_ns = dlock_monotonic_ns() };
	st = op_send(c->loop, lk, &cmd, err);
	if (st == DLOCK_ECONNECT)
		retry->transient = 1; /* nothing was sent: nothing to remove */
	return st;
}

/* The owner-only script for `kind` on `lk`. */
static dlock_status owned_start(struct kv_client *c, struct kv_lock *lk, enum kv_op_kind kind, int64_t lease_ms,
                                dlock_error *err, dlock_call *call)
{
	struct kv_cmd cmd;
	kv_owned_cmd(c, lk, op_name[kind], lease_ms, &cmd);
	lk->op = (struct kv_op){ .kind = kind, .call = call, .err = err };
	return op_send(c->loop, lk, &cmd, err);
}

dlock_status kv_release_start(void *backend, void *lk, dlock_error *err, dlock_call *call)
{
	return owned_start(backend, lk, KV_OP_RELEASE, 0, err, call);
}

dlock_status kv_extend_start(void *backend, void *lk, int64_t lease_ms, dlock_error *err, dlock_call *call)
{
	return owned_start(backend, lk, KV_OP_EXTEND, lease_ms, err, call);
}

dlock_status kv_check_start(void *backend, void *lk, dlock_error *err, dlock_call *call)
{
	dlock_status st = owned_start(backend, lk, KV_OP_CHECK, 0, err, call);
	return st == DLOCK_OK ? st : kv_check_answer(backend, st, err);
}

/* ------------------------------------------------------------ open, close */

/* The first address of c->host as hiredis would pick it (IPv4 first), in numeric form. */
static dlock_status resolve(struct kv_loop *lp, dlock_error *err)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int rc = getaddrinfo(lp->c->host, NULL, &hints, &ai);
	if (rc != 0) {
		hints.ai_family = AF_INET6;
		rc = getaddrinfo(lp->c->host, NULL, &hints, &ai);
	}
	if (rc == 0)
		rc = getnameinfo(ai->ai_addr, ai->ai_addrlen, lp->addr, sizeof lp->addr, NULL, 0, NI_NUMERICHOST);
	if (ai)
		freeaddrinfo(ai);
	if (rc != 0)
		return dlock_error_set(err, DLOCK_ECONNECT, "%s: cannot resolve the host: %s", lp->c->label,
		                       gai_strerror(rc));
	return DLOCK_OK;
}

dlock_status kv_loop_open(struct kv_client *c, dlock_io *io, dlock_error *err)
{
	struct kv_loop *lp = calloc(1, sizeof *lp);
	if (!lp)
		return dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	lp->c = c;
	lp->io = io;
	c->loop = lp;
	dlock_status st = resolve(lp, err);
	if (st == DLOCK_OK && dlock_io_timer_new(io, timer_fire, lp, &lp->timer) != DLOCK_OK)
		st = dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	if (st == DLOCK_OK)
		conn_new(lp, &st, err); /* AUTH first; its failure would show in the first call */
	return st; /* on failure, close() frees what was made */
}

void kv_loop_close(struct kv_client *c)
{
	struct kv_loop *lp = c->loop;
	if (!lp)
		return;
	if (lp->conn)
		conn_drop(lp->conn, DLOCK_ECONNECT, "the client closed"); /* no call waits on it; a reconnect may */
	dlock_io_timer_free(lp->timer);
	free(lp);
	c->loop = NULL;
}
