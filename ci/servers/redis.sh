# Redis servers for the tests: one standalone instance (TCP and a unix
# socket), three independent instances for RedLock, a primary with one
# replica, and two instances that also speak TLS, on free loopback ports,
# without persistence.  Sourced by ci/servers.sh, which calls
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
# Run as a program, this file is that control command:
#   bash ci/servers/redis.sh ctl DIR {start|stop|restart|flush-scripts} PORT
#       PORT: any instance started in DIR; the TLS port of
#       a plaintext+TLS instance names that instance too
# Each instance lives in DIR/PORT/ (pidfile, log, socket, and the args and
# redis-cli options it was started with), so the port alone says how to
# restart it.


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
	# TLS), kept for restarts.
	local extra=()
	[ -f "$inst/args" ] && read -r -a extra <"$inst/args"
	# No diskless-sync delay: a replica would otherwise wait 5 s for its first sync.
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
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
		# Ready when the server that answers on the port is the one we started.
		pid=$(cat "$inst/redis.pid" 2>/dev/null || true)
		if [ -n "$pid" ] && [ "$(dlock_redis_cli "$dir" "$port" info server 2>/dev/null |
			tr -d '\r' | awk -F: '/^process_id:/ {print $2}')" = "$pid" ] &&
			{ [ -z "$tport" ] || [ "$(dlock_redis_cli "$dir" "$tport" ping 2>/dev/null)" = PONG ]; }; then
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
# instance in DIR/PORT (args, tls-port, tls-cli).
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

# The TLS material of the tests, made afresh in DIR/tls at each start: a CA
# (ca.pem), a certificate for the servers signed by it (server.pem, for
# localhost and 127.0.0.1), a client certificate signed by it (client.pem),
# and an unrelated CA (other-ca.pem).  EC P-256 keys, mode 600: the whole
# set takes ~50 ms.
dlock_redis_make_tls() {
	local t=$1/tls
	mkdir -p "$t" || return 1
	cat >"$t/openssl.cnf" <<-'EOF'
		[req]
		distinguished_name = dn
		prompt = no
		[dn]
		[ca]
		basicConstraints = critical, CA:TRUE
		keyUsage = critical, keyCertSign, cRLSign
		subjectKeyIdentifier = hash
		[server]
		basicConstraints = critical, CA:FALSE
		keyUsage = critical, digitalSignature
		extendedKeyUsage = serverAuth, clientAuth
		subjectAltName = DNS:localhost, IP:127.0.0.1
		authorityKeyIdentifier = keyid
		[client]
		basicConstraints = critical, CA:FALSE
		keyUsage = critical, digitalSignature
		extendedKeyUsage = clientAuth
		authorityKeyIdentifier = keyid
	EOF
	if ! (
		umask 077
		cd "$t" || exit 1
		dlock_redis_tls_ca ca "dlock test CA" &&
			dlock_redis_tls_ca other-ca "dlock unrelated CA" &&
			dlock_redis_tls_cert server localhost &&
			dlock_redis_tls_cert client "dlock test client"
	) 2>"$t/openssl.log"; then
		echo "could not make the TLS material in $t:" >&2
		cat "$t/openssl.log" >&2
		return 1
	fi
	chmod 644 "$t"/*.pem
	rm -f "$t"/*.csr "$t/openssl.log"
}

dlock_redis_tls_ca() {
	openssl req -config openssl.cnf -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-nodes -keyout "$1.key" -out "$1.pem" -days 30 -subj "/CN=$2" -extensions ca
}

# A key and a certificate signed by ca.pem, with the extensions of the
# section of openssl.cnf named like the file.
dlock_redis_tls_cert() {
	openssl req -config openssl.cnf -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" &&
		openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -days 30 \
			-set_serial "0x$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
			-extfile openssl.cnf -extensions "$1" -out "$1.pem"
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
	dlock_redis_wait_sync "$dir" "$p" "$port" $((SECONDS + 10)) || { dlock_stop_redis "$dir"; return 1; }

	# TLS: two instances, each with a plaintext port too (to look at keys).
	dlock_redis_make_tls "$dir" || { dlock_stop_redis "$dir"; return 1; }
	export DLOCK_TEST_TLS_DIR="$dir/tls"
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

dlock_redis_usage() {
	cat >&2 <<-'EOF'
		usage: redis.sh ctl DIR {start|stop|restart|flush-scripts} PORT   (a port started in DIR)
	EOF
	return 2
}

# The control command, when this file is run rather than sourced.
dlock_redis_ctl() {
	local dir=${1:-} cmd=${2:-} arg=${3:-} port
	[ -n "$dir" ] || { dlock_redis_usage; return; }
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
