/*
 * rediss://: TLS on every connection, against real Redis 7 servers started
 * with --tls-port and a CA made at test time (ci/servers/redis.sh): one
 * that asks for no client certificate and one that requires it.  Each
 * server also listens in the clear, for the raw connections that look at
 * what the backend left there.
 *
 * What is checked: locks, waking and fair=1 and RedLock over TLS with no
 * connection of the client falling back to plaintext (the URI names only
 * TLS ports, where a plaintext request is refused, and the log stays free
 * of warnings); a wrong CA, a wrong name, a missing or wrong client
 * certificate and unreadable files are clear statuses whose messages hold
 * no path of a key; the system store and SSL_CERT_FILE; a plaintext port
 * fails the handshake within open_timeout; a lock lost over TLS is reported.
 */
#include "dlock/dlock.h"
#include "testredis.h"
#include "testsupport.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AWAIT_MS 20000

static const char *tls_dir;
static int tls_port, tls_plain_port, mtls_port, mtls_plain_port;
static char ca[512], other_ca[512], cert[512], key[512];

/* Warnings seen by a client's log (the lock must never fall back quietly). */
struct log_seen {
	atomic_int warnings;
	char last[512];
};

static void record_log(void *ud, dlock_log_level level, const char *msg)
{
	struct log_seen *s = ud;
	if (level <= DLOCK_LOG_WARN) {
		snprintf(s->last, sizeof s->last, "%s", msg);
		atomic_fetch_add(&s->warnings, 1);
		printf("\n    log: %s", msg);
	}
}

/* rediss://127.0.0.1:PORT?prefix=...&EXTRA */
static void tls_uri(char *out, size_t len, int port, const char *prefix, const char *extra)
{
	char base[128];
	snprintf(base, sizeof base, "rediss://127.0.0.1:%d", port);
	dlock_testredis_uri(out, len, base, prefix, extra);
}

/* Open `uri` expecting `want`; the message must name `expect` and must not hold the key's path. */
static void expect_open_fails(const char *uri, dlock_status want, const char *expect)
{
	const char *const secrets[] = { key, "client.key", NULL };
	dlock_testredis_open_fails(uri, want, expect, secrets);
}

/* ------------------------------------------------------------ working */

/* A lock over TLS: its key is on that server, with a token, and released. */
static void test_lock_over_tls(void)
{
	char prefix[64], uri[1024], k[512], extra[600];
	struct log_seen seen = { 0 };
	dlock_testredis_prefix(prefix, sizeof prefix);
	snprintf(extra, sizeof extra, "tls_ca_file=%s", ca);
	tls_uri(uri, sizeof uri, tls_port, prefix, extra);
	dlock_client *c = dlock_test_open(uri, record_log, &seen);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *l = dlock_test_new_lock(c, "tls");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, 1, NULL, NULL), DLOCK_OK);
	CU_ASSERT(dlock_test_token(l) > 0);
	dlock_testredis_key(k, sizeof k, prefix, "tls", "lock");
	redisContext *raw = dlock_testredis_raw(tls_plain_port);
	redisReply *r = redisCommand(raw, "EXISTS %s", k);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
	freeReplyObject(r);
	CU_ASSERT_EQUAL(dlock_extend(l, 0), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_check(l), DLOCK_OK);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	r = redisCommand(raw, "EXISTS %s", k);
	CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 0);
	freeReplyObject(r);

	/* Many cycles reuse the pooled TLS connections (idle ones with TLS 1.3
	 * session tickets pending are not taken for stale). */
	long long before = -1, after = -1;
	r = redisCommand(raw, "INFO stats");
	const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "total_connections_received:") : NULL;
	if (at)
		before = atoll(at + strlen("total_connections_received:"));
	freeReplyObject(r);
	for (int i = 0; i < 50; i++) {
		CU_ASSERT_EQUAL(dlock_test_acquire(l, 0, 0, 0, NULL, NULL), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	}
	r = redisCommand(raw, "INFO stats");
	at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "total_connections_received:") : NULL;
	if (at)
		after = atoll(at + strlen("total_connections_received:"));
	freeReplyObject(r);
	printf("\n    connections made for 50 cycles: %lld", after - before);
	CU_ASSERT(after >= before && after - before <= 2);
	redisFree(raw);
	dlock_lock_free(l);
	dlock_client_close(c);
	CU_ASSERT_EQUAL(atomic_load(&seen.warnings), 0);
}

/* The waiter is in place: subscribed to the channel (notify), or in the queue (fair=1). */
struct waiting_on {
	int port, fair;
	char key[512];
};

static int waiter_in_place(void *arg)
{
	struct waiting_on *on = arg;
	redisContext *raw = dlock_testredis_raw(on->port);
	redisReply *r = on->fair ? redisCommand(raw, "EXISTS %s", on->key) : redisCommand(raw, "PUBSUB NUMSUB %s", on->key);
	int in = 0;
	if (on->fair)
		in = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	else
		in = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER &&
		     r->element[1]->integer >= 1;
	freeReplyObject(r);
	redisFree(raw);
	return in;
}

/* A waiter is woken by the release through the subscriber's TLS connection, and fair=1's waiters block over TLS. */
static void test_waiters_over_tls(void)
{
	const char *modes[] = { "fair=0", "fair=1" };
	for (size_t m = 0; m < 2; m++) {
		char prefix[64], uri[1024], extra[700];
		struct log_seen seen = { 0 };
		dlock_testredis_prefix(prefix, sizeof prefix);
		snprintf(extra, sizeof extra, "tls_ca_file=%s&%s", ca, modes[m]);
		tls_uri(uri, sizeof uri, tls_port, prefix, extra);
		dlock_client *a = dlock_test_open(uri, record_log, &seen), *b = dlock_test_open(uri, record_log, &seen);
		CU_ASSERT_PTR_NOT_NULL_FATAL(a);
		CU_ASSERT_PTR_NOT_NULL_FATAL(b);
		dlock_lock *la = dlock_test_new_lock(a, "wake"), *lb = dlock_test_new_lock(b, "wake");
		CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(la, 0, 0, 1, NULL, NULL), DLOCK_OK);
		uint64_t first = dlock_test_token(la);
		dlock_test_waiter w;
		struct waiting_on on = { .port = tls_plain_port, .fair = m == 1 };
		dlock_testredis_key(on.key, sizeof on.key, prefix, "wake", m == 1 ? "queue" : "released");
		dlock_test_waiter_start(&w, lb, 10000, 0);
		CU_ASSERT(dlock_test_await(waiter_in_place, &on, AWAIT_MS)); /* subscribed, or queued */
		CU_ASSERT_EQUAL(atomic_load(&w.done), 0);
		int64_t released = dlock_test_now_ms();
		CU_ASSERT_EQUAL(dlock_release(la), DLOCK_OK);
		CU_ASSERT_EQUAL(dlock_test_waiter_join(&w, AWAIT_MS), DLOCK_OK);
		printf("\n    %s: woken %lld ms after the release", m ? "fair=1" : "notify",
		       (long long)(w.at_ms - released));
		CU_ASSERT(w.at_ms - released < 1000); /* woken, not polled at the lease's end */
		CU_ASSERT(w.token > first);
		CU_ASSERT_EQUAL(dlock_release(lb), DLOCK_OK);
		dlock_lock_free(la);
		dlock_lock_free(lb);
		dlock_client_close(a);
		dlock_client_close(b);
		CU_ASSERT_EQUAL(atomic_load(&seen.warnings), 0);
	}
}

/* RedLock over two TLS servers (one of them requires our client certificate). */
static void test_redlock_over_tls(void)
{
	char prefix[64], uri[2048], base[128], extra[1600], k[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	snprintf(base, sizeof base, "rediss://127.0.0.1:%d,127.0.0.1:%d", tls_port, mtls_port);
	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_cert=%s&tls_key=%s", ca, cert, key);
	dlock_testredis_uri(uri, sizeof uri, base, prefix, extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	CU_ASSERT_PTR_NULL(strstr(dlock_client_uri(c), key)); /* the key's path is masked */
	dlock_lock *l = dlock_test_new_lock(c, "redlock");
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, 1, NULL, NULL), DLOCK_OK);
	dlock_testredis_key(k, sizeof k, prefix, "redlock", "lock");
	int ports[2] = { tls_plain_port, mtls_plain_port };
	for (int i = 0; i < 2; i++) {
		redisContext *raw = dlock_testredis_raw(ports[i]);
		redisReply *r = redisCommand(raw, "EXISTS %s", k);
		CU_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
		freeReplyObject(r);
		redisFree(raw);
	}
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* The key deleted while held: the renewal over TLS reports the loss; the connections killed: it reconnects. */
static void test_lost_and_reconnect(void)
{
	char prefix[64], uri[1024], extra[600], k[512];
	dlock_testredis_prefix(prefix, sizeof prefix);
	snprintf(extra, sizeof extra, "tls_ca_file=%s", ca);
	tls_uri(uri, sizeof uri, tls_port, prefix, extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL_FATAL(c);
	dlock_lock *l = dlock_test_new_lock(c, "lost");
	dlock_test_lost lost = { 0 };
	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 0, 1, NULL, NULL), DLOCK_OK);
	redisContext *raw = dlock_testredis_raw(tls_plain_port);
	redisReply *r = redisCommand(raw, "CLIENT KILL TYPE normal SKIPME yes");
	freeReplyObject(r);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_OK); /* a new TLS connection, made on demand */

	CU_ASSERT_EQUAL_FATAL(dlock_test_acquire(l, 0, 1200, 1, dlock_test_on_lost, &lost), DLOCK_OK);
	dlock_testredis_key(k, sizeof k, prefix, "lost", "lock");
	r = redisCommand(raw, "DEL %s", k);
	freeReplyObject(r);
	int64_t t0 = dlock_test_now_ms();
	CU_ASSERT(dlock_test_await(dlock_test_lost_seen, &lost, AWAIT_MS));
	CU_ASSERT(dlock_test_now_ms() - t0 < 1200); /* within a renewal period (a third of the lease) and slack */
	CU_ASSERT_EQUAL(atomic_load(&lost.count), 1);
	CU_ASSERT_EQUAL(dlock_release(l), DLOCK_ENOTHELD);
	redisFree(raw);
	dlock_lock_free(l);
	dlock_client_close(c);
}

/* No tls_ca_file: the system store, which does not hold the test CA; SSL_CERT_FILE points OpenSSL at it. */
static void test_system_store(void)
{
	char uri[1024];
	tls_uri(uri, sizeof uri, tls_port, "dlock-tls-sys", "open_timeout=2s");
	const char *saved = getenv("SSL_CERT_FILE");
	char keep[512] = "";
	if (saved)
		snprintf(keep, sizeof keep, "%s", saved);
	unsetenv("SSL_CERT_FILE");
	expect_open_fails(uri, DLOCK_EAUTH, "certificate");
	setenv("SSL_CERT_FILE", ca, 1);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "sys"), DLOCK_OK);
	dlock_client_close(c);
	if (keep[0])
		setenv("SSL_CERT_FILE", keep, 1);
	else
		unsetenv("SSL_CERT_FILE");
}

/* ------------------------------------------------------------ refused */

static void test_wrong_ca_and_name(void)
{
	char uri[1024], extra[700];
	snprintf(extra, sizeof extra, "tls_ca_file=%s", other_ca);
	tls_uri(uri, sizeof uri, tls_port, "dlock-tls-bad", extra);
	expect_open_fails(uri, DLOCK_EAUTH, "certificate");

	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_server_name=elsewhere.example", ca);
	tls_uri(uri, sizeof uri, tls_port, "dlock-tls-bad", extra);
	expect_open_fails(uri, DLOCK_EAUTH, "tls_server_name");

	/* The certificate names localhost and 127.0.0.1: both verify, by DNS name and by address. */
	char base[128];
	snprintf(base, sizeof base, "rediss://localhost:%d", tls_port);
	snprintf(extra, sizeof extra, "tls_ca_file=%s", ca);
	dlock_testredis_uri(uri, sizeof uri, base, "dlock-tls-name", extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	dlock_client_close(c);

	/* Skipping verification is possible, and said loudly. */
	struct log_seen seen = { 0 };
	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_insecure_skip_verify=1", other_ca);
	tls_uri(uri, sizeof uri, tls_port, "dlock-tls-insecure", extra);
	c = dlock_test_open(uri, record_log, &seen);
	CU_ASSERT_PTR_NOT_NULL(c);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "insecure"), DLOCK_OK);
	CU_ASSERT(atomic_load(&seen.warnings) >= 1);
	CU_ASSERT_PTR_NOT_NULL(strstr(seen.last, "NOT verified"));
	dlock_client_close(c);
}

static void test_client_certificate(void)
{
	char uri[4096], extra[2048];
	/* Required and not given: the server's refusal is EAUTH (TLS 1.3 tells it at the first read). */
	snprintf(extra, sizeof extra, "tls_ca_file=%s", ca);
	tls_uri(uri, sizeof uri, mtls_port, "dlock-mtls", extra);
	expect_open_fails(uri, DLOCK_EAUTH, "certificate");

	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_cert=%s&tls_key=%s", ca, cert, key);
	tls_uri(uri, sizeof uri, mtls_port, "dlock-mtls", extra);
	dlock_client *c = dlock_test_open(uri, NULL, NULL);
	CU_ASSERT_PTR_NOT_NULL(c);
	CU_ASSERT_EQUAL(dlock_test_probe(c, "mtls"), DLOCK_OK);
	dlock_client_close(c);

	/* Half a pair, a key of another certificate, an encrypted key, missing files: EURI, no path. */
	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_cert=%s", ca, cert);
	tls_uri(uri, sizeof uri, mtls_port, "dlock-mtls", extra);
	expect_open_fails(uri, DLOCK_EURI, "tls_key");

	char *dir = dlock_test_mkdtemp(), cmd[2048], other_key[600], enc_key[600];
	CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
	snprintf(other_key, sizeof other_key, "%s/other.key", dir);
	snprintf(enc_key, sizeof enc_key, "%s/encrypted.key", dir);
	snprintf(cmd, sizeof cmd,
	         "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out %s 2>/dev/null && "
	         "openssl pkey -in %s -aes256 -passout pass:secret -out %s 2>/dev/null",
	         other_key, key, enc_key);
	CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_cert=%s&tls_key=%s", ca, cert, other_key);
	tls_uri(uri, sizeof uri, mtls_port, "dlock-mtls", extra);
	expect_open_fails(uri, DLOCK_EURI, "tls_key");
	CU_ASSERT_PTR_NULL(strstr(dlock_status_name(DLOCK_EURI), other_key));
	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_cert=%s&tls_key=%s", ca, cert, enc_key);
	tls_uri(uri, sizeof uri, mtls_port, "dlock-mtls", extra);
	expect_open_fails(uri, DLOCK_EURI, "unencrypted"); /* refused, never a passphrase prompt */
	snprintf(extra, sizeof extra, "tls_ca_file=%s/missing.pem", dir);
	tls_uri(uri, sizeof uri, mtls_port, "dlock-mtls", extra);
	expect_open_fails(uri, DLOCK_EURI, "tls_ca_file");
	snprintf(extra, sizeof extra, "tls_ca_file=%s&tls_cert=%s&tls_key=%s/secret/missing.key", ca, cert, dir);
	tls_uri(uri, sizeof uri, mtls_port, "dlock-mtls", extra);
	expect_open_fails(uri, DLOCK_EURI, "tls_key");
	dlock_test_rmtree(dir);
	free(dir);
}

static void test_bad_uris(void)
{
	char uri[1024];
	/* A plaintext port: the handshake fails within open_timeout, and says why. */
	int64_t t0 = dlock_test_now_ms();
	tls_uri(uri, sizeof uri, tls_plain_port, "dlock-tls-plain", "open_timeout=500ms");
	expect_open_fails(uri, DLOCK_ECONNECT, "TLS");
	CU_ASSERT(dlock_test_now_ms() - t0 < 3000);
	/* Plaintext to a TLS port is refused by the server: never a silent success. */
	char plain[1024];
	snprintf(plain, sizeof plain, "redis://127.0.0.1:%d?open_timeout=500ms&io_timeout=500ms", tls_port);
	expect_open_fails(plain, DLOCK_ECONNECT, NULL);
	/* tls_ parameters belong to rediss://; bad values. */
	snprintf(plain, sizeof plain, "redis://127.0.0.1:%d?tls_ca_file=%s", tls_plain_port, ca);
	expect_open_fails(plain, DLOCK_EURI, "tls_ca_file");
	tls_uri(uri, sizeof uri, tls_port, "dlock-tls", "tls_insecure_skip_verify=maybe");
	expect_open_fails(uri, DLOCK_EURI, "tls_insecure_skip_verify");
	tls_uri(uri, sizeof uri, tls_port, "dlock-tls", "tls_ca_file=");
	expect_open_fails(uri, DLOCK_EURI, "empty");
}

static void add_suites(void)
{
	CU_pSuite s = CU_add_suite("rediss:// (TLS)", NULL, NULL);
	CU_add_test(s, "a lock over TLS, pooled connections reused", test_lock_over_tls);
	CU_add_test(s, "waiters woken over TLS (notify and fair=1)", test_waiters_over_tls);
	CU_add_test(s, "RedLock over two TLS servers, one requiring a client certificate", test_redlock_over_tls);
	CU_add_test(s, "a lock lost over TLS is reported; killed connections are remade", test_lost_and_reconnect);
	CU_add_test(s, "the system store, and SSL_CERT_FILE", test_system_store);
	CU_add_test(s, "a wrong CA or name is EAUTH; skipping verification is loud", test_wrong_ca_and_name);
	CU_add_test(s, "client certificates: required, given, and bad files", test_client_certificate);
	CU_add_test(s, "plaintext ports and bad parameters", test_bad_uris);
}

static int port_of(const char *var)
{
	const char *v = dlock_test_env(var);
	return v ? atoi(v) : 0;
}

int main(void)
{
	tls_dir = dlock_test_env("DLOCK_TEST_TLS_DIR");
	tls_port = port_of("DLOCK_TEST_REDIS_TLS_PORT");
	tls_plain_port = port_of("DLOCK_TEST_REDIS_TLS_PLAIN_PORT");
	mtls_port = port_of("DLOCK_TEST_REDIS_MTLS_PORT");
	mtls_plain_port = port_of("DLOCK_TEST_REDIS_MTLS_PLAIN_PORT");
	if (!tls_dir || !tls_port || !tls_plain_port || !mtls_port || !mtls_plain_port)
		return dlock_test_skip("no TLS Redis (DLOCK_TEST_TLS_DIR, DLOCK_TEST_REDIS_TLS_PORT ... unset)");
	snprintf(ca, sizeof ca, "%s/ca.pem", tls_dir);
	snprintf(other_ca, sizeof other_ca, "%s/other-ca.pem", tls_dir);
	snprintf(cert, sizeof cert, "%s/client.pem", tls_dir);
	snprintf(key, sizeof key, "%s/client.key", tls_dir);
	return dlock_test_main(add_suites);
}
