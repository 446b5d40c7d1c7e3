/*
 * Unit tests of zk://'s own pure functions, which sit beside them because
 * they reach its internal header: sequence numbers past 2^31 (the server's
 * "%010d" of negative numbers), the place of a node in the queue across
 * the wrap, and the kinds of node (mutex, reader, writer) with the node
 * each one waits for.  No server needed; tests/test_zookeeper.c has the
 * end-to-end cases.
 */
#define THREADED
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testsupport.h"
#include "zookeeper_internal.h"

/* "_c_" + 32 x `g` + "-lock-" + seq, as the server names a node. */
static void node_name(char *out, size_t len, char g, const char *seq)
{
	char guid[ZK_GUID_HEX + 1];
	memset(guid, g, ZK_GUID_HEX);
	guid[ZK_GUID_HEX] = '\0';
	snprintf(out, len, ZK_NODE_PREFIX "%s" ZK_NODE_MARK "%s", guid, seq);
}

static int seq_of(const char *suffix, int32_t *seq)
{
	char name[128];
	node_name(name, sizeof name, 'a', suffix);
	return dlock_zk_child_seq(name, seq);
}

/* The parent's counter wraps after 2^31 creates: "%010d" of negative numbers, in serial order. */
static void test_seq_wrap(void)
{
	static const struct {
		const char *text;
		int32_t seq;
	} good[] = { { "0000000000", 0 },           { "0000000042", 42 },           { "2147483647", INT32_MAX },
		     { "-2147483648", INT32_MIN }, { "-000000002", -2 },           { "-000000001", -1 },
		     { "-999999999", -999999999 }, { "-1000000000", -1000000000 } };
	static const char *bad[] = { "2147483648", "-2147483649", "-000000000", "-2", "-0000000002", "42",
		                     "00000000042", "+000000042", " 000000042", "-", "", "--00000002",
		                     "-0999999999", "9999999999", "000000004x" };
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		int32_t seq = 7;
		CU_ASSERT(seq_of(good[i].text, &seq));
		CU_ASSERT_EQUAL(seq, good[i].seq);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int32_t seq = 7;
		if (seq_of(bad[i], &seq))
			printf("\n    accepted \"%s\"", bad[i]);
		CU_ASSERT(!seq_of(bad[i], &seq));
	}
	CU_ASSERT(dlock_zk_seq_before(INT32_MAX, INT32_MIN));
	CU_ASSERT(!dlock_zk_seq_before(INT32_MIN, INT32_MAX));
	CU_ASSERT(dlock_zk_seq_before(-1, 0));
	CU_ASSERT(dlock_zk_seq_before(INT32_MAX - 5, INT32_MIN + 5));
	CU_ASSERT(!dlock_zk_seq_before(3, 3));
	/* The queue across the wrap: holder at 2147483647, then -2147483648, then -2147483647. */
	char a[128], b[128], c[128], junk[] = "not-a-lock-node";
	node_name(a, sizeof a, 'a', "2147483647");
	node_name(b, sizeof b, 'b', "-2147483648");
	node_name(c, sizeof c, 'c', "-2147483647");
	char guid_a[ZK_GUID_HEX + 1], guid_b[ZK_GUID_HEX + 1], guid_c[ZK_GUID_HEX + 1];
	memset(guid_a, 'a', ZK_GUID_HEX), guid_a[ZK_GUID_HEX] = '\0';
	memset(guid_b, 'b', ZK_GUID_HEX), guid_b[ZK_GUID_HEX] = '\0';
	memset(guid_c, 'c', ZK_GUID_HEX), guid_c[ZK_GUID_HEX] = '\0';
	char *kids[] = { c, junk, b, a };
	int32_t pred = 99;
	CU_ASSERT(dlock_zk_queue_place(kids, 4, a, guid_a, &pred));
	CU_ASSERT_EQUAL(pred, -1);
	CU_ASSERT(dlock_zk_queue_place(kids, 4, b, guid_b, &pred));
	CU_ASSERT_EQUAL(pred, 3);
	CU_ASSERT(dlock_zk_queue_place(kids, 4, c, guid_c, &pred));
	CU_ASSERT_EQUAL(pred, 2);
	CU_ASSERT(!dlock_zk_queue_place(kids + 1, 3, c, guid_c, &pred));
}

/* "_c_" + 32 x `g` + "-" + mark + seq: a node of any kind. */
static void kind_node(char *out, size_t len, char g, enum zk_node_kind kind, const char *seq)
{
	char guid[ZK_GUID_HEX + 1];
	memset(guid, g, ZK_GUID_HEX);
	guid[ZK_GUID_HEX] = '\0';
	const char *mark = dlock_zk_node_mark(kind);
	snprintf(out, len, ZK_NODE_PREFIX "%s%s%s%s", guid, mark[0] == '-' ? "" : "-", mark, seq);
}

/* Names: Curator's own (a UUID with dashes for GUID), ours, and what is no lock node. */
static void test_node_kinds(void)
{
	static const struct {
		const char *name;
		enum zk_node_kind kind;
		int32_t seq;
	} names[] = {
		{ "_c_8eb60557-ba51-40da-87ee-fc47467d3f34-lock-0000000031", ZK_NODE_MUTEX, 31 },
		{ "_c_8eb60557-ba51-40da-87ee-fc47467d3f34-__READ__0000000032", ZK_NODE_READ, 32 },
		{ "_c_8eb60557-ba51-40da-87ee-fc47467d3f34-__WRIT__0000000033", ZK_NODE_WRITE, 33 },
		{ "__WRIT__-000000002", ZK_NODE_WRITE, -2 },
		{ "x-lock-__READ__0000000001", ZK_NODE_READ, 1 },
		{ "x__WRIT__-lock-0000000001", ZK_NODE_MUTEX, 1 },
		{ "x__READ__00000000012", ZK_NODE_NONE, 0 },
		{ "__READ__", ZK_NODE_NONE, 0 },
		{ "__READ__42", ZK_NODE_NONE, 0 },
		{ "__read__0000000001", ZK_NODE_NONE, 0 },
		{ "514e5a831836450cb1a56c741e990fd8__lock__0000000032", ZK_NODE_NONE, 0 }, /* kazoo's: not in our queue */
		{ "__READ__0000000001x", ZK_NODE_NONE, 0 },
		{ "_c_8eb60557-ba51-40da-87ee-fc47467d3f34-lease-0000000034", ZK_NODE_LEASE, 34 },
		{ "x-lock-lease-0000000001", ZK_NODE_LEASE, 1 },
		{ "x-lease-lock-0000000001", ZK_NODE_MUTEX, 1 },
		{ "lease-0000000001", ZK_NODE_NONE, 0 },
		{ "leases", ZK_NODE_NONE, 0 },
		{ "locks", ZK_NODE_NONE, 0 },
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		int32_t seq = 7;
		enum zk_node_kind k = dlock_zk_child_kind(names[i].name, &seq);
		if (k != names[i].kind)
			printf("\n    \"%s\" is kind %d", names[i].name, (int)k);
		CU_ASSERT_EQUAL(k, names[i].kind);
		CU_ASSERT_EQUAL(dlock_zk_child_seq(names[i].name, &seq), names[i].kind != ZK_NODE_NONE);
		CU_ASSERT(names[i].kind == ZK_NODE_NONE || seq == names[i].seq);
	}
	char name[128];
	kind_node(name, sizeof name, 'a', ZK_NODE_READ, "0000000005");
	CU_ASSERT_STRING_EQUAL(name, "_c_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-__READ__0000000005");
	kind_node(name, sizeof name, 'a', ZK_NODE_MUTEX, "0000000005");
	CU_ASSERT_STRING_EQUAL(name, "_c_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-lock-0000000005");
	CU_ASSERT(dlock_zk_child_has_guid(name, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
	CU_ASSERT(!dlock_zk_child_has_guid(name, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"));
	CU_ASSERT_PTR_NULL(dlock_zk_node_mark(ZK_NODE_NONE));
	kind_node(name, sizeof name, 'a', ZK_NODE_LEASE, "0000000005");
	CU_ASSERT_STRING_EQUAL(name, "_c_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-lease-0000000005");
	/* A lease node is never in a lock queue. */
	char *kids[] = { name };
	int32_t pred = 7;
	CU_ASSERT_EQUAL(dlock_zk_queue_place(kids, 1, name, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", &pred), 0);
}

/* A semaphore's N in its nodes' data: exactly "dlock:permits=N", N 1..DLOCK_PERMITS_MAX; anything else says none. */
static void test_permits_data(void)
{
	char buf[ZK_PERMITS_DATA_MAX];
	uint32_t n = 0;
	int len = dlock_zk_permits_format(3, buf);
	CU_ASSERT_STRING_EQUAL(buf, "dlock:permits=3");
	CU_ASSERT(dlock_zk_permits_parse(buf, len, &n) && n == 3);
	len = dlock_zk_permits_format(DLOCK_PERMITS_MAX, buf);
	CU_ASSERT(dlock_zk_permits_parse(buf, len, &n) && n == DLOCK_PERMITS_MAX);
	static const char *bad[] = { "dlock:permits=0", "dlock:permits=01", "dlock:permits=1025", "dlock:permits=",
		                     "dlock:permits=12345", "dlock:permits=3x", "dlock:permits= 3", "127.0.1.1",
		                     "permits=3", "DLOCK:permits=3", "" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		n = 7;
		CU_ASSERT(!dlock_zk_permits_parse(bad[i], (int)strlen(bad[i]), &n) && n == 7);
	}
	CU_ASSERT(!dlock_zk_permits_parse(NULL, -1, &n)); /* a node without data */
	CU_ASSERT(!dlock_zk_permits_parse("dlock:permits=3", 14, &n)); /* cut short */
}

/*
 * One queue of every kind, listed out of order (as the server lists children):
 * M0 R1 R2 W3 R4 R5 W6 M7.  A writer or a mutex waits for the node just
 * before it; a reader for the nearest writer or mutex before it.
 */
static void test_queue_kinds(void)
{
	static const struct {
		enum zk_node_kind kind;
		int waits_for; /* the node it waits for, -1: none */
		int without_m0; /* the same once M0 has gone */
	} q[] = {
		{ ZK_NODE_MUTEX, -1, -1 }, { ZK_NODE_READ, 0, -1 },  { ZK_NODE_READ, 0, -1 }, { ZK_NODE_WRITE, 2, 2 },
		{ ZK_NODE_READ, 3, 3 },    { ZK_NODE_READ, 3, 3 },   { ZK_NODE_WRITE, 5, 5 }, { ZK_NODE_MUTEX, 6, 6 },
	};
	enum { N = sizeof q / sizeof q[0] };
	static const int listed[N] = { 5, 2, 7, 0, 3, 6, 1, 4 }; /* kids[i] is node listed[i] */
	char names[N][128], guids[N][ZK_GUID_HEX + 1], *kids[N];
	for (int i = 0; i < N; i++) {
		char seq[16];
		snprintf(seq, sizeof seq, "%010d", 40 + i);
		kind_node(names[i], sizeof names[i], (char)('a' + i), q[i].kind, seq);
		memset(guids[i], 'a' + i, ZK_GUID_HEX);
		guids[i][ZK_GUID_HEX] = '\0';
	}
	for (int i = 0; i < N; i++)
		kids[i] = names[listed[i]];
	for (int gone = 0; gone < 2; gone++) {
		char *const *list = kids;
		int32_t n = N;
		char *rest[N];
		if (gone) { /* M0 released: the list without it */
			n = 0;
			for (int i = 0; i < N; i++)
				if (listed[i] != 0)
					rest[n++] = kids[i];
			list = rest;
		}
		for (int i = gone; i < N; i++) {
			int32_t pred = 99;
			CU_ASSERT(dlock_zk_queue_place(list, n, names[i], guids[i], &pred));
			int want = gone ? q[i].without_m0 : q[i].waits_for;
			const char *got = pred < 0 ? "none" : list[pred];
			if (want < 0 ? pred != -1 : (pred < 0 || strcmp(got, names[want]) != 0))
				printf("\n    node %d waits for %s", i, got);
			CU_ASSERT(want < 0 ? pred == -1 : (pred >= 0 && strcmp(list[pred], names[want]) == 0));
		}
	}
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("zk internals", NULL, NULL);
	CU_add_test(s, "sequence numbers past 2^31: negative forms, serial order", test_seq_wrap);
	CU_add_test(s, "node kinds: Curator's names, ours, and others", test_node_kinds);
	CU_add_test(s, "the node each kind waits for, in a mixed queue", test_queue_kinds);
	CU_add_test(s, "a semaphore's N in its nodes' data", test_permits_data);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
