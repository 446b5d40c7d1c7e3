#!/usr/bin/env bash
# A failover of the Redis Cluster master that serves one dlock lock, for
# dlock-bench's failover fault (ci/bench.sh), run while a holder holds the
# lock named by $DLOCK_BENCH_LOCK (dlock-bench sets it for fault commands):
#
#   crash    the master of the lock's slot is killed (SIGKILL); this returns
#            once its replica serves the slot and the cluster says ok
#            (ctl cluster-kill, cluster-wait-failover: about 4 s with the
#            tests' node timeout of 2 s)
#   planned  CLUSTER FAILOVER on that master's replica: the replica takes
#            over with every write (ctl cluster-failover)
#
# It prints the master that serves the slot afterwards.  After a crash the
# killed node is down until `ctl cluster-rejoin PORT` (ci/bench.sh rejoins
# every node once the bench is done).
#
# The lock's key is PREFIX:{HEX}:lock, HEX the first 16 bytes of the
# SHA-256 of the name in hexadecimal: the key layout of the Redis backend
# (redis.c in backends/redis/), written out here because a fault command
# has only the name.  PREFIX is the URI's prefix (default dlock).
#
# Usage: bash ci/servers/redis/cluster-failover.sh DIR {crash|planned} [PREFIX]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=ci/servers/redis.sh
. "$here/redis.sh"

dir=${1:?DIR} how=${2:?crash or planned} prefix=${3:-dlock}
name=${DLOCK_BENCH_LOCK:?the lock name (DLOCK_BENCH_LOCK) is not set}
ctl() { bash "$here/redis.sh" ctl "$dir" "$@"; }

hex=$(printf '%s' "$name" | sha256sum | cut -c1-32)
seed=$(awk '{print $1}' "$dir/cluster.nodes")
slot=$(dlock_redis_cli "$dir" "$seed" cluster keyslot "$prefix:{$hex}:lock" | tr -d '\r')
[[ $slot =~ ^[0-9]+$ ]] || { echo "cluster-failover: no slot for the lock's key: $slot" >&2; exit 1; }
master=$(ctl cluster-master "$slot")
case "$how" in
crash)
	ctl cluster-kill "$master"
	ctl cluster-wait-failover "$master"
	;;
planned)
	ctl cluster-failover "$master"
	;;
*)
	echo "usage: cluster-failover.sh DIR {crash|planned} [PREFIX]" >&2
	exit 2
	;;
esac
