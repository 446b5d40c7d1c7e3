#!/usr/bin/env bash
# A Sentinel failover to a replica that missed the master's last writes:
# the one that makes Redis AP.  For dlock-bench's failover fault (ci/bench.sh),
# run while a holder holds a lock on master NAME of the topology in DIR
# (ci/servers/redis.sh):
#
#   1. the replica's link to the master moves onto a proxy (socat, in a
#      process group of its own), then the proxy is stopped (SIGSTOP): the
#      link stays open, so the replica stays eligible for promotion, but
#      nothing the master writes from now on reaches it;
#   2. after LAG_MS — longer than the lease, so the replica's copy of the
#      held key has expired there (the master's renewals never arrived) —
#      the master is killed (SIGKILL, a crash), and the proxy with the bytes
#      it held;
#   3. the sentinels promote the replica; this returns once every sentinel
#      names it and it answers as a master, and prints it ("HOST PORT").
#
# The replica stays behind for less than 10 x down-after-milliseconds (else
# Sentinel would not promote it), and the proxy is in place for less than
# failover-timeout (else Sentinel would point the replica back at the
# master): LAG_MS must be well under both (ci/servers/redis.sh: 10 s, 3 s).
# The killed master is started again and rejoins as a replica, so the
# topology is whole for whatever runs next.
#
# Usage: bash ci/servers/redis/stale-failover.sh DIR NAME LAG_MS
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=ci/servers/redis.sh
. "$here/redis.sh"

dir=${1:?DIR} name=${2:?NAME} lag_ms=${3:?LAG_MS}
command -v socat >/dev/null || { echo "stale-failover: socat is not installed" >&2; exit 2; }
master=$(dlock_redis_master "$dir" "$name")
mport=${master#* }
replica=""
for n in $(dlock_redis_list "$dir" "$name" nodes); do
	[ "$n" = "$mport" ] || replica=$n
done
[ -n "$replica" ] || { echo "stale-failover: no replica of $name" >&2; exit 1; }

# 1. The replica replicates through the proxy, caught up, then the proxy stops.
pport=$(dlock_redis_free_port)
setsid socat "TCP-LISTEN:$pport,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$mport" </dev/null >/dev/null 2>&1 &
proxy=$!
stop_proxy() { kill -KILL -- "-$proxy" 2>/dev/null || true; }
trap stop_proxy EXIT
for _ in $(seq 1 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$pport") 2>/dev/null && break
	sleep 0.02
done
dlock_redis_cli "$dir" "$replica" replicaof 127.0.0.1 "$pport" >/dev/null
dlock_redis_wait_sync "$dir" "$replica" "$pport" $((SECONDS + 10)) || exit 1
kill -STOP -- "-$proxy"

# 2. The master goes on alone, then crashes; what the proxy held is lost.
sleep "$(awk -v ms="$lag_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
pid=$(cat "$dir/$mport/redis.pid")
kill -KILL "$pid"
stop_proxy

# 3. The sentinels promote the replica; the old master comes back as a replica.
new=$(dlock_redis_wait_switch "$dir" "$name" "$mport" $((SECONDS + 30)))
dlock_redis_halt "$dir" "$mport" # the pidfile of a killed server
dlock_redis_launch "$dir" "$mport" >/dev/null
dlock_redis_rejoin "$dir" "$name" "$mport" $((SECONDS + 30)) >/dev/null || true
echo "$new"
