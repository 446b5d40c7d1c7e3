# Redis servers for the tests: one standalone instance (TCP and a unix
# socket), three independent instances for RedLock, a primary with one
# replica, two instances that also speak TLS, two Sentinel topologies (one
# in plaintext with passwords, one over TLS only) and a Redis Cluster
# (ci/servers/redis/cluster.sh), on free loopback ports, without
# persistence.  Sourced by ci/servers.sh, which calls
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
#                               (also stop, start, flush-scripts, and the
#                               Sentinel commands below)
#   DLOCK_TEST_REDIS_DIR        DIR: every instance, TLS-only ones included,
#                               also listens on DIR/PORT/redis.sock in plaintext
#                               (hiredis without TLS can look at their keys)
#
#   TLS (certificates made at each start, EC P-256, valid 30 days):
#   DLOCK_TEST_TLS_DIR          ca.pem (the CA that signed the servers' and the
#                               client's certificates), client.pem, client.key,
#                               other-ca.pem (an unrelated CA), server.pem
#                               (subjectAltName DNS:localhost, IP:127.0.0.1)
#   DLOCK_TEST_REDIS_TLS_PORT   TLS port of an instance that asks for no client
#                               certificate; DLOCK_TEST_REDIS_TLS_PLAIN_PORT
#                               its plaintext port (same data)
#   DLOCK_TEST_REDIS_MTLS_PORT  TLS port of an instance that requires a client
#                               certificate signed by ca.pem;
#                               DLOCK_TEST_REDIS_MTLS_PLAIN_PORT its plaintext port
#
#   Sentinel, plaintext: a primary, a replica and three sentinels (quorum 2).
#   The data nodes and the sentinels have different passwords.
#   DLOCK_TEST_SENTINEL_PORTS   "S1 S2 S3", the sentinels
#   DLOCK_TEST_SENTINEL_MASTER  dlock-test, the master name they monitor
#   DLOCK_TEST_SENTINEL_PASSWORD       the sentinels' password (requirepass)
#   DLOCK_TEST_SENTINEL_DATA_PASSWORD  the primary's and the replica's
#   DLOCK_TEST_SENTINEL_DATA_PORTS     "PRIMARY REPLICA" as started; failovers
#                               swap the roles: ask the sentinels (ctl master)
#
#   Sentinel over TLS only (every instance --port 0, replication and the
#   sentinels' links in TLS too, certificates from DLOCK_TEST_TLS_DIR, no
#   client certificate asked for, no passwords):
#   DLOCK_TEST_SENTINEL_TLS_PORTS       "S1 S2 S3"
#   DLOCK_TEST_SENTINEL_TLS_MASTER      dlock-tls
#   DLOCK_TEST_SENTINEL_TLS_DATA_PORTS  "PRIMARY REPLICA" as started
#
#   Redis Cluster: six nodes, three masters with one replica each, every node
#   with a plaintext port and a TLS port (certificates from DLOCK_TEST_TLS_DIR,
#   no client certificate asked for), the nodes' own links in TLS:
#   DLOCK_TEST_CLUSTER_PORTS    "P1 P2 P3 P4 P5 P6", the plaintext ports as
#                               started (masters P1-P3); failovers change the
#                               roles: ask ctl cluster-master
#   DLOCK_TEST_CLUSTER_URI      redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   DLOCK_TEST_CLUSTER_TLS_URI  rediss+cluster://127.0.0.1:T1,127.0.0.1:T2,127.0.0.1:T3?tls_ca_file=DIR/tls/ca.pem
#                               (the TLS ports of the same nodes)
#
# Run as a program, this file is that control command:
#   bash ci/servers/redis.sh ctl DIR {start|stop|restart|flush-scripts|pid} PORT
#       PORT: any instance started in DIR, sentinels included; the TLS port of
#       a plaintext+TLS instance names that instance too.  A sentinel restarts
#       from the config it rewrote (it knows the current master); a data node
#       of a topology in the role it last had (Sentinel and rejoin rewrite its
#       config), except that one that was down during a failover comes back a
#       master, empty, until rejoin (or Sentinel, ~10 s later) demotes it;
#       pid prints the instance's process id (dlock-bench --server-pids)
#   bash ci/servers/redis.sh ctl DIR failover NAME
#       SENTINEL FAILOVER of master NAME (retried while the sentinels answer
#       NOGOODSLAVE or INPROG), then waits until every running sentinel names
#       the same new master and it answers ROLE as a master, then makes the old
#       master (when it runs) a replica of the new one in sync, as Sentinel
#       itself would only about 10 s later; prints the new "HOST PORT"
#   bash ci/servers/redis.sh ctl DIR master NAME
#       prints "HOST PORT" of NAME's master per the running sentinels (waits up
#       to 5 s for them to agree, then prints what most of them say)
#   bash ci/servers/redis.sh ctl DIR wait-failover NAME OLDPORT
#       after the master on OLDPORT was stopped: waits until every running
#       sentinel names the same master, not OLDPORT, and it answers ROLE as a
#       master; prints it
#   bash ci/servers/redis.sh ctl DIR rejoin NAME PORT
#       waits until the data node on PORT (restarted, say) is a replica of the
#       master the sentinels name, in sync, and every running sentinel lists it
#       as a replica that is up; a node that still acts as a master, or
#       replicates from elsewhere, is first sent what Sentinel would send it
#       some seconds later (REPLICAOF, CONFIG REWRITE, CLIENT KILL of its
#       clients, in a MULTI).  PORT being that master is fine too.
#   bash ci/servers/redis.sh ctl DIR wait-ready NAME
#       waits until NAME's topology is whole: all three sentinels running,
#       agreeing on a master that answers as one, each seeing the replica and
#       the two others up, the replica in sync.  After an automatic failover
#       that takes ~5 s: until then the sentinels hold each other's "master
#       down" replies (flag master_down), with which a sentinel that merely
#       loses the new master for down-after-milliseconds fails it over at once
#   bash ci/servers/redis.sh ctl DIR cluster-VERB ARGS
#       the cluster's: cluster-master, cluster-migrate (and its three steps
#       cluster-slot-begin, -keys, -end), cluster-kill, cluster-wait-failover,
#       cluster-rejoin, cluster-failover, cluster-wait-ready; see
#       ci/servers/redis/cluster.sh
# failover gives up after 20 s, the other waits after 30 s (master: 5 s),
# with a non-zero status.  Each instance lives in DIR/PORT/ (pidfile, log,
# socket, and the args, config file and redis-cli options it was started
# with), so the port alone says how to restart it.

# shellcheck source=ci/servers/redis/cluster.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/redis/cluster.sh"
# shellcheck source=ci/tls.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tls.sh"

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

# The instance (its DIR/PORT) that listens on PORT: PORT itself, or the
# instance whose TLS port it is.
dlock_redis_instance() {
	local dir=$1 port=$2 f
	[[ $port =~ ^[0-9]+$ ]] || return 1
	if [ -d "$dir/$port" ]; then
		echo "$port"
		return 0
	fi
	for f in "$dir"/*/tls-port; do
		if [ -f "$f" ] && [ "$(cat "$f")" = "$port" ]; then
			basename "$(dirname "$f")"
			return 0
		fi
	done
	return 1
}

# redis-cli to whatever listens on PORT of DIR, with the options it needs
# (DIR/PORT/cli, or tls-cli for the TLS port of a plaintext+TLS instance)
# and its password (DIR/PORT/auth), which goes through REDISCLI_AUTH rather
# than the command line.
dlock_redis_cli() {
	local dir=$1 port=$2 inst cli=cli opts=()
	shift 2
	inst=$(dlock_redis_instance "$dir" "$port") || return 1
	[ "$inst" = "$port" ] || cli="tls-cli"
	[ -f "$dir/$inst/$cli" ] && read -r -a opts <"$dir/$inst/$cli"
	if [ -f "$dir/$inst/auth" ]; then
		REDISCLI_AUTH=$(cat "$dir/$inst/auth") redis-cli -h 127.0.0.1 -p "$port" "${opts[@]}" "$@"
	else
		env -u REDISCLI_AUTH redis-cli -h 127.0.0.1 -p "$port" "${opts[@]}" "$@"
	fi
}

# The ports of NAME's sentinels or (data) nodes.
dlock_redis_list() {
	local ports
	read -r -a ports <"$1/$2.$3" && echo "${ports[*]}"
}

dlock_redis_running() {
	[ -s "$1/$2/redis.pid" ]
}

# Start the instance of DIR/PORT and wait until it answers PING (on its TLS
# port too, when it has one).  With QUIET set, a failure prints nothing (the
# caller tries another port).
dlock_redis_launch() {
	dlock_redis_spawn "$1" "$2" && dlock_redis_await "$@"
}

# Start the instance of DIR/PORT (daemonized: it may not listen yet).
dlock_redis_spawn() {
	local dir=$1 port=$2 inst
	inst="$dir/$port"
	mkdir -p "$inst"
	rm -f "$inst/redis.sock"
	# DIR/PORT/args: more arguments for this instance (a replica's --replicaof,
	# TLS, --sentinel), kept for restarts; DIR/PORT/redis.conf: a config file,
	# which Sentinel rewrites (a sentinel's state, a data node's role).
	local extra=() conf=()
	[ -f "$inst/args" ] && read -r -a extra <"$inst/args"
	[ -f "$inst/redis.conf" ] && conf=("$inst/redis.conf")
	# No diskless-sync delay: a replica would otherwise wait 5 s for its first sync.
	redis-server "${conf[@]}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
		--repl-diskless-sync-delay 0 --daemonize yes --pidfile "$inst/redis.pid" \
		--logfile "$inst/redis.log" --dir "$inst" --unixsocket "$inst/redis.sock" \
		--unixsocketperm 700 "${extra[@]}"
}

# Wait until the instance of DIR/PORT, just spawned, answers; else stop it.
dlock_redis_await() {
	local dir=$1 port=$2 quiet=${3:-} inst pid tport=""
	inst="$dir/$port"
	[ -f "$inst/tls-port" ] && tport=$(cat "$inst/tls-port")
	for _ in $(seq 1 250); do
		# Ready when the server that answers on the port is the one we started
		# (over TLS for a TLS-only instance: DIR/PORT/cli says so).
		pid=$(cat "$inst/redis.pid" 2>/dev/null || true)
		if [ -n "$pid" ] && [ "$(dlock_redis_cli "$dir" "$port" info server 2>/dev/null |
			tr -d '\r' | awk -F: '/^process_id:/ {print $2}')" = "$pid" ] &&
			{ [ -z "$tport" ] || [ "$(dlock_redis_cli "$dir" "$tport" ping 2>/dev/null)" = PONG ]; }; then
			if grep -q -- --sentinel "$inst/args" 2>/dev/null; then
				dlock_redis_cli "$dir" "$port" sentinel debug ping-period \
					"$DLOCK_REDIS_SENTINEL_PING_PERIOD_MS" >/dev/null 2>&1 || true
			fi
			return 0
		fi
		# Daemonized: a server that could not bind has exited and logged why.
		if grep -q "Failed listening" "$inst/redis.log" 2>/dev/null; then
			break
		fi
		sleep 0.02
	done
	dlock_redis_halt "$dir" "$port"
	if [ -z "$quiet" ]; then
		echo "redis on port $port${tport:+ (TLS $tport)} did not answer PING; its log:" >&2
		cat "$inst/redis.log" >&2
	fi
	return 1
}

# Start one instance on a free port (a few tries); prints the port.  More
# arguments go to redis-server (and to its restarts).
dlock_redis_launch_free() {
	local dir=$1
	shift
	dlock_redis_launch_free_with "$dir" dlock_redis_prep_args "$@"
}

# The same, but `PREPARE DIR PORT ARGS...` first writes the files of the
# instance in DIR/PORT (args, redis.conf, cli, auth, tls-port).
dlock_redis_launch_free_with() {
	local dir=$1 prepare=$2 port
	shift 2
	for try in 1 2 3 4 5; do
		port=$(dlock_redis_free_port) || return 1
		mkdir -p "$dir/$port"
		if ! "$prepare" "$dir" "$port" "$@"; then
			rm -rf "${dir:?}/$port"
			return 1
		fi
		if dlock_redis_launch "$dir" "$port" "$([ "$try" -lt 5 ] && echo quiet)"; then
			echo "$port"
			return 0
		fi
		rm -rf "${dir:?}/$port"
	done
	return 1
}

dlock_redis_prep_args() {
	local dir=$1 port=$2
	shift 2
	[ $# -eq 0 ] || echo "$*" >"$dir/$port/args"
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

# Is the replica on PORT in sync with the master on MPORT?
dlock_redis_in_sync() {
	local info
	info=$(dlock_redis_cli "$1" "$2" info replication 2>/dev/null | tr -d '\r')
	grep -qx "master_host:127.0.0.1" <<<"$info" && grep -qx "master_port:$3" <<<"$info" &&
		grep -qx "master_link_status:up" <<<"$info" && grep -qx "master_sync_in_progress:0" <<<"$info"
}

# Wait until it is, before DEADLINE (in $SECONDS).
dlock_redis_wait_sync() {
	local dir=$1 port=$2 mport=$3 deadline=$4
	until dlock_redis_in_sync "$dir" "$port" "$mport"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "redis replica on port $port did not sync with $mport" >&2
			return 1
		fi
		sleep 0.05
	done
}

# ---- TLS

# The TLS material of the tests, made afresh in DIR/tls at each start
# (ci/tls.sh): the servers' certificate names localhost and 127.0.0.1.
dlock_redis_make_tls() {
	dlock_tls_make "$1/tls" "DNS:localhost, IP:127.0.0.1"
}

# redis-server options: the server's certificate and the CA of DIR/tls.
dlock_redis_tls_args() {
	echo "--tls-cert-file $1/tls/server.pem --tls-key-file $1/tls/server.key --tls-ca-cert-file $1/tls/ca.pem"
}

# PREPARE for an instance with a plaintext port and a TLS port (a second
# free port); AUTH_CLIENTS yes: the TLS port requires a client certificate.
dlock_redis_prep_tls() {
	local dir=$1 port=$2 auth_clients=$3 tport t=$1/tls
	tport=$(dlock_redis_free_port) || return 1
	while [ "$tport" = "$port" ]; do tport=$(dlock_redis_free_port) || return 1; done
	echo "$tport" >"$dir/$port/tls-port"
	echo "--tls-port $tport $(dlock_redis_tls_args "$dir") --tls-auth-clients $auth_clients" >"$dir/$port/args"
	if [ "$auth_clients" = yes ]; then
		echo "--tls --cacert $t/ca.pem --cert $t/client.pem --key $t/client.key" >"$dir/$port/tls-cli"
	else
		echo "--tls --cacert $t/ca.pem" >"$dir/$port/tls-cli"
	fi
}

# The redis-server arguments of an instance of a TLS-only topology: no
# plaintext port, and its own links to other instances (replication,
# sentinels) in TLS too.  Writes its redis-cli options.
dlock_redis_tls_only_args() {
	local dir=$1 port=$2
	echo "--tls --cacert $dir/tls/ca.pem" >"$dir/$port/cli"
	echo "--port 0 --tls-port $port $(dlock_redis_tls_args "$dir") --tls-auth-clients no --tls-replication yes"
}

# ---- Sentinel

# The Sentinel topologies' timing, for every master they monitor:
#   down-after-milliseconds 1000: a stopped master is failed over within a
#     few seconds.  (Sentinel will not promote a replica whose link has been
#     down longer than 10 times this.)
#   failover-timeout 3000, because it bounds two things the tests meet:
#   - Sentinel points a replica that replicates from another address than
#     the master's back at the master (+fix-slave-config) only once it has
#     seen that address for failover-timeout.  Tests point the replica at a
#     proxy of the master for a few hundred ms; 3 s leaves that alone.  (It
#     notices the change only at its next INFO of the replica, every 10 s.)
#   - A failover attempt that does not complete (no good replica, an
#     election without a majority) is given up after failover-timeout and
#     retried by the sentinels that took part only after 2 x failover-timeout:
#     here 6 s, when the same servers serve three test runs, each of which
#     may fail over once or twice.  (A completed failover resets that delay:
#     two automatic failovers 3 s apart each took ~2.4 s here.  SENTINEL
#     FAILOVER, ctl failover, is never delayed.)
#   It also bounds a failover's own steps (promotion, reconfiguring the
#   replicas), which take about a second here.
#   PING-PERIOD 100 ms (SENTINEL DEBUG, Redis 7.0; set again at each start
#     of a sentinel): a sentinel retries a broken link only once a PING-PERIOD
#     (default 1000 ms).  On +switch-master it drops its links to the master
#     and gives the new one down-after-milliseconds to answer; with 1000 and
#     1000 a sentinel whose link came back late marked the new master down,
#     and, counting the other sentinels' (5 s old) "master down" replies, at
#     once objectively down: a second, spurious failover.  Also, the
#     sentinels started first meet the later ones at start ~0.1 s later
#     rather than 1 s.  Without SENTINEL DEBUG (Redis < 7.0) nothing changes.
DLOCK_REDIS_SENTINEL_DOWN_AFTER_MS=1000
DLOCK_REDIS_SENTINEL_FAILOVER_TIMEOUT_MS=3000
DLOCK_REDIS_SENTINEL_PING_PERIOD_MS=100

dlock_redis_password() {
	head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'
}

# PREPARE for a data node of a topology: TLS (yes/no), PASSWORD (or -) for
# clients and replication, MASTER (the port to replicate from, or -).  The
# role is in DIR/PORT/redis.conf, which Sentinel rewrites (CONFIG REWRITE)
# when it promotes or reconfigures the node: a restart keeps the role.
dlock_redis_prep_node() {
	local dir=$1 port=$2 tls=$3 pw=$4 master=$5 cf=$1/$2/redis.conf
	(
		umask 077
		echo "# A data node of a Sentinel topology (see ci/servers/redis.sh)." >"$cf"
		if [ "$pw" != - ]; then
			printf 'requirepass %s\nmasterauth %s\n' "$pw" "$pw" >>"$cf"
			echo "$pw" >"$dir/$port/auth"
		fi
		[ "$master" = - ] || echo "replicaof 127.0.0.1 $master" >>"$cf"
	) || return 1
	[ "$tls" = no ] || dlock_redis_tls_only_args "$dir" "$port" >"$dir/$port/args"
}

# Write the files of the sentinel of DIR/PORT: TLS (yes/no), NAME, MASTER
# (port), SPW (the sentinels' password, or -), DPW (the data nodes', or -),
# ID (its own id), then "PORT:ID" of the two other sentinels.  Knowing them
# from its config, it needs no hello message to find them (Sentinel
# publishes one every 2 s, the first 2 s after start); it learns the replica
# from the master's INFO at once.
dlock_redis_prep_sentinel() {
	local dir=$1 port=$2 tls=$3 name=$4 master=$5 spw=$6 dpw=$7 id=$8 k
	shift 8
	mkdir -p "$dir/$port" || return 1
	(
		umask 077
		echo "# A sentinel (see ci/servers/redis.sh); Sentinel rewrites this file."
		echo "sentinel myid $id"
		if [ "$spw" != - ]; then
			echo "requirepass $spw"
			echo "sentinel sentinel-pass $spw"
		fi
		echo "sentinel monitor $name 127.0.0.1 $master 2"
		echo "sentinel down-after-milliseconds $name $DLOCK_REDIS_SENTINEL_DOWN_AFTER_MS"
		echo "sentinel failover-timeout $name $DLOCK_REDIS_SENTINEL_FAILOVER_TIMEOUT_MS"
		[ "$dpw" = - ] || echo "sentinel auth-pass $name $dpw"
		for k in "$@"; do
			echo "sentinel known-sentinel $name 127.0.0.1 ${k%%:*} ${k#*:}"
		done
	) >"$dir/$port/redis.conf" || return 1
	[ "$spw" = - ] || (umask 077 && echo "$spw" >"$dir/$port/auth") || return 1
	if [ "$tls" = no ]; then
		echo "--sentinel" >"$dir/$port/args"
	else
		echo "--sentinel $(dlock_redis_tls_only_args "$dir" "$port")" >"$dir/$port/args"
	fi
}

# Start the topology NAME: a primary, its replica, three sentinels (quorum
# 2).  TLS yes: TLS only.  SPW, DPW: passwords of the sentinels and of the
# data nodes (- for none).  DIR/NAME.nodes and DIR/NAME.sentinels list the
# ports.  Returns once every server answers; dlock_redis_wait_ready then
# waits until the topology is whole (do something else meanwhile).
dlock_redis_start_topology() {
	local dir=$1 tls=$2 name=$3 spw=$4 dpw=$5 primary replica try k j s ok
	local sentinels ids known
	primary=$(dlock_redis_launch_free_with "$dir" dlock_redis_prep_node "$tls" "$dpw" -) || return 1
	echo "$primary" >>"$dir/ports"
	replica=$(dlock_redis_launch_free_with "$dir" dlock_redis_prep_node "$tls" "$dpw" "$primary") || return 1
	echo "$replica" >>"$dir/ports"
	echo "$primary $replica" >"$dir/$name.nodes"
	dlock_redis_wait_sync "$dir" "$replica" "$primary" $((SECONDS + 10)) || return 1
	# The sentinels know each other's port and id from the start: three free
	# ports first, then their configs, then the servers (all again on other
	# ports if one of them was taken meanwhile).
	for try in 1 2 3; do
		sentinels=()
		ids=()
		while [ ${#sentinels[@]} -lt 3 ]; do
			s=$(dlock_redis_free_port) || return 1
			[[ " ${sentinels[*]} " == *" $s "* ]] || [ -e "$dir/$s" ] || sentinels+=("$s")
		done
		for k in 0 1 2; do
			ids+=("$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')")
		done
		for k in 0 1 2; do
			known=()
			for j in 0 1 2; do
				[ "$j" = "$k" ] || known+=("${sentinels[j]}:${ids[j]}")
			done
			dlock_redis_prep_sentinel "$dir" "${sentinels[k]}" "$tls" "$name" "$primary" "$spw" "$dpw" \
				"${ids[k]}" "${known[@]}" || return 1
		done
		# All three at once: a sentinel connects to the others it knows as it
		# starts, and retries a failed link only a PING-PERIOD later.
		ok=0
		for s in "${sentinels[@]}"; do
			dlock_redis_spawn "$dir" "$s" || { ok=-1; break; }
		done
		for s in "${sentinels[@]}"; do
			[ "$ok" -ge 0 ] || break
			dlock_redis_await "$dir" "$s" "$([ "$try" -lt 3 ] && echo quiet)" || break
			ok=$((ok + 1))
		done
		if [ "$ok" -eq 3 ]; then
			printf '%s\n' "${sentinels[@]}" >>"$dir/ports"
			echo "${sentinels[*]}" >"$dir/$name.sentinels"
			return 0
		fi
		for s in "${sentinels[@]}"; do
			dlock_redis_halt "$dir" "$s"
			rm -rf "${dir:?}/$s"
		done
	done
	echo "could not start the sentinels of $name" >&2
	return 1
}

# A Sentinel reply that lists instances (raw redis-cli output: one field a
# line, key then value), as one line per instance: " name=… port=… flags=… ".
dlock_redis_kv() {
	tr -d '\r' | awk 'NR % 2 == 1 { k = $0; next }
		k == "name" && line != "" { print line " "; line = "" }
		{ line = line " " k "=" $0 }
		END { if (line != "") print line " " }'
}

# "HOST PORT" of NAME's master per each running sentinel, a line each ("-"
# for one that does not answer).
dlock_redis_views() {
	local dir=$1 name=$2 s a
	for s in $(dlock_redis_list "$dir" "$name" sentinels); do
		dlock_redis_running "$dir" "$s" || continue
		a=$(dlock_redis_cli "$dir" "$s" sentinel get-master-addr-by-name "$name" 2>/dev/null |
			tr -d '\r' | paste -sd ' ')
		if [[ $a =~ ^[^\ ]+\ [0-9]+$ ]]; then echo "$a"; else echo -; fi
	done
}

# Prints NAME's master when every running sentinel (one at least) names the
# same one.
dlock_redis_agreed() {
	local views
	views=$(dlock_redis_views "$1" "$2" | sort -u)
	[ -n "$views" ] && [ "$views" != - ] && [ "$(wc -l <<<"$views")" -eq 1 ] && echo "$views"
}

dlock_redis_role() {
	dlock_redis_cli "$1" "$2" role 2>/dev/null | tr -d '\r' | head -n "${3:-1}" | paste -sd ' '
}

# Does every running sentinel of NAME list PORT as a replica that is up?
dlock_redis_known_replica() {
	local dir=$1 name=$2 port=$3 s
	for s in $(dlock_redis_list "$dir" "$name" sentinels); do
		dlock_redis_running "$dir" "$s" || continue
		dlock_redis_cli "$dir" "$s" sentinel replicas "$name" 2>/dev/null | dlock_redis_kv |
			grep " port=$port " | grep -q " flags=slave " || return 1
	done
}

# Is NAME's topology whole?  Says why not in $DLOCK_REDIS_WHY.  One
# redis-cli a sentinel: its MASTER, REPLICAS and SENTINELS replies, told
# apart by their flags.
dlock_redis_is_ready() {
	local dir=$1 name=$2 m="" mp n s o kv
	for s in $(dlock_redis_list "$dir" "$name" sentinels); do
		dlock_redis_running "$dir" "$s" || { DLOCK_REDIS_WHY="sentinel $s is stopped"; return 1; }
		kv=$(printf 'SENTINEL %s %s\n' MASTER "$name" REPLICAS "$name" SENTINELS "$name" |
			dlock_redis_cli "$dir" "$s" 2>/dev/null | dlock_redis_kv)
		mp=$(head -n 1 <<<"$kv" | grep " flags=master " | grep -o " port=[0-9]* ")
		[ -n "$mp" ] || { DLOCK_REDIS_WHY="sentinel $s sees no master up (down, failing over, or no answer)"; return 1; }
		[ -z "$m" ] || [ "$mp" = "$m" ] || { DLOCK_REDIS_WHY="the sentinels do not agree on a master"; return 1; }
		m=$mp
		for n in $(dlock_redis_list "$dir" "$name" nodes); do
			[ " port=$n " = "$m" ] || grep " port=$n " <<<"$kv" | grep -q " flags=slave " ||
				{ DLOCK_REDIS_WHY="sentinel $s does not see replica $n up"; return 1; }
		done
		for o in $(dlock_redis_list "$dir" "$name" sentinels); do
			[ "$o" = "$s" ] || grep " port=$o " <<<"$kv" | grep -q " flags=sentinel " ||
				{ DLOCK_REDIS_WHY="sentinel $s does not see sentinel $o up"; return 1; }
		done
	done
	m=${m#*=}
	m=${m% }
	[ "$(dlock_redis_role "$dir" "$m")" = master ] || { DLOCK_REDIS_WHY="$m is not a master"; return 1; }
	for n in $(dlock_redis_list "$dir" "$name" nodes); do
		[ "$n" = "$m" ] || dlock_redis_in_sync "$dir" "$n" "$m" ||
			{ DLOCK_REDIS_WHY="replica $n not in sync with $m"; return 1; }
	done
}

dlock_redis_wait_ready() {
	local dir=$1 name=$2 deadline=$3
	until dlock_redis_is_ready "$dir" "$name"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "redis sentinel topology $name not ready: $DLOCK_REDIS_WHY" >&2
			return 1
		fi
		sleep 0.05
	done
}

# Print NAME's master per the sentinels: once they agree, or after 5 s what
# most of them say.
dlock_redis_master() {
	local dir=$1 name=$2 deadline=$((SECONDS + 5)) a
	until a=$(dlock_redis_agreed "$dir" "$name"); do
		if [ "$SECONDS" -ge "$deadline" ]; then
			a=$(dlock_redis_views "$dir" "$name" | grep -v '^-$' | sort | uniq -c | sort -rn | head -n 1 |
				awk '{print $2, $3}')
			[ -n "$a" ] || { echo "no sentinel of $name answers" >&2; return 1; }
			echo "the sentinels of $name do not agree; most say $a" >&2
			break
		fi
		sleep 0.1
	done
	echo "$a"
}

# Wait until every running sentinel names the same master of NAME, not
# OLDPORT, and it answers ROLE as a master; print it.
dlock_redis_wait_switch() {
	local dir=$1 name=$2 old=$3 deadline=$4 a
	until a=$(dlock_redis_agreed "$dir" "$name") && [ "${a#* }" != "$old" ] &&
		[ "$(dlock_redis_role "$dir" "${a#* }")" = master ]; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "no new master of $name (was on $old); the sentinels say: $(dlock_redis_views "$dir" "$name" | paste -sd ,)" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "$a"
}

# Make the data node on PORT a replica in sync of NAME's master (see ctl rejoin).
dlock_redis_rejoin() {
	local dir=$1 name=$2 port=$3 deadline=$4 a m
	while :; do
		if a=$(dlock_redis_agreed "$dir" "$name"); then
			m=${a#* }
			if [ "$m" = "$port" ]; then
				[ "$(dlock_redis_role "$dir" "$port")" = master ] && return 0
			else
				case "$(dlock_redis_role "$dir" "$port" 3)" in
				"slave 127.0.0.1 $m" | "") ;;
				*)
					# A master since its restart, or the replica of another
					# address: what Sentinel does itself after ~10 s
					# (+convert-to-slave) or after failover-timeout
					# (+fix-slave-config), with the transaction it sends:
					# CONFIG REWRITE keeps the role for restarts, and the
					# node's clients are disconnected (not this one: SKIPME).
					printf '%s\n' MULTI "REPLICAOF 127.0.0.1 $m" "CONFIG REWRITE" \
						"CLIENT KILL TYPE normal" "CLIENT KILL TYPE pubsub" EXEC |
						dlock_redis_cli "$dir" "$port" >/dev/null 2>&1
					;;
				esac
				dlock_redis_in_sync "$dir" "$port" "$m" && dlock_redis_known_replica "$dir" "$name" "$port" && return 0
			fi
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "redis $port did not rejoin $name as a replica of ${m:-?}" >&2
			return 1
		fi
		sleep 0.1
	done
}

dlock_redis_failover() {
	local dir=$1 name=$2 deadline=$((SECONDS + 20)) old s r new
	old=$(dlock_redis_master "$dir" "$name") || return 1
	while :; do
		r=""
		for s in $(dlock_redis_list "$dir" "$name" sentinels); do
			dlock_redis_running "$dir" "$s" || continue
			r=$(dlock_redis_cli "$dir" "$s" sentinel failover "$name" 2>&1 | tr -d '\r')
			[ -z "$r" ] || break
		done
		case "$r" in
		OK) break ;;
		*NOGOODSLAVE* | *INPROG* | "") ;; # no replica known yet, or the last failover still runs
		*)
			echo "SENTINEL FAILOVER $name: $r" >&2
			return 1
			;;
		esac
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "SENTINEL FAILOVER $name: still $r" >&2
			return 1
		fi
		sleep 0.25
	done
	new=$(dlock_redis_wait_switch "$dir" "$name" "${old#* }" "$deadline") || return 1
	if dlock_redis_running "$dir" "${old#* }"; then
		dlock_redis_rejoin "$dir" "$name" "${old#* }" "$deadline" || return 1
	fi
	echo "$new"
}

dlock_start_redis() {
	local dir=$1 here port ports=() p spw dpw
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	# TLS material, for the cluster, the TLS-only topology and the TLS instances.
	dlock_redis_make_tls "$dir" || return 1
	export DLOCK_TEST_TLS_DIR="$dir/tls"
	# The cluster's nodes first: a master of a cluster turns writable only 2 s
	# after its start, so the cluster forms (~2.5 s) while the rest starts.
	dlock_redis_cluster_start "$dir" || { dlock_stop_redis "$dir"; return 1; }
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
	export DLOCK_TEST_REDIS_DIR=$dir
	# A primary with one replica, for replicas=N: their own pair, so that no other test pays for replication.
	port=$(dlock_redis_launch_free "$dir") || { dlock_stop_redis "$dir"; return 1; }
	echo "$port" >>"$dir/ports"
	export DLOCK_TEST_REDIS_PRIMARY_URI="redis://127.0.0.1:$port"
	p=$(dlock_redis_launch_free "$dir" --replicaof 127.0.0.1 "$port") || { dlock_stop_redis "$dir"; return 1; }
	echo "$p" >>"$dir/ports"
	export DLOCK_TEST_REDIS_REPLICA_PORT=$p
	dlock_redis_wait_sync "$dir" "$p" "$port" $((SECONDS + 10)) || { dlock_stop_redis "$dir"; return 1; }

	# The Sentinel topologies (their sentinels meet while the TLS instances
	# start); passwords of their own for the sentinels and the data nodes.
	spw=$(dlock_redis_password)
	dpw=$(dlock_redis_password)
	dlock_redis_start_topology "$dir" no dlock-test "$spw" "$dpw" || { dlock_stop_redis "$dir"; return 1; }
	export DLOCK_TEST_SENTINEL_MASTER=dlock-test
	DLOCK_TEST_SENTINEL_PORTS=$(cat "$dir/dlock-test.sentinels")
	DLOCK_TEST_SENTINEL_DATA_PORTS=$(cat "$dir/dlock-test.nodes")
	export DLOCK_TEST_SENTINEL_PORTS DLOCK_TEST_SENTINEL_DATA_PORTS
	export DLOCK_TEST_SENTINEL_PASSWORD=$spw DLOCK_TEST_SENTINEL_DATA_PASSWORD=$dpw
	dlock_redis_start_topology "$dir" yes dlock-tls - - || { dlock_stop_redis "$dir"; return 1; }
	export DLOCK_TEST_SENTINEL_TLS_MASTER=dlock-tls
	DLOCK_TEST_SENTINEL_TLS_PORTS=$(cat "$dir/dlock-tls.sentinels")
	DLOCK_TEST_SENTINEL_TLS_DATA_PORTS=$(cat "$dir/dlock-tls.nodes")
	export DLOCK_TEST_SENTINEL_TLS_PORTS DLOCK_TEST_SENTINEL_TLS_DATA_PORTS

	# TLS: two instances, each with a plaintext port too (to look at keys).
	port=$(dlock_redis_launch_free_with "$dir" dlock_redis_prep_tls no) || { dlock_stop_redis "$dir"; return 1; }
	echo "$port" >>"$dir/ports"
	export DLOCK_TEST_REDIS_TLS_PLAIN_PORT=$port
	DLOCK_TEST_REDIS_TLS_PORT=$(cat "$dir/$port/tls-port")
	export DLOCK_TEST_REDIS_TLS_PORT
	port=$(dlock_redis_launch_free_with "$dir" dlock_redis_prep_tls yes) || { dlock_stop_redis "$dir"; return 1; }
	echo "$port" >>"$dir/ports"
	export DLOCK_TEST_REDIS_MTLS_PLAIN_PORT=$port
	DLOCK_TEST_REDIS_MTLS_PORT=$(cat "$dir/$port/tls-port")
	export DLOCK_TEST_REDIS_MTLS_PORT

	# So that no test meets a topology still forming.
	for p in dlock-test dlock-tls; do
		dlock_redis_wait_ready "$dir" "$p" $((SECONDS + 20)) || { dlock_stop_redis "$dir"; return 1; }
	done
	dlock_redis_cluster_started "$dir" $((SECONDS + 20)) || { dlock_stop_redis "$dir"; return 1; }
	DLOCK_TEST_CLUSTER_PORTS=$(cat "$dir/cluster.nodes")
	DLOCK_TEST_CLUSTER_URI="redis+cluster://$(dlock_redis_cluster_seeds "$dir" plain)"
	DLOCK_TEST_CLUSTER_TLS_URI="rediss+cluster://$(dlock_redis_cluster_seeds "$dir" tls)?tls_ca_file=$DLOCK_TEST_TLS_DIR/ca.pem"
	export DLOCK_TEST_CLUSTER_PORTS DLOCK_TEST_CLUSTER_URI DLOCK_TEST_CLUSTER_TLS_URI

	# The queue (the default on one server) and pub/sub wake-ups (fair=0).
	dlock_add_test_uri "$DLOCK_TEST_REDIS_URI"
	dlock_add_test_uri "$DLOCK_TEST_REDIS_URI?fair=0"
	dlock_add_test_uri "$DLOCK_TEST_REDLOCK_URI"
	# The conformance suite over TLS, and behind Sentinel.
	dlock_add_test_uri "rediss://127.0.0.1:$DLOCK_TEST_REDIS_TLS_PORT?tls_ca_file=$DLOCK_TEST_TLS_DIR/ca.pem"
	dlock_add_test_uri "redis+sentinel://:$DLOCK_TEST_SENTINEL_DATA_PASSWORD@127.0.0.1:${DLOCK_TEST_SENTINEL_PORTS// /,127.0.0.1:}/$DLOCK_TEST_SENTINEL_MASTER?sentinel_password=$DLOCK_TEST_SENTINEL_PASSWORD"
	# And on the cluster: in plaintext with the queue, and over TLS with sharded pub/sub (one run covers both).
	dlock_add_test_uri "$DLOCK_TEST_CLUSTER_URI"
	dlock_add_test_uri "$DLOCK_TEST_CLUSTER_TLS_URI&fair=0"
}

# Stops every instance, the last started first (the sentinels before the
# data nodes they would otherwise fail over).
dlock_stop_redis() {
	local dir=$1 port
	[ -f "$dir/ports" ] || return 0
	for port in $(tac "$dir/ports"); do
		dlock_redis_halt "$dir" "$port"
	done
	rm -f "$dir/ports"
}

dlock_redis_usage() {
	cat >&2 <<-'EOF'
		usage: redis.sh ctl DIR {start|stop|restart|flush-scripts|pid} PORT   (a port started in DIR)
		       redis.sh ctl DIR {failover|master|wait-ready} NAME       (a Sentinel master name)
		       redis.sh ctl DIR {wait-failover|rejoin} NAME PORT
		       redis.sh ctl DIR cluster-VERB ARGS                      (ci/servers/redis/cluster.sh)
	EOF
	return 2
}

# The control command, when this file is run rather than sourced.
dlock_redis_ctl() {
	local dir=${1:-} cmd=${2:-} arg=${3:-} port=${4:-}
	[ -n "$dir" ] || { dlock_redis_usage; return; }
	case "$cmd" in
	cluster-*)
		dlock_redis_cluster_ctl "$@"
		return
		;;
	failover | master | wait-ready | wait-failover | rejoin)
		if ! [[ $arg =~ ^[A-Za-z0-9_.-]+$ ]] || [ ! -f "$dir/$arg.sentinels" ]; then
			dlock_redis_usage
			return
		fi
		case "$cmd" in
		failover) dlock_redis_failover "$dir" "$arg" ;;
		master) dlock_redis_master "$dir" "$arg" ;;
		wait-ready) dlock_redis_wait_ready "$dir" "$arg" $((SECONDS + 30)) ;;
		*)
			if ! [[ $port =~ ^[0-9]+$ ]] || ! grep -qw "$port" "$dir/$arg.nodes"; then
				dlock_redis_usage
				return
			fi
			if [ "$cmd" = rejoin ]; then
				dlock_redis_rejoin "$dir" "$arg" "$port" $((SECONDS + 30))
			else
				dlock_redis_wait_switch "$dir" "$arg" "$port" $((SECONDS + 30))
			fi
			;;
		esac
		return
		;;
	esac
	port=$(dlock_redis_instance "$dir" "$arg") || port=""
	if [ -z "$port" ] || ! grep -qx "$port" "$dir/ports" 2>/dev/null; then
		dlock_redis_usage
		return
	fi
	case "$cmd" in
	start) dlock_redis_launch "$dir" "$port" ;;
	stop) dlock_redis_halt "$dir" "$port" ;;
	restart) dlock_redis_halt "$dir" "$port" && dlock_redis_launch "$dir" "$port" ;;
	flush-scripts) [ "$(dlock_redis_cli "$dir" "$arg" script flush)" = "OK" ] ;;
	pid) cat "$dir/$port/redis.pid" ;;
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
