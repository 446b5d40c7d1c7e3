/*
 * The Lua scripts of the Redis backend, and how they are called.
 *
 * Every script takes the lock's keys as KEYS and everything else (owner
 * value, durations, channel) as ARGV: no name, prefix or value is ever
 * pasted into a script's text, so the text, and its SHA1, never change.
 *
 * Calls use EVALSHA with the SHA1 that SCRIPT LOAD reported when the client
 * opened.  A server that answers NOSCRIPT (after SCRIPT FLUSH, a restart or
 * a failover to a replica that never saw the script) gets the same call as
 * EVAL, which also puts the script back into its cache.  A server that
 * refuses SCRIPT LOAD gets EVAL every time.
 */
#include <stdio.h>
#include <string.h>

#include "redis_internal.h"

/*
 * Acquire in one round trip.  On success the fencing token is
 * max(last token + 1, the server's clock in microseconds): while the
 * counter key lives it only grows, and when it is lost (restart without
 * persistence, failover to a replica that had not received it, eviction)
 * the next token starts again from the clock, which is ahead of every token
 * handed out before unless the server's clock went back.  The counter gets
 * an expiry far longer than any lease, refreshed by every acquisition, so
 * names that are no longer used do not keep a key forever.  '%d' keeps
 * large tokens out of Lua's "1.7e+15" number formatting.
 * redis.replicate_commands() lets Redis < 5 write after TIME (a no-op later).
 */
static const char acquire_lua[] =
	"if redis.replicate_commands then redis.replicate_commands() end\n"
	"if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  return {0, redis.call('PTTL', KEYS[1])}\n"
	"end\n"
	"local t = redis.call('TIME')\n"
	"local token = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
	"local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0\n"
	"if last >= token then token = last + 1 end\n"
	"redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])\n"
	"return {1, token}\n";

/*
 * Owner-only delete; the message wakes the waiters subscribed to the lock.
 * pcall: an ACL user without channels may not PUBLISH, and that must not
 * turn a release that happened into an error (its waiters poll anyway).
 */
static const char release_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  redis.pcall('PUBLISH', ARGV[2], '1')\n"
	"  return 1\n"
	"end\n"
	"return 0\n";

/* Owner-only new TTL. */
static const char extend_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"return 0\n";

static const char *const bodies[REDIS_SCRIPT_COUNT] = {
	[REDIS_SCRIPT_ACQUIRE] = acquire_lua,
	[REDIS_SCRIPT_RELEASE] = release_lua,
	[REDIS_SCRIPT_EXTEND] = extend_lua,
};

dlock_status dlock_redis_scripts_load(redisContext *ctx, const struct redis_endpoint *ep,
                                      struct redis_scripts *s, dlock_error *err)
{
	for (int i = 0; i < REDIS_SCRIPT_COUNT; i++) {
		redisReply *r = redisCommand(ctx, "SCRIPT LOAD %s", bodies[i]);
		if (!r)
			return dlock_redis_io_error(ctx, ep, err);
		/* A server that wants a password fails the open; one that only refuses SCRIPT LOAD gets EVAL. */
		if (dlock_redis_is_error(r, "NOAUTH")) {
			dlock_status st = dlock_redis_reply_error(r, ep, "SCRIPT LOAD", err);
			freeReplyObject(r);
			return st;
		}
		s->sha[i][0] = '\0';
		if (r->type == REDIS_REPLY_STRING && r->len == 40)
			snprintf(s->sha[i], sizeof s->sha[i], "%s", r->str);
		freeReplyObject(r);
	}
	return DLOCK_OK;
}

/* Argument vector of EVALSHA/EVAL: command, sha or body, key count, then `a`. */
struct script_call {
	int argc;
	const char *argv[3 + REDIS_ARGS_MAX];
	size_t len[3 + REDIS_ARGS_MAX];
	char nkeys[16];
};

static void script_call_init(struct script_call *call, const char *cmd, const char *script, int nkeys,
                             const struct redis_args *a)
{
	snprintf(call->nkeys, sizeof call->nkeys, "%d", nkeys);
	call->argv[0] = cmd;
	call->argv[1] = script;
	call->argv[2] = call->nkeys;
	for (int i = 0; i < 3; i++)
		call->len[i] = strlen(call->argv[i]);
	for (int i = 0; i < a->argc; i++) {
		call->argv[3 + i] = a->argv[i];
		call->len[3 + i] = a->len[i];
	}
	call->argc = 3 + a->argc;
}

int dlock_redis_script_append(redisContext *ctx, const struct redis_scripts *s, enum redis_script_id id,
                              int nkeys, const struct redis_args *a)
{
	struct script_call call;
	if (s->sha[id][0])
		script_call_init(&call, "EVALSHA", s->sha[id], nkeys, a);
	else
		script_call_init(&call, "EVAL", bodies[id], nkeys, a);
	return redisAppendCommandArgv(ctx, call.argc, call.argv, call.len);
}

redisReply *dlock_redis_script_read(redisContext *ctx, enum redis_script_id id, int nkeys,
                                    const struct redis_args *a)
{
	void *reply = NULL;
	if (redisGetReply(ctx, &reply) != REDIS_OK)
		return NULL;
	redisReply *r = reply;
	if (!dlock_redis_is_error(r, "NOSCRIPT"))
		return r;
	freeReplyObject(r);
	struct script_call call;
	script_call_init(&call, "EVAL", bodies[id], nkeys, a);
	return redisCommandArgv(ctx, call.argc, call.argv, call.len);
}

redisReply *dlock_redis_script_run(redisContext *ctx, const struct redis_scripts *s, enum redis_script_id id,
                                   int nkeys, const struct redis_args *a)
{
	if (dlock_redis_script_append(ctx, s, id, nkeys, a) != REDIS_OK)
		return NULL;
	return dlock_redis_script_read(ctx, id, nkeys, a);
}
