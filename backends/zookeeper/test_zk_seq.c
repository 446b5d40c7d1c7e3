/*
 * Unit tests of zk://'s own pure functions, which sit beside them because
 * they reach its internal header: sequence numbers past 2^31 (the server's
 * "%010d" of negative numbers) and the place of a node in the queue across
 * the wrap.  No server needed; tests/test_zookeeper.c has the end-to-end
 * case.
 */
#define THREADED
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testsupport.h"
#include "zk_internal.h"

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

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("zk internals", NULL, NULL);
	CU_add_test(s, "sequence numbers past 2^31: negative forms, serial order", test_seq_wrap);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
