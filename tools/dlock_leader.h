/*
 * The dlock command's `leader` verb (dlock_leader.c): who leads the
 * election NAME, once or at each change (--watch).
 *
 * Threads: see dlock_leader.c (with --watch the library's observer thread
 * prints).  Errors: printed on stderr ("dlock: "), and told by the exit
 * status.
 */
#ifndef DLOCK_TOOLS_LEADER_H
#define DLOCK_TOOLS_LEADER_H

#include "dlock_run.h"
#include "dlock_verbs.h"

/**
 * `dlock leader` on the open client `c` (its caller closes it).  With
 * --watch, `sig` is the signalfd that ends the watch, opened before the
 * client so that the client's threads have the signals blocked; without,
 * it is not read.  Returns dlock's exit status.
 */
int cli_leader_run(const struct cli_verb_args *a, dlock_client *c, const struct cli_signals *sig);

#endif
