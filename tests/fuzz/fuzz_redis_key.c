/*
 * libFuzzer harness for the keys of a Redis lock (backends/redis/redis.c:
 * the driver's lock_init_kind, then the names a command builds from the handle,
 * redis_key.c, which need only the prefix of the client state).
 *
 * Input: PREFIX NUL NAME (without a NUL, the whole input is the name and
 * the prefix is "dlock").  Properties:
 *   - the keys are exactly PREFIX:{D}:lock, PREFIX:{D}:fence, the
 *     channel PREFIX:{D}:released and PREFIX:{D}:grant:OWNER, D the first
 *     32 hex digits of the name's SHA-256: no byte of the name reaches a
 *     key, whether built alone or into a command's arguments;
 *   - they map to one Redis Cluster slot, the handle's (the scripts touch
 *     the lock and the fence key together).
 */
#include "fuzz.h"

#include "redis_key.h"

extern const dlock_driver dlock_redis_driver;

/* CRC16-CCITT (XModem), as Redis Cluster hashes keys. */
static unsigned crc16(const char *s, size_t n)
{
	unsigned crc = 0;
	for (size_t i = 0; i < n; i++) {
		crc ^= (unsigned)(unsigned char)s[i] << 8;
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
	}
	return crc;
}

/* The cluster slot of a key: only the first non-empty {tag} is hashed when there is one. */
static unsigned slot(const char *key, size_t n)
{
	const char *open = memchr(key, '{', n);
	if (open) {
		const char *close = memchr(open + 1, '}', n - (size_t)(open + 1 - key));
		if (close && close > open + 1)
			return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
	}
	return crc16(key, n) & 16383;
}

static void check_key(const char *key, size_t len, const char *prefix, const char *digest, const char *suffix)
{
	char want[REDIS_KEY_MAX];
	int n = snprintf(want, sizeof want, "%s:{%s}:%s", prefix, digest, suffix);
	FUZZ_CHECK(n > 0 && (size_t)n == len && memcmp(key, want, len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	char *prefix = nul && nul > data ? fuzz_cstr(data, (size_t)(nul - data))
	                                 : fuzz_cstr((const uint8_t *)"dlock", 5);
	const char *name = nul ? (const char *)nul + 1 : (const char *)data;
	size_t len = nul ? size - (size_t)(nul + 1 - data) : size;
	len = strnlen(name, len); /* lock names hold no NUL */
	if (len == 0 || len > DLOCK_NAME_MAX || strlen(prefix) > REDIS_PREFIX_MAX) { /* the driver refuses longer */
		free(prefix);
		return 0;
	}
	/* The driver refuses prefixes with braces (they would break the hash
	 * tag); corpus/fuzz_redis_key/empty_tag_prefix is the input that found it. */
	if (strpbrk(prefix, "{}")) {
		free(prefix);
		return 0;
	}
	struct redis_client c = { .prefix = prefix, .prefixlen = strlen(prefix) };
	struct redis_lock lk;
	memset(&lk, 0, sizeof lk);
	dlock_error err = { "" };
	dlock_kind_spec mutex = { DLOCK_KIND_MUTEX, 1 };
	FUZZ_CHECK(dlock_redis_driver.lock_init_kind(&c, &lk, name, len, &mutex, &err) == DLOCK_OK);

	unsigned char sum[32];
	char digest[REDIS_DIGEST_HEX + 1];
	dlock_sha256(name, len, sum);
	dlock_hex(sum, REDIS_DIGEST_HEX / 2, digest);
	static const char *const suffix[] = { "lock", "fence", "released" };
	struct redis_args a = { 0 };
	for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
		char key[REDIS_KEY_MAX];
		size_t n = dlock_redis_key(&c, &lk, suffix[i], NULL, key);
		check_key(key, n, prefix, digest, suffix[i]);
		FUZZ_CHECK(slot(key, n) == lk.slot);
		dlock_redis_arg_key(&a, &c, &lk, suffix[i], NULL);
		check_key(a.argv[i], a.len[i], prefix, digest, suffix[i]);
	}
	memset(lk.owner, 'f', REDIS_OWNER_HEX - 1);
	lk.owner[REDIS_OWNER_HEX - 1] = '\0';
	dlock_redis_arg_key(&a, &c, &lk, "grant:", lk.owner);
	char grant[REDIS_OWNER_HEX + 8];
	snprintf(grant, sizeof grant, "grant:%s", lk.owner);
	check_key(a.argv[3], a.len[3], prefix, digest, grant);
	FUZZ_CHECK(slot(a.argv[3], a.len[3]) == lk.slot);
	free(prefix);
	return 0;
}
