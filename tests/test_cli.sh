#!/usr/bin/env bash
# shellcheck disable=SC2016 # single quotes hold code for inner shells
# Tests of the dlock command.
#
#   test_cli.sh /path/to/dlock [/path/to/dlock_refused_cli [/path/to/dlock_show_cli]]
#
# The second program is the dlock command built with a built-in driver that
# the library refuses (tests/support/refused_builtins.c); the third, with
# show:// (tests/support/show_builtins.c), whose inspection answers fixed
# hostile holders for the checks of the verbs' output; without them, those
# checks are skipped.  The verbs and the hold bounds run on file:// and on
# the servers of DLOCK_TEST_REDIS_URI, DLOCK_TEST_PG_URI, DLOCK_TEST_PG_ROW_URI
# and DLOCK_TEST_ZK_URI when set (a backend without inspection is skipped,
# loudly); so do elect and leader, on those servers and on
# DLOCK_TEST_PG_BOUNCER_URI (a backend without elections is skipped, loudly;
# mem:// cannot span processes).  The lists of schemes and common URI parameters in
# --help, man/dlock.1, man/dlock.3 and README.md are checked against the
# library: the backends of this build and core/uri.c's table.
#
# Prints one line per check and ends with "N passed, M failed"; exits 1 when
# a check failed.  Everything lives in a temporary directory (removed at
# exit) whose file:// URI is given through DLOCK_URI, except the checks of
# the default URI rule.  Waits poll marker files with a bound; processes
# started in the background are stopped by their PID at exit.
#
# A lost lock is produced inside one dlock process: mem:// leases are
# tracked by the library, so stopping dlock (SIGSTOP) for longer than its
# --ttl makes the lease run out unrenewed; once continued, the library
# reports the loss.  Losses caused by another process or a server are
# tested with the network backends.
set -u

if [ $# -lt 1 ] || [ $# -gt 3 ] || [ ! -x "$1" ]; then
	echo "usage: test_cli.sh /path/to/dlock [/path/to/dlock_refused_cli [/path/to/dlock_show_cli]]" >&2
	exit 2
fi
DLOCK=$1
REFUSED_CLI=${2:-}
src=$(cd "$(dirname "$0")/.." && pwd)
# A lock name unique to this run, for the checks in a shared directory.
run_id="test-cli-$$-$RANDOM"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli.XXXXXX") || exit 2

# Stops only background jobs that are still running: a job already reaped
# may have had its PID reused by some other process.
cleanup() {
	local p
	for p in $(jobs -rp); do
		kill "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$tmp"
	# The file backend keeps lock files; this run's name is its own.
	rm -f "/tmp/dlock-$(id -u)/$run_id.lock"
}
trap cleanup EXIT

export DLOCK_URI="file://$tmp/locks"
unset DLOCK_FENCING_TOKEN

passed=0
failed=0
pass() {
	passed=$((passed + 1))
	echo "ok - $1"
}
fail() {
	failed=$((failed + 1))
	echo "FAIL - $1${2:+ ($2)}"
}
# check DESCRIPTION TEST-COMMAND...: pass when the command succeeds.
check() {
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# dl ARGS...: run dlock; sets rc, ms (elapsed) and files $out, $err.
out=$tmp/out
err=$tmp/err
dl() {
	local t0
	t0=$(now_ms)
	"$DLOCK" "$@" >"$out" 2>"$err"
	rc=$?
	ms=$(($(now_ms) - t0))
}

# expect_rc DESCRIPTION WANT ARGS...: run dlock and compare its status.
expect_rc() {
	local what=$1 want=$2
	shift 2
	dl "$@"
	if [ "$rc" -eq "$want" ]; then
		pass "$what"
	else
		fail "$what" "exit $rc, want $want; stderr: $(head -c 300 "$err")"
	fi
}

# await_file FILE: poll for FILE, at most 10 s.
await_file() {
	local i
	for ((i = 0; i < 500; i++)); do
		[ -e "$1" ] && return 0
		sleep 0.02
	done
	return 1
}

# await_grep FILE PATTERN: poll until a line of FILE matches PATTERN, at most 10 s.
await_grep() {
	local i
	for ((i = 0; i < 500; i++)); do
		grep -q -e "$2" "$1" 2>/dev/null && return 0
		sleep 0.02
	done
	return 1
}

# await_last FILE LINE: poll until the last line of FILE is LINE, at most 10 s.
await_last() {
	local i
	for ((i = 0; i < 500; i++)); do
		[ "$(tail -n 1 "$1" 2>/dev/null)" = "$2" ] && return 0
		sleep 0.02
	done
	return 1
}

# $statf PID N: field N of /proc/PID/stat after the command name (1 is the
# state, 3 the process group); empty once PID is gone.  Not ps(1): minimal
# images lack it.
statf=$tmp/stat_field.sh
printf '%s\n' '#!/bin/sh' 'sed "s/.*) //" "/proc/$1/stat" 2>/dev/null | cut -d" " -f"$2"' >"$statf"
chmod +x "$statf"

# await_gone PID: poll until PID has ended (a zombie counts: an orphan's
# reaper may be slow), at most 10 s.
await_gone() {
	local i
	for ((i = 0; i < 500; i++)); do
		case $("$statf" "$1" 1) in "" | Z*) return 0 ;; esac
		sleep 0.02
	done
	return 1
}

# A command that holds the lock until told: creates $1, then waits (at most
# 30 s) for $2 to appear.  Appends "hold start"/"hold end" to $3 if given.
holder=$tmp/hold.sh
cat >"$holder" <<'EOF'
#!/bin/sh
[ -n "${3:-}" ] && echo "hold start" >>"$3"
: >"$1"
i=0
while [ ! -e "$2" ] && [ $i -lt 600 ]; do
	sleep 0.05
	i=$((i + 1))
done
[ -n "${3:-}" ] && echo "hold end" >>"$3"
exit 0
EOF
chmod +x "$holder"

# hold NAME TAG [DLOCK ARGS...]: start dlock holding NAME in the background;
# returns once the command runs.  Sets hold_pid; release with `release TAG`.
hold() {
	local name=$1 tag=$2
	shift 2
	rm -f "$tmp/$tag.started" "$tmp/$tag.go"
	"$DLOCK" "$@" "$name" -- "$holder" "$tmp/$tag.started" "$tmp/$tag.go" "$tmp/$tag.log" \
		>"$tmp/$tag.out" 2>"$tmp/$tag.err" &
	hold_pid=$!
	await_file "$tmp/$tag.started"
}

# release TAG PID: let the holder end and reap its dlock; sets hold_rc.
release() {
	: >"$tmp/$2.go"
	wait "$1"
	hold_rc=$?
}

contains() { grep -q -e "$2" "$1"; }
empty() { [ ! -s "$1" ]; }

# ------------------------------------------------------------ help, version

dl --help
check "--help exits 0" [ "$rc" -eq 0 ]
check "--help prints usage on stdout" contains "$out" "^Usage: dlock"
check "--help writes nothing on stderr" empty "$err"
missing=""
for word in --uri --wait --no-wait --ttl --conflict-exit-code --grace --shared --exclusive --limit --quiet --help --version \
	--identity --min-hold --max-hold --json "status NAME" "list [NAME-PREFIX]" "break NAME" \
	"gc [NAME-PREFIX]" --dry-run \
	"leader NAME" "elect NAME -- COMMAND" --value --watch DLOCK_LEADER_TERM \
	mem:// file:/// redis:// zk:// postgres:// DLOCK_URI XDG_RUNTIME_DIR /tmp/dlock- \
	DLOCK_FENCING_TOKEN DLOCK_PERMIT_SLOT " 64 " " 69 " " 71 " " 75 " " 76 " " 77 " " 78 " " 126 " " 127 " "128+N"; do
	grep -q -F -e "$word" "$out" || missing="$missing '$word'"
done
check "--help documents options, URIs, environment and exit codes" [ -z "$missing" ]
[ -n "$missing" ] && echo "   missing from --help:$missing"

dl --version
check "--version exits 0" [ "$rc" -eq 0 ]
check "--version prints 'dlock VERSION' on stdout" contains "$out" '^dlock [0-9][0-9.]*'
check "--version lists the backends" contains "$out" 'file'
check "--version writes nothing on stderr" empty "$err"
check "--version shows no refused backend when none was" eval '! grep -q "^refused:" "$out"'

# A built-in driver that the library refuses is named with the reason.
if [ -n "$REFUSED_CLI" ]; then
	"$REFUSED_CLI" --version >"$out" 2>"$err"
	check "--version names a refused built-in driver and why" \
		contains "$out" "^refused: future (ABI version 99, this library accepts 1 to 9)$"
	check "... and still lists the others" contains "$out" "^backends: mem,file$"
	"$REFUSED_CLI" --uri future://x name -- true >"$out" 2>"$err"
	rc=$?
	check "a URI of a refused driver's scheme exits 78 (got $rc)" [ "$rc" -eq 78 ]
	check "... saying why the driver was refused" contains "$err" \
		"^dlock: cannot open the lock service: driver 'future' refused at registration: ABI version 99, this library accepts 1 to 9"
else
	echo "skip - refused built-in driver (no dlock_refused_cli given)"
fi

# ---------------------------------------------- lists kept in agreement

# section FILE START END: the lines of FILE from the one matching START to
# the one matching END.
section() { sed -n "/$2/,/$3/p" "$1"; }
"$DLOCK" --help | section /dev/stdin '^URIs:' '^Default URI:' >"$tmp/doc.help"
section "$src/man/dlock.1" '^\.SH URIS' '^\.SH DEFAULT URI' >"$tmp/doc.man1"
section "$src/man/dlock.3" '^\.SH DESCRIPTION' '^\.SS Clients' >"$tmp/doc.man3"
sed -n '1,/^## What each backend promises/p' "$src/README.md" >"$tmp/doc.readme"
# The truth: the schemes of this build, and the common parameters that the
# URI parser takes (core/uri.c, common_keys).
"$DLOCK" --version >"$out"
schemes=$(sed -n 's/^backends: //p' "$out" | tr ',' ' ')
params=$(sed -n '/common_keys\[P_COUNT\] = {/,/};/p' "$src/core/uri.c" | sed -n 's/.*= "\([a-z_]*\)",.*/\1/p')
check "the common URI parameters are found in core/uri.c" eval '[[ " $(echo $params) " == *" ttl "* ]]'
for doc in help man1 man3 readme; do
	missing=""
	for s in $schemes; do
		grep -q -F -e "$s://" "$tmp/doc.$doc" || missing="$missing $s://"
	done
	for p in $params; do
		grep -q -w -e "$p" "$tmp/doc.$doc" || missing="$missing $p"
	done
	check "the $doc lists every scheme and common URI parameter" [ -z "$missing" ]
	[ -n "$missing" ] && echo "   missing from the $doc:$missing"
done

# ----------------------------------------------------------- usage errors

expect_rc "no arguments is a usage error" 64
check "usage error hints at --help" contains "$err" "dlock --help"
check "usage error messages start with 'dlock: '" contains "$err" "^dlock: "
expect_rc "NAME without '--' is a usage error" 64 name true
check "... saying the '--' is expected" contains "$err" "^dlock: expected '--' between NAME and COMMAND"
expect_rc "a missing NAME is a usage error" 64 --uri "file://$tmp/locks" -- true
check "... saying that NAME is missing" contains "$err" "^dlock: missing lock NAME before '--'"
expect_rc "'dlock -- COMMAND' is a missing NAME" 64 -- true
check "... saying so" contains "$err" "^dlock: missing lock NAME"
expect_rc "'--' may end the options before NAME -- COMMAND" 0 -q -- name -- true
expect_rc "missing COMMAND is a usage error" 64 name --
expect_rc "empty NAME is a usage error" 64 "" -- true
expect_rc "unknown option is a usage error" 64 --bogus name -- true
expect_rc "option without its value is a usage error" 64 --wait
expect_rc "bad duration is a usage error" 64 --wait 5x name -- true
expect_rc "--ttl 0 is a usage error" 64 --ttl 0 name -- true
expect_rc "--ttl 0.0 is a usage error" 64 --ttl 0.0 name -- true
expect_rc "--ttl 0.0s is a usage error" 64 --ttl 0.0s name -- true
for d in 1.2.3 . 1e3 -0.5 nan 1. .5 0.5x 99999999999999999999 9223372036854775.808s; do
	expect_rc "--wait '$d' is a usage error" 64 --wait "$d" name -- true
	check "... explained as an invalid duration" contains "$err" "^dlock: --wait: invalid duration '$d'"
done
expect_rc "--wait 0.5s is accepted" 0 --wait 0.5s name -- true
expect_rc "-w 1.5 (seconds) is accepted" 0 -w 1.5 name -- true
expect_rc "--ttl 1.5 and --grace 0.25s are accepted" 0 --ttl 1.5 --grace 0.25s name -- true
# A 1 ms lease may run out before COMMAND ends (exit 76): only the usage matters.
dl --uri mem://x --ttl 0.0001s name -- true
check "--ttl 0.0001s rounds up to 1 ms, not to 0 (exit $rc)" eval '[ "$rc" -ne 64 ] && ! grep -q "more than 0" "$err"'
expect_rc "fractions in URI durations are accepted" 0 \
	--uri "mem://x?ttl=1.5s&wait=0.5s&open_timeout=2.5s&io_timeout=0.75s" name -- true
expect_rc "-n with -w is a usage error" 64 -n -w 5 name -- true
check "... saying they do not go together" contains "$err" "^dlock: --no-wait and --wait cannot be used together"
expect_rc "-w with --no-wait is a usage error" 64 -w 5 --no-wait name -- true
expect_rc "--conflict-exit-code 256 is a usage error" 64 --conflict-exit-code 256 name -- true
check "usage errors write nothing on stdout" empty "$out"

# -------------------------------------------------------------- bad URIs

expect_rc "unknown URI scheme exits 78" 78 --uri "nosuchscheme://host/x" name -- true
check "bad URI is explained on stderr" contains "$err" "^dlock: "
check "an unknown scheme is told in one sentence" \
	contains "$err" "^dlock: cannot open the lock service: no backend for scheme 'nosuchscheme' (built in: "
check "... once" eval '[ "$(grep -c -i "no backend" "$err")" -eq 1 ] && ! grep -q "registered for this" "$err"'
expect_rc "malformed URI exits 78" 78 --uri "not a uri" name -- true
expect_rc "a text that is no URI exits 78" 78 --uri notauri name -- true
check "... and is shown" contains "$err" "^dlock: cannot open the lock service: URI has no \"://\" after the scheme: 'notauri'$"
expect_rc "a text that is no URI, with a password, exits 78" 78 --uri "alice:s3cr3tpw@host/x" name -- true
check "... and is shown masked" contains "$err" "'\*\*\*@host/x'"
check "... never with the password" eval '! grep -q s3cr3tpw "$err"'
expect_rc "a lock directory that cannot be created exits 78" 78 --uri "file:///proc/dlock-no-such-dir" name -- true
check "... saying why" contains "$err" "^dlock: cannot open the lock service: file://: cannot create directory /proc/dlock-no-such-dir: "
: >"$tmp/plain-file"
expect_rc "a lock directory that is a file exits 78" 78 --uri "file://$tmp/plain-file" name -- true
expect_rc "a lock directory under a file exits 78" 78 --uri "file://$tmp/plain-file/sub" name -- true
DLOCK_URI="nosuchscheme://x" dl name -- true
check "DLOCK_URI is used without --uri" [ "$rc" -eq 78 ]
DLOCK_URI="nosuchscheme://x" dl --uri "file://$tmp/locks" name -- true
check "--uri overrides DLOCK_URI" [ "$rc" -eq 0 ]
dl --uri "nosuchscheme://alice:s3cr3tpw@host/x" name -- true
check "messages never show the password" eval '! grep -q s3cr3tpw "$err"'

# ------------------------------------------------------- running COMMAND

expect_rc "exit status of COMMAND is passed on (3)" 3 name -- sh -c 'exit 3'
expect_rc "exit status of COMMAND is passed on (0)" 0 name -- true
expect_rc "COMMAND killed by SIGTERM gives 143" 143 name -- sh -c 'kill -TERM $$'
expect_rc "COMMAND killed by SIGKILL gives 137" 137 name -- sh -c 'kill -KILL $$'
expect_rc "COMMAND not found gives 127" 127 name -- "$tmp/no-such-command"
check "COMMAND not found is explained" contains "$err" "^dlock: .*no-such-command"
: >"$tmp/not-executable"
expect_rc "COMMAND not executable gives 126" 126 name -- "$tmp/not-executable"
expect_rc "COMMAND is searched in PATH" 0 name -- sh -c 'exit 0'

printf 'line one\nline two\n\tno newline at end' >"$tmp/expected"
dl name -- cat "$tmp/expected"
check "stdout of dlock is exactly COMMAND's stdout" cmp -s "$out" "$tmp/expected"
check "dlock itself writes nothing on success" empty "$err"
dl name -- sh -c 'echo to-stderr >&2'
check "COMMAND's stderr is passed through" contains "$err" "^to-stderr$"
check "nothing on stdout when COMMAND prints nothing" empty "$out"
dl name -- sh -c 'printf "%s\n" "$@"' sh "a b" "" "-x"
printf 'a b\n\n-x\n' >"$tmp/expected"
check "COMMAND's arguments are passed unchanged" cmp -s "$out" "$tmp/expected"

# --------------------------------------------------------- fencing token

dl token -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
t1=$(cat "$out")
DLOCK_FENCING_TOKEN=garbage dl token -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
t2=$(cat "$out")
check "DLOCK_FENCING_TOKEN is a decimal number" eval '[[ "$t1" =~ ^[0-9]+$ ]]'
check "DLOCK_FENCING_TOKEN replaces an inherited value" eval '[[ "$t2" =~ ^[0-9]+$ ]]'
check "DLOCK_FENCING_TOKEN grows between runs ($t1 < $t2)" \
	eval '[[ "$t1$t2" =~ ^[0-9]+$ ]] && [ "$t1" -lt "$t2" ]'

# ------------------------------------------------------------ contention

hold busy h1
check "first dlock runs its command" [ -e "$tmp/h1.started" ]
rm -f "$tmp/ran"
expect_rc "--no-wait on a held lock exits 75" 75 --no-wait busy -- touch "$tmp/ran"
check "--no-wait on a held lock returns at once (${ms} ms)" [ "$ms" -lt 2000 ]
check "--no-wait on a held lock says so, NAME quoted" contains "$err" "^dlock: lock 'busy' is held elsewhere$"
check "the conflicting command did not run" [ ! -e "$tmp/ran" ]
check "nothing on stdout on conflict" empty "$out"
expect_rc "-n is --no-wait" 75 -n busy -- true
expect_rc "--conflict-exit-code 9 gives 9" 9 --conflict-exit-code 9 --no-wait busy -- true
expect_rc "--conflict-exit-code 0 gives 0" 0 --conflict-exit-code 0 --no-wait busy -- true
expect_rc "--quiet conflict exits 75" 75 --quiet --no-wait busy -- true
check "--quiet conflict prints nothing" empty "$err"
expect_rc "--wait 300ms on a held lock exits 75" 75 --wait 300ms busy -- touch "$tmp/ran"
check "--wait 300ms gives up after about 300 ms (${ms} ms)" eval '[ "$ms" -ge 250 ] && [ "$ms" -lt 2000 ]'
check "an expired wait says so, NAME quoted" contains "$err" "^dlock: timed out after 300ms waiting for lock 'busy'$"
expect_rc "--wait 0.3 (seconds) on a held lock exits 75" 75 --wait 0.3 busy -- true
check "... after 300 ms" contains "$err" "^dlock: timed out after 300ms waiting for lock 'busy'$"
check "the timed-out command did not run" [ ! -e "$tmp/ran" ]
expect_rc "another lock name is not blocked" 0 --no-wait other -- true

# A second dlock waits, then runs once the first has ended.
"$DLOCK" --wait 10s busy -- sh -c 'echo second >>"$1"' sh "$tmp/h1.log" 2>"$tmp/w.err" &
waiter=$!
# Not synchronisation (the order checked below holds whatever the timing):
# the pause only makes it likely that the waiter is really waiting.
sleep 0.3
check "the waiter has not run while the lock is held" eval '! grep -q second "$tmp/h1.log"'
release "$hold_pid" h1
check "first dlock exits with its command's status" [ "$hold_rc" -eq 0 ]
wait "$waiter"
check "the waiter got the lock and ran with --wait 10s" [ "$?" -eq 0 ]
printf 'hold start\nhold end\nsecond\n' >"$tmp/expected"
check "the waiter ran after the first command ended" cmp -s "$tmp/h1.log" "$tmp/expected"
expect_rc "the lock is free again" 0 --no-wait busy -- true

# ---------------------------------------------------------------- signals

# SIGTERM to dlock reaches COMMAND, whose trap decides the exit status.
rm -f "$tmp/trapped" "$tmp/sig.started"
"$DLOCK" sig -- sh -c 'trap "touch \"$1\"; exit 7" TERM; : >"$2"; while :; do sleep 0.05; done' \
	sh "$tmp/trapped" "$tmp/sig.started" 2>"$tmp/sig.err" &
pid=$!
await_file "$tmp/sig.started"
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM to dlock is forwarded to COMMAND" [ -e "$tmp/trapped" ]
check "dlock then exits with COMMAND's status (7)" [ "$rc" -eq 7 ]

# Without a trap, COMMAND dies of the forwarded signal.
"$DLOCK" sig -- "$holder" "$tmp/sig2.started" "$tmp/sig2.go" &
pid=$!
await_file "$tmp/sig2.started"
kill -TERM "$pid"
wait "$pid"
check "SIGTERM kills COMMAND: dlock exits 143" [ "$?" -eq 143 ]
expect_rc "the lock is released after a forwarded signal" 0 --no-wait sig -- true

# SIGTERM while waiting for the lock ends dlock promptly, COMMAND unrun.
hold busy h2
rm -f "$tmp/ran"
"$DLOCK" busy -- touch "$tmp/ran" 2>/dev/null &
pid=$!
sleep 0.2 # not synchronisation: the result is the same whether it waits yet
t0=$(now_ms)
kill -TERM "$pid"
wait "$pid"
rc=$?
ms=$(($(now_ms) - t0))
check "SIGTERM while waiting exits 143 (got $rc)" [ "$rc" -eq 143 ]
check "SIGTERM while waiting ends dlock at once (${ms} ms)" [ "$ms" -lt 2000 ]
check "the waiting command never ran" [ ! -e "$tmp/ran" ]
release "$hold_pid" h2

# If dlock dies, COMMAND must not run on without the lock.
rm -f "$tmp/orphan"
"$DLOCK" orphan -- sh -c 'echo $$ >"$1.tmp"; mv "$1.tmp" "$1"; exec "$2" "$3" "$4"' \
	sh "$tmp/orphan" "$holder" "$tmp/orphan.started" "$tmp/orphan.go" &
pid=$!
await_file "$tmp/orphan.started"
read -r orphan <"$tmp/orphan"
{ kill -KILL "$pid"; wait "$pid"; } 2>/dev/null # without bash's "Killed" notice
check "COMMAND is killed when dlock is killed" await_gone "$orphan"
expect_rc "the lock is free once dlock is killed" 0 --no-wait orphan -- true

# ------------------------------------------------- read-write (--shared)

hold rw r1 --shared
expect_rc "--shared beside a --shared holder runs at once" 0 --shared --no-wait rw -- true
expect_rc "-s is --shared" 0 -s -n rw -- true
rm -f "$tmp/ran"
expect_rc "--exclusive on a read-held lock exits 75" 75 --exclusive --no-wait rw -- touch "$tmp/ran"
check "... saying it is held elsewhere" contains "$err" "^dlock: lock 'rw' is held elsewhere$"
check "... and the writer's command did not run" [ ! -e "$tmp/ran" ]
"$DLOCK" -x --wait 10s rw -- sh -c 'echo writer >>"$1"' sh "$tmp/r1.log" 2>"$tmp/rw.err" &
rw_writer=$!
release "$hold_pid" r1
check "the --shared holder passes on its command's status" [ "$hold_rc" -eq 0 ]
wait "$rw_writer"
rw_rc=$?
check "a waiting --exclusive gets the lock once the reader ends (exit $rw_rc)" [ "$rw_rc" -eq 0 ]
printf 'hold start\nhold end\nwriter\n' >"$tmp/expected"
check "... after the reader's command, not during it" cmp -s "$tmp/r1.log" "$tmp/expected"
hold rw w1 -x
expect_rc "--shared on a write-held lock exits 75" 75 --shared --no-wait rw -- true
expect_rc "-x on a write-held lock exits 75" 75 -x -n rw -- true
expect_rc "--shared keeps --conflict-exit-code" 9 -s -n -E 9 rw -- true
release "$hold_pid" w1
expect_rc "--shared with --exclusive is a usage error" 64 -s -x rw -- true
check "... saying they do not go together" contains "$err" "^dlock: --shared and --exclusive cannot be used together"
dl -x rwtoken -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
tw=$(cat "$out")
dl -s rwtoken -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
tr=$(cat "$out")
check "a reader's DLOCK_FENCING_TOKEN is the latest writer's ($tw = $tr)" \
	eval '[[ "$tw" =~ ^[0-9]+$ ]] && [ "$tw" = "$tr" ]'
if [ -n "${DLOCK_TEST_PG_URI:-}" ]; then
	pg=(--uri "$DLOCK_TEST_PG_URI")
	hold "$run_id-rw" p1 "${pg[@]}" --shared
	expect_rc "postgres: --shared beside a --shared holder runs at once" 0 "${pg[@]}" -s -n "$run_id-rw" -- true
	expect_rc "postgres: --exclusive on a read-held lock exits 75" 75 "${pg[@]}" -x -n "$run_id-rw" -- true
	release "$hold_pid" p1
	check "postgres: the --shared holder passes on its command's status" [ "$hold_rc" -eq 0 ]
	dl "${pg[@]}" -s "$run_id-rw" -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
	check "postgres: a reader has no DLOCK_FENCING_TOKEN (read fencing none)" [ "$(cat "$out")" = unset ]
	dl "${pg[@]}" -x "$run_id-rw" -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
	check "postgres: a writer has one" eval '[[ "$(cat "$out")" =~ ^[0-9]+$ ]]'
else
	echo "skip - --shared on postgres:// (DLOCK_TEST_PG_URI unset)"
fi
if [ -n "${DLOCK_TEST_REDIS_URI:-}" ]; then
	rwname="rw-$$-$RANDOM"
	hold "$rwname" rr --uri "$DLOCK_TEST_REDIS_URI" --shared
	expect_rc "--shared on Redis beside a Redis --shared holder runs at once" 0 \
		--uri "$DLOCK_TEST_REDIS_URI" -s -n "$rwname" -- true
	expect_rc "--exclusive on a Redis read-held lock exits 75" 75 --uri "$DLOCK_TEST_REDIS_URI" -x -n "$rwname" -- true
	expect_rc "... and so does a mutex (plain dlock) there" 75 --uri "$DLOCK_TEST_REDIS_URI" -n "$rwname" -- true
	release "$hold_pid" rr
	expect_rc "--exclusive on Redis once the reader ended" 0 --uri "$DLOCK_TEST_REDIS_URI?fair=0" -x -n "$rwname" -- true
else
	echo "skip - --shared on Redis (DLOCK_TEST_REDIS_URI unset)"
fi
if [ -n "${DLOCK_TEST_REDLOCK_URI:-}" ]; then
	expect_rc "--shared on RedLock, which has no read-write locks, exits 78" 78 --uri "$DLOCK_TEST_REDLOCK_URI" -s rw -- true
	check "... saying so" contains "$err" "^dlock: --shared: .*read-write"
else
	echo "skip - --shared on a backend without read-write locks (DLOCK_TEST_REDLOCK_URI unset)"
fi
# ZooKeeper readers: Curator's __READ__ nodes, no fencing token for a reader (read fencing none).
if [ -n "${DLOCK_TEST_ZK_URI:-}" ]; then
	zk_rw=${DLOCK_TEST_ZK_URI#zk://}
	zk_rw="zk://${zk_rw%%[/?]*}/dlock-cli-rw-$$-$RANDOM"
	hold zrw zr1 --uri "$zk_rw" --shared
	expect_rc "zk: --shared beside a --shared holder runs at once" 0 --uri "$zk_rw" -s -n zrw -- true
	expect_rc "zk: --exclusive on a read-held lock exits 75" 75 --uri "$zk_rw" -x -n zrw -- true
	dl --uri "$zk_rw" -s -n zrw -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
	check "zk: a reader has no DLOCK_FENCING_TOKEN ($(cat "$out"))" eval '[ "$rc" -eq 0 ] && [ "$(cat "$out")" = unset ]'
	release "$hold_pid" zr1
	check "zk: the --shared holder passes on its command's status" [ "$hold_rc" -eq 0 ]
	dl --uri "$zk_rw" -x -n zrw -- sh -c 'echo "${DLOCK_FENCING_TOKEN-unset}"'
	check "zk: a writer's DLOCK_FENCING_TOKEN is a number ($(cat "$out"))" \
		eval '[ "$rc" -eq 0 ] && [[ "$(cat "$out")" =~ ^[0-9]+$ ]]'
else
	echo "skip - zk:// --shared (DLOCK_TEST_ZK_URI unset)"
fi

# ------------------------------------------------- semaphore (--limit N)

# limit_checks LABEL NAME [DLOCK ARGS...]: two holders of a 2-permit semaphore; the third waits or is refused.
limit_checks() {
	local label=$1 name=$2 first second
	shift 2
	hold "$name" "$label-l1" "$@" --limit 2
	first=$hold_pid
	hold "$name" "$label-l2" "$@" -l 2
	second=$hold_pid
	rm -f "$tmp/ran"
	expect_rc "$label: a third holder of --limit 2 exits 75" 75 "$@" --limit 2 -n "$name" -- touch "$tmp/ran"
	check "$label: ... and its command did not run" [ ! -e "$tmp/ran" ]
	expect_rc "$label: another N while the name is in use exits 64" 64 "$@" --limit 3 -n "$name" -- true
	check "$label: ... naming both numbers" contains "$err" "2.*3\|3.*2"
	dl "$@" -n "$name" -- true
	check "$label: a plain lock on a semaphore's name is refused (64) or busy (75): $rc" \
		eval '[ "$rc" -eq 64 ] || [ "$rc" -eq 75 ]'
	"$DLOCK" "$@" --limit 2 --wait 20s "$name" -- sh -c 'echo third >>"$1"' sh "$tmp/$label-l1.log" \
		2>"$tmp/$label-l3.err" &
	local third=$!
	release "$first" "$label-l1"
	check "$label: a --limit holder passes on its command's status" [ "$hold_rc" -eq 0 ]
	wait "$third"
	local third_rc=$?
	check "$label: a waiting third holder gets the permit once one ends (exit $third_rc)" [ "$third_rc" -eq 0 ]
	printf 'hold start\nhold end\nthird\n' >"$tmp/expected"
	check "$label: ... after the first holder's command, not during it" cmp -s "$tmp/$label-l1.log" "$tmp/expected"
	release "$second" "$label-l2"
	expect_rc "$label: once free, a new N applies" 0 "$@" --limit 3 -n "$name" -- true
}

limit_checks file "sem-$$"
dl --limit 2 "sem-$$-slot" -- sh -c 'echo "${DLOCK_PERMIT_SLOT-unset} ${DLOCK_FENCING_TOKEN-unset}"'
check "file: a permit's DLOCK_PERMIT_SLOT and DLOCK_FENCING_TOKEN are set ($(cat "$out"))" \
	eval '[ "$rc" -eq 0 ] && [[ "$(cat "$out")" =~ ^[01]\ [0-9]+$ ]]'
expect_rc "--limit 0 is a usage error" 64 --limit 0 sem -- true
check "... saying what N may be" contains "$err" "^dlock: --limit: '0' is not a number of permits from 1 to 1024"
expect_rc "--limit 1025 is a usage error" 64 --limit 1025 sem -- true
expect_rc "--limit x is a usage error" 64 --limit x sem -- true
expect_rc "--limit with --shared is a usage error" 64 --limit 2 -s sem -- true
check "... saying they do not go together" contains "$err" "^dlock: --limit cannot be used with --shared or --exclusive"
expect_rc "--exclusive with --limit is a usage error" 64 -x --limit 2 sem -- true
if [ -n "${DLOCK_TEST_REDIS_URI:-}" ]; then
	limit_checks redis "sem-$$-$RANDOM" --uri "$DLOCK_TEST_REDIS_URI"
else
	echo "skip - --limit on Redis (DLOCK_TEST_REDIS_URI unset)"
fi
if [ -n "${DLOCK_TEST_PG_URI:-}" ]; then
	limit_checks postgres "sem-$$-$RANDOM" --uri "$DLOCK_TEST_PG_URI"
else
	echo "skip - --limit on postgres:// (DLOCK_TEST_PG_URI unset)"
fi
if [ -n "${DLOCK_TEST_ZK_URI:-}" ]; then
	limit_checks zk "sem-$$-$RANDOM" --uri "$DLOCK_TEST_ZK_URI"
	dl --uri "$DLOCK_TEST_ZK_URI" --limit 2 "sem-$$-zslot" -- sh -c 'echo "${DLOCK_PERMIT_SLOT-unset}"'
	check "zk: a permit has no DLOCK_PERMIT_SLOT (permit fencing none)" [ "$(cat "$out")" = unset ]
else
	echo "skip - --limit on zk:// (DLOCK_TEST_ZK_URI unset)"
fi
if [ -n "${DLOCK_TEST_REDLOCK_URI:-}" ]; then
	expect_rc "--limit on RedLock, which has no semaphores, exits 78" 78 --uri "$DLOCK_TEST_REDLOCK_URI" --limit 2 sem -- true
	check "... saying so" contains "$err" "^dlock: --limit: .*semaphores"
else
	echo "skip - --limit on a backend without semaphores (DLOCK_TEST_REDLOCK_URI unset)"
fi

# ------------------------------------------------------------- lost lock

# lose_lock TAG SCRIPT [DLOCK ARGS...]: run `sh -c SCRIPT sh $tmp/TAG` under
# dlock (SCRIPT must create $1.started, then keep running), stop dlock past
# its 300 ms lease, continue it and wait.  Sets rc, ms (since continued).
lose_lock() {
	local tag=$1 script=$2 pid t0
	shift 2
	rm -f "$tmp/$tag".*
	"$DLOCK" --uri mem://lost --ttl 300ms "$@" lease -- sh -c "$script" sh "$tmp/$tag" \
		>"$out" 2>"$err" &
	pid=$!
	await_file "$tmp/$tag.started"
	kill -STOP "$pid"
	sleep 1 # the scenario itself: the lease runs out while dlock is stopped
	t0=$(now_ms)
	kill -CONT "$pid"
	wait "$pid"
	rc=$?
	ms=$(($(now_ms) - t0))
}

lose_lock lost1 'trap "touch \"$1.termed\"; exit 0" TERM; : >"$1.started"; while :; do sleep 0.05; done'
check "lost lock exits 76 although COMMAND exited 0 (got $rc)" [ "$rc" -eq 76 ]
check "lost lock sends SIGTERM to COMMAND" [ -e "$tmp/lost1.termed" ]
check "lost lock is reported with its reason, NAME quoted" \
	contains "$err" "^dlock: lock 'lease' lost ([a-z ]*).*; stopping the command$"
check "lost lock is reported on one line of dlock's" [ "$(grep -c "^dlock: .*lost" "$err")" -eq 1 ]
check "lost lock writes nothing on stdout" empty "$out"

lose_lock lost2 'echo $$ >"$1.pid"; trap "" TERM; : >"$1.started"; while :; do sleep 0.05; done' \
	--grace 400ms
read -r lost_child <"$tmp/lost2.pid"
check "lost lock, COMMAND ignoring SIGTERM: exits 76 (got $rc)" [ "$rc" -eq 76 ]
check "... COMMAND gets SIGKILL after --grace 400ms (${ms} ms)" \
	eval '[ "$ms" -ge 350 ] && [ "$ms" -lt 3000 ]'
check "... and is gone" await_gone "$lost_child"

lose_lock lost3 'trap "touch \"$1.termed\"; exit 0" TERM; : >"$1.started"; while :; do sleep 0.05; done' --shared
check "a lost read lock exits 76 (got $rc)" [ "$rc" -eq 76 ]
check "... and sends SIGTERM to COMMAND" [ -e "$tmp/lost3.termed" ]
check "... reported like a lost lock" contains "$err" "^dlock: lock 'lease' lost ([a-z ]*).*; stopping the command$"

lose_lock lost4 'trap "touch \"$1.termed\"; exit 0" TERM; : >"$1.started"; while :; do sleep 0.05; done' elect
check "a lost leadership exits 76 (got $rc)" [ "$rc" -eq 76 ]
check "... and sends SIGTERM to COMMAND" [ -e "$tmp/lost4.termed" ]
check "... reported as the leadership lost" contains "$err" "^dlock: leadership of 'lease' lost ([a-z ]*).*; stopping the command$"

# A ZooKeeper lock node deleted by another client (anyone may, without
# credentials): the holder sees it at once and stops COMMAND.  Needs the
# server of DLOCK_TEST_ZK_URI and the Java ZooKeeper shell to delete it.
zk_jar=/usr/share/java/zookeeper.jar
if [ -n "${DLOCK_TEST_ZK_URI:-}" ] && command -v java >/dev/null 2>&1 && [ -r "$zk_jar" ]; then
	zk_hosts=${DLOCK_TEST_ZK_URI#zk://}
	zk_hosts=${zk_hosts%%[/?]*}
	zk_hosts=${zk_hosts#*@}
	zk_base=/dlock-cli-$$-$RANDOM
	zkcli() {
		java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$zk_jar" org.apache.zookeeper.ZooKeeperMain \
			-server "$zk_hosts" "$@" >/dev/null 2>&1
	}
	rm -f "$tmp/zkdel".*
	"$DLOCK" --uri "zk://$zk_hosts$zk_base" zkdel -- sh -c ': >"$1.started"; exec sleep 25' sh "$tmp/zkdel" \
		>"$out" 2>"$err" &
	pid=$!
	await_file "$tmp/zkdel.started"
	t0=$(now_ms)
	zkcli deleteall "$zk_base/zkdel" # the lock's parent and the holder's node in it
	wait "$pid"
	rc=$?
	ms=$(($(now_ms) - t0))
	check "zk: lock node deleted by another client: dlock exits 76 (got $rc)" [ "$rc" -eq 76 ]
	check "... COMMAND is stopped long before it would end (${ms} ms)" [ "$ms" -lt 15000 ]
	check "... the loss is reported" contains "$err" "lost.*deleted"
	zkcli deleteall "$zk_base"
else
	echo "skip - zk:// lock node deleted (DLOCK_TEST_ZK_URI unset, or no java and $zk_jar)"
fi

# ------------------------------------------------------------------ verbs

# JSON checks need python3 (ci/install-deps.sh tests).
if command -v python3 >/dev/null 2>&1; then has_python=1; else has_python=0; fi
# json_valid FILE: FILE is one JSON document.
json_valid() { python3 -c 'import json,sys; json.load(sys.stdin)' <"$1" 2>/dev/null; }
# json_true FILE EXPR: the Python EXPR over the document d (and the bytes
# of $jname, when set, as `name`) is true.
json_true() {
	jname=${jname:-} python3 -c 'import json,os,sys
d = json.load(sys.stdin)
name = os.environb.get(b"jname", b"")
sys.exit(0 if eval("(" + sys.argv[1] + ")") else 1)' "$2" <"$1" 2>/dev/null
}
# json_check DESCRIPTION FILE EXPR: json_true, skipped loudly without python3.
json_check() {
	if [ "$has_python" = 1 ]; then check "$1" json_true "$2" "$3"; else echo "skip - $1 (no python3)"; fi
}
# with_param URI KEY=VALUE: the URI with one more parameter.
with_param() { case $1 in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac; }

# The rule: a first operand equal to a verb is the verb, unless "--" follows.
expect_rc "'dlock status -- COMMAND' runs COMMAND under the lock named status" 0 status -- sh -c 'echo ran'
check "... COMMAND ran" contains "$out" "^ran$"
hold status vs1
expect_rc "... it is the lock named status: -n while it is held exits 75" 75 -n status -- true
expect_rc "'dlock list -- true' runs true under the lock named list" 0 -n list -- true
release "$hold_pid" vs1
expect_rc "'dlock break -- true' runs true under the lock named break" 0 break -- true
expect_rc "'dlock list --' is a lock named list without COMMAND: usage error" 64 list --
expect_rc "status without NAME is a usage error" 64 status
check "... saying NAME is missing" contains "$err" "^dlock: status: missing lock NAME$"
expect_rc "break with two names is a usage error" 64 break a b
expect_rc "gc with two prefixes is a usage error" 64 gc a b
expect_rc "--dry-run with status is a usage error" 64 status --dry-run a
check "... naming the option" contains "$err" "^dlock: status: option '--dry-run' is for gc$"
expect_rc "--dry-run when running a command is a usage error" 64 --dry-run a -- true
expect_rc "gc --json is a usage error" 64 gc --json
expect_rc "status with an empty NAME is a usage error" 64 status ""
expect_rc "status with --wait is a usage error" 64 status --wait 1s a
check "... naming the option" contains "$err" "^dlock: status: option '--wait' is for running a command under a lock$"
expect_rc "--limit before the verb is a usage error too" 64 --limit 2 status a
expect_rc "--json when running a command is a usage error" 64 --json a -- true
expect_rc "--max-hold below --min-hold is a usage error" 64 --min-hold 2s --max-hold 1s a -- true
expect_rc "--max-hold 0 is a usage error" 64 --max-hold 0 a -- true
expect_rc "--identity with a control byte is a usage error" 64 --identity "$(printf 'a\tb')" a -- true
expect_rc "--identity of 129 bytes is a usage error" 64 --identity "$(printf 'i%.0s' {1..129})" a -- true
expect_rc "--identity of 128 bytes is taken" 0 --identity "$(printf 'i%.0s' {1..128})" a -- true
dl --uri mem://x status a
check "a verb on mem:// sees the process's own namespace: free, or no inspection (exit $rc)" \
	eval '[ "$rc" -eq 1 ] || { [ "$rc" -eq 78 ] && contains "$err" "has no inspection"; }'

# show:// answers fixed holders with hostile bytes in every string.
SHOW_CLI=${3:-}
hostile_text='id\\x1b\[31m\\x07\\x0a\\\\"\\xff-\\xc3\\xa9'
if [ -n "$SHOW_CLI" ]; then
	show() { local t0; t0=$(now_ms); "$SHOW_CLI" --uri show://x "$@" >"$out" 2>"$err"; rc=$?; ms=$(($(now_ms) - t0)); }
	show status held-1
	check "show: status of a held name exits 0 (got $rc)" [ "$rc" -eq 0 ]
	check "show: ... no terminal escape, bell or other control byte reaches stdout" \
		eval '! LC_ALL=C grep -q "[[:cntrl:]]" <(tr -d "\n" <"$out")'
	check "show: ... every byte outside printable ASCII as \\xNN, the backslash as \\\\" \
		contains "$out" "^  identity: $hostile_text$"
	check "show: ... the resource escaped too" contains "$out" '^resource: show:\\x1b\]0;title\\x07$'
	check "show: ... acquired in ISO 8601 UTC" contains "$out" "^  acquired: 2025-11-25T14:57:31.123Z$"
	check "show: ... lease left, token, mode, session" eval 'contains "$out" "^  lease left: 29.500s$" &&
		contains "$out" "^  token: 18446744073709551615$" && contains "$out" "^  mode: shared$" &&
		contains "$out" "^  session: $hostile_text$"'
	check "show: ... kind and waiters" eval 'contains "$out" "^kind: rwlock$" && contains "$out" "^waiters: 3$"'
	check "show: ... both holders, the second from its owner record" eval 'contains "$out" "^holder 2:$" &&
		contains "$out" "^  identity: job 1$" && contains "$out" "^  host: web-1$" && contains "$out" "^  pid: 4242$"'
	check "show: ... unknown fields left out" eval '! grep -q "slot:" "$out" && [ "$(grep -c acquired: "$out")" -eq 1 ]'
	show status free
	check "show: status of a free name exits 1 (got $rc)" [ "$rc" -eq 1 ]
	check "show: ... and says so" contains "$out" "^held: no$"
	show status -q held-1
	check "show: status -q: exit 0 and nothing on stdout" eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ]'
	show status --json held-1
	if [ "$has_python" = 1 ]; then check "show: status --json is valid JSON" json_valid "$out"; fi
	json_check "show: ... a string that is not UTF-8 has U+FFFD and its exact bytes in KEY_hex" "$out" \
		'd["holders"][0]["identity"] == "id\x1b[31m\a\n\\\"\ufffd-\u00e9" and
		 bytes.fromhex(d["holders"][0]["identity_hex"]) == b"id\x1b[31m\a\n\\\"\xff-\xc3\xa9"'
	json_check "show: ... a valid string has no KEY_hex; unknown fields are null" "$out" \
		'"name_hex" not in d and d["held"] and d["waiters"] == 3 and d["holders"][1]["acquired"] is None and
		 d["holders"][1]["pid"] == 4242 and d["holders"][0]["token"] == 18446744073709551615'
	check "show: ... one line, no raw control byte" eval '[ "$(wc -l <"$out")" -eq 1 ] &&
		! LC_ALL=C grep -q "[[:cntrl:]]" <(tr -d "\n" <"$out")'
	show list
	check "show: list exits 0 with one line per lock ($(wc -l <"$out"))" eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$out")" -eq 3 ]'
	check "show: ... the name escaped, fields separated by tabs" \
		contains "$out" "^held-\\\\x1b\[2J\\\\x09\\\\xff	show:.*	rwlock	2	$hostile_text,job 1$"
	check "show: ... a lock without a name last, its name empty" contains "$out" "^	show:unnamed	mutex	1	?$"
	show list --json
	json_check "show: list --json is an array, the names' bytes in name_hex, a missing name null" "$out" \
		'len(d) == 3 and bytes.fromhex(d[0]["name_hex"]) == b"held-\x1b[2J\t\xff" and d[2]["name"] is None'
	show list held-p
	check "show: list NAME-PREFIX keeps the names that start with it" eval '[ "$(cat "$out")" = "$(printf "held-plain\tshow:\\\\x1b]0;title\\\\x07\trwlock\t2\t%s,job 1" "$(printf "id\\\\x1b[31m\\\\x07\\\\x0a\\\\\\\\\"\\\\xff-\\\\xc3\\\\xa9")")" ]'
	show break held-1
	check "show: break of a held name exits 0 (got $rc)" [ "$rc" -eq 0 ]
	check "show: ... saying how many holders and what the backend did" \
		contains "$out" "^broke lock 'held-1': 2 holders removed (session: each holder's session was ended"
	show break free
	check "show: break of a free name exits 1 (got $rc)" [ "$rc" -eq 1 ]
	check "show: ... saying it was free" contains "$out" "^lock 'free' was free: nothing to break$"
	show break --json held-1
	json_check "show: break --json" "$out" 'd == {"name": "held-1", "broken": 2, "effect": "session"}'
	"$SHOW_CLI" --uri 'show://x?denied' break "$(printf 'x\033[2Jy')" >"$out" 2>"$err"
	rc=$?
	check "show: break refused by the server exits 77 (got $rc)" [ "$rc" -eq 77 ]
	check "show: ... the server's message with the name escaped" \
		eval 'contains "$err" "may not break .x\\\\x1b\[2Jy." && ! LC_ALL=C grep -q "[[:cntrl:]]" <(tr -d "\n" <"$err")'
else
	echo "skip - verbs on show:// (no dlock_show_cli given)"
fi

# inspect_checks LABEL URI: status, list and break of real holders.
inspect_checks() {
	local label=$1 uri=$2 name="insp-$$-$RANDOM" hpid tok t0 acquired hostile long
	dl --uri "$uri" status "$name"
	if [ "$rc" -eq 78 ] && contains "$err" "has no inspection"; then
		check "$label: status where the backend has no inspection exits 78, saying so" \
			eval 'contains "$err" "^dlock: status: .*has no inspection" && [ ! -s "$out" ]'
		echo "skip - $label: status, list and break (the backend has no inspection)"
		return
	fi
	check "$label: status of a free name exits 1 (got $rc)" [ "$rc" -eq 1 ]
	check "$label: ... saying it is free" contains "$out" "^held: no$"
	rm -f "$tmp/$label-i".*
	"$DLOCK" --uri "$(with_param "$uri" "identity=cli-$label-holder")" --ttl 3s "$name" -- \
		sh -c 'echo "${DLOCK_FENCING_TOKEN-}" >"$1.token"; exec "$2" "$1.started" "$1.go"' \
		sh "$tmp/$label-i" "$holder" >/dev/null 2>"$tmp/$label-i.err" &
	hpid=$!
	await_file "$tmp/$label-i.started"
	tok=$(cat "$tmp/$label-i.token")
	# What the backend says it sees (status --json, "sees").
	dl --uri "$uri" status --json "$name"
	sees=" $(python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["sees"]))' <"$out" 2>/dev/null) "
	json_check "$label: status --json: name, held, identity, pid, token where seen ($sees)" "$out" \
		"d['name'] == '$name' and d['held'] and len(d['holders']) == 1 and
		 d['holders'][0]['identity'] == 'cli-$label-holder' and d['holders'][0]['pid'] == $hpid and
		 ('token' not in d['sees'] or str(d['holders'][0]['token']) == '$tok')"
	dl --uri "$uri" status "$name"
	check "$label: status of a held name exits 0 (got $rc)" [ "$rc" -eq 0 ]
	check "$label: ... the holder's identity, from identity= in its URI" contains "$out" "^  identity: cli-$label-holder$"
	check "$label: ... its pid ($hpid)" contains "$out" "^  pid: $hpid$"
	if [[ $sees == *" token "* ]]; then
		check "$label: ... its token, its DLOCK_FENCING_TOKEN ($tok)" contains "$out" "^  token: $tok$"
	else
		echo "skip - $label: token (the backend does not say it sees it)"
	fi
	if [[ $sees == *" acquired "* ]]; then
		acquired=$(sed -n 's/^  acquired: //p' "$out")
		check "$label: ... when it acquired, within a minute of now ($acquired)" \
			eval 't=$(date -u -d "$acquired" +%s) && d=$(($(date -u +%s) - t)) && [ "${d#-}" -lt 60 ]'
	else
		echo "skip - $label: acquisition time (the backend does not see it)"
	fi
	resource=$(sed -n 's/^resource: //p' "$out")
	dl --uri "$uri" list "$name"
	if [ "$rc" -eq 78 ] && contains "$err" "has no listing"; then
		echo "skip - $label: list (the backend cannot enumerate)"
	elif [[ $sees != *" names "* ]]; then
		check "$label: list NAME-PREFIX lists nothing where names are not kept on the server" \
			eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ]'
		dl --uri "$uri" list
		check "$label: list shows the lock by its resource, name empty, with its holder" \
			eval '[ "$rc" -eq 0 ] && grep -q -F -x "$(printf "\t%s\tmutex\t1\tcli-%s-holder" "$resource" "$label")" "$out"'
		dl --uri "$uri" list --json
		json_check "$label: list --json has it, its name null" "$out" \
			"[i['name'] for i in d if i['resource'] == '$resource'] == [None]"
	else
		check "$label: list NAME-PREFIX shows the held name with its holder" \
			eval '[ "$rc" -eq 0 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q "^$name	.*	1	cli-$label-holder$" "$out"'
		dl --uri "$uri" list "$name-none"
		check "$label: ... and nothing for a prefix no held name has" eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ]'
		dl --uri "$uri" list --json "$name"
		json_check "$label: list --json is an array of the held names" "$out" "[i['name'] for i in d] == ['$name']"
	fi
	t0=$(now_ms)
	dl --uri "$uri" break "$name"
	if [ "$rc" -eq 78 ]; then
		check "$label: break where the backend cannot exits 78, saying so" contains "$err" "^dlock: break: "
		release "$hpid" "$label-i"
	else
		check "$label: break of a held name exits 0 (got $rc)" [ "$rc" -eq 0 ]
		check "$label: ... saying what was done" contains "$out" "^broke lock '$name': 1 holder removed ("
		wait "$hpid"
		local hrc=$? hms=$(($(now_ms) - t0))
		check "$label: ... the holder's dlock stops its command and exits 76 (got $hrc)" [ "$hrc" -eq 76 ]
		check "$label: ... within a renewal period (${hms} ms)" [ "$hms" -lt 6000 ]
		check "$label: ... and says the lock was lost" contains "$tmp/$label-i.err" "^dlock: lock '$name' lost"
		dl --uri "$uri" break "$name"
		check "$label: break of a free name exits 1 (got $rc)" [ "$rc" -eq 1 ]
		dl --uri "$uri" "$name" -- sh -c 'echo "${DLOCK_FENCING_TOKEN-}"'
		check "$label: the next holder's token is larger ($tok < $(cat "$out"))" \
			eval '[ -z "$tok" ] || [ "$(cat "$out")" -gt "$tok" ]'
	fi
	# Hostile bytes in a name and an identity.
	hostile=$(printf 'ins\033[31m\a\\x\377-%s' "$$")
	rm -f "$tmp/$label-h".*
	"$DLOCK" --uri "$uri" --identity "$(printf 'who\\\377"&id=x%%41')" "$hostile" -- "$holder" "$tmp/$label-h.started" "$tmp/$label-h.go" &
	hpid=$!
	await_file "$tmp/$label-h.started"
	dl --uri "$uri" status "$hostile"
	check "$label: status of a hostile name exits 0 (got $rc)" [ "$rc" -eq 0 ]
	check "$label: ... the name and identity escaped, no control byte on stdout" \
		eval 'contains "$out" "^name: ins\\\\x1b\[31m\\\\x07\\\\\\\\x\\\\xff-$$$" &&
		contains "$out" "^  identity: who\\\\\\\\\\\\xff\"&id=x%41$" && ! LC_ALL=C grep -q "[[:cntrl:]]" <(tr -d "\n" <"$out")'
	dl --uri "$uri" status --json "$hostile"
	jname=$hostile json_check "$label: ... --json gives the name's exact bytes" "$out" \
		'bytes.fromhex(d["name_hex"]) == name and d["holders"][0]["identity_hex"] == "77686f5cff222669643d78253431"'
	release "$hpid" "$label-h"
	long=$(printf 'n%.0s' {1..1024})
	expect_rc "$label: status of a 1,024-byte name is free (1)" 1 --uri "$uri" status "$long"
	expect_rc "$label: status of a 1,025-byte name is a usage error" 64 --uri "$uri" status "${long}n"
}

# hold_checks LABEL URI: --min-hold keeps the lock after COMMAND ended, --max-hold loses it.
hold_checks() {
	local label=$1 uri=$2 name="hold-$$-$RANDOM" hpid t0
	rm -f "$tmp/$label-m".*
	t0=$(now_ms)
	"$DLOCK" --uri "$uri" --min-hold 2s "$name-min" -- touch "$tmp/$label-m.ran" &
	hpid=$!
	await_file "$tmp/$label-m.ran"
	sleep 0.5 # COMMAND has ended; dlock stays for the rest of the 2 s
	expect_rc "$label: --min-hold 2s: another dlock cannot take it after COMMAND ended" 75 \
		--uri "$uri" -n "$name-min" -- true
	dl --uri "$uri" status "$name-min"
	if [ "$rc" -eq 78 ] && contains "$err" "has no inspection"; then
		echo "skip - $label: status during --min-hold (the backend has no inspection)"
	else
		check "$label: ... and status from another dlock shows it held (got $rc)" [ "$rc" -eq 0 ]
	fi
	wait "$hpid"
	local mrc=$? mms=$(($(now_ms) - t0))
	check "$label: ... dlock exits as COMMAND did (got $mrc) after about 2 s (${mms} ms)" \
		eval '[ "$mrc" -eq 0 ] && [ "$mms" -ge 1900 ] && [ "$mms" -lt 6000 ]'
	expect_rc "$label: ... then the name is free" 0 --uri "$uri" -n "$name-min" -- true
	expect_rc "$label: --max-hold 1s -- sleep 30 exits 76" 76 --uri "$uri" --max-hold 1s "$name-max" -- sleep 30
	check "$label: ... after about 1 s (${ms} ms)" eval '[ "$ms" -ge 800 ] && [ "$ms" -lt 5000 ]'
	check "$label: ... saying it was held for its maximum" contains "$err" "^dlock: lock '$name-max' lost (held for its maximum)"
}

# gc_checks LABEL URI: gc of unused names (a dry run first), a held name kept; 78 where nothing is collected.
gc_checks() {
	local label=$1 uri=$2 p="gc-$$-$RANDOM-"
	dl --uri "$uri" -n "${p}a" -- true
	dl --uri "$uri" -n "${p}b" -- true
	hold "${p}held" "$label-gc" --uri "$uri"
	dl --uri "$uri" gc --dry-run "$p"
	if [ "$rc" -eq 78 ]; then
		check "$label: gc where nothing is collected exits 78, saying why" \
			eval 'contains "$err" "^dlock: gc: .*collects nothing" && [ ! -s "$out" ]'
		release "$hold_pid" "$label-gc"
		return
	fi
	if [ "$label" = pg ]; then # advisory mode: only names that no client wrote for 20 minutes
		check "$label: gc --dry-run of names just written exits 0 and lists none" eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ]'
		release "$hold_pid" "$label-gc"
		return
	fi
	check "$label: gc --dry-run exits 0 (got $rc), listing the two free names, not the held one" \
		eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^would remove	${p}[ab]	." "$out")" -eq 2 ] && [ "$(wc -l <"$out")" -eq 2 ]'
	dl --uri "$uri" gc --dry-run "$p"
	check "$label: ... and removes nothing: a second dry run says the same" \
		eval '[ "$(grep -c "^would remove	${p}[ab]	." "$out")" -eq 2 ]'
	dl --uri "$uri" gc "$p"
	check "$label: gc exits 0 (got $rc), saying it removed the two" \
		eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^removed	${p}[ab]	." "$out")" -eq 2 ] && [ "$(wc -l <"$out")" -eq 2 ]'
	dl --uri "$uri" gc "$p"
	check "$label: ... then nothing is left to remove" eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ]'
	expect_rc "$label: ... and the held name is still held" 75 --uri "$uri" -n "${p}held" -- true
	release "$hold_pid" "$label-gc"
	dl --uri "$uri" gc -q "$p"
	check "$label: once released gc takes it, quietly (-q)" eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ]'
	dl --uri "$uri" gc --dry-run "$p"
	check "$label: ... and nothing is left" eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ]'
	dl --uri "$uri" -n "${p}a" -- true
	check "$label: a removed name is taken again" [ "$rc" -eq 0 ]
}

inspect_checks file "file://$tmp/locks"
hold_checks file "file://$tmp/locks"
gc_checks file "file://$tmp/locks"
expect_rc "mem:// has nothing to collect: gc exits 78" 78 --uri mem://x gc
check "... saying why" contains "$err" "^dlock: gc: .*collects nothing"
expect_rc "the URI's min_hold keeps dlock too" 0 --uri "file://$tmp/locks?min_hold=1500" "hold-uri-$$" -- true
check "... for about 1.5 s (${ms} ms)" eval '[ "$ms" -ge 1400 ] && [ "$ms" -lt 5000 ]'
"$DLOCK" --min-hold 20s "hold-sig-$$" -- true &
pid=$!
sleep 0.5 # not synchronisation: the result is the same whether the wait began
t0=$(now_ms)
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM during --min-hold ends dlock at once with 143 (got $rc, $(($(now_ms) - t0)) ms)" \
	eval '[ "$rc" -eq 143 ] && [ $(($(now_ms) - t0)) -lt 2000 ]'
for var in DLOCK_TEST_REDIS_URI DLOCK_TEST_PG_URI DLOCK_TEST_PG_ROW_URI DLOCK_TEST_ZK_URI; do
	if [ -n "${!var:-}" ]; then
		label=${var#DLOCK_TEST_}
		label=$(echo "${label%_URI}" | tr 'A-Z_' 'a-z-')
		inspect_checks "$label" "${!var}"
		hold_checks "$label" "${!var}"
		gc_checks "$label" "${!var}"
	else
		echo "skip - verbs and hold bounds on $var (unset)"
	fi
done

# -------------------------------------------------------------- elections

# The verb rule holds for elect and leader too.
expect_rc "'dlock elect -- COMMAND' runs COMMAND under the lock named elect" 0 elect -- sh -c 'echo ran'
check "... COMMAND ran" contains "$out" "^ran$"
hold elect ve1
expect_rc "... it is the lock named elect: -n while it is held exits 75" 75 -n elect -- true
expect_rc "'dlock leader -- true' runs true under the lock named leader" 0 -n leader -- true
release "$hold_pid" ve1
expect_rc "leader without NAME is a usage error" 64 leader
check "... saying NAME is missing" contains "$err" "^dlock: leader: missing lock NAME$"
expect_rc "elect without '--' is a usage error" 64 elect name true
check "... saying the '--' is expected" contains "$err" "^dlock: expected '--' between NAME and COMMAND"
expect_rc "elect without COMMAND is a usage error" 64 elect name --
for o in --shared --exclusive "--limit 2" "--min-hold 1s" "--max-hold 1s"; do
	# shellcheck disable=SC2086 # $o is an option and its value
	expect_rc "elect $o is a usage error" 64 elect $o name -- true
	check "... saying it is for a lock" contains "$err" "^dlock: elect: option '${o%% *}' is for a lock, not an election$"
done
expect_rc "--limit before elect is a usage error too" 64 --limit 2 elect name -- true
expect_rc "elect --json is a usage error" 64 elect --json name -- true
expect_rc "--value without elect is a usage error" 64 --value v name -- true
check "... saying it goes with elect" contains "$err" "^dlock: --value goes with elect$"
expect_rc "leader --value is a usage error" 64 leader --value v name
expect_rc "--watch without leader is a usage error" 64 --watch name -- true
expect_rc "status --watch is a usage error" 64 status --watch name
expect_rc "leader --watch --quiet is a usage error" 64 leader --watch -q name
expect_rc "leader with --wait is a usage error" 64 leader --wait 1s name
value_max=$(printf 'v%.0s' {1..1024})
expect_rc "elect --value of 1,025 bytes is a usage error" 64 --uri mem://e elect --value "${value_max}v" name -- true
check "... saying the bound" contains "$err" "^dlock: --value: at most 1024 bytes, got 1025$"
expect_rc "elect --value of 1,024 bytes is taken (mem://)" 0 --uri mem://e elect --value "$value_max" name -- true
expect_rc "elect on a backend without elections exits 78" 78 elect name -- true
check "... saying so" contains "$err" "^dlock: elect: .*has no leader election"
expect_rc "leader on a backend without elections exits 78" 78 leader name
check "... saying so" contains "$err" "^dlock: leader: .*has no leader election"
# mem:// leads inside one process: the term reaches COMMAND.
DLOCK_LEADER_TERM=stale dl --uri mem://e elect --value v name -- sh -c 'echo "$DLOCK_LEADER_TERM $DLOCK_FENCING_TOKEN"'
check "elect gives COMMAND its term in DLOCK_LEADER_TERM, the same as DLOCK_FENCING_TOKEN ($(cat "$out"))" \
	eval '[ "$rc" -eq 0 ] && grep -q -x "\([1-9][0-9]*\) \1" "$out"'
DLOCK_LEADER_TERM=outer dl --uri mem://e name -- sh -c 'echo "$DLOCK_LEADER_TERM"'
check "a lock's run passes an enclosing leader's term on" contains "$out" "^outer$"
expect_rc "leader where nobody leads exits 1 (mem://)" 1 --uri mem://e leader name
check "... and prints none" eval '[ "$(cat "$out")" = none ]'
dl --uri mem://e leader --json name
json_check "... --json: elected false, every field null" "$out" \
	'd == {"name": "name", "elected": False, "term": None, "value": None, "holder": None}'

# elect_checks LABEL URI: elect and leader across processes on a server.
elect_checks() {
	local label=$1 uri=$2 name="elect-$$-$RANDOM" wpid apid bpid term1 term2 tok hostile want t0 erc
	dl --uri "$uri" leader "$name"
	if [ "$rc" -eq 78 ] && contains "$err" "has no \(leader election\|inspection\)"; then
		# Who leads is an inspection: a backend without it has no elections.
		dl --uri "$uri" -n elect "$name" -- true
		check "$label: elect where the backend has no leader election exits 78, saying so (got $rc)" \
			eval '[ "$rc" -eq 78 ] && contains "$err" "has no leader election"'
		echo "skip - $label: elect and leader (the backend has no leader election)"
		return
	fi
	check "$label: leader where nobody leads exits 1 (got $rc)" [ "$rc" -eq 1 ]
	check "$label: ... and prints none" eval '[ "$(cat "$out")" = none ]'
	rm -f "$tmp/$label-e"*
	# A watcher from the start: its first line is who leads now.
	"$DLOCK" --uri "$uri" leader --watch "$name" >"$tmp/$label-e.watch" 2>"$tmp/$label-e.werr" &
	wpid=$!
	check "$label: leader --watch prints who leads now (none)" await_grep "$tmp/$label-e.watch" "^none$"
	"$DLOCK" --uri "$(with_param "$uri" "identity=cli-$label-a")" --ttl 3s elect --value "10.0.0.1:80 a" "$name" -- \
		sh -c 'echo "$DLOCK_LEADER_TERM $DLOCK_FENCING_TOKEN" >"$1.term"; exec "$2" "$1.started" "$1.go"' \
		sh "$tmp/$label-ea" "$holder" >/dev/null 2>"$tmp/$label-ea.err" &
	apid=$!
	if ! await_file "$tmp/$label-ea.started"; then
		fail "$label: elect runs its command" "$(head -c 300 "$tmp/$label-ea.err")"
		kill "$apid" "$wpid" 2>/dev/null
		return
	fi
	read -r term1 tok <"$tmp/$label-ea.term"
	check "$label: elect gives COMMAND DLOCK_LEADER_TERM = DLOCK_FENCING_TOKEN ($term1, $tok)" \
		eval '[ -n "$term1" ] && [ "$term1" = "$tok" ]'
	dl --uri "$uri" leader "$name"
	check "$label: leader exits 0 while someone leads (got $rc)" [ "$rc" -eq 0 ]
	check "$label: ... printing TERM, VALUE and IDENTITY, the term the leader's DLOCK_LEADER_TERM" \
		eval '[ "$(cat "$out")" = "$(printf "%s\t10.0.0.1:80 a\tcli-%s-a" "$term1" "$label")" ]'
	dl --uri "$uri" leader --json "$name"
	json_check "$label: leader --json: elected, term, value, holder" "$out" \
		"d['elected'] and d['name'] == '$name' and d['term'] == $term1 and d['value'] == '10.0.0.1:80 a' and
		 d['holder']['identity'] == 'cli-$label-a' and d['holder']['pid'] == $apid"
	dl --uri "$uri" status "$name"
	check "$label: status shows the leader's value" contains "$out" "^  value: 10.0.0.1:80 a$"
	expect_rc "$label: a second elect -n exits 75 while a leader leads" 75 --uri "$uri" -n elect "$name" -- true
	check "$label: ... saying the leadership is held elsewhere" contains "$err" "^dlock: leadership of '$name' is held elsewhere$"
	check "$label: leader --watch prints the new leader's term and value" \
		await_grep "$tmp/$label-e.watch" "^$term1	10.0.0.1:80 a	cli-$label-a$"
	# Resigning: the command ends, dlock exits as it did, and nobody leads.
	: >"$tmp/$label-ea.go"
	wait "$apid"
	erc=$?
	check "$label: elect exits with its command's status when it ends (got $erc)" [ "$erc" -eq 0 ]
	check "$label: ... having resigned: leader --watch prints none" await_last "$tmp/$label-e.watch" none
	# The next leader: a larger term, seen by the watcher within a notification.
	t0=$(now_ms)
	"$DLOCK" --uri "$(with_param "$uri" "identity=cli-$label-b")" --ttl 3s elect --value "10.0.0.2:80" "$name" -- \
		sh -c 'echo "$DLOCK_LEADER_TERM" >"$1.term"; exec "$2" "$1.started" "$1.go"' \
		sh "$tmp/$label-eb" "$holder" >/dev/null 2>"$tmp/$label-eb.err" &
	bpid=$!
	if ! await_file "$tmp/$label-eb.started"; then
		fail "$label: the next elect runs its command" "$(head -c 300 "$tmp/$label-eb.err")"
		kill "$bpid" "$wpid" 2>/dev/null
		return
	fi
	read -r term2 <"$tmp/$label-eb.term"
	check "$label: the next leader's term is larger ($term1 < $term2)" eval '[ "$term2" -gt "$term1" ]'
	check "$label: leader --watch prints it" await_grep "$tmp/$label-e.watch" "^$term2	10.0.0.2:80	cli-$label-b$"
	check "$label: ... within a notification, not a lease ($(($(now_ms) - t0)) ms)" [ $(($(now_ms) - t0)) -lt 10000 ]
	check "$label: ... its terms never go back" eval 'grep -o "^[0-9]*" "$tmp/$label-e.watch" | sort -c -n'
	# Broken from outside: the leader is told, stops COMMAND, exits 76.
	t0=$(now_ms)
	dl --uri "$uri" break "$name"
	if [ "$rc" -eq 78 ]; then
		echo "skip - $label: break of the leader (the backend cannot break)"
		: >"$tmp/$label-eb.go"
		wait "$bpid"
	else
		wait "$bpid"
		erc=$?
		check "$label: break of the leader's name: elect exits 76 (got $erc, $(($(now_ms) - t0)) ms)" [ "$erc" -eq 76 ]
		check "$label: ... saying the leadership was lost" contains "$tmp/$label-eb.err" "^dlock: leadership of '$name' lost"
	fi
	kill -TERM "$wpid"
	wait "$wpid"
	erc=$?
	check "$label: leader --watch ends with 0 on SIGTERM (got $erc)" [ "$erc" -eq 0 ]
	check "$label: ... one line per change, nothing on stderr" eval '! grep -v -q "	\|^none$" "$tmp/$label-e.watch" && [ ! -s "$tmp/$label-e.werr" ]'
	# SIGTERM resigns: COMMAND gets it, dlock resigns and exits as COMMAND did.
	"$DLOCK" --uri "$uri" elect "$name" -- "$holder" "$tmp/$label-ec.started" "$tmp/$label-ec.go" &
	apid=$!
	await_file "$tmp/$label-ec.started"
	kill -TERM "$apid"
	wait "$apid"
	erc=$?
	check "$label: SIGTERM to elect: exits as its command did (143, got $erc)" [ "$erc" -eq 143 ]
	expect_rc "$label: ... and nobody leads after it" 1 --uri "$uri" leader "$name"
	# A hostile value is escaped, in text and in JSON.
	hostile=$(printf 'v\033[2J\t\\\377')
	"$DLOCK" --uri "$uri" elect --value "$hostile" "$name" -- "$holder" "$tmp/$label-eh.started" "$tmp/$label-eh.go" &
	apid=$!
	await_file "$tmp/$label-eh.started"
	dl --uri "$uri" leader "$name"
	want=$'\t''v\x1b[2J\x09\\\xff'$'\t'
	check "$label: leader escapes a hostile value: no control byte, the tab as \\x09" \
		eval 'grep -q -F -e "$want" "$out" && ! LC_ALL=C grep -q "[[:cntrl:]]" <(tr -d "\n\t" <"$out")'
	dl --uri "$uri" leader --json "$name"
	json_check "$label: ... --json gives its exact bytes" "$out" 'd["value_hex"] == "761b5b324a095cff"'
	release "$apid" "$label-eh"
	# A leader paused past its lease (ttl=2s): where the server lets another
	# lead meanwhile, the paused one is told when it resumes and exits 76.
	local puri term_file='echo "$DLOCK_LEADER_TERM" >"$1.term"; exec "$2" "$1.started" "$1.go"'
	puri=$(with_param "$uri" "ttl=2s")
	"$DLOCK" --uri "$puri" elect "$name" -- sh -c "$term_file" sh "$tmp/$label-ep" "$holder" \
		>/dev/null 2>"$tmp/$label-ep.err" &
	apid=$!
	await_file "$tmp/$label-ep.started"
	kill -STOP "$apid"
	"$DLOCK" --uri "$puri" -w 8s elect "$name" -- sh -c "$term_file" sh "$tmp/$label-eq" "$holder" \
		>/dev/null 2>"$tmp/$label-eq.err" &
	bpid=$!
	if await_file "$tmp/$label-eq.started"; then
		kill -CONT "$apid"
		wait "$apid"
		erc=$?
		check "$label: a leader paused past its lease exits 76 once resumed (got $erc)" [ "$erc" -eq 76 ]
		check "$label: ... saying the leadership was lost" contains "$tmp/$label-ep.err" "^dlock: leadership of '$name' lost"
		check "$label: ... the leader that took over has a larger term ($(cat "$tmp/$label-ep.term") < $(cat "$tmp/$label-eq.term"))" \
			eval '[ "$(cat "$tmp/$label-eq.term")" -gt "$(cat "$tmp/$label-ep.term")" ]'
		release "$bpid" "$label-eq"
	else
		kill -CONT "$apid"
		wait "$bpid"
		release "$apid" "$label-ep"
		echo "skip - $label: a paused leader (its session outlived the pause: nobody else could lead)"
	fi
}

if [ -n "${DLOCK_TEST_REDLOCK_URI:-}" ]; then
	expect_rc "elect on RedLock, which has no elections, exits 78" 78 --uri "$DLOCK_TEST_REDLOCK_URI" elect name -- true
	check "... saying so" contains "$err" "^dlock: elect: .*has no leader election"
	expect_rc "leader on RedLock exits 78 too" 78 --uri "$DLOCK_TEST_REDLOCK_URI" leader name
else
	echo "skip - elect on a backend without elections (DLOCK_TEST_REDLOCK_URI unset)"
fi
for var in DLOCK_TEST_REDIS_URI DLOCK_TEST_PG_URI DLOCK_TEST_PG_ROW_URI DLOCK_TEST_PG_BOUNCER_URI DLOCK_TEST_ZK_URI; do
	if [ -n "${!var:-}" ]; then
		label=${var#DLOCK_TEST_}
		label=$(echo "${label%_URI}" | tr 'A-Z_' 'a-z-')
		elect_checks "$label" "${!var}"
	else
		echo "skip - elect and leader on $var (unset)"
	fi
done

# -------------------------------------------------------- process group

rm -f "$tmp/pg"
"$DLOCK" pg -- sh -c 'echo "$$ $("$5" $$ 3)" >"$1.tmp"; mv "$1.tmp" "$1"; "$2" "$3" "$4"' \
	sh "$tmp/pg" "$holder" "$tmp/pg.started" "$tmp/pg.go" "$statf" &
pid=$!
await_file "$tmp/pg.started"
read -r child_pid child_pgid <"$tmp/pg"
dlock_pgid=$("$statf" "$pid" 3)
check "COMMAND leads its own process group" [ "$child_pid" = "$child_pgid" ]
check "COMMAND's group ($child_pgid) is not dlock's ($dlock_pgid)" [ "$child_pgid" != "$dlock_pgid" ]
release "$pid" pg

# ------------------------------------------------------------ default URI

mkdir "$tmp/xdg"
XDG_RUNTIME_DIR=$tmp/xdg
export XDG_RUNTIME_DIR
(unset DLOCK_URI; exec "$DLOCK" xdg -- "$holder" "$tmp/xdg.started" "$tmp/xdg.go") &
pid=$!
await_file "$tmp/xdg.started"
check "default URI creates \$XDG_RUNTIME_DIR/dlock" [ -d "$tmp/xdg/dlock" ]
expect_rc "default URI is file://\$XDG_RUNTIME_DIR/dlock" 75 \
	--uri "file://$tmp/xdg/dlock" --no-wait xdg -- true
release "$pid" xdg
unset XDG_RUNTIME_DIR

uid_dir=/tmp/dlock-$(id -u)
(unset DLOCK_URI XDG_RUNTIME_DIR; exec "$DLOCK" "$run_id" -- "$holder" "$tmp/uid.started" "$tmp/uid.go") &
pid=$!
await_file "$tmp/uid.started"
check "without XDG_RUNTIME_DIR the default directory is $uid_dir" [ -d "$uid_dir" ]
expect_rc "without XDG_RUNTIME_DIR the default URI is file://$uid_dir" 75 \
	--uri "file://$uid_dir" --no-wait "$run_id" -- true
release "$pid" uid
(unset DLOCK_URI; exec env XDG_RUNTIME_DIR= "$DLOCK" "$run_id" -- "$holder" "$tmp/uid2.started" "$tmp/uid2.go") &
pid=$!
await_file "$tmp/uid2.started"
expect_rc "an empty XDG_RUNTIME_DIR counts as unset" 75 \
	--uri "file://$uid_dir" --no-wait "$run_id" -- true
release "$pid" uid2

# --------------------------------------------------------------- terminal

# On a terminal COMMAND gets the foreground: it can read without SIGTTIN.
if command -v script >/dev/null 2>&1 && script -qec true /dev/null >/dev/null 2>&1; then
	printf 'typed\n' >"$tmp/typed"
	DLOCK_BIN=$DLOCK timeout 10 script -qec '"$DLOCK_BIN" tty -- sh -c "read -r line && echo \"read:\$line\""' \
		/dev/null <"$tmp/typed" >"$tmp/tty.out" 2>&1
	check "on a terminal COMMAND can read input" contains "$tmp/tty.out" "read:typed"
else
	echo "skip - terminal checks (script(1) cannot make a pty here)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
