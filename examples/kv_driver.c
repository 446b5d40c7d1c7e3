/*
 * kv:// — a network backend to copy when writing a driver: the whole
 * current contract (<dlock/sys/driver.h>, ABI version 9) on a
 * Redis-protocol server, with nothing but the contract and the server's
 * own client library (hiredis).  This file has the client and the
 * blocking methods; kv_driver_loop.c the non-blocking ones, which a loop
 * client calls on its loop (kv_driver_internal.h: what the two share).
 *
 *   kv://[:PASSWORD@]HOST[:PORT][?ttl=…&prefix=…]   (default port 6379)
 *
 *   open(), close()      connect within open_timeout, io_timeout per command, authenticate;
 *                        a subscriber thread for wake-ups
 *   feature()            every fact of the backend, one code for one kind
 *   lock_init_kind()     map the untrusted name to a key (hashed, never spliced); mutexes,
 *                        read-write locks and semaphores
 *   try_acquire()        ONE exchange: acquired (with a fencing token and, for a permit, a
 *                        slot) or busy (with the soonest lease end as the retry hint); the
 *                        core's loop does the waiting, the deadline and the cancellation
 *   disarm()             wake-ups: a release publishes the name's digest, the subscriber
 *                        wakes the waiters of that name
 *   release(), extend(), check()   owner-only, one script each
 *   inspect(), list(), break_lock()   who holds a name, every held name, taking it
 *   gc()                 remove the fencing counters that unused names left
 *   try_acquire_start(), release_start(), extend_start(), check_start()
 *                        (kv_driver_loop.c) the same scripts without blocking, on a loop
 *                        client's loop (DLOCK_FACT_LOOP_IO): a waiting acquisition holds
 *                        no thread; the client's other calls run on its worker threads
 *
 * What the server keeps, PREFIX:D (D the SHA-256 of the name, in hex): a
 * hash with the name, its kind and N, and one field per holder,
 * "h:OWNER" = "EXPIRY_MS SLOT MODE TOKEN ACQUIRED_MS OWNER_RECORD", on
 * the server's clock.  Each script first forgets the holders whose lease
 * ended; the key expires with the longest lease.  A name in use as one
 * kind (or a semaphore of one N) refuses another (DLOCK_EKIND).
 * PREFIX:D:fence, a hash {n: the last token, name}, stays after the
 * locks; a token is at least the server's clock in microseconds, so the
 * counter may be removed (gc) once it is behind that clock: the next
 * token is then still larger than every earlier one.
 *
 * Wake-ups: every release and break publishes D on PREFIX:released.  One
 * channel for the whole prefix keeps the example short: every client
 * hears every release and wakes only its own waiters of that name.
 * (redis:// subscribes per name, pools connections and pipelines; it also
 * has RedLock, a fair queue, elections.  This driver keeps the contract
 * and little else, so the contract is what you see.)
 *
 * Ownership: the client owns two connections: `ctx` for commands, guarded
 * by `mu` (calls on different locks come from any threads at once), and
 * the subscriber's, owned by its thread; a loop client a third, the
 * loop's (kv_driver_loop.c).  A lock's state holds its keys, a copy of its
 * name, the owner id of its current acquisition and its call on the loop.
 * Errors: every failure writes a message with dlock_error_set(); messages
 * name the server by the masked URI, never the password.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime, pthread_condattr_setclock */

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "dlock/sys/driver.h"

#include "kv_driver.h"
#include "kv_driver_internal.h"

#define KV_DEFAULT_PORT 6379
#define KV_INSPECT (DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_ACQUIRED | DLOCK_INSPECT_LEASE | \
                    DLOCK_INSPECT_TOKEN | DLOCK_INSPECT_LIST | DLOCK_INSPECT_NAMES)

/* The server's clock in ms (`now`) and µs (`now_us`), first in every script that reads leases. */
#define KV_NOW "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) " \
               "local now_us = t[1] * 1000000 + t[2] "

/*
 * KEYS[1] the name's hash, KEYS[2] its counter; ARGV[1] "h:OWNER", [2]
 * lease (ms), [3] "1" for a token, [4] kind, [5] N, [6] mode "x" or "s",
 * [7] name, [8] owner record.  {1, token, slot}, {0, ms to the soonest
 * lease end} or {-1, kind, N} for a name in use as another kind.
 */
static const char ACQUIRE_LUA[] = KV_NOW
	"local h, live, excl, used, soonest, kind, n = redis.call('HGETALL', KEYS[1]), 0, false, {}, nil "
	"for i = 1, #h, 2 do "
	"  if h[i] == 'kind' then kind = h[i + 1] elseif h[i] == 'n' then n = h[i + 1] "
	"  elseif string.sub(h[i], 1, 2) == 'h:' then "
	"    local exp, slot, mode = string.match(h[i + 1], '^(%d+) (%d+) (%a)') "
	"    exp = tonumber(exp) "
	"    if exp <= now then redis.call('HDEL', KEYS[1], h[i]) else "
	"      live, used[tonumber(slot)], excl = live + 1, true, excl or mode == 'x' "
	"      if not soonest or exp < soonest then soonest = exp end end end end "
	"if live > 0 and (kind ~= ARGV[4] or n ~= ARGV[5]) then return {-1, tonumber(kind), tonumber(n)} end "
	"local free = live == 0 "
	"if ARGV[4] == '2' then free = live < tonumber(ARGV[5]) elseif ARGV[6] == 's' then free = not excl end "
	"if not free then return {0, soonest - now} end "
	"local slot, token = 0, 0 "
	"while used[slot] do slot = slot + 1 end "
	"if ARGV[3] == '1' then "
	"  token = math.max(redis.call('HINCRBY', KEYS[2], 'n', 1), now_us) "
	"  redis.call('HSET', KEYS[2], 'n', string.format('%d', token), 'name', ARGV[7]) end "
	"redis.call('HSET', KEYS[1], 'kind', ARGV[4], 'n', ARGV[5], 'name', ARGV[7], ARGV[1], "
	"  string.format('%d %d %s %d %d ', now + ARGV[2], slot, ARGV[6], token, now) .. ARGV[8]) "
	"if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
	"return {1, token, slot}";

/*
 * KEYS[1] the name's hash; ARGV[1] "h:OWNER", [2] "check", "extend" or
 * "release", [3] lease (ms), [4] channel, [5] digest.  1 when the holder
 * was ours and its lease had not ended, else 0.
 */
static const char OWNED_LUA[] = KV_NOW
	"local v = redis.call('HGET', KEYS[1], ARGV[1]) "
	"if not v or tonumber(string.match(v, '^%d+')) <= now then return 0 end "
	"if ARGV[2] == 'extend' then "
	"  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + ARGV[3]) .. string.match(v, '^%d+(.*)$')) "
	"  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end "
	"elseif ARGV[2] == 'release' then "
	"  redis.call('HDEL', KEYS[1], ARGV[1]) "
	"  if redis.call('HLEN', KEYS[1]) <= 3 then redis.call('DEL', KEYS[1]) end "
	"  redis.call('PUBLISH', ARGV[4], ARGV[5]) end "
	"return 1";

/* KEYS[1] the name's hash.  {now, field, value, ...}: read-only. */
static const char INSPECT_LUA[] = KV_NOW
	"local r = redis.call('HGETALL', KEYS[1]) table.insert(r, 1, now) return r";

/* KEYS[1] the name's hash; ARGV[1] channel, [2] digest.  The number of live holders removed. */
static const char BREAK_LUA[] = KV_NOW
	"local h, live = redis.call('HGETALL', KEYS[1]), 0 "
	"for i = 1, #h, 2 do "
	"  if string.sub(h[i], 1, 2) == 'h:' and tonumber(string.match(h[i + 1], '^%d+')) > now then "
	"    live = live + 1 end end "
	"redis.call('DEL', KEYS[1]) "
	"if live > 0 then redis.call('PUBLISH', ARGV[1], ARGV[2]) end "
	"return live";

/*
 * KEYS[1] the name's hash, KEYS[2] its counter; ARGV[1] name prefix, [2]
 * "1" for a dry run.  The name when the counter may go (no lock of the
 * name, the counter behind the clock), else nil.
 */
static const char GC_LUA[] = KV_NOW
	"if redis.call('EXISTS', KEYS[1]) == 1 then return false end "
	"local c = redis.call('HMGET', KEYS[2], 'n', 'name') "
	"if not c[2] or string.sub(c[2], 1, #ARGV[1]) ~= ARGV[1] or tonumber(c[1] or 0) >= now_us then return false end "
	"if ARGV[2] ~= '1' then redis.call('DEL', KEYS[2]) end "
	"return c[2]";

/* ------------------------------------------------------------ connections */

static struct timeval tv_of_ms(int64_t ms)
{
	return (struct timeval){ .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
}

/* A new connection, authenticated; NULL with a message. */
static redisContext *kv_dial(struct kv_client *c, dlock_status *st, dlock_error *err)
{
	redisContext *ctx = redisConnectWithTimeout(c->host, c->port, c->open_timeout);
	if (!ctx || ctx->err) {
		*st = dlock_error_set(err, DLOCK_ECONNECT, "%s: cannot connect: %s", c->label,
		                      ctx ? ctx->errstr : "out of memory");
		redisFree(ctx);
		return NULL;
	}
	kv_cloexec(ctx->fd);
	redisSetTimeout(ctx, c->io_timeout);
	if (c->password) {
		redisReply *r = redisCommand(ctx, "AUTH %s", c->password);
		int ok = r && r->type == REDIS_REPLY_STATUS;
		freeReplyObject(r);
		if (!ok) {
			redisFree(ctx);
			*st = dlock_error_set(err, DLOCK_EAUTH, "%s: the server refused the password", c->label);
			return NULL;
		}
	}
	*st = DLOCK_OK;
	return ctx;
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
	dlock_status st = DLOCK_OK;
	redisReply *r = NULL;
	pthread_mutex_lock(&c->mu);
	if (!c->ctx)
		c->ctx = kv_dial(c, &st, err);
	if (c->ctx) {
		r = redisCommandArgv(c->ctx, argc, argv, len);
		if (!r) {
			st = dlock_error_set(err, DLOCK_ECONNECT, "%s: no answer: %s", c->label, c->ctx->errstr);
			redisFree(c->ctx);
			c->ctx = NULL;
		} else if ((st = kv_reply_error(c, r, err)) != DLOCK_OK) {
			freeReplyObject(r);
			r = NULL;
		}
	}
	pthread_mutex_unlock(&c->mu);
	*out = r;
	return st;
}

dlock_status kv_reply_error(struct kv_client *c, const redisReply *r, dlock_error *err)
{
	if (r->type != REDIS_REPLY_ERROR)
		return DLOCK_OK;
	return dlock_error_set(err, DLOCK_ESERVER, "%s: the server said: %s", c->label, r->str);
}

void kv_cloexec(int fd)
{
	int flags = fcntl(fd, F_GETFD);
	if (flags >= 0)
		fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

/* EVAL `script` with `nkeys` keys followed by its arguments, `nwords` words in all (NUL-terminated strings). */
static void kv_eval_cmd(const char *script, int nkeys, const char *const *words, int nwords, struct kv_cmd *cmd)
{
	cmd->argv[0] = "EVAL";
	cmd->argv[1] = script;
	cmd->argv[2] = cmd->nkeys;
	snprintf(cmd->nkeys, sizeof cmd->nkeys, "%d", nkeys);
	nwords = nwords < KV_WORDS_MAX ? nwords : KV_WORDS_MAX;
	for (int i = 0; i < nwords; i++)
		cmd->argv[3 + i] = words[i];
	cmd->argc = 3 + nwords;
	for (int i = 0; i < cmd->argc; i++)
		cmd->len[i] = strlen(cmd->argv[i]);
}

static dlock_status kv_eval(struct kv_client *c, const char *script, int nkeys, const char *const *words, int nwords,
                            redisReply **out, dlock_error *err)
{
	struct kv_cmd cmd;
	kv_eval_cmd(script, nkeys, words, nwords, &cmd);
	return kv_run(c, cmd.argc, cmd.argv, cmd.len, out, err);
}

/* ------------------------------------------------------------ wake-ups */

/* Wake the armed waiters of the name whose digest is `digest`, or all of them (NULL); sub_mu held. */
static void wake_locked(struct kv_client *c, const char *digest)
{
	for (struct kv_lock *lk = c->armed; lk; lk = lk->next_armed)
		if (!digest || strcmp(lk->digest, digest) == 0)
			dlock_wait_wake(lk->armed);
}

/* A connection subscribed to the prefix's channel, without a read timeout (it waits for messages). */
static redisContext *kv_subscribe(struct kv_client *c)
{
	dlock_status st;
	dlock_error ignored;
	redisContext *ctx = kv_dial(c, &st, &ignored);
	redisReply *r = ctx ? redisCommand(ctx, "SUBSCRIBE %s", c->channel) : NULL;
	int ok = r && r->type == REDIS_REPLY_ARRAY; /* ["subscribe", channel, 1] */
	freeReplyObject(r);
	if (!ok) {
		redisFree(ctx);
		return NULL;
	}
	redisSetTimeout(ctx, (struct timeval){ 0, 0 });
	redisEnableKeepAlive(ctx);
	return ctx;
}

/*
 * The subscriber thread: (re)subscribe, then wake the waiters of each
 * name a message names.  While it has no subscription, try_acquire() arms
 * nothing, so the core polls; when one ends or begins, every waiter is
 * woken, as releases may have gone unheard.
 */
static void *kv_listen(void *arg)
{
	struct kv_client *c = arg;
	int pause = 0;
	pthread_mutex_lock(&c->sub_mu);
	while (!c->stopping) {
		if (pause) { /* a second between tries, or until close */
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_sec += 1;
			pthread_cond_timedwait(&c->sub_cond, &c->sub_mu, &until);
			pause = 0;
			continue;
		}
		pthread_mutex_unlock(&c->sub_mu);
		redisContext *ctx = kv_subscribe(c);
		pthread_mutex_lock(&c->sub_mu);
		if (!ctx || c->stopping) {
			redisFree(ctx);
			pause = 1;
			continue;
		}
		c->sub = ctx;
		wake_locked(c, NULL);
		pthread_mutex_unlock(&c->sub_mu);
		redisReply *r;
		while (redisGetReply(ctx, (void **)&r) == REDIS_OK) { /* ["message", channel, digest] */
			pthread_mutex_lock(&c->sub_mu);
			if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING)
				wake_locked(c, r->element[2]->str);
			pthread_mutex_unlock(&c->sub_mu);
			freeReplyObject(r);
		}
		pthread_mutex_lock(&c->sub_mu);
		c->sub = NULL;
		wake_locked(c, NULL);
		redisFree(ctx);
		pause = 1;
	}
	pthread_mutex_unlock(&c->sub_mu);
	return NULL;
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
	kv_loop_close(c); /* a loop client's: on the loop's thread, no call in progress */
	if (c->listener_started) {
		pthread_mutex_lock(&c->sub_mu);
		c->stopping = 1;
		if (c->sub)
			shutdown(c->sub->fd, SHUT_RDWR); /* ends the thread's read */
		pthread_cond_signal(&c->sub_cond);
		pthread_mutex_unlock(&c->sub_mu);
		pthread_join(c->listener, NULL);
	}
	redisFree(c->ctx);
	if (c->password) /* do not leave the password in freed memory */
		memset(c->password, 0, strlen(c->password));
	free(c->host);
	free(c->password);
	free(c->prefix);
	free(c->label);
	pthread_cond_destroy(&c->sub_cond);
	pthread_mutex_destroy(&c->sub_mu);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static dlock_status kv_open(const dlock_uri *uri, dlock_host *host, void **backend, dlock_error *err)
{
	if (uri->nhosts != 1 || uri->hosts[0].host[0] == '\0')
		return dlock_error_set(err, DLOCK_EURI, "kv:// takes one HOST[:PORT]: %s", uri->masked);
	if (uri->path[0] != '\0' && strcmp(uri->path, "/") != 0)
		return dlock_error_set(err, DLOCK_EURI, "kv:// takes no path: %s", uri->masked);
	if (strlen(uri->prefix) > KV_KEY_MAX - 80)
		return dlock_error_set(err, DLOCK_EURI, "kv://: the prefix is too long: %s", uri->masked);
	struct kv_client *c = calloc(1, sizeof *c);
	if (!c)
		return dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->sub_mu, NULL);
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&c->sub_cond, &attr);
	pthread_condattr_destroy(&attr);
	c->host = strdup(uri->hosts[0].host);
	c->password = uri->password ? strdup(uri->password) : NULL;
	c->prefix = strdup(uri->prefix);
	c->label = strdup(uri->masked);
	c->record = dlock_host_owner(host, NULL);
	c->port = uri->hosts[0].port ? uri->hosts[0].port : KV_DEFAULT_PORT;
	c->open_timeout = tv_of_ms(uri->connect_timeout_ms);
	c->io_timeout = tv_of_ms(uri->io_timeout_ms);
	c->io_timeout_ms = uri->io_timeout_ms;
	snprintf(c->channel, sizeof c->channel, "%s:released", uri->prefix);
	if (!c->host || (uri->password && !c->password) || !c->prefix || !c->label) {
		kv_close(c);
		return dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	}
	/* Connect now, so that a wrong address or password fails the open, not the first acquire. */
	dlock_status st;
	c->ctx = kv_dial(c, &st, err);
	if (st == DLOCK_OK && pthread_create(&c->listener, NULL, kv_listen, c) != 0)
		st = dlock_error_set(err, DLOCK_ENOMEM, "kv://: cannot start the subscriber thread");
	c->listener_started = st == DLOCK_OK;
	dlock_io *io = dlock_host_io(host); /* a loop client's loop, opening us on its thread */
	if (st == DLOCK_OK && io)
		st = kv_loop_open(c, io, err);
	if (st != DLOCK_OK) {
		kv_close(c);
		return st;
	}
	*backend = c;
	return DLOCK_OK;
}

/*
 * Every fact of the backend, asked by the core once after open (and
 * INSPECT, BREAK, GC at each dlock_client_feature()).  One answer per
 * code, whatever the kind, except where a kind differs.
 */
static dlock_status kv_feature(void *backend, dlock_lock_kind kind, int code, dlock_fact *out)
{
	(void)backend, (void)kind;
	switch (code) {
	case DLOCK_FACT_BACKEND: out->text = "kv"; break;
	case DLOCK_FEATURE_CONSISTENCY: out->value = DLOCK_CONSISTENCY_AP; break; /* one server, no consensus */
	case DLOCK_FEATURE_FENCING:
	case DLOCK_FEATURE_PERMIT_FENCING: out->value = DLOCK_FENCING_CONDITIONAL; break;
	case DLOCK_FACT_FENCING_NOTE:
		out->text = "tokens come from a per-name counter kept at least at the server's clock in microseconds; "
		            "they go back only if that counter is lost (restart without persistence) and the server's "
		            "clock is then behind the last token";
		break;
	case DLOCK_FEATURE_READ_FENCING: out->value = DLOCK_FENCING_NONE; break; /* readers take no token */
	case DLOCK_FEATURE_FAIR: out->value = 0; break;
	case DLOCK_FEATURE_LEASE: out->value = DLOCK_LEASE_TTL; break;
	case DLOCK_FEATURE_WAKEUP: out->value = DLOCK_WAKEUP_NOTIFY; break;
	case DLOCK_FEATURE_SCOPE: out->value = DLOCK_SCOPE_NETWORK; break;
	case DLOCK_FEATURE_RWLOCK: out->value = DLOCK_RWLOCK_NO_PREFERENCE; break; /* waiting writers keep no place */
	case DLOCK_FEATURE_SEMAPHORE: out->value = DLOCK_SEMAPHORE_UNORDERED; break;
	case DLOCK_FACT_SLOTS: out->value = 1; break;
	case DLOCK_FEATURE_KIND_CHECK: out->value = 1; break; /* the hash keeps the kind and N */
	case DLOCK_FEATURE_INSPECT: out->value = KV_INSPECT; break;
	case DLOCK_FEATURE_BREAK: out->value = DLOCK_BREAK_DELETE; break;
	case DLOCK_FEATURE_GC: out->value = 1; break;
	case DLOCK_FACT_LOOP_IO: out->value = 1; break; /* kv_driver_loop.c; asked with `backend` NULL */
	default: return DLOCK_ENOTSUP; /* the core then answers what it can, or DLOCK_ENOTSUP */
	}
	return DLOCK_OK;
}

/* ------------------------------------------------------------ locks */

/* The keys are the hash of the name: names are untrusted bytes of any length. */
static dlock_status kv_lock_init_kind(void *backend, void *lkp, const char *name, size_t len,
                                      const dlock_kind_spec *spec, dlock_error *err)
{
	struct kv_client *c = backend;
	struct kv_lock *lk = lkp;
	unsigned char digest[32];
	dlock_sha256(name, len, digest);
	dlock_hex(digest, sizeof digest, lk->digest);
	snprintf(lk->key, sizeof lk->key, "%s:%s", c->prefix, lk->digest);
	snprintf(lk->fence_key, sizeof lk->fence_key, "%s:fence", lk->key);
	snprintf(lk->kind, sizeof lk->kind, "%d", (int)spec->kind);
	snprintf(lk->permits, sizeof lk->permits, "%" PRIu32, spec->permits);
	lk->name = malloc(len + 1); /* a name has no NUL: the copy is a C string */
	if (!lk->name)
		return dlock_error_set(err, DLOCK_ENOMEM, "kv://: out of memory");
	memcpy(lk->name, name, len);
	lk->name[len] = '\0';
	return DLOCK_OK;
}

static void kv_lock_fini(void *backend, void *lkp)
{
	struct kv_lock *lk = lkp;
	(void)backend;
	free(lk->name);
}

void kv_owned_cmd(struct kv_client *c, struct kv_lock *lk, const char *op, int64_t lease_ms, struct kv_cmd *cmd)
{
	snprintf(cmd->lease, sizeof cmd->lease, "%" PRId64, lease_ms);
	const char *words[] = { lk->key, lk->field, op, cmd->lease, c->channel, lk->digest };
	kv_eval_cmd(OWNED_LUA, 1, words, 6, cmd);
}

dlock_status kv_owned_answer(struct kv_client *c, const char *op, const redisReply *r, dlock_error *err)
{
	if (r->type != REDIS_REPLY_INTEGER)
		return dlock_error_set(err, DLOCK_ESERVER, "%s: unexpected answer to the %s", c->label, op);
	if (r->integer != 1)
		return dlock_error_set(err, DLOCK_ENOTHELD, "%s: %s: the lock is no longer ours (expired or taken)",
		                       c->label, op);
	return DLOCK_OK;
}

/* Run OWNED_LUA for `op`: DLOCK_OK when the hold was ours, DLOCK_ENOTHELD when not. */
static dlock_status kv_owned(struct kv_client *c, struct kv_lock *lk, const char *op, int64_t lease_ms,
                             dlock_error *err)
{
	struct kv_cmd cmd;
	redisReply *r;
	kv_owned_cmd(c, lk, op, lease_ms, &cmd);
	dlock_status st = kv_run(c, cmd.argc, cmd.argv, cmd.len, &r, err);
	if (st != DLOCK_OK)
		return st;
	st = kv_owned_answer(c, op, r, err);
	freeReplyObject(r);
	return st;
}

static const char *kind_noun(long long kind)
{
	return kind == DLOCK_KIND_MUTEX ? "a mutex" : kind == DLOCK_KIND_RWLOCK ? "a read-write lock" : "a semaphore";
}

dlock_status kv_acquire_cmd(struct kv_client *c, struct kv_lock *lk, int64_t lease_ms, dlock_wait *w,
                            dlock_retry *retry, struct kv_cmd *cmd, dlock_error *err)
{
	unsigned char raw[KV_OWNER_HEX / 2];
	if (dlock_random_bytes(raw, sizeof raw) != DLOCK_OK)
		return dlock_error_set(err, DLOCK_EIO, "kv://: no random bytes for the owner id");
	memcpy(lk->field, "h:", 2);
	dlock_hex(raw, sizeof raw, lk->field + 2);
	snprintf(cmd->lease, sizeof cmd->lease, "%" PRId64, lease_ms);
	/* Arm the wake-up before the attempt, so that a release right after its answer is not missed.  Only
	 * while subscribed: an attempt that says armed gets disarm() at the end, and then no waiter is left. */
	pthread_mutex_lock(&c->sub_mu);
	if (c->sub && !lk->armed) {
		lk->armed = w;
		lk->next_armed = c->armed;
		c->armed = lk;
	}
	retry->armed = c->sub && lk->armed; /* no subscription for now: the core polls */
	pthread_mutex_unlock(&c->sub_mu);

	const char *words[] = { lk->key, lk->fence_key, lk->field, cmd->lease, dlock_wait_wants_token(w) ? "1" : "0",
		                lk->kind, lk->permits, dlock_wait_mode(w) == DLOCK_MODE_SHARED ? "s" : "x",
		                lk->name, c->record };
	kv_eval_cmd(ACQUIRE_LUA, 2, words, 10, cmd);
	return DLOCK_OK;
}

dlock_status kv_acquire_answer(struct kv_client *c, struct kv_lock *lk, const redisReply *r, int64_t sent_ns,
                               dlock_retry *retry, dlock_acquired *out, dlock_error *err)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER)
		return dlock_error_set(err, DLOCK_ESERVER, "%s: unexpected answer to the acquire", c->label);
	long long result = r->element[0]->integer, a = r->element[1]->integer;
	long long b = r->elements > 2 ? r->element[2]->integer : 0;
	if (result == 0) {
		retry->after_ms = a > 0 ? a : -1; /* when the soonest lease ends, unless woken before */
		return dlock_error_set(err, DLOCK_EBUSY, "%s: the lock is held by another owner", c->label);
	}
	if (result < 0)
		return dlock_error_set(err, DLOCK_EKIND, "%s: the name is in use as another kind of lock: %s of %lld "
		                       "permits, not %s of %s", c->label, kind_noun(a), b, kind_noun(atoi(lk->kind)),
		                       lk->permits);
	*out = (dlock_acquired){ .token = (uint64_t)a, .sent_ns = sent_ns, .slot = (uint32_t)b };
	return DLOCK_OK;
}

static dlock_status kv_try_acquire(void *backend, void *lkp, int64_t lease_ms, dlock_wait *w, dlock_retry *retry,
                                   dlock_acquired *out, dlock_error *err)
{
	struct kv_client *c = backend;
	struct kv_lock *lk = lkp;
	struct kv_cmd cmd;
	redisReply *r;
	dlock_status st = kv_acquire_cmd(c, lk, lease_ms, w, retry, &cmd, err);
	if (st != DLOCK_OK)
		return st;
	int64_t sent = dlock_monotonic_ns(); /* the lease runs from here at the latest */
	st = kv_run(c, cmd.argc, cmd.argv, cmd.len, &r, err);
	if (st == DLOCK_ECONNECT) {
		/* The script may have run and only its answer been lost: remove what may be ours. */
		dlock_error ignored;
		kv_owned(c, lk, "release", 0, &ignored); /* else the hold, if there, ends with its lease */
		retry->transient = 1;                   /* the server may be back before the deadline */
	}
	if (st != DLOCK_OK)
		return st;
	st = kv_acquire_answer(c, lk, r, sent, retry, out, err);
	freeReplyObject(r);
	return st;
}

/* The acquisition is over: its wake-up no longer applies. */
static void kv_disarm(void *backend, void *lkp, dlock_wait *w)
{
	struct kv_client *c = backend;
	struct kv_lock *lk = lkp;
	(void)w;
	pthread_mutex_lock(&c->sub_mu);
	for (struct kv_lock **p = &c->armed; *p; p = &(*p)->next_armed)
		if (*p == lk) {
			*p = lk->next_armed;
			break;
		}
	lk->armed = NULL;
	pthread_mutex_unlock(&c->sub_mu);
}

static dlock_status kv_release(void *backend, void *lkp, dlock_error *err)
{
	return kv_owned(backend, lkp, "release", 0, err);
}

static dlock_status kv_extend(void *backend, void *lkp, int64_t lease_ms, dlock_error *err)
{
	return kv_owned(backend, lkp, "extend", lease_ms, err);
}

dlock_status kv_check_answer(struct kv_client *c, dlock_status st, dlock_error *err)
{
	if (st != DLOCK_OK && st != DLOCK_ENOTHELD) /* check answers only held, not held, or cannot tell */
		return dlock_error_set(err, DLOCK_EUNCERTAIN, "%s: cannot tell whether the lock is ours", c->label);
	return st;
}

static dlock_status kv_check(void *backend, void *lkp, dlock_error *err)
{
	return kv_check_answer(backend, kv_owned(backend, lkp, "check", 0, err), err);
}

/* ------------------------------------------------------------ inspection */

/* Describe what INSPECT_LUA read of `key` into `info` (nothing when no holder is live); `name` NULL: its field. */
static dlock_status describe(struct kv_client *c, const char *key, redisReply *r, const char *name,
                             dlock_info *info, dlock_error *err)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_INTEGER)
		return dlock_error_set(err, DLOCK_ESERVER, "%s: unexpected answer to the inspection", c->label);
	long long now = r->element[0]->integer, kind = 0, permits = 1;
	size_t live = 0;
	for (size_t i = 1; i + 1 < r->elements; i += 2) {
		const char *f = r->element[i]->str, *v = r->element[i + 1]->str;
		if (strcmp(f, "kind") == 0)
			kind = atoll(v);
		else if (strcmp(f, "n") == 0)
			permits = atoll(v);
		else if (strcmp(f, "name") == 0 && !name)
			name = v;
		else if (strncmp(f, "h:", 2) == 0)
			live += atoll(v) > now;
	}
	if (live == 0 || !name)
		return DLOCK_OK;
	dlock_status st = dlock_info_lock(info, name, strlen(name), key, (dlock_lock_kind)kind, (uint32_t)permits, -1);
	for (size_t i = 1; st == DLOCK_OK && i + 1 < r->elements; i += 2) {
		long long exp, slot, acquired;
		unsigned long long token;
		char mode;
		int at = 0;
		if (strncmp(r->element[i]->str, "h:", 2) != 0 ||
		    sscanf(r->element[i + 1]->str, "%lld %lld %c %llu %lld %n", &exp, &slot, &mode, &token, &acquired,
		           &at) != 5 || exp <= now)
			continue;
		dlock_holder h = DLOCK_HOLDER_INIT;
		h.acquired_ms = acquired;
		h.lease_left_ms = exp - now;
		h.token = token;
		h.mode = mode == 's' ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
		h.slot = kind == DLOCK_KIND_SEMAPHORE ? slot : -1;
		const char *record = r->element[i + 1]->str + at;
		st = dlock_info_holder(info, &h, record, strlen(record));
	}
	return st;
}

/* Run INSPECT_LUA on `key` and describe it. */
static dlock_status inspect_key(struct kv_client *c, const char *key, const char *name, dlock_info *info,
                                dlock_error *err)
{
	redisReply *r;
	dlock_status st = kv_eval(c, INSPECT_LUA, 1, &key, 1, &r, err);
	if (st == DLOCK_OK)
		st = describe(c, key, r, name, info, err);
	freeReplyObject(r);
	return st;
}

static dlock_status kv_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err)
{
	struct kv_client *c = backend;
	struct kv_lock lk;
	dlock_kind_spec mutex = { DLOCK_KIND_MUTEX, 1 };
	memset(&lk, 0, sizeof lk);
	dlock_status st = kv_lock_init_kind(c, &lk, name, len, &mutex, err);
	if (st == DLOCK_OK)
		st = inspect_key(c, lk.key, lk.name, info, err);
	kv_lock_fini(c, &lk);
	return st;
}

/*
 * Every key of the prefix that matches `suffix` after PREFIX:D, a SCAN
 * step at a time (COUNT: bounded work per round trip); `each` per key.
 * The prefix's glob characters are escaped, and `?` x 64 matches only D.
 */
static dlock_status scan(struct kv_client *c, const char *suffix,
                         dlock_status (*each)(struct kv_client *c, const char *key, void *arg), void *arg,
                         dlock_error *err)
{
	char pattern[2 * KV_KEY_MAX + 80], cursor[32] = "0";
	size_t n = 0;
	for (const char *p = c->prefix; *p; p++) {
		if (strchr("*?[]\\", *p))
			pattern[n++] = '\\';
		pattern[n++] = *p;
	}
	pattern[n++] = ':';
	memset(pattern + n, '?', 64);
	snprintf(pattern + n + 64, sizeof pattern - n - 64, "%s", suffix);
	dlock_status st = DLOCK_OK;
	do {
		const char *argv[] = { "SCAN", cursor, "MATCH", pattern, "COUNT", "200" };
		size_t len[6];
		for (int i = 0; i < 6; i++)
			len[i] = strlen(argv[i]);
		redisReply *r;
		st = kv_run(c, 6, argv, len, &r, err);
		if (st != DLOCK_OK)
			return st;
		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			return dlock_error_set(err, DLOCK_ESERVER, "%s: unexpected answer to SCAN", c->label);
		}
		snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
		for (size_t i = 0; st == DLOCK_OK && i < r->element[1]->elements; i++)
			st = each(c, r->element[1]->element[i]->str, arg);
		freeReplyObject(r);
	} while (st == DLOCK_OK && strcmp(cursor, "0") != 0);
	return st;
}

struct list_arg {
	dlock_info *info;
	dlock_error *err;
};

static dlock_status list_one(struct kv_client *c, const char *key, void *arg)
{
	struct list_arg *a = arg;
	return inspect_key(c, key, NULL, a->info, a->err);
}

static dlock_status kv_list(void *backend, dlock_info *info, dlock_error *err)
{
	struct list_arg a = { info, err };
	return scan(backend, "", list_one, &a, err);
}

/* Delete the name's hash (never its counter: the next token is still larger) and wake its waiters. */
static dlock_status kv_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	struct kv_client *c = backend;
	struct kv_lock lk;
	dlock_kind_spec mutex = { DLOCK_KIND_MUTEX, 1 };
	redisReply *r = NULL;
	memset(&lk, 0, sizeof lk);
	dlock_status st = kv_lock_init_kind(c, &lk, name, len, &mutex, err);
	const char *words[] = { lk.key, c->channel, lk.digest };
	if (st == DLOCK_OK)
		st = kv_eval(c, BREAK_LUA, 1, words, 3, &r, err);
	if (st == DLOCK_OK && r->type != REDIS_REPLY_INTEGER)
		st = dlock_error_set(err, DLOCK_ESERVER, "%s: unexpected answer to the break", c->label);
	*broken = st == DLOCK_OK ? (size_t)r->integer : 0;
	freeReplyObject(r);
	kv_lock_fini(c, &lk);
	return st;
}

/* ------------------------------------------------------------ collection */

struct gc_arg {
	char prefix[DLOCK_NAME_MAX + 1];
	const char *dry;
	dlock_gc_removed_fn *removed;
	void *arg;
	size_t count;
	dlock_error *err;
};

static dlock_status gc_one(struct kv_client *c, const char *fence_key, void *arg)
{
	struct gc_arg *a = arg;
	char key[KV_KEY_MAX];
	snprintf(key, sizeof key, "%.*s", (int)(strlen(fence_key) - strlen(":fence")), fence_key);
	const char *words[] = { key, fence_key, a->prefix, a->dry };
	redisReply *r;
	dlock_status st = kv_eval(c, GC_LUA, 2, words, 4, &r, a->err);
	if (st == DLOCK_OK && r->type == REDIS_REPLY_STRING) {
		a->removed(a->arg, r->str, r->len, fence_key);
		a->count++;
	}
	freeReplyObject(r);
	return st;
}

/* Remove the counters of names nobody holds whose next token would come from the clock anyway. */
static dlock_status kv_gc(void *backend, const char *prefix, size_t len, unsigned flags,
                          dlock_gc_removed_fn *removed, void *arg, size_t *count, dlock_error *err)
{
	struct gc_arg a = { .dry = flags & DLOCK_GC_DRY_RUN ? "1" : "0", .removed = removed, .arg = arg, .err = err };
	snprintf(a.prefix, sizeof a.prefix, "%.*s", (int)len, prefix); /* at most a name: the core checks */
	dlock_status st = scan(backend, ":fence", gc_one, &a, err);
	*count = a.count;
	return st;
}

const dlock_driver example_kv_driver = {
	.abi_version = DLOCK_DRIVER_ABI_VERSION,
	.scheme = "kv",
	.lock_size = sizeof(struct kv_lock),
	.open = kv_open,
	.close = kv_close,
	.knows_param = kv_knows_param,
	.lock_init_kind = kv_lock_init_kind,
	.lock_fini = kv_lock_fini,
	.try_acquire = kv_try_acquire,
	.disarm = kv_disarm,
	.release = kv_release,
	.extend = kv_extend,
	.check = kv_check,
	.inspect = kv_inspect,
	.list = kv_list,
	.break_lock = kv_break,
	.gc = kv_gc,
	.feature = kv_feature,
	.try_acquire_start = kv_try_acquire_start,
	.release_start = kv_release_start,
	.extend_start = kv_extend_start,
	.check_start = kv_check_start,
};
