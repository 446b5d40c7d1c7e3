#!/usr/bin/env bash
# The main job, with no server: set up, build, and show two processes
# contending for one lock on file://.
#
# Usage: bash ci/main.sh          (from any directory)
#
#   1. `first`  holds the lock "nightly-report" for about 2 s;
#   2. `second` asks for it with --no-wait while first holds it: it gives up
#      at once with exit status 75 (lock held elsewhere) and its command
#      does not run;
#   3. `third`  asks for it with --wait 10s: it waits, and its command runs
#      once first has released the lock.
# Exits 0 when all of that happened.
# shellcheck disable=SC2016  # the sh -c scripts expand their own arguments
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Only what building needs: no test framework, servers or checkers.  The
# client libraries are in, so that every backend is built (dlock --version
# lists them) although this job uses file:// only.  Tests off: CUnit is not
# installed, and build/plain stays the tests' own (ci/test.sh).
bash ci/install-deps.sh build
bash ci/build.sh main -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_BUILD_TESTS=OFF

dlock=$PWD/build/main/dlock
work=$(mktemp -d /tmp/dlock-main.XXXXXX)
first_pid=""
cleanup() {
	if [ -n "$first_pid" ] && kill -0 "$first_pid" 2>/dev/null; then
		kill -TERM "$first_pid" 2>/dev/null || true
		wait "$first_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

uri="file://$work/locks"
name=nightly-report
failures=0
fail() {
	echo "UNEXPECTED: $*"
	failures=$((failures + 1))
}
elapsed() { echo $(($(date +%s%N) / 1000000 - t0)); }

echo
echo "==== main job: two processes and one lock on $uri"
echo "$ $dlock --version"
"$dlock" --version
t0=$(($(date +%s%N) / 1000000))

# 1. first: takes the lock, says so through a marker file, holds it 2 s.
echo
echo "[first]  dlock --uri $uri $name -- (hold the lock for 2 s)"
"$dlock" --uri "$uri" "$name" -- sh -c '
	echo "[first]  got the lock at +$(( $(date +%s%N) / 1000000 - $1 )) ms, fencing token ${DLOCK_FENCING_TOKEN:-none}; working for 2 s"
	touch "$2/first-holds"
	sleep 2
	touch "$2/first-done"
	echo "[first]  done, releasing the lock"' sh "$t0" "$work" &
first_pid=$!

for _ in $(seq 1 100); do
	[ -e "$work/first-holds" ] && break
	kill -0 "$first_pid" 2>/dev/null || break
	sleep 0.1
done
[ -e "$work/first-holds" ] || fail "first did not get the lock within 10 s"

# 2. second: --no-wait while first holds the lock: exit 75, command not run.
echo
echo "[second] dlock --uri $uri --no-wait $name -- ...   (while first holds it)"
rc=0
"$dlock" --uri "$uri" --no-wait "$name" -- sh -c 'touch "$1/second-ran"' sh "$work" || rc=$?
if [ "$rc" -eq 75 ] && [ ! -e "$work/second-ran" ]; then
	echo "[second] the lock is busy: gave up at once with exit status 75 (conflict); its command did not run"
else
	fail "second exited with $rc (expected 75)$([ -e "$work/second-ran" ] && echo ', and its command ran')"
fi

# 3. third: --wait 10s: waits for first, then runs.
echo
echo "[third]  dlock --uri $uri --wait 10s $name -- ...   (while first still holds it)"
rc=0
"$dlock" --uri "$uri" --wait 10s "$name" -- sh -c '
	if [ -e "$2/first-done" ]; then after=yes; else after=no; fi
	echo "[third]  got the lock at +$(( $(date +%s%N) / 1000000 - $1 )) ms, fencing token ${DLOCK_FENCING_TOKEN:-none}; first had finished: $after"
	[ "$after" = yes ]' sh "$t0" "$work" || rc=$?
if [ "$rc" -eq 0 ]; then
	echo "[third]  waited for first to release the lock, then ran its command (exit status 0)"
else
	fail "third exited with $rc (expected 0, after first had finished)"
fi

rc=0
wait "$first_pid" || rc=$?
first_pid=""
[ "$rc" -eq 0 ] || fail "first exited with $rc (expected 0)"

echo
if [ "$failures" -eq 0 ]; then
	echo "==== main job passed in $(elapsed) ms: one holder at a time; --no-wait gave up with 75; --wait waited its turn"
else
	echo "==== main job FAILED: $failures unexpected result(s)"
	exit 1
fi
