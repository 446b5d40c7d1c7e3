#!/usr/bin/env bash
# Smoke test of dlock-bench: mem:// and file:// for about a second each,
# with --json.  Checks that every line is one JSON object carrying every
# field the benchmark promises, that each run measured something, and that
# no two critical sections overlapped; then the faults scenario on file://
# with a --failover command (about 8 s).
#
#   test_bench.sh /path/to/dlock-bench
set -u

if [ $# -ne 1 ] || [ ! -x "$1" ]; then
	echo "usage: test_bench.sh /path/to/dlock-bench" >&2
	exit 2
fi
bench=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench-test.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

fields="backend uri scenario clients threads processes ops ops_per_s p50_us p99_us max_us
raw_ops_per_s ratio_to_raw handoff_p50_us handoff_p99_us wait_p99_us reacquire_pct share_spread_pct
overlaps stale_writes_rejected lost_reported unavailable_ms"
failed=0
fail() {
	echo "FAIL: $*"
	failed=$((failed + 1))
}

if ! "$bench" --uri mem://bench-test --uri "file://$tmp/locks" --scenario uncontended --scenario contended \
	--clients 2 --processes 2 --duration 1s --json >"$tmp/out.jsonl" 2>"$tmp/err"; then
	fail "dlock-bench exited with an error:"
	cat "$tmp/err"
fi

lines=$(wc -l <"$tmp/out.jsonl")
[ "$lines" -eq 4 ] || fail "expected 4 JSON lines (2 backends x 2 scenarios), got $lines"
while IFS= read -r line; do
	name=$(sed -n 's/.*"backend":"\([^"]*\)".*"scenario":"\([^"]*\)".*/\1 \2/p' <<<"$line")
	case "$line" in "{"*"}") ;; *) fail "not one JSON object: $line" ;; esac
	for f in $fields; do
		grep -q "\"$f\":" <<<"$line" || fail "$name: field $f missing"
	done
	grep -q '"error":' <<<"$line" && fail "$name: $(sed -n 's/.*"error":\("[^"]*"\).*/\1/p' <<<"$line")"
	grep -q '"ops":0,' <<<"$line" && fail "$name: no operation measured"
	grep -q '"ops_per_s":null' <<<"$line" && fail "$name: no throughput"
	case "$name" in
	*contended)
		[[ "$name" == *uncontended ]] && continue
		grep -q '"overlaps":0,' <<<"$line" || fail "$name: overlapping critical sections: $line"
		grep -q '"reacquire_pct":null' <<<"$line" && fail "$name: no reacquire_pct"
		;;
	esac
done <"$tmp/out.jsonl"

# Without a server there is no raw baseline, and the line says why.
grep -q '"raw_note":"no raw client' "$tmp/out.jsonl" || fail "mem/file lines do not say why raw is missing"
# As dlock by default, the measured acquisitions (and the raw clients') take a token.
[ "$(grep -c '"fencing":true' "$tmp/out.jsonl")" -eq 4 ] || fail "not every line says fencing true"

# --fencing off: no token, and the rows say so.
if "$bench" --uri "file://$tmp/locks" --scenario uncontended --duration 200ms --fencing off --json \
	>"$tmp/unfenced.jsonl" 2>"$tmp/err"; then
	grep -q '"backend":"file+notoken".*"fencing":false' "$tmp/unfenced.jsonl" ||
		fail "--fencing off: $(cat "$tmp/unfenced.jsonl")"
else
	fail "dlock-bench --fencing off exited with an error: $(cat "$tmp/err")"
fi
"$bench" --uri mem://x --fencing maybe >/dev/null 2>&1 && fail "--fencing maybe was accepted"

# --failover: the faults scenario runs the command while a holder holds (the
# command finds the lock file locked in /proc/locks) and counts it as a fault
# of its own, last.  The command is told the lock's name (DLOCK_BENCH_LOCK).
cat >"$tmp/failover.sh" <<'EOF'
for f in "$1"/*.lock; do
	grep -q ":$(stat -c %i "$f") " /proc/locks && touch "$2"
done
printf '%s' "${DLOCK_BENCH_LOCK:-}" >"$2.name"
exit 0
EOF
if "$bench" --uri "file://$tmp/flocks" --failover "sh '$tmp/failover.sh' '$tmp/flocks' '$tmp/held'" \
	--scenario faults --lease 200ms --fault-clients 2 --json >"$tmp/failover.jsonl" 2>"$tmp/err"; then
	grep -q '"fault":"failover","at_ms":[0-9]*,"end_ms":[0-9]*,"unavailable_ms":[0-9]*,"overlaps":0,"note":"failed over in [0-9]* ms"}]' \
		"$tmp/failover.jsonl" || fail "--failover: no failover fault last, or not as expected: $(cat "$tmp/failover.jsonl")"
	[ -e "$tmp/held" ] || fail "--failover: the command did not run while a holder held the lock"
	grep -Eqx 'bench-faults-[0-9]+-[0-9]+' "$tmp/held.name" ||
		fail "--failover: DLOCK_BENCH_LOCK was '$(cat "$tmp/held.name")', not the faults' lock name"
else
	fail "dlock-bench --failover exited with an error: $(cat "$tmp/err")"
fi
"$bench" --failover true --uri mem://x >/dev/null 2>&1 && fail "--failover before any --uri was accepted"
"$bench" --uri mem://x --failover '' >/dev/null 2>&1 && fail "an empty --failover was accepted"

# A Redis Cluster (when the servers run): rows labelled by the scheme, and
# the raw client routes each name to its slot's master.
if [ -n "${DLOCK_TEST_CLUSTER_URI:-}" ]; then
	if "$bench" --uri "$DLOCK_TEST_CLUSTER_URI" --scenario uncontended --clients 2 --processes 2 --duration 300ms \
		--json >"$tmp/cluster.jsonl" 2>"$tmp/err"; then
		grep -q '"backend":"redis-cluster"' "$tmp/cluster.jsonl" || fail "cluster: not labelled redis-cluster"
		grep -Eq '"raw_ops_per_s":[1-9]' "$tmp/cluster.jsonl" || fail "cluster: no raw client measured"
	else
		fail "dlock-bench on a Redis Cluster exited with an error: $(cat "$tmp/err")"
	fi
else
	echo "skip - the Redis Cluster rows (DLOCK_TEST_CLUSTER_URI unset)"
fi

if [ "$failed" -eq 0 ]; then
	echo "test_bench: $lines results, every field present, no overlap"
	exit 0
fi
echo "test_bench: $failed check(s) failed"
exit 1
