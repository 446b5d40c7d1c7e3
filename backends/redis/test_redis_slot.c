/*
 * Unit test of the hash slot a Redis Cluster gives a key (redis_cluster.c),
 * beside it because it reaches the backend's internal header: the CRC16
 * check value and the hash-tag rules of the cluster specification, and the
 * slot of a key computed by a real Redis 7.0 (CLUSTER KEYSLOT).  No server
 * needed; tests/test_redis_cluster.c has the end-to-end cases.
 */
#include <string.h>

#include "redis_cluster.h"
#include "testsupport.h"

static unsigned slot(const char *key)
{
	return dlock_redis_key_slot(key, strlen(key));
}

static void test_crc16(void)
{
	CU_ASSERT_EQUAL(slot("123456789"), 0x31C3); /* the specification's check value, below 16384 */
	CU_ASSERT_EQUAL(slot(""), 0);
	CU_ASSERT_EQUAL(slot("dlock:{abc}:lock"), 7638); /* CLUSTER KEYSLOT on Redis 7.0.15 */
	CU_ASSERT_EQUAL(slot("abc"), 7638);
}

static void test_hash_tags(void)
{
	/* The first '{' and the next '}' with something between them. */
	CU_ASSERT_EQUAL(slot("{user1000}.following"), slot("{user1000}.followers"));
	CU_ASSERT_EQUAL(slot("{user1000}.following"), slot("user1000"));
	CU_ASSERT_EQUAL(slot("foo{bar}{zap}"), slot("bar"));
	CU_ASSERT_EQUAL(slot("foo{{bar}}zap"), slot("{bar"));
	/* An empty tag, or none closed: the whole key. */
	CU_ASSERT_NOT_EQUAL(slot("foo{}{bar}"), slot("bar"));
	CU_ASSERT_EQUAL(slot("foo{}{bar}"), dlock_redis_key_slot("foo{}{bar}", 10));
	CU_ASSERT_NOT_EQUAL(slot("foo{bar"), slot("bar"));
	/* The three keys and the channel of one lock share a slot, whatever the prefix. */
	CU_ASSERT_EQUAL(slot("p:{0123456789abcdef0123456789abcdef}:lock"),
	                slot("other:{0123456789abcdef0123456789abcdef}:released"));
	/* Lengths are honoured: no reading past the key. */
	CU_ASSERT_EQUAL(dlock_redis_key_slot("{ab}cd", 3), slot("{ab"));
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("redis cluster slots", NULL, NULL);
	CU_add_test(s, "CRC16 and known slots", test_crc16);
	CU_add_test(s, "hash tags", test_hash_tags);
}

int main(void)
{
	return dlock_test_main(add_suites);
}
