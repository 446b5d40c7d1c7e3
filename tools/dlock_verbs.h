/*
 * The dlock command's verbs: `dlock status NAME`, `dlock list [PREFIX]`,
 * `dlock break NAME`, `dlock gc [PREFIX]`, `dlock leader NAME` and
 * `dlock elect NAME -- COMMAND`.
 * dlock.c parses the command line, opens the client and hands it to the
 * verb, and runs elect's COMMAND as it runs a lock's; dlock_verbs.c asks
 * the library and prints the answer on stdout (text or --json, escaped by
 * dlock_out.c); dlock_leader.c answers `leader` (dlock_leader.h).
 *
 * Threads: the main thread only, but for `leader --watch` (see
 * cli_leader_run()).  Errors: printed on stderr ("dlock: "), and told by
 * the exit status (the table of dlock --help).
 */
#ifndef DLOCK_TOOLS_VERBS_H
#define DLOCK_TOOLS_VERBS_H

#include <dlock/dlock.h>

/* Exit statuses of the verbs besides the common table (see --help). */
#define CLI_EXIT_FREE 1 /* status: NAME is free; break: NAME was free; leader: nobody leads */

enum cli_verb {
	CLI_VERB_NONE = 0, /* run COMMAND under a lock */
	CLI_VERB_STATUS,
	CLI_VERB_LIST,
	CLI_VERB_BREAK,
	CLI_VERB_LEADER,
	CLI_VERB_GC,
	CLI_VERB_ELECT, /* runs COMMAND while leading: dlock.c, not cli_verb_run() */
};

/* A verb and what the command line gave it. */
struct cli_verb_args {
	enum cli_verb verb;
	int json;             /* --json */
	int quiet;            /* --quiet: nothing on stdout, the exit status only */
	int watch;            /* leader --watch: each change until interrupted */
	int dry_run;          /* gc --dry-run: remove nothing */
	const char *name;     /* NAME of status, break and leader; list's and gc's PREFIX (NULL: all) */
};

/** The verb named `word`, or CLI_VERB_NONE. */
enum cli_verb cli_verb_of(const char *word);
/** Static name of a verb ("status", ...). */
const char *cli_verb_name(enum cli_verb verb);

/** Run the verb status, list, break or gc on the open client `c` (its caller closes it): returns dlock's
 *  exit status. */
int cli_verb_run(const struct cli_verb_args *a, dlock_client *c);

/** Write a holder as a JSON object (status --json's "holders" items) to stdout. */
void cli_json_holder(const dlock_holder *h);

#endif
