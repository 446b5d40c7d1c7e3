# Start and stop the lock servers the tests use, on 127.0.0.1, on free
# ports, in one temporary directory.  Source it, then:
#
#   dlock_servers_start       # starts every server in ci/servers/*.sh, exports
#                             # DLOCK_TEST_URIS and each backend's own variables
#   dlock_servers_stop        # stops them (by PID) and removes the directory;
#                             # from another shell, DLOCK_SERVERS_DIR is enough
#
# Each ci/servers/NAME.sh defines `dlock_start_NAME DIR` (start, wait until
# it serves, export its variables, append its URIs with dlock_add_test_uri)
# and `dlock_stop_NAME DIR`.  A server that cannot start is an error.

DLOCK_SERVERS_DIR=${DLOCK_SERVERS_DIR:-}
DLOCK_SERVERS_STARTED=${DLOCK_SERVERS_STARTED:-} # sourced again: keep what this shell started

# A TCP port on 127.0.0.1 that nothing listens on now, below the kernel's
# ephemeral range (32768+) so that no client socket can be holding it.
dlock_free_port() {
	local port
	for _ in $(seq 1 200); do
		port=$((12000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	echo "no free port found" >&2
	return 1
}

dlock_add_test_uri() {
	DLOCK_TEST_URIS="${DLOCK_TEST_URIS:+$DLOCK_TEST_URIS }$1"
	export DLOCK_TEST_URIS
}

dlock_servers_start() {
	local here script name
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	DLOCK_SERVERS_DIR=$(mktemp -d /tmp/dlock-servers.XXXXXX)
	chmod 755 "$DLOCK_SERVERS_DIR"
	export DLOCK_SERVERS_DIR
	for script in "$here"/servers/*.sh; do
		[ -e "$script" ] || continue
		name=$(basename "$script" .sh)
		# shellcheck source=/dev/null
		. "$script"
		echo "== starting $name"
		mkdir -p "$DLOCK_SERVERS_DIR/$name"
		if ! "dlock_start_$name" "$DLOCK_SERVERS_DIR/$name"; then
			echo "failed to start $name" >&2
			return 1
		fi
		DLOCK_SERVERS_STARTED="$DLOCK_SERVERS_STARTED $name"
	done
	echo "== test URIs: $(dlock_uris_masked "$DLOCK_TEST_URIS")"
}

# URIs as a log shows them: no password, of a server or of the Sentinels.
dlock_uris_masked() {
	sed -E 's#(://[^:/@ ]*:)[^@/ ]*@#\1***@#g; s#(password=)[^& ]*#\1***#g' <<<"$1"
}

dlock_servers_stop() {
	local name here started=$DLOCK_SERVERS_STARTED
	# From another shell (DLOCK_SERVERS_DIR exported, the list not): every
	# server's own directory names it.
	if [ -z "$started" ] && [ -n "$DLOCK_SERVERS_DIR" ] && [ -d "$DLOCK_SERVERS_DIR" ]; then
		here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
		for name in "$DLOCK_SERVERS_DIR"/*/; do
			name=$(basename "$name")
			[ -f "$here/servers/$name.sh" ] || continue
			# shellcheck source=/dev/null
			. "$here/servers/$name.sh"
			started="$started $name"
		done
	fi
	for name in $started; do
		"dlock_stop_$name" "$DLOCK_SERVERS_DIR/$name" || true
	done
	DLOCK_SERVERS_STARTED=${DLOCK_SERVERS_STARTED:-} # sourced again: keep what this shell started
	if [ -n "$DLOCK_SERVERS_DIR" ] && [ -d "$DLOCK_SERVERS_DIR" ]; then
		rm -rf "$DLOCK_SERVERS_DIR"
	fi
}

# Stop a process we started: TERM, wait up to $2 seconds, then KILL.  A
# zombie counts as gone (PID 1 may reap late).
dlock_stop_pid() {
	local pid=$1 wait_s=${2:-10} state
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 $((wait_s * 10))); do
		state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 0
		[ "$state" = "Z" ] && return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}
