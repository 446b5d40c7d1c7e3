/*
 * zk:// URIs: zk://[user:password@]host[:port][,host[:port]...][/base/path][?session_timeout=D]
 *
 *   hosts        the ensemble; port 2181 when not given
 *   /base/path   where lock nodes live, created on demand (persistent
 *                nodes), not a chroot; without a path, "/" + the common
 *                `prefix` parameter ("/dlock" by default).  With a path,
 *                `prefix` is not used.
 *   user:password  digest authentication; every node dlock creates then
 *                gets an ACL that gives that identity, and only it, every
 *                permission
 *   session_timeout  requested session timeout; without it, the common
 *                `ttl` (default 30 s).  The server clamps it (by default
 *                to 2..20 tickTimes).  One session serves every lock of
 *                the client, so an acquire's lease_ms does not change it.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zookeeper_internal.h"

static int host_char_ok(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
	       ch == '-' || ch == '_' || ch == ':';
}

/* "host:port,..." for the client library; IPv6 addresses in brackets. */
static dlock_status build_hosts(const dlock_uri *uri, struct zk_config *cfg, dlock_error *err)
{
	size_t cap = 1;
	for (size_t i = 0; i < uri->nhosts; i++)
		cap += strlen(uri->hosts[i].host) + 16;
	cfg->hosts = malloc(cap);
	if (!cfg->hosts)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	size_t o = 0;
	for (size_t i = 0; i < uri->nhosts; i++) {
		const dlock_uri_host *h = &uri->hosts[i];
		if (!h->host[0])
			return dlock_error_set(err, DLOCK_EURI, "zk:// needs a host: %s", uri->masked);
		for (const char *p = h->host; *p; p++)
			if (!host_char_ok(*p))
				return dlock_error_set(err, DLOCK_EURI, "zk://: host %zu is not a host name or address: %s",
				                       i + 1, uri->masked);
		int v6 = strchr(h->host, ':') != NULL;
		o += (size_t)snprintf(cfg->hosts + o, cap - o, "%s%s%s%s:%d", i ? "," : "", v6 ? "[" : "", h->host,
		                      v6 ? "]" : "", h->port ? h->port : ZK_DEFAULT_PORT);
	}
	return DLOCK_OK;
}

/*
 * A base path: components of printable ASCII other than '/', none empty,
 * "." or "..", not under /zookeeper (the server's own tree).  Trailing
 * slashes are dropped; "" and "/" mean "no path".
 */
static int base_ok(const char *path)
{
	if (path[0] != '/' || strcmp(path, "/zookeeper") == 0 || strncmp(path, "/zookeeper/", 11) == 0)
		return 0;
	for (const char *p = path; *p;) {
		const char *start = ++p; /* after a '/' */
		while (*p && *p != '/') {
			if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
				return 0;
			p++;
		}
		size_t n = (size_t)(p - start);
		if (n == 0 || (n == 1 && start[0] == '.') || (n == 2 && start[0] == '.' && start[1] == '.'))
			return 0;
	}
	return 1;
}

static dlock_status build_base(const dlock_uri *uri, struct zk_config *cfg, dlock_error *err)
{
	size_t len = strlen(uri->path);
	while (len > 1 && uri->path[len - 1] == '/')
		len--;
	if (len <= 1) {
		char comp[DLOCK_COMPONENT_MAX + 1];
		dlock_name_component(uri->prefix, strlen(uri->prefix), comp);
		cfg->base = malloc(strlen(comp) + 2);
		if (cfg->base)
			snprintf(cfg->base, strlen(comp) + 2, "/%s", comp);
	} else {
		cfg->base = strndup(uri->path, len);
	}
	if (!cfg->base)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	if (!base_ok(cfg->base) || strlen(cfg->base) > ZK_PATH_MAX / 2)
		return dlock_error_set(err, DLOCK_EURI,
		                       "zk://: the base path must be /name[/name...] of printable ASCII, without "
		                       "'.' or '..' components, not under /zookeeper, at most %d bytes: %s",
		                       ZK_PATH_MAX / 2, uri->masked);
	return DLOCK_OK;
}

static dlock_status build_auth(const dlock_uri *uri, struct zk_config *cfg, dlock_error *err)
{
	if (!uri->user && !uri->password)
		return DLOCK_OK;
	const char *user = uri->user ? uri->user : "", *pass = uri->password ? uri->password : "";
	if (!user[0] || strchr(user, ':'))
		return dlock_error_set(err, DLOCK_EURI, "zk://: digest authentication needs a user name without ':': %s",
		                       uri->masked);
	size_t n = strlen(user) + strlen(pass) + 2;
	cfg->auth = malloc(n);
	if (!cfg->auth)
		return dlock_error_set(err, DLOCK_ENOMEM, "zk://: out of memory");
	snprintf(cfg->auth, n, "%s:%s", user, pass);
	cfg->password = pass[0] ? cfg->auth + strlen(user) + 1 : NULL;
	return DLOCK_OK;
}

static dlock_status build_timeout(const dlock_uri *uri, struct zk_config *cfg, dlock_error *err)
{
	const char *text = dlock_uri_get(uri, "session_timeout");
	int64_t ms = uri->ttl_ms;
	if (text && dlock_duration_parse(text, 1, &ms) != DLOCK_OK)
		return dlock_error_set(err, DLOCK_EURI, "zk://: session_timeout is not a duration: %s", uri->masked);
	if (ms <= 0 || ms > INT_MAX)
		return dlock_error_set(err, DLOCK_EURI, "zk://: the session timeout must be 1 ms to %d ms: %s",
		                       INT_MAX, uri->masked);
	cfg->session_timeout_ms = (int)ms;
	return DLOCK_OK;
}

dlock_status dlock_zk_config_parse(const dlock_uri *uri, struct zk_config *cfg, dlock_error *err)
{
	*cfg = (struct zk_config){ .connect_timeout_ms = uri->connect_timeout_ms, .masked = uri->masked };
	dlock_status st = build_hosts(uri, cfg, err);
	if (st == DLOCK_OK)
		st = build_base(uri, cfg, err);
	if (st == DLOCK_OK)
		st = build_auth(uri, cfg, err);
	if (st == DLOCK_OK)
		st = build_timeout(uri, cfg, err);
	if (st != DLOCK_OK)
		dlock_zk_config_free(cfg);
	return st;
}

void dlock_zk_config_free(struct zk_config *cfg)
{
	free(cfg->hosts);
	free(cfg->base);
	if (cfg->auth)
		explicit_bzero(cfg->auth, strlen(cfg->auth)); /* a secret: leave no copy in freed memory */
	free(cfg->auth);
	*cfg = (struct zk_config){ 0 };
}
