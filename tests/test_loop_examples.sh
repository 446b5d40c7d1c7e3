#!/usr/bin/env bash
# The event-loop examples hold their locks on the loop's one thread.
#
#   test_loop_examples.sh /path/to/loop_poll [/path/to/loop_libuv] [/path/to/loop_libevent]
#
# Each program given (examples/loop_*.c, built by tests/CMakeLists.txt; the
# libuv and libevent ones only where their library was found, and their
# absence is said here) holds 100 locks for three leases (`ttl=1s` added to
# the URI, 3 seconds) on mem://, on file:// (a temporary directory) and on
# the first redis://, the first rediss:// (TLS) and the first postgres://
# URI of DLOCK_TEST_URIS, each under a prefix of this run (skipped, loudly,
# when DLOCK_TEST_URIS has none).  A run passes when it exits 0 and prints
# acquired=100 and lost=0; where it prints loop_native=1 (the backend runs
# on the loop with no thread: DLOCK_FEATURE_LOOP_NATIVE), it must also
# print max_threads=1, the most entries /proc/self/task had while it ran.
#
# Prints one line per check ("ok - ", "FAIL - ", and "skip - " for what
# ci/test.sh lists as skipped) and ends with "N passed, M failed, K
# skipped"; exits 1 when a check failed.
set -u

if [ $# -lt 1 ] || [ $# -gt 3 ]; then
	echo "usage: test_loop_examples.sh /path/to/loop_poll [/path/to/loop_libuv] [/path/to/loop_libevent]" >&2
	exit 2
fi
for prog in "$@"; do
	[ -x "$prog" ] || { echo "test_loop_examples: $prog is not an executable" >&2; exit 2; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-loop-examples.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

count=100
seconds=3
passed=0
failed=0
skipped=0
pass() {
	passed=$((passed + 1))
	echo "ok - $1"
}
fail() {
	failed=$((failed + 1))
	echo "FAIL - $1"
}
skip() {
	skipped=$((skipped + 1))
	echo "skip - $1"
}

for name in loop_poll loop_libuv loop_libevent; do
	found=0
	for prog in "$@"; do
		[ "$(basename "$prog")" = "$name" ] && found=1
	done
	[ "$found" = 1 ] || skip "$name: not built (its event library was not found)"
done

# A URI with more parameters.
with_params() { case $1 in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac; }

# The URI to print: no password.
masked() { sed -E 's#(://[^:/@]*:)[^@]*@#\1***@#' <<<"$1"; }

# Each program runs on names of its own (a prefix, a directory), so that all the runs can go at once.
uris=("mem://loop-examples" "file://$tmp/locks-PROG")
for scheme in redis rediss postgres; do
	uri=
	for u in ${DLOCK_TEST_URIS:-}; do
		case $scheme:$u in
		redis:redis://* | rediss:rediss://* | postgres:postgres://* | postgres:postgresql://*)
			uri=$u
			break
			;;
		esac
	done
	if [ -n "$uri" ]; then
		# The names loop-1 ... of this run alone, on servers others use too.
		uris+=("$(with_params "$uri" "prefix=dlock-test-loop-$$-PROG")")
	else
		skip "no $scheme:// URI in DLOCK_TEST_URIS"
	fi
done

value() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" "$2" | tail -1; }

# Every program on every URI, five at a time (each holds its locks for three leases: one after another they
# would take a minute; all at once, a sanitizer build on two cores could starve the renewals), then each
# run's outcome.
at_once=5
n=0
for uri in "${uris[@]}"; do
	for prog in "$@"; do
		run_uri=${uri//PROG/$(basename "$prog")}
		mkdir -p "$tmp/run$n"
		echo "$prog" >"$tmp/run$n/prog"
		echo "$run_uri" >"$tmp/run$n/uri"
		(
			rc=0
			timeout 120 "$prog" "$(with_params "$run_uri" ttl=1s)" "$count" "$seconds" \
				>"$tmp/run$n/out" 2>"$tmp/run$n/err" || rc=$?
			echo "$rc" >"$tmp/run$n/rc"
		) &
		n=$((n + 1))
		[ $((n % at_once)) = 0 ] && wait
	done
done
wait

for ((i = 0; i < n; i++)); do
	d=$tmp/run$i
	what="$(basename "$(cat "$d/prog")") $(masked "$(cat "$d/uri")") $count locks ${seconds}s"
	rc=$(cat "$d/rc")
	acquired=$(value acquired "$d/out")
	lost=$(value lost "$d/out")
	threads=$(value max_threads "$d/out")
	native=$(value loop_native "$d/out")
	if [ "$rc" != 0 ] || [ "$acquired" != "$count" ] || [ "$lost" != 0 ]; then
		fail "$what: exit $rc (expected 0), acquired=${acquired:-?} (expected $count), lost=${lost:-?} (expected 0)"
		sed 's/^/    /' "$d/out" "$d/err" | head -20
	elif [ "$native" = 1 ] && [ "$threads" != 1 ]; then
		fail "$what: loop_native=1 but max_threads=${threads:-?}: the library made threads"
	elif [ "$native" = 1 ]; then
		pass "$what: held, and on one thread (loop_native=1)"
	else
		pass "$what: held (loop_native=${native:-?}: worker threads allowed, max_threads=${threads:-?})"
	fi
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
