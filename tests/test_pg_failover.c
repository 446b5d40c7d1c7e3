/*
 * A PostgreSQL primary fails over to its streaming standby, on real
 * servers.  A failover destroys its topology, so each test makes a pair of
 * its own through DLOCK_TEST_PG_CTL (ci/servers/postgres/pair.sh: pair-new,
 * pair-kill-primary, pair-promote, pair-stop, pair-start, pair-drop) and
 * drops it at the end.  Clients use the URI that lists both hosts with
 * target_session_attrs=read-write, so libpq connects to whichever is the
 * primary.
 *
 *   synchronous standby   the primary is killed (immediate shutdown, as in a
 *                         crash) under a holder, then the standby promoted:
 *                         the holder is told within a third of its lease
 *                         (README), nobody gets a lock while there is no
 *                         primary, the same client then reaches the new
 *                         primary, and its first token is larger than every
 *                         token handed out before
 *   what sync does not cover (README, "PostgreSQL failover"): an asynchronous
 *                         standby that missed the sequence's last record; a
 *                         token taken while another acquisition's logged
 *                         nextval waits for the synchronous standby; a row-mode
 *                         token, whose transaction commits only at release.
 *                         Each gives a token again after the failover.
 *   fencing_durability=commit   the synchronous standby gone, no acquisition
 *                         returns a token (each waits for its commit), and
 *                         after the failover tokens go on above every one
 *                         handed out; with an asynchronous standby that
 *                         missed the record, tokens still come again, as
 *                         the capability's note says.
 *
 * The sequence pre-logs 32 values: a nextval writes WAL once every 33 calls
 * (and on the first call after a checkpoint), with the value it returns
 * plus 32 as the sequence's state.  A promoted standby continues from the
 * last such record it has.  The tests take tokens until the next nextval
 * is one that writes (log_cnt 0), so that what reaches the standby is known.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "testsupport.h"

#define LEASE_MS 3000
#define PROMOTE_WAIT_MS 10000

static const char *ctl;

struct pair {
	char dir[512];
	int primary_port, standby_port;
	char uri[640];
};

/* ------------------------------------------------------------ the pair */

/* `ctl VERB 'PAIRDIR' ARG`; 1 when it exited 0. */
static int pair_ctl(const struct pair *p, const char *verb, const char *arg)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "%s %s '%s' %s", ctl, verb, p->dir, arg ? arg : "");
	int rc = system(cmd);
	if (rc != 0)
		printf("\n    %s %s: exit %d", verb, arg ? arg : "", rc);
	return rc == 0;
}

/* A new pair (mode "sync" or "async"); 0 with a failed assertion when it could not be made. */
static int pair_new(struct pair *p, const char *mode)
{
	char cmd[512], line[sizeof p->dir];
	memset(p, 0, sizeof *p);
	snprintf(cmd, sizeof cmd, "%s pair-new %s", ctl, mode);
	FILE *f = popen(cmd, "r");
	CU_ASSERT_PTR_NOT_NULL_FATAL(f);
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "pair=", 5) == 0)
			snprintf(p->dir, sizeof p->dir, "%s", line + 5);
		else if (strncmp(line, "uri=", 4) == 0)
			snprintf(p->uri, sizeof p->uri, "%s", line + 4);
		else if (sscanf(line, "primary_port=%d", &p->primary_port) != 1)
			sscanf(line, "standby_port=%d", &p->standby_port);
	}
	int rc = pclose(f);
	int ok = rc == 0 && p->dir[0] && p->uri[0] && p->primary_port > 0 && p->standby_port > 0;
	if (!ok)
		printf("\n    pair-new %s failed (exit %d)", mode, rc);
	CU_ASSERT(ok);
	return ok;
}

static void pair_drop(struct pair *p)
{
	if (p->dir[0])
		CU_ASSERT(pair_ctl(p, "pair-drop", NULL));
}

/* `ctl pair-sql PAIRDIR MEMBER SQL` (as the superuser): 1 when its first line is `want`. */
static int pair_sql_is(const struct pair *p, const char *member, const char *sql, const char *want)
{
	char cmd[1024], line[128];
	snprintf(cmd, sizeof cmd, "%s pair-sql '%s' %s \"%s\"", ctl, p->dir, member, sql);
	dlock_test_run(cmd, line, sizeof line);
	line[strcspn(line, "\n")] = '\0';
	return strcmp(line, want) == 0;
}

static int standby_has_all(void *p)
{
	return pair_sql_is(p, "primary", "SELECT replay_lsn >= pg_current_wal_lsn() FROM pg_stat_replication", "t");
}

/* A libpq connection as dlock to 127.0.0.1:port. */
static PGconn *member(int port)
{
	char conninfo[128];
	snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d dbname=dlock_test user=dlock connect_timeout=5", port);
	PGconn *pg = PQconnectdb(conninfo);
	if (PQstatus(pg) != CONNECTION_OK)
		printf("\n    port %d: %s", port, PQerrorMessage(pg));
	CU_ASSERT_EQUAL(PQstatus(pg), CONNECTION_OK);
	return pg;
}

/* The first column of the first row of `sql` on `pg`, as a number (t 1, f 0); -1 on failure. */
static long long value(PGconn *pg, const char *sql)
{
	PGresult *r = PQexec(pg, sql);
	long long v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
		const char *s = PQgetvalue(r, 0, 0);
		v = strcmp(s, "t") == 0 ? 1 : strcmp(s, "f") == 0 ? 0 : atoll(s);
	} else {
		printf("\n    %s: %s", sql, PQerrorMessage(pg));
	}
	PQclear(r);
	return v;
}

/* value() on a connection of its own to 127.0.0.1:port. */
static long long scalar(int port, const char *sql)
{
	PGconn *pg = member(port);
	long long v = value(pg, sql);
	PQfinish(pg);
	return v;
}

/* ------------------------------------------------------------ tokens */

/* Acquire and release `l` (of `c`) once with a token; the token, 0 on failure. */
static uint64_t one_token(dlock_client *c, dlock_lock *l)
{
	dlock_status st = ft_acquire(l, 5000, 0, NULL);
	if (st != DLOCK_OK) {
		printf("\n    acquire for a token: %s: %s", dlock_status_name(st), dlock_client_errmsg(c));
		CU_FAIL("acquire for a token");
		return 0;
	}
	uint64_t t = dlock_test_token(l);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	return t;
}

/* Take tokens through `c` until the next nextval on the primary writes WAL; the largest. */
static uint64_t tokens_until_next_logs(dlock_client *c, int primary_port)
{
	dlock_lock *l = ft_lock(c, "pre-failover");
	PGconn *pg = member(primary_port);
	uint64_t max = 0;
	for (int i = 0; i < 40; i++) {
		uint64_t t = one_token(c, l);
		max = t > max ? t : max;
		if (value(pg, "SELECT log_cnt FROM dlock_fence") == 0)
			break;
	}
	CU_ASSERT_EQUAL(value(pg, "SELECT log_cnt FROM dlock_fence"), 0);
	PQfinish(pg);
	dlock_lock_free(l);
	return max;
}

/* The old primary killed, the standby promoted, with the standby started again in between if it was stopped. */
static void fail_over(const struct pair *p, int restart_standby)
{
	CU_ASSERT(pair_ctl(p, "pair-kill-primary", NULL));
	if (restart_standby)
		CU_ASSERT(pair_ctl(p, "pair-start", "standby"));
	CU_ASSERT(pair_ctl(p, "pair-promote", NULL));
}

/* ------------------------------------------------------------ synchronous standby */

static void test_sync_failover(void)
{
	struct pair p;
	if (!pair_new(&p, "sync"))
		return;
	char uri[768], only_new[256], name[64], err[512] = "";
	ft_uri_with(uri, sizeof uri, p.uri, "open_timeout=2s");
	ft_name(name, sizeof name, "failover");
	dlock_client *a = ft_open(uri);
	dlock_lock *l = ft_lock(a, name);
	ft_lost lost = { 0 };
	uint64_t before = tokens_until_next_logs(a, p.primary_port);
	/* The holder's acquisition is the one whose nextval writes the sequence's next record. */
	CU_ASSERT_EQUAL_FATAL(ft_acquire(l, 0, LEASE_MS, &lost), DLOCK_OK);
	uint64_t held = dlock_test_token(l);
	before = held > before ? held : before;
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK); /* alive on the server until the kill */
	CU_ASSERT_EQUAL(atomic_load(&lost.calls), 0);

	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT(pair_ctl(&p, "pair-kill-primary", NULL));
	int64_t killed = dlock_test_now_ms();

	/* No primary: nobody gets a lock, and the standby is never used for one. */
	dlock_client *none = NULL;
	CU_ASSERT_EQUAL(dlock_client_open(&none, uri, NULL, err, sizeof err), DLOCK_ECONNECT);
	printf("\n    no primary, open: %s", err);
	dlock_lock *other = ft_lock(a, "no-primary");
	int64_t t1 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(ft_acquire(other, 0, 0, NULL), DLOCK_ECONNECT);
	CU_ASSERT(dlock_test_now_ms() - t1 <= 2000 + FT_SLACK_MS);

	/* The holder is told within a third of its lease, as for a server restart. */
	CU_ASSERT(dlock_test_await(ft_lost_called, &lost, LEASE_MS + FT_AWAIT_MS));
	int64_t told = atomic_load(&lost.at_ms);
	CU_ASSERT(told - killed <= LEASE_MS / 3 + FT_SLACK_MS);
	CU_ASSERT_EQUAL(atomic_load(&lost.reason), DLOCK_LOST_SESSION);
	int64_t t2 = dlock_test_now_ms();
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_ENOTHELD);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	CU_ASSERT(dlock_test_now_ms() - t2 < 1000); /* no server call, no wait for a dead one */

	CU_ASSERT(pair_ctl(&p, "pair-promote", NULL));
	int64_t promoted = dlock_test_now_ms();

	/* The same client, through the same URI, on the new primary. */
	CU_ASSERT_EQUAL_FATAL(ft_acquire(l, PROMOTE_WAIT_MS, LEASE_MS, NULL), DLOCK_OK);
	int64_t again = dlock_test_now_ms();
	uint64_t after = dlock_test_token(l);
	CU_ASSERT(after > before);
	CU_ASSERT_EQUAL(scalar(p.standby_port, "SELECT pg_is_in_recovery()"), 0);
	snprintf(only_new, sizeof only_new, "postgres://dlock@127.0.0.1:%d/dlock_test", p.standby_port);
	dlock_client *direct = ft_open(only_new);
	CU_ASSERT_EQUAL(dlock_test_probe(direct, name), DLOCK_EBUSY); /* held there */
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_test_probe(direct, name), DLOCK_OK);
	/* A new client of the list URI gets there too, with a larger token still. */
	dlock_client *b = ft_open(uri);
	dlock_lock *lb = ft_lock(b, name);
	uint64_t fresh = one_token(b, lb);
	CU_ASSERT(fresh > after);
	CU_ASSERT_EQUAL(atomic_load(&lost.calls), 1);
	printf("\n    killed in %lld ms; holder told %lld ms after the kill (bound lease/3 = %d ms); promoted %lld ms "
	       "after the kill; acquired on the new primary %lld ms after that; tokens: largest before %llu, "
	       "first after %llu",
	       (long long)(killed - t0), (long long)(told - killed), LEASE_MS / 3, (long long)(promoted - killed),
	       (long long)(again - promoted), (unsigned long long)before, (unsigned long long)after);

	dlock_lock_free(lb);
	dlock_client_close(b);
	dlock_client_close(direct);
	dlock_lock_free(other);
	dlock_lock_free(l);
	dlock_client_close(a);
	pair_drop(&p);
}

/* ------------------------------------------------------------ what sync does not cover */

static void report(const char *what, uint64_t before, uint64_t after)
{
	printf("\n    %s: largest token before %llu, first after the failover %llu", what, (unsigned long long)before,
	       (unsigned long long)after);
}

/*
 * Asynchronous standby that did not get the record of the last nextval
 * that wrote one (here: stopped, the extreme of a lag): the new primary
 * starts from the record before, and gives tokens already given.
 */
static void async_missed(const char *params, const char *what)
{
	struct pair p;
	if (!pair_new(&p, "async"))
		return;
	char uri[768];
	snprintf(uri, sizeof uri, "%s", p.uri);
	if (params)
		ft_uri_with(uri, sizeof uri, p.uri, params);
	dlock_client *a = ft_open(uri);
	uint64_t before = tokens_until_next_logs(a, p.primary_port);
	/* Up to here the standby has it all (the primary flushes asynchronous commits within 3 x 200 ms). */
	CU_ASSERT(dlock_test_await(standby_has_all, &p, FT_AWAIT_MS));
	CU_ASSERT(pair_ctl(&p, "pair-stop", "standby"));
	dlock_lock *l = ft_lock(a, "async-missed");
	for (int i = 0; i < 5; i++) { /* the first writes a record the standby never gets */
		uint64_t t = one_token(a, l);
		before = t > before ? t : before;
	}
	fail_over(&p, 1);
	uint64_t after = one_token(a, l);
	report(what, before, after);
	CU_ASSERT(after != 0 && after <= before);
	dlock_lock_free(l);
	dlock_client_close(a);
	pair_drop(&p);
}

static void test_async_missed(void)
{
	async_missed(NULL, "asynchronous standby that missed the last record");
}

/*
 * Synchronous standby, gone: the acquisition whose nextval writes the
 * record waits for it at commit and fails (io_timeout; the retry on a new
 * session finds the key held by the old one, which still waits for the
 * standby on the server), but the sequence has moved on, and the next acquisition, of another name, gets the next
 * value at once, without writing WAL, so without waiting.  After the
 * failover that name's next token is not larger than the one it had.
 */
static void test_sync_unlogged_token(void)
{
	struct pair p;
	if (!pair_new(&p, "sync"))
		return;
	char uri[768];
	ft_uri_with(uri, sizeof uri, p.uri, "io_timeout=1s");
	dlock_client *a = ft_open(uri), *x = ft_open(uri);
	tokens_until_next_logs(a, p.primary_port);
	CU_ASSERT(pair_ctl(&p, "pair-stop", "standby"));
	dlock_lock *lx = ft_lock(x, "writes-the-record"), *ly = ft_lock(a, "takes-the-next");
	dlock_status st = ft_acquire(lx, 0, 0, NULL);
	printf("\n    the acquisition whose nextval writes the record, standby gone: %s: %s", dlock_status_name(st),
	       dlock_client_errmsg(x));
	CU_ASSERT_NOT_EQUAL(st, DLOCK_OK);
	uint64_t before = one_token(a, ly);
	fail_over(&p, 1);
	uint64_t after = one_token(a, ly);
	report("synchronous standby, token of a nextval that wrote nothing", before, after);
	CU_ASSERT(after != 0 && after <= before);
	dlock_lock_free(lx);
	dlock_lock_free(ly);
	dlock_client_close(x);
	dlock_client_close(a);
	pair_drop(&p);
}

/*
 * Row mode takes its token inside the transaction that holds the row, and
 * that transaction commits only at release: nothing waits for the
 * synchronous standby before the holder uses its token.  A failover while
 * it holds gives that token again.
 */
static void test_sync_row_held(void)
{
	struct pair p;
	if (!pair_new(&p, "sync"))
		return;
	char uri[768];
	ft_uri_with(uri, sizeof uri, p.uri, "mode=row");
	dlock_client *a = ft_open(uri);
	uint64_t before = tokens_until_next_logs(a, p.primary_port);
	dlock_lock *l = ft_lock(a, "row-held");
	ft_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(ft_acquire(l, 0, LEASE_MS, &lost), DLOCK_OK);
	uint64_t held = dlock_test_token(l);
	before = held > before ? held : before;
	fail_over(&p, 0);
	CU_ASSERT(dlock_test_await(ft_lost_called, &lost, LEASE_MS + FT_AWAIT_MS));
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	uint64_t after = one_token(a, l);
	report("synchronous standby, row mode, failover while held", before, after);
	CU_ASSERT(after != 0 && after <= held);
	dlock_lock_free(l);
	dlock_client_close(a);
	pair_drop(&p);
}

/* ------------------------------------------------------------ fencing_durability=commit */

/*
 * The synchronous standby gone: every acquisition of a durable client
 * waits for its commit, so none returns a token (io_timeout ends each;
 * the retry on a new session finds the key held by the old one, still
 * waiting on the server: EBUSY), where a
 * plain client got one at once (test_sync_unlogged_token).  After the
 * failover the tokens go on above every token ever returned.
 */
static void test_durable_standby_gone(void)
{
	struct pair p;
	if (!pair_new(&p, "sync"))
		return;
	char uri[768];
	ft_uri_with(uri, sizeof uri, p.uri, "io_timeout=1s&fencing_durability=commit");
	dlock_client *a = ft_open(uri);
	dlock_capabilities caps;
	CU_ASSERT_EQUAL(dlock_client_capabilities(a, &caps), DLOCK_OK);
	CU_ASSERT_EQUAL(caps.fencing, DLOCK_FENCING_CONDITIONAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(caps.fencing_note, "fencing_durability=commit"));
	uint64_t before = tokens_until_next_logs(a, p.primary_port);
	CU_ASSERT(pair_ctl(&p, "pair-stop", "standby"));
	const char *names[] = { "writes-the-record", "takes-the-next", "and-the-next" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		dlock_lock *l = ft_lock(a, names[i]);
		dlock_status st = ft_acquire(l, 0, 0, NULL);
		printf("\n    durable, standby gone, %s: %s: %s", names[i], dlock_status_name(st), dlock_client_errmsg(a));
		CU_ASSERT_NOT_EQUAL(st, DLOCK_OK);
		if (st == DLOCK_OK) {
			uint64_t t = dlock_test_token(l);
			before = t > before ? t : before;
			dlock_release(l);
		}
		dlock_lock_free(l);
	}
	fail_over(&p, 1);
	dlock_lock *l = ft_lock(a, "takes-the-next");
	uint64_t after = one_token(a, l);
	report("fencing_durability=commit, synchronous standby gone", before, after);
	CU_ASSERT(after > before);
	dlock_lock_free(l);
	dlock_client_close(a);
	pair_drop(&p);
}

/* An asynchronous standby waits for nothing: a durable client's tokens come again too (its note says so). */
static void test_durable_async_missed(void)
{
	async_missed("fencing_durability=commit", "fencing_durability=commit, asynchronous standby that missed the last record");
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("postgres failover", NULL, NULL);
	CU_add_test(s, "synchronous standby: holder told, new primary reached, tokens go on", test_sync_failover);
	CU_add_test(s, "asynchronous standby that missed the last record: tokens again", test_async_missed);
	CU_add_test(s, "synchronous standby gone: a token that wrote nothing comes again", test_sync_unlogged_token);
	CU_add_test(s, "synchronous standby, row mode: the held token comes again", test_sync_row_held);
	CU_add_test(s, "fencing_durability=commit, synchronous standby gone: no token, then larger ones",
	            test_durable_standby_gone);
	CU_add_test(s, "fencing_durability=commit, asynchronous standby that missed the record: tokens again",
	            test_durable_async_missed);
}

int main(void)
{
	ctl = dlock_test_env("DLOCK_TEST_PG_CTL");
	if (!ctl || !dlock_test_env("DLOCK_TEST_PG_URI"))
		return dlock_test_skip("no PostgreSQL servers to make a primary and standby pair (DLOCK_TEST_PG_CTL unset)");
	setvbuf(stdout, NULL, _IOLBF, 0);
	return dlock_test_main(add_suites);
}
