/*
 * dlock_gc() on postgres://: the rows that names leave behind.
 *
 * Row mode keeps one row per name in the lock table (pg_row.c), and a
 * semaphore's N slot rows beside it (pg_row_sem.c: the name's row, a zero
 * byte, the slot).  gc deletes, in one statement, the names' rows that it
 * can lock FOR UPDATE SKIP LOCKED, and with each its slot rows: a holder
 * or a reader holds its row (FOR UPDATE, FOR SHARE), and so does every
 * permit holder and every waiting semaphore (FOR SHARE, for its whole
 * wait), so their rows are skipped.  A mutex's waiter that queued on the
 * row behind gc's momentary lock finds the row gone and inserts it again
 * (pg_row.c), as does a semaphore whose row went (code -5); a try-once
 * acquisition that meets gc's lock answers busy, as if gc were a holder
 * for that moment.  Tokens come from the sequence, never from a row, so a
 * deleted row takes nothing a later token is counted from.  At most
 * GC_BATCH names per statement, again until a statement deletes fewer.
 *
 * Advisory mode keeps nothing per name but the dlock_names row that lets a
 * listing show the name of a key (pg_names.c).  A client writes that row
 * once and then remembers it has (its cache): deleting a row that a live
 * client remembers would make its later locks listed by key alone.  So
 * each row carries `seen`, the server's time of its last write, a client
 * forgets its cache every DLOCK_PG_NAMES_FRESH_S and writes again (the
 * upsert moves `seen`), and gc deletes only rows not written for twice
 * that long (no live client can still remember them: it forgot them at
 * least one period ago) whose keys no session holds or waits for in
 * pg_locks (a holder may hold for longer than any period), locked FOR
 * UPDATE SKIP LOCKED against a write in progress.  Without the `seen`
 * column (a table made by an older dlock whose owner did not let this
 * role add it) gc leaves dlock_names alone and says why.
 *
 * Names are bytea parameters, never SQL; the table is the quoted
 * identifier checked at open.  Threads: any; each statement on a
 * connection of the pool that holds nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"

#define GC_BATCH "1000"
#define GC_BATCH_N 1000

/* $1 PREFIX ":" NAME-PREFIX (bytea), $2 its length, $3 where the name starts in a row's bytes. */
#define ROW_MATCH "substr(name, 1, $2::int4) = $1::bytea AND position('\\x00'::bytea IN name) = 0"
#define NAME_OUT(col) "encode(substr(" col ", $3::int4), 'hex')"

static const char row_gc[] =
	"WITH n AS (SELECT name FROM %1$s WHERE " ROW_MATCH " LIMIT " GC_BATCH " FOR UPDATE SKIP LOCKED), "
	"s AS (DELETE FROM %1$s t USING n WHERE t.name > n.name || '\\x00'::bytea "
	"AND t.name < n.name || '\\x01'::bytea), "
	"d AS (DELETE FROM %1$s t USING n WHERE t.name = n.name RETURNING t.name) "
	"SELECT " NAME_OUT("name") " FROM d";
static const char row_dry[] = "SELECT " NAME_OUT("name") " FROM %1$s WHERE " ROW_MATCH " FOR UPDATE SKIP LOCKED";

/* dlock_names rows not written for two periods, whose keys nobody holds or waits for. */
#define NAMES_FREE                                                                                          \
	"WITH n AS (SELECT key, hi, base FROM " DLOCK_PG_NAMES " WHERE substr(name, 1, $2::int4) = $1::bytea "   \
	"AND seen < now() - make_interval(secs => $4::int4) LIMIT " GC_BATCH " FOR UPDATE SKIP LOCKED), "         \
	"l AS MATERIALIZED (SELECT classid::int8 AS c, objid::int8 AS o, objsubid AS s FROM pg_locks "          \
	"WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = "             \
	"current_database())), "                                                                               \
	"f AS (SELECT key FROM n WHERE NOT EXISTS (SELECT 1 FROM l WHERE (l.s = 1 AND (l.c << 32 | l.o) = n.key) " \
	"OR (l.s = 2 AND l.c = n.hi AND l.o BETWEEN n.base AND n.base + 2049))) "
static const char names_gc[] = NAMES_FREE "DELETE FROM " DLOCK_PG_NAMES " t USING f WHERE t.key = f.key "
                                          "RETURNING " NAME_OUT("t.name");
static const char names_dry[] = NAMES_FREE "SELECT " NAME_OUT("t.name") " FROM " DLOCK_PG_NAMES " t JOIN f USING (key)";

static int hexval(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* Each row of `res` (a name in hex) to `removed`; the number of rows. */
static size_t report(const PGresult *res, const char *resource, dlock_gc_removed_fn *removed, void *arg)
{
	char name[DLOCK_NAME_MAX];
	size_t rows = (size_t)PQntuples(res);
	for (size_t i = 0; i < rows; i++) {
		const char *hex = PQgetvalue(res, (int)i, 0);
		size_t len = 0;
		for (; hex[0] && hex[1] && len < sizeof name; hex += 2) {
			int hi = hexval(hex[0]), lo = hexval(hex[1]);
			if (hi < 0 || lo < 0)
				break;
			name[len++] = (char)(hi << 4 | lo);
		}
		removed(arg, len ? name : NULL, len, resource);
	}
	return rows;
}

/* Run `sql` (dry: once; else until a batch comes back short), reporting each name. */
static dlock_status collect(struct dlock_pg_backend *b, const char *sql, int nparams, int dry, const char *match,
                            size_t mlen,
                            const char *resource, dlock_gc_removed_fn *removed, void *arg, size_t *count,
                            dlock_error *err)
{
	char len[24], start[24], fresh[24], sqlstate[6];
	snprintf(len, sizeof len, "%zu", mlen);
	snprintf(start, sizeof start, "%zu", strlen(b->prefix) + 2);
	snprintf(fresh, sizeof fresh, "%d", 2 * DLOCK_PG_NAMES_FRESH_S);
	struct dlock_pg_stmt s = { .sql = sql, .n = nparams, .values = { match, len, start, fresh },
		                   .lengths = { (int)mlen, -1, -1, -1 }, .formats = { 1 } };
	for (;;) {
		PGresult *res = NULL;
		dlock_status st = dlock_pg_pool_query(b, &s, &res, sqlstate, err); /* on a connection that holds nothing */
		if (st == DLOCK_EPERM) {
			char said[200];
			snprintf(said, sizeof said, "%.150s", err->msg);
			return dlock_error_set(err, st, "gc may not delete from %s (GRANT DELETE ON %s TO the role): %s",
			                       resource, resource, said);
		}
		if (st != DLOCK_OK)
			return st;
		size_t n = report(res, resource, removed, arg);
		PQclear(res);
		*count += n;
		if (dry || n < GC_BATCH_N)
			return DLOCK_OK;
	}
}

dlock_status dlock_pg_gc(void *backend, const char *prefix, size_t len, unsigned flags, dlock_gc_removed_fn *removed,
                         void *arg, size_t *count, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	int dry = (flags & DLOCK_GC_DRY_RUN) != 0;
	*count = 0;
	if (b->mode == &dlock_pg_advisory_mode && !atomic_load(&b->names_listed))
		return dlock_error_set(err, DLOCK_ENOTSUP,
		                       "%s: advisory locks leave nothing behind and there is no " DLOCK_PG_NAMES
		                       " table: nothing to collect", b->masked);
	if (b->mode == &dlock_pg_advisory_mode && !atomic_load(&b->names_fresh))
		return dlock_error_set(err, DLOCK_ENOTSUP,
		                       "%s: advisory locks leave nothing behind, and " DLOCK_PG_NAMES
		                       " has no column seen (made by an older dlock; its owner can run: ALTER TABLE "
		                       DLOCK_PG_NAMES " ADD COLUMN seen timestamptz NOT NULL DEFAULT now()), so gc "
		                       "cannot tell which names a live client still counts as written",
		                       b->masked);
	size_t mlen;
	char *match = dlock_pg_namespaced(b->prefix, prefix, len, &mlen);
	if (!match)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	char *sql = NULL;
	dlock_status st;
	if (b->mode == &dlock_pg_advisory_mode)
		st = collect(b, dry ? names_dry : names_gc, 4, dry, match, mlen, DLOCK_PG_NAMES, removed, arg, count, err);
	else if (asprintf(&sql, dry ? row_dry : row_gc, b->table) < 0)
		st = dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	else
		st = collect(b, sql, 3, dry, match, mlen, b->table, removed, arg, count, err);
	free(sql);
	free(match);
	return st;
}
