/*
 * Redis backend: elections — a leader's value beside its lock (proclaim)
 * and the observers' notifications (watch, unwatch).
 *
 * The value lives in the lock key itself, as the field `value` of the
 * holder's record: "OWNER TOKEN ACQUIRED_MS RECORD&value=VALUE", VALUE
 * percent-encoded like the record's other fields (redis_scripts.c, the
 * proclaim script).  So it goes with the acquisition: a release, a break,
 * the lease's end or the next holder's record remove it, renewals keep it,
 * the owner-only scripts still compare the first word, and an inspection
 * that does not know the field skips it.  The term is the key's token.
 * RedLock has no elections (no token): proclaim answers DLOCK_ENOTSUP
 * there, and the backend's facts say so (DLOCK_FEATURE_ELECTION -1).
 *
 * Observers subscribe to the lock's channel (PREFIX:{D}:released) on the
 * subscriber of the server that serves the name (the client's one, or the
 * cluster master's of its slot): a release, a break, a fair queue's
 * release with nobody waiting and every proclaim publish there.  The
 * subscriber calls `changed` for each message, and again once a
 * subscription is confirmed, so a reconnection (a restart, a Sentinel
 * failover) ends with a read.  In a cluster a slot that moves ends the
 * subscription on the old node: the subscriber calls `changed`, the core
 * reads the name, and that inspection arms the watch again where the slot
 * is served now (dlock_redis_elect_rearm()).  An expiring key publishes
 * nothing: the core reads twice per lease anyway.
 *
 * Threads: proclaim runs on the application's thread like any lock call;
 * watches are kept in a per-client list under `elect_mu`, which is taken
 * before a subscriber's mutex and never while calling the core.  Errors:
 * the statuses and messages of redis_conn.c; values are untrusted bytes,
 * passed as a script argument, never in a script's text nor a key.
 */
#include <stdlib.h>
#include <string.h>

#include "redis_elect.h"
#include "redis_key.h"
#include "redis_lock.h"
#include "redis_route.h"

#define VALUE_FIELD "&value="

/* ------------------------------------------------------------ the value in the record */

/* The client's record with `value` as its `value` field, percent-encoded: a new string, or NULL. */
static char *record_with_value(const struct redis_client *c, const char *value, size_t len, size_t *outlen)
{
	size_t field = strlen(VALUE_FIELD), cap = c->recordlen + field + 3 * len + 2; /* the whole value fits */
	char *out = malloc(cap);
	if (!out)
		return NULL;
	memcpy(out, c->record, c->recordlen);
	memcpy(out + c->recordlen, VALUE_FIELD, field + 1);
	*outlen = dlock_percent_encode(out, cap, c->recordlen + field, value, len);
	return out;
}

int dlock_redis_record_value(const char *rec, size_t len, char out[DLOCK_VALUE_MAX + 1])
{
	size_t field = strlen(VALUE_FIELD);
	const char *at = NULL;
	for (size_t i = 0; i + field <= len && !at; i++)
		if (memcmp(rec + i, VALUE_FIELD, field) == 0)
			at = rec + i + field;
	if (!at)
		return 0;
	const char *end = memchr(at, '&', (size_t)(rec + len - at));
	end = end ? end : rec + len;
	long n = dlock_percent_decode(out, DLOCK_VALUE_MAX + 1, at, (size_t)(end - at));
	return n >= 0 && n <= DLOCK_VALUE_MAX; /* else not a value a leader could proclaim */
}

/* ------------------------------------------------------------ proclaim */

static int is_redlock(const struct redis_client *c)
{
	return !c->cluster && c->npools > 1;
}

dlock_status dlock_redis_proclaim(void *backend, void *lkp, const char *value, size_t len, dlock_error *err)
{
	struct redis_client *c = backend;
	struct redis_lock *lk = lkp;
	if (is_redlock(c))
		return dlock_error_set(err, DLOCK_ENOTSUP,
		                       "RedLock: no elections (its instances give no fencing token, so no term)");
	if (lk->kind != DLOCK_KIND_MUTEX || lk->shared || !lk->owner[0])
		return dlock_error_set(err, DLOCK_ENOTHELD, "redis %s: only a mutex's holder leads", c->label);
	size_t reclen = 0;
	char *rec = record_with_value(c, value, len, &reclen);
	if (!rec)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	struct redis_args a = { 0 };
	dlock_redis_arg_key(&a, c, lk, "lock", NULL);
	dlock_redis_arg(&a, lk->owner);
	dlock_redis_argn(&a, rec, reclen);
	dlock_redis_arg_key(&a, c, lk, "released", NULL);
	dlock_redis_arg(&a, c->publish);
	redisReply *r = NULL;
	/* Idempotent: a second run after a lost reply writes the same record. */
	dlock_status st = dlock_redis_run_idempotent(c, lk, REDIS_SCRIPT_PROCLAIM, 1, &a, "proclaim", 0, &r, err);
	if (st == DLOCK_OK && r->type != REDIS_REPLY_INTEGER)
		st = dlock_error_set(err, DLOCK_ESERVER, "redis %s: unexpected reply to the proclaim script", c->label);
	else if (st == DLOCK_OK && r->integer != 1)
		st = dlock_error_set(err, DLOCK_ENOTHELD, "redis %s: the lock is no longer ours (expired or taken)",
		                     c->label);
	freeReplyObject(r);
	free(rec);
	return st;
}

/* ------------------------------------------------------------ watches */

struct redis_elect_watch {
	struct redis_elect_watch *next;
	struct redis_lock lk;   /* digest and slot only: what routing needs */
	struct redis_sub *sub;  /* where `wt` is armed; NULL: nowhere now */
	struct redis_watch wt;
	void (*changed)(void *arg);
	void *arg;
	size_t chanlen;
	char chan[REDIS_KEY_MAX]; /* the lock's channel, PREFIX:{D}:released */
};

void dlock_redis_elect_init(struct redis_client *c)
{
	pthread_mutex_init(&c->elect_mu, NULL);
}

void dlock_redis_elect_fini(struct redis_client *c)
{
	pthread_mutex_destroy(&c->elect_mu);
}

/*
 * Arm `ew` on the subscriber of the server that serves its name now, or
 * again where its subscription was lost for good (a cluster slot that
 * moved).  elect_mu held.  0 when no subscriber can be had now.
 */
static int arm_locked(struct redis_client *c, struct redis_elect_watch *ew)
{
	struct redis_route rt;
	dlock_error ignored = { "" };
	struct redis_sub *sub = dlock_redis_route(c, &ew->lk, &rt, &ignored) == DLOCK_OK ? dlock_redis_route_sub(c, &rt)
	                                                                                   : ew->sub;
	if (ew->sub && (sub != ew->sub || dlock_redis_sub_state(ew->sub, &ew->wt) == REDIS_WATCH_POLL)) {
		dlock_redis_sub_unwatch(ew->sub, &ew->wt);
		ew->sub = NULL;
	}
	if (!ew->sub && sub) {
		ew->sub = sub;
		dlock_redis_sub_watch(sub, &ew->wt, ew->chan, ew->chanlen, NULL, ew->changed, ew->arg);
	}
	return ew->sub != NULL;
}

dlock_status dlock_redis_watch(void *backend, const char *name, size_t len, void (*changed)(void *arg), void *arg,
                               void **out, dlock_error *err)
{
	struct redis_client *c = backend;
	if (is_redlock(c))
		return dlock_error_set(err, DLOCK_ENOTSUP, "RedLock: no elections");
	struct redis_elect_watch *ew = calloc(1, sizeof *ew);
	if (!ew)
		return dlock_error_set(err, DLOCK_ENOMEM, "redis: out of memory");
	dlock_redis_lock_name(&ew->lk, name, len);
	ew->chanlen = dlock_redis_key(c, &ew->lk, "released", NULL, ew->chan);
	ew->changed = changed;
	ew->arg = arg;
	pthread_mutex_lock(&c->elect_mu);
	if (!arm_locked(c, ew)) {
		pthread_mutex_unlock(&c->elect_mu);
		free(ew);
		return dlock_error_set(err, DLOCK_ECONNECT, "redis %s: no subscriber for the lock's channel now",
		                       c->label);
	}
	ew->next = c->elect_watches;
	c->elect_watches = ew;
	pthread_mutex_unlock(&c->elect_mu);
	*out = ew;
	return DLOCK_OK;
}

void dlock_redis_unwatch(void *backend, void *watch)
{
	struct redis_client *c = backend;
	struct redis_elect_watch *ew = watch;
	pthread_mutex_lock(&c->elect_mu);
	struct redis_elect_watch **pp = &c->elect_watches;
	while (*pp && *pp != ew)
		pp = &(*pp)->next;
	if (*pp)
		*pp = ew->next;
	if (ew->sub)
		dlock_redis_sub_unwatch(ew->sub, &ew->wt);
	pthread_mutex_unlock(&c->elect_mu);
	free(ew);
}

void dlock_redis_elect_rearm(struct redis_client *c, const char *chan, size_t len)
{
	pthread_mutex_lock(&c->elect_mu);
	for (struct redis_elect_watch *ew = c->elect_watches; ew; ew = ew->next)
		if (ew->chanlen == len && memcmp(ew->chan, chan, len) == 0)
			arm_locked(c, ew);
	pthread_mutex_unlock(&c->elect_mu);
}
