#!/usr/bin/env bash
# The test command: install what is missing, then build dlock three ways and
# run the tests of each.  Stops at the first failure (non-zero exit).
#
# Usage: bash ci/test.sh          (from any directory)
#
#   deps         ci/install-deps.sh
#   plain        ci/build.sh plain, then every test
#   asan         ci/build.sh asan (ASan + UBSan), then every test
#   tsan         ci/build.sh tsan (clang TSan), then the tests labelled `threads` (on the first URI of
#                each scheme)
#   static       ci/static.sh: cppcheck + clang-tidy over core/, backends/, tools/
#   valgrind     ci/valgrind.sh: memcheck on test_uri, test_core, conformance (mem://, file://)
#   fuzz         ci/fuzz.sh: each libFuzzer harness for 15 s (DLOCK_FUZZ_SECONDS)
#
# Tests labelled `server` need DLOCK_TEST_URIS; without it they skip loudly.
# After each ctest run the skipped tests are listed (whole programs, which
# ctest also counts as "Not Run", and parts of one), and again in the summary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
# tests/lsan.supp: completions that libzookeeper_mt itself drops on close (not ours).
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# tests/tsan.supp: one race inside libzookeeper_mt (not instrumented, not ours).
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"

# Tests use their own temporary directories and in-process names, but many
# measure wait bounds and lease times: one at a time keeps them honest on a
# loaded 2-core machine.
ctest_jobs=${DLOCK_CTEST_JOBS:-1}

summary=()
notes=() # lines for the summary under the running phase's line
current=""
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
fmt_ms() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }

on_exit() {
	local rc=$?
	if declare -F dlock_servers_stop >/dev/null; then
		dlock_servers_stop || true
	fi
	echo
	echo "==== summary (seconds)"
	local line
	for line in "${summary[@]}" "${notes[@]}"; do echo "  $line"; done
	if [ "$rc" -ne 0 ]; then
		echo "  FAILED in phase: ${current:-?} (exit $rc)"
	else
		echo "  all phases passed"
	fi
	echo "  total $(fmt_ms $(($(now_ms) - t_all)))"
}
t_all=$(now_ms)
trap on_exit EXIT

# phase NAME COMMAND...: run one phase with a header and its elapsed time.
phase() {
	current=$1
	shift
	echo
	echo "==== [$current] $*"
	local t0
	t0=$(now_ms)
	"$@"
	local dt=$(($(now_ms) - t0))
	echo "==== [$current] passed in $(fmt_ms "$dt") s"
	summary+=("$(printf '%-12s %8s' "$current" "$(fmt_ms "$dt")")" "${notes[@]}")
	notes=()
}

# list_skips DIR: "PROGRAM: what" for every skip in the output of the last
# ctest run in DIR: the lines that say SKIPPED (dlock_test_skip(),
# dlock_test_skip_part() and the conformance suite's backends) or "skip - "
# (test_cli.sh).  Printed, and kept for the summary.
list_skips() {
	local log=$1/Testing/Temporary/LastTest.log skips=()
	[ -f "$log" ] || return 0
	mapfile -t skips < <(awk '
		/^[0-9]+\/[0-9]+ Test: / { prog = $3; next }
		/SKIPPED/ || /^skip - / {
			line = $0
			sub(/^.*SKIPPED:? */, "", line)
			sub(/^skip - /, "", line)
			sub(/ *\*\*\*$/, "", line)
			sub(/(\.\.\.)?(passed|FAILED)$/, "", line)
			print prog ": " line
		}' "$log")
	if [ ${#skips[@]} -eq 0 ]; then
		echo "==== skipped in $1: none"
		return 0
	fi
	echo "==== skipped in $1 (${#skips[@]}):"
	printf '  %s\n' "${skips[@]}"
	local s
	for s in "${skips[@]}"; do notes+=("  skipped $s"); done
}

run_ctest() {
	local dir=$1 rc=0
	shift
	(cd "$dir" && "${tsan_prefix[@]}" ctest --output-on-failure --no-tests=error -j"$ctest_jobs" "$@") || rc=$?
	list_skips "$dir"
	return "$rc"
}

# TSan cannot start when the kernel places mappings where it expects its
# shadow memory (high ASLR entropy: "unexpected memory mapping").  Try a tiny
# TSan program; if it fails, try again with ASLR off (setarch -R).
tsan_prefix=()
tsan_probe() {
	local dir=build/tsan/tsan-probe
	mkdir -p "$dir"
	printf '#include <pthread.h>\nstatic void *f(void *a) { return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\n' >"$dir/probe.c"
	clang -fsanitize=thread -g -O1 -pthread "$dir/probe.c" -o "$dir/probe"
	if "$dir/probe" 2>"$dir/err"; then
		echo "tsan: runs with ASLR on"
	elif setarch -R "$dir/probe" 2>"$dir/err2"; then
		echo "tsan: needs ASLR off: running the tsan tests under setarch -R"
		sed -n 1,3p "$dir/err"
		tsan_prefix=(setarch -R)
	else
		echo "tsan: a trivial TSan program fails, with and without ASLR:" >&2
		cat "$dir/err" "$dir/err2" >&2
		return 1
	fi
}

phase deps bash ci/install-deps.sh
phase static bash ci/static.sh

# ---- servers ----------------------------------------------------------------
# Redis, ZooKeeper and PostgreSQL (those whose ci/servers/NAME.sh exists) on
# free loopback ports; DLOCK_TEST_URIS lists their URIs and on_exit stops them.
# Set DLOCK_TEST_NO_SERVERS=1 to run only the server-free tests.
if [ -z "${DLOCK_TEST_NO_SERVERS:-}" ]; then
	. ci/servers.sh
	phase servers dlock_servers_start
fi
# When URIs are given (here or by the caller), a skipped backend is a failure.
if [ -n "${DLOCK_TEST_URIS:-}" ]; then
	export DLOCK_TEST_REQUIRE_ALL=1
	. ci/servers.sh # dlock_uris_masked
	echo "servers: DLOCK_TEST_URIS=$(dlock_uris_masked "$DLOCK_TEST_URIS") (every backend required)"
else
	echo "servers: none (DLOCK_TEST_URIS unset): server tests will skip"
fi
# -----------------------------------------------------------------------------

phase build-plain bash ci/build.sh plain
phase test-plain run_ctest build/plain
phase install-check bash ci/install-check.sh

# conformance_loop (the suite in loop mode) runs on every URI in the plain
# build; under the sanitizers on mem://, file://, the first redis:// and the
# first postgres:// URI of DLOCK_TEST_URIS, as
# DLOCK_CONFORMANCE_LOOP_URIS says.
sanitizer_loop_uris() {
	local u redis="" pg="" uris=()
	read -ra uris <<<"${DLOCK_TEST_URIS:-}"
	for u in "${uris[@]}"; do
		case "$u" in
		redis://*) redis=${redis:-$u} ;;
		postgres://* | postgresql://*) pg=${pg:-$u} ;;
		esac
	done
	echo "$redis $pg"
}

phase build-asan bash ci/build.sh asan
export DLOCK_CONFORMANCE_LOOP_URIS
DLOCK_CONFORMANCE_LOOP_URIS=$(sanitizer_loop_uris)
# The sanitizers look for memory errors and races, not for what a count shows: the conformance suite's
# counted loops (exclusion, rw_load, sem_load) run half as many rounds there; the plain build runs them all.
export DLOCK_TEST_SCALE=0.5
phase test-asan run_ctest build/asan

# TSan looks for races between the library's threads, which a topology has or not, whatever its other
# settings: the blocking conformance suite runs there on the first URI of each scheme (the second PostgreSQL
# row URI, a pooler's, and the second zk:// reach no other threads; fair=0 and RedLock are redis:// too).
tsan_uris() {
	local u seen=" " out=() uris=()
	read -ra uris <<<"${DLOCK_TEST_URIS:-}"
	for u in "${uris[@]}"; do
		case "$seen" in *" ${u%%://*} "*) continue ;; esac
		seen+="${u%%://*} "
		out+=("$u")
	done
	echo "${out[*]}"
}

phase build-tsan bash ci/build.sh tsan
phase tsan-probe tsan_probe
all_uris=${DLOCK_TEST_URIS:-}
if [ -n "$all_uris" ]; then
	DLOCK_TEST_URIS=$(tsan_uris)
	echo "tsan: DLOCK_TEST_URIS=$(dlock_uris_masked "$DLOCK_TEST_URIS")"
fi
phase test-tsan run_ctest build/tsan -L threads
if [ -n "$all_uris" ]; then DLOCK_TEST_URIS=$all_uris; fi
unset DLOCK_CONFORMANCE_LOOP_URIS DLOCK_TEST_SCALE
phase valgrind bash ci/valgrind.sh
phase fuzz bash ci/fuzz.sh
