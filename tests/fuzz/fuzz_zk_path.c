/*
 * libFuzzer harness for the ZooKeeper backend's URI reading and paths
 * (backends/zookeeper/zk_config.c, zk_path.c): base path, lock parent,
 * and the sequence number read back from a child's name.
 *
 * Input: URI NUL NAME NUL CHILD.  URI is used as is when it starts with
 * "zk://", else appended to "zk://127.0.0.1:2181" (so the fuzzer spends its
 * time on paths and parameters).  Properties:
 *   - the config is OK or EURI with a message without the password;
 *   - the base is /name[/name...] of printable ASCII, never "." or "..",
 *     never under /zookeeper, at most ZK_PATH_MAX / 2 bytes;
 *   - the lock parent is BASE/COMPONENT, one level below the base, and
 *     the longest node path under it (a semaphore's lease) fits in
 *     ZK_PATH_MAX;
 *   - a child is a lock node exactly when what follows its last "-lock-"
 *     (a mutex), "__READ__" (a reader), "__WRIT__" (a writer) or "-lease-"
 *     (a semaphore's permit) is the
 *     server's "%010d" of a signed 32-bit value (it wraps to negative
 *     numbers), of the kind of that mark (never two), and its sequence
 *     number is that value.
 */
#define THREADED /* zookeeper.h declares the synchronous API only then */

#include "fuzz.h"

#include "zookeeper_internal.h"

/* Split off the next NUL-terminated piece of [*p, end). */
static char *piece(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *nul = memchr(*p, '\0', (size_t)(end - *p));
	const uint8_t *stop = nul ? nul : end;
	char *s = fuzz_cstr(*p, (size_t)(stop - *p));
	*p = nul ? nul + 1 : end;
	return s;
}

static void check_base(const char *base)
{
	size_t n = strlen(base);
	FUZZ_CHECK(n >= 2 && n <= ZK_PATH_MAX / 2 && base[0] == '/' && base[n - 1] != '/');
	FUZZ_CHECK(strcmp(base, "/zookeeper") != 0 && strncmp(base, "/zookeeper/", 11) != 0);
	FUZZ_CHECK(!strstr(base, "//") && !strstr(base, "/./") && !strstr(base, "/../"));
	FUZZ_CHECK(strcmp(base + n - 2, "/.") != 0 && (n < 3 || strcmp(base + n - 3, "/..") != 0));
	for (const char *p = base; *p; p++)
		FUZZ_CHECK((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f);
}

static void check_paths(const struct zk_config *cfg, const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > DLOCK_NAME_MAX)
		return;
	struct zk_lock lk;
	memset(&lk, 0, sizeof lk);
	dlock_error err = { "" };
	FUZZ_CHECK(dlock_zk_lock_paths(cfg, &lk, name, len, &err) == DLOCK_OK);
	char comp[DLOCK_COMPONENT_MAX + 1], want[ZK_PATH_MAX];
	dlock_name_component(name, len, comp);
	snprintf(want, sizeof want, "%s/%s", cfg->base, comp);
	FUZZ_CHECK(strcmp(lk.parent, want) == 0);
	FUZZ_CHECK(!strchr(comp, '/') && strcmp(comp, ".") != 0 && strcmp(comp, "..") != 0);
	size_t node = strlen(lk.parent) + 1 + strlen(ZK_NODE_PREFIX) + ZK_GUID_HEX + 1 + strlen(ZK_READ_MARK) + 11;
	FUZZ_CHECK(node < ZK_PATH_MAX);
	/* A semaphore's lease node, one level deeper. */
	node = strlen(lk.parent) + 1 + strlen(ZK_SEM_LEASES) + 1 + strlen(ZK_NODE_PREFIX) + ZK_GUID_HEX +
	       strlen(ZK_LEASE_MARK) + 11;
	FUZZ_CHECK(node < ZK_PATH_MAX);
	dlock_zk_lock_paths_free(&lk); /* the parent path and, for a hashed name, the name kept beside it */
}

/* The suffix is what the server's "%010d" writes for some 32-bit value. */
static int server_form(const char *t)
{
	size_t n = strlen(t);
	if (n == 10 && strspn(t, "0123456789") == 10)
		return strcmp(t, "2147483647") <= 0;
	if (t[0] != '-' || strspn(t + 1, "0123456789") != n - 1)
		return 0;
	if (n == 10) /* "-" and nine digits, zero-padded: -1 .. -999999999 */
		return strcmp(t, "-000000000") != 0;
	return n == 11 && t[1] != '0' && strcmp(t + 1, "2147483648") <= 0;
}

static void check_child(const char *child)
{
	int32_t seq = 12345;
	enum zk_node_kind got = dlock_zk_child_kind(child, &seq);
	enum zk_node_kind want = ZK_NODE_NONE;
	const char *tail = NULL;
	for (int k = ZK_NODE_MUTEX; k <= ZK_NODE_LEASE; k++) {
		const char *name = dlock_zk_node_mark((enum zk_node_kind)k), *mark = NULL;
		for (const char *p = strstr(child, name); p; p = strstr(p + 1, name))
			mark = p;
		if (mark && server_form(mark + strlen(name))) {
			FUZZ_CHECK(want == ZK_NODE_NONE); /* one kind at most */
			want = (enum zk_node_kind)k;
			tail = mark + strlen(name);
		}
	}
	FUZZ_CHECK(got == want);
	FUZZ_CHECK(dlock_zk_child_seq(child, &seq) == (want != ZK_NODE_NONE));
	if (got != ZK_NODE_NONE) {
		FUZZ_CHECK(seq == strtoll(tail, NULL, 10));
		/* Serial order: antisymmetric, and a value is never before itself. */
		FUZZ_CHECK(!dlock_zk_seq_before(seq, seq));
		FUZZ_CHECK(dlock_zk_seq_before(seq, (int32_t)((uint32_t)seq + 1)));
		FUZZ_CHECK(!dlock_zk_seq_before((int32_t)((uint32_t)seq + 1), seq));
	} else {
		FUZZ_CHECK(seq == 12345);
	}
}

/*
 * A decoded password long and odd enough that a message cannot hold it by
 * chance, written at most once in the text (a copy in the path is not a leak).
 */
static int distinctive(const dlock_uri *u, const char *text)
{
	const char *pw = u->password;
	/* A password with a separator can match text the driver builds from
	 * other parts ("Pw0rd:" in host "xPw0rd" + ":2181"): not distinctive. */
	if (!pw || strlen(pw) < 8 || strstr(u->masked, pw) || strpbrk(pw, ":/,@?&=[]"))
		return 0;
	const char *first = strstr(text, pw);
	if (first && strstr(first + 1, pw))
		return 0;
	/* Nor one that another part spells once decoded (a path "/Pw0rd%42a" is "/Pw0rdBa"). */
	if ((u->user && strstr(u->user, pw)) || strstr(u->path, pw))
		return 0;
	for (size_t i = 0; i < u->nhosts; i++)
		if (strstr(u->hosts[i].host, pw))
			return 0;
	for (size_t i = 0; i < u->nparams; i++)
		if (strstr(u->params[i].key, pw) || strstr(u->params[i].value, pw))
			return 0;
	return strpbrk(pw, "0123456789") && strpbrk(pw, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
}

static void check_uri(const char *text, const char *name)
{
	dlock_uri *u = NULL;
	dlock_error err = { "" };
	if (dlock_uri_parse(text, &u, &err) != DLOCK_OK)
		return;
	struct zk_config cfg;
	dlock_status st = dlock_zk_config_parse(u, &cfg, &err);
	FUZZ_CHECK(st == DLOCK_OK || (st == DLOCK_EURI && err.msg[0] != '\0'));
	FUZZ_CHECK(!distinctive(u, text) || !strstr(err.msg, u->password));
	if (st == DLOCK_OK) {
		FUZZ_CHECK(cfg.hosts && cfg.hosts[0] != '\0' && cfg.session_timeout_ms > 0);
		FUZZ_CHECK(!distinctive(u, text) || (!strstr(cfg.hosts, u->password) && !strstr(cfg.base, u->password)));
		FUZZ_CHECK(!cfg.password || (cfg.auth && strcmp(cfg.password, u->password) == 0));
		check_base(cfg.base);
		check_paths(&cfg, name);
		dlock_zk_config_free(&cfg);
	}
	dlock_uri_free(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size;
	char *tail = piece(&p, end), *name = piece(&p, end), *child = piece(&p, end);
	if (strncmp(tail, "zk://", 5) == 0) {
		check_uri(tail, name);
	} else {
		char *text = malloc(strlen(tail) + 32);
		if (!text)
			abort();
		sprintf(text, "zk://127.0.0.1:2181%s", tail);
		check_uri(text, name);
		free(text);
	}
	check_child(child);
	free(tail);
	free(name);
	free(child);
	return 0;
}
