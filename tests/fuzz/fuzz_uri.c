/*
 * libFuzzer harness for the URI parser and the password mask (core/uri.c).
 *
 * The input is the URI text.  Properties checked on every input:
 *   - parsing returns OK, EURI or EINVAL (never ENOMEM: the arena is sized
 *     from the text) with a message on failure;
 *   - the mask hides at least the bytes the parser reads as the password,
 *     fits in any buffer and is cut, never overrun;
 *   - a parsed URI is well formed (see check_parsed) and survives a round
 *     trip: written back with every part percent-encoded, it parses to
 *     the same fields;
 *   - no message (parse error, dlock_client_open's errbuf, the client's
 *     URI) repeats the password.
 */
#include "fuzz.h"

#include "dlock/dlock.h"
#include "uri.h"

#define URI_TEXT_MAX 8192 /* core/uri.c refuses longer text */

/* ------------------------------------------------------------ the password */

/*
 * [*from, *to) of what the parser reads as the password: the userinfo ends
 * at the last '@' of the authority, the authority at the first '/' or '?'
 * after "://".  Written from the grammar in uri.h, not copied from uri.c.
 */
static int parser_password(const char *text, size_t *from, size_t *to)
{
	const char *rest = strstr(text, "://");
	if (!rest)
		return 0;
	rest += 3;
	size_t auth = strcspn(rest, "/?");
	const char *at = NULL, *colon = NULL;
	for (size_t i = 0; i < auth; i++)
		if (rest[i] == '@')
			at = rest + i;
	for (const char *p = rest; at && p < at && !colon; p++)
		if (*p == ':')
			colon = p;
	if (!colon)
		return 0;
	*from = (size_t)(colon + 1 - text);
	*to = (size_t)(at - text);
	return 1;
}

/*
 * A password that no other part of the text can produce: at least 6
 * letters and digits, with both, written once, in a text without '%'
 * (decoding could rebuild it elsewhere).  Only such a password is searched
 * in messages: a short one, a word or a repeated one may appear there for
 * other reasons.
 */
static int distinctive(const char *text, size_t from, size_t to)
{
	int letters = 0, digits = 0;
	if (to - from < 6 || strchr(text, '%'))
		return 0;
	for (size_t i = from; i < to; i++) {
		char c = text[i];
		letters += (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
		digits += c >= '0' && c <= '9';
	}
	if (!letters || !digits || (size_t)(letters + digits) != to - from)
		return 0;
	size_t n = to - from, count = 0;
	for (const char *p = text; *p; p++)
		count += strncmp(p, text + from, n) == 0;
	return count == 1;
}

static void check_mask(const char *text)
{
	size_t len = strlen(text);
	/* Each "***" replaces a password or a secret query value (after at
	 * least ':' or "password="), so the result is shorter than 2*len + 4. */
	char *full = malloc(2 * len + 4);
	char small[17];
	if (!full)
		abort();
	dlock_uri_mask(text, full, 2 * len + 4);
	FUZZ_CHECK(strlen(full) <= 2 * len + 3);
	/* A short buffer gets a prefix of the full answer, NUL-terminated. */
	for (size_t cap = 1; cap <= sizeof small; cap += 5) {
		memset(small, 'x', sizeof small);
		dlock_uri_mask(text, small, cap);
		FUZZ_CHECK(memchr(small, '\0', cap) != NULL);
		FUZZ_CHECK(strncmp(small, full, strlen(small)) == 0);
	}
	/* With a '?' before "://" the mask and the parser start at different places. */
	const char *sep = strstr(text, "://");
	size_t from, to;
	/* Secret query values ("?sslpassword=...", "?tls_key=...") are masked
	 * too, so the tail equals the text only when no query key names a
	 * password or ends in "key". */
	if (sep && !memchr(text, '?', (size_t)(sep - text)) && parser_password(text, &from, &to) &&
	    !strcasestr(text + to, "password") && !strcasestr(text + to, "key=")) {
		/* Everything before the password is kept and "***" stands in for it. */
		FUZZ_CHECK(strncmp(full, text, from) == 0 && strncmp(full + from, "***", 3) == 0);
		/* What follows "***" is the text from the password's end or later. */
		size_t tail = strlen(full + from + 3);
		FUZZ_CHECK(tail <= len - to && strcmp(full + from + 3, text + len - tail) == 0);
	}
	free(full);
}

/* ------------------------------------------------------------ parsed URIs */

static int common_key(const char *key)
{
	static const char *const keys[] = { "ttl", "wait", "renew", "prefix", "open_timeout", "io_timeout" };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (strcmp(key, keys[i]) == 0)
			return 1;
	return 0;
}

static void check_parsed(const dlock_uri *u, const char *text)
{
	FUZZ_CHECK(u->scheme[0] >= 'a' && u->scheme[0] <= 'z');
	for (const char *p = u->scheme; *p; p++)
		FUZZ_CHECK(strchr("abcdefghijklmnopqrstuvwxyz0123456789+-.", *p) != NULL);
	FUZZ_CHECK(u->nhosts >= 1 && u->hosts);
	for (size_t i = 0; i < u->nhosts; i++)
		FUZZ_CHECK(u->hosts[i].host && u->hosts[i].port >= 0 && u->hosts[i].port <= 65535);
	FUZZ_CHECK(u->path[0] == '\0' || u->path[0] == '/');
	for (size_t i = 0; i < u->nparams; i++) {
		FUZZ_CHECK(u->params[i].key[0] != '\0' && !common_key(u->params[i].key));
		FUZZ_CHECK(dlock_uri_get(u, u->params[i].key) == u->params[i].value);
	}
	FUZZ_CHECK(u->ttl_ms > 0 && u->connect_timeout_ms > 0 && u->io_timeout_ms > 0);
	FUZZ_CHECK(u->wait_ms >= 0 || u->wait_ms == DLOCK_WAIT_FOREVER);
	FUZZ_CHECK((u->renew == 0 || u->renew == 1) && u->prefix[0] != '\0');
	char *masked = malloc(2 * strlen(text) + 4); /* as the parser sizes it */
	if (!masked)
		abort();
	dlock_uri_mask(text, masked, 2 * strlen(text) + 4);
	FUZZ_CHECK(strcmp(masked, u->masked) == 0);
	free(masked);
	FUZZ_CHECK(!u->password || strstr(u->masked, "***"));
}

/* ------------------------------------------------------------ round trip */

struct out {
	char buf[4 * URI_TEXT_MAX];
	size_t n;
};

static void put(struct out *o, const char *s)
{
	size_t n = strlen(s);
	if (o->n + n < sizeof o->buf) {
		memcpy(o->buf + o->n, s, n + 1);
		o->n += n;
	} else {
		o->n = sizeof o->buf; /* too long: the caller skips the round trip */
	}
}

/* Percent-encode every byte but letters, digits, "-._~" and those in `keep`. */
static void put_enc(struct out *o, const char *s, const char *keep)
{
	char one[4];
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~", c) ||
		    strchr(keep, c))
			snprintf(one, sizeof one, "%c", c);
		else
			snprintf(one, sizeof one, "%%%02X", c);
		put(o, one);
	}
}

static void put_ms(struct out *o, const char *key, int64_t ms)
{
	char item[64];
	snprintf(item, sizeof item, "&%s=%lldms", key, (long long)ms);
	put(o, item);
}

static void write_uri(struct out *o, const dlock_uri *u)
{
	put(o, u->scheme);
	put(o, "://");
	if (u->user || u->password) {
		put_enc(o, u->user ? u->user : "", "");
		if (u->password) {
			put(o, ":");
			put_enc(o, u->password, "");
		}
		put(o, "@");
	}
	for (size_t i = 0; i < u->nhosts; i++) {
		char port[16];
		put(o, i ? "," : "");
		put_enc(o, u->hosts[i].host, "");
		snprintf(port, sizeof port, ":%d", u->hosts[i].port);
		put(o, u->hosts[i].port ? port : "");
	}
	put_enc(o, u->path, "/");
	put(o, "?renew=");
	put(o, u->renew ? "1" : "0");
	put(o, "&prefix=");
	put_enc(o, u->prefix, "");
	put_ms(o, "ttl", u->ttl_ms);
	put_ms(o, "open_timeout", u->connect_timeout_ms);
	put_ms(o, "io_timeout", u->io_timeout_ms);
	if (u->wait_ms == DLOCK_WAIT_FOREVER)
		put(o, "&wait=forever");
	else
		put_ms(o, "wait", u->wait_ms);
	for (size_t i = 0; i < u->nparams; i++) {
		put(o, "&");
		put_enc(o, u->params[i].key, "");
		put(o, "=");
		put_enc(o, u->params[i].value, "");
	}
}

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_round_trip(const dlock_uri *u)
{
	static struct out o;
	o.n = 0;
	o.buf[0] = '\0';
	write_uri(&o, u);
	if (o.n > URI_TEXT_MAX)
		return;
	dlock_uri *v = NULL;
	dlock_error err = { "" };
	FUZZ_CHECK(dlock_uri_parse(o.buf, &v, &err) == DLOCK_OK);
	FUZZ_CHECK(strcmp(u->scheme, v->scheme) == 0 && same_str(u->user, v->user));
	FUZZ_CHECK(same_str(u->password, v->password) && strcmp(u->path, v->path) == 0);
	FUZZ_CHECK(u->nhosts == v->nhosts && u->nparams == v->nparams);
	for (size_t i = 0; i < u->nhosts; i++)
		FUZZ_CHECK(strcmp(u->hosts[i].host, v->hosts[i].host) == 0 && u->hosts[i].port == v->hosts[i].port);
	for (size_t i = 0; i < u->nparams; i++)
		FUZZ_CHECK(same_str(u->params[i].value, dlock_uri_get(v, u->params[i].key)));
	FUZZ_CHECK(u->ttl_ms == v->ttl_ms && u->wait_ms == v->wait_ms && u->renew == v->renew);
	FUZZ_CHECK(u->connect_timeout_ms == v->connect_timeout_ms && u->io_timeout_ms == v->io_timeout_ms);
	FUZZ_CHECK(strcmp(u->prefix, v->prefix) == 0);
	dlock_uri_free(v);
}

/* ------------------------------------------------------------ clients */

/*
 * Open a client for schemes whose open has no side effect outside the
 * process: mem:// and schemes with no backend.  (file:// would create
 * directories, the network backends would connect.)
 */
static void check_open(const char *text, const char *scheme, const char *secret, size_t n)
{
	char list[256];
	snprintf(list, sizeof list, ",%s,", dlock_backends());
	char key[80];
	snprintf(key, sizeof key, ",%.70s,", scheme);
	if (strcmp(scheme, "mem") != 0 && strstr(list, key))
		return;
	dlock_client *c = NULL;
	char errbuf[1024] = "";
	dlock_status st = dlock_client_open(&c, text, NULL, errbuf, sizeof errbuf);
	FUZZ_CHECK(st == DLOCK_OK ? c != NULL && errbuf[0] == '\0' : c == NULL && errbuf[0] != '\0');
	FUZZ_CHECK(!secret || !fuzz_contains(errbuf, secret, n));
	if (c) {
		FUZZ_CHECK(!secret || !fuzz_contains(dlock_client_uri(c), secret, n));
		FUZZ_CHECK(dlock_client_close(c) == DLOCK_OK);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_cstr(data, size);
	size_t from = 0, to = 0;
	const char *secret = NULL;
	if (parser_password(text, &from, &to) && distinctive(text, from, to))
		secret = text + from;
	size_t n = to - from;

	check_mask(text);
	dlock_uri *u = (dlock_uri *)&u; /* not NULL: a failed parse must clear it */
	dlock_error err = { "" };
	dlock_status st = dlock_uri_parse(text, &u, &err);
	FUZZ_CHECK(st == DLOCK_OK || st == DLOCK_EURI || (st == DLOCK_EINVAL && text[0] == '\0'));
	FUZZ_CHECK(st == DLOCK_OK ? u != NULL && err.msg[0] == '\0' : u == NULL && err.msg[0] != '\0');
	FUZZ_CHECK(!secret || !fuzz_contains(err.msg, secret, n));
	if (u) {
		check_parsed(u, text);
		FUZZ_CHECK(!secret || !fuzz_contains(u->masked, secret, n));
		check_round_trip(u);
		check_open(text, u->scheme, secret, n);
		dlock_uri_free(u);
	}
	free(text);
	return 0;
}
