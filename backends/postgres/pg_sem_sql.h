/*
 * The statements of a semaphore in advisory mode (pg_sem.c says what they
 * do), as macros: pg_advisory.c prepares them with the mode's other
 * statements, once per session, and pg_sem.c runs them.
 */
#ifndef DLOCK_PG_SEM_SQL_H
#define DLOCK_PG_SEM_SQL_H

#include "pg_backend.h"

#define GATE_WAIT "20"    /* lock_timeout of K shared: a probe holds it exclusive for microseconds */

/* Parameters: $1 K, $2 hi, $3 base, $4 N, $5 lease (idle timeout), $6 keep when no slot, $7 slots held
 * by this session, $8 unused. */
#define K "$1::int8"
#define HI "$2::int4"
#define BASE "$3::int4"
#define NPERM "$4::int4"
#define ANY_KEY HI ", " BASE " + 2048"
#define MARK_KEY HI ", " BASE " + 1023 + " NPERM
#define ELAPSED ", (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::int8"

/* What holds K or a marker of another N, in other sessions: NULL, -3, or -10000 - that N.  One scan
 * of pg_locks (each reads the lock table anew): in one snapshot a semaphore's session that holds K
 * holds ANY too (it takes ANY before K, and lets go of K first). */
#define CONFLICT                                                                                           \
	"(WITH a AS MATERIALIZED (SELECT pid, objsubid, objid::int8 AS o, mode FROM pg_locks "                \
	"WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid() AND ((objsubid = 1 "             \
	"AND classid::int8 = ((" K " >> 32) & 4294967295) AND objid::int8 = (" K " & 4294967295)) "          \
	"OR (objsubid = 2 AND classid::int8 = " HI " AND objid::int8 BETWEEN " BASE " + 1024 AND " BASE       \
	" + 2048))) "                                                                                         \
	"SELECT CASE WHEN bool_or(x.other) THEN -3 ELSE -10000 - max(x.n) END FROM ("                         \
	"SELECT false AS other, o - " BASE " - 1023 AS n FROM a WHERE objsubid = 2 AND o <= " BASE " + 2047 " \
	"AND o <> " BASE " + 1023 + " NPERM " "                                                               \
	"UNION ALL SELECT true, 0 FROM a r WHERE r.objsubid = 1 AND NOT EXISTS (SELECT 1 FROM a m "           \
	"WHERE m.pid = r.pid AND m.objsubid = 2 AND m.o = " BASE " + 2048 AND m.mode = 'ShareLock')"          \
	") x HAVING count(*) > 0)"

/* Unlock K, the marker and ANY (always true: every unlock evaluated). */
#define LEAVE                                                                                          \
	"(pg_advisory_unlock_shared(" K ")::int + pg_advisory_unlock_shared(" MARK_KEY ")::int + "        \
	"pg_advisory_unlock_shared(" ANY_KEY ")::int >= 0)"

/* The first free slot, kept in dlock.s (-1: none). */
#define SLOTS                                                                                          \
	"set_config('dlock.s', COALESCE((SELECT s FROM generate_series(0, " NPERM " - 1) s WHERE CASE "    \
	"WHEN s = ANY($7::int4[]) THEN false ELSE pg_try_advisory_lock(" HI ", " BASE " + s) END "         \
	"LIMIT 1), -1)::text, true) = '-1'"

#define IDLE "set_config('idle_session_timeout', $5::text, false) IS NULL"

#define ENTER(tail)                                                                                     \
	"SELECT CASE WHEN pg_advisory_lock_shared(" ANY_KEY ") IS NULL THEN NULL "                          \
	"WHEN pg_advisory_lock_shared(" MARK_KEY ") IS NULL THEN NULL "                                     \
	"WHEN set_config('lock_timeout', '" GATE_WAIT "', true) IS NULL THEN NULL "                         \
	"WHEN pg_advisory_lock_shared(" K ") IS NULL THEN NULL "                                            \
	"WHEN set_config('lock_timeout', '0', true) IS NULL THEN NULL "                                     \
	"WHEN " IDLE " THEN NULL "                                                                          \
	"WHEN set_config('dlock.c', COALESCE(CASE WHEN pg_try_advisory_lock(" K ") THEN CASE WHEN "         \
	"pg_advisory_unlock(" K ") THEN NULL::int8 END ELSE " CONFLICT " END, 0)::text, true) <> '0' "            \
	"THEN CASE WHEN " LEAVE " THEN ARRAY[current_setting('dlock.c')::int8] END "                        \
	"WHEN " SLOTS " THEN CASE WHEN $6::bool THEN ARRAY[-2]::int8[] WHEN " LEAVE " THEN ARRAY[-4]::int8[] END " \
	"ELSE ARRAY[current_setting('dlock.s')::int8, " tail "] END" ELAPSED

#define RETRY(tail)                                                                                     \
	"SELECT CASE WHEN " IDLE " THEN NULL WHEN " SLOTS " THEN ARRAY[-2]::int8[] "                        \
	"ELSE ARRAY[current_setting('dlock.s')::int8, " tail "] END" ELAPSED

/* After ENTER's 55P03 (K not available): the markers it took dropped, and what holds K. */
#define GATE_FAIL                                                                                       \
	"SELECT COALESCE(" CONFLICT ", -1), pg_advisory_unlock_shared(" MARK_KEY ")::int + "               \
	"pg_advisory_unlock_shared(" ANY_KEY ")::int"

/* A waiter that gives up. */
#define GIVE_UP "SELECT " LEAVE

/* Release: $5 the slot, $6 the session's idle timeout or NULL (keep it), $7 the channel. */
#define RELEASE                                                                                         \
	"SELECT pg_advisory_unlock(" HI ", " BASE " + $5::int4), " LEAVE ", pg_notify($7::text, ''), "     \
	"CASE WHEN $6::text IS NULL THEN false ELSE set_config('idle_session_timeout', $6::text, false) "   \
	"IS NULL END"

#define CHECK                                                                                           \
	"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted " \
	"AND objsubid = 2 AND mode = 'ExclusiveLock' AND classid::int8 = " HI " AND objid::int8 = " BASE    \
	" + $5::int4 AND " K " IS NOT NULL AND " NPERM " > 0"

#define SEM_ARGS "(int8, int4, int4, int4, text, bool, int4[], text)"
#define SEM_RELEASE_ARGS "(int8, int4, int4, int4, int4, text, text, text)"
#define SEM_SEQ "nextval('" DLOCK_PG_SEQUENCE "')"

/* For the PLAIN and TOKEN sets of pg_advisory.c. */
#define DLOCK_PG_SEM_PREPARE_PLAIN                                                   \
	"PREPARE dlock_sem_enter" SEM_ARGS " AS " ENTER("0") ";"                      \
	"PREPARE dlock_sem_retry" SEM_ARGS " AS " RETRY("0") ";"                      \
	"PREPARE dlock_sem_gate" SEM_ARGS " AS " GATE_FAIL ";"                        \
	"PREPARE dlock_sem_give_up" SEM_ARGS " AS " GIVE_UP ";"                       \
	"PREPARE dlock_sem_release" SEM_RELEASE_ARGS " AS " RELEASE ";"
#define DLOCK_PG_SEM_PREPARE_TOKEN                                                   \
	"PREPARE dlock_sem_enter_token" SEM_ARGS " AS " ENTER(SEM_SEQ) ";"            \
	"PREPARE dlock_sem_retry_token" SEM_ARGS " AS " RETRY(SEM_SEQ) ";"
/* fencing_durability=commit (pg_advisory.c): the same names, the token committed durably. */
#define DLOCK_PG_SEM_PREPARE_TOKEN_DURABLE                                           \
	"PREPARE dlock_sem_enter_token" SEM_ARGS " AS " ENTER(DLOCK_PG_DURABLE(SEM_SEQ)) ";" \
	"PREPARE dlock_sem_retry_token" SEM_ARGS " AS " RETRY(DLOCK_PG_DURABLE(SEM_SEQ)) ";"

#endif
