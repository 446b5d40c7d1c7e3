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

#include "redis_scripts.h"

/*
 * Shared by the scripts that hand out a fencing token: the token is
 * max(last token + 1, the server's clock in microseconds).  While the
 * counter key lives it only grows, and when it is lost (restart without
 * persistence, failover to a replica that had not received it, eviction)
 * the next token starts again from the clock, which is ahead of every token
 * handed out before unless the server's clock went back.  The counter gets
 * an expiry far longer than any lease, refreshed by every acquisition, so
 * names that are no longer used do not keep a key forever.  '%d' keeps
 * large tokens out of Lua's "1.7e+15" number formatting.
 * redis.replicate_commands() lets Redis < 5 write after TIME (a no-op later).
 */
#define TOKEN_LUA                                                                 \
	"if redis.replicate_commands then redis.replicate_commands() end\n"       \
	"local function next_token(fence, ttl)\n"                                 \
	"  local t = redis.call('TIME')\n"                                        \
	"  local token = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"             \
	"  local last = tonumber(redis.call('GET', fence) or '0') or 0\n"         \
	"  if last >= token then token = last + 1 end\n"                          \
	"  redis.call('SET', fence, string.format('%d', token), 'PX', ttl)\n"     \
	"  return token\n"                                                        \
	"end\n"                                                                   \
	"local function now_ms()\n"                                               \
	"  local t = redis.call('TIME')\n"                                        \
	"  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"    \
	"end\n"                                                                   \
	"local function owns(v, o)\n"                                             \
	"  return type(v) == 'string' and (v == o or\n"                           \
	"    string.sub(v, 1, #o + 1) == o .. ' ')\n"                             \
	"end\n"                                                                   \
	"local function owner_value(o, token, rec)\n"                             \
	"  return string.format('%s %d %d %s', o, token, now_ms(), rec)\n"        \
	"end\n"

/*
 * Acquire in one round trip, with a token.  The key's value is the owner
 * value, then what inspection shows (redis_inspect.c): the token, the
 * server's time of the acquisition in ms and the client's owner record
 * (ARGV[4], dlock_host_owner(): percent-encoded, no space).  The owner-only
 * scripts compare the first word (owns()), so a value that is the owner
 * alone — the previous release's, or a grant by its queue — is still ours.
 */
static const char acquire_lua[] =
	TOKEN_LUA
	"if redis.call('EXISTS', KEYS[1]) == 1 then\n"
	"  return {0, redis.call('PTTL', KEYS[1])}\n"
	"end\n"
	"local token = next_token(KEYS[2], ARGV[3])\n"
	"redis.call('SET', KEYS[1], owner_value(ARGV[1], token, ARGV[4]), 'PX', ARGV[2])\n"
	"return {1, token}\n";

/*
 * Owner-only delete; the message wakes the waiters subscribed to the lock.
 * ARGV[3] is how: PUBLISH, or SPUBLISH in a cluster (only the node that
 * serves the channel's slot hears it, where a PUBLISH goes to every node).
 * pcall: an ACL user without channels may not publish, and that must not
 * turn a release that happened into an error (its waiters poll anyway).
 */
static const char release_lua[] =
	TOKEN_LUA
	"if owns(redis.call('GET', KEYS[1]), ARGV[1]) then\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  redis.pcall(ARGV[3], ARGV[2], '1')\n"
	"  return 1\n"
	"end\n"
	"return 0\n";

/* Owner-only new TTL. */
static const char extend_lua[] =
	TOKEN_LUA
	"if owns(redis.call('GET', KEYS[1]), ARGV[1]) then\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"return 0\n";

/*
 * fair=1: give the free lock to the first live waiter in the queue (KEYS[2],
 * KEYS[3], below), dropping the dead ones before it: the key gets the
 * waiter's owner value and the lease its entry names (a claiming waiter's
 * claim window: see the enqueue script), the token (when it wants one) is
 * pushed onto its grant key, which wakes that waiter's BLPOP and no one
 * else; the grant key expires with that lease if nobody pops it.  false:
 * nobody live.
 */
#define GRANT_LUA                                                                                 \
	"local function grant_first_live()\n"                                                      \
	"  local now = nil\n"                                                                      \
	"  while true do\n"                                                                        \
	"    local head = redis.call('LPOP', KEYS[2])\n"                                           \
	"    if not head then return false end\n"                                                  \
	"    now = now or now_ms()\n"                                                              \
	"    local e = redis.call('HGET', KEYS[3], head)\n"                                        \
	"    local rec = redis.call('HGET', KEYS[3], '@' .. head)\n"                               \
	"    redis.call('HDEL', KEYS[3], head, '@' .. head)\n"                                     \
	"    local deadline, lease, fttl, gk = string.match(e or '', '^(%d+) (%d+) (%d+) (.*)$')\n" \
	"    if deadline and tonumber(deadline) >= now then\n"                                     \
	"      local token = 0\n"                                                                  \
	"      if fttl ~= '0' then token = next_token(KEYS[4], fttl) end\n"                        \
	"      local v = head\n"                                                                   \
	"      if rec then v = owner_value(head, token, rec) end\n"                                \
	"      redis.call('SET', KEYS[1], v, 'PX', lease)\n"                                       \
	"      redis.call('RPUSH', gk, string.format('%d', token))\n"                              \
	"      redis.call('PEXPIRE', gk, lease)\n"                                                 \
	"      return true\n"                                                                      \
	"    end\n"                                                                                \
	"  end\n"                                                                                  \
	"end\n"

/*
 * fair=1: the waiter queue.  KEYS[2] lists the waiting owners in arrival
 * order; KEYS[3] maps each to "deadline lease fence-ttl grant-key"
 * (deadline in the server's milliseconds, fence-ttl 0 for no token,
 * grant-key the list the waiter blocks on).  An owner is in both or in
 * neither.  A waiter whose deadline passed (it stopped refreshing: dead,
 * paused, or cut off) is dropped when it reaches the head, and is never
 * granted the lock.  Grant keys are PREFIX:{D}:grant:OWNER: not declared in
 * KEYS, since only the queue knows them, but in the lock's slot.
 *
 * Enqueue, or refresh the deadline of a queued waiter, or take the lock:
 * ARGV owner, lease ms, fence ttl ms ("0": no token), liveness ms, queue
 * keys' ttl ms, grant key, "1" when the caller's BLPOP on its grant key
 * follows in the same pipeline (a success then pushes a "0" for it to pop
 * at once, instead of blocking), claim ms, owner record (kept in KEYS[3]
 * under "@OWNER" while queued, for the grant to write into the value; a
 * waiter of the previous release has none and is granted the owner value
 * alone, which its scripts compare), the owner's "gone" key (set when it
 * withdrew: see the handoff script).  -> {1, token, 1} taken now;
 * {1, token, 0} granted by a release since the last call and claimed here
 * (the grant is consumed, the key gets the whole lease; the token is the
 * counter's value: nobody can have taken one since, the lock being ours);
 * {0, pttl, 0} queued; {0, -2, 0} and nothing done for an owner that withdrew.
 *
 * The claim: a grant gives the lock for the waiter's claim window only
 * (its entry's "lease"), not its lease.  A live waiter claims it at once —
 * the extend script right behind its BLPOP in the same pipeline, which the
 * server runs as soon as the grant unblocks it, or this script's next run
 * — and gets its whole lease; a waiter that died in the queue (its
 * connection, and so its BLPOP, gone with it) claims nothing, and the key
 * expires after the window, for the next look to grant the next live
 * waiter, where it would otherwise stay unused for a whole lease.  An
 * entry written by a client that does not claim carries its whole lease
 * there, and is granted that, as before.  A lock found free (its holder's
 * lease ran out: no release granted it) with a live waiter ahead of the
 * caller goes to that waiter here, so that any waiter's look serves the
 * queue; pttl -2 only if that grant could not be made.
 */
static const char enqueue_lua[] =
	TOKEN_LUA
	GRANT_LUA
	"local function end_own_blpop()\n"
	"  if ARGV[7] == '1' then\n"
	"    redis.call('RPUSH', ARGV[6], '0')\n"
	"    redis.call('PEXPIRE', ARGV[6], ARGV[2])\n"
	"  end\n"
	"end\n"
	"if redis.call('EXISTS', ARGV[10]) == 1 then return {0, -2, 0} end\n"
	"local holder = redis.call('GET', KEYS[1])\n"
	"if owns(holder, ARGV[1]) then\n"
	"  redis.call('HDEL', KEYS[3], '@' .. ARGV[1])\n"
	"  redis.call('DEL', ARGV[6])\n"
	"  end_own_blpop()\n"
	"  local token = 0\n"
	"  if ARGV[3] ~= '0' then token = tonumber(redis.call('GET', KEYS[4]) or '0') or 0 end\n"
	"  if holder == ARGV[1] then\n"
	"    redis.call('SET', KEYS[1], owner_value(ARGV[1], token, ARGV[9]), 'PX', ARGV[2])\n"
	"  else\n"
	"    redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"  end\n"
	"  return {1, token, 0}\n"
	"end\n"
	"local now = now_ms()\n"
	"while true do\n"
	"  local head = redis.call('LINDEX', KEYS[2], 0)\n"
	"  if not head or head == ARGV[1] then break end\n"
	"  local e = redis.call('HGET', KEYS[3], head)\n"
	"  if e and tonumber(string.match(e, '^%d+')) >= now then break end\n"
	"  redis.call('LPOP', KEYS[2])\n"
	"  redis.call('HDEL', KEYS[3], head, '@' .. head)\n"
	"end\n"
	"if not holder then\n"
	"  local head = redis.call('LINDEX', KEYS[2], 0)\n"
	"  if not head or head == ARGV[1] then\n"
	"    if head then\n"
	"      redis.call('LPOP', KEYS[2])\n"
	"      redis.call('HDEL', KEYS[3], head, '@' .. head)\n"
	"    end\n"
	"    local token = 0\n"
	"    if ARGV[3] ~= '0' then token = next_token(KEYS[4], ARGV[3]) end\n"
	"    redis.call('SET', KEYS[1], owner_value(ARGV[1], token, ARGV[9]), 'PX', ARGV[2])\n"
	"    end_own_blpop()\n"
	"    return {1, token, 1}\n"
	"  end\n"
	"  if grant_first_live() then holder = head end\n"
	"end\n"
	"local entry = string.format('%d %s %s %s', now + tonumber(ARGV[4]), ARGV[8], ARGV[3], ARGV[6])\n"
	"if redis.call('HSET', KEYS[3], ARGV[1], entry) == 1 then\n"
	"  redis.call('HSET', KEYS[3], '@' .. ARGV[1], ARGV[9])\n"
	"  redis.call('RPUSH', KEYS[2], ARGV[1])\n"
	"end\n"
	"redis.call('PEXPIRE', KEYS[2], ARGV[5])\n"
	"redis.call('PEXPIRE', KEYS[3], ARGV[5])\n"
	"if holder then return {0, redis.call('PTTL', KEYS[1]), 0} end\n"
	"return {0, -2, 0}\n";

/*
 * fair=1: release the lock to the first live waiter, or withdraw a waiter
 * that gives up (and hand on the lock if a release granted it meanwhile).
 * ARGV owner, channel, the owner's own grant key (dropped on withdrawal;
 * the holder's was consumed, or expires with its lease), the publish
 * command (as the release script's), how long a withdrawal is remembered
 * (ms) and where (the owner's "gone" key) -> 2 granted to a waiter | 1 released | 0 not the holder.  A waiter
 * that withdraws while the lock is free (its holder's lease ran out)
 * grants it to the next live waiter, who would otherwise wait for its own
 * next look.  With nobody to grant, "1" on the lock's channel wakes the
 * waiters that do not queue.
 *
 * A withdrawal is remembered (PREFIX:{D}:gone:OWNER, in the lock's slot,
 * for the queue keys' lifetime), and the enqueue script of that owner does nothing
 * after it: a waiter cancelled right after writing its enqueue, BLPOP and
 * claim (its socket shut down under them) withdraws on another connection,
 * and the server may run that withdrawal before the enqueue it had not yet
 * read; the enqueue would then queue a waiter that is gone, a release
 * grant it the lock, and the claim behind the BLPOP take the whole lease
 * for nobody.
 */
static const char handoff_lua[] =
	TOKEN_LUA
	GRANT_LUA
	"local holder = redis.call('GET', KEYS[1])\n"
	"redis.call('HDEL', KEYS[3], '@' .. ARGV[1])\n"
	"if not owns(holder, ARGV[1]) then\n"
	"  redis.call('DEL', ARGV[3])\n"
	"  redis.call('SET', ARGV[6], '1', 'PX', ARGV[5])\n"
	"  if redis.call('HDEL', KEYS[3], ARGV[1]) == 1 then redis.call('LREM', KEYS[2], 1, ARGV[1]) end\n"
	"  if not holder then grant_first_live() end\n"
	"  return 0\n"
	"end\n"
	"if grant_first_live() then return 2 end\n"
	"redis.call('DEL', KEYS[1])\n"
	"redis.pcall(ARGV[4], ARGV[2], '1')\n"
	"return 1\n";

/*
 * Readers of a read-write lock.  A writer is a mutex holder: the acquire,
 * release and extend scripts above, on the same key KEYS[1], so a mutex
 * and a writer exclude each other.  Readers are kept in KEYS[2], a sorted
 * set of their owner values scored by the server's time (ms) at which each
 * one's lease ends, and while any is alive KEYS[1] holds the value
 * 'shared', which no owner value (hex) can equal, with the TTL of the last
 * of them: every SET NX, the mutex's and the writer's, then fails while
 * readers hold the name, and a reader may join only while KEYS[1] is absent
 * or 'shared'.  A reader that dies stops renewing: its entry's time passes
 * and KEYS[1] expires with the last live reader's lease, never later, so it
 * cannot block a writer beyond its own lease.  Each acquire, renewal and
 * release drops the entries whose time has passed and sets KEYS[1] and
 * KEYS[2] to expire with the last remaining reader (settle_readers); when
 * none remains it deletes both and publishes, as a release does, for the
 * waiters.  No writer preference: a waiting writer does not hold back new
 * readers (it is not in Redis while it waits).  All times come from TIME,
 * never from the client's clock.  The last key (HOLDERS) maps each reader
 * to "TOKEN ACQUIRED_MS RECORD" for inspection, and goes with its entry.
 */
#define READERS_LUA                                                                         \
	"local SHARED = 'shared'\n"                                                          \
	"local HOLDERS = KEYS[#KEYS]\n"                                                      \
	"local function settle_readers(now)\n"                                               \
	"  local past = string.format('(%d', now)\n"                                         \
	"  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', past)\n"                 \
	"  if #gone > 0 then redis.call('HDEL', HOLDERS, unpack(gone)) end\n"                \
	"  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', past)\n"                          \
	"  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]\n"            \
	"  if not last then\n"                                                               \
	"    redis.call('DEL', KEYS[1], KEYS[2], HOLDERS)\n"                                 \
	"    return false\n"                                                                 \
	"  end\n"                                                                            \
	"  local ttl = string.format('%d', math.max(tonumber(last) - now, 1))\n"             \
	"  redis.call('SET', KEYS[1], SHARED, 'PX', ttl)\n"                                  \
	"  redis.call('PEXPIRE', KEYS[2], ttl)\n"                                            \
	"  redis.call('PEXPIRE', HOLDERS, ttl)\n"                                            \
	"  return true\n"                                                                    \
	"end\n"                                                                              \
	"local function live_reader(now)\n"                                                  \
	"  local score = redis.call('ZSCORE', KEYS[2], ARGV[1])\n"                           \
	"  return score and tonumber(score) >= now and redis.call('GET', KEYS[1]) == SHARED\n" \
	"end\n"

/* Join the readers unless a writer (or a mutex) holds the name; the token is the latest writer's. */
static const char read_acquire_lua[] =
	TOKEN_LUA
	READERS_LUA
	"local holder = redis.call('GET', KEYS[1])\n"
	"if holder and holder ~= SHARED then return {0, redis.call('PTTL', KEYS[1])} end\n"
	"local now = now_ms()\n"
	"if not holder then redis.call('DEL', KEYS[2], HOLDERS) end\n"
	"local token = 0\n"
	"if ARGV[3] == '1' then token = tonumber(redis.call('GET', KEYS[3]) or '0') or 0 end\n"
	"redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])\n"
	"redis.call('HSET', HOLDERS, ARGV[1], string.format('%d %d %s', token, now, ARGV[4]))\n"
	"settle_readers(now)\n"
	"return {1, token}\n";

/* Owner-only: leave the readers; the last one out frees the name and wakes its waiters. */
static const char read_release_lua[] =
	TOKEN_LUA
	READERS_LUA
	"local now = now_ms()\n"
	"local ours = live_reader(now)\n"
	"redis.call('ZREM', KEYS[2], ARGV[1])\n"
	"redis.call('HDEL', HOLDERS, ARGV[1])\n"
	"if redis.call('GET', KEYS[1]) == SHARED and not settle_readers(now) then\n"
	"  redis.pcall(ARGV[3], ARGV[2], '1')\n"
	"end\n"
	"if ours then return 1 end\n"
	"return 0\n";

/* Owner-only: a live reader's lease runs again from now. */
static const char read_extend_lua[] =
	TOKEN_LUA
	READERS_LUA
	"local now = now_ms()\n"
	"if not live_reader(now) then return 0 end\n"
	"redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])\n"
	"settle_readers(now)\n"
	"return 1\n";

static const char read_check_lua[] =
	TOKEN_LUA
	READERS_LUA
	"if live_reader(now_ms()) then return 1 end\n"
	"return 0\n";

/*
 * Permits of a semaphore of N.  Like readers, permits are kept per owner
 * in KEYS[2], a sorted set of owner values scored by the server's time
 * (ms) at which each one's lease ends, with the slot of each in KEYS[3]
 * (a hash owner -> slot, 0..N-1, unique among the live permits), and while
 * any is alive KEYS[1] holds the value 'semaphore' (no owner value, hex,
 * can equal it) with the TTL of the last of them: a mutex, a writer and
 * readers (whose SET NX, or whose join, needs KEYS[1] absent or theirs)
 * then wait while permits are held, and a permit is granted only while
 * KEYS[1] is absent or 'semaphore': the kinds exclude each other.  A holder
 * that dies stops renewing: its entry's time passes and it is dropped by
 * the next script that looks (settle_permits), never later than its lease.
 *
 * N agreement: KEYS[5] holds the N of the name's live holders and waiters,
 * and lives as long as the last of them.  Waiters are kept in KEYS[4], a
 * sorted set of waiter ids scored by the server's time until which each
 * counts as waiting: every attempt that finds no free permit refreshes it
 * to the time of its next attempt plus WAITER_GRACE_MS, so a waiter that
 * died or gave up stops counting soon after.  An acquisition with another
 * N while any holder or other waiter is live is refused ({-1, N}); once
 * none is left, its N applies.
 *
 * The last key (HOLDERS) maps each permit to "TOKEN ACQUIRED_MS RECORD"
 * for inspection, and goes with its entry.
 *
 * The work of each call is bounded by N (at most DLOCK_PERMITS_MAX entries
 * in KEYS[2] and KEYS[3]: a permit is added only while fewer than N live).
 * All times come from TIME, never from the client's clock.
 */
#define PERMITS_LUA                                                                                  \
	"local MARK = 'semaphore'\n"                                                                  \
	"local RETRY_MAX_MS = 5000\n"                                                                 \
	"local WAITER_GRACE_MS = 2000\n"                                                              \
	"local HOLDERS = KEYS[#KEYS]\n"                                                               \
	"local function settle_permits(now)\n"                                                        \
	"  if redis.call('GET', KEYS[1]) ~= MARK then\n"                                              \
	"    redis.call('DEL', KEYS[2], KEYS[3], HOLDERS)\n"                                          \
	"    return 0\n"                                                                              \
	"  end\n"                                                                                     \
	"  local past = string.format('(%d', now)\n"                                                  \
	"  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', past)\n"                          \
	"  if #gone > 0 then\n"                                                                       \
	"    redis.call('HDEL', KEYS[3], unpack(gone))\n"                                             \
	"    redis.call('HDEL', HOLDERS, unpack(gone))\n"                                             \
	"    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', past)\n"                                 \
	"  end\n"                                                                                     \
	"  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]\n"                     \
	"  if not last then\n"                                                                        \
	"    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], HOLDERS)\n"                                 \
	"    return 0\n"                                                                              \
	"  end\n"                                                                                     \
	"  local ttl = string.format('%d', math.max(tonumber(last) - now, 1))\n"                      \
	"  redis.call('SET', KEYS[1], MARK, 'PX', ttl)\n"                                             \
	"  redis.call('PEXPIRE', KEYS[2], ttl)\n"                                                     \
	"  redis.call('PEXPIRE', KEYS[3], ttl)\n"                                                     \
	"  redis.call('PEXPIRE', HOLDERS, ttl)\n"                                                     \
	"  return redis.call('ZCARD', KEYS[2])\n"                                                     \
	"end\n"                                                                                       \
	"local function live_permit(now)\n"                                                           \
	"  local score = redis.call('ZSCORE', KEYS[2], ARGV[1])\n"                                    \
	"  return score and tonumber(score) >= now and redis.call('GET', KEYS[1]) == MARK\n"          \
	"end\n"                                                                                       \
	"local function other_waiters(now, me)\n"                                                     \
	"  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', string.format('(%d', now))\n"               \
	"  local n = redis.call('ZCARD', KEYS[4])\n"                                                  \
	"  if me ~= '' and redis.call('ZSCORE', KEYS[4], me) then n = n - 1 end\n"                    \
	"  return n\n"                                                                                \
	"end\n"                                                                                       \
	"local function settle_n(now)\n"                                                              \
	"  local ttl = 0\n"                                                                           \
	"  if redis.call('GET', KEYS[1]) == MARK then ttl = redis.call('PTTL', KEYS[1]) end\n"        \
	"  local w = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2]\n"                        \
	"  if w then\n"                                                                               \
	"    local wttl = math.max(tonumber(w) - now, 1)\n"                                           \
	"    redis.call('PEXPIRE', KEYS[4], string.format('%d', wttl))\n"                             \
	"    ttl = math.max(ttl, wttl)\n"                                                             \
	"  end\n"                                                                                     \
	"  if ttl > 0 then\n"                                                                         \
	"    redis.call('PEXPIRE', KEYS[5], string.format('%d', ttl))\n"                              \
	"  else\n"                                                                                    \
	"    redis.call('DEL', KEYS[5])\n"                                                            \
	"  end\n"                                                                                     \
	"end\n"

/*
 * The wake-up queue of the semaphore's waiters (this release's clients;
 * see redis_sem.c).  QUEUE (KEYS[#KEYS-2]) is a sorted set of waiter ids
 * scored by the server's time at which each first waited: arrival order.
 * WOKEN (KEYS[#KEYS-1]) holds the waiters a release woke, each scored by
 * the end of its claim window (WAKE_CLAIM_MS): a woken waiter's attempt
 * may take a permit that nobody else may take meanwhile (no other attempt
 * of these scripts counts it as free), so a release hands its permit to
 * the waiter it woke and a newcomer cannot take it first.  A waiter whose
 * window passed without its attempt (dead, paused, cut off) is dropped
 * from the queue and the waiters, and its permit is free again: the next
 * release or look serves the next waiter, and a queued waiter looks at
 * least every QUEUED_LOOK_MS, so a waiter that died after its last look
 * holds the others back by its window and one such look at most.  A waiter counts as live while
 * its entry in KEYS[4] does (PERMITS_LUA); the dead ones before the first
 * live one are dropped when a release reaches them, once each.
 *
 * A permit taken by these scripts has its slot written with a trailing
 * space (Lua's tonumber() and the previous release's scripts read it as
 * the number): its holder's release wakes the queue.  A holder of the
 * previous release (a slot without it) publishes on the lock's channel
 * only, so while one is live, the queued waiters are told to watch that
 * channel as well (the attempt's reply, below).
 */
#define QUEUE_LUA                                                                                    \
	"local QUEUE = KEYS[#KEYS - 2]\n"                                                             \
	"local WOKEN = KEYS[#KEYS - 1]\n"                                                             \
	"local WAKE_CLAIM_MS = 1000\n"                                                                \
	"local QUEUED_LOOK_MS = 2 * WAKE_CLAIM_MS\n"                                                   \
	"local function settle_woken(now)\n"                                                          \
	"  local past = string.format('(%d', now)\n"                                                  \
	"  local gone = redis.call('ZRANGEBYSCORE', WOKEN, '-inf', past)\n"                           \
	"  if #gone > 0 then\n"                                                                       \
	"    redis.call('ZREM', QUEUE, unpack(gone))\n"                                               \
	"    redis.call('ZREM', KEYS[4], unpack(gone))\n"                                             \
	"    redis.call('ZREMRANGEBYSCORE', WOKEN, '-inf', past)\n"                                   \
	"  end\n"                                                                                     \
	"  return redis.call('ZCARD', WOKEN)\n"                                                       \
	"end\n"                                                                                       \
	"local function old_holder()\n"                                                               \
	"  for _, s in ipairs(redis.call('HVALS', KEYS[3])) do\n"                                     \
	"    if string.sub(s, -1) ~= ' ' then return true end\n"                                      \
	"  end\n"                                                                                     \
	"  return false\n"                                                                            \
	"end\n"                                                                                       \
	"local function wake_queue(now, n, held, base, publish)\n"                                    \
	"  local holder = redis.call('GET', KEYS[1])\n"                                               \
	"  if holder and holder ~= MARK then return end\n"                                            \
	"  local free = n - held - settle_woken(now)\n"                                               \
	"  local i = 0\n"                                                                             \
	"  while free > 0 do\n"                                                                       \
	"    local id = redis.call('ZRANGE', QUEUE, i, i)[1]\n"                                       \
	"    if not id then break end\n"                                                              \
	"    if redis.call('ZSCORE', WOKEN, id) then\n"                                               \
	"      i = i + 1\n"                                                                           \
	"    else\n"                                                                                  \
	"      local live = redis.call('ZSCORE', KEYS[4], id)\n"                                      \
	"      if live and tonumber(live) >= now then\n"                                              \
	"        redis.call('ZADD', WOKEN, string.format('%d', now + WAKE_CLAIM_MS), id)\n"           \
	"        redis.pcall(publish, base .. id, '1')\n"                                             \
	"        free = free - 1\n"                                                                   \
	"        i = i + 1\n"                                                                         \
	"      else\n"                                                                                \
	"        redis.call('ZREM', QUEUE, id)\n"                                                     \
	"        redis.call('ZREM', KEYS[4], id)\n"                                                   \
	"      end\n"                                                                                 \
	"    end\n"                                                                                   \
	"  end\n"                                                                                     \
	"end\n"                                                                                       \
	"local function settle_queue(now)\n"                                                          \
	"  local w = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2]\n"                        \
	"  if not w then\n"                                                                           \
	"    redis.call('DEL', QUEUE, WOKEN)\n"                                                       \
	"    return\n"                                                                                \
	"  end\n"                                                                                     \
	"  local ttl = string.format('%d', math.max(tonumber(w) - now, WAKE_CLAIM_MS))\n"             \
	"  redis.call('PEXPIRE', QUEUE, ttl)\n"                                                       \
	"  redis.call('PEXPIRE', WOKEN, ttl)\n"                                                       \
	"end\n"

/*
 * Take a permit: the lowest free slot, and a new token when asked.  Busy
 * ({0, ms, watch}: when to look again, at most RETRY_MAX_MS, or
 * QUEUED_LOOK_MS for a queued waiter: the end of the first permit's lease,
 * of the first claim window, or of the other kind's key) while another kind holds the name or N permits are live or promised
 * to woken waiters (the caller's own promise excepted); the caller then
 * counts among the waiters (unless it tries once: no waiter id), also
 * behind another kind, so that its N is the name's while it waits, and
 * with ARGV[7] "1" joins the wake-up queue.  watch: 1, a release will
 * wake it on its own channel (redis_sem.c); 0, it watches the
 * lock's channel (another kind holds the name, a holder of the previous
 * release is live, or it does not queue).
 */
static const char sem_acquire_lua[] =
	TOKEN_LUA
	PERMITS_LUA
	QUEUE_LUA
	"local now = now_ms()\n"
	"local n = tonumber(ARGV[3])\n"
	"local me = ARGV[4]\n"
	"local holder = redis.call('GET', KEYS[1])\n"
	"local other_kind = holder and holder ~= MARK\n"
	"local held = settle_permits(now)\n"
	"local others = other_waiters(now, me)\n"
	"local agreed = tonumber(redis.call('GET', KEYS[5]) or '0') or 0\n"
	"if (held > 0 or others > 0) and agreed > 0 and agreed ~= n then\n"
	"  settle_n(now)\n"
	"  return {-1, agreed, 0}\n"
	"end\n"
	"redis.call('SET', KEYS[5], ARGV[3])\n"
	"local promised = settle_woken(now)\n"
	"local mine = me ~= '' and redis.call('ZSCORE', WOKEN, me)\n"
	"if mine then promised = promised - 1 end\n"
	"if not other_kind and held + promised < n then\n"
	"  local used = {}\n"
	"  for _, s in ipairs(redis.call('HVALS', KEYS[3])) do used[tonumber(s)] = true end\n"
	"  local slot = 0\n"
	"  while used[slot] do slot = slot + 1 end\n"
	"  redis.call('SET', KEYS[1], MARK)\n"
	"  redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])\n"
	"  redis.call('HSET', KEYS[3], ARGV[1], string.format('%d ', slot))\n"
	"  if me ~= '' then\n"
	"    redis.call('ZREM', KEYS[4], me)\n"
	"    redis.call('ZREM', QUEUE, me)\n"
	"    redis.call('ZREM', WOKEN, me)\n"
	"  end\n"
	"  local token = 0\n"
	"  if ARGV[5] ~= '0' then token = next_token(KEYS[6], ARGV[5]) end\n"
	"  redis.call('HSET', HOLDERS, ARGV[1], string.format('%d %d %s', token, now, ARGV[6]))\n"
	"  settle_permits(now)\n"
	"  settle_n(now)\n"
	"  settle_queue(now)\n"
	"  return {1, token, slot}\n"
	"end\n"
	"if mine then redis.call('ZREM', WOKEN, me) end\n"
	"local retry = RETRY_MAX_MS\n"
	"if other_kind then\n"
	"  local pttl = redis.call('PTTL', KEYS[1])\n"
	"  if pttl >= 0 then retry = math.min(pttl + 1, RETRY_MAX_MS) end\n"
	"else\n"
	"  local first = tonumber(redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2] or now)\n"
	"  retry = math.min(math.max(first - now, 0) + 1, RETRY_MAX_MS)\n"
	"  local claim = redis.call('ZRANGE', WOKEN, 0, 0, 'WITHSCORES')[2]\n"
	"  if claim then retry = math.min(retry, math.max(tonumber(claim) - now, 0) + 1) end\n"
	"end\n"
	"local watch = 0\n"
	"if me ~= '' and ARGV[7] == '1' then\n"
	"  retry = math.min(retry, QUEUED_LOOK_MS)\n"
	"  redis.call('ZADD', QUEUE, 'NX', string.format('%d', now), me)\n"
	"  if not other_kind and not old_holder() then watch = 1 end\n"
	"end\n"
	"if me ~= '' then\n"
	"  redis.call('ZADD', KEYS[4], string.format('%d', now + retry + WAITER_GRACE_MS), me)\n"
	"end\n"
	"settle_n(now)\n"
	"settle_queue(now)\n"
	"return {0, retry, watch}\n";

/*
 * Owner-only: give the permit back and wake the waiters (also when it was
 * no longer ours: permits whose lease passed were dropped here, and their
 * waiters may not have heard of it): the first queued live waiters, one
 * for each permit free and not promised, each on its own channel, and on
 * the lock's channel those that do not queue (a mutex's, a reader's, a
 * client of the previous release: with none subscribed, that costs the
 * server nothing per waiter).  ARGV owner, channel, PUBLISH|SPUBLISH, N,
 * the waiters' channel prefix.
 */
static const char sem_release_lua[] =
	TOKEN_LUA
	PERMITS_LUA
	QUEUE_LUA
	"local now = now_ms()\n"
	"local ours = live_permit(now)\n"
	"local held = 0\n"
	"if redis.call('GET', KEYS[1]) == MARK then\n"
	"  redis.call('ZREM', KEYS[2], ARGV[1])\n"
	"  redis.call('HDEL', KEYS[3], ARGV[1])\n"
	"  redis.call('HDEL', HOLDERS, ARGV[1])\n"
	"  held = settle_permits(now)\n"
	"  redis.pcall(ARGV[3], ARGV[2], '1')\n"
	"end\n"
	"other_waiters(now, '')\n"
	"wake_queue(now, tonumber(ARGV[4]), held, ARGV[5], ARGV[3])\n"
	"settle_n(now)\n"
	"settle_queue(now)\n"
	"if ours then return 1 end\n"
	"return 0\n";

/*
 * A waiter that gives up leaves the waiters and the queue; a permit that
 * a release promised it goes to the next queued waiter.  ARGV waiter id,
 * PUBLISH|SPUBLISH, N, the waiters' channel prefix -> 1.
 */
static const char sem_withdraw_lua[] =
	TOKEN_LUA
	PERMITS_LUA
	QUEUE_LUA
	"local now = now_ms()\n"
	"redis.call('ZREM', KEYS[4], ARGV[1])\n"
	"redis.call('ZREM', QUEUE, ARGV[1])\n"
	"if redis.call('ZREM', WOKEN, ARGV[1]) == 1 then\n"
	"  wake_queue(now, tonumber(ARGV[3]), settle_permits(now), ARGV[4], ARGV[2])\n"
	"end\n"
	"settle_queue(now)\n"
	"return 1\n";

/* Owner-only: a live permit's lease runs again from now; one that ended is never taken again here. */
static const char sem_extend_lua[] =
	TOKEN_LUA
	PERMITS_LUA
	"local now = now_ms()\n"
	"if not live_permit(now) then return 0 end\n"
	"redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])\n"
	"settle_permits(now)\n"
	"other_waiters(now, '')\n"
	"settle_n(now)\n"
	"return 1\n";

static const char sem_check_lua[] =
	TOKEN_LUA
	PERMITS_LUA
	"if live_permit(now_ms()) then return 1 end\n"
	"return 0\n";

/*
 * Inspection and breaking see every kind at once.  KEYS: lock, queue,
 * waiters, fence (GRANT_LUA's first four), readers, permits, slots,
 * holders, pwaiters, npermits.
 *
 * Inspect (read-only) -> {value of the lock key or '', its PTTL, the
 * server's time in ms, queue length, live semaphore waiters, N, then for
 * each live reader or permit: owner, ms left, slot (-1 for a reader),
 * its entry in holders ("TOKEN ACQUIRED_MS RECORD", '' when written by
 * an older release)}.  At most INSPECT_MAX readers or permits.
 */
static const char inspect_lua[] =
	TOKEN_LUA
	"local INSPECT_MAX = 10000\n"
	"local now = now_ms()\n"
	"local v = redis.call('GET', KEYS[1])\n"
	"local out = {v or '', redis.call('PTTL', KEYS[1]), now, redis.call('LLEN', KEYS[2]),\n"
	"  redis.call('ZCOUNT', KEYS[9], string.format('%d', now), '+inf'),\n"
	"  tonumber(redis.call('GET', KEYS[10]) or '0') or 0}\n"
	"local set = nil\n"
	"if v == 'shared' then set = KEYS[5] elseif v == 'semaphore' then set = KEYS[6] end\n"
	"if set then\n"
	"  local m = redis.call('ZRANGEBYSCORE', set, string.format('%d', now), '+inf', 'WITHSCORES',\n"
	"    'LIMIT', 0, INSPECT_MAX)\n"
	"  for i = 1, #m, 2 do\n"
	"    local slot = -1\n"
	"    if set == KEYS[6] then slot = tonumber(redis.call('HGET', KEYS[7], m[i]) or '-1') or -1 end\n"
	"    out[#out + 1] = m[i]\n"
	"    out[#out + 1] = tonumber(m[i + 1]) - now\n"
	"    out[#out + 1] = slot\n"
	"    out[#out + 1] = redis.call('HGET', KEYS[8], m[i]) or ''\n"
	"  end\n"
	"end\n"
	"return out\n";

/*
 * Break: take the name from every holder, whoever they are.  The key,
 * the readers, the permits and their slots and records go; the fencing
 * counter stays (the next token is still larger), and so do the waiters
 * and the semaphore's N.  The first live waiter of the queue is granted
 * the lock as a release would, and the lock's channel hears "1" for the
 * waiters that do not queue.  ARGV channel, PUBLISH|SPUBLISH -> the live
 * holders removed (0: the name was free).  A holder learns of it at its
 * next renewal or check: its owner value is gone.
 */
static const char break_lua[] =
	TOKEN_LUA
	GRANT_LUA
	"local v = redis.call('GET', KEYS[1])\n"
	"if not v then return 0 end\n"
	"local now = string.format('%d', now_ms())\n"
	"local n = 1\n"
	"if v == 'shared' then\n"
	"  n = redis.call('ZCOUNT', KEYS[5], now, '+inf')\n"
	"  redis.call('DEL', KEYS[5])\n"
	"elseif v == 'semaphore' then\n"
	"  n = redis.call('ZCOUNT', KEYS[6], now, '+inf')\n"
	"  redis.call('DEL', KEYS[6], KEYS[7])\n"
	"end\n"
	"redis.call('DEL', KEYS[1], KEYS[8])\n"
	"grant_first_live()\n"
	"redis.pcall(ARGV[2], ARGV[1], '1')\n"
	"return n\n";

/*
 * Elections (redis_elect.c): a leader's value is kept in its lock key's
 * record, "OWNER TOKEN ACQUIRED_MS RECORD&value=VALUE" with VALUE
 * percent-encoded as the record's other fields are (no space, no '&'),
 * which every release's inspection reads (a reader that does not know
 * the field skips it).  Owner-only; the TTL is kept (PTTL and SET PX, for
 * servers without KEEPTTL); a value the owner alone (an older release's)
 * gets token 0 and no acquisition time.  Any later acquisition writes a
 * record of its own, and a release, a break or the lease's end delete the
 * key: a value lives exactly as long as its leader's hold.  The message
 * on the lock's channel wakes the observers (and, spuriously, the
 * waiters that do not queue).  ARGV owner, new record, channel,
 * PUBLISH|SPUBLISH -> 1 kept | 0 not ours.
 */
static const char proclaim_lua[] =
	TOKEN_LUA
	"local v = redis.call('GET', KEYS[1])\n"
	"if not owns(v, ARGV[1]) then return 0 end\n"
	"local head = string.match(v, '^%S+ %S+ %S+ ')\n"
	"if not head then head = ARGV[1] .. ' 0 -1 ' end\n"
	"local pttl = redis.call('PTTL', KEYS[1])\n"
	"if pttl > 0 then\n"
	"  redis.call('SET', KEYS[1], head .. ARGV[2], 'PX', pttl)\n"
	"else\n"
	"  redis.call('SET', KEYS[1], head .. ARGV[2])\n"
	"end\n"
	"redis.pcall(ARGV[4], ARGV[3], '1')\n"
	"return 1\n";

static const char *const bodies[REDIS_SCRIPT_COUNT] = {
	[REDIS_SCRIPT_ACQUIRE] = acquire_lua,
	[REDIS_SCRIPT_RELEASE] = release_lua,
	[REDIS_SCRIPT_EXTEND] = extend_lua,
	[REDIS_SCRIPT_ENQUEUE] = enqueue_lua,
	[REDIS_SCRIPT_HANDOFF] = handoff_lua,
	[REDIS_SCRIPT_READ_ACQUIRE] = read_acquire_lua,
	[REDIS_SCRIPT_READ_RELEASE] = read_release_lua,
	[REDIS_SCRIPT_READ_EXTEND] = read_extend_lua,
	[REDIS_SCRIPT_READ_CHECK] = read_check_lua,
	[REDIS_SCRIPT_SEM_ACQUIRE] = sem_acquire_lua,
	[REDIS_SCRIPT_SEM_RELEASE] = sem_release_lua,
	[REDIS_SCRIPT_SEM_WITHDRAW] = sem_withdraw_lua,
	[REDIS_SCRIPT_SEM_EXTEND] = sem_extend_lua,
	[REDIS_SCRIPT_SEM_CHECK] = sem_check_lua,
	[REDIS_SCRIPT_INSPECT] = inspect_lua,
	[REDIS_SCRIPT_BREAK] = break_lua,
	[REDIS_SCRIPT_PROCLAIM] = proclaim_lua,
};

dlock_status dlock_redis_scripts_load(struct redis_conn *ctx, const struct redis_endpoint *ep,
                                      struct redis_scripts *s, dlock_error *err)
{
	for (int i = 0; i < REDIS_SCRIPT_COUNT; i++) {
		const char *argv[3] = { "SCRIPT", "LOAD", bodies[i] };
		size_t len[3] = { 6, 4, strlen(bodies[i]) };
		redisReply *r = dlock_redis_command_argv(ctx, 3, argv, len);
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

int dlock_redis_script_append(struct redis_conn *ctx, const struct redis_scripts *s, enum redis_script_id id,
                              int nkeys, const struct redis_args *a)
{
	struct script_call call;
	if (s->sha[id][0])
		script_call_init(&call, "EVALSHA", s->sha[id], nkeys, a);
	else
		script_call_init(&call, "EVAL", bodies[id], nkeys, a);
	return dlock_redis_append_argv(ctx, call.argc, call.argv, call.len);
}

int dlock_redis_script_append_eval(struct redis_conn *ctx, enum redis_script_id id, int nkeys,
                                   const struct redis_args *a)
{
	struct script_call call;
	script_call_init(&call, "EVAL", bodies[id], nkeys, a);
	return dlock_redis_append_argv(ctx, call.argc, call.argv, call.len);
}

redisReply *dlock_redis_script_read(struct redis_conn *ctx, enum redis_script_id id, int nkeys,
                                    const struct redis_args *a)
{
	void *reply = NULL;
	if (dlock_redis_get_reply(ctx, &reply) != REDIS_OK)
		return NULL;
	redisReply *r = reply;
	if (!dlock_redis_is_error(r, "NOSCRIPT"))
		return r;
	freeReplyObject(r);
	void *again = NULL;
	if (dlock_redis_script_append_eval(ctx, id, nkeys, a) != REDIS_OK || dlock_redis_get_reply(ctx, &again) != REDIS_OK)
		return NULL;
	return again;
}

redisReply *dlock_redis_script_run(struct redis_conn *ctx, const struct redis_scripts *s, enum redis_script_id id,
                                   int nkeys, const struct redis_args *a)
{
	if (dlock_redis_script_append(ctx, s, id, nkeys, a) != REDIS_OK)
		return NULL;
	return dlock_redis_script_read(ctx, id, nkeys, a);
}
