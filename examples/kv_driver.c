/*
 * kv:// — a small network backend to copy when writing a driver.
 *
 *   kv://[:PASSWORD@]HOST[:PORT][?ttl=…&prefix=…]   (a Redis-protocol server, default port 6379)
 *
 * It shows the shape of a driver for a lock server reached over the
 * network, in one file, with nothing but the public driver contract
 * (<dlock/sys/driver.h>) and the server's own client library (hiredis):
 *
 *   open()        connect within the URI's open_timeout, set io_timeout, authenticate
 *   lock_init()   map the untrusted name to a server key (hashed, never spliced)
 *   try_acquire() ONE exchange with the server: acquired (with a fencing token) or busy
 *                 (with the holder's lease left as the retry hint); the core's loop does
 *                 the waiting, the deadline, the backoff and the cancellation
 *   release(), extend(), check()   owner-only, each one script
 *
 * The built-in redis:// backend does much more (a connection pool,
 * pipelining, pub/sub wake-ups, RedLock, a fair queue); this one keeps the
 * contract and nothing else, so the contract is what you see.
 *
 * Ownership: the client state owns one connection, guarded by `mu` (calls
 * on different locks may come from different threads at once); a lock's
 * state holds its key and the owner string of its current acquisition.
 * Errors: every failure writes a message with dlock_error_set(); messages
 * name the server by the masked URI, never the password.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "dlock/sys/driver.h"

#include "kv_driver.h"

#define KV_DEFAULT_PORT 6379
#define KV_KEY_MAX 320   /* prefix ':' 64 hex digits ':fence' */
#define KV_OWNER_HEX 32  /* 16 random bytes, in hex */

/*
 * KEYS[1] lock, KEYS[2] fencing counter; ARGV[1] owner, ARGV[2] lease (ms),
 * ARGV[3] "1" for a fencing token.  {1, token (0 when none asked)} or
 * {0, lease left}: one round trip either way.
 */
static const char ACQUIRE_LUA[] =
	"if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
	"if ARGV[3] == '1' then return {1, redis.call('INCR', KEYS[2])} end return {1, 0} end "
	"return {0, redis.call('PTTL', KEYS[1])}";
/* KEYS[1] lock; ARGV[1] owner.  1 when it was ours. */
static const char RELEASE_LUA[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
/* KEYS[1] lock; ARGV[1] owner, ARGV[2] lease (ms).  1 when it was ours. */
static const char EXTEND_LUA[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

struct kv_client {
	pthread_mutex_t mu;    /* guards ctx */
	redisContext *ctx;     /* NULL after an I/O error: connected again by the next call */
	char *host, *password, *prefix, *label; /* label: the masked URI, for messages */
	int port;
	struct timeval open_timeout, io_timeout;
};

struct kv_lock {
	char key[KV_KEY_MAX], fence_key[KV_KEY_MAX];
	char owner[KV_OWNER_HEX + 1]; /* "" when not acquired */
};

/* ------------------------------------------------------------ connection */

static struct timeval tv_of_ms(int64_t ms)
{
	return (struct timeval){ .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
}

/* Connect and authenticate (mu held). */
static dlock_status kv_connect_locked(struct kv_client *c, dlock_error *err)
{
	if (c->ctx)
		return DLOCK_OK;
	redisContext *ctx = redisConnectWithTimeout(c->host, c->port, c->open_timeout);
	if (!ctx || ctx->err) {
		dlock_status st = dlock_error_set(err, DLOCK_ECONNECT, "%s: cannot connect: %s", c->label,
		                                  ctx ? ctx->errstr : "out of memory");
		redisFree(ctx);
		return st;
	}
	redisSetTimeout(ctx, c->io_timeout);
	if (c->password) {
		redisReply *r = redisCommand(ctx, "AUTH %s", c->password);
		int ok = r && r->type == REDIS_REPLY_STATUS;
		freeReplyObject(r);
		if (!ok) {
			redisFree(ctx);
			return dlock_error_set(err, DLOCK_EAUTH, "%s: the server refused the password", c->label);
		}
	}
	c->ctx = ctx;
	return DLOCK_OK;
}

/*
 * Run `argv` on the server (connecting first if needed).  DLOCK_OK with
 * *out set, or DLOCK_ECONNECT when the server could not be reached or did
 * not answer (the connection is then dropped; the next call connects
 * again), or DLOCK_ESERVER for an error reply.
 */
static dlock_status kv_run(struct kv_client *c, int argc, const char **argv, const size_t *len, redisReply **out,
                           dlock_error *err)
{
	*out = NULL;
	pthread_mutex_lock(&c->mu);
	dlock_status st = kv_connect_locked(c, err);
	redisReply *r = NULL;
	if (st == DLOCK_OK) {
		r = redisCommandArgv(c->ctx, argc, argv, len);
		if (!r) {
			st = dlock_error_set(err, DLOCK_ECONNECT, "%s: no answer: %s", c->label, c->ctx->errstr);
			redisFree(c->ctx);
			c->ctx = NULL;
		} else if (r->type == REDIS_REPLY_ERROR) {
			st = dlock_error_set(err, DLOCK_ESERVER, "%s: the server said: %s", c->label, r->str);
			freeReplyObject(r);
			r = NULL;
		}
	}
	pthread_mutex_unlock(&c->mu);
	*out = r;
	return st;
}

/* EVAL `script` with `nkeys` keys followed by its arguments, `nwords` words in all (at most 5). */
static dlock_status kv_eval(struct kv_client *c, const char *script, int nkeys, const char *const *words, int nwords,
                            redisReply **out, dlock_error *err)
{
	char nk[4];
	const char *argv[8] = { "EVAL", script, nk };
	size_t len[8];
	snprintf(nk, sizeof nk, "%d", nkeys);
	if (nwords > 5)
		nwords = 5;
	for (int i = 0; i < nwords; i++)
		argv[3 + i] = words[i];
	for (int i = 0; i < 3 + nwords; i++)
		len[i] = strlen(argv[i]);
	return kv_run(c, 3 + nwords, argv, len, out, err);
}

/* ------------------------------------------------------------ client */

static int kv_knows_param(const char *key)
{
	(void)key;
	return 0; /* only the common parameters (ttl, wait, prefix, timeouts…), which the core takes */
}

static void kv_close(void *backend)
{
	struct kv_client *c = backend;
	if (!c)
		return;
	redisFree(c->ctx);
	if (c->password) /* do not leave the password in freed memory */
		memset(c->password, 0, strlen(c->password));
	free(c->host);
	free(c->password);
	free(c->prefix);
	free(c->label);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static dlock_status kv_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	(void)host; /* for dlock_host_log() and dlock_report_lost(); this driver needs neither */
	if (uri->nhosts != 1 || uri->hosts[0].host[0] == '\0')
		return dlock_error_set(err, DLOCK_EURI, "kv:// takes one HOST[:PORT]: %s", uri->masked);
	if (uri->path[0] != '\0' && strcmp(uri->path, "/") != 0)
		return dlock_error_set(err, DLOCK_EURI, "kv:// takes no path: %s", uri->masked);
	struct kv_client *c = calloc(1, sizeof *c);
	if (!c)
		return dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	pthread_mutex_init(&c->mu, NULL);
	c->host = strdup(uri->hosts[0].host);
	c->password = uri->password ? strdup(uri->password) : NULL;
	c->prefix = strdup(uri->prefix);
	c->label = strdup(uri->masked);
	c->port = uri->hosts[0].port ? uri->hosts[0].port : KV_DEFAULT_PORT;
	c->open_timeout = tv_of_ms(uri->connect_timeout_ms);
	c->io_timeout = tv_of_ms(uri->io_timeout_ms);
	if (!c->host || (uri->password && !c->password) || !c->prefix || !c->label) {
		kv_close(c);
		return dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	}
	/* Connect now, so that a wrong address or password fails the open, not the first acquire. */
	pthread_mutex_lock(&c->mu);
	dlock_status st = kv_connect_locked(c, err);
	pthread_mutex_unlock(&c->mu);
	if (st != DLOCK_OK) {
		kv_close(c);
		return st;
	}
	*backend = c;
	return DLOCK_OK;
}

static void kv_capabilities(void *backend, dlock_capabilities *caps)
{
	(void)backend;
	*caps = (dlock_capabilities){
		.backend = "kv",
		.consistency = DLOCK_CONSISTENCY_AP,
		.fencing = DLOCK_FENCING_CONDITIONAL,
		.fencing_note = "the counter goes back if the server restarts without persistence",
		.fair = 0,
		.lease = DLOCK_LEASE_TTL,
		.wakeup = DLOCK_WAKEUP_POLL,
		.scope = DLOCK_SCOPE_NETWORK,
	};
}

/* ------------------------------------------------------------ locks */

/* The key is the hash of the name: names are untrusted bytes of any length. */
static dlock_status kv_lock_init(void *backend, void *lkp, const char *name, size_t len, dlock_error *err)
{
	struct kv_client *c = backend;
	struct kv_lock *lk = lkp;
	unsigned char digest[32];
	char hex[65];
	dlock_sha256(name, len, digest);
	dlock_hex(digest, sizeof digest, hex);
	int n = snprintf(lk->key, sizeof lk->key, "%s:%s", c->prefix, hex);
	int m = snprintf(lk->fence_key, sizeof lk->fence_key, "%s:%s:fence", c->prefix, hex);
	if (n < 0 || m < 0 || (size_t)m >= sizeof lk->fence_key)
		return dlock_error_set(err, DLOCK_EURI, "kv://: the prefix is too long");
	return DLOCK_OK;
}

static dlock_status kv_try_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                   dlock_acquired *out, dlock_error *err)
{
	struct kv_client *c = backend;
	struct kv_lock *lk = lkp;
	unsigned char raw[KV_OWNER_HEX / 2];
	char lease[24];
	redisReply *r;
	if (dlock_random_bytes(raw, sizeof raw) != DLOCK_OK)
		return dlock_error_set(err, DLOCK_EIO, "kv://: no random bytes for the owner id");
	dlock_hex(raw, sizeof raw, lk->owner);
	snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
	int64_t sent = dlock_monotonic_ns(); /* the lease runs from here at the latest */
	/* No wake-up is armed (w unused): waiters poll, within the holder's lease (retry->after_ms). */
	const char *words[] = { lk->key, lk->fence_key, lk->owner, lease, dlock_wait_wants_token(w) ? "1" : "0" };
	dlock_status st = kv_eval(c, ACQUIRE_LUA, 2, words, 5, &r, err);
	if (st == DLOCK_ECONNECT) {
		/* The script may have run and only its answer been lost: remove what may be ours. */
		redisReply *undo = NULL;
		dlock_error ignored;
		const char *mine[] = { lk->key, lk->owner };
		if (kv_eval(c, RELEASE_LUA, 1, mine, 2, &undo, &ignored) == DLOCK_OK)
			freeReplyObject(undo); /* else the key, if there, goes with its lease */
		retry->transient = 1;  /* the server may be back before the deadline */
	}
	if (st != DLOCK_OK) {
		lk->owner[0] = '\0';
		return st;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
	    r->element[1]->type != REDIS_REPLY_INTEGER) {
		freeReplyObject(r);
		lk->owner[0] = '\0';
		return dlock_error_set(err, DLOCK_ESERVER, "%s: unexpected answer to the acquire", c->label);
	}
	long long acquired = r->element[0]->integer, value = r->element[1]->integer;
	freeReplyObject(r);
	if (!acquired) {
		lk->owner[0] = '\0';
		retry->after_ms = value > 0 ? value : -1; /* the holder's lease left; -1: the core's backoff */
		return dlock_error_set(err, DLOCK_EBUSY, "%s: the lock is held by another owner", c->label);
	}
	*out = (dlock_acquired){ .token = (uint64_t)value, .sent_ns = sent };
	return DLOCK_OK;
}

/* Run an owner-only script: DLOCK_OK when the key was ours, DLOCK_ENOTHELD when not. */
static dlock_status kv_owner_only(struct kv_client *c, struct kv_lock *lk, const char *script, const char *lease,
                                  const char *what, dlock_error *err)
{
	redisReply *r;
	const char *words[] = { lk->key, lk->owner, lease };
	dlock_status st = kv_eval(c, script, 1, words, lease ? 3 : 2, &r, err);
	if (st != DLOCK_OK)
		return st;
	if (r->type != REDIS_REPLY_INTEGER)
		st = dlock_error_set(err, DLOCK_ESERVER, "%s: unexpected answer to the %s", c->label, what);
	else if (r->integer != 1)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "%s: %s: the lock is no longer ours (expired or taken)",
		                     c->label, what);
	freeReplyObject(r);
	return st;
}

static dlock_status kv_release(void *backend, void *lkp, dlock_error *err)
{
	struct kv_lock *lk = lkp;
	dlock_status st = kv_owner_only(backend, lk, RELEASE_LUA, NULL, "release", err);
	lk->owner[0] = '\0';
	return st;
}

static dlock_status kv_extend(void *backend, void *lkp, int64_t lease_ms, dlock_error *err)
{
	char lease[24];
	snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
	return kv_owner_only(backend, lkp, EXTEND_LUA, lease, "extend", err);
}

static dlock_status kv_check(void *backend, void *lkp, dlock_error *err)
{
	struct kv_client *c = backend;
	struct kv_lock *lk = lkp;
	const char *argv[2] = { "GET", lk->key };
	size_t len[2] = { 3, strlen(lk->key) };
	redisReply *r;
	dlock_status st = kv_run(c, 2, argv, len, &r, err);
	if (st != DLOCK_OK) /* check answers only held, not held, or cannot tell */
		return dlock_error_set(err, DLOCK_EUNCERTAIN, "%s: cannot tell whether the lock is ours", c->label);
	if (r->type != REDIS_REPLY_STRING || strcmp(r->str, lk->owner) != 0)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "%s: the lock is no longer ours (expired or taken)", c->label);
	freeReplyObject(r);
	return st;
}

const dlock_driver example_kv_driver = {
	.abi_version = 2,
	.scheme = "kv",
	.lock_size = sizeof(struct kv_lock),
	.open = kv_open,
	.close = kv_close,
	.capabilities = kv_capabilities,
	.knows_param = kv_knows_param,
	.lock_init = kv_lock_init,
	.release = kv_release,
	.extend = kv_extend,
	.check = kv_check,
	.try_acquire = kv_try_acquire,
};
