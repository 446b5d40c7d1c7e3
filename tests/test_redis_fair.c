/*
 * redis://...?fair=1 against a real redis-server (ci/servers/redis.sh):
 * the waiter queue kept in Redis, what the release grants and to whom, and
 * what happens to waiters that die, give up or lose their connection.  The
 * contract shared with every backend (FIFO order included) is the
 * conformance suite's, which CI also runs on a fair=1 URI.
 *
 *   DLOCK_TEST_REDIS_URI, DLOCK_TEST_REDIS_PORT, DLOCK_TEST_REDLOCK_URI
 *
 * A raw hiredis connection looks at the queue and, to reach the states a
 * race would, writes to it as a release would.
 */
#include <CUnit/CUnit.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock/dlock.h"
#include "testredis.h"
#include "testsupport.h"

#define LONG_WAIT_MS 30000
#define AWAIT_MS 10000
#define PROMPT_MS 2000 /* far below the 30 s lease that a grant gone astray would cost */
#define LEASE_MS 30000

static const char *redis_uri, *redlock_uri;
static int redis_port;

/* ------------------------------------------------------------ helpers */

/* One name under a prefix of its own, and its keys on the server. */
struct fair_name {
	char prefix[64], uri[512];
	char lock[256], queue[256], waiters[256];
};

static void fair_name_init(struct fair_name *n, const char *name)
{
	dlock_testredis_prefix(n->prefix, sizeof n->prefix);
	dlock_testredis_uri(n->uri, sizeof n->uri, redis_uri, n->prefix, "fair=1");
	dlock_testredis_key(n->lock, sizeof n->lock, n->prefix, name, "lock");
	dlock_testredis_key(n->queue, sizeof n->queue, n->prefix, name, "queue");
	dlock_testredis_key(n->waiters, sizeof n->waiters, n->prefix, name, "waiters");
}

/* Clients of one name, each with a handle on it; the first holds the lock. */
#define PARTY_MAX 3
struct party {
	struct fair_name n; /* set by the caller */
	int size;
	dlock_client *c[PARTY_MAX];
	dlock_lock *l[PARTY_MAX];
};

static void party_open(struct party *p, const char *name, int size)
{
	p->size = size;
	for (int i = 0; i < size; i++) {
		p->c[i] = dlock_test_open(p->n.uri, NULL, NULL);
		CU_ASSERT_PTR_NOT_NULL_FATAL(p->c[i]);
		p->l[i] = dlock_test_new_lock(p->c[i], name);
	}
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(p->l[0], 0, LEASE_MS, -1, NULL, NULL), DLOCK_OK);
}

static void party_close(struct party *p)
{
	for (int i = 0; i < p->size; i++) {
		dlock_lock_free(p->l[i]);
		dlock_client_close(p->c[i]);
	}
}

static long long raw_int(const char *fmt, const char *key)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, fmt, key);
	long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
	freeReplyObject(r);
	redisFree(ctx);
	return v;
}

struct queue_len {
	const char *queue;
	long long n;
};

static int queue_has(void *arg)
{
	struct queue_len *q = arg;
	return raw_int("LLEN %s", q->queue) == q->n;
}

/* Await `n` owners in the queue. */
static void await_queued(const struct fair_name *n, long long len)
{
	struct queue_len q = { n->queue, len };
	CU_ASSERT_FATAL(dlock_test_await(queue_has, &q, AWAIT_MS));
}

/* The owner value at `index` of the queue, into out. */
static void queued_owner(const struct fair_name *n, int index, char *out, size_t len)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "LINDEX %s %d", n->queue, index);
	CU_ASSERT_FATAL(r && r->type == REDIS_REPLY_STRING);
	snprintf(out, len, "%s", r->str);
	freeReplyObject(r);
	redisFree(ctx);
}

/* What a release does, minus the push that wakes the waiter: a grant whose message went astray. */
static void grant_silently(const struct fair_name *n, const char *owner)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "SET %s %s PX %d", n->lock, owner, LEASE_MS);
	CU_ASSERT(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	r = redisCommand(ctx, "LREM %s 1 %s", n->queue, owner);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	r = redisCommand(ctx, "HDEL %s %s", n->waiters, owner);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	redisFree(ctx);
}

/* The lock's key holds `owner`. */
static int holder_is(const struct fair_name *n, const char *owner)
{
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "GET %s", n->lock);
	size_t len = strlen(owner); /* the value's first word: "OWNER TOKEN ACQUIRED_MS RECORD" */
	int is = r && r->type == REDIS_REPLY_STRING && r->len >= len && memcmp(r->str, owner, len) == 0 &&
	         (r->len == len || r->str[len] == ' ');
	freeReplyObject(r);
	redisFree(ctx);
	return is;
}

struct holder {
	const struct fair_name *n;
	const char *owner;
};

static int holder_is_now(void *arg)
{
	const struct holder *h = arg;
	return holder_is(h->n, h->owner);
}

/*
 * A waiter at the back of the queue as a live client would leave one, but
 * that never looks again: `owner`, deadline a minute ahead on the server's
 * clock, no token; its grant key into gk.
 */
static void queue_raw_waiter(const struct fair_name *n, const char *name, const char *owner, char *gk, size_t len)
{
	char suffix[96], entry[384];
	snprintf(suffix, sizeof suffix, "grant:%s", owner);
	dlock_testredis_key(gk, len, n->prefix, name, suffix);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *t = redisCommand(ctx, "TIME");
	CU_ASSERT_FATAL(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
	snprintf(entry, sizeof entry, "%lld %d 0 %s", atoll(t->element[0]->str) * 1000 + 60000, LEASE_MS, gk);
	freeReplyObject(t);
	redisReply *r = redisCommand(ctx, "HSET %s %s %s", n->waiters, owner, entry);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	r = redisCommand(ctx, "RPUSH %s %s", n->queue, owner);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER);
	freeReplyObject(r);
	redisFree(ctx);
}

/* The queue and its entries are gone, and no grant key is left behind. */
static void assert_queue_gone(const struct fair_name *n)
{
	char pattern[128];
	CU_ASSERT_EQUAL(raw_int("EXISTS %s", n->queue), 0);
	CU_ASSERT_EQUAL(raw_int("EXISTS %s", n->waiters), 0);
	snprintf(pattern, sizeof pattern, "%s:*grant*", n->prefix);
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *r = redisCommand(ctx, "KEYS %s", pattern);
	CU_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 0);
	freeReplyObject(r);
	redisFree(ctx);
}

/* ------------------------------------------------------------ tests */

static void test_uris(void)
{
	char uri[512], msg[512];
	dlock_client *c = NULL;
	snprintf(uri, sizeof uri, "%s?fair=maybe", redis_uri);
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, msg, sizeof msg), DLOCK_EURI);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "'fair'"));
	snprintf(uri, sizeof uri, "%s?fair=1", redlock_uri);
	CU_ASSERT_EQUAL(dlock_client_open(&c, uri, NULL, msg, sizeof msg), DLOCK_EURI);
	CU_ASSERT_PTR_NOT_NULL(strstr(msg, "RedLock"));
	CU_ASSERT_PTR_NULL(c);

	const char *fair[] = { "fair=0", "fair=1" };
	for (int i = 0; i < 2; i++) {
		dlock_capabilities caps;
		snprintf(uri, sizeof uri, "%s?%s", redis_uri, fair[i]);
		c = dlock_test_open(uri, NULL, NULL);
		CU_ASSERT_PTR_NOT_NULL_FATAL(c);
		dlock_client_capabilities(c, &caps);
		CU_ASSERT_EQUAL(caps.fair, i);
		/* The server queues fair waiters: the core then lets the driver's blocking acquire wait. */
		CU_ASSERT_EQUAL(caps.wakeup, i ? DLOCK_WAKEUP_SERVER_QUEUE : DLOCK_WAKEUP_NOTIFY);
		dlock_client_close(c);
	}
}

/* A release hands the key to the queued waiter, who holds it at once; nothing is left after. */
static void test_release_grants(void)
{
	struct party p;
	fair_name_init(&p.n, "grant");
	party_open(&p, "grant", 2);
	dlock_lock *la = p.l[0], *lb = p.l[1];
	uint64_t first = dlock_test_token(la);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, LONG_WAIT_MS, LEASE_MS);
	await_queued(&p.n, 1);
	char owner[64];
	queued_owner(&p.n, 0, owner, sizeof owner);

	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(w.at_ms - released < PROMPT_MS);
	CU_ASSERT(w.token > first); /* the release took the grantee's token */
	CU_ASSERT_EQUAL(dlock_check(lb), DLOCK_OK);
	CU_ASSERT(holder_is(&p.n, owner));
	CU_ASSERT(raw_int("PTTL %s", p.n.lock) > LEASE_MS / 2); /* the waiter's lease */
	assert_queue_gone(&p.n);

	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(raw_int("EXISTS %s", p.n.lock), 0);
	party_close(&p);
}

/* A child that, once a byte arrives on *go, queues for `name` and never returns (it is killed). */
static pid_t queue_in_child(const struct fair_name *n, const char *name, int *go)
{
	int fds[2];
	CU_ASSERT_FATAL(pipe(fds) == 0);
	pid_t pid = fork();
	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		char b;
		dlock_client *c = NULL;
		dlock_lock *l = NULL;
		close(fds[1]);
		if (read(fds[0], &b, 1) == 1 && dlock_client_open(&c, n->uri, NULL, NULL, 0) == DLOCK_OK &&
		    dlock_lock_new(c, name, &l) == DLOCK_OK)
			dlock_test_acquire(l, LONG_WAIT_MS, LEASE_MS, 0, NULL, NULL);
		_exit(1);
	}
	close(fds[0]);
	*go = fds[1];
	return pid;
}

struct deadline_passed {
	const struct fair_name *n;
	const char *owner;
};

/* The server's clock is past the deadline of `owner`'s queue entry. */
static int entry_expired(void *arg)
{
	struct deadline_passed *d = arg;
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *e = redisCommand(ctx, "HGET %s %s", d->n->waiters, d->owner);
	redisReply *t = redisCommand(ctx, "TIME");
	int passed = 0;
	if (e && e->type == REDIS_REPLY_STRING && t && t->type == REDIS_REPLY_ARRAY && t->elements == 2)
		passed = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000 > atoll(e->str);
	freeReplyObject(e);
	freeReplyObject(t);
	redisFree(ctx);
	return passed;
}

/*
 * A party of two on `name`, the first holding, and behind them in the
 * queue a waiter that died (a child process queued, then SIGKILLed): its
 * owner value into dead; then the second client waiting in w, queued after
 * it.
 */
static void behind_dead_waiter(struct party *p, const char *name, char *dead, size_t len, dlock_test_waiter *w)
{
	int go;
	fair_name_init(&p->n, name);
	pid_t child = queue_in_child(&p->n, name, &go); /* before any thread of ours exists */
	party_open(p, name, 2);
	CU_ASSERT_FATAL(write(go, "g", 1) == 1);
	close(go);
	await_queued(&p->n, 1);
	queued_owner(&p->n, 0, dead, len);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	dlock_test_waiter_start(w, p->l[1], LONG_WAIT_MS, LEASE_MS);
	await_queued(&p->n, 2);
}

/*
 * A waiter that died is dropped once its deadline (3 refreshes) has passed
 * and never granted: the live waiter behind it gets the lock at once, not
 * after the dead one's lease.
 */
static void test_dead_waiter_skipped(void)
{
	struct party p;
	char dead[64];
	dlock_test_waiter w;
	behind_dead_waiter(&p, "dead", dead, sizeof dead, &w);
	dlock_lock *la = p.l[0], *lb = p.l[1];
	struct deadline_passed d = { &p.n, dead };
	CU_ASSERT(dlock_test_await(entry_expired, &d, AWAIT_MS));

	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(w.at_ms - released < PROMPT_MS);
	assert_queue_gone(&p.n);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	party_close(&p);
}

/*
 * A waiter that died while still live in the queue (within its deadline)
 * is granted the lock, but only for its claim window (two refreshes: 2 s
 * at this lease): it claims nothing, the key expires, and the live waiter
 * behind it gets the lock at its next look — seconds, not the dead one's
 * 30 s lease.
 */
static void test_dead_waiter_granted_claims_nothing(void)
{
	struct party p;
	char dead[64];
	dlock_test_waiter w;
	behind_dead_waiter(&p, "died", dead, sizeof dead, &w);
	dlock_lock *la = p.l[0], *lb = p.l[1];
	struct deadline_passed d = { &p.n, dead };
	int live = !entry_expired(&d); /* else a slow machine: the dead one is past its deadline, the case above */
	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	int granted_dead = holder_is(&p.n, dead);
	long long pttl = raw_int("PTTL %s", p.n.lock);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	if (live) {
		CU_ASSERT(granted_dead);
		CU_ASSERT(pttl > 0 && pttl <= 2000);
		printf("\n    granted to the dead waiter for %lld ms; the live one got it %lld ms after the release", pttl,
		       (long long)(w.at_ms - released));
		CU_ASSERT(w.at_ms - released < 2000 + 1000 + PROMPT_MS);
		CU_ASSERT(raw_int("PTTL %s", p.n.lock) > 2000); /* claimed: the whole lease */
	} else {
		dlock_test_skip_part("the dead waiter's deadline passed before the release");
	}
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	party_close(&p);
}

/*
 * A rolling upgrade: clients of one name with fair=0 (pub/sub, the
 * previous default) and with the queue (the default now).  They exclude
 * each other, and each kind's release wakes the other kind's waiter at
 * once: a fair=0 release grants nobody but publishes, which interrupts the
 * queued waiter's BLPOP (before, it waited for its next look, up to a
 * second); a queueing release with nobody queued publishes too.
 */
static void test_mixed_with_fair0(void)
{
	enum { WOKEN_MS = 700 }; /* below the 1 s between a queued waiter's own looks at this lease */
	char prefix[64], queue_uri[512], pubsub_uri[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	dlock_testredis_uri(queue_uri, sizeof queue_uri, redis_uri, prefix, "");
	dlock_testredis_uri(pubsub_uri, sizeof pubsub_uri, redis_uri, prefix, "fair=0");
	dlock_client *q = dlock_test_open(queue_uri, NULL, NULL), *p = dlock_test_open(pubsub_uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(q);
	CU_ASSERT_PTR_NOT_NULL_FATAL(p);
	dlock_lock *lq = dlock_test_new_lock(q, "mixed"), *lp = dlock_test_new_lock(p, "mixed");
	struct fair_name n;
	dlock_testredis_key(n.queue, sizeof n.queue, prefix, "mixed", "queue");

	for (int round = 0; round < 3; round++) {
		/* The fair=0 client holds; the queued waiter is woken by its release. */
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(lp, 0, LEASE_MS, 1, NULL, NULL), DLOCK_OK);
		uint64_t first = dlock_test_token(lp);
		CU_ASSERT_EQUAL(dlock_test_acquire(lq, 0, LEASE_MS, 1, NULL, NULL), DLOCK_EBUSY); /* excluded */
		dlock_test_waiter w;
		dlock_test_waiter_start(&w, lq, LONG_WAIT_MS, LEASE_MS);
		await_queued(&n, 1);
		int64_t released = dlock_test_now_ms();
		CU_ASSERT_EQUAL(dlock_release(lp), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
		int64_t woken = w.at_ms - released;
		CU_ASSERT(woken < WOKEN_MS);
		CU_ASSERT(w.token > first);

		/* The queueing client holds; the fair=0 waiter is woken by its release. */
		CU_ASSERT_EQUAL(dlock_test_acquire(lp, 0, LEASE_MS, 1, NULL, NULL), DLOCK_EBUSY); /* excluded */
		dlock_client_stats st;
		CU_ASSERT_EQUAL(dlock_client_get_stats(p, &st), DLOCK_OK);
		dlock_test_count a = { p, st.server_acquires + 1 };
		dlock_test_waiter_start(&w, lp, LONG_WAIT_MS, LEASE_MS);
		/* Its first attempt failed: it subscribes, and tries again once subscribed, so no release is missed. */
		CU_ASSERT(dlock_test_await(dlock_test_attempted, &a, AWAIT_MS));
		released = dlock_test_now_ms();
		CU_ASSERT_EQUAL(dlock_release(lq), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
		printf("\n    round %d: queued waiter woken %lld ms after a fair=0 release, fair=0 waiter %lld ms after "
		       "a queueing one",
		       round, (long long)woken, (long long)(w.at_ms - released));
		CU_ASSERT(w.at_ms - released < PROMPT_MS);
		CU_ASSERT_EQUAL(dlock_release(lp), DLOCK_OK);
	}
	dlock_lock_free(lq);
	dlock_lock_free(lp);
	dlock_client_close(q);
	dlock_client_close(p);
}

/* A grant that never woke its waiter (its push lost) is found when the waiter looks again. */
static void test_missed_grant_found(void)
{
	struct party p;
	fair_name_init(&p.n, "missed");
	party_open(&p, "missed", 2);
	dlock_lock *la = p.l[0], *lb = p.l[1];
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, LONG_WAIT_MS, 400); /* looks again every 100 ms */
	await_queued(&p.n, 1);
	char owner[64];
	queued_owner(&p.n, 0, owner, sizeof owner);
	grant_silently(&p.n, owner);

	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD); /* the key went to b */
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	assert_queue_gone(&p.n);
	party_close(&p);
}

/*
 * A waiter whose wait ends leaves the queue; if a release granted it the
 * lock meanwhile (here silently, as in a race with its cancellation),
 * leaving hands the lock on to the next waiter instead of keeping it for a
 * lease.
 */
static void test_withdraw_hands_on(void)
{
	struct party p;
	fair_name_init(&p.n, "withdraw");
	party_open(&p, "withdraw", 3);
	dlock_lock *la = p.l[0], *lb = p.l[1], *lc = p.l[2];
	dlock_test_waiter patient, impatient;
	dlock_test_waiter_start(&patient, lc, LONG_WAIT_MS, LEASE_MS);
	await_queued(&p.n, 1);
	dlock_test_waiter_start(&impatient, lb, 200, LEASE_MS);
	await_queued(&p.n, 2);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&impatient, LONG_WAIT_MS), DLOCK_ETIMEDOUT);
	CU_ASSERT_EQUAL(raw_int("LLEN %s", p.n.queue), 1); /* timed out: gone from the queue */

	dlock_test_waiter_start(&impatient, lb, LONG_WAIT_MS, LEASE_MS);
	await_queued(&p.n, 2);
	char owner[64];
	queued_owner(&p.n, 1, owner, sizeof owner);
	grant_silently(&p.n, owner);
	CU_ASSERT_EQUAL(dlock_cancel(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&impatient, LONG_WAIT_MS), DLOCK_ECANCELED);
	int64_t withdrawn = impatient.at_ms;
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&patient, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(patient.at_ms - withdrawn < PROMPT_MS);
	CU_ASSERT_EQUAL(dlock_check(lc), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(lc), DLOCK_OK);
	assert_queue_gone(&p.n);
	party_close(&p);
}

/*
 * A holder whose lease ran out released nothing, so no release granted the
 * lock: the next look of any waiter gives it to the live waiter at the head
 * of the queue.  (Before, only the head's own look took it, a refresh later
 * or never: a head whose wait ended first queued again at the back.)  Here
 * the head never looks, so only the other waiter's look can serve it.
 */
static void test_expired_holder_head_served(void)
{
	struct party p;
	fair_name_init(&p.n, "expired");
	party_open(&p, "expired", 2);
	dlock_lock *la = p.l[0], *lb = p.l[1];
	const char *head = "head-that-never-looks";
	char gk[256];
	queue_raw_waiter(&p.n, "expired", head, gk, sizeof gk);
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, LONG_WAIT_MS, LEASE_MS);
	await_queued(&p.n, 2);
	CU_ASSERT_EQUAL(raw_int("DEL %s", p.n.lock), 1); /* a's lease ran out */

	struct holder h = { &p.n, head };
	CU_ASSERT(dlock_test_await(holder_is_now, &h, AWAIT_MS));
	CU_ASSERT_EQUAL(raw_int("LLEN %s", gk), 1); /* the grant that wakes it */
	CU_ASSERT(raw_int("PTTL %s", p.n.lock) > LEASE_MS / 2); /* its lease */
	CU_ASSERT_EQUAL(dlock_cancel(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_ECANCELED);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(raw_int("DEL %s", gk), 1);
	CU_ASSERT_EQUAL(raw_int("DEL %s", p.n.lock), 1);
	assert_queue_gone(&p.n);
	party_close(&p);
}

/*
 * A waiter that gives up while the lock is free (its holder's lease ran
 * out) grants it to the next live waiter on its way out, instead of leaving
 * it free until that waiter's own next look, up to a refresh later.
 */
static void test_withdraw_while_free_grants(void)
{
	struct party p;
	fair_name_init(&p.n, "freed");
	party_open(&p, "freed", 3);
	dlock_lock *la = p.l[0], *lb = p.l[1], *lc = p.l[2];
	dlock_test_waiter patient, impatient;
	dlock_test_waiter_start(&patient, lb, LONG_WAIT_MS, LEASE_MS); /* looks again every second */
	await_queued(&p.n, 1);
	char owner[64];
	queued_owner(&p.n, 0, owner, sizeof owner);
	dlock_test_waiter_start(&impatient, lc, 300, LEASE_MS);
	await_queued(&p.n, 2);
	CU_ASSERT_EQUAL(raw_int("DEL %s", p.n.lock), 1); /* a's lease ran out */

	CU_ASSERT_EQUAL(dlock_test_waiter_join(&impatient, LONG_WAIT_MS), DLOCK_ETIMEDOUT);
	CU_ASSERT(holder_is(&p.n, owner)); /* granted by the withdrawal, before it returned */
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&patient, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_ENOTHELD);
	assert_queue_gone(&p.n);
	party_close(&p);
}

/* Kill every connection blocked in BLPOP on the server; 1 when there was one. */
static int kill_blocked(void *arg)
{
	(void)arg;
	int killed = 0;
	redisContext *ctx = dlock_testredis_raw(redis_port);
	redisReply *list = redisCommand(ctx, "CLIENT LIST TYPE normal");
	for (char *line = list && list->type != REDIS_REPLY_ERROR ? list->str : NULL; line && *line;) {
		char *end = strchr(line, '\n'), *id = strstr(line, "id=");
		if (end)
			*end = '\0';
		if (id && strstr(line, " cmd=blpop ")) {
			redisReply *r = redisCommand(ctx, "CLIENT KILL ID %lld", atoll(id + 3));
			killed += r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
			freeReplyObject(r);
		}
		line = end ? end + 1 : NULL;
	}
	freeReplyObject(list);
	redisFree(ctx);
	return killed > 0;
}

/* The connection a waiter blocks on is killed by the server: it queues again and still gets the lock. */
static void test_blocked_connection_killed(void)
{
	struct party p;
	fair_name_init(&p.n, "killed");
	party_open(&p, "killed", 2);
	dlock_lock *la = p.l[0], *lb = p.l[1];
	dlock_test_waiter w;
	dlock_test_waiter_start(&w, lb, LONG_WAIT_MS, LEASE_MS);
	await_queued(&p.n, 1);
	/* Other programs' fair waiters may be killed too: recovering is what they promise as well. */
	CU_ASSERT(dlock_test_await(kill_blocked, NULL, AWAIT_MS));

	int64_t released = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, LONG_WAIT_MS), DLOCK_OK);
	CU_ASSERT(w.at_ms - released < PROMPT_MS);
	CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
	assert_queue_gone(&p.n);
	party_close(&p);
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis fair=1", NULL, NULL);
	CU_add_test(s, "fair= is a boolean, one instance only; capabilities say fair", test_uris);
	CU_add_test(s, "a release grants the queued waiter; nothing left behind", test_release_grants);
	CU_add_test(s, "a dead waiter past its deadline is skipped", test_dead_waiter_skipped);
	CU_add_test(s, "a dead waiter still live in the queue is granted its claim window only",
	            test_dead_waiter_granted_claims_nothing);
	CU_add_test(s, "fair=0 and the queue on one name: exclusion, and each wakes the other's waiters",
	            test_mixed_with_fair0);
	CU_add_test(s, "a grant that did not wake its waiter is found", test_missed_grant_found);
	CU_add_test(s, "a waiter that gives up hands on a grant it never saw", test_withdraw_hands_on);
	CU_add_test(s, "a waiter's blocked connection killed: it still gets the lock", test_blocked_connection_killed);
	CU_add_test(s, "holder expired: any waiter's look serves the head", test_expired_holder_head_served);
	CU_add_test(s, "holder expired: a waiter giving up grants the next", test_withdraw_while_free_grants);
}

int main(void)
{
	redis_uri = dlock_test_env("DLOCK_TEST_REDIS_URI");
	redlock_uri = dlock_test_env("DLOCK_TEST_REDLOCK_URI");
	const char *port = dlock_test_env("DLOCK_TEST_REDIS_PORT");
	if (!redis_uri || !redlock_uri || !port) {
		return dlock_test_skip("no redis server (DLOCK_TEST_REDIS_URI unset)");
	}
	redis_port = atoi(port);
	return dlock_test_main(add_suites);
}
