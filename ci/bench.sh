#!/usr/bin/env bash
# The benchmark: start the lock servers, run dlock-bench over every backend
# (dlock next to a raw client of the same server), print the table, and
# write the JSON lines and the charts.  Sized to finish in a few minutes on
# a 2-core machine.
#
# Usage: bash ci/bench.sh [OUTDIR]        (default OUTDIR: build/bench)
#
# Writes OUTDIR/results.jsonl (one JSON object per backend, scenario and
# size), OUTDIR/table.txt, OUTDIR/table-fencing.txt (the same without fencing
# tokens), OUTDIR/table-kinds.txt (a semaphore and a read-mostly read-write
# lock), OUTDIR/table-scale.txt (many waiters on one name, and many locks
# held by one client, with the servers' CPU time), OUTDIR/table-inflight.txt
# (one thread with N locks in flight through a loop client, beside N
# blocking threads and N raw connections), OUTDIR/table-failover.txt
# (the faults scenario with a failover, and on RedLock), and OUTDIR/*.png,
# OUTDIR/scale/*.png and OUTDIR/failover/*.png with the data and gnuplot
# scripts behind them.
# Environment:
#   DLOCK_BENCH_DURATION   length of each measured phase (default 2s)
#   DLOCK_BENCH_BUILD      build directory to use (default build/plain, built here)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=${1:-build/bench}
duration=${DLOCK_BENCH_DURATION:-2s}
build=${DLOCK_BENCH_BUILD:-build/plain}

bash ci/install-deps.sh
# gnuplot draws the charts and socat is the stalled proxy of the Redis
# failover (ci/servers/redis/stale-failover.sh); neither is needed by the
# build or the tests.
if ! command -v gnuplot >/dev/null || ! command -v socat >/dev/null; then
	if [ "$(id -u)" -eq 0 ]; then as_root=(); else as_root=(sudo); fi
	"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends gnuplot-nox socat </dev/null ||
		{ "${as_root[@]}" apt-get -q update && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
			apt-get -q install -y --no-install-recommends gnuplot-nox socat </dev/null; }
fi
if [ -z "${DLOCK_BENCH_BUILD:-}" ]; then
	bash ci/build.sh plain
fi
bench=$build/tools/bench/dlock-bench
[ -x "$bench" ] || { echo "bench: $bench not built" >&2; exit 1; }

# shellcheck source=ci/servers.sh
. ci/servers.sh
work=""
cleanup() {
	dlock_servers_stop || true
	[ -n "$work" ] && rm -rf "$work"
}
trap cleanup EXIT
dlock_servers_start

mkdir -p "$out"
rm -f "$out"/*.png "$out"/*.dat "$out"/*.gp
rm -rf "$out/failover" "$out/scale"
work=$(mktemp -d /tmp/dlock-bench-files.XXXXXX)

# The ZooKeeper standalone server has no ctl start/stop: use its start and
# stop functions directly (the restarted server keeps the same pid file).
zk_dir=$DLOCK_SERVERS_DIR/zookeeper/standalone
zk_ctl=". '$PWD/ci/servers.sh'; . '$PWD/ci/servers/zookeeper.sh'"
redis_port=$DLOCK_TEST_REDIS_PORT
# Each server's processes, for its CPU time (--server-pids).
redis_pids="$DLOCK_TEST_REDIS_CTL pid $redis_port"
pg_pids="$DLOCK_TEST_PG_CTL pid"
zk_pids="cat '$zk_dir/pid'"

# A 2 s session: pauses past it take seconds, not the default 30.
zk_uri="$DLOCK_TEST_ZK_URI?session_timeout=2s"

args=(
	--uri "mem://bench"
	--uri "file://$work/locks"
	--uri "$DLOCK_TEST_REDIS_URI" --server-pids "$redis_pids"
	--server-stop "$DLOCK_TEST_REDIS_CTL stop $redis_port"
	--server-start "$DLOCK_TEST_REDIS_CTL start $redis_port"
	--uri "$DLOCK_TEST_REDIS_URI?fair=0" --server-pids "$redis_pids"
	--server-stop "$DLOCK_TEST_REDIS_CTL stop $redis_port"
	--server-start "$DLOCK_TEST_REDIS_CTL start $redis_port"
	--uri "$DLOCK_TEST_PG_URI" --server-pids "$pg_pids"
	--server-stop "$DLOCK_TEST_PG_CTL stop"
	--server-start "$DLOCK_TEST_PG_CTL start"
	--uri "$DLOCK_TEST_PG_ROW_URI" --server-pids "$pg_pids"
	--server-stop "$DLOCK_TEST_PG_CTL stop"
	--server-start "$DLOCK_TEST_PG_CTL start"
	--uri "$DLOCK_TEST_CLUSTER_URI"
	--uri "$zk_uri" --server-pids "$zk_pids"
	--server-stop "bash -c \"$zk_ctl; dlock_zk_halt '$zk_dir'\""
	--server-start "bash -c \"$zk_ctl; dlock_zk_launch '$zk_dir' && dlock_zk_await '$zk_dir'\""
)

# Sizes: 1 client; 8 clients in 8 processes; 8 threads sharing 1 client (local coalescing).
echo "== dlock-bench: sizes 1, 8 (8 processes) and 1x8 threads; $duration per measurement; then faults"
"$bench" "${args[@]}" --clients 1,8,1x8 --processes 8 --duration "$duration" --lease 2s \
	--json --table "$out/table.txt" --plot "$out" >"$out/results.jsonl"

# What a fencing token costs: the same uncontended runs with no token taken,
# by dlock (fencing=off) or by the raw clients (ZooKeeper's and mem://'s
# tokens cost nothing more, so they are left out).
echo "== dlock-bench: uncontended without fencing tokens"
"$bench" --uri "file://$work/locks" --uri "$DLOCK_TEST_REDIS_URI" --uri "$DLOCK_TEST_PG_URI" \
	--uri "$DLOCK_TEST_PG_ROW_URI" --scenario uncontended --clients 1,8 --processes 8 --duration "$duration" \
	--fencing off --json --table "$out/table-fencing.txt" >>"$out/results.jsonl"
# The other kinds of lock on one name: a semaphore of 4 permits and a
# read-write lock taken shared 9 times in 10, 16 clients in a process each
# (dlock-bench's defaults), 1 s each, with a 100 us critical section so that
# holders meet (the column to read is the most seen at once).  A backend
# without the kind gives a "not supported" row.
echo "== dlock-bench: semaphore and read-mostly, 16 clients"
"$bench" --uri "mem://bench" --uri "file://$work/locks" --uri "$DLOCK_TEST_REDIS_URI" \
	--uri "$DLOCK_TEST_REDIS_URI?fair=0" --uri "$DLOCK_TEST_PG_URI" --uri "$DLOCK_TEST_PG_ROW_URI" \
	--uri "$DLOCK_TEST_CLUSTER_URI" --uri "$zk_uri" --scenario semaphore --scenario read-mostly --duration 1s \
	--cs-us 100 --json --table "$out/table-kinds.txt" >>"$out/results.jsonl"
# Many waiters on one name (scale: 8, 32 and 64 processes), then 1,000 locks
# held by one client for 6 s at a 3 s lease (held), with the servers' CPU
# time from /proc: --server-pids prints each server's process (PostgreSQL's
# postmaster, whose backends dlock-bench counts as its children; ZooKeeper's
# JVM), run again before each phase since the faults above restarted them.
echo "== dlock-bench: scale (8, 32, 64 waiters) and held (1000 locks), with the servers' CPU"
"$bench" --uri "$DLOCK_TEST_REDIS_URI" --server-pids "$redis_pids" \
	--uri "$DLOCK_TEST_REDIS_URI?fair=0" --server-pids "$redis_pids" \
	--uri "$DLOCK_TEST_PG_URI" --server-pids "$pg_pids" \
	--uri "$zk_uri" --server-pids "$zk_pids" \
	--scenario scale --waiters 8,32,64 --duration "$duration" --scenario held --held 1000 --hold 6s --lease 3s \
	--json --table "$out/table-scale.txt" --plot "$out/scale" >>"$out/results.jsonl"

# One thread keeping 1, 8 and 64 locks in flight through a loop client
# (dlock/loop.h), beside the blocking client with as many threads and the
# raw client with as many connections; then 1,000 on Redis (the loop alone:
# the other sides would need 1,000 threads) and PostgreSQL (skipped while it
# does not fit in max_connections, and the row says so).
echo "== dlock-bench: inflight (1, 8, 64 and 1000 locks in flight on one loop thread)"
"$bench" --uri "mem://bench" --uri "file://$work/locks" --uri "$DLOCK_TEST_REDIS_URI" --uri "$DLOCK_TEST_PG_URI" \
	--uri "$DLOCK_TEST_PG_ROW_URI" --uri "$zk_uri" --scenario inflight --inflight 1,8,64 --duration "$duration" \
	--json --table "$out/table-inflight.txt" >>"$out/results.jsonl"
"$bench" --uri "$DLOCK_TEST_REDIS_URI" --uri "$DLOCK_TEST_PG_URI" --scenario inflight --inflight 1000 \
	--duration "$duration" --json --table "$out/table-inflight-1000.txt" >>"$out/results.jsonl"

# A failover under a holder, after the faults every server gets: on PostgreSQL
# the primary killed (immediate shutdown) and its synchronous standby
# promoted, on a pair of its own per mode (a failover leaves no standby
# behind; the URI lists both hosts, target_session_attrs=read-write); on the
# ZooKeeper ensemble the leader killed (two of three go on), started again
# afterwards.  RedLock's rows (below) are here too: a URI of several servers
# like the others of this run.  The charts go to a folder of their own: a
# second run's would replace the first's.
echo "== dlock-bench: faults with a failover, and on RedLock"
new_pg_pair() {
	local got
	got=$($DLOCK_TEST_PG_CTL pair-new) || return 1
	pair_dir=$(sed -n 's/^pair=//p' <<<"$got")
	pair_uri=$(sed -n 's/^uri=//p' <<<"$got")
}
new_pg_pair
pg_adv_dir=$pair_dir pg_adv_uri=$pair_uri
new_pg_pair
pg_row_dir=$pair_dir pg_row_uri="$pair_uri&mode=row"
# Redis Cluster: the master of the faults' lock (DLOCK_BENCH_LOCK) failed
# over, planned (CLUSTER FAILOVER on its replica) and crashed (SIGKILL, its
# replica promoted by the cluster); every node rejoins afterwards.
cluster_failover="bash $PWD/ci/servers/redis/cluster-failover.sh $DLOCK_TEST_REDIS_DIR"
# Redis behind Sentinel: a planned failover (SENTINEL FAILOVER: the replica
# has every write), then one to a replica that missed the last writes for
# longer than a lease (ci/servers/redis/stale-failover.sh: its link held by a
# stopped proxy, the master killed), without and with replicas=1.
sentinel_uri="redis+sentinel://:$DLOCK_TEST_SENTINEL_DATA_PASSWORD@127.0.0.1:${DLOCK_TEST_SENTINEL_PORTS// /,127.0.0.1:}/$DLOCK_TEST_SENTINEL_MASTER?sentinel_password=$DLOCK_TEST_SENTINEL_PASSWORD"
stale_failover="bash $PWD/ci/servers/redis/stale-failover.sh $DLOCK_TEST_REDIS_DIR $DLOCK_TEST_SENTINEL_MASTER 2500"
# RedLock over three independent servers (no fencing token, no failover, no
# cut: one raw connection does not reach three servers): the pause, then a
# restart of one of the three (the holder's key stays on the other two, a
# majority) and, in a row of its own, of two (a majority forgets the key, as
# one Redis does when it restarts without persistence).
read -r redlock_1 redlock_2 _ <<<"$DLOCK_TEST_REDLOCK_PORTS"
redlock_ctl() { # VERB PORT...: the command that runs VERB on each PORT
	local verb=$1 line="" port
	shift
	for port; do line+="${line:+ && }$DLOCK_TEST_REDIS_CTL $verb $port"; done
	printf '%s' "$line"
}
"$bench" --uri "$pg_adv_uri" --failover "$DLOCK_TEST_PG_CTL pair-failover $pg_adv_dir" \
	--uri "$pg_row_uri" --failover "$DLOCK_TEST_PG_CTL pair-failover $pg_row_dir" \
	--uri "$DLOCK_TEST_ZK_ENSEMBLE_URI?session_timeout=2s" --failover "$DLOCK_TEST_ZK_CTL kill-leader" \
	--uri "$sentinel_uri" --failover "$DLOCK_TEST_REDIS_CTL failover $DLOCK_TEST_SENTINEL_MASTER" \
	--uri "$sentinel_uri" --failover "$stale_failover" \
	--uri "$sentinel_uri&replicas=1&replicas_timeout=200ms" --failover "$stale_failover" \
	--uri "$DLOCK_TEST_CLUSTER_URI" --failover "$cluster_failover planned" \
	--uri "$DLOCK_TEST_CLUSTER_URI" --failover "$cluster_failover crash" \
	--uri "$DLOCK_TEST_REDLOCK_URI" --server-stop "$(redlock_ctl stop "$redlock_1")" \
	--server-start "$(redlock_ctl start "$redlock_1")" \
	--uri "$DLOCK_TEST_REDLOCK_URI" --server-stop "$(redlock_ctl stop "$redlock_1" "$redlock_2")" \
	--server-start "$(redlock_ctl start "$redlock_1" "$redlock_2")" \
	--scenario faults --lease 2s --json --table "$out/table-failover.txt" --plot "$out/failover" \
	>>"$out/results.jsonl"
$DLOCK_TEST_PG_CTL pair-drop "$pg_adv_dir"
$DLOCK_TEST_PG_CTL pair-drop "$pg_row_dir"
for node in $DLOCK_TEST_CLUSTER_PORTS; do # the crashed master (ci/servers/redis.sh: dlock_redis_cluster_runs)
	dlock_redis_cluster_runs "$DLOCK_TEST_REDIS_DIR" "$node" || $DLOCK_TEST_REDIS_CTL cluster-rejoin "$node"
done
for member in 1 2 3; do
	$DLOCK_TEST_ZK_CTL pid "$member" >/dev/null 2>&1 || $DLOCK_TEST_ZK_CTL start "$member"
done
cat "$out/table.txt" "$out/table-fencing.txt" "$out/table-kinds.txt" "$out/table-scale.txt" "$out/table-inflight.txt" \
	"$out/table-inflight-1000.txt" "$out/table-failover.txt"
echo "== written: $out/table*.txt $out/results.jsonl $out/*.png $out/scale/*.png $out/failover/*.png"
