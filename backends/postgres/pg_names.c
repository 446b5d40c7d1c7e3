/*
 * mode=advisory: the names behind the keys.  An advisory key is a hash
 * (pg_hash.c), so pg_locks cannot tell a listing which name a lock has.
 * The name is written once per name, not per acquisition, to
 *
 *   CREATE TABLE dlock_names (
 *       key  int8 PRIMARY KEY,  -- the name's bigint key (mutex, read-write lock)
 *       hi   int4 NOT NULL,     -- its two-int keys (semaphores): classid,
 *       base int4 NOT NULL,     --   objid of slot 0
 *       name bytea NOT NULL,    -- prefix ":" name, the bytes as given
 *       seen timestamptz NOT NULL DEFAULT now()); -- its last write
 *
 * by INSERT ... ON CONFLICT DO UPDATE SET seen = now() in the session
 * that is about to take the name for the first time in this client (one
 * round trip, then never again while the name stays in the client's cache
 * of written keys, which the client forgets every DLOCK_PG_NAMES_FRESH_S
 * so that `seen` tells dlock_gc() which rows no live client still counts
 * as written: pg_gc.c), in a transaction of its own committed with synchronous_commit
 * off: a synchronous standby that is gone must not stall the acquisition
 * (advisory locks write nothing else), and a name lost in a failover only
 * makes a listing show its key.  The table is created when the client opens, if missing and the
 * role may (serialised with pg_setup.c's other objects); when it is
 * missing or the role may not insert, nothing is written, listing shows
 * such names by their keys, and locking is unchanged.  A role that should
 * write names needs INSERT and UPDATE (without UPDATE the write is ON
 * CONFLICT DO NOTHING, `seen` stays at the first write, and a name that gc
 * removes while this client remembers it is listed by its key until the
 * client forgets), and one that lists needs SELECT, on dlock_names.  A
 * table made by an older dlock gets `seen` at open when the role may
 * alter it; without `seen` gc leaves the table alone.  Only dlock_gc()
 * deletes rows: otherwise a name's row outlives its locks (a few dozen
 * bytes per distinct name).
 *
 * Threads: the cache has its own mutex (names_mu); the write runs on the
 * caller's connection with c->mu held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"

#define CREATE_NAMES                                                                                      \
	"CREATE TABLE IF NOT EXISTS " DLOCK_PG_NAMES " (key int8 PRIMARY KEY, hi int4 NOT NULL, base int4 NOT " \
	"NULL, name bytea NOT NULL, seen timestamptz NOT NULL DEFAULT now())"
#define ADD_SEEN "ALTER TABLE " DLOCK_PG_NAMES " ADD COLUMN IF NOT EXISTS seen timestamptz NOT NULL DEFAULT now()"
#define HAS_SEEN                                                                                        \
	"EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('" DLOCK_PG_NAMES "') AND attname = " \
	"'seen' AND NOT attisdropped)"
#define CREATE_INDEX "CREATE INDEX IF NOT EXISTS " DLOCK_PG_NAMES "_sem ON " DLOCK_PG_NAMES " (hi, base)"
#define CACHE_MAX (1u << 16) /* keys remembered; when full the cache starts again */

/* 1: exists and the role may insert; 0: exists, may not; -1: missing; -2: the question failed.  Plus 2
 * when it has `seen`, and 4 more when the role may also update it. */
static int table_state(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	struct dlock_pg_stmt q = { .sql = "SELECT CASE WHEN to_regclass('" DLOCK_PG_NAMES "') IS NULL THEN -1 "
		                          "WHEN has_table_privilege('" DLOCK_PG_NAMES "', 'INSERT') THEN 1 ELSE 0 END "
		                          "+ CASE WHEN to_regclass('" DLOCK_PG_NAMES "') IS NULL OR NOT " HAS_SEEN
		                          " THEN 0 WHEN has_table_privilege('" DLOCK_PG_NAMES "', 'UPDATE') THEN 6 "
		                          "ELSE 2 END" };
	PGresult *res;
	char sqlstate[6];
	dlock_error ignored;
	int isnull = 1;
	if (dlock_pg_exec(b, c, &q, dlock_pg_io_deadline(b), &res, sqlstate, &ignored) != DLOCK_OK)
		return -2;
	int64_t v = dlock_pg_int_value(res, &isnull);
	PQclear(res);
	return isnull ? -2 : (int)v;
}

dlock_status dlock_pg_names_setup(struct dlock_pg_backend *b, struct dlock_pg_conn *c)
{
	int state = table_state(b, c);
	if (state == -1) {
		static const char *const ddl[] = { CREATE_NAMES, CREATE_INDEX };
		dlock_status st = dlock_pg_create_optional(b, c, ddl, 2); /* may not create it: listing shows keys */
		state = st == DLOCK_OK ? table_state(b, c) : 0;
	}
	if (state >= 0 && !(state & 2)) { /* an older dlock's table: `seen` added if the role may */
		static const char *const ddl[] = { ADD_SEEN };
		if (dlock_pg_create_optional(b, c, ddl, 1) == DLOCK_OK)
			state = table_state(b, c);
	}
	atomic_store(&b->names_ready, state >= 0 && (state & 1));
	atomic_store(&b->names_listed, state >= 0);
	atomic_store(&b->names_fresh, state >= 0 && (state & 2));
	atomic_store(&b->names_upsert, state >= 0 && (state & 4));
	return c->dead ? DLOCK_ECONNECT : DLOCK_OK;
}

/* Slot of `key` in the cache (names_mu held): where it is, or the empty slot where it goes. */
static size_t slot_of(const struct dlock_pg_backend *b, int64_t key)
{
	size_t mask = b->names_cap - 1;
	size_t i = (size_t)((uint64_t)key * 0x9e3779b97f4a7c15ull >> 16) & mask;
	while (b->names_seen[i] != 0 && b->names_seen[i] != key)
		i = (i + 1) & mask;
	return i;
}

static int cache_has(struct dlock_pg_backend *b, int64_t key)
{
	pthread_mutex_lock(&b->names_mu);
	int64_t now = dlock_monotonic_ns();
	if (b->names_n > 0 && now - b->names_since_ns > (int64_t)DLOCK_PG_NAMES_FRESH_S * 1000000000) {
		memset(b->names_seen, 0, b->names_cap * sizeof *b->names_seen); /* forgotten: written again */
		b->names_n = 0;
	}
	if (b->names_n == 0)
		b->names_since_ns = now;
	int has = key == 0 || (b->names_cap && b->names_seen[slot_of(b, key)] == key);
	pthread_mutex_unlock(&b->names_mu);
	return has;
}

static void cache_add(struct dlock_pg_backend *b, int64_t key)
{
	pthread_mutex_lock(&b->names_mu);
	if (2 * (b->names_n + 1) > b->names_cap) {
		size_t cap = b->names_cap ? b->names_cap * 2 : 64;
		int64_t *old = b->names_seen;
		size_t oldcap = b->names_cap;
		if (cap > CACHE_MAX)
			cap = CACHE_MAX; /* full: forget them all, they are written again once each */
		int64_t *v = calloc(cap, sizeof *v);
		if (!v) {
			pthread_mutex_unlock(&b->names_mu);
			return;
		}
		b->names_seen = v;
		b->names_cap = cap;
		b->names_n = 0;
		if (cap <= oldcap)
			b->names_since_ns = dlock_monotonic_ns(); /* started again */
		for (size_t i = 0; i < oldcap && cap > oldcap; i++)
			if (old[i] != 0) {
				b->names_seen[slot_of(b, old[i])] = old[i];
				b->names_n++;
			}
		free(old);
	}
	size_t i = slot_of(b, key);
	if (b->names_seen[i] == 0) {
		b->names_seen[i] = key;
		b->names_n++;
	}
	pthread_mutex_unlock(&b->names_mu);
}

void dlock_pg_names_free(struct dlock_pg_backend *b)
{
	free(b->names_seen);
	b->names_seen = NULL;
	b->names_cap = b->names_n = 0;
}

/* The write of a name: insert only, or an upsert that moves `seen`; `folded` turns synchronous_commit off
 * inside the statement itself (its implicit transaction), for a connection that sends no pipeline. */
#define NAMES_INSERT "INSERT INTO " DLOCK_PG_NAMES " (key, hi, base, name) "
#define NAMES_VALUES "VALUES ($1::int8, $2::int4, $3::int4, $4::bytea) "
#define NAMES_FOLDED "SELECT $1::int8, $2::int4, $3::int4, $4::bytea " \
	"WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL "
#define NAMES_UPSERT "ON CONFLICT (key) DO UPDATE SET seen = now()"
#define NAMES_IGNORE "ON CONFLICT DO NOTHING"

int dlock_pg_names_stmt(struct dlock_pg_backend *b, const struct dlock_pg_lock *lk, int folded,
                        struct dlock_pg_args *a, struct dlock_pg_stmt *s)
{
	static const char *const sql[2][2] = {
		{ NAMES_INSERT NAMES_VALUES NAMES_IGNORE, NAMES_INSERT NAMES_VALUES NAMES_UPSERT },
		{ NAMES_INSERT NAMES_FOLDED NAMES_IGNORE, NAMES_INSERT NAMES_FOLDED NAMES_UPSERT },
	};
	if (!atomic_load(&b->names_ready) || !lk->row_name || cache_has(b, lk->key))
		return 0;
	dlock_decimal(a->key, lk->key);
	dlock_decimal(a->hi, lk->sem_hi);
	dlock_decimal(a->base, lk->sem_base);
	*s = (struct dlock_pg_stmt){ .sql = sql[folded != 0][atomic_load(&b->names_upsert) != 0], .unsynced = !folded,
		                     .n = 4, .values = { a->key, a->hi, a->base, lk->row_name },
		                     .lengths = { -1, -1, -1, (int)lk->row_len }, .formats = { 0, 0, 0, 1 } };
	return 1;
}

void dlock_pg_names_written(struct dlock_pg_backend *b, const struct dlock_pg_lock *lk, dlock_status st,
                            const char *sqlstate)
{
	if (st == DLOCK_OK)
		cache_add(b, lk->key);
	else if (atomic_load(&b->names_upsert) && strcmp(sqlstate, "42501") == 0)
		atomic_store(&b->names_upsert, 0); /* UPDATE revoked since open: insert only */
	else if (strcmp(sqlstate, "42501") == 0 || strcmp(sqlstate, "42P01") == 0)
		atomic_store(&b->names_ready, 0); /* revoked or dropped since open: write no more */
}

dlock_status dlock_pg_names_write(struct dlock_pg_backend *b, struct dlock_pg_conn *c, const struct dlock_pg_lock *lk,
                                  dlock_error *err)
{
	struct dlock_pg_args a;
	struct dlock_pg_stmt s;
	char sqlstate[6];
	if (!dlock_pg_names_stmt(b, lk, 0, &a, &s))
		return DLOCK_OK;
	dlock_error why;
	dlock_status st = dlock_pg_run(b, c, &s, sqlstate, &why);
	dlock_pg_names_written(b, lk, st, sqlstate);
	if (c->dead)
		return dlock_error_set(err, DLOCK_ECONNECT, "%s", why.msg);
	return DLOCK_OK; /* a name not written only makes a listing show the key */
}
