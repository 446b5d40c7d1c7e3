# PostgreSQL server for the tests: one cluster on a free loopback port,
# run as the `postgres` OS user (PostgreSQL refuses to run as root), with
# fsync off.  Sourced by ci/servers.sh, which calls
#
#   dlock_start_postgres DIR   initdb, start, create the roles and the
#                              database, export the variables below
#   dlock_stop_postgres DIR    stop it by the PID in postmaster.pid
#
# Authentication: the unix socket and 127.0.0.1 trust every role except
# dlock_pw, which must give its password (scram-sha-256), so that tests of
# a wrong password meet a real password check.  Roles:
#   dlock      owns the database dlock_test (creates the lock table and the
#              fencing sequence on first use)
#   dlock_pw   has a password and may not create anything in dlock_test
# test_pg_privileges makes (and drops) least-privileged roles of its own
# through the ctl command below (`sql`, as the superuser).
#
# When pgbouncer is installed, it runs in front of the cluster in
# transaction pooling mode (the mode in which only row locks work).
#
# Exported for tests:
#   DLOCK_TEST_PG_URI       postgres://dlock@127.0.0.1:PORT/dlock_test (advisory mode)
#   DLOCK_TEST_PG_ROW_URI   postgresql://dlock@127.0.0.1:PORT/dlock_test?mode=row
#   DLOCK_TEST_PG_PW_URI    postgres://dlock_pw:PASSWORD@127.0.0.1:PORT/dlock_test
#   DLOCK_TEST_PG_BOUNCER_URI  postgresql://dlock@127.0.0.1:BPORT/dlock_test?mode=row
#   DLOCK_TEST_PG_STANDBY_URI  postgres://dlock@127.0.0.1:SPORT/dlock_test, a streaming hot standby
#                           through pgbouncer (only when pgbouncer is installed)
#   DLOCK_TEST_PG_PORT      the port
#   DLOCK_TEST_PG_TLS_URI, _TLS_PORT, _TLS_CA, _TLS_OTHER_CA   a server of its own that
#                           speaks TLS only, with a certificate from a CA made at start
#                           (ci/servers/postgres/tls.sh); the servers above have no TLS
#   DLOCK_TEST_PG_CTL       a command: "$DLOCK_TEST_PG_CTL sql 'SELECT 1'" runs SQL
#                           as the superuser (psql, tuples only); also stop,
#                           start, restart, pid (the postmaster's, from
#                           postmaster.pid: dlock-bench --server-pids, which
#                           counts its backends as its children), the pair-* verbs of
#                           ci/servers/postgres/pair.sh (a disposable primary
#                           and synchronous standby per failover)
#
# Run as a program, this file is that control command:
#   bash ci/servers/postgres.sh ctl DIR {sql SQL|stop|start|restart|pid|pair-VERB ...}
# DIR holds data/ (the cluster), sock/ (its unix socket), port and log.

# shellcheck source=ci/servers/postgres/pair.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/postgres/pair.sh"
# shellcheck source=ci/servers/postgres/tls.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/postgres/tls.sh"
# shellcheck source=ci/tls.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tls.sh"

dlock_pg_bindir() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$d" ] && command -v pg_config >/dev/null; then
		d=$(pg_config --bindir)
	fi
	[ -x "$d/postgres" ] || { echo "postgres binaries not found" >&2; return 1; }
	echo "$d"
}

dlock_pg_as() {
	runuser -u postgres -- "$@"
}

# Start the cluster of DIR on its port and wait until it accepts connections.
# Further arguments go to postgres after the defaults (a later -c wins).
dlock_pg_launch() {
	local dir=$1 bin port
	shift
	bin=$(dlock_pg_bindir) || return 1
	port=$(cat "$dir/port")
	dlock_pg_as "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir/sock" \
		-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
		-c full_page_writes=off -c max_connections=500 -c shared_buffers=32MB "$@" \
		>>"$dir/log" 2>&1 </dev/null &
	for _ in $(seq 1 200); do
		if pg_isready -q -h 127.0.0.1 -p "$port" -t 1; then
			return 0
		fi
		sleep 0.05
	done
	echo "postgres on port $port did not become ready; its log:" >&2
	cat "$dir/log" >&2
	return 1
}

# Stop the cluster of DIR by the PID in postmaster.pid: fast shutdown
# (SIGINT), or the signal given (QUIT: immediate shutdown, as in a crash).
# A zombie counts as gone (PID 1 may reap late).
dlock_pg_halt() {
	local dir=$1 sig=${2:-INT} pid state
	pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null) || return 0
	[ -n "$pid" ] || return 0
	kill "-$sig" "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 200); do
		state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 0
		[ "$state" = "Z" ] && return 0
		sleep 0.05
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# pgbouncer in transaction pooling mode on DIR/bouncer_port, in front of
# the cluster; trust authentication for the role dlock.
dlock_pg_bouncer_launch() {
	local dir=$1 bport
	bport=$(cat "$dir/bouncer_port")
	cat >"$dir/bouncer.ini" <<-EOF
		[databases]
		dlock_test = host=127.0.0.1 port=$(cat "$dir/port") dbname=dlock_test
		[pgbouncer]
		listen_addr = 127.0.0.1
		listen_port = $bport
		unix_socket_dir =
		auth_type = trust
		auth_file = $dir/bouncer.users
		pool_mode = transaction
		max_client_conn = 1000
		default_pool_size = 400
		pidfile = $dir/bouncer.pid
		logfile = $dir/bouncer.log
	EOF
	echo '"dlock" ""' >"$dir/bouncer.users"
	dlock_pg_as pgbouncer -d "$dir/bouncer.ini" || return 1
	for _ in $(seq 1 100); do
		if pg_isready -q -h 127.0.0.1 -p "$bport" -d dlock_test -U dlock -t 1; then
			return 0
		fi
		sleep 0.05
	done
	echo "pgbouncer on port $bport did not become ready; its log:" >&2
	cat "$dir/bouncer.log" >&2
	return 1
}

dlock_pg_bouncer_halt() {
	local dir=$1 pid state
	pid=$(cat "$dir/bouncer.pid" 2>/dev/null) || return 0
	[ -n "$pid" ] || return 0
	kill -INT "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 100); do
		state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 0
		[ "$state" = "Z" ] && return 0
		sleep 0.05
	done
	kill -KILL "$pid" 2>/dev/null || true
}

dlock_pg_sql() {
	local dir=$1
	shift
	dlock_pg_as psql -X -q -At -v ON_ERROR_STOP=1 -h "$dir/sock" -p "$(cat "$dir/port")" \
		-U postgres -d "${DLOCK_PG_DB:-postgres}" -c "$*"
}

dlock_start_postgres() {
	local dir=$1 here bin port pw
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	bin=$(dlock_pg_bindir) || return 1
	id postgres >/dev/null 2>&1 || { echo "no 'postgres' OS user" >&2; return 1; }
	mkdir -p "$dir/sock"
	chown postgres: "$dir" "$dir/sock"
	dlock_pg_as "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C \
		--no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
	cat >"$dir/data/pg_hba.conf" <<-EOF
		local all all trust
		local replication all trust
		host all dlock_pw 127.0.0.1/32 scram-sha-256
		host all all 127.0.0.1/32 trust
	EOF
	port=$(dlock_free_port) || return 1
	echo "$port" >"$dir/port"
	dlock_pg_launch "$dir" || return 1
	pw=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
	dlock_pg_sql "$dir" "CREATE ROLE dlock LOGIN" || return 1
	dlock_pg_sql "$dir" "CREATE ROLE dlock_pw LOGIN PASSWORD '$pw'" || return 1
	dlock_pg_sql "$dir" "CREATE DATABASE dlock_test OWNER dlock" || return 1
	export DLOCK_TEST_PG_PORT=$port
	export DLOCK_TEST_PG_URI="postgres://dlock@127.0.0.1:$port/dlock_test"
	export DLOCK_TEST_PG_ROW_URI="postgresql://dlock@127.0.0.1:$port/dlock_test?mode=row"
	export DLOCK_TEST_PG_PW_URI="postgres://dlock_pw:$pw@127.0.0.1:$port/dlock_test"
	export DLOCK_TEST_PG_CTL="bash $here/postgres.sh ctl $dir"
	# A streaming hot standby of it (pg_basebackup -R), for the tests that a standby is never used.
	mkdir -p "$dir/standby/sock"
	chown postgres: "$dir/standby" "$dir/standby/sock"
	dlock_pg_as "$bin/pg_basebackup" -h "$dir/sock" -p "$port" -U postgres -D "$dir/standby/data" -R -X stream -c fast \
		>"$dir/standby/basebackup.log" 2>&1 || { cat "$dir/standby/basebackup.log" >&2; return 1; }
	dlock_free_port >"$dir/standby/port" || return 1
	dlock_pg_launch "$dir/standby" || return 1
	export DLOCK_TEST_PG_STANDBY_URI="postgres://dlock@127.0.0.1:$(cat "$dir/standby/port")/dlock_test"
	dlock_add_test_uri "$DLOCK_TEST_PG_URI"
	dlock_add_test_uri "$DLOCK_TEST_PG_ROW_URI"
	if command -v pgbouncer >/dev/null; then
		dlock_free_port >"$dir/bouncer_port" || return 1
		dlock_pg_bouncer_launch "$dir" || return 1
		export DLOCK_TEST_PG_BOUNCER_URI="postgresql://dlock@127.0.0.1:$(cat "$dir/bouncer_port")/dlock_test?mode=row"
		dlock_add_test_uri "$DLOCK_TEST_PG_BOUNCER_URI"
	fi
	dlock_pg_tls_start "$dir"
}

dlock_stop_postgres() {
	dlock_pg_bouncer_halt "$1"
	dlock_pg_tls_stop "$1"
	dlock_pg_pairs_halt "$1"
	[ -d "$1/standby" ] && dlock_pg_halt "$1/standby"
	dlock_pg_halt "$1"
}

# The control command, when this file is run rather than sourced.
dlock_pg_ctl() {
	local dir=$1 cmd=${2:-}
	if [ -z "$dir" ] || [ ! -f "$dir/port" ]; then
		echo "usage: postgres.sh ctl DIR {sql SQL|stop|start|restart|pid|pair-new [sync|async]|pair-kill-primary PAIR|pair-promote PAIR|pair-failover PAIR|pair-sql PAIR primary|standby SQL|pair-stop PAIR primary|standby|pair-start PAIR primary|standby|pair-drop PAIR} (DIR of a started cluster)" >&2
		return 2
	fi
	case "$cmd" in
	sql) shift 2; DLOCK_PG_DB=dlock_test dlock_pg_sql "$dir" "$*" ;;
	stop) dlock_pg_halt "$dir" ;;
	start) dlock_pg_launch "$dir" ;;
	restart) dlock_pg_halt "$dir" && dlock_pg_launch "$dir" ;;
	pid) head -n 1 "$dir/data/postmaster.pid" ;;
	pair-*) shift; dlock_pg_pair_ctl "$dir" "$@" ;;
	*)
		echo "postgres.sh ctl: unknown command '$cmd'" >&2
		return 2
		;;
	esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = "ctl" ]; then
	shift
	# dlock_free_port lives in ci/servers.sh.
	. "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/servers.sh"
	dlock_pg_ctl "$@"
	exit $?
fi
