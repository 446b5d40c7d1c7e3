/*
 * The dlock command's verbs: who holds a lock (status), which locks are
 * held (list), taking a lock from its holders (break), and removing what
 * unused names left on the server (gc).
 *
 * Everything here comes from the server and so from other processes:
 * names, resources, identities, hosts and sessions are printed through
 * dlock_out.c (escaped text, or JSON valid for any bytes), never as they
 * are.  Results go to stdout, messages to stderr.  A field that the
 * backend cannot see (DLOCK_FEATURE_INSPECT) is left out of the text and
 * is null in JSON.
 *
 * Threads: the main thread only; the library's threads do not call back
 * here (no lock is acquired).  Errors: printed on stderr, and told by the
 * exit status (CLI_EXIT_FREE, else the table of dlock --help).
 */
#include "dlock_verbs.h"

#include "dlock_out.h"
#include "dlock_run.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

/* Room for a name quoted in a message: 1,024 bytes escaped may be 4,096. */
#define QUOTED_MAX 256

static const char *const verb_names[] = {
	[CLI_VERB_STATUS] = "status",
	[CLI_VERB_LIST] = "list",
	[CLI_VERB_BREAK] = "break",
	[CLI_VERB_LEADER] = "leader",
	[CLI_VERB_GC] = "gc",
	[CLI_VERB_ELECT] = "elect",
};

enum cli_verb cli_verb_of(const char *word)
{
	for (size_t v = CLI_VERB_STATUS; v <= CLI_VERB_ELECT; v++)
		if (strcmp(word, verb_names[v]) == 0)
			return (enum cli_verb)v;
	return CLI_VERB_NONE;
}

const char *cli_verb_name(enum cli_verb verb)
{
	return verb >= CLI_VERB_STATUS && verb <= CLI_VERB_ELECT ? verb_names[verb] : "run";
}

static const char *kind_name(dlock_lock_kind k)
{
	switch (k) {
	case DLOCK_KIND_MUTEX:
		return "mutex";
	case DLOCK_KIND_RWLOCK:
		return "rwlock";
	case DLOCK_KIND_SEMAPHORE:
		return "semaphore";
	}
	return "unknown";
}

static const char *mode_name(dlock_lock_mode m)
{
	return m == DLOCK_MODE_SHARED ? "shared" : "exclusive";
}

/* The client's last message, escaped (it may quote a name). */
static const char *detail(dlock_client *c, dlock_status st, char *buf, size_t len)
{
	const char *msg = dlock_client_errmsg(c);

	return cli_text(buf, len, msg[0] != '\0' ? msg : dlock_strerror(st));
}

static int verb_failed(dlock_client *c, const char *verb, dlock_status st)
{
	char msg[512];

	cli_say("%s: %s: %s", verb, dlock_client_uri(c), detail(c, st, msg, sizeof msg));
	return cli_status_exit(st, EX_USAGE);
}

/* stdout is the answer: check that it got there. */
static int flush_out(int rc)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_say("cannot write to stdout: %s", strerror(errno));
		return EX_OSERR;
	}
	return rc;
}

/* ------------------------------------------------------------------ text */

static void text_field(const char *key, const char *value)
{
	if (value == NULL || value[0] == '\0')
		return; /* unknown */
	printf("  %s: ", key);
	cli_out_text(stdout, value);
	putchar('\n');
}

static void text_holder(const dlock_holder *h, size_t i)
{
	char when[40];

	printf("holder %zu:\n", i + 1);
	text_field("identity", h->identity);
	text_field("host", h->host);
	if (h->pid > 0)
		printf("  pid: %" PRId64 "\n", h->pid);
	if (h->acquired_ms >= 0)
		printf("  acquired: %s\n", cli_iso8601(when, sizeof when, h->acquired_ms));
	if (h->lease_left_ms >= 0)
		printf("  lease left: %" PRId64 ".%03ds\n", h->lease_left_ms / 1000, (int)(h->lease_left_ms % 1000));
	if (h->token > 0)
		printf("  token: %" PRIu64 "\n", h->token);
	printf("  mode: %s\n", mode_name(h->mode));
	if (h->slot >= 0)
		printf("  slot: %" PRId64 "\n", h->slot);
	text_field("session", h->session);
	text_field("value", h->value); /* a leader's (elect --value) */
}

static void text_status(const dlock_lock_info *info)
{
	fputs("name: ", stdout);
	cli_out_text(stdout, info->name ? info->name : "");
	putchar('\n');
	if (info->resource[0] != '\0') {
		fputs("resource: ", stdout);
		cli_out_text(stdout, info->resource);
		putchar('\n');
	}
	if (info->nholders == 0) {
		puts("held: no");
	} else {
		printf("held: yes, by %zu holder%s\n", info->nholders, info->nholders == 1 ? "" : "s");
		printf("kind: %s\n", kind_name(info->kind));
		if (info->kind == DLOCK_KIND_SEMAPHORE && info->permits > 0)
			printf("permits: %" PRIu32 "\n", info->permits);
	}
	if (info->waiters >= 0)
		printf("waiters: %" PRId64 "\n", info->waiters);
	for (size_t i = 0; i < info->nholders; i++)
		text_holder(info->holders[i], i);
}

/* One line of `dlock list`: NAME, RESOURCE, KIND, HOLDERS, IDENTITIES, tab-separated. */
static void text_line(const dlock_lock_info *info)
{
	cli_out_text(stdout, info->name ? info->name : "");
	putchar('\t');
	cli_out_text(stdout, info->resource);
	printf("\t%s\t%zu\t", kind_name(info->kind), info->nholders);
	for (size_t i = 0; i < info->nholders; i++) {
		const char *id = info->holders[i]->identity;

		if (i > 0)
			putchar(',');
		cli_out_text(stdout, id[0] ? id : "?");
	}
	putchar('\n');
}

/* ------------------------------------------------------------------ JSON */

static void json_int(const char *key, int64_t v, int known)
{
	if (known)
		printf(",\"%s\":%" PRId64, key, v);
	else
		printf(",\"%s\":null", key);
}

static void json_opt_string(const char *key, const char *s)
{
	putchar(',');
	cli_out_json_field(stdout, key, s[0] ? s : NULL);
}

void cli_json_holder(const dlock_holder *h)
{
	char when[40];

	putchar('{');
	cli_out_json_field(stdout, "identity", h->identity[0] ? h->identity : NULL);
	json_opt_string("host", h->host);
	json_int("pid", h->pid, h->pid > 0);
	json_int("acquired_ms", h->acquired_ms, h->acquired_ms >= 0);
	if (h->acquired_ms >= 0)
		printf(",\"acquired\":\"%s\"", cli_iso8601(when, sizeof when, h->acquired_ms));
	else
		fputs(",\"acquired\":null", stdout);
	json_int("lease_left_ms", h->lease_left_ms, h->lease_left_ms >= 0);
	if (h->token > 0)
		printf(",\"token\":%" PRIu64, h->token);
	else
		fputs(",\"token\":null", stdout);
	printf(",\"mode\":\"%s\"", mode_name(h->mode));
	json_int("slot", h->slot, h->slot >= 0);
	json_opt_string("session", h->session);
	json_opt_string("value", h->value != NULL ? h->value : "");
	putchar('}');
}

/* What inspection sees on the backend (DLOCK_FEATURE_INSPECT), as "sees":[...]. */
static void json_sees(dlock_client *c)
{
	static const struct {
		int flag;
		const char *name;
	} flags[] = {
		{DLOCK_INSPECT_HELD, "held"},       {DLOCK_INSPECT_OWNER, "owner"},
		{DLOCK_INSPECT_ACQUIRED, "acquired"}, {DLOCK_INSPECT_LEASE, "lease"},
		{DLOCK_INSPECT_TOKEN, "token"},     {DLOCK_INSPECT_WAITERS, "waiters"},
		{DLOCK_INSPECT_LIST, "list"},       {DLOCK_INSPECT_NAMES, "names"},
		{DLOCK_INSPECT_SESSION, "session"},
	};
	int64_t seen = 0;
	int first = 1;

	if (dlock_client_feature(c, DLOCK_FEATURE_INSPECT, &seen) != DLOCK_OK)
		seen = 0;
	fputs(",\"sees\":[", stdout);
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
		if ((seen & flags[i].flag) == 0)
			continue;
		printf("%s\"%s\"", first ? "" : ",", flags[i].name);
		first = 0;
	}
	putchar(']');
}

static void json_status(const dlock_lock_info *info, dlock_client *c)
{
	putchar('{');
	cli_out_json_field(stdout, "name", info->name);
	putchar(',');
	cli_out_json_field(stdout, "resource", info->resource);
	printf(",\"held\":%s,\"kind\":\"%s\"", info->nholders > 0 ? "true" : "false", kind_name(info->kind));
	json_int("permits", info->permits, info->permits > 0);
	json_int("waiters", info->waiters, info->waiters >= 0);
	if (c != NULL)
		json_sees(c);
	fputs(",\"holders\":[", stdout);
	for (size_t i = 0; i < info->nholders; i++) {
		if (i > 0)
			putchar(',');
		cli_json_holder(info->holders[i]);
	}
	fputs("]}", stdout);
}

/* ----------------------------------------------------------------- verbs */

static int run_status(dlock_client *c, const struct cli_verb_args *a)
{
	dlock_lock_info *info = NULL;
	dlock_status st = dlock_inspect(c, a->name, &info);
	int rc;

	if (st != DLOCK_OK)
		return verb_failed(c, "status", st);
	rc = info->nholders > 0 ? 0 : CLI_EXIT_FREE;
	if (a->quiet) {
		/* the exit status only */
	} else if (a->json) {
		json_status(info, c);
		putchar('\n');
	} else {
		text_status(info);
	}
	dlock_lock_info_free(info);
	return flush_out(rc);
}

static int run_list(dlock_client *c, const struct cli_verb_args *a)
{
	dlock_lock_list *list = NULL;
	dlock_status st = dlock_list(c, a->name, &list);

	if (st != DLOCK_OK)
		return verb_failed(c, "list", st);
	if (a->quiet) {
		/* the exit status only */
	} else if (a->json) {
		putchar('[');
		for (size_t i = 0; i < list->count; i++) {
			if (i > 0)
				fputs(",\n", stdout);
			json_status(list->items[i], NULL);
		}
		puts("]");
	} else {
		for (size_t i = 0; i < list->count; i++)
			text_line(list->items[i]);
	}
	dlock_lock_list_free(list);
	return flush_out(0);
}

static const char *break_meaning(dlock_break_effect e)
{
	switch (e) {
	case DLOCK_BREAK_DELETE:
		return "the lock was deleted on the server; each holder learns of it at its next renewal or event";
	case DLOCK_BREAK_SESSION:
		return "each holder's session was ended on the server, with every lock it held";
	case DLOCK_BREAK_NONE:
		break;
	}
	return "";
}

static int run_break(dlock_client *c, const struct cli_verb_args *a)
{
	int64_t effect = DLOCK_BREAK_NONE;
	size_t broken = 0;
	dlock_status st = dlock_break(c, a->name, &broken);
	char quoted[QUOTED_MAX];

	if (st != DLOCK_OK)
		return verb_failed(c, "break", st);
	if (dlock_client_feature(c, DLOCK_FEATURE_BREAK, &effect) != DLOCK_OK)
		effect = DLOCK_BREAK_NONE;
	if (a->quiet) {
		/* the exit status only */
	} else if (a->json) {
		putchar('{');
		cli_out_json_field(stdout, "name", a->name);
		printf(",\"broken\":%zu,\"effect\":\"%s\"}\n", broken,
		       dlock_break_effect_name((dlock_break_effect)effect));
	} else if (broken == 0) {
		printf("lock '%s' was free: nothing to break\n", cli_text(quoted, sizeof quoted, a->name));
	} else {
		printf("broke lock '%s': %zu holder%s removed (%s: %s)\n", cli_text(quoted, sizeof quoted, a->name),
		       broken, broken == 1 ? "" : "s", dlock_break_effect_name((dlock_break_effect)effect),
		       break_meaning((dlock_break_effect)effect));
	}
	return flush_out(broken > 0 ? 0 : CLI_EXIT_FREE);
}

/* One line per name collected: what, NAME (empty when the server keeps only a hash), RESOURCE. */
struct gc_out {
	const char *what;
	int quiet;
};

static void gc_line(const char *name, const char *resource, void *userdata)
{
	const struct gc_out *o = userdata;
	char qname[QUOTED_MAX], qres[QUOTED_MAX];
	if (!o->quiet)
		printf("%s\t%s\t%s\n", o->what, name ? cli_text(qname, sizeof qname, name) : "",
		       cli_text(qres, sizeof qres, resource));
}

static int run_gc(dlock_client *c, const struct cli_verb_args *a)
{
	struct gc_out o = { .what = a->dry_run ? "would remove" : "removed", .quiet = a->quiet };
	dlock_status st = dlock_gc(c, a->name, a->dry_run ? DLOCK_GC_DRY_RUN : 0, gc_line, &o, NULL);
	if (st != DLOCK_OK) {
		fflush(stdout); /* what was removed before the failure is printed */
		return verb_failed(c, "gc", st);
	}
	return flush_out(0);
}

int cli_verb_run(const struct cli_verb_args *a, dlock_client *c)
{
	int rc = EX_SOFTWARE;

	switch (a->verb) {
	case CLI_VERB_STATUS:
		rc = run_status(c, a);
		break;
	case CLI_VERB_LIST:
		rc = run_list(c, a);
		break;
	case CLI_VERB_BREAK:
		rc = run_break(c, a);
		break;
	case CLI_VERB_GC:
		rc = run_gc(c, a);
		break;
	case CLI_VERB_NONE:
	case CLI_VERB_LEADER:
	case CLI_VERB_ELECT:
		break;
	}
	return rc;
}
