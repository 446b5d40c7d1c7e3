/*
 * Conformance, in the URI suite (once, not per backend URI): what the
 * grammar of each scheme built into every build (mem://, file://) accepts
 * and refuses.  A refused URI is DLOCK_EURI with a message (naming what is
 * wrong where the table says), no client, never the password in the
 * message, and nothing made on disk; an accepted one opens.  mem:// and
 * file:// have no `prefix`: their namespace or directory is the namespace,
 * so they refuse it rather than ignore it.
 *
 * A URI of the table may hold "{dir}", replaced by a fresh empty directory
 * of the test's own, so that what an open leaves behind can be seen.
 */
#include "conformance.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEME_URI_MAX 4200

typedef struct scheme_case {
	const char *uri;    /* may hold "{dir}" */
	dlock_status want;  /* DLOCK_OK: opens */
	const char *says;   /* refused: the message holds this (NULL: any message) */
} scheme_case;

static const scheme_case scheme_cases[] = {
	/* mem://NAMESPACE, nothing else: no path, port, second host, user or parameter of its own. */
	{ "mem://", DLOCK_OK, NULL },
	{ "mem://t_uri", DLOCK_OK, NULL },
	{ "mem://t_uri?ttl=5s&wait=1s", DLOCK_OK, NULL },
	{ "mem://ns/path", DLOCK_EURI, NULL },
	{ "mem:///path", DLOCK_EURI, NULL },
	{ "mem://ns:5", DLOCK_EURI, NULL },
	{ "mem://a,b", DLOCK_EURI, NULL },
	{ "mem://user@ns", DLOCK_EURI, NULL },
	{ "mem://user:secret@ns", DLOCK_EURI, NULL },
	{ "mem://ns?foo=1", DLOCK_EURI, NULL },
	{ "mem://t_prefix?prefix=a", DLOCK_EURI, "prefix" },
	{ "mem://?prefix=dlock", DLOCK_EURI, "prefix" },
	{ "mem://t_prefix?ttl=5s&prefix=b", DLOCK_EURI, "prefix" },
	{ "mem://t_prefix?ttl=5s", DLOCK_OK, NULL },
	/* file:///ABSOLUTE/DIR: no host, port, user or parameter of its own; the usual mistake is told what to write. */
	{ "file://relative/dir", DLOCK_EURI, "file:///" },
	{ "file://", DLOCK_EURI, NULL },
	{ "file://host/tmp/x", DLOCK_EURI, NULL },
	{ "file:///tmp/x?foo=1", DLOCK_EURI, NULL },
	{ "file://a,b/tmp/x", DLOCK_EURI, NULL },
	{ "file://user@/tmp/x", DLOCK_EURI, NULL },
	{ "file://user:secret@/tmp/x", DLOCK_EURI, NULL },
	{ "file://localhost:5/tmp/x", DLOCK_EURI, NULL },
	{ "file://{dir}/x?prefix=a", DLOCK_EURI, "prefix" },
	{ "file://{dir}/x?ttl=5s&prefix=dlock", DLOCK_EURI, "prefix" }, /* even the default's own value */
	{ "file://{dir}/x?ttl=5s", DLOCK_OK, NULL },
};

/* `uri` with "{dir}" replaced by `dir`. */
static void expand(char *out, size_t len, const char *uri, const char *dir)
{
	const char *at = strstr(uri, "{dir}");
	if (at)
		snprintf(out, len, "%.*s%s%s", (int)(at - uri), uri, dir, at + strlen("{dir}"));
	else
		snprintf(out, len, "%s", uri);
}

/* 1 when `dir` has no entry. */
static int dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	int empty = d != NULL;
	for (struct dirent *e; d && (e = readdir(d)) != NULL;)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			empty = 0;
	if (d)
		closedir(d);
	return empty;
}

static void check_case(const scheme_case *k)
{
	char *dir = dlock_test_mkdtemp();
	char uri[SCHEME_URI_MAX], err[512] = "";
	expand(uri, sizeof uri, k->uri, dir);
	dlock_client *client = (dlock_client *)&client;
	dlock_status st = dlock_client_open(&client, uri, NULL, err, sizeof err);
	if (st != k->want)
		printf("\n    \"%s\": %s (%s), expected %s", k->uri, dlock_status_name(st), err,
		       dlock_status_name(k->want));
	CONF_ASSERT_ST(st, k->want);
	if (st == DLOCK_OK) {
		conf_close(client);
	} else {
		CU_ASSERT_PTR_NULL(client);
		CU_ASSERT(err[0] != '\0');
		CU_ASSERT(strstr(err, "secret") == NULL);
		if (k->says && !strstr(err, k->says))
			printf("\n    \"%s\": the message does not say \"%s\": %s", k->uri, k->says, err);
		CU_ASSERT(!k->says || strstr(err, k->says) != NULL);
		if (!dir_empty(dir))
			printf("\n    \"%s\" was refused but made something in its directory", k->uri);
		CU_ASSERT(dir_empty(dir));
	}
	dlock_test_rmtree(dir);
	free(dir);
}

static void test_uri_scheme_grammar(void)
{
	for (size_t i = 0; i < sizeof scheme_cases / sizeof scheme_cases[0]; i++)
		check_case(&scheme_cases[i]);
}

const conf_test conf_scheme_tests[] = {
	{ "uri_scheme_grammar", test_uri_scheme_grammar },
	{ NULL, NULL },
};
