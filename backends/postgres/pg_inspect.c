/*
 * Who holds a name, the names held, and breaking (mode=advisory): one
 * statement each, on a session that holds nothing (an idle one or a new
 * one), reading pg_locks joined with pg_stat_activity.
 *
 * What pg_locks shows of a name (pg_hash.c, pg_sem.c): its bigint key K
 * (objsubid 1) held exclusive by a mutex or a writer, shared by readers
 * and by every holder and waiter of a semaphore; and its two-int keys
 * (objsubid 2): a permit's slot (offsets 0..1023, exclusive), the marker
 * of N (1023 + N) and ANY (2048), shared by the holders and waiters of a
 * semaphore, and WRITER (2050), shared by a writer (pg_advisory.c).  Per
 * session:
 *
 *   a slot held                 a permit's holder (its slot)
 *   a marker or ANY, no slot    a semaphore's waiter
 *   K exclusive and WRITER      a writer (kind RWLOCK)
 *   K exclusive                 a mutex (kind MUTEX; also a writer of a release before WRITER)
 *   K shared (no marker)        a reader (kind RWLOCK)
 *   K not granted               a waiter (the server queues it)
 *
 * The holder's identity, host and process come from its session's
 * application_name (pg_owner.c), `session` is its backend pid.  What the
 * server does not keep: when a lock was taken (pg_locks has a wait start
 * for waiters only, and a session's or transaction's start is not the
 * acquisition), the lease left (the session's idle_session_timeout is not
 * visible to other sessions), and the token (nextval of one sequence,
 * not stored per lock): those stay unknown.
 *
 * Listing takes every advisory lock of the database in one statement and
 * names it through dlock_names (pg_names.c) when the name was written
 * there under the client's prefix; a key with no name is listed by its
 * resource ("advisory:CLASSID:OBJID"), as are other applications' advisory
 * locks, which the server cannot tell from dlock's; such a key's writer
 * shows as a mutex (its WRITER key is only tied to the name's key through
 * the name).  Names come back as
 * bytes (bytea), never as SQL.
 *
 * Breaking ends the sessions that hold the name, with
 * pg_terminate_backend: every lock of such a session goes with it (a
 * client shares a session among up to DLOCK_PG_SESSION_LOCKS_MAX of its
 * locks), the holder's next heartbeat finds its connection gone and
 * reports them lost (DLOCK_LOST_SESSION), and the server grants the name
 * to its first waiter.  Waiters are not touched.  It needs the right to
 * signal the holder's session (the same role, a member of it, or
 * pg_signal_backend): DLOCK_EPERM otherwise.
 *
 * Row mode: a row lock is in the row's header (xmax), not in pg_locks, and
 * no view maps a row to the transaction holding it (pgrowlocks, an
 * extension, does); DLOCK_ENOTSUP, and the features say so.
 *
 * Threads: any; each call takes its own connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock/dlock.h"
#include "pg_backend.h"

#define THIS_DB "l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
#define COLUMNS                                                                                        \
	"SELECT l.pid, l.objsubid, CASE WHEN l.objsubid = 2 THEN l.objid::int8 & 4095 ELSE -1 END, "       \
	"l.mode = 'ExclusiveLock', l.granted, COALESCE(a.application_name, ''), "                          \
	"COALESCE(a.client_hostname, host(a.client_addr), ''), l.classid::int8, "                          \
	"CASE WHEN l.objsubid = 2 THEN l.objid::int8 & ~4095::int8 ELSE l.objid::int8 END"
#define FROM_LOCKS                                                                                     \
	" FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
#define ADVISORY " WHERE l.locktype = 'advisory' AND l.pid IS NOT NULL AND l.pid <> pg_backend_pid() AND " THIS_DB
/* The keys of one name: $1 K, $2 hi, $3 base. */
#define OF_NAME                                                                                           \
	" AND ((l.objsubid = 1 AND l.classid::int8 = (($1::int8 >> 32) & 4294967295) "                       \
	"AND l.objid::int8 = ($1::int8 & 4294967295)) OR (l.objsubid = 2 AND l.classid::int8 = $2::int4 "      \
	"AND l.objid::int8 BETWEEN $3::int4 AND $3::int4 + 2050))"

/* Columns of a row; inspection's statement with dlock_leaders also has a leader's term and value. */
enum { C_PID, C_SUB, C_OFF, C_EXCL, C_GRANTED, C_APP, C_HOST, C_CLASSID, C_OBJID, C_GROUP, C_NAME, C_SEMPID,
       C_TERM, C_VALUE };

static const char sql_inspect[] = COLUMNS ", '', NULL, false" FROM_LOCKS ADVISORY OF_NAME " ORDER BY l.pid";
/* The leader's row (pg_elect.c) beside its exclusive holder: only the row of that very session (its pid,
 * and its backend_start where pg_stat_activity shows it to this role), never one an earlier session left. */
static const char sql_inspect_leader[] =
	COLUMNS ", '', NULL, false, r.term, r.value" FROM_LOCKS " LEFT JOIN " DLOCK_PG_LEADERS " r ON r.key = $1::int8 "
	"AND l.objsubid = 1 AND l.granted AND l.mode = 'ExclusiveLock' AND r.pid = l.pid "
	"AND (a.backend_start IS NULL OR r.started IS NOT DISTINCT FROM a.backend_start)"
	ADVISORY OF_NAME " ORDER BY l.pid";

/* Whether a session holds some semaphore's ANY key (an unnamed K group's sessions). */
#define SEM_PID                                                                                     \
	"EXISTS (SELECT 1 FROM pg_locks m WHERE m.pid = l.pid AND m.locktype = 'advisory' AND m.granted " \
	"AND m.objsubid = 2 AND m.mode = 'ShareLock' AND (m.objid::int8 & 4095) = 2048)"
/* The group of a lock: its name's, or its key's (K, or a two-int block). */
#define GROUP(name)                                                                                   \
	"CASE WHEN " name " IS NOT NULL THEN 'n' || encode(" name ", 'hex') WHEN l.objsubid = 1 THEN 'k' " \
	"|| l.classid || ':' || l.objid ELSE 's' || l.classid || ':' || (l.objid::int8 & ~4095::int8) END"
#define OURS " AND (l.objsubid = 1 OR (l.objid::int8 & 1073741824) <> 0)"
static const char sql_list_bare[] = COLUMNS ", " GROUP("NULL::bytea") ", NULL::bytea, " SEM_PID FROM_LOCKS
	ADVISORY OURS " ORDER BY 10, l.pid";
/* $1: prefix ":" as bytea. */
#define NAME_OF "COALESCE(n1.name, n2.name)"
static const char sql_list_named[] =
	"SELECT * FROM (" COLUMNS ", " GROUP(NAME_OF) ", substr(" NAME_OF ", length($1::bytea) + 1), " SEM_PID
	FROM_LOCKS " LEFT JOIN " DLOCK_PG_NAMES " n1 ON l.objsubid = 1 AND n1.key = "
	"((l.classid::int8 << 32) | l.objid::int8) AND substr(n1.name, 1, length($1::bytea)) = $1::bytea "
	"LEFT JOIN " DLOCK_PG_NAMES " n2 ON l.objsubid = 2 AND n2.hi = l.classid::int8 "
	"AND n2.base = (l.objid::int8 & ~4095::int8) AND substr(n2.name, 1, length($1::bytea)) = $1::bytea"
	ADVISORY OURS ") x ORDER BY 10, 1";

/* Who holds K shared or the holders of slots: ended.  $4 the wait for each end (PostgreSQL 14+). */
#define HOLDERS                                                                                           \
	"WITH l AS MATERIALIZED (SELECT l.pid, l.objsubid, l.objid::int8 & 4095 AS o, l.mode FROM pg_locks l" \
	ADVISORY OF_NAME " AND l.granted), "                                                                  \
	"h AS (SELECT DISTINCT pid FROM l WHERE (objsubid = 2 AND o < 1024 AND mode = 'ExclusiveLock') "      \
	"OR (objsubid = 1 AND NOT EXISTS (SELECT 1 FROM l m WHERE m.pid = l.pid AND m.objsubid = 2 "           \
	"AND m.o BETWEEN 1024 AND 2048))) "
static const char sql_break[] = HOLDERS "SELECT pid, pg_terminate_backend(pid, $4::int8) FROM h";
static const char sql_break_13[] = HOLDERS "SELECT pid, pg_terminate_backend(pid) FROM h WHERE $4::int8 >= 0";

/* ------------------------------------------------------------ features */

dlock_status dlock_pg_feature(struct dlock_pg_backend *b, int feature, int64_t *value)
{
	int advisory = b->mode == &dlock_pg_advisory_mode;
	if (feature == DLOCK_FEATURE_INSPECT) {
		*value = !advisory ? 0
		                   : DLOCK_INSPECT_HELD | DLOCK_INSPECT_OWNER | DLOCK_INSPECT_WAITERS |
		                             DLOCK_INSPECT_LIST | DLOCK_INSPECT_SESSION |
		                             (atomic_load(&b->names_ready) ? DLOCK_INSPECT_NAMES : 0);
		if (b->loop) /* a loop client's waiters poll (pg_loop.c): the server queues none of them */
			*value &= ~(int64_t)DLOCK_INSPECT_WAITERS;
		return DLOCK_OK;
	}
	if (feature == DLOCK_FEATURE_BREAK) {
		*value = advisory ? DLOCK_BREAK_SESSION : DLOCK_BREAK_NONE;
		return DLOCK_OK;
	}
	if (feature == DLOCK_FEATURE_GC) { /* pg_gc.c */
		*value = !advisory || (atomic_load(&b->names_listed) && atomic_load(&b->names_fresh));
		return DLOCK_OK;
	}
	if (feature == DLOCK_FEATURE_ELECTION) { /* pg_elect.c */
		*value = advisory && (atomic_load(&b->leaders) & DLOCK_PG_LEADERS_WRITE) ? DLOCK_WAKEUP_NOTIFY : -1;
		return DLOCK_OK;
	}
	return DLOCK_ENOTSUP;
}

static dlock_status row_mode(const struct dlock_pg_backend *b, const char *what, dlock_error *err)
{
	return dlock_error_set(err, DLOCK_ENOTSUP,
	                       "%s: mode=row has no %s: a row lock is kept in the row itself, not in pg_locks, "
	                       "and the server has no view of who holds it (use mode=advisory)",
	                       b->masked, what);
}

/* ------------------------------------------------------------ describing */

static int64_t num(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static int yes(const PGresult *r, int row, int col)
{
	return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}

/* What one session of a group holds. */
struct session {
	int sem, slot, k_excl, k_shared, waits, wants_shared, skip, writer;
	int64_t permits;
};

static void read_session(const PGresult *r, int first, int end, int unnamed_k, struct session *s)
{
	*s = (struct session){ 0 };
	for (int i = first; i < end; i++) {
		int64_t sub = num(r, i, C_SUB), off = num(r, i, C_OFF);
		int granted = yes(r, i, C_GRANTED), excl = yes(r, i, C_EXCL);
		if (!granted) {
			s->waits = 1;
			s->wants_shared |= sub == 1 && !excl;
		} else if (sub == 2 && excl && off < 1024) {
			s->slot = 1;
		} else if (sub == 2 && off == DLOCK_PG_RW_WRITER) {
			s->writer = 1;
		} else if (sub == 2 && !excl && off >= 1024) {
			s->sem = 1;
			if (off <= 2047)
				s->permits = off - 1023;
		} else if (sub == 1) {
			s->k_excl |= excl;
			s->k_shared |= !excl;
		}
	}
	/* A key with no name whose session holds a semaphore's ANY: that semaphore's K, listed with it. */
	s->skip = unnamed_k && yes(r, first, C_SEMPID);
}

static int holds(const struct session *s)
{
	return !s->skip && (s->slot || (!s->sem && (s->k_excl || s->k_shared)));
}

static int waits(const struct session *s)
{
	return !s->skip && !holds(s) && (s->sem || s->waits);
}

/* The end of the rows of the session of row `i`. */
static int session_end(const PGresult *r, int i, int end)
{
	int j = i;
	while (j < end && strcmp(PQgetvalue(r, j, C_PID), PQgetvalue(r, i, C_PID)) == 0)
		j++;
	return j;
}

/* The row of [i, j) that carries a leader's term, or -1. */
static int leader_row(const PGresult *r, int i, int j)
{
	for (int k = i; k < j && PQnfields(r) > C_VALUE; k++)
		if (!PQgetisnull(r, k, C_TERM) && !PQgetisnull(r, k, C_VALUE))
			return k;
	return -1;
}

/* One holder of the row `i`; a leader's term and value from row `lead` (-1: none). */
static dlock_status add_holder(dlock_info *info, const PGresult *r, int i, dlock_lock_mode mode, int64_t slot,
                               int lead)
{
	char session[24], rec[3 * DLOCK_PG_APP_NAME_SIZE + 256];
	const char *host = PQgetvalue(r, i, C_HOST);
	snprintf(session, sizeof session, "%s", PQgetvalue(r, i, C_PID));
	dlock_holder h = DLOCK_HOLDER_INIT;
	h.host = host;
	h.mode = mode;
	h.slot = slot;
	h.session = session;
	char value[DLOCK_VALUE_MAX + 1] = "";
	if (lead >= 0) {
		size_t vlen = 0;
		unsigned char *raw = PQunescapeBytea((const unsigned char *)PQgetvalue(r, lead, C_VALUE), &vlen);
		if (!raw)
			return DLOCK_ENOMEM;
		vlen = vlen > DLOCK_VALUE_MAX || memchr(raw, '\0', vlen) ? 0 : vlen; /* not a value dlock wrote: none */
		memcpy(value, raw, vlen);
		value[vlen] = '\0';
		PQfreemem(raw);
		h.value = value;
		h.token = (uint64_t)num(r, lead, C_TERM);
	}
	size_t n = dlock_pg_app_owner(PQgetvalue(r, i, C_APP), host, rec, sizeof rec);
	return dlock_info_holder(info, &h, n ? rec : NULL, n);
}

/* The holders of one session (rows [i, j)). */
static dlock_status add_session(dlock_info *info, const PGresult *r, int i, int j, const struct session *s)
{
	dlock_status st = DLOCK_OK;
	if (!holds(s))
		return DLOCK_OK;
	if (!s->slot)
		return add_holder(info, r, i, s->k_excl ? DLOCK_MODE_EXCLUSIVE : DLOCK_MODE_SHARED, -1,
		                  s->k_excl ? leader_row(r, i, j) : -1);
	for (int k = i; k < j && st == DLOCK_OK; k++)
		if (num(r, k, C_SUB) == 2 && yes(r, k, C_GRANTED) && yes(r, k, C_EXCL) && num(r, k, C_OFF) < 1024)
			st = add_holder(info, r, k, DLOCK_MODE_EXCLUSIVE, num(r, k, C_OFF), -1);
	return st;
}

/*
 * The locks of rows [first, end) (sorted by session) as one lock named
 * `name` (NULL: by its key); `unnamed_k`: a bigint key that no name
 * claims (listing).  Nothing when no session holds or waits for it.
 */
static dlock_status describe(dlock_info *info, const PGresult *r, int first, int end, const char *name,
                             size_t len, int unnamed_k, int always, int blind)
{
	int64_t waiters = 0, permits = 0, holders = 0;
	int sem = 0, rw = 0, res_row = first;
	for (int i = first; i < end;) { /* the kind and the waiters first: dlock_info_lock takes them */
		int j = session_end(r, i, end);
		struct session s;
		read_session(r, i, j, unnamed_k, &s);
		if (!s.skip) {
			sem |= s.sem || s.slot;
			rw |= !s.sem && !s.slot && (s.k_shared || s.wants_shared || (s.k_excl && s.writer));
			permits = s.permits ? s.permits : permits;
			holders += holds(&s);
			waiters += waits(&s);
		}
		i = j;
	}
	if (!always && holders == 0 && waiters == 0)
		return DLOCK_OK;
	for (int i = first; i < end; i++)
		if (num(r, i, C_SUB) == (sem ? 2 : 1)) {
			res_row = i;
			break;
		}
	char resource[96];
	snprintf(resource, sizeof resource, "advisory:%lld:%lld%s", (long long)num(r, res_row, C_CLASSID),
	         (long long)num(r, res_row, C_OBJID), sem ? "+slot (objsubid 2)" : "");
	dlock_lock_kind kind = sem ? DLOCK_KIND_SEMAPHORE : rw ? DLOCK_KIND_RWLOCK : DLOCK_KIND_MUTEX;
	dlock_status st = dlock_info_lock(info, name, len, first < end ? resource : NULL, kind,
	                                  sem ? (uint32_t)permits : 1, blind ? -1 : waiters);
	for (int i = first; i < end && st == DLOCK_OK;) {
		int j = session_end(r, i, end);
		struct session s;
		read_session(r, i, j, unnamed_k, &s);
		st = add_session(info, r, i, j, &s);
		i = j;
	}
	return st;
}

/* ------------------------------------------------------------ the methods */

/* The name's keys as statement parameters. */
struct keys {
	char k[24], hi[16], base[16];
};

static void keys_of(const struct dlock_pg_backend *b, const char *name, size_t len, struct keys *out,
                    dlock_error *err, int *ok)
{
	size_t n;
	char *ns = dlock_pg_namespaced(b->prefix, name, len, &n);
	*ok = ns != NULL;
	if (!ns) {
		dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
		return;
	}
	int32_t hi, base;
	snprintf(out->k, sizeof out->k, "%lld", (long long)dlock_pg_key(ns, n));
	dlock_pg_sem_keys(ns, n, &hi, &base);
	snprintf(out->hi, sizeof out->hi, "%ld", (long)hi);
	snprintf(out->base, sizeof out->base, "%ld", (long)base);
	free(ns);
}

dlock_status dlock_pg_inspect(void *backend, const char *name, size_t len, dlock_info *info, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	if (b->mode != &dlock_pg_advisory_mode)
		return row_mode(b, "inspection", err);
	struct keys k;
	int ok;
	keys_of(b, name, len, &k, err, &ok);
	if (!ok)
		return DLOCK_ENOMEM;
	int leaders = (atomic_load(&b->leaders) & DLOCK_PG_LEADERS_READ) != 0;
	struct dlock_pg_stmt s = { .sql = leaders ? sql_inspect_leader : sql_inspect, .n = 3,
		                   .values = { k.k, k.hi, k.base }, .lengths = { -1, -1, -1 } };
	PGresult *res = NULL;
	char sqlstate[6];
	dlock_status st = dlock_pg_pool_query(b, &s, &res, sqlstate, err);
	if (st != DLOCK_OK && leaders && (strcmp(sqlstate, "42501") == 0 || strcmp(sqlstate, "42P01") == 0)) {
		atomic_store(&b->leaders, 0); /* revoked or dropped since open: holders without values */
		s.sql = sql_inspect;
		st = dlock_pg_pool_query(b, &s, &res, sqlstate, err);
	}
	if (st == DLOCK_OK)
		st = describe(info, res, 0, PQntuples(res), name, len, 0, 1, b->loop != NULL);
	PQclear(res);
	return st;
}

/* The lock of rows [first, end): its name from the bytea column, when there is one. */
/* `blind`: a loop client's, whose waiters poll: the waiters are unknown (-1). */
static dlock_status list_group(dlock_info *info, const PGresult *r, int first, int end, int blind)
{
	const char *group = PQgetvalue(r, first, C_GROUP);
	if (PQgetisnull(r, first, C_NAME))
		return describe(info, r, first, end, NULL, 0, group[0] == 'k', 0, blind);
	size_t len = 0;
	unsigned char *name = PQunescapeBytea((const unsigned char *)PQgetvalue(r, first, C_NAME), &len);
	if (!name)
		return DLOCK_ENOMEM;
	dlock_status st = len == 0 || len > DLOCK_NAME_MAX || memchr(name, '\0', len)
	                          ? describe(info, r, first, end, NULL, 0, 0, 0, blind) /* not a name dlock wrote */
	                          : describe(info, r, first, end, (const char *)name, len, 0, 0, blind);
	PQfreemem(name);
	return st;
}

dlock_status dlock_pg_list(void *backend, dlock_info *info, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	if (b->mode != &dlock_pg_advisory_mode)
		return row_mode(b, "listing", err);
	size_t plen = strlen(b->prefix);
	char *prefix = malloc(plen + 2);
	if (!prefix)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	memcpy(prefix, b->prefix, plen);
	memcpy(prefix + plen, ":", 2);
	int named = atomic_load(&b->names_listed);
	struct dlock_pg_stmt s = { .sql = named ? sql_list_named : sql_list_bare, .n = named, .values = { prefix },
		                   .lengths = { (int)plen + 1 }, .formats = { 1 } };
	PGresult *res = NULL;
	char sqlstate[6];
	dlock_status st = dlock_pg_pool_query(b, &s, &res, sqlstate, err);
	if (st != DLOCK_OK && named && (strcmp(sqlstate, "42501") == 0 || strcmp(sqlstate, "42P01") == 0)) {
		s.sql = sql_list_bare; /* the names are not readable: keys only */
		s.n = 0;
		st = dlock_pg_pool_query(b, &s, &res, sqlstate, err);
	}
	free(prefix);
	for (int i = 0, n = st == DLOCK_OK ? PQntuples(res) : 0; i < n && st == DLOCK_OK;) {
		int j = i;
		while (j < n && strcmp(PQgetvalue(res, j, C_GROUP), PQgetvalue(res, i, C_GROUP)) == 0)
			j++;
		st = list_group(info, res, i, j, b->loop != NULL);
		i = j;
	}
	if (st == DLOCK_ENOMEM && !err->msg[0])
		dlock_error_set(err, st, "out of memory listing locks");
	PQclear(res);
	return st;
}

/* The break statement, a struct dlock_pg_query, on `c` (c->mu held): its PostgreSQL 13 form on a server before 14. */
static dlock_status break_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	const struct dlock_pg_query *q = arg;
	struct dlock_pg_stmt s = *q->s;
	if (PQserverVersion(c->pg) < 140000)
		s.sql = sql_break_13;
	struct dlock_pg_query q13 = { .s = &s, .res = q->res, .sqlstate = q->sqlstate };
	return dlock_pg_query_on(b, c, &q13, err);
}

/* The NOTIFY of advisory key *arg on `c` (c->mu held); tried again only when the connection died. */
static dlock_status notify_on(struct dlock_pg_backend *b, struct dlock_pg_conn *c, void *arg, dlock_error *err)
{
	dlock_pg_leader_notify(b, c, *(const int64_t *)arg, err);
	return c->dead ? DLOCK_ECONNECT : DLOCK_OK;
}

/* A broken leader sends no NOTIFY of its own (its session is gone): tell the name's observers (pg_elect.c). */
static void notify_broken(struct dlock_pg_backend *b, const char *name, size_t len)
{
	size_t n;
	char *ns = dlock_pg_namespaced(b->prefix, name, len, &n);
	if (!ns)
		return;
	int64_t key = dlock_pg_key(ns, n);
	free(ns);
	dlock_error ignored = { .msg = "" };
	dlock_pg_pool_run(b, notify_on, &key, &ignored);
}

dlock_status dlock_pg_break(void *backend, const char *name, size_t len, size_t *broken, dlock_error *err)
{
	struct dlock_pg_backend *b = backend;
	*broken = 0;
	if (b->mode != &dlock_pg_advisory_mode)
		return row_mode(b, "breaking of locks", err);
	struct keys k;
	int ok;
	keys_of(b, name, len, &k, err, &ok);
	if (!ok)
		return DLOCK_ENOMEM;
	/* Wait for each session to end (PostgreSQL 14+), so that the name is free when this returns; well
	 * within the statement's own bound. */
	char wait[24];
	snprintf(wait, sizeof wait, "%lld", (long long)(b->io_timeout_ms / 2));
	struct dlock_pg_stmt s = { .sql = sql_break, .n = 4, .values = { k.k, k.hi, k.base, wait },
		                   .lengths = { -1, -1, -1, -1 } };
	PGresult *res = NULL;
	char sqlstate[6];
	struct dlock_pg_query q = { .s = &s, .res = &res, .sqlstate = sqlstate };
	dlock_status st = dlock_pg_pool_run(b, break_on, &q, err);
	if (st == DLOCK_EPERM) {
		char said[160];
		snprintf(said, sizeof said, "%.150s", err->msg);
		st = dlock_error_set(err, DLOCK_EPERM,
		                     "%s: this role may not end the session that holds the lock (the server says: %s); "
		                     "breaking needs the holder's role, membership in it, or pg_signal_backend "
		                     "(GRANT pg_signal_backend TO the role)",
		                     b->masked, said);
	}
	if (st == DLOCK_OK)
		*broken = (size_t)PQntuples(res);
	PQclear(res);
	if (st == DLOCK_OK && *broken > 0)
		notify_broken(b, name, len);
	return st;
}
