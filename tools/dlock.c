/*
 * dlock(1) — run a command while holding a distributed lock.
 *
 *   dlock [OPTION]... NAME -- COMMAND [ARG]...
 *   dlock elect [OPTION]... NAME -- COMMAND [ARG]...
 *   dlock status|list|break|leader [OPTION]... [NAME]
 *
 * Acquires NAME through the public API (the URI picks the backend), keeps
 * it renewed while COMMAND runs and releases it when COMMAND ends (not
 * before --min-hold).  `elect` is the same run with the election NAME:
 * campaigning acquires it and proclaims --value, resigning releases it.  stdout belongs to COMMAND: dlock writes only to
 * stderr, except for the --help and --version output that the user asked
 * for, and the answers of the verbs.  This file reads the command line,
 * decides what to lock and how to exit, and opens the client; dlock_run.c
 * runs and supervises COMMAND, dlock_verbs.c and dlock_leader.c answer the
 * verbs, dlock_out.c writes what dlock says.
 */
#include "dlock_leader.h"
#include "dlock_out.h"
#include "dlock_run.h"
#include "dlock_verbs.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#define DEFAULT_GRACE_MS 10000
#define FENCING_VAR "DLOCK_FENCING_TOKEN"
#define SLOT_VAR "DLOCK_PERMIT_SLOT"
#define TERM_VAR "DLOCK_LEADER_TERM"

extern char **environ;

/* The command line. */
struct cli {
	const char *uri;   /* --uri; NULL: $DLOCK_URI or the default */
	const char *identity; /* --identity; NULL: the URI's */
	int64_t wait_ms;   /* DLOCK_WAIT_DEFAULT unless --wait or --no-wait */
	int64_t ttl_ms;    /* 0: the URI's ttl, else the library's 30s */
	int64_t grace_ms;
	int conflict_code;
	int quiet;
	int rw;             /* --shared or --exclusive: NAME is a read-write lock */
	int shared;         /* --shared: a reader of it */
	uint32_t limit;     /* --limit N: NAME is a semaphore of N permits; 0: not one */
	int64_t min_hold_ms; /* --min-hold; -1: the URI's min_hold */
	int64_t max_hold_ms; /* --max-hold; -1: the URI's max_hold */
	int json;           /* --json (verbs) */
	const char *value;  /* --value (elect): what the leader proclaims; NULL: none */
	int watch;          /* --watch (leader) */
	int dry_run;        /* --dry-run (gc) */
	const char *run_only; /* the first option seen that only running COMMAND takes */
	const char *lock_only; /* the first option seen that only a lock takes, not an election */
	enum cli_verb verb; /* a verb, or CLI_VERB_NONE */
	int wait_given;     /* --wait seen */
	int no_wait;        /* --no-wait seen */
	int dashdash_taken; /* getopt took a "--" as the end of the options */
	const char *name;
	char **command;    /* NULL-terminated, from argv */
};

/* One run: the lock and what its lost-lock callback reports to. */
struct session {
	const struct cli *cli;
	struct cli_signals sig;
	struct cli_lost lost;
	dlock_client *client;
	dlock_lock *lock;
	dlock_election *election; /* elect: owns `lock`, the mutex behind it */
	int lost_reported;
	int64_t acquired_at; /* monotonic ms just after the acquisition */
	char token_var[sizeof FENCING_VAR "=18446744073709551615"];
	char slot_var[sizeof SLOT_VAR "=4294967295"];
	char term_var[sizeof TERM_VAR "=18446744073709551615"];
};

static void log_library(void *userdata, dlock_log_level level, const char *msg)
{
	(void)userdata;
	cli_say("%s%s", level == DLOCK_LOG_ERROR ? "error: " : level == DLOCK_LOG_WARN ? "warning: " : "",
	        msg);
}

/* --------------------------------------------------------------- help */

static const char help_text[] =
	"Usage: dlock [OPTION]... NAME -- COMMAND [ARG]...\n"
	"  or:  dlock status [OPTION]... NAME\n"
	"  or:  dlock list [OPTION]... [NAME-PREFIX]\n"
	"  or:  dlock break [OPTION]... NAME\n"
	"  or:  dlock gc [--dry-run] [OPTION]... [NAME-PREFIX]\n"
	"  or:  dlock leader [OPTION]... NAME\n"
	"  or:  dlock elect [OPTION]... NAME -- COMMAND [ARG]...\n"
	"Run COMMAND while holding the distributed lock NAME, keep the lock renewed\n"
	"while COMMAND runs, and release it when COMMAND ends.  COMMAND runs in its\n"
	"own process group.  dlock writes nothing on stdout; its messages go to\n"
	"stderr, prefixed \"dlock: \".\n"
	"\n"
	"Verbs (a first operand that is a verb is the verb, unless the next argument\n"
	"is '--': 'dlock status -- make' runs make under the lock named status):\n"
	"  status NAME       who holds NAME: name, resource (where the server keeps\n"
	"                    it), kind, waiters, and each holder's identity, host,\n"
	"                    pid, acquired (UTC, server's clock), lease left, token,\n"
	"                    mode, slot, session and a leader's value, as far as the\n"
	"                    backend can see them (unknown fields are left out);\n"
	"                    exit 0 when NAME is held, 1 when it is free\n"
	"  list [NAME-PREFIX]\n"
	"                    the held locks whose names start with NAME-PREFIX (all\n"
	"                    without it), one line each: NAME, RESOURCE, KIND,\n"
	"                    HOLDERS, IDENTITIES, separated by tabs (NAME empty\n"
	"                    where the server does not keep names); exit 0\n"
	"  break NAME        take NAME from every holder (an administrator's act):\n"
	"                    the backend deletes the lock (its holders learn of it\n"
	"                    at their next renewal) or ends each holder's session\n"
	"                    (every lock of that session goes); says which, and how\n"
	"                    many holders were removed; exit 0 when some were, 1 when\n"
	"                    NAME was free\n"
	"  gc [NAME-PREFIX]  remove what the names that start with NAME-PREFIX (all\n"
	"                    without it) left on the server while nobody holds or\n"
	"                    waits for them (lock files, rows), never what a holder\n"
	"                    uses nor what keeps fencing tokens from going back: one\n"
	"                    line per name, \"removed\", NAME and RESOURCE separated\n"
	"                    by tabs; exit 0.  With --dry-run remove nothing and say\n"
	"                    \"would remove\" instead\n"
	"  leader NAME       who leads the election NAME: one line of TERM, VALUE and\n"
	"                    IDENTITY separated by tabs, \"none\" when nobody leads;\n"
	"                    exit 0 when someone leads, 1 when nobody does; with\n"
	"                    --watch, one line at each change (a new term, a new\n"
	"                    value, nobody leading) until SIGINT or SIGTERM (exit 0)\n"
	"  elect NAME -- COMMAND [ARG]...\n"
	"                    campaign in the election NAME: wait to lead (as for a\n"
	"                    lock: --wait, --no-wait, --ttl), proclaim the --value,\n"
	"                    run COMMAND while leading and resign when it ends; exit\n"
	"                    statuses as for a lock (75: -n found a leader; 76: the\n"
	"                    leadership was lost and COMMAND stopped)\n"
	"  Their answer goes to stdout.  Names, values, identities, hosts and\n"
	"  sessions are untrusted: in text every byte outside printable ASCII, and the\n"
	"  backslash, is written \\xNN (\\\\).  A backend without inspection or\n"
	"  breaking exits 78, and so does one without elections for leader and elect,\n"
	"  and one with nothing to collect for gc.\n"
	"\n"
	"Options:\n"
	"      --uri URI          lock service (default: see Default URI below)\n"
	"      --identity ID      who this dlock is, as status and list show its locks\n"
	"                         to others: 1 to 128 bytes, no control byte, no\n"
	"                         secret (default: the URI's identity, else HOST:PID)\n"
	"  -w, --wait T           give up when the lock is not acquired within T\n"
	"                         (default: the URI's wait parameter, else forever)\n"
	"  -n, --no-wait          give up at once when the lock is held elsewhere\n"
	"                         (same as --wait 0; not with --wait)\n"
	"      --ttl T            lease of the lock, renewed while COMMAND runs; if\n"
	"                         dlock vanishes, others get the lock after at most T\n"
	"                         (default: the URI's ttl parameter, else 30s)\n"
	"  -E, --conflict-exit-code N\n"
	"                         exit status when the lock is held elsewhere or the\n"
	"                         wait expires, 0..255 (default 75)\n"
	"      --grace T          when the lock is lost, time between SIGTERM and\n"
	"                         SIGKILL to COMMAND's process group (default 10s)\n"
	"  -s, --shared           take NAME as a reader of a read-write lock: any\n"
	"                         number of readers at once, but no writer (as\n"
	"                         flock -s); the writers use --exclusive\n"
	"  -x, --exclusive        take NAME as the writer of a read-write lock: alone,\n"
	"                         no reader (as flock -x).  Without -s or -x, NAME\n"
	"                         is a plain lock, another kind: a name is used with\n"
	"                         -s/-x or without them, not both\n"
	"  -l, --limit N          take NAME as a semaphore of N permits: at most N\n"
	"                         holders at once (as consul lock -n); every user of\n"
	"                         NAME gives the same N (another N is refused while\n"
	"                         NAME is in use).  Not with -s or -x\n"
	"      --min-hold T       keep NAME held at least T after the acquisition,\n"
	"                         even when COMMAND ends sooner (dlock stays until\n"
	"                         then; a signal ends the wait, exit 128+N)\n"
	"                         (default: the URI's min_hold, else none)\n"
	"      --max-hold T       hold NAME at most T: then the lock is released and\n"
	"                         counts as lost, COMMAND is stopped and dlock exits\n"
	"                         76; at least --min-hold (default: the URI's\n"
	"                         max_hold, else none)\n"
	"      --value V          elect: what the leader proclaims, for leader and\n"
	"                         status to show (its address, say): at most 1024\n"
	"                         bytes (default: none)\n"
	"      --watch            leader: print who leads at each change, until\n"
	"                         interrupted\n"
	"      --dry-run          gc: remove nothing, print what would be removed\n"
	"      --json             status, list, break and leader: print one JSON object\n"
	"                         (list: an array; leader --watch: one a line), valid\n"
	"                         whatever the bytes: a string that\n"
	"                         is not valid UTF-8 has U+FFFD for each bad byte, and\n"
	"                         a KEY_hex field beside it with its exact bytes;\n"
	"                         status adds \"sees\": what the backend can see\n"
	"  -q, --quiet            do not report a busy lock or an expired wait, nor\n"
	"                         the library's warnings (errors are still shown);\n"
	"                         with a verb, print nothing: the exit status only\n"
	"  -h, --help             show this help and exit\n"
	"  -V, --version          show the version and the backends, and exit\n"
	"\n"
	"Durations T are a number with a unit ms, s, m or h: 250ms, 1.5s, 10s, 2m.  A\n"
	"bare number is seconds, as in flock(1); in URI parameters it is milliseconds.\n"
	"Fractions are rounded up to a whole millisecond.\n"
	"\n"
	"URIs:\n"
	"  mem://NAMESPACE         in-process locks: every dlock process has its own,\n"
	"                          so they exclude nothing (for tests)\n"
	"  file:///DIR             lock files in DIR (created if missing), for the\n"
	"                          processes of one host\n"
	"  redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]\n"
	"                          Redis; several comma-separated hosts: RedLock\n"
	"  rediss://...            the same over TLS (?tls_ca_file=PATH, tls_cert/tls_key\n"
	"                          for a client certificate)\n"
	"  redis+sentinel://[[USER]:PASSWORD@]SENTINEL[:PORT][,...]/MASTER_NAME\n"
	"                          the master that Redis Sentinel names (?sentinel_password=\n"
	"                          for the sentinels); rediss+sentinel:// over TLS\n"
	"  redis+cluster://[[USER]:PASSWORD@]SEED[:PORT][,...]\n"
	"                          a Redis Cluster: each lock on its slot's master;\n"
	"                          rediss+cluster:// over TLS\n"
	"  redis+unix:///PATH/TO/SOCKET\n"
	"                          Redis over a Unix socket\n"
	"  zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT]...[/PATH]\n"
	"                          ZooKeeper ensemble\n"
	"  postgres://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]].../DATABASE\n"
	"                          PostgreSQL (postgresql:// is the same)\n"
	"  Parameters go after '?', e.g. ?ttl=10s&wait=1m; those of every backend are\n"
	"  ttl, wait, renew, fencing, prefix, open_timeout, io_timeout, identity,\n"
	"  min_hold and max_hold.  Messages show passwords as ***.  Backends in this\n"
	"  build: %s\n"
	"\n"
	"Default URI: $DLOCK_URI when set and not empty, else\n"
	"file://$XDG_RUNTIME_DIR/dlock, else (XDG_RUNTIME_DIR unset, empty or not\n"
	"absolute, as under cron) file:///tmp/dlock-UID, UID being the user id.\n"
	"\n"
	"Environment:\n"
	"  DLOCK_URI            the default URI (--uri overrides it)\n"
	"  XDG_RUNTIME_DIR      parent of the default lock directory\n"
	"  DLOCK_FENCING_TOKEN  set for COMMAND: the fencing token of this\n"
	"                       acquisition, a decimal number that grows with each\n"
	"                       new holder of NAME; removed from COMMAND's\n"
	"                       environment when the backend has no fencing tokens\n"
	"  DLOCK_PERMIT_SLOT    set for COMMAND with --limit: the permit's slot,\n"
	"                       0..N-1, held by no other live permit of NAME (with\n"
	"                       the token, storage can refuse a permit that is gone);\n"
	"                       removed when the backend's permits have no slot\n"
	"  DLOCK_LEADER_TERM    set for COMMAND by elect: the term of this\n"
	"                       leadership, the acquisition's fencing token (also\n"
	"                       in DLOCK_FENCING_TOKEN): no two leaders share one\n"
	"\n"
	"Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to dlock are passed on to\n"
	"COMMAND's process group.  If dlock dies, COMMAND is killed (SIGKILL).  If the\n"
	"lock is lost while COMMAND runs, COMMAND's process group gets SIGTERM, then\n"
	"SIGKILL after the --grace time.  dlock waits for COMMAND itself, not for\n"
	"processes that COMMAND leaves running in the background.\n"
	"\n"
	"Exit status:\n"
	"  N      COMMAND's exit status\n"
	"  128+N  COMMAND was killed by signal N, or dlock got signal N before\n"
	"         COMMAND started or while it kept the lock for --min-hold\n"
	"  0, 1   status: 0 held, 1 free; break: 0 holders removed, 1 NAME was free;\n"
	"         list, gc: 0; leader: 0 someone leads, 1 nobody does (--watch: 0 when\n"
	"         ended by SIGINT or SIGTERM)\n"
	"  64     usage error (EX_USAGE), also NAME in use as another kind of lock\n"
	"         (with -s/-x while others use it without, or the reverse; with\n"
	"         --limit N while others use another N or no --limit)\n"
	"  69     lock service unreachable, authentication failed, server error, or it\n"
	"         can hold no more locks (EX_UNAVAILABLE)\n"
	"  71     system error: cannot fork, out of memory, I/O error (EX_OSERR)\n"
	"  75     lock held elsewhere, or a leader elsewhere (--no-wait), or wait\n"
	"         expired (EX_TEMPFAIL; changed by --conflict-exit-code)\n"
	"  76     the lock or the leadership was lost while COMMAND ran, or held\n"
	"         for --max-hold; COMMAND was stopped (EX_PROTOCOL)\n"
	"  77     permission denied by the lock service, or a lock directory that\n"
	"         may not be written (EX_NOPERM)\n"
	"  78     bad URI, unknown or refused backend, missing database, lock\n"
	"         directory missing and not creatable or not a directory, a\n"
	"         backend without read-write locks for -s/-x, or without\n"
	"         inspection, breaking, elections or collection for a verb\n"
	"         (EX_CONFIG)\n"
	"  126    COMMAND cannot be executed\n"
	"  127    COMMAND not found\n";

/* Help and version are the only output on stdout: check that it got there. */
static int flush_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		cli_say("cannot write to stdout: %s", strerror(errno));
		return EX_OSERR;
	}
	return 0;
}

static int print_help(void)
{
	printf(help_text, dlock_backends());
	return flush_stdout();
}

static int print_version(void)
{
	const char *scheme, *reason;

	printf("dlock %s\nbackends: %s\n", dlock_version(), dlock_backends());
	/* A built-in driver that the library refused (built for another ABI). */
	for (size_t i = 0; dlock_backend_refused(i, &scheme, &reason) == DLOCK_OK; i++)
		printf("refused: %s (%s)\n", scheme, reason);
	return flush_stdout();
}

/* ------------------------------------------------------------ options */

enum { OPT_URI = 256, OPT_TTL, OPT_GRACE, OPT_IDENTITY, OPT_MIN_HOLD, OPT_MAX_HOLD, OPT_JSON, OPT_VALUE, OPT_WATCH,
       OPT_DRY_RUN };

static const char short_options[] = "+:w:nE:sxl:qhV"; /* '+': stop at NAME */

static const struct option long_options[] = {
	{"uri", required_argument, NULL, OPT_URI},
	{"wait", required_argument, NULL, 'w'},
	{"no-wait", no_argument, NULL, 'n'},
	{"ttl", required_argument, NULL, OPT_TTL},
	{"conflict-exit-code", required_argument, NULL, 'E'},
	{"grace", required_argument, NULL, OPT_GRACE},
	{"shared", no_argument, NULL, 's'},
	{"exclusive", no_argument, NULL, 'x'},
	{"limit", required_argument, NULL, 'l'},
	{"identity", required_argument, NULL, OPT_IDENTITY},
	{"min-hold", required_argument, NULL, OPT_MIN_HOLD},
	{"max-hold", required_argument, NULL, OPT_MAX_HOLD},
	{"json", no_argument, NULL, OPT_JSON},
	{"dry-run", no_argument, NULL, OPT_DRY_RUN},
	{"value", required_argument, NULL, OPT_VALUE},
	{"watch", no_argument, NULL, OPT_WATCH},
	{"quiet", no_argument, NULL, 'q'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{NULL, 0, NULL, 0},
};

/* Parsers return -1 to go on, or the exit status to end with. */

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	flockfile(stderr); /* the hint stays with the message */
	va_start(ap, fmt);
	cli_vsay(fmt, ap);
	va_end(ap);
	fputs("Try 'dlock --help' for more information.\n", stderr);
	funlockfile(stderr);
	return EX_USAGE;
}

static int duration_arg(const char *opt, const char *text, int64_t min_ms, int64_t *out)
{
	if (dlock_duration_parse(text, 1000, out) != DLOCK_OK)
		return usage_error("%s: invalid duration '%s' (examples: 30, 1.5, 250ms, 10s, 2m)", opt, text);
	if (*out < min_ms)
		return usage_error("%s: must be more than 0", opt);
	return -1;
}

static int exit_code_arg(const char *text, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || v < 0 || v > 255)
		return usage_error("--conflict-exit-code: '%s' is not a number from 0 to 255", text);
	*out = (int)v;
	return -1;
}

static int limit_arg(const char *text, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < 1 || v > DLOCK_PERMITS_MAX)
		return usage_error("--limit: '%s' is not a number of permits from 1 to %d", text,
		                   DLOCK_PERMITS_MAX);
	*out = (uint32_t)v;
	return -1;
}

/* The library's rule (dlock_client_options::identity), told as a usage error. */
static int identity_arg(const char *text)
{
	size_t len = strlen(text);

	if (len == 0 || len > DLOCK_IDENTITY_MAX)
		return usage_error("--identity: must be 1 to %d bytes long", DLOCK_IDENTITY_MAX);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f)
			return usage_error("--identity: a control byte at byte %zu", i + 1);
	return -1;
}

static int bad_option(char **argv)
{
	/* optopt: the short option at fault, 0 for an unknown long option; a
	 * known one here was given a value it does not take (--no-wait=1). */
	if (optopt == 0)
		return usage_error("unknown option '%s'", argv[optind - 1]);
	if (strchr(short_options + 2, optopt) == NULL)
		return usage_error("unknown option '-%c'", optopt);
	return usage_error("option '%s' takes no value", argv[optind - 1]);
}

/* Note an option that only running COMMAND takes: a verb refuses it. */
static void run_only(struct cli *cli, const char *opt)
{
	if (cli->run_only == NULL)
		cli->run_only = opt;
}

/* Note an option that only a lock's run takes: elect refuses it too. */
static void lock_only(struct cli *cli, const char *opt)
{
	run_only(cli, opt);
	if (cli->lock_only == NULL)
		cli->lock_only = opt;
}

/* The library's bound (DLOCK_VALUE_MAX), told as a usage error. */
static int value_arg(const char *text)
{
	if (strlen(text) > DLOCK_VALUE_MAX)
		return usage_error("--value: at most %d bytes, got %zu", DLOCK_VALUE_MAX, strlen(text));
	return -1;
}

static int apply_option(struct cli *cli, int opt, char **argv)
{
	switch (opt) {
	case OPT_URI:
		cli->uri = optarg;
		return *optarg ? -1 : usage_error("--uri: empty URI");
	case OPT_IDENTITY:
		cli->identity = optarg;
		return identity_arg(optarg);
	case OPT_JSON:
		cli->json = 1;
		return -1;
	case OPT_VALUE:
		cli->value = optarg;
		return value_arg(optarg);
	case OPT_WATCH:
		cli->watch = 1;
		return -1;
	case OPT_DRY_RUN:
		cli->dry_run = 1;
		return -1;
	case 'w':
		run_only(cli, "--wait");
		cli->wait_given = 1;
		return duration_arg("--wait", optarg, 0, &cli->wait_ms);
	case 'n':
		run_only(cli, "--no-wait");
		cli->no_wait = 1;
		cli->wait_ms = 0;
		return -1;
	case OPT_TTL:
		run_only(cli, "--ttl");
		return duration_arg("--ttl", optarg, 1, &cli->ttl_ms);
	case OPT_GRACE:
		run_only(cli, "--grace");
		return duration_arg("--grace", optarg, 0, &cli->grace_ms);
	case OPT_MIN_HOLD:
		lock_only(cli, "--min-hold");
		return duration_arg("--min-hold", optarg, 0, &cli->min_hold_ms);
	case OPT_MAX_HOLD:
		lock_only(cli, "--max-hold");
		return duration_arg("--max-hold", optarg, 1, &cli->max_hold_ms);
	case 'E':
		run_only(cli, "--conflict-exit-code");
		return exit_code_arg(optarg, &cli->conflict_code);
	case 's':
	case 'x':
		lock_only(cli, opt == 's' ? "--shared" : "--exclusive");
		if (cli->rw && cli->shared != (opt == 's'))
			return usage_error("--shared and --exclusive cannot be used together");
		if (cli->limit)
			return usage_error("--limit cannot be used with --shared or --exclusive");
		cli->rw = 1;
		cli->shared = opt == 's';
		return -1;
	case 'l':
		lock_only(cli, "--limit");
		if (cli->rw)
			return usage_error("--limit cannot be used with --shared or --exclusive");
		return limit_arg(optarg, &cli->limit);
	case 'q':
		cli->quiet = 1;
		return -1;
	case 'h':
		return print_help();
	case 'V':
		return print_version();
	case ':':
		return usage_error("option '%s' needs a value", argv[optind - 1]);
	default:
		return bad_option(argv);
	}
}

/* NAME -- COMMAND [ARG]...: the "--" is required, so that an option put
 * after NAME can never be taken for COMMAND. */
static int parse_operands(struct cli *cli, int argc, char **argv)
{
	if (cli->wait_given && cli->no_wait)
		return usage_error("--no-wait and --wait cannot be used together");
	if (cli->json)
		return usage_error("--json goes with status, list, break and leader");
	if (cli->watch)
		return usage_error("--watch goes with leader");
	if (cli->dry_run)
		return usage_error("--dry-run goes with gc");
	if (cli->value != NULL && cli->verb != CLI_VERB_ELECT)
		return usage_error("--value goes with elect");
	if (cli->min_hold_ms >= 0 && cli->max_hold_ms >= 0 && cli->max_hold_ms < cli->min_hold_ms)
		return usage_error("--max-hold must be at least --min-hold");
	if (optind >= argc)
		return usage_error("missing lock NAME");
	cli->name = argv[optind];
	if (cli->name[0] == '\0')
		return usage_error("empty lock NAME");
	if (optind + 1 >= argc || strcmp(argv[optind + 1], "--") != 0) {
		/* "dlock [OPTION]... -- COMMAND": the "--" ended the options, so
		 * COMMAND would be taken for NAME. */
		if (cli->dashdash_taken)
			return usage_error("missing lock NAME before '--' (usage: dlock [OPTION]... NAME -- COMMAND)");
		return usage_error("expected '--' between NAME and COMMAND");
	}
	if (optind + 2 >= argc)
		return usage_error("missing COMMAND after '--'");
	cli->command = &argv[optind + 2];
	return -1;
}

/* The argument before the operands is "--" and not an option's value. */
static int dashdash_before(char **argv, const char *last_value)
{
	return optind > 1 && strcmp(argv[optind - 1], "--") == 0 && argv[optind - 1] != last_value;
}

/* VERB [OPTION]... [OPERAND]: the options after the verb, then its operand
 * (elect: NAME -- COMMAND, as a lock's run). */
static int parse_verb(struct cli *cli, int argc, char **argv)
{
	const char *verb = cli_verb_name(cli->verb);
	const char *last_value = NULL;
	char **args = argv + optind; /* args[0] is the verb */
	int n = argc - optind, opt, rc, operands;

	optind = 0; /* GNU getopt: start over, at args[1] */
	while ((opt = getopt_long(n, args, short_options, long_options, NULL)) != -1) {
		rc = apply_option(cli, opt, args);
		if (rc >= 0)
			return rc;
		last_value = optarg;
	}
	if (cli->verb == CLI_VERB_ELECT) {
		if (cli->lock_only != NULL)
			return usage_error("elect: option '%s' is for a lock, not an election", cli->lock_only);
		cli->dashdash_taken = dashdash_before(args, last_value);
		return parse_operands(cli, n, args);
	}
	if (cli->value != NULL)
		return usage_error("%s: option '--value' is for elect", verb);
	if (cli->watch && cli->verb != CLI_VERB_LEADER)
		return usage_error("%s: option '--watch' is for leader", verb);
	if (cli->dry_run && cli->verb != CLI_VERB_GC)
		return usage_error("%s: option '--dry-run' is for gc", verb);
	if (cli->json && cli->verb == CLI_VERB_GC)
		return usage_error("gc: option '--json' is for status, list, break and leader");
	if (cli->watch && cli->quiet)
		return usage_error("leader: --watch prints each change: not with --quiet");
	if (cli->run_only != NULL)
		return usage_error("%s: option '%s' is for running a command under a lock", verb, cli->run_only);
	operands = n - optind;
	if (operands > 1)
		return usage_error("%s: one %s at most, got %d operands", verb,
		                   cli->verb == CLI_VERB_LIST || cli->verb == CLI_VERB_GC ? "NAME-PREFIX" : "NAME",
		                   operands);
	cli->name = operands == 1 ? args[optind] : NULL;
	if (cli->verb == CLI_VERB_LIST || cli->verb == CLI_VERB_GC)
		return -1;
	if (cli->name == NULL)
		return usage_error("%s: missing lock NAME", verb);
	if (cli->name[0] == '\0')
		return usage_error("%s: empty lock NAME", verb);
	return -1;
}

static int parse_args(struct cli *cli, int argc, char **argv)
{
	const char *last_value = NULL; /* optarg of the last option */
	int opt, rc;

	*cli = (struct cli){
		.wait_ms = DLOCK_WAIT_DEFAULT,
		.grace_ms = DEFAULT_GRACE_MS,
		.conflict_code = CLI_EXIT_CONFLICT,
		.min_hold_ms = -1,
		.max_hold_ms = -1,
	};
	opterr = 0; /* our messages, with the "dlock: " prefix */
	while ((opt = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
		rc = apply_option(cli, opt, argv);
		if (rc >= 0)
			return rc;
		last_value = optarg;
	}
	cli->dashdash_taken = dashdash_before(argv, last_value);
	/* A first operand that is a verb is the verb, unless "--" follows it:
	 * "dlock status -- make" runs make under the lock named "status". */
	if (optind < argc && (optind + 1 >= argc || strcmp(argv[optind + 1], "--") != 0))
		cli->verb = cli_verb_of(argv[optind]);
	if (cli->verb != CLI_VERB_NONE)
		return parse_verb(cli, argc, argv);
	return parse_operands(cli, argc, argv);
}

/* ----------------------------------------------------------------- URI */

static int uri_plain(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '/' || c == '-' || c == '.' || c == '_' || c == '~';
}

/* "file://" + dir, percent-encoded: the URI parser decodes the path, and a
 * directory may contain '%', '?' or '#'. */
static char *file_uri(const char *dir, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(sizeof "file://" + 3 * len);
	char *p;

	if (out == NULL)
		return NULL;
	p = stpcpy(out, "file://");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)dir[i];

		if (uri_plain(c)) {
			*p++ = (char)c;
		} else {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		}
	}
	*p = '\0';
	return out;
}

/* file://$XDG_RUNTIME_DIR/dlock, or file:///tmp/dlock-UID without it. */
static char *default_uri(void)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char buf[4096];
	size_t n;

	if (xdg != NULL && xdg[0] == '/') {
		n = strlen(xdg);
		while (n > 0 && xdg[n - 1] == '/')
			n--;
		if (n + sizeof "/dlock" > sizeof buf) {
			errno = ENAMETOOLONG;
			return NULL;
		}
		memcpy(buf, xdg, n);
		memcpy(buf + n, "/dlock", sizeof "/dlock");
	} else {
		snprintf(buf, sizeof buf, "/tmp/dlock-%ju", (uintmax_t)getuid());
	}
	return file_uri(buf, strlen(buf));
}

static char *resolve_uri(const char *uri)
{
	const char *env = getenv("DLOCK_URI");

	if (uri != NULL)
		return strdup(uri);
	if (env != NULL && env[0] != '\0')
		return strdup(env);
	return default_uri();
}

/*
 * The URI's min_hold in ms (0 when absent or unreadable; the library has
 * already refused a bad one at open).  The library applies it itself, but
 * does not tell it: dlock needs it to stay open until the bound.
 */
static int64_t uri_min_hold(const char *uri)
{
	static const char key[] = "min_hold=";
	const char *q = strchr(uri, '?');
	char value[64];
	int64_t ms = 0;

	while (q != NULL) {
		const char *v = q + 1, *end = v + strcspn(v, "&#");

		if (strncmp(v, key, sizeof key - 1) == 0 && (size_t)(end - v) - (sizeof key - 1) < sizeof value) {
			size_t n = (size_t)(end - v) - (sizeof key - 1);

			memcpy(value, v + sizeof key - 1, n);
			value[n] = '\0';
			if (dlock_duration_parse(value, 1, &ms) != DLOCK_OK)
				ms = 0;
			return ms;
		}
		q = *end == '&' ? end : NULL;
	}
	return 0;
}

/* ------------------------------------------------------------ locking */

static const char *detail(const struct session *s, dlock_status st)
{
	const char *msg = dlock_client_errmsg(s->client);

	return msg[0] != '\0' ? msg : dlock_strerror(st);
}

static void format_ms(int64_t ms, char *buf, size_t len)
{
	if (ms % 3600000 == 0)
		snprintf(buf, len, "%" PRId64 "h", ms / 3600000);
	else if (ms % 60000 == 0)
		snprintf(buf, len, "%" PRId64 "m", ms / 60000);
	else if (ms % 1000 == 0)
		snprintf(buf, len, "%" PRId64 "s", ms / 1000);
	else
		snprintf(buf, len, "%" PRId64 "ms", ms);
}

/* What is held, in messages: "lock", or "leadership of" for elect. */
static const char *held_noun(const struct session *s)
{
	return s->cli->verb == CLI_VERB_ELECT ? "leadership of" : "lock";
}

static int acquire_failed(struct session *s, dlock_status st)
{
	const struct cli *cli = s->cli;
	const char *what = held_noun(s);
	char wait[32];

	if (st != DLOCK_EBUSY && st != DLOCK_ETIMEDOUT) {
		cli_say("cannot acquire %s '%s' on %s: %s", what, cli->name, dlock_client_uri(s->client),
		        detail(s, st));
		return cli_status_exit(st, EX_USAGE);
	}
	if (cli->quiet) {
		/* asked for silence */
	} else if (st == DLOCK_EBUSY) {
		cli_say("%s '%s' is held elsewhere", what, cli->name);
	} else if (cli->wait_ms > 0) {
		format_ms(cli->wait_ms, wait, sizeof wait);
		cli_say("timed out after %s waiting for %s '%s'", wait, what, cli->name);
	} else {
		cli_say("timed out waiting for %s '%s' (wait parameter of %s)", what, cli->name,
		        dlock_client_uri(s->client));
	}
	return cli->conflict_code;
}

/* The handle to acquire: a lock of the kind asked for, or the election's mutex. */
static dlock_status new_handle(struct session *s)
{
	const struct cli *cli = s->cli;
	dlock_status st;

	if (cli->verb == CLI_VERB_ELECT) {
		st = dlock_election_new(s->client, cli->name, &s->election);
		s->lock = dlock_election_lock(s->election);
		return st;
	}
	if (cli->limit)
		return dlock_semaphore_new(s->client, cli->name, cli->limit, &s->lock);
	if (cli->rw)
		return dlock_rwlock_new(s->client, cli->name, &s->lock);
	return dlock_lock_new(s->client, cli->name, &s->lock);
}

static const char *handle_option(const struct cli *cli)
{
	if (cli->verb == CLI_VERB_ELECT)
		return "elect";
	return cli->limit ? "--limit" : cli->shared ? "--shared" : "--exclusive";
}

/*
 * Open a client for `uri_opt` (NULL: $DLOCK_URI, else the default URI)
 * with `identity` (NULL: the URI's).  Returns 0 with *out set, else prints
 * why and returns the exit status.
 */
static int open_client(const char *uri_opt, const char *identity, int quiet, dlock_client **out)
{
	dlock_client_options copts = DLOCK_CLIENT_OPTIONS_INIT;
	char err[512] = "";
	char *uri = resolve_uri(uri_opt);
	dlock_status st;

	*out = NULL;
	if (uri == NULL) {
		cli_say("cannot build the URI: %s", strerror(errno));
		return EX_OSERR;
	}
	copts.log = log_library;
	copts.log_level = quiet ? DLOCK_LOG_ERROR : DLOCK_LOG_WARN;
	copts.identity = identity;
	st = dlock_client_open(out, uri, &copts, err, sizeof err);
	free(uri);
	if (st != DLOCK_OK) {
		/* The library's message says what failed and where; the status
		 * text would only say it again in general terms. */
		cli_say("cannot open the lock service: %s", err[0] ? err : dlock_strerror(st));
		return cli_status_exit(st, EX_CONFIG);
	}
	return 0;
}

/* --min-hold or --max-hold (-1: not given) as a bound of the acquire options: the URI's when not given. */
static int64_t hold_option(int64_t ms)
{
	return ms < 0 ? 0 : ms == 0 ? DLOCK_HOLD_NONE : ms;
}

/* Open the client and acquire the lock: -1 when held, else the exit status. */
static int acquire(struct session *s, struct cli_watch *watch)
{
	const struct cli *cli = s->cli;
	dlock_acquire_options aopts = DLOCK_ACQUIRE_OPTIONS_INIT;
	int rc = open_client(cli->uri, cli->identity, cli->quiet, &s->client);
	dlock_status st;

	if (rc != 0)
		return rc;
	st = new_handle(s);
	if (st == DLOCK_ENOTSUP) {
		cli_say("%s: %s", handle_option(cli), detail(s, st));
		return cli_status_exit(st, EX_USAGE);
	}
	if (st != DLOCK_OK) {
		cli_say("invalid lock name: %s", detail(s, st));
		return cli_status_exit(st, EX_USAGE);
	}
	cli_watch_lock(watch, s->lock);
	aopts.wait_ms = cli->wait_ms;
	aopts.lease_ms = cli->ttl_ms;
	aopts.renewal = DLOCK_ON; /* COMMAND may outlive any lease */
	aopts.on_lost = cli_lost_callback;
	aopts.lost_userdata = &s->lost;
	aopts.mode = cli->shared ? DLOCK_MODE_SHARED : DLOCK_MODE_EXCLUSIVE;
	aopts.min_hold = hold_option(cli->min_hold_ms);
	aopts.max_hold = hold_option(cli->max_hold_ms);
	if (s->election != NULL)
		st = dlock_campaign(s->election, cli->value, &aopts, NULL); /* the term: command_env() */
	else
		st = dlock_acquire(s->lock, &aopts);
	s->acquired_at = cli_now_ms();
	return st == DLOCK_OK ? -1 : acquire_failed(s, st);
}

/* ------------------------------------------------------------ command */

/* Called by the supervisor when the lost-lock callback has run. */
static void report_lost(void *ctx)
{
	struct session *s = ctx;
	const char *d = s->lost.detail;

	s->lost_reported = 1;
	cli_say("%s '%s' lost (%s)%s%s; stopping the command", held_noun(s), s->cli->name,
	        cli_lost_reason_name(s->lost.reason), d[0] ? ": " : "", d);
}

/* 1 when `var` ("NAME=VALUE") is set anew for COMMAND, so the inherited one goes. */
static int replaced_var(const struct session *s, const char *var)
{
	static const char *const names[] = {FENCING_VAR "=", SLOT_VAR "=", TERM_VAR "="};
	size_t n = s->election != NULL ? 3 : 2; /* a lock's run passes an enclosing term on */

	for (size_t i = 0; i < n; i++)
		if (strncmp(var, names[i], strlen(names[i])) == 0)
			return 1;
	return 0;
}

/*
 * COMMAND's environment: ours with DLOCK_FENCING_TOKEN replaced by this
 * acquisition's token, or removed when the backend has none, and for
 * elect DLOCK_LEADER_TERM, the same number.  Built before fork(), as the
 * child may not allocate.  Returns NULL with *rc set.
 */
static char **command_env(struct session *s, int *rc)
{
	static const char prefix[] = FENCING_VAR "=";
	uint64_t token;
	uint32_t slot;
	size_t n = 0, k = 0;
	char **env;
	dlock_status st = dlock_lock_fencing_token(s->lock, &token);

	if (st == DLOCK_ENOTHELD) {
		cli_say("%s '%s' was lost before the command started: %s", held_noun(s), s->cli->name,
		        detail(s, st));
		*rc = CLI_EXIT_LOST;
		return NULL;
	}
	if (st != DLOCK_OK && st != DLOCK_ENOTSUP) {
		cli_say("cannot read the fencing token of %s '%s': %s", held_noun(s), s->cli->name, detail(s, st));
		*rc = cli_status_exit(st, EX_OSERR);
		return NULL;
	}
	while (environ[n] != NULL)
		n++;
	env = malloc((n + 4) * sizeof *env);
	if (env == NULL) {
		cli_say("out of memory");
		*rc = EX_OSERR;
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (!replaced_var(s, environ[i]))
			env[k++] = environ[i];
	if (dlock_lock_permit_slot(s->lock, &slot) == DLOCK_OK) {
		snprintf(s->slot_var, sizeof s->slot_var, "%s=%" PRIu32, SLOT_VAR, slot);
		env[k++] = s->slot_var;
	}
	if (st == DLOCK_OK) {
		snprintf(s->token_var, sizeof s->token_var, "%s%" PRIu64, prefix, token);
		env[k++] = s->token_var;
	}
	if (st == DLOCK_OK && s->election != NULL) {
		snprintf(s->term_var, sizeof s->term_var, "%s=%" PRIu64, TERM_VAR, token);
		env[k++] = s->term_var;
	}
	env[k] = NULL;
	return env;
}

/*
 * The release of a lock held for less than its minimum returns at once,
 * but the library keeps the name held until the bound; on session backends
 * only as long as the client is open.  So dlock stays until then (the
 * bound is counted from just after the acquisition, never sooner than the
 * library's).  A signal ends the wait: exit 128+N.  Returns `rc` otherwise.
 */
static int keep_min_hold(struct session *s, int rc)
{
	int64_t min_hold = s->cli->min_hold_ms >= 0 ? s->cli->min_hold_ms : uri_min_hold(dlock_client_uri(s->client));
	int signo;

	if (min_hold <= 0)
		return rc;
	signo = cli_wait_until(&s->sig, s->acquired_at + min_hold);
	return signo != 0 ? 128 + signo : rc;
}

/* After COMMAND ended: release (elect: resign), and exit as COMMAND did
 * unless the lock was lost at some point (then COMMAND ran at least partly
 * unprotected). */
static int finish(struct session *s, int wait_status)
{
	dlock_status st = s->election != NULL ? dlock_resign(s->election) : dlock_release(s->lock);
	const char *d = s->lost.detail;

	if (cli_lost_seen(&s->lost)) {
		if (!s->lost_reported)
			cli_say("%s '%s' was lost while the command ran (%s)%s%s", held_noun(s), s->cli->name,
			        cli_lost_reason_name(s->lost.reason), d[0] ? ": " : "", d);
		return CLI_EXIT_LOST;
	}
	if (st == DLOCK_ENOTHELD) {
		cli_say("%s '%s' was lost while the command ran: %s", held_noun(s), s->cli->name, detail(s, st));
		return CLI_EXIT_LOST;
	}
	if (st != DLOCK_OK) {
		cli_say("warning: cannot release %s '%s' on %s: %s", held_noun(s), s->cli->name,
		        dlock_client_uri(s->client), detail(s, st));
		return cli_wait_status_exit(wait_status);
	}
	return keep_min_hold(s, cli_wait_status_exit(wait_status));
}

static int run_command(struct session *s)
{
	struct cli_child child = {.grace_ms = s->cli->grace_ms, .tty_fd = -1};
	char **env;
	int rc;

	if (cli_lost_seen(&s->lost)) {
		report_lost(s);
		return CLI_EXIT_LOST;
	}
	env = command_env(s, &rc);
	if (env == NULL)
		return rc;
	rc = cli_spawn(&child, s->cli->command, env, &s->sig);
	free(env);
	if (rc == 0)
		rc = cli_supervise(&child, &s->sig, &s->lost, report_lost, s);
	return rc == 0 ? finish(s, child.status) : rc;
}

static int run(struct session *s)
{
	struct cli_watch watch;
	int rc, signo;

	if (cli_watch_start(&watch, &s->sig) != 0) {
		cli_say("cannot start a thread: %s", strerror(errno));
		return EX_OSERR;
	}
	rc = acquire(s, &watch);
	signo = cli_watch_stop(&watch);
	if (signo == 0)
		signo = cli_signals_pending(&s->sig); /* came after the watcher stopped */
	if (signo != 0)
		return 128 + signo; /* the lock, if held, is released by the cleanup */
	return rc >= 0 ? rc : run_command(s);
}

/* ---------------------------------------------------------------- verbs */

/*
 * A verb on its own client.  Nothing is held: the signals keep their
 * default action, but for leader --watch, which reads them from a
 * signalfd; they are blocked before the client opens, so that its threads
 * inherit the mask.
 */
static int run_verb(const struct cli *cli)
{
	struct cli_verb_args verb = {
		.verb = cli->verb,
		.json = cli->json,
		.quiet = cli->quiet,
		.watch = cli->watch,
		.dry_run = cli->dry_run,
		.name = cli->name,
	};
	struct cli_signals sig = {.fd = -1};
	dlock_client *c = NULL;
	int rc;

	if (cli->verb == CLI_VERB_LEADER && cli->watch && cli_signals_open(&sig) != 0) {
		cli_say("cannot set up signal handling: %s", strerror(errno));
		return EX_OSERR;
	}
	rc = open_client(cli->uri, cli->identity, cli->quiet, &c);
	if (rc == 0)
		rc = cli->verb == CLI_VERB_LEADER ? cli_leader_run(&verb, c, &sig) : cli_verb_run(&verb, c);
	dlock_client_close(c);
	cli_signals_close(&sig);
	return rc;
}

int main(int argc, char **argv)
{
	struct cli cli;
	struct session s = {.cli = &cli};
	int rc = parse_args(&cli, argc, argv);

	if (rc >= 0)
		return rc;
	if (cli.verb != CLI_VERB_NONE && cli.verb != CLI_VERB_ELECT)
		return run_verb(&cli);
	if (cli_signals_open(&s.sig) != 0 || cli_lost_init(&s.lost) != 0) {
		cli_say("cannot set up signal handling: %s", strerror(errno));
		return EX_OSERR;
	}
	rc = run(&s);
	/* Releases the lock if it is still held (a signal came first). */
	if (s.election != NULL)
		dlock_election_free(s.election); /* and its lock */
	else
		dlock_lock_free(s.lock);
	dlock_client_close(s.client);
	cli_lost_destroy(&s.lost);
	cli_signals_close(&s.sig);
	return rc;
}
