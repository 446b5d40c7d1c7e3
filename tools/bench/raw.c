/*
 * Finding the raw client of a URI, and the little URI parsing that raw
 * clients need (they talk to the server directly, without dlock's parser).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int scheme_is(const char *uri, const char *scheme)
{
	size_t n = strlen(scheme);
	return strncmp(uri, scheme, n) == 0 && strncmp(uri + n, "://", 3) == 0;
}

/* The authority: after "://", up to the path or the query. */
static const char *authority(const char *uri, size_t *len)
{
	const char *a = strstr(uri, "://");
	if (!a)
		return NULL;
	a += 3;
	*len = strcspn(a, "/?#");
	return a;
}

const struct bench_raw *bench_raw_find(const char *uri)
{
	size_t len;
	const char *a = authority(uri, &len);
	if (!a)
		return NULL;
	int many = memchr(a, ',', len) != NULL;
	for (int i = 0; bench_raw_table[i]; i++) {
		const struct bench_raw *raw = bench_raw_table[i];
		for (int k = 0; raw->schemes[k]; k++)
			if (scheme_is(uri, raw->schemes[k]))
				/* Several hosts: the seeds of a cluster, or RedLock, an ensemble, failover hosts. */
				return !many || (raw->host_list && scheme_is(uri, raw->host_list)) ? raw : NULL;
	}
	return NULL;
}

int bench_uri_host(const char *uri, char *host, size_t hostlen, int *port, int default_port)
{
	size_t len;
	const char *a = authority(uri, &len);
	if (!a)
		return -1;
	const char *at = memchr(a, '@', len); /* skip user:password@ */
	if (at) {
		len -= (size_t)(at + 1 - a);
		a = at + 1;
	}
	const char *colon = memchr(a, ':', len);
	size_t hl = colon ? (size_t)(colon - a) : len;
	if (hl == 0 || hl >= hostlen)
		return -1;
	memcpy(host, a, hl);
	host[hl] = '\0';
	*port = colon ? atoi(colon + 1) : default_port;
	return *port > 0 ? 0 : -1;
}

int bench_uri_param(const char *uri, const char *key, char *out, size_t outlen)
{
	const char *q = strchr(uri, '?');
	size_t klen = strlen(key);
	while (q) {
		q++;
		if (strncmp(q, key, klen) == 0 && q[klen] == '=') {
			size_t vl = strcspn(q + klen + 1, "&#");
			if (vl >= outlen)
				return -1;
			memcpy(out, q + klen + 1, vl);
			out[vl] = '\0';
			return 0;
		}
		q = strchr(q, '&');
	}
	return -1;
}
