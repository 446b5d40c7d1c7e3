# Disposable PostgreSQL primary + streaming standby pairs, for the tests and
# benchmarks that fail a primary over.  A failover destroys its topology,
# so each run makes a pair of its own and drops it afterwards.  Sourced by
# ci/servers/postgres.sh, whose ctl command offers these verbs (DIR is the
# test cluster's directory; every pair lives in DIR/pair.XXXXXX, run as the
# `postgres` OS user like the test cluster, and is stopped with it):
#
#   pair-new [sync|async]   make a pair, wait until the standby streams
#                           (and, with sync, the default, is the primary's
#                           synchronous standby); print on stdout:
#                             pair=PAIRDIR
#                             primary_port=P
#                             standby_port=S
#                             uri=postgres://dlock@127.0.0.1:P,127.0.0.1:S/dlock_test?target_session_attrs=read-write
#   pair-kill-primary PAIRDIR   immediate shutdown of the primary (SIGQUIT: no
#                           checkpoint, every backend ends at once, as in a
#                           crash); returns once the postmaster is gone
#   pair-promote PAIRDIR    promote the standby (pg_promote, waiting); returns
#                           once it is out of recovery and takes writes
#   pair-failover PAIRDIR   pair-kill-primary, then pair-promote
#   pair-sql PAIRDIR primary|standby SQL   SQL as the superuser in dlock_test
#   pair-stop PAIRDIR primary|standby      fast shutdown of one member
#   pair-start PAIRDIR primary|standby     start it again, as pair-new did
#   pair-drop PAIRDIR       stop what still runs of the pair, remove PAIRDIR
#
# Synchronous pair: the primary runs with synchronous_commit=on and
# synchronous_standby_names naming the standby's application_name, so a
# commit that wrote WAL (such as a nextval that logged the sequence) returns
# only once the standby has flushed it.  The standby does not get that
# setting: once promoted it has no standby of its own and must not wait for
# one.  Async pair: neither.
#
# Cost: both members are copies of one cleanly shut down cluster (made once
# per DIR, with the role dlock and the database dlock_test), which is a
# valid base backup for a standby: no pg_basebackup, no checkpoint to wait
# for.  A pair starts in well under a second.

dlock_pg_pair_standby_name=dlock_standby

# The template both members copy: initdb, roles, database, fast shutdown.
# Made once per DIR; callers hold DIR/pair-template.lock.
dlock_pg_pair_template() {
	local dir=$1 t=$1/pair-template bin
	[ -f "$t/ready" ] && return 0
	bin=$(dlock_pg_bindir) || return 1
	rm -rf "$t"
	mkdir -p "$t/sock"
	chown postgres: "$t" "$t/sock"
	dlock_pg_as "$bin/initdb" -D "$t/data" -U postgres -A trust -E UTF8 --locale=C \
		--no-sync >"$t/initdb.log" 2>&1 || { cat "$t/initdb.log" >&2; return 1; }
	cat >"$t/data/pg_hba.conf" <<-EOF
		local all all trust
		local replication all trust
		host all all 127.0.0.1/32 trust
	EOF
	dlock_free_port >"$t/port" || return 1
	dlock_pg_launch "$t" || return 1
	if ! dlock_pg_sql "$t" "CREATE ROLE dlock LOGIN" || ! dlock_pg_sql "$t" "CREATE DATABASE dlock_test OWNER dlock"; then
		dlock_pg_halt "$t"
		return 1
	fi
	dlock_pg_halt "$t" # fast shutdown: a shutdown checkpoint, so that copies are consistent
	[ ! -f "$t/data/postmaster.pid" ] || { echo "pair template did not shut down" >&2; return 1; }
	touch "$t/ready"
}

# PAIRDIR if it names a pair of DIR, else a message and failure.
dlock_pg_pair_dir() {
	local dir=$1 pair=${2:-}
	case "$pair" in
	"$dir"/pair.*/* | *..*) ;; # a path inside or beside a pair: refused below
	"$dir"/pair.*) [ -d "$pair/primary/data" ] && [ -d "$pair/standby/data" ] && { echo "$pair"; return 0; } ;;
	esac
	echo "postgres.sh ctl: '$pair' is not a pair of $dir (give the pair= path that pair-new printed)" >&2
	return 2
}

# SQL on one member of a pair, as the superuser, in dlock_test.
dlock_pg_pair_sql() {
	local pair=$1 member
	member=$(dlock_pg_pair_member "${2:-}") || return
	shift 2
	DLOCK_PG_DB=dlock_test dlock_pg_sql "$pair/$member" "$*"
}

# Wait until the primary of PAIR lists the standby as streaming with STATE (sync or async).
dlock_pg_pair_await_stream() {
	local pair=$1 state=$2 got
	for _ in $(seq 1 200); do
		got=$(dlock_pg_pair_sql "$pair" primary "SELECT sync_state FROM pg_stat_replication
			WHERE application_name = '$dlock_pg_pair_standby_name' AND state = 'streaming'" 2>/dev/null) || got=""
		[ "$got" = "$state" ] && return 0
		sleep 0.05
	done
	echo "postgres pair $pair: the standby did not stream ($state) in 10 s; its log:" >&2
	cat "$pair/standby/log" >&2
	return 1
}

# primary or standby, else a message and failure.
dlock_pg_pair_member() {
	case "${1:-}" in primary | standby) echo "$1" ;; *)
		echo "postgres.sh ctl: a pair's members are primary and standby, not '${1:-}'" >&2
		return 2
		;;
	esac
}

# Start one member of PAIR with the options pair-new gave it (in MEMBER/options, one a line).
dlock_pg_pair_start() {
	local -a opts=()
	[ -s "$1/$2/options" ] && mapfile -t opts <"$1/$2/options"
	dlock_pg_launch "$1/$2" "${opts[@]}"
}

dlock_pg_pair_new() {
	local dir=$1 mode=${2:-sync} pair m pport sport
	case "$mode" in
	sync | async) ;;
	*)
		echo "postgres.sh ctl: pair-new takes sync or async, not '$mode'" >&2
		return 2
		;;
	esac
	(
		flock 9 || exit 1
		dlock_pg_pair_template "$dir"
	) 9>"$dir/pair-template.lock" || return 1
	pair=$(mktemp -d "$dir/pair.XXXXXX") || return 1
	chmod 755 "$pair"
	for m in primary standby; do
		mkdir -p "$pair/$m/sock"
		cp -a "$dir/pair-template/data" "$pair/$m/data" || return 1
		chown postgres: "$pair/$m" "$pair/$m/sock"
	done
	if [ "$mode" = sync ]; then
		printf '%s\n' -c synchronous_commit=on -c "synchronous_standby_names=$dlock_pg_pair_standby_name" \
			>"$pair/primary/options"
	fi
	dlock_free_port >"$pair/primary/port" || return 1
	dlock_pg_pair_start "$pair" primary || return 1
	pport=$(cat "$pair/primary/port")
	touch "$pair/standby/data/standby.signal"
	echo "primary_conninfo = 'host=$pair/primary/sock port=$pport user=postgres application_name=$dlock_pg_pair_standby_name'" \
		>>"$pair/standby/data/postgresql.auto.conf"
	chown postgres: "$pair/standby/data/standby.signal" "$pair/standby/data/postgresql.auto.conf"
	dlock_free_port >"$pair/standby/port" || return 1
	dlock_pg_pair_start "$pair" standby || return 1
	sport=$(cat "$pair/standby/port")
	dlock_pg_pair_await_stream "$pair" "$mode" || return 1
	echo "pair=$pair"
	echo "primary_port=$pport"
	echo "standby_port=$sport"
	echo "uri=postgres://dlock@127.0.0.1:$pport,127.0.0.1:$sport/dlock_test?target_session_attrs=read-write"
}

dlock_pg_pair_kill_primary() {
	dlock_pg_halt "$1/primary" QUIT
}

dlock_pg_pair_promote() {
	local pair=$1 got
	got=$(dlock_pg_pair_sql "$pair" standby "SELECT pg_promote(true, 30)") || return 1
	if [ "$got" != t ]; then
		echo "postgres pair $pair: the standby was not promoted in 30 s; its log:" >&2
		cat "$pair/standby/log" >&2
		return 1
	fi
	for _ in $(seq 1 200); do
		got=$(dlock_pg_pair_sql "$pair" standby "SELECT pg_is_in_recovery()") || got=""
		[ "$got" = f ] && return 0
		sleep 0.05
	done
	echo "postgres pair $pair: still in recovery 10 s after its promotion" >&2
	return 1
}

dlock_pg_pair_drop() {
	local pair=$1
	dlock_pg_halt "$pair/standby"
	dlock_pg_halt "$pair/primary"
	rm -rf "$pair"
}

# Every pair of DIR, and the template if it was left running: stopped (not removed).
dlock_pg_pairs_halt() {
	local dir=$1 pair
	for pair in "$dir"/pair.*/; do
		[ -d "$pair" ] || continue
		dlock_pg_halt "${pair%/}/standby"
		dlock_pg_halt "${pair%/}/primary"
	done
	[ -d "$dir/pair-template" ] && dlock_pg_halt "$dir/pair-template"
	return 0
}

# The pair verbs of the ctl command: VERB [ARGS].
dlock_pg_pair_ctl() {
	local dir=$1 cmd=$2 pair m
	shift 2
	case "$cmd" in
	pair-new)
		dlock_pg_pair_new "$dir" "$@"
		return
		;;
	pair-kill-primary | pair-promote | pair-failover | pair-sql | pair-stop | pair-start | pair-drop) ;;
	*)
		echo "postgres.sh ctl: unknown command '$cmd'" >&2
		return 2
		;;
	esac
	pair=$(dlock_pg_pair_dir "$dir" "${1:-}") || return
	shift
	case "$cmd" in
	pair-kill-primary) dlock_pg_pair_kill_primary "$pair" ;;
	pair-promote) dlock_pg_pair_promote "$pair" ;;
	pair-failover) dlock_pg_pair_kill_primary "$pair" && dlock_pg_pair_promote "$pair" ;;
	pair-sql) dlock_pg_pair_sql "$pair" "$@" ;;
	pair-stop) m=$(dlock_pg_pair_member "${1:-}") && dlock_pg_halt "$pair/$m" ;;
	pair-start) m=$(dlock_pg_pair_member "${1:-}") && dlock_pg_pair_start "$pair" "$m" ;;
	pair-drop) dlock_pg_pair_drop "$pair" ;;
	esac
}
