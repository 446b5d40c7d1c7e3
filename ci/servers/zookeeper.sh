# ZooKeeper servers for the tests: one standalone server and one 3-node
# ensemble, on free loopback ports, with a short tickTime (500 ms: sessions
# of 1 to 10 s) so that session tests are quick.  Sourced by ci/servers.sh,
# which calls
#
#   dlock_start_zookeeper DIR   start them, wait for `srvr`, export the variables below
#   dlock_stop_zookeeper DIR    stop them by PID
#
# Exported for tests:
#   DLOCK_TEST_ZK_URI             zk://127.0.0.1:PORT
#   DLOCK_TEST_ZK_ENSEMBLE_URI    zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   DLOCK_TEST_ZK_PORT, DLOCK_TEST_ZK_ENSEMBLE_PORTS ("P1 P2 P3")
#   DLOCK_TEST_ZK_PID, DLOCK_TEST_ZK_ENSEMBLE_PIDS (at start; `ctl pid N` after restarts)
#   DLOCK_TEST_ZK_CTL             a command for one ensemble member N (1..3):
#       $DLOCK_TEST_ZK_CTL stop N | start N | mode N | pid N
#       $DLOCK_TEST_ZK_CTL leader      prints the member that `srvr` calls leader
#       $DLOCK_TEST_ZK_CTL kill-leader kills that member (SIGKILL, as in a crash), returns
#                                      once another member leads, prints the killed one
#                                      (`start N` brings it back)
#
# Run as a program, this file is that control command:
#   bash ci/servers/zookeeper.sh ctl DIR {stop|start|mode|pid|leader|kill-leader} [N]
#
# The server is the Debian jar run directly (its manifest names its
# dependencies); without a logging library on the class path it prints
# nothing.  -Dzookeeper.forceSync=no is for tests only: no fsync per write.
# Empty container nodes are reaped every 500 ms instead of every minute, so
# the tests meet a reaped lock parent often.

dlock_zk_java_opts=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms32m -Xmx256m
	-Dzookeeper.forceSync=no -Dznode.container.checkIntervalMs=500)

# The `srvr` answer of the server on PORT, or nothing.  A probe that comes
# too early can leave the server holding the socket without answering: read
# with a short timeout and let the caller retry.
dlock_zk_srvr() {
	timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf srvr >&3
		while IFS= read -r -t 0.3 line <&3; do printf "%s\n" "$line"; done' _ "$1" 2>/dev/null
}

# "standalone", "leader" or "follower" once the server on PORT serves.
dlock_zk_mode() {
	{ dlock_zk_srvr "$1" || true; } | sed -n 's/^Mode: //p'
}

# Write DIR/NAME/zoo.cfg for one server; `servers` holds the server.N lines.
dlock_zk_config() {
	local inst=$1 port=$2 servers=$3
	mkdir -p "$inst/data"
	cat >"$inst/zoo.cfg" <<EOF
tickTime=500
initLimit=10
syncLimit=5
dataDir=$inst/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat
maxClientCnxns=0
$servers
EOF
}

# Start the server configured in DIR/NAME in the background; its PID and
# client port go to DIR/NAME/pid and DIR/NAME/port.
dlock_zk_launch() {
	local inst=$1 port
	port=$(sed -n 's/^clientPort=//p' "$inst/zoo.cfg")
	java "${dlock_zk_java_opts[@]}" -cp /usr/share/java/zookeeper.jar \
		org.apache.zookeeper.server.quorum.QuorumPeerMain "$inst/zoo.cfg" \
		>"$inst/server.log" 2>&1 </dev/null &
	echo $! >"$inst/pid"
	echo "$port" >"$inst/port"
}

# Wait until the server in DIR/NAME answers `srvr` with a serving mode.
dlock_zk_await() {
	local inst=$1 port pid mode
	port=$(cat "$inst/port")
	pid=$(cat "$inst/pid")
	for _ in $(seq 1 200); do
		mode=$(dlock_zk_mode "$port")
		case "$mode" in standalone | leader | follower) return 0 ;; esac
		if [ ! -e "/proc/$pid" ] || [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = "Z" ]; then
			break
		fi
		sleep 0.1
	done
	echo "zookeeper on port $port does not serve; its log:" >&2
	cat "$inst/server.log" >&2
	return 1
}

# Stop the server of DIR/NAME by the PID it was started with.
dlock_zk_halt() {
	local inst=$1 pid
	pid=$(cat "$inst/pid" 2>/dev/null) || return 0
	dlock_stop_pid "$pid" 10
	rm -f "$inst/pid"
}

# Ten distinct free ports (a port picked twice would clash at start).
dlock_zk_ports() {
	local -a got=()
	local p
	while [ "${#got[@]}" -lt "$1" ]; do
		p=$(dlock_free_port) || return 1
		case " ${got[*]} " in *" $p "*) continue ;; esac
		got+=("$p")
	done
	echo "${got[*]}"
}

dlock_start_zookeeper() {
	local dir=$1 here ports servers="" i p
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	read -r -a ports <<<"$(dlock_zk_ports 10)" || return 1
	[ "${#ports[@]}" -eq 10 ] || return 1

	dlock_zk_config "$dir/standalone" "${ports[0]}" ""
	for i in 1 2 3; do
		servers+="server.$i=127.0.0.1:${ports[$((3 + i))]}:${ports[$((6 + i))]}"$'\n'
	done
	for i in 1 2 3; do
		dlock_zk_config "$dir/member$i" "${ports[$i]}" "$servers"
		echo "$i" >"$dir/member$i/data/myid"
	done
	for i in standalone member1 member2 member3; do
		dlock_zk_launch "$dir/$i" || return 1
	done
	for i in standalone member1 member2 member3; do
		dlock_zk_await "$dir/$i" || return 1
	done

	export DLOCK_TEST_ZK_PORT=${ports[0]}
	export DLOCK_TEST_ZK_ENSEMBLE_PORTS="${ports[1]} ${ports[2]} ${ports[3]}"
	export DLOCK_TEST_ZK_PID
	DLOCK_TEST_ZK_PID=$(cat "$dir/standalone/pid")
	export DLOCK_TEST_ZK_ENSEMBLE_PIDS
	DLOCK_TEST_ZK_ENSEMBLE_PIDS="$(cat "$dir/member1/pid") $(cat "$dir/member2/pid") $(cat "$dir/member3/pid")"
	export DLOCK_TEST_ZK_URI="zk://127.0.0.1:${ports[0]}"
	p="127.0.0.1:${ports[1]},127.0.0.1:${ports[2]},127.0.0.1:${ports[3]}"
	export DLOCK_TEST_ZK_ENSEMBLE_URI="zk://$p"
	export DLOCK_TEST_ZK_CTL="bash $here/zookeeper.sh ctl $dir"
	dlock_add_test_uri "$DLOCK_TEST_ZK_URI"
	dlock_add_test_uri "$DLOCK_TEST_ZK_ENSEMBLE_URI"
}

dlock_stop_zookeeper() {
	local dir=$1 i
	for i in standalone member1 member2 member3; do
		[ -d "$dir/$i" ] && dlock_zk_halt "$dir/$i"
	done
	return 0
}

# Kill the ensemble's leader as a crash would (SIGKILL), wait until one of
# the two others leads; print the killed member.  Its pid file goes, so
# `ctl start N` starts it again.
dlock_zk_kill_leader() {
	local dir=$1 n pid i state
	n=$(dlock_zk_ctl "$dir" leader) || return 1
	pid=$(cat "$dir/member$n/pid")
	kill -KILL "$pid" 2>/dev/null || true
	for _ in $(seq 1 100); do
		state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || break
		[ "$state" = Z ] && break
		sleep 0.05
	done
	rm -f "$dir/member$n/pid"
	for _ in $(seq 1 300); do
		for i in 1 2 3; do
			[ "$i" = "$n" ] && continue
			if [ "$(dlock_zk_mode "$(cat "$dir/member$i/port")")" = leader ]; then
				echo "$n"
				return 0
			fi
		done
		sleep 0.05
	done
	echo "zookeeper.sh ctl: no member leads 15 s after member $n was killed" >&2
	return 1
}

# The control command, when this file is run rather than sourced.
dlock_zk_ctl() {
	local dir=$1 cmd=$2 n=${3:-} i
	if [ "$cmd" = leader ]; then
		for i in 1 2 3; do
			[ -f "$dir/member$i/pid" ] || continue
			if [ "$(dlock_zk_mode "$(cat "$dir/member$i/port")")" = leader ]; then
				echo "$i"
				return 0
			fi
		done
		echo "zookeeper.sh ctl: no member says it leads" >&2
		return 1
	fi
	if [ "$cmd" = kill-leader ]; then
		dlock_zk_kill_leader "$dir"
		return
	fi
	case "$n" in 1 | 2 | 3) ;; *)
		echo "usage: zookeeper.sh ctl DIR {stop|start|mode|pid} N (N = 1..3) | ctl DIR {leader|kill-leader}" >&2
		return 2
		;;
	esac
	local inst="$dir/member$n"
	case "$cmd" in
	stop) dlock_zk_halt "$inst" ;;
	start)
		if [ -f "$inst/pid" ]; then
			echo "zookeeper.sh ctl: member $n is running" >&2
			return 1
		fi
		dlock_zk_launch "$inst" && dlock_zk_await "$inst"
		;;
	mode) dlock_zk_mode "$(cat "$inst/port")" ;;
	pid) cat "$inst/pid" ;;
	*)
		echo "zookeeper.sh ctl: unknown command '$cmd'" >&2
		return 2
		;;
	esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = "ctl" ]; then
	shift
	# dlock_stop_pid lives in ci/servers.sh.
	. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/servers.sh"
	dlock_zk_ctl "$@"
	exit $?
fi
