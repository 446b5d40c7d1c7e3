/*
 * URI parsing: text -> dlock_uri.  The grammar and the rules are in uri.h.
 *
 * Every string of a parsed URI lives in one arena owned by the parse, so
 * dlock_uri_free() has four blocks to free whatever the URI held.  No
 * message written here quotes the authority (user, password, hosts, ports):
 * a password with an unescaped '/' or '?' spills into the host list, and a
 * message about "the port" would then print part of it.  Only a text with
 * a wrong scheme is shown, everything before its last '@' hidden.
 */
#include "uri.h"
#include "owner.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define URI_MAX 8192

/* The public struct comes first: the dlock_uri * handed out is this block. */
struct uri_store {
	dlock_uri pub;
	dlock_uri_host *hosts;
	dlock_uri_param *params;
	char *arena; /* every string of `pub`, NUL-terminated, back to back */
	size_t used, cap;
};

struct parser {
	struct uri_store *st;
	dlock_error *err;
	unsigned common_seen; /* one bit per common parameter already given */
};

/* --------------------------------------------------------------- masking */

/*
 * Find the password of `text` as [*from, *to).  The search is deliberately
 * wider than the grammar, because this also runs on malformed input whose
 * message must not leak: the userinfo is taken to end at the last '@'
 * before the query rather than before the path, so a password holding an
 * unescaped '/' (common in base64 secrets) is still hidden.  The cost is
 * that a valid URI with both ':' and '@' in its path is masked too much.
 */
static int find_password(const char *text, size_t *from, size_t *to)
{
	size_t qpos = strcspn(text, "?");
	const char *start = strstr(text, "://");
	start = (start && (size_t)(start - text) < qpos) ? start + 3 : text;
	const char *at = memrchr(start, '@', (size_t)(text + qpos - start));
	if (!at)
		return 0;
	const char *colon = memchr(start, ':', (size_t)(at - start));
	if (!colon)
		return 0;
	*from = (size_t)(colon + 1 - text);
	*to = (size_t)(at - text);
	return 1;
}

/* Append `n` bytes of `s` to `out` as far as they fit, keeping room for NUL. */
static void append_cut(char *out, size_t outlen, size_t *o, const char *s, size_t n)
{
	size_t room = outlen - 1 - *o;
	if (n > room)
		n = room;
	memcpy(out + *o, s, n);
	*o += n;
	out[*o] = '\0';
}

/* A query key that names a secret: "password", "sslpassword", ..., or a
 * private key's file: "tls_key", "sslkey" (its path says where a key lies). */
static int secret_key(const char *key, size_t n)
{
	static const char word[] = "password", tail[] = "key";
	for (size_t i = 0; i + sizeof word - 1 <= n; i++)
		if (strncasecmp(key + i, word, sizeof word - 1) == 0)
			return 1;
	return n >= sizeof tail - 1 && strncasecmp(key + n - (sizeof tail - 1), tail, sizeof tail - 1) == 0;
}

/* Copy the query part `q` (after '?') into out, with the values of secret
 * keys (libpq's sslpassword, a mistaken ?password=) replaced by "***". */
static void append_masked_query(char *out, size_t outlen, size_t *o, const char *q)
{
	while (*q) {
		size_t n = strcspn(q, "&");
		const char *eq = memchr(q, '=', n);
		if (eq && secret_key(q, (size_t)(eq - q))) {
			append_cut(out, outlen, o, q, (size_t)(eq - q) + 1);
			append_cut(out, outlen, o, "***", 3);
		} else {
			append_cut(out, outlen, o, q, n);
		}
		q += n;
		if (*q == '&')
			append_cut(out, outlen, o, q++, 1);
	}
}

void dlock_uri_mask(const char *text, char *out, size_t outlen)
{
	if (!out || outlen == 0)
		return;
	out[0] = '\0';
	if (!text)
		return;
	size_t o = 0, from = 0, to = 0;
	if (find_password(text, &from, &to)) {
		append_cut(out, outlen, &o, text, from);
		append_cut(out, outlen, &o, "***", 3);
	}
	const char *rest = text + to;
	const char *q = strchr(rest, '?');
	size_t head = q ? (size_t)(q - rest) + 1 : strlen(rest);
	append_cut(out, outlen, &o, rest, head);
	if (q)
		append_masked_query(out, outlen, &o, q + 1);
}

/* ----------------------------------------------------------- small parts */

static char *arena_take(struct uri_store *st, size_t n)
{
	if (n > st->cap - st->used)
		return NULL;
	char *p = st->arena + st->used;
	st->used += n;
	return p;
}

static dlock_status no_memory(struct parser *p)
{
	return dlock_error_set(p->err, DLOCK_ENOMEM, "out of memory while parsing the URI");
}

/*
 * Percent-decode [s, s+n) into the arena and store it in *out.  `what`
 * names the part in the message and must not contain its text.
 */
static dlock_status decode(struct parser *p, const char *s, size_t n, const char *what, const char **out)
{
	char *dst = arena_take(p->st, n + 1);
	if (!dst)
		return no_memory(p);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			dst[o++] = s[i];
			continue;
		}
		int hi = i + 2 < n ? dlock_hex_digit(s[i + 1]) : -1;
		int lo = i + 2 < n ? dlock_hex_digit(s[i + 2]) : -1;
		if (hi < 0 || lo < 0)
			return dlock_error_set(p->err, DLOCK_EURI,
			                       "bad percent escape in %s (expected '%%' and two hex digits)", what);
		if (hi == 0 && lo == 0)
			return dlock_error_set(p->err, DLOCK_EURI, "percent-encoded NUL (%%00) in %s", what);
		dst[o++] = (char)(hi << 4 | lo);
		i += 2;
	}
	dst[o] = '\0';
	*out = dst;
	return DLOCK_OK;
}

/* ---------------------------------------------------------------- scheme */

static int scheme_char(char c, int first)
{
	int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
	if (first)
		return alpha;
	return alpha || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
}

/*
 * The text of a URI whose scheme is wrong, for the message: it may be no
 * URI at all (an unset variable, a path), and the reader needs to see it.
 * The parser has not found the userinfo then, so whatever stands before
 * the last '@' is hidden, and the rest is masked (secret query values).
 */
static void shown_text(const char *text, char *out, size_t outlen)
{
	const char *at = strrchr(text, '@');
	if (!at) {
		dlock_uri_mask(text, out, outlen);
		return;
	}
	snprintf(out, outlen, "***");
	dlock_uri_mask(at, out + 3, outlen - 3);
}

/* Fail with `what` and the text shown as above. */
static dlock_status scheme_error(struct parser *p, const char *text, const char *what)
{
	char shown[200];
	shown_text(text, shown, sizeof shown);
	return dlock_error_set(p->err, DLOCK_EURI, "%s: '%s'", what, shown);
}

/* Parse and lower-case the scheme; *rest points after "://". */
static dlock_status parse_scheme(struct parser *p, const char *text, const char **rest)
{
	const char *sep = strstr(text, "://");
	if (!sep)
		return scheme_error(p, text, "URI has no \"://\" after the scheme");
	if (sep == text)
		return scheme_error(p, text, "URI has an empty scheme before \"://\"");
	size_t n = (size_t)(sep - text);
	char *scheme = arena_take(p->st, n + 1);
	if (!scheme)
		return no_memory(p);
	for (size_t i = 0; i < n; i++) {
		if (!scheme_char(text[i], i == 0))
			return scheme_error(p, text,
			                    "invalid URI scheme: it must be a letter followed by letters, digits, "
			                    "'+', '-' or '.'");
		char c = text[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		scheme[i] = c;
	}
	scheme[n] = '\0';
	p->st->pub.scheme = scheme;
	*rest = sep + 3;
	return DLOCK_OK;
}

/* -------------------------------------------------------------- userinfo */

/* [s, at) is "user[:password]"; ":password" alone gives user "". */
static dlock_status parse_userinfo(struct parser *p, const char *s, const char *at)
{
	dlock_uri *u = &p->st->pub;
	const char *colon = memchr(s, ':', (size_t)(at - s));
	const char *user_end = colon ? colon : at;
	dlock_status rc = decode(p, s, (size_t)(user_end - s), "the user name", &u->user);
	if (rc != DLOCK_OK || !colon)
		return rc;
	return decode(p, colon + 1, (size_t)(at - colon - 1), "the password", &u->password);
}

/* ----------------------------------------------------------------- hosts */

static dlock_status parse_port(struct parser *p, const char *s, const char *end, size_t idx, int *port)
{
	if (s == end)
		return dlock_error_set(p->err, DLOCK_EURI, "empty port after ':' in host %zu of the URI", idx);
	long v = 0;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9')
			return dlock_error_set(p->err, DLOCK_EURI, "port of host %zu in the URI is not a number",
			                       idx);
		/* Stop growing once out of range: the digits still get checked. */
		if (v <= 65535)
			v = v * 10 + (*s - '0');
	}
	if (v < 1 || v > 65535)
		return dlock_error_set(p->err, DLOCK_EURI, "port of host %zu in the URI is out of range 1..65535",
		                       idx);
	*port = (int)v;
	return DLOCK_OK;
}

/*
 * One "host[:port]" or "[v6]:port" item of the list, [s, end) with no ','.
 * `idx` counts from 1 for messages; `multi` when the list has several items.
 */
static dlock_status parse_host(struct parser *p, const char *s, const char *end, size_t idx, int multi,
                               dlock_uri_host *h)
{
	const char *host = s, *host_end, *after;
	if (s < end && *s == '[') {
		const char *close = memchr(s, ']', (size_t)(end - s));
		if (!close)
			return dlock_error_set(p->err, DLOCK_EURI, "unterminated '[' in host %zu of the URI", idx);
		host = s + 1;
		host_end = close;
		after = close + 1;
		if (host == host_end)
			return dlock_error_set(p->err, DLOCK_EURI, "empty IPv6 address in host %zu of the URI",
			                       idx);
		if (after < end && *after != ':')
			return dlock_error_set(p->err, DLOCK_EURI, "unexpected text after ']' in host %zu of the URI",
			                       idx);
	} else {
		const char *colon = memchr(s, ':', (size_t)(end - s));
		host_end = colon ? colon : end;
		after = host_end;
		if (host == host_end && multi)
			return dlock_error_set(p->err, DLOCK_EURI, "empty host %zu in the URI's host list", idx);
	}
	char what[32];
	snprintf(what, sizeof what, "host %zu", idx);
	dlock_status rc = decode(p, host, (size_t)(host_end - host), what, &h->host);
	if (rc != DLOCK_OK)
		return rc;
	h->port = 0;
	if (after < end)
		return parse_port(p, after + 1, end, idx, &h->port);
	return DLOCK_OK;
}

/* The comma-separated list [s, end); an empty list is one empty host. */
static dlock_status parse_hosts(struct parser *p, const char *s, const char *end)
{
	size_t max = 1;
	for (const char *c = s; c < end; c++)
		max += *c == ',';
	p->st->hosts = calloc(max, sizeof *p->st->hosts);
	if (!p->st->hosts)
		return no_memory(p);
	size_t n = 0;
	const char *item = s;
	for (;;) {
		const char *comma = memchr(item, ',', (size_t)(end - item));
		const char *item_end = comma ? comma : end;
		dlock_status rc = parse_host(p, item, item_end, n + 1, max > 1, &p->st->hosts[n]);
		if (rc != DLOCK_OK)
			return rc;
		n++;
		if (!comma)
			break;
		item = comma + 1;
	}
	p->st->pub.hosts = p->st->hosts;
	p->st->pub.nhosts = n;
	return DLOCK_OK;
}

/* ------------------------------------------------------------ parameters */

enum {
	P_TTL,
	P_WAIT,
	P_RENEW,
	P_FENCING,
	P_PREFIX,
	P_OPEN_TIMEOUT,
	P_IO_TIMEOUT,
	P_IDENTITY,
	P_MIN_HOLD,
	P_MAX_HOLD,
	P_COUNT
};

static const char *const common_keys[P_COUNT] = {
	[P_TTL] = "ttl",
	[P_WAIT] = "wait",
	[P_RENEW] = "renew",
	[P_FENCING] = "fencing",
	[P_PREFIX] = "prefix",
	[P_OPEN_TIMEOUT] = "open_timeout",
	[P_IO_TIMEOUT] = "io_timeout",
	[P_IDENTITY] = "identity",
	[P_MIN_HOLD] = "min_hold",
	[P_MAX_HOLD] = "max_hold",
};

static int common_index(const char *key)
{
	for (int i = 0; i < P_COUNT; i++)
		if (strcmp(key, common_keys[i]) == 0)
			return i;
	return -1;
}

static dlock_status value_error(dlock_error *err, const char *key, const char *value, const char *expected)
{
	return dlock_error_set(err, DLOCK_EURI, "bad value '%.64s' for URI parameter '%s': expected %s", value, key,
	                       expected);
}

static dlock_status bad_value(struct parser *p, const char *key, const char *value, const char *expected)
{
	return value_error(p->err, key, value, expected);
}

/* A duration that must be positive: a zero lease or timeout means nothing. */
static dlock_status set_positive_duration(struct parser *p, const char *key, const char *value, int64_t *out)
{
	int64_t ms;
	if (dlock_duration_parse(value, 1, &ms) != DLOCK_OK)
		return bad_value(p, key, value, "a duration such as 250ms, 10s, 2m or 1h");
	if (ms == 0)
		return dlock_error_set(p->err, DLOCK_EURI, "URI parameter '%s' must be more than 0", key);
	*out = ms;
	return DLOCK_OK;
}

/* 1 or 0 for the spellings of a boolean; -1 for anything else. */
static int parse_bool(const char *value)
{
	static const char *const yes[] = { "1", "true", "on", "yes" };
	static const char *const no[] = { "0", "false", "off", "no" };
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
		if (strcmp(value, yes[i]) == 0)
			return 1;
		if (strcmp(value, no[i]) == 0)
			return 0;
	}
	return -1;
}

#define BOOL_SPELLINGS "1, 0, true, false, on, off, yes or no"

static dlock_status set_bool(struct parser *p, const char *key, const char *value, int *out)
{
	int v = parse_bool(value);
	if (v < 0)
		return bad_value(p, key, value, BOOL_SPELLINGS);
	*out = v;
	return DLOCK_OK;
}

static dlock_status apply_common(struct parser *p, int idx, const char *key, const char *value)
{
	dlock_uri *u = &p->st->pub;
	switch (idx) {
	case P_TTL:
		return set_positive_duration(p, key, value, &u->ttl_ms);
	case P_WAIT:
		if (strcmp(value, "forever") == 0) {
			u->wait_ms = DLOCK_WAIT_FOREVER;
			return DLOCK_OK;
		}
		if (dlock_duration_parse(value, 1, &u->wait_ms) != DLOCK_OK)
			return bad_value(p, key, value, "\"forever\" or a duration such as 0, 250ms, 10s or 2m");
		return DLOCK_OK;
	case P_RENEW:
		return set_bool(p, key, value, &u->renew);
	case P_FENCING:
		return set_bool(p, key, value, &u->fencing);
	case P_PREFIX:
		/* An empty namespace is almost always an unset template variable. */
		if (value[0] == '\0')
			return bad_value(p, key, value, "a non-empty name");
		u->prefix = value;
		u->prefix_given = 1;
		return DLOCK_OK;
	case P_OPEN_TIMEOUT:
		return set_positive_duration(p, key, value, &u->connect_timeout_ms);
	case P_IDENTITY:
		if (dlock_identity_check(value, NULL) != DLOCK_OK)
			return bad_value(p, key, value, "1 to 128 bytes without control characters");
		u->identity = value;
		return DLOCK_OK;
	case P_MIN_HOLD:
	case P_MAX_HOLD:
		if (dlock_duration_parse(value, 1, idx == P_MIN_HOLD ? &u->min_hold_ms : &u->max_hold_ms) != DLOCK_OK)
			return bad_value(p, key, value, "a duration such as 0, 500ms, 10s or 2m");
		return DLOCK_OK;
	default:
		return set_positive_duration(p, key, value, &u->io_timeout_ms);
	}
}

static int param_seen(const struct parser *p, const char *key)
{
	const dlock_uri *u = &p->st->pub;
	for (size_t i = 0; i < u->nparams; i++)
		if (strcmp(u->params[i].key, key) == 0)
			return 1;
	return 0;
}

/* One "key[=value]" item, [s, end) with no '&'; `idx` counts from 1. */
static dlock_status parse_param(struct parser *p, const char *s, const char *end, size_t idx)
{
	const char *eq = memchr(s, '=', (size_t)(end - s));
	const char *key_end = eq ? eq : end;
	if (key_end == s)
		return dlock_error_set(p->err, DLOCK_EURI, "URI parameter %zu has an empty name", idx);
	const char *key, *value = "";
	dlock_status rc = decode(p, s, (size_t)(key_end - s), "a URI parameter name", &key);
	if (rc == DLOCK_OK && eq) {
		char what[96];
		snprintf(what, sizeof what, "the value of URI parameter '%.64s'", key);
		rc = decode(p, eq + 1, (size_t)(end - eq - 1), what, &value);
	}
	if (rc != DLOCK_OK)
		return rc;
	int common = common_index(key);
	int repeated = common >= 0 ? (int)((p->common_seen >> common) & 1u) : param_seen(p, key);
	if (repeated)
		return dlock_error_set(p->err, DLOCK_EURI, "URI parameter '%.64s' is given more than once", key);
	if (common >= 0) {
		p->common_seen |= 1u << common;
		return apply_common(p, common, key, value);
	}
	dlock_uri *u = &p->st->pub;
	p->st->params[u->nparams].key = key;
	p->st->params[u->nparams].value = value;
	u->nparams++;
	return DLOCK_OK;
}

/* The query after '?'; "" has no parameters. */
static dlock_status parse_query(struct parser *p, const char *s)
{
	if (*s == '\0')
		return DLOCK_OK;
	size_t max = 1;
	for (const char *c = s; *c; c++)
		max += *c == '&';
	p->st->params = calloc(max, sizeof *p->st->params);
	if (!p->st->params)
		return no_memory(p);
	p->st->pub.params = p->st->params;
	size_t idx = 1;
	for (const char *item = s;; idx++) {
		const char *amp = strchr(item, '&');
		const char *end = amp ? amp : item + strlen(item);
		dlock_status rc = parse_param(p, item, end, idx);
		if (rc != DLOCK_OK)
			return rc;
		if (!amp)
			break;
		item = amp + 1;
	}
	const dlock_uri *u = &p->st->pub;
	if (u->max_hold_ms > 0 && u->max_hold_ms < u->min_hold_ms)
		return dlock_error_set(p->err, DLOCK_EURI, "URI parameter 'max_hold' is less than 'min_hold'");
	return DLOCK_OK;
}

/* ------------------------------------------------------------------ URI */

static struct uri_store *store_new(size_t len)
{
	struct uri_store *st = calloc(1, sizeof *st);
	if (!st)
		return NULL;
	/*
	 * Decoded parts come from disjoint pieces of the text and each but the
	 * scheme follows a separator of its own, so together they need at most
	 * 2*len + 1 bytes with their NULs; the masked copy needs 2*len + 4.
	 */
	st->cap = 4 * len + 64;
	st->arena = malloc(st->cap);
	if (!st->arena) {
		free(st);
		return NULL;
	}
	dlock_uri *u = &st->pub;
	u->path = "";
	u->ttl_ms = 30000;
	u->wait_ms = DLOCK_WAIT_FOREVER;
	u->renew = 1;
	u->fencing = 1;
	u->prefix = "dlock";
	u->connect_timeout_ms = 5000;
	u->io_timeout_ms = 5000;
	return st;
}

/*
 * A user name or password holding an unescaped '/' or '?' ends the
 * authority early, so its '@' is found after it and the userinfo is read
 * as the host list.  The error then is about a host or a port, which
 * would puzzle anyone who only sees their password as the problem.
 */
static dlock_status hint_escapes(struct parser *p, dlock_status rc, const char *auth_end)
{
	if (rc != DLOCK_EURI || !p->err || !strchr(auth_end, '@'))
		return rc;
	char msg[DLOCK_ERROR_MAX];
	memcpy(msg, p->err->msg, sizeof msg);
	return dlock_error_set(p->err, rc,
	                       "%s (a '/', '?' or '@' in a user name or password must be written %%2F, %%3F "
	                       "or %%40)",
	                       msg);
}

/* Everything after "://": [userinfo@]hostlist[/path][?query]. */
static dlock_status parse_rest(struct parser *p, const char *rest)
{
	const char *auth_end = rest + strcspn(rest, "/?");
	const char *at = memrchr(rest, '@', (size_t)(auth_end - rest));
	const char *hosts = rest;
	dlock_status rc;
	if (at) {
		rc = parse_userinfo(p, rest, at);
		if (rc != DLOCK_OK)
			return rc;
		hosts = at + 1;
	}
	rc = parse_hosts(p, hosts, auth_end);
	if (rc != DLOCK_OK)
		return at ? rc : hint_escapes(p, rc, auth_end);
	const char *query = auth_end + strcspn(auth_end, "?");
	if (*auth_end == '/') {
		rc = decode(p, auth_end, (size_t)(query - auth_end), "the URI path", &p->st->pub.path);
		if (rc != DLOCK_OK)
			return rc;
	}
	return *query == '?' ? parse_query(p, query + 1) : DLOCK_OK;
}

/* Masking replaces the password and each secret query value by "***":
 * every replacement follows at least "password=" or ":", so the result is
 * shorter than 2 * len + 4. */
static dlock_status set_masked(struct parser *p, const char *text, size_t len)
{
	char *masked = arena_take(p->st, 2 * len + 4);
	if (!masked)
		return no_memory(p);
	dlock_uri_mask(text, masked, 2 * len + 4);
	p->st->pub.masked = masked;
	return DLOCK_OK;
}

dlock_status dlock_uri_parse(const char *text, dlock_uri **out, dlock_error *err)
{
	if (out)
		*out = NULL;
	if (!out)
		return dlock_error_set(err, DLOCK_EINVAL, "dlock_uri_parse: out must not be NULL");
	if (!text || !*text)
		return dlock_error_set(err, DLOCK_EINVAL, "no URI given");
	size_t len = strnlen(text, URI_MAX + 1);
	if (len > URI_MAX)
		return dlock_error_set(err, DLOCK_EURI, "URI is longer than %d bytes", URI_MAX);
	struct uri_store *st = store_new(len);
	if (!st)
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory while parsing the URI");
	struct parser p = { .st = st, .err = err, .common_seen = 0 };
	const char *rest = NULL;
	dlock_status rc = parse_scheme(&p, text, &rest);
	if (rc != DLOCK_OK)
		goto fail;
	rc = parse_rest(&p, rest);
	if (rc != DLOCK_OK)
		goto fail;
	rc = set_masked(&p, text, len);
	if (rc != DLOCK_OK)
		goto fail;
	*out = &st->pub;
	return DLOCK_OK;
fail:
	dlock_uri_free(&st->pub);
	return rc;
}

void dlock_uri_free(dlock_uri *uri)
{
	if (!uri)
		return;
	struct uri_store *st = (struct uri_store *)uri;
	free(st->hosts);
	free(st->params);
	free(st->arena);
	free(st);
}

const char *dlock_uri_get(const dlock_uri *uri, const char *key)
{
	if (!uri || !key)
		return NULL;
	for (size_t i = 0; i < uri->nparams; i++)
		if (strcmp(uri->params[i].key, key) == 0)
			return uri->params[i].value;
	return NULL;
}

dlock_status dlock_uri_get_bool(const dlock_uri *uri, const char *key, int *out, dlock_error *err)
{
	const char *value = dlock_uri_get(uri, key);
	if (!value)
		return DLOCK_OK;
	int v = parse_bool(value);
	if (v < 0)
		return value_error(err, key, value, BOOL_SPELLINGS);
	*out = v;
	return DLOCK_OK;
}
