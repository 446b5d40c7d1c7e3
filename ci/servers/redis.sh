# Redis servers for the tests: one standalone instance (TCP and a unix
# socket), three independent instances for RedLock, and a primary with one
# replica, on free loopback ports, without persistence.  Sourced by ci/servers.sh, which calls
#
#   dlock_start_redis DIR   start them, wait for PING, export the variables below
#   dlock_stop_redis DIR    stop them by PID
#
# Exported for tests:
#   DLOCK_TEST_REDIS_URI        redis://127.0.0.1:PORT
#   DLOCK_TEST_REDIS_UNIX_URI   redis+unix:///DIR/PORT/redis.sock
#   DLOCK_TEST_REDLOCK_URI      redis://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   DLOCK_TEST_REDIS_PORT, DLOCK_TEST_REDLOCK_PORTS ("P1 P2 P3")
#   DLOCK_TEST_REDIS_PRIMARY_URI  redis://127.0.0.1:PORT of a primary with one replica
#   DLOCK_TEST_REDIS_REPLICA_PORT that replica's port (ctl stop/start it)
#   DLOCK_TEST_REDIS_CTL        a command: "$DLOCK_TEST_REDIS_CTL restart PORT"
#                               (also stop, start, flush-scripts)
#
# Run as a program, this file is that control command:
#   bash ci/servers/redis.sh ctl DIR {start|stop|restart|flush-scripts} PORT
# Each instance lives in DIR/PORT/ (pidfile, log, socket), so the port alone
# says how to restart it.

# A loopback port below the kernel's ephemeral range where nothing listens.
# (A port in that range can be taken at any moment by an outgoing
# connection, and then redis-server cannot bind it, listener or not.)
dlock_redis_free_port() {
	local low port
	low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null) || low=32768
	[ "$low" -gt 12000 ] || low=32768
	for _ in $(seq 1 200); do
		port=$((10000 + RANDOM % (low - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	echo "no free port found" >&2
	return 1
}

# Start the instance of DIR/PORT and wait until it answers PING.  With
# QUIET set, a failure prints nothing (the caller tries another port).
dlock_redis_launch() {
	local dir=$1 port=$2 quiet=${3:-} inst pid
	inst="$dir/$port"
	mkdir -p "$inst"
	rm -f "$inst/redis.sock"
	# DIR/PORT/args: more arguments for this instance (a replica's --replicaof), kept for restarts.
	local extra=()
	[ -f "$inst/args" ] && read -r -a extra <"$inst/args"
	# No diskless-sync delay: a replica would otherwise wait 5 s for its first sync.
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --repl-diskless-sync-delay 0 \
		--daemonize yes --pidfile "$inst/redis.pid" --logfile "$inst/redis.log" \
		--dir "$inst" --unixsocket "$inst/redis.sock" --unixsocketperm 700 "${extra[@]}" || return 1
	for _ in $(seq 1 100); do
		# Ready when the server that answers on the port is the one we started.
		pid=$(cat "$inst/redis.pid" 2>/dev/null || true)
		if [ -n "$pid" ] && [ "$(redis-cli -p "$port" info server 2>/dev/null |
			tr -d '\r' | awk -F: '/^process_id:/ {print $2}')" = "$pid" ]; then
			return 0
		fi
		# Daemonized: a server that could not bind has exited and logged why.
		if grep -q "Failed listening" "$inst/redis.log" 2>/dev/null; then
			break
		fi
		sleep 0.05
	done
	dlock_redis_halt "$dir" "$port"
	if [ -z "$quiet" ]; then
		echo "redis on port $port did not answer PING; its log:" >&2
		cat "$inst/redis.log" >&2
	fi
	return 1
}

# Start one instance on a free port (a few tries); prints the port.  More
# arguments go to redis-server (and to its restarts).
dlock_redis_launch_free() {
	local dir=$1 port
	shift
	for try in 1 2 3 4 5; do
		port=$(dlock_redis_free_port) || return 1
		if [ $# -gt 0 ]; then
			mkdir -p "$dir/$port"
			echo "$*" >"$dir/$port/args"
		fi
		if dlock_redis_launch "$dir" "$port" "$([ "$try" -lt 5 ] && echo quiet)"; then
			echo "$port"
			return 0
		fi
		rm -rf "${dir:?}/$port"
	done
	return 1
}

# Stop the instance of DIR/PORT by the PID in its pidfile; wait until it is
# gone (a zombie counts as gone: PID 1 may reap daemonized servers late).
dlock_redis_halt() {
	local dir=$1 port=$2 pid state
	pid=$(cat "$dir/$port/redis.pid" 2>/dev/null) || return 0
	[ -n "$pid" ] || return 0
	# Only ever signal our own server: a redis-server running in this instance's directory.
	if [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" != "$(cd "$dir/$port" && pwd -P)" ] ||
		! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q redis-server; then
		rm -f "$dir/$port/redis.pid"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || { rm -f "$dir/$port/redis.pid"; return 0; }
	for _ in $(seq 1 100); do
		state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || break
		[ "$state" = "Z" ] && break
		sleep 0.05
	done
	if [ -e "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/$port/redis.pid"
}

dlock_start_redis() {
	local dir=$1 here port ports=() p
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	for _ in 1 2 3 4; do
		# A failed start stops what it started: the caller only stops backends that started.
		port=$(dlock_redis_launch_free "$dir") || { dlock_stop_redis "$dir"; return 1; }
		ports+=("$port")
		echo "$port" >>"$dir/ports"
	done
	export DLOCK_TEST_REDIS_PORT=${ports[0]}
	export DLOCK_TEST_REDIS_URI="redis://127.0.0.1:${ports[0]}"
	export DLOCK_TEST_REDIS_UNIX_URI="redis+unix://$dir/${ports[0]}/redis.sock"
	export DLOCK_TEST_REDLOCK_PORTS="${ports[1]} ${ports[2]} ${ports[3]}"
	p="127.0.0.1:${ports[1]},127.0.0.1:${ports[2]},127.0.0.1:${ports[3]}"
	export DLOCK_TEST_REDLOCK_URI="redis://$p"
	export DLOCK_TEST_REDIS_CTL="bash $here/redis.sh ctl $dir"
	# A primary with one replica, for replicas=N: their own pair, so that no other test pays for replication.
	port=$(dlock_redis_launch_free "$dir") || { dlock_stop_redis "$dir"; return 1; }
	echo "$port" >>"$dir/ports"
	export DLOCK_TEST_REDIS_PRIMARY_URI="redis://127.0.0.1:$port"
	p=$(dlock_redis_launch_free "$dir" --replicaof 127.0.0.1 "$port") || { dlock_stop_redis "$dir"; return 1; }
	echo "$p" >>"$dir/ports"
	export DLOCK_TEST_REDIS_REPLICA_PORT=$p
	for _ in $(seq 1 200); do
		redis-cli -p "$p" info replication 2>/dev/null | grep -q '^master_link_status:up' && break
		sleep 0.05
	done
	redis-cli -p "$p" info replication 2>/dev/null | grep -q '^master_link_status:up' ||
		{ echo "redis replica on port $p did not sync with $port" >&2; dlock_stop_redis "$dir"; return 1; }
	dlock_add_test_uri "$DLOCK_TEST_REDIS_URI"
	dlock_add_test_uri "$DLOCK_TEST_REDIS_URI?fair=1"
	dlock_add_test_uri "$DLOCK_TEST_REDLOCK_URI"
}

dlock_stop_redis() {
	local dir=$1 port
	[ -f "$dir/ports" ] || return 0
	while read -r port; do
		dlock_redis_halt "$dir" "$port"
	done <"$dir/ports"
	rm -f "$dir/ports"
}

# The control command, when this file is run rather than sourced.
dlock_redis_ctl() {
	local dir=$1 cmd=$2 port=$3
	if [ -z "$dir" ] || [ -z "$port" ] || ! grep -qx "$port" "$dir/ports" 2>/dev/null; then
		echo "usage: redis.sh ctl DIR {start|stop|restart|flush-scripts} PORT (a port started in DIR)" >&2
		return 2
	fi
	case "$cmd" in
	start) dlock_redis_launch "$dir" "$port" ;;
	stop) dlock_redis_halt "$dir" "$port" ;;
	restart) dlock_redis_halt "$dir" "$port" && dlock_redis_launch "$dir" "$port" ;;
	flush-scripts) [ "$(redis-cli -p "$port" script flush)" = "OK" ] ;;
	*)
		echo "redis.sh ctl: unknown command '$cmd'" >&2
		return 2
		;;
	esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = "ctl" ]; then
	shift
	dlock_redis_ctl "$@"
	exit $?
fi
