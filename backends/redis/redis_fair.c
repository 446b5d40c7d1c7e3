/*
 * Algorithm "fair" (fair=1): waiting in a queue kept in Redis, served by
 * the releases.  Its attempts, release, extend and check are the single
 * instance's (redis_lock.c), whose release on such a client is the
 * handoff script.
 *
 * Without it, a release deletes the key and publishes a message that wakes
 * every waiter, and the first SET to reach the server wins: a round trip
 * and two thread wake-ups between a release and the next grant, and no
 * order.  With it, a waiter puts itself in the lock's queue (the enqueue
 * script) and blocks in BLPOP on a list of its own, its grant key; the
 * release itself (the handoff script) gives the lock to the first live
 * waiter and pushes onto that waiter's grant key, so the server answers
 * the waiter's BLPOP at once: a handoff costs half a round trip and wakes
 * one thread, and waiters are served in the order they queued.
 *
 * Connections: a blocked BLPOP holds its connection, so the waiters take
 * theirs from a pool of their own (the client's `waits`), never from the
 * one that releases and renewals need.  When all of those are busy, a
 * waiter sleeps and looks again at each refresh instead.  Cancelling shuts
 * the socket down under the BLPOP (dlock_wait_set_interrupt).
 *
 * Liveness: a queued waiter runs the enqueue script again every
 * refresh_ms (a quarter of its lease, between FAIR_REFRESH_MIN_MS and
 * FAIR_REFRESH_MAX_MS), which moves its deadline to 3 * refresh_ms ahead.
 * A waiter past its deadline is dropped and never granted.  A waiter that
 * dies within its deadline may still be granted the lock, but a grant
 * holds it for the waiter's claim window only (FAIR_CLAIM_REFRESHES *
 * refresh_ms, at most the lease): a live waiter claims it at once — the
 * extend script pipelined behind its BLPOP, which the server runs as
 * soon as the grant unblocks the BLPOP, or its next look — and a dead one
 * leaves it to expire, for the next look to grant the next live waiter.
 * So a waiter that dies costs the others a claim window and a look, not a
 * lease.  The window covers a look's wait (at most refresh_ms): a waiter
 * sleeping through the pooled path still claims in time.
 *
 * Clients that do not queue (fair=0, or a version whose default that was)
 * release with a message on the lock's channel, and grant nobody: so a
 * queued waiter also watches the channel, and a message interrupts its
 * BLPOP (its socket shut down, as a cancellation does), for a look that
 * finds the key free.  Queueing releases grant the first waiter and send
 * no message while anyone is queued, so only such releases interrupt.
 *
 * A grant missed (a connection lost in BLPOP) is found by the next enqueue
 * script, which sees the key already holding our owner value.  A waiter
 * that gives up (deadline, cancel, error) withdraws with the handoff
 * script, which also passes the lock on if a release granted it meanwhile.
 *
 * The lease: a grant starts the lease on the server when the release runs,
 * which the waiter cannot see; it is after the waiter's last enqueue that
 * came back "queued" was sent, so that send time is the lease's start
 * (dlock_acquired.sent_ns): early by at most a refresh.
 *
 * A holder whose lease ran out without a release grants nothing.  The
 * waiters each look again when the holder's TTL (which the enqueue script
 * returns) has run out, and the first look to find the key free gives it
 * to the live waiter at the head of the queue, whoever makes it; so does a
 * waiter that withdraws while the key is free.  A client that does not
 * queue (a single try, or a first attempt) may take a free key before them.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "redis_key.h"
#include "redis_lock.h"
#include "redis_route.h"

#define FAIR_REFRESH_MIN_MS 20
#define FAIR_REFRESH_MAX_MS 1000
#define FAIR_DEADLINE_REFRESHES 3
#define FAIR_CLAIM_REFRESHES 2
/* The queue keys expire once every waiter's deadline has surely passed. */
#define FAIR_QUEUE_TTL_MS REDIS_FAIR_QUEUE_TTL_MS
_Static_assert(REDIS_FAIR_QUEUE_TTL_MS >= 2 * FAIR_DEADLINE_REFRESHES * FAIR_REFRESH_MAX_MS,
               "the queue keys outlive every waiter's deadline");

/* One waiter: its numbers as the enqueue script wants them, and its grant connection. */
struct fair_waiter {
	char lease[24], fence_ttl[24], deadline[24], queue_ttl[24], claim[24];
	int64_t refresh_ms;
	struct redis_conn *conn; /* from `waits`, or NULL */
	struct redis_pool *waits; /* the waits pool of the lock's server (a cluster: of its slot's master) */
	int unreachable;         /* the last look could not reach the server at all, or a cluster did not serve
	                            the slot now (TRYAGAIN, CLUSTERDOWN): look again after a backoff */
	pthread_mutex_t mu;      /* guards the two below, which the subscriber's thread uses (on_release) */
	struct redis_conn *blocked; /* `conn` while a BLPOP on it may be blocked, else NULL */
	int heard;               /* a message came while nothing was blocked, since the last enqueue was sent */
};

static void fair_waiter_init(struct fair_waiter *fw, int64_t lease_ms, int wants_token)
{
	fw->refresh_ms = lease_ms / 4;
	if (fw->refresh_ms < FAIR_REFRESH_MIN_MS)
		fw->refresh_ms = FAIR_REFRESH_MIN_MS;
	if (fw->refresh_ms > FAIR_REFRESH_MAX_MS)
		fw->refresh_ms = FAIR_REFRESH_MAX_MS;
	snprintf(fw->lease, sizeof fw->lease, "%" PRId64, lease_ms);
	snprintf(fw->fence_ttl, sizeof fw->fence_ttl, "%" PRId64,
	         wants_token ? dlock_redis_fence_ttl_ms(lease_ms) : 0); /* 0: no token */
	snprintf(fw->deadline, sizeof fw->deadline, "%" PRId64, FAIR_DEADLINE_REFRESHES * fw->refresh_ms);
	snprintf(fw->queue_ttl, sizeof fw->queue_ttl, "%d", FAIR_QUEUE_TTL_MS);
	int64_t claim_ms = FAIR_CLAIM_REFRESHES * fw->refresh_ms;
	snprintf(fw->claim, sizeof fw->claim, "%" PRId64, claim_ms < lease_ms ? claim_ms : lease_ms);
	fw->conn = NULL;
	fw->waits = NULL;
	fw->unreachable = 0;
	pthread_mutex_init(&fw->mu, NULL);
	fw->blocked = NULL;
	fw->heard = 0;
}

/*
 * A message on the lock's channel (the subscriber's thread): a release by a
 * client that does not queue, or our subscription confirmed (a release
 * before it was not heard).  Shut the blocked BLPOP's socket down: the
 * waiter drops that connection and looks again at once.  A message that
 * comes before the BLPOP blocks (the waiter is still reading the enqueue's
 * reply: the release ran after the enqueue) is kept, and set_blocked()
 * acts on it.
 */
static void on_release(void *arg)
{
	struct fair_waiter *fw = arg;
	pthread_mutex_lock(&fw->mu);
	if (fw->blocked)
		shutdown(fw->blocked->fd, SHUT_RDWR);
	else
		fw->heard = 1;
	pthread_mutex_unlock(&fw->mu);
}

/* Before the enqueue is sent: a message heard until now told of a release that the enqueue will see. */
static void forget_heard(struct fair_waiter *fw)
{
	pthread_mutex_lock(&fw->mu);
	fw->heard = 0;
	pthread_mutex_unlock(&fw->mu);
}

static void set_blocked(struct fair_waiter *fw, struct redis_conn *conn)
{
	pthread_mutex_lock(&fw->mu);
	fw->blocked = conn;
	if (conn && fw->heard) /* a release came after the enqueue: do not block for the next look */
		shutdown(conn->fd, SHUT_RDWR);
	fw->heard = 0;
	pthread_mutex_unlock(&fw->mu);
}

/* The enqueue script's arguments; `then_blpop`: our BLPOP follows it in the same pipeline. */
static void enqueue_args(const struct redis_client *c, struct redis_lock *lk, const struct fair_waiter *fw,
                         int then_blpop, struct redis_args *a)
{
	*a = (struct redis_args){ 0 };
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_arg_key(a, c, lk, "queue", NULL);
	dlock_redis_arg_key(a, c, lk, "waiters", NULL);
	dlock_redis_arg_key(a, c, lk, "fence", NULL);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_arg(a, fw->lease);
	dlock_redis_arg(a, fw->fence_ttl);
	dlock_redis_arg(a, fw->deadline);
	dlock_redis_arg(a, fw->queue_ttl);
	dlock_redis_arg_key(a, c, lk, "grant:", lk->owner);
	dlock_redis_arg(a, then_blpop ? "1" : "0");
	dlock_redis_arg(a, fw->claim);
	size_t reclen = 0;
	const char *rec = dlock_redis_record_of(c, lk, &reclen);
	dlock_redis_argn(a, rec, reclen);
	dlock_redis_arg_key(a, c, lk, "gone:", lk->owner); /* set by our withdrawal (the handoff script) */
}

/* The claim of a grant: the extend script, with the whole lease. */
static void claim_args(const struct redis_client *c, const struct redis_lock *lk, const struct fair_waiter *fw,
                       struct redis_args *a)
{
	*a = (struct redis_args){ 0 };
	dlock_redis_arg_key(a, c, lk, "lock", NULL);
	dlock_redis_arg(a, lk->owner);
	dlock_redis_arg(a, fw->lease);
}

/*
 * The enqueue script's reply: DLOCK_OK with *token and *from_send (1:
 * taken by this call, so the lease started after it was sent; 0: granted
 * by a release before it), DLOCK_EBUSY with
 * *pttl_ms (the holder's TTL; -1 none, -2 free, the earlier waiter due to
 * take it not granted), or an error.  Frees `r`.
 */
static dlock_status enqueue_result(struct redis_client *c, const struct fair_waiter *fw, redisReply *r,
                                   uint64_t *token, int *from_send, int64_t *pttl_ms, dlock_error *err)
{
	dlock_status st = DLOCK_EBUSY;
	if (r->type == REDIS_REPLY_ERROR) {
		st = dlock_redis_reply_error(r, &fw->waits->ep, "acquire", err);
	} else if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_INTEGER ||
	           r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_INTEGER) {
		st = dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to the enqueue script", c->label);
	} else if (r->element[0]->integer == 1) {
		*token = (uint64_t)r->element[1]->integer;
		*from_send = r->element[2]->integer == 1;
		st = DLOCK_OK;
	} else {
		*pttl_ms = r->element[1]->integer;
	}
	freeReplyObject(r);
	return st;
}

/* The enqueue script on a pooled connection, and no waiting. */
static dlock_status enqueue(struct redis_client *c, struct redis_lock *lk, const struct fair_waiter *fw,
                            uint64_t *token, int *from_send, int64_t *pttl_ms, dlock_error *err)
{
	struct redis_args a;
	redisReply *r = NULL;
	enqueue_args(c, lk, fw, 0, &a);
	dlock_status st = dlock_redis_run_idempotent(c, lk, REDIS_SCRIPT_ENQUEUE, 4, &a, "acquire", 1, &r, err);
	return st == DLOCK_OK ? enqueue_result(c, fw, r, token, from_send, pttl_ms, err) : st;
}

/*
 * Leave the queue, and hand on the lock if a release granted it to us
 * meanwhile.  The end of an acquisition (its deadline, its cancellation):
 * it does not wait for a cluster's slot to settle either, and what it
 * cannot do now ends as the warning says.
 */
static void withdraw(struct redis_client *c, struct redis_lock *lk)
{
	struct redis_args a;
	dlock_error ignored = { "" };
	redisReply *r = NULL;
	int nkeys;
	enum redis_script_id id = dlock_redis_handoff_args(c, lk, &a, &nkeys);
	if (dlock_redis_run_idempotent(c, lk, id, nkeys, &a, "withdraw", 1, &r, &ignored) != DLOCK_OK)
		dlock_host_log(c->cfg.host, DLOCK_LOG_WARN,
		               "redis %s: a waiter that gave up could not leave the queue (%s); it is dropped at its "
		               "deadline, and a lock granted to it meanwhile stays until its lease runs out",
		               c->label, ignored.msg);
	freeReplyObject(r);
}

/* Cancelled while blocked in BLPOP: end it by shutting the socket down (the waiter then drops it). */
static void interrupt_blpop(void *arg)
{
	const struct redis_conn *ctx = arg;
	shutdown(ctx->fd, SHUT_RDWR);
}

/* BLPOP's timeout argument for `ms`. */
static void blpop_timeout(struct redis_client *c, int64_t ms, char out[32])
{
	if (atomic_load(&c->blpop_whole_seconds))
		snprintf(out, 32, "%" PRId64, (ms + 999) / 1000);
	else
		snprintf(out, 32, "%" PRId64 ".%03d", ms / 1000, (int)(ms % 1000));
}

/* Close our own connection: a request may be pending on it. */
static void drop_conn(struct fair_waiter *fw)
{
	dlock_redis_pool_discard(fw->waits, fw->conn);
	fw->conn = NULL;
}

/* Our own connection failed or was shut down under us: drop it. */
static dlock_status conn_lost(struct redis_client *c, struct fair_waiter *fw, dlock_wait *w, dlock_error *err)
{
	dlock_status st = dlock_wait_cancelled(w) == DLOCK_ECANCELED ? DLOCK_ECANCELED
	                                                              : dlock_redis_io_error(fw->conn, &fw->waits->ep, err);
	drop_conn(fw);
	dlock_redis_route_failed(c);
	return st;
}

/*
 * BLPOP's reply: DLOCK_OK with *token (granted), DLOCK_EBUSY (timed out, a
 * decimal timeout refused, or the slot moved away under the blocked BLPOP:
 * look again, at the slot's new master).
 */
static dlock_status blpop_result(struct redis_client *c, const struct fair_waiter *fw, redisReply *r,
                                 uint64_t *token, dlock_error *err)
{
	dlock_status st = DLOCK_EBUSY;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
		*token = strtoull(r->element[1]->str, NULL, 10);
		st = DLOCK_OK;
	} else if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "timeout")) {
		atomic_store(&c->blpop_whole_seconds, 1); /* Redis < 6: "timeout is not an integer" */
	} else if (r->type == REDIS_REPLY_ERROR && !dlock_redis_slot_elsewhere(c, r)) {
		st = dlock_redis_reply_error(r, &fw->waits->ep, "BLPOP", err);
	}
	freeReplyObject(r);
	return st;
}

/*
 * The claim's reply, read after BLPOP's: 1 when the grant is ours with the
 * whole lease.  -1 when the connection failed (then dropped).
 */
static int claim_result(const struct redis_client *c, struct redis_lock *lk, struct fair_waiter *fw)
{
	struct redis_args a;
	claim_args(c, lk, fw, &a);
	redisReply *r = dlock_redis_script_read(fw->conn, REDIS_SCRIPT_EXTEND, 1, &a); /* NOSCRIPT: sent by EVAL */
	if (!r)
		return -1;
	int ours = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	return ours;
}

/*
 * The enqueue script and, in the same write, BLPOP on our grant key for up
 * to `ms` and the claim, on our own connection: one round trip to queue,
 * be woken by the grant and claim it.  DLOCK_OK (*token, *from_send),
 * DLOCK_EBUSY (*pttl_ms), ECANCELED, ECONNECT (the connection is then
 * gone), or another error.
 */
static dlock_status enqueue_and_block(struct redis_client *c, struct redis_lock *lk, struct fair_waiter *fw,
                                      int64_t ms, dlock_wait *w, uint64_t *token, int *from_send,
                                      int64_t *pttl_ms, dlock_error *err)
{
	struct redis_args a, claim;
	char secs[32];
	enqueue_args(c, lk, fw, 1, &a);
	claim_args(c, lk, fw, &claim);
	blpop_timeout(c, ms, secs);
	char grant[REDIS_KEY_MAX];
	size_t grantlen = dlock_redis_key(c, lk, "grant:", lk->owner, grant);
	const char *argv[3] = { "BLPOP", grant, secs };
	size_t len[3] = { 5, grantlen, strlen(secs) };
	forget_heard(fw);
	if (dlock_redis_script_append(fw->conn, &c->scripts, REDIS_SCRIPT_ENQUEUE, 4, &a) != REDIS_OK ||
	    dlock_redis_append_argv(fw->conn, 3, argv, len) != REDIS_OK ||
	    dlock_redis_script_append(fw->conn, &c->scripts, REDIS_SCRIPT_EXTEND, 1, &claim) != REDIS_OK)
		return conn_lost(c, fw, w, err);
	void *reply = NULL;
	dlock_wait_set_interrupt(w, interrupt_blpop, fw->conn);
	if (dlock_redis_get_reply(fw->conn, &reply) != REDIS_OK) {
		dlock_wait_set_interrupt(w, NULL, NULL);
		return conn_lost(c, fw, w, err);
	}
	if (dlock_redis_is_error(reply, "NOSCRIPT") || dlock_redis_slot_elsewhere(c, reply)) {
		/* The server lost the script (restart, SCRIPT FLUSH): the pooled path runs it by EVAL,
		 * which loads it again.  A cluster's slot moved: the pooled path follows it. */
		freeReplyObject(reply);
		dlock_wait_set_interrupt(w, NULL, NULL);
		drop_conn(fw);
		dlock_status st = enqueue(c, lk, fw, token, from_send, pttl_ms, err);
		fw->unreachable = st == DLOCK_ECONNECT;
		return st;
	}
	dlock_status st = enqueue_result(c, fw, reply, token, from_send, pttl_ms, err);
	if (st != DLOCK_OK && st != DLOCK_EBUSY) { /* the BLPOP would block for nothing */
		dlock_wait_set_interrupt(w, NULL, NULL);
		drop_conn(fw);
		return st;
	}
	/* Blocks only while we are queued: a script that took the lock fed the BLPOP. */
	reply = NULL;
	set_blocked(fw, fw->conn);
	int read = dlock_redis_get_reply(fw->conn, &reply);
	set_blocked(fw, NULL);
	dlock_wait_set_interrupt(w, NULL, NULL);
	if (read != REDIS_OK) {
		dlock_status lost = conn_lost(c, fw, w, err);
		return st == DLOCK_OK ? st : lost;
	}
	uint64_t granted = 0;
	dlock_status got = blpop_result(c, fw, reply, &granted, err);
	/* The claim ran right behind the BLPOP.  Taken by the script: the key has the lease already. */
	int ours = claim_result(c, lk, fw);
	if (ours < 0) {
		/* Whether the claim ran is unknown: the next look claims a grant that is still ours. */
		dlock_status lost = conn_lost(c, fw, w, err);
		return st == DLOCK_OK ? st : lost;
	}
	if (st != DLOCK_EBUSY)
		return st;
	if (got == DLOCK_OK && ours) {
		*token = granted;
		*from_send = 1; /* granted after the script queued us */
	}
	/* Granted but not ours by the claim: the window ran out first (the key went to nobody or the next
	 * waiter); we are out of the queue, and the next look queues us again. */
	return got == DLOCK_OK && !ours ? DLOCK_EBUSY : got;
}

/* How long to wait before looking again: the refresh, the holder's TTL, the caller's deadline. */
static int64_t wait_ms(const struct redis_client *c, const struct fair_waiter *fw, int64_t pttl_ms,
                       const dlock_wait *w)
{
	int64_t ms = fw->refresh_ms, left = dlock_wait_remaining_ms(w);
	if (pttl_ms >= 0 && pttl_ms + 1 < ms)
		ms = pttl_ms + 1;
	if (left >= 0 && left < ms)
		ms = left;
	/* The socket's own timeout must not end a BLPOP that is on time. */
	if (c->cfg.io_timeout_ms > 0 && ms > c->cfg.io_timeout_ms / 2)
		ms = c->cfg.io_timeout_ms / 2;
	return ms > 0 ? ms : 1;
}

/*
 * One look: enqueue, and wait up to `ms` for a grant, on our own connection
 * when one is free, else through the pool and asleep.  As enqueue_and_block.
 */
static dlock_status look(struct redis_client *c, struct redis_lock *lk, struct fair_waiter *fw, int64_t ms,
                         dlock_wait *w, uint64_t *token, int *from_send, int64_t *pttl_ms, dlock_error *err)
{
	dlock_error busy = { "" };
	struct redis_route rt;
	fw->unreachable = 0;
	dlock_status st = dlock_redis_route(c, lk, &rt, err);
	if (st != DLOCK_OK) {
		fw->unreachable = st == DLOCK_ECONNECT;
		return st;
	}
	/* The lock's channel, on the server that serves it now: releases that grant nobody. */
	struct redis_sub *sub = dlock_redis_route_sub(c, &rt);
	if (lk->watching && sub != lk->watch_sub) {
		dlock_redis_sub_unwatch(lk->watch_sub, &lk->watch);
		lk->watching = 0;
	}
	if (!lk->watching && sub) {
		lk->watching = 1;
		lk->watch_sub = sub;
		char chan[REDIS_KEY_MAX];
		size_t chanlen = dlock_redis_key(c, lk, "released", NULL, chan);
		dlock_redis_sub_watch(sub, &lk->watch, chan, chanlen, w, on_release, fw);
	}
	if (fw->conn && fw->waits != rt.waits) /* the slot moved to another master: block there */
		dlock_redis_pool_put(fw->waits, fw->conn);
	if (fw->waits != rt.waits)
		fw->conn = NULL;
	fw->waits = rt.waits;
	if (!fw->conn && dlock_redis_pool_try_get(fw->waits, &fw->conn, &busy) != DLOCK_OK)
		fw->conn = NULL;
	if (fw->conn)
		return enqueue_and_block(c, lk, fw, ms, w, token, from_send, pttl_ms, err);
	st = enqueue(c, lk, fw, token, from_send, pttl_ms, err);
	fw->unreachable = st == DLOCK_ECONNECT;
	if (st != DLOCK_EBUSY)
		return st;
	st = dlock_wait_sleep(w, wait_ms(c, fw, *pttl_ms, w) * REDIS_NS_PER_MS);
	return st == DLOCK_OK ? DLOCK_EBUSY : st;
}

static dlock_status fair_wait(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms,
                                   dlock_wait *w, dlock_acquired *out, dlock_error *err)
{
	struct fair_waiter fw;
	dlock_status st = dlock_redis_new_owner(lk, err);
	if (st != DLOCK_OK)
		return st;
	fair_waiter_init(&fw, lease_ms, dlock_wait_wants_token(w));
	/* The lease of a grant started after the last look that found us queued was sent. */
	int64_t queued_sent = dlock_monotonic_ns(), holder_until_ns = -1, backoff_ms = 0;
	for (;;) {
		uint64_t token = 0;
		int from_send = 0;
		int64_t sent = dlock_monotonic_ns(), pttl_ms = -1;
		if (holder_until_ns >= 0)
			pttl_ms = holder_until_ns > sent ? (holder_until_ns - sent) / REDIS_NS_PER_MS : 0;
		st = look(c, lk, &fw, wait_ms(c, &fw, pttl_ms, w), w, &token, &from_send, &pttl_ms, err);
		if (st == DLOCK_OK) {
			*out = (dlock_acquired){ .token = token, .sent_ns = from_send ? sent : queued_sent };
			break;
		}
		if (st == DLOCK_EBUSY) {
			queued_sent = sent;
			holder_until_ns = pttl_ms >= 0 ? sent + pttl_ms * REDIS_NS_PER_MS : -1;
			st = dlock_wait_remaining_ms(w) == 0 ? DLOCK_ETIMEDOUT : dlock_wait_cancelled(w);
			backoff_ms = 0;
		} else if (st == DLOCK_ECONNECT && !fw.unreachable) {
			st = DLOCK_OK; /* our own connection broke: the next look says whether the server is there */
		} else if (st == DLOCK_ECONNECT && c->cluster) {
			/* The slot's master is failing over (its replica takes over within seconds), or the
			 * slot is not served now (TRYAGAIN, CLUSTERDOWN: an attempt does not wait for it).
			 * Look again after a backoff, until the deadline (the message stays the failure's). */
			backoff_ms = backoff_ms ? (backoff_ms * 2 > FAIR_REFRESH_MAX_MS / 10 ? FAIR_REFRESH_MAX_MS / 10
			                                                                     : backoff_ms * 2)
			                        : 1;
			dlock_status slept = dlock_wait_sleep(w, backoff_ms * REDIS_NS_PER_MS);
			st = slept == DLOCK_ETIMEDOUT ? DLOCK_ECONNECT : slept;
		}
		if (st != DLOCK_OK)
			break;
	}
	if (lk->watching) /* before fw goes: its on_release must not run any more */
		dlock_redis_sub_unwatch(lk->watch_sub, &lk->watch);
	lk->watching = 0;
	pthread_mutex_destroy(&fw.mu);
	dlock_redis_pool_put(fw.waits, fw.conn);
	if (st == DLOCK_OK)
		return st;
	withdraw(c, lk);
	lk->owner[0] = '\0';
	return dlock_redis_wait_failed(c, st, err);
}

/*
 * The server queues the waiters (capabilities say so), and the core calls
 * this blocking acquire.  One attempt, then redis_fair.c's
 * queue; at once to the queue when our last release granted the lock to
 * a waiter (others are queued: join them).  A cluster that cannot serve the
 * first attempt now (a failover, a slot settling) is waited out in the
 * queue's loop too, within the deadline.
 */
static dlock_status fair_acquire(struct redis_client *c, struct redis_lock *lk, int64_t lease_ms, dlock_wait *w,
                                 dlock_acquired *out, dlock_error *err)
{
	int64_t pttl_ms = -1;
	if (lk->handed_off && !dlock_wait_try_once(w))
		return fair_wait(c, lk, lease_ms, w, out, err);
	dlock_status st = dlock_redis_attempt(c, lk, lease_ms, w, 1, out, &pttl_ms, err); /* the queue tells the TTL */
	int transient = st == DLOCK_ECONNECT && c->cluster;
	if ((st != DLOCK_EBUSY && !transient) || dlock_wait_try_once(w))
		return st == DLOCK_EBUSY ? dlock_redis_wait_failed(c, st, err) : st;
	return fair_wait(c, lk, lease_ms, w, out, err);
}

const struct redis_algorithm dlock_redis_fair = {
	.name = "fair",
	.fencing = DLOCK_FENCING_CONDITIONAL,
	.wakeup = DLOCK_WAKEUP_SERVER_QUEUE,
	.acquire = fair_acquire,
	.release = dlock_redis_release, /* the handoff script, as the client's waiters queue */
	.extend = dlock_redis_extend,
	.check = dlock_redis_check,
};
