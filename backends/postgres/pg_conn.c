/*
 * From the core's parsed URI to a libpq connection.
 *
 * The URI's parts go to libpq as keyword/value pairs (never pasted into a
 * conninfo string): the host list "h1,h2" (libpq tries them in order), the
 * matching port list, dbname (the path without its '/'), user and
 * password.  Every other parameter that libpq knows (PQconndefaults:
 * sslmode, options, application_name, ...) passes through unchanged;
 * dlock's own `mode` and `table` are read by pg.c.  Unless the URI says
 * otherwise, dlock adds keepalives and tcp_user_timeout (from io_timeout),
 * connect_timeout (open_timeout in whole seconds, rounded up),
 * application_name (the client's owner, pg_owner.c: inspection reads it
 * back) and fallback_application_name=dlock.
 *
 * Connecting uses PQconnectStartParams and a poll loop, bounded by
 * open_timeout for each host of the list.  Errors the server sends while
 * connecting are only available as text, so the connection is asked for
 * verbose errors first: the text then carries the SQLSTATE (28P01 wrong
 * password, 3D000 no such database ...), which gives the status.  libpq
 * never puts the password in a message.
 *
 * Descriptors: libpq 15 sets FD_CLOEXEC on its socket right after
 * socket() (fcntl F_SETFD; later versions use SOCK_CLOEXEC).  The only
 * other socket is the short-lived one of PQcancel.
 */
#include <ctype.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_backend.h"

#define PG_MAX_KEYS 64

/* ------------------------------------------------------------ parameters */

/* Parameters the URI's structure carries: giving them as ?key= is an error. */
static int carried_by_uri(const char *key)
{
	static const char *const carried[] = { "host", "port", "user", "password", "dbname" };
	for (size_t i = 0; i < sizeof carried / sizeof carried[0]; i++)
		if (strcmp(key, carried[i]) == 0)
			return 1;
	return 0;
}

/* The URI parameters pg.c reads, which libpq never sees. */
static int dlock_param(const char *key)
{
	return strcmp(key, "mode") == 0 || strcmp(key, "table") == 0 || strcmp(key, "fencing_durability") == 0;
}

int dlock_pg_knows_param(const char *key)
{
	if (dlock_param(key))
		return 1;
	if (carried_by_uri(key))
		return 0;
	PQconninfoOption *opts = PQconndefaults();
	int known = 0;
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (strcmp(o->keyword, key) == 0)
			known = 1;
	PQconninfoFree(opts);
	return known;
}

/* Append "key=value" unless the URI gave the key itself. */
static void add(struct dlock_pg_params *p, const dlock_uri *uri, const char *key, const char *value)
{
	if (uri && dlock_uri_get(uri, key))
		return;
	p->keys[p->n] = key;
	p->values[p->n] = value;
	p->n++;
}

/* Write a number into the text arena; returns it. */
static const char *num(char **cursor, int64_t v)
{
	char *s = *cursor;
	*cursor += sprintf(s, "%lld", (long long)v) + 1;
	return s;
}

static int64_t seconds_up(int64_t ms)
{
	return ms <= 0 ? 1 : (ms + 999) / 1000;
}

/* "h1,h2" and "p1,p2" (an empty item: libpq's default port). */
static void host_lists(const dlock_uri *uri, char **cursor, const char **hosts, const char **ports)
{
	int any_host = 0, any_port = 0;
	char *h = *cursor;
	for (size_t i = 0; i < uri->nhosts; i++) {
		h += sprintf(h, "%s%s", i ? "," : "", uri->hosts[i].host);
		any_host |= uri->hosts[i].host[0] != '\0';
	}
	*h++ = '\0';
	char *pt = h;
	for (size_t i = 0; i < uri->nhosts; i++) {
		if (i)
			*pt++ = ',';
		if (uri->hosts[i].port)
			pt += sprintf(pt, "%d", uri->hosts[i].port);
		any_port |= uri->hosts[i].port != 0;
	}
	*pt++ = '\0';
	*hosts = any_host ? *cursor : NULL;
	*ports = any_port ? h : NULL;
	*cursor = pt;
}

dlock_status dlock_pg_params_build(const dlock_uri *uri, const char *app_name, struct dlock_pg_params *p,
                                   dlock_error *err)
{
	size_t textlen = 16 * 32 + DLOCK_PG_APP_NAME_SIZE;
	for (size_t i = 0; i < uri->nhosts; i++)
		textlen += strlen(uri->hosts[i].host) + 8;
	*p = (struct dlock_pg_params){ 0 };
	if (uri->nparams > PG_MAX_KEYS)
		return dlock_error_set(err, DLOCK_EURI, "too many parameters in %s", uri->masked);
	p->keys = calloc(PG_MAX_KEYS + 16, sizeof *p->keys);
	p->values = calloc(PG_MAX_KEYS + 16, sizeof *p->values);
	p->text = malloc(textlen);
	if (!p->keys || !p->values || !p->text) {
		dlock_pg_params_free(p);
		return dlock_error_set(err, DLOCK_ENOMEM, "out of memory");
	}
	char *cur = p->text;
	const char *hosts, *ports;
	host_lists(uri, &cur, &hosts, &ports);
	if (hosts)
		add(p, NULL, "host", hosts);
	if (ports)
		add(p, NULL, "port", ports);
	if (uri->path[0] && uri->path[1])
		add(p, NULL, "dbname", uri->path + 1);
	if (uri->user && uri->user[0])
		add(p, NULL, "user", uri->user);
	if (uri->password)
		add(p, NULL, "password", uri->password);
	for (size_t i = 0; i < uri->nparams; i++)
		if (!dlock_param(uri->params[i].key))
			add(p, NULL, uri->params[i].key, uri->params[i].value);
	int64_t io_s = seconds_up(uri->io_timeout_ms);
	add(p, uri, "connect_timeout", num(&cur, seconds_up(uri->connect_timeout_ms)));
	add(p, uri, "keepalives", "1");
	add(p, uri, "keepalives_idle", num(&cur, io_s));
	add(p, uri, "keepalives_interval", num(&cur, io_s));
	add(p, uri, "keepalives_count", "3");
	add(p, uri, "tcp_user_timeout", num(&cur, uri->io_timeout_ms));
	if (app_name && !dlock_uri_get(uri, "application_name")) {
		add(p, NULL, "application_name", cur); /* the owner of the session (pg_owner.c) */
		cur += snprintf(cur, DLOCK_PG_APP_NAME_SIZE, "%s", app_name) + 1;
	}
	add(p, uri, "fallback_application_name", "dlock");
	p->keys[p->n] = NULL;
	p->values[p->n] = NULL;
	return DLOCK_OK;
}

void dlock_pg_params_free(struct dlock_pg_params *p)
{
	free(p->keys);
	free(p->values);
	free(p->text);
	*p = (struct dlock_pg_params){ 0 };
}

/* ------------------------------------------------------------ errors */

/* The first SQLSTATE in a verbose libpq message ("FATAL:  28P01: ..."). */
static int find_sqlstate(const char *msg, char out[6])
{
	for (const char *s = strstr(msg, ":  "); s; s = strstr(s + 1, ":  ")) {
		const char *c = s + 3;
		int ok = 1;
		for (int i = 0; i < 5; i++)
			ok &= isdigit((unsigned char)c[i]) || isupper((unsigned char)c[i]);
		if (ok && c[5] == ':') {
			memcpy(out, c, 5);
			out[5] = '\0';
			return 1;
		}
	}
	return 0;
}

dlock_status dlock_pg_connect_failed(const struct dlock_pg_backend *b, PGconn *pg, dlock_error *err)
{
	const char *msg = pg ? PQerrorMessage(pg) : "out of memory";
	char sqlstate[6] = "", text[384];
	dlock_status st = DLOCK_ECONNECT;
	/* EAUTH also when the server wants a password and the URI has none, or when (sslmode=verify-ca,
	 * verify-full) the server did not prove who it is, as rediss:// says. */
	if (find_sqlstate(msg, sqlstate))
		st = dlock_pg_sqlstate_status(sqlstate);
	else if (strstr(msg, "fe_sendauth") || strstr(msg, "certificate verify failed") ||
	         strstr(msg, "does not match host name"))
		st = DLOCK_EAUTH;
	if (st == DLOCK_EBUSY || st == DLOCK_ECANCELED || st == DLOCK_ESERVER)
		st = DLOCK_ECONNECT;
	dlock_pg_one_line(msg, text, sizeof text);
	PQfinish(pg);
	return dlock_error_set(err, st, "%s: %s", b->masked, text);
}

/* ------------------------------------------------------------ connecting */

static void quiet_notices(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

static int wait_socket(PGconn *pg, PostgresPollingStatusType ps, int64_t deadline_ns)
{
	int64_t left = deadline_ns - dlock_monotonic_ns();
	if (left <= 0)
		return 0;
	struct pollfd pfd = { .fd = PQsocket(pg), .events = ps == PGRES_POLLING_READING ? POLLIN : POLLOUT };
	int ms = left / 1000000 > 60000 ? 60000 : (int)(left / 1000000) + 1;
	poll(&pfd, 1, ms); /* an error (EINTR) just means: ask libpq again */
	return 1;
}

PGconn *dlock_pg_connect_start(const struct dlock_pg_params *p)
{
	PGconn *pg = PQconnectStartParams(p->keys, p->values, 0);
	if (pg && PQstatus(pg) != CONNECTION_BAD) {
		PQsetErrorVerbosity(pg, PQERRORS_VERBOSE);
		PQsetNoticeProcessor(pg, quiet_notices, NULL);
	}
	return pg;
}

dlock_status dlock_pg_connected(const struct dlock_pg_backend *b, PGconn *pg, dlock_error *err)
{
	/* Advisory locks work on a hot standby but exclude nothing on the primary (they are not replicated):
	 * never hold one there.  PostgreSQL 14 and later report it at connect. */
	const char *standby = PQparameterStatus(pg, "in_hot_standby");
	if (standby && strcmp(standby, "on") == 0)
		return dlock_error_set(err, DLOCK_ECONNECT,
		                       "%s: the server is a hot standby: its locks would exclude nothing on the primary; "
		                       "give the primary, or list every host with target_session_attrs=read-write",
		                       b->masked);
	PQsetErrorVerbosity(pg, PQERRORS_DEFAULT);
	return DLOCK_OK;
}

size_t dlock_pg_params_hosts(const struct dlock_pg_params *p)
{
	size_t nhosts = 1;
	for (const char *const *k = p->keys; *k; k++)
		if (strcmp(*k, "host") == 0)
			for (const char *h = p->values[k - p->keys]; *h; h++)
				nhosts += *h == ',';
	return nhosts;
}

const char *dlock_pg_params_get(const struct dlock_pg_params *p, const char *key)
{
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->keys[i], key) == 0)
			return p->values[i];
	return NULL;
}

dlock_status dlock_pg_params_hostaddr(const struct dlock_pg_params *p, const char *addr, struct dlock_pg_params *out)
{
	*out = (struct dlock_pg_params){ 0 };
	out->keys = calloc(p->n + 2, sizeof *out->keys);
	out->values = calloc(p->n + 2, sizeof *out->values);
	out->text = addr ? strdup(addr) : NULL;
	if (!out->keys || !out->values || (addr && !out->text)) {
		dlock_pg_params_free(out);
		return DLOCK_ENOMEM;
	}
	memcpy(out->keys, p->keys, p->n * sizeof *p->keys);
	memcpy(out->values, p->values, p->n * sizeof *p->values);
	out->n = p->n;
	if (addr) {
		out->keys[out->n] = "hostaddr";
		out->values[out->n++] = out->text;
	}
	return DLOCK_OK;
}

dlock_status dlock_pg_connect(const struct dlock_pg_backend *b, PGconn **out, dlock_error *err)
{
	*out = NULL;
	size_t nhosts = dlock_pg_params_hosts(&b->params);
	int64_t deadline = dlock_monotonic_ns() + b->open_timeout_ms * 1000000 * (int64_t)nhosts;
	PGconn *pg = dlock_pg_connect_start(&b->params);
	if (!pg || PQstatus(pg) == CONNECTION_BAD)
		return dlock_pg_connect_failed(b, pg, err);
	PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
	while (ps != PGRES_POLLING_OK && ps != PGRES_POLLING_FAILED) {
		if (!wait_socket(pg, ps, deadline)) {
			PQfinish(pg);
			return dlock_error_set(err, DLOCK_ECONNECT, "%s: no connection within %lld ms", b->masked,
			                       (long long)(b->open_timeout_ms * (int64_t)nhosts));
		}
		ps = PQconnectPoll(pg);
	}
	if (ps == PGRES_POLLING_FAILED)
		return dlock_pg_connect_failed(b, pg, err);
	dlock_status st = dlock_pg_connected(b, pg, err);
	if (st == DLOCK_OK)
		*out = pg;
	else
		PQfinish(pg);
	return st;
}
