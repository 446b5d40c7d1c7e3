#!/usr/bin/env bash
# Smoke test of dlock-bench: mem:// and file:// for about a second each,
# with --json.  Checks that every line is one JSON object carrying every
# field the benchmark promises, that each run measured something, and that
# no two critical sections overlapped; then the faults scenario on file://
# with a --failover command (about 8 s); then the scale and held scenarios
# on file:// (the servers' columns unknown without --server-pids, measured
# with it) and, when DLOCK_TEST_REDIS_URI is set, a short scale run on Redis;
# then the semaphore and read-mostly scenarios on mem:// and file:// (never
# more holders than permits, never a writer beside anyone), a "not
# supported" row for RedLock, which has neither kind, and the faults
# scenario's pause on RedLock (about 4 s); then the inflight scenario on
# mem:// and on the first redis:// and postgres:// URIs of DLOCK_TEST_URIS
# (its fields, never its speed).
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
overlaps stale_writes_rejected lost_reported unavailable_ms release_failed server_cpu_us_per_acq
raw_server_cpu_us_per_acq redis_cmds_per_acq raw_redis_cmds_per_acq locks lease_ms renewals_per_s locks_lost
client_bytes_per_lock server_cpu_ms server_cpu_pct supported permits most_holders over_permits read_ratio
most_readers writer_overlaps reader_wait_p99_us writer_wait_p99_us client_cpu_us_per_acq raw_client_cpu_us_per_acq
inflight loop_native blocking_ops_per_s ratio_to_blocking blocking_ratio_to_raw threads_seen descriptors_seen
connections_seen max_connections"
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
	grep -q '"client_cpu_us_per_acq":null' <<<"$line" && fail "$name: the client's CPU time unknown"
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

# Every field on every line, no error: check_lines FILE COUNT WHAT.
check_lines() {
	local n
	n=$(wc -l <"$1")
	[ "$n" -eq "$2" ] || fail "$3: expected $2 JSON lines, got $n: $(cat "$1")"
	while IFS= read -r line; do
		for f in $fields; do
			grep -q "\"$f\":" <<<"$line" || fail "$3: field $f missing"
		done
		grep -q '"error":' <<<"$line" && fail "$3: $(sed -n 's/.*"error":\("[^"]*"\).*/\1/p' <<<"$line")"
	done <"$1"
}
# A number above 0 in FIELD of every line of FILE.
positive() {
	local n
	n=$(grep -Ec "\"$2\":([1-9]|0\.[0-9]*[1-9])" "$1")
	[ "$n" -eq "$(wc -l <"$1")" ] || fail "$3: $2 is not above 0 on every line: $(cat "$1")"
}

# scale and held on file://: without --server-pids the servers' columns are
# unknown (null, and a note says why), never 0.
if "$bench" --uri "file://$tmp/slocks" --scenario scale --scenario held --waiters 2,3 --duration 300ms \
	--held 20 --hold 300ms --json >"$tmp/scale.jsonl" 2>"$tmp/err"; then
	check_lines "$tmp/scale.jsonl" 3 "scale/held"
	[ "$(grep -c '"scenario":"scale","clients":[23],"threads":1,"processes":[23],' "$tmp/scale.jsonl")" -eq 2 ] ||
		fail "scale: not one process per waiter, 2 and 3: $(cat "$tmp/scale.jsonl")"
	for f in server_cpu_us_per_acq redis_cmds_per_acq raw_server_cpu_us_per_acq server_cpu_ms server_cpu_pct; do
		grep -q "\"$f\":[0-9]" "$tmp/scale.jsonl" && fail "scale/held: $f known without --server-pids or a server"
	done
	[ "$(grep -c '"server_note":"server CPU unknown: no --server-pids' "$tmp/scale.jsonl")" -eq 3 ] ||
		fail "scale/held: no note that server CPU is unknown: $(cat "$tmp/scale.jsonl")"
	grep '"scenario":"scale"' "$tmp/scale.jsonl" | grep -qv '"overlaps":0,' && fail "scale: overlapping critical sections"
	grep -q '"scenario":"held",.*"ops":20,.*"locks":20,.*"renewals_per_s":[0-9.]*,"locks_lost":0,"client_bytes_per_lock":[0-9]' \
		"$tmp/scale.jsonl" || fail "held: 20 locks not held, lost or their memory unknown: $(cat "$tmp/scale.jsonl")"
else
	fail "dlock-bench --scenario scale --scenario held exited with an error: $(cat "$tmp/err")"
fi
"$bench" --server-pids true --uri mem://x >/dev/null 2>&1 && fail "--server-pids before any --uri was accepted"
"$bench" --uri mem://x --waiters 0 >/dev/null 2>&1 && fail "--waiters 0 was accepted"
"$bench" --uri mem://x --hold 10ms >/dev/null 2>&1 && fail "--hold 10ms was accepted"

# --server-pids: a stand-in server whose work is all done by short-lived
# children (as PostgreSQL's backends): its CPU time is found, the exited
# children's too, during the scale phases and during the hold.
bash -c 'while :; do sh -c "i=0; while [ \$i -lt 2000 ]; do i=\$((i+1)); done"; done' &
busy=$!
if "$bench" --uri "file://$tmp/plocks" --server-pids "echo $busy" --scenario scale --scenario held --waiters 2 \
	--duration 300ms --held 10 --hold 300ms --json >"$tmp/pids.jsonl" 2>"$tmp/err"; then
	check_lines "$tmp/pids.jsonl" 2 "--server-pids"
	grep '"scenario":"scale"' "$tmp/pids.jsonl" >"$tmp/pids-scale.jsonl"
	grep '"scenario":"held"' "$tmp/pids.jsonl" >"$tmp/pids-held.jsonl"
	positive "$tmp/pids-scale.jsonl" server_cpu_us_per_acq "--server-pids, scale"
	positive "$tmp/pids-held.jsonl" server_cpu_ms "--server-pids, held"
	grep -q '"server_note"' "$tmp/pids.jsonl" && fail "--server-pids: a note, yet CPU was found: $(cat "$tmp/pids.jsonl")"
else
	fail "dlock-bench --server-pids exited with an error: $(cat "$tmp/err")"
fi
kill "$busy"
wait "$busy" 2>/dev/null
if "$bench" --uri "file://$tmp/plocks" --server-pids "echo 0" --scenario held --held 1 --hold 100ms --json \
	>"$tmp/nopid.jsonl" 2>"$tmp/err"; then
	grep -q '"server_cpu_ms":null,.*"server_note":"server CPU unknown: --server-pids printed no PID"' "$tmp/nopid.jsonl" ||
		fail "--server-pids printing no PID: $(cat "$tmp/nopid.jsonl")"
else
	fail "dlock-bench with a --server-pids printing no PID exited with an error: $(cat "$tmp/err")"
fi

# Redis (when the servers run): server CPU and commands per acquisition, dlock's and raw's.
if [ -n "${DLOCK_TEST_REDIS_URI:-}" ] && [ -n "${DLOCK_TEST_REDIS_DIR:-}" ] && [ -n "${DLOCK_TEST_REDIS_PORT:-}" ]; then
	if "$bench" --uri "$DLOCK_TEST_REDIS_URI" --server-pids "cat '$DLOCK_TEST_REDIS_DIR/$DLOCK_TEST_REDIS_PORT/redis.pid'" \
		--scenario scale --waiters 3 --duration 600ms --json >"$tmp/redis.jsonl" 2>"$tmp/err"; then
		check_lines "$tmp/redis.jsonl" 1 "scale on Redis"
		for f in ops_per_s raw_ops_per_s server_cpu_us_per_acq raw_server_cpu_us_per_acq redis_cmds_per_acq \
			raw_redis_cmds_per_acq client_cpu_us_per_acq raw_client_cpu_us_per_acq; do
			positive "$tmp/redis.jsonl" "$f" "scale on Redis"
		done
	else
		fail "dlock-bench --scenario scale on Redis exited with an error: $(cat "$tmp/err")"
	fi
else
	echo "skip - scale on Redis (DLOCK_TEST_REDIS_URI, DLOCK_TEST_REDIS_DIR or DLOCK_TEST_REDIS_PORT unset)"
fi

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

# semaphore and read-mostly, briefly: 6 clients, 2 permits, a critical
# section long enough for holders to meet.  file:// may not have semaphores
# yet: then its row says "not supported", and the run still succeeds.
if "$bench" --uri mem://bench-kinds --uri "file://$tmp/klocks" --scenario semaphore --scenario read-mostly \
	--clients 6 --permits 2 --cs-us 200 --duration 600ms --json --table "$tmp/kinds.txt" \
	>"$tmp/kinds.jsonl" 2>"$tmp/err"; then
	check_lines "$tmp/kinds.jsonl" 4 "semaphore/read-mostly"
	grep -q '"backend":"mem",.*"scenario":"semaphore",.*"supported":true,"permits":2,"most_holders":2,"over_permits":0,' \
		"$tmp/kinds.jsonl" || fail "semaphore on mem://: not 2 holders at once, or more: $(cat "$tmp/kinds.jsonl")"
	while IFS= read -r line; do
		case "$line" in
		*'"supported":false'*)
			grep -q '"skipped":"not supported: ' <<<"$line" || fail "a row not supported does not say so: $line" ;;
		*'"scenario":"semaphore"'*)
			grep -Eq '"permits":2,"most_holders":[12],"over_permits":0,' <<<"$line" ||
				fail "semaphore: more holders than permits, or none: $line" ;;
		*'"scenario":"read-mostly"'*)
			grep -Eq '"read_ratio":0.90,"most_readers":[1-9][0-9]*,"writer_overlaps":0,"reader_wait_p99_us":[0-9]+,"writer_wait_p99_us":[0-9]+' \
				<<<"$line" || fail "read-mostly: a writer beside another holder, or no readers: $line" ;;
		esac
		grep -q '"ops":0,' <<<"$line" && fail "no operation measured: $line"
	done <"$tmp/kinds.jsonl"
	grep -q '"backend":"file",.*"scenario":"read-mostly",.*"supported":true' "$tmp/kinds.jsonl" ||
		fail "read-mostly on file:// did not run: $(cat "$tmp/kinds.jsonl")"
	if ! grep -Eq '^semaphore .* most/N$' "$tmp/kinds.txt" || ! grep -Eq '^mem .* 2/2$' "$tmp/kinds.txt"; then
		fail "semaphore table: no most/N column, or not 2/2 on mem://: $(cat "$tmp/kinds.txt")"
	fi
	if ! grep -Eq '^read-mostly .* readers +wr ovl$' "$tmp/kinds.txt" || ! grep -Eq '^file .* 0$' "$tmp/kinds.txt"; then
		fail "read-mostly table: no readers and wr ovl columns, or overlaps: $(cat "$tmp/kinds.txt")"
	fi
else
	fail "dlock-bench --scenario semaphore --scenario read-mostly exited with an error: $(cat "$tmp/err")"
fi
"$bench" --uri mem://x --permits 0 >/dev/null 2>&1 && fail "--permits 0 was accepted"
"$bench" --uri mem://x --read-ratio 1.5 >/dev/null 2>&1 && fail "--read-ratio 1.5 was accepted"
if [ -n "${DLOCK_TEST_REDLOCK_URI:-}" ]; then
	if "$bench" --uri "$DLOCK_TEST_REDLOCK_URI" --scenario semaphore --scenario read-mostly --clients 2 \
		--duration 300ms --table "$tmp/redlock.txt" >/dev/null 2>"$tmp/err"; then
		[ "$(grep -c '^redlock .*not supported: DLOCK_FEATURE_' "$tmp/redlock.txt")" -eq 2 ] ||
			fail "RedLock: no two 'not supported' rows labelled redlock: $(cat "$tmp/redlock.txt")"
	else
		fail "dlock-bench on RedLock failed instead of saying 'not supported': $(cat "$tmp/err")"
	fi
	# The faults scenario on RedLock (ci/bench.sh runs it): only the pause here, which
	# stops a worker, never a server; no cut (no raw client of three servers); its
	# writes carry no token, so the store refuses none.
	if "$bench" --uri "$DLOCK_TEST_REDLOCK_URI" --scenario faults --lease 200ms --fault-clients 2 --json \
		>"$tmp/redlock-faults.jsonl" 2>"$tmp/err"; then
		check_lines "$tmp/redlock-faults.jsonl" 1 "faults on RedLock"
		grep -Eq '"backend":"redlock",.*"ops":[1-9][0-9]*,.*"stale_writes_rejected":0,.*"faults":\[\{"fault":"pause",[^]]*\}\]' \
			"$tmp/redlock-faults.jsonl" || fail "faults on RedLock: not one pause and nothing else, or a write refused: $(cat "$tmp/redlock-faults.jsonl")"
	else
		fail "dlock-bench --scenario faults on RedLock exited with an error: $(cat "$tmp/err")"
	fi
else
	echo "skip - RedLock's 'not supported' rows and faults (DLOCK_TEST_REDLOCK_URI unset)"
fi

# inflight: one loop thread with N names in flight, beside N blocking
# threads and, where the server has a raw client, N raw connections.  Every
# row has its throughputs, the feature's value and what the loop's process
# used (a server's rows: a connection at least); PostgreSQL's also the
# server's max_connections, and a size that cannot fit in it is skipped.
inflight_uris=(--uri mem://bench-inflight)
redis_uri="" pg_uri=""
for u in ${DLOCK_TEST_URIS:-}; do
	case "$u" in *,*) continue ;; esac # several hosts: no raw client
	case "$u" in
	redis://*) [ -n "$redis_uri" ] || redis_uri=$u ;;
	postgres://* | postgresql://*) [ -n "$pg_uri" ] || pg_uri=$u ;;
	esac
done
[ -n "$redis_uri" ] && inflight_uris+=(--uri "$redis_uri")
[ -n "$pg_uri" ] && inflight_uris+=(--uri "$pg_uri")
[ -n "$redis_uri" ] && [ -n "$pg_uri" ] ||
	echo "skip - inflight on Redis or PostgreSQL (no redis:// or postgres:// URI in DLOCK_TEST_URIS)"
if "$bench" "${inflight_uris[@]}" --scenario inflight --inflight 2 --duration 300ms --json \
	--table "$tmp/inflight.txt" >"$tmp/inflight.jsonl" 2>"$tmp/err"; then
	check_lines "$tmp/inflight.jsonl" $((${#inflight_uris[@]} / 2)) "inflight"
	while IFS= read -r line; do
		grep -Eq '"scenario":"inflight","clients":1,"threads":1,"processes":1,.*"ops":[1-9]' <<<"$line" ||
			fail "inflight: no cycle measured: $line"
		grep -Eq '"inflight":2,"loop_native":[01],"blocking_ops_per_s":[0-9.]+,"ratio_to_blocking":[0-9.]+,' <<<"$line" ||
			fail "inflight: N, the feature or the blocking side missing: $line"
		grep -Eq '"threads_seen":[1-9][0-9]*,"descriptors_seen":[1-9][0-9]*,"connections_seen":[0-9]+,' <<<"$line" ||
			fail "inflight: what the loop's process used is missing: $line"
		case "$line" in
		*'"backend":"mem"'*)
			grep -q '"raw_ops_per_s":null,.*"raw_note":"no raw client' <<<"$line" ||
				fail "inflight on mem://: a raw side, or no note why there is none: $line" ;;
		*)
			grep -Eq '"raw_ops_per_s":[0-9.]+,"ratio_to_raw":[0-9.]+,.*"blocking_ratio_to_raw":[0-9.]+,' <<<"$line" ||
				fail "inflight on a server: no raw side: $line"
			grep -Eq '"connections_seen":[1-9]' <<<"$line" || fail "inflight on a server: no connection seen: $line" ;;
		esac
	done <"$tmp/inflight.jsonl"
	grep -Eq '^inflight +N +ops/s +block/s +raw ops/s +ratio .* native$' "$tmp/inflight.txt" ||
		fail "inflight table: not its columns: $(cat "$tmp/inflight.txt")"
	if [ -n "$pg_uri" ]; then
		max=$(grep '"backend":"postgres' "$tmp/inflight.jsonl" | sed -n 's/.*"max_connections":\([0-9]*\).*/\1/p' | head -n 1)
		if [ -z "$max" ]; then
			fail "inflight on PostgreSQL: no max_connections: $(cat "$tmp/inflight.jsonl")"
		elif [ "$max" -lt 1008 ]; then
			if "$bench" --uri "$pg_uri" --scenario inflight --inflight 1000 --duration 300ms --json \
				>"$tmp/inflight-pg.jsonl" 2>"$tmp/err"; then
				grep -q "\"inflight\":1000,.*\"max_connections\":$max,\"skipped\":\"1000 in flight need 1000 sessions" \
					"$tmp/inflight-pg.jsonl" || fail "inflight 1000 on PostgreSQL: not skipped: $(cat "$tmp/inflight-pg.jsonl")"
			else
				fail "dlock-bench --inflight 1000 on PostgreSQL failed instead of skipping: $(cat "$tmp/err")"
			fi
		fi
	fi
else
	fail "dlock-bench --scenario inflight exited with an error: $(cat "$tmp/err")"
fi
"$bench" --uri mem://x --inflight 0 >/dev/null 2>&1 && fail "--inflight 0 was accepted"
"$bench" --uri mem://x --inflight 1001 >/dev/null 2>&1 && fail "--inflight 1001 was accepted"

if [ "$failed" -eq 0 ]; then
	echo "test_bench: $lines results, every field present, no overlap"
	exit 0
fi
echo "test_bench: $failed check(s) failed"
exit 1
