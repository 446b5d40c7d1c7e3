# The Redis Cluster of the tests: six redis-server nodes in cluster mode,
# three masters with one replica each, started once with the other Redis
# servers and shared by every test.  Sourced by ci/servers/redis.sh, whose
# dlock_start_redis calls
#
#   dlock_redis_cluster_start DIR     the six nodes (each answers PING), then
#                                     `redis-cli --cluster create` in the
#                                     background, while the rest starts
#   dlock_redis_cluster_started DIR DEADLINE
#                                     waits for that, then until the cluster
#                                     is ready (ctl cluster-wait-ready)
#
# and exports, from DIR/cluster.nodes (the plaintext ports as started),
# DLOCK_TEST_CLUSTER_PORTS, DLOCK_TEST_CLUSTER_URI and
# DLOCK_TEST_CLUSTER_TLS_URI (dlock_redis_cluster_seeds).  dlock_stop_redis
# stops the nodes with the other instances: they are in DIR/ports.
#
# Every node has a plaintext port and a TLS port (no client certificate
# asked for; DIR/PORT/tls-port), no persistence, node timeout 2000 ms, and
# its cluster bus on a third free port (DIR/PORT/cluster-port; by default
# it would be 10000 above the port, maybe in the kernel's ephemeral range).  The nodes
# talk to each other in TLS (tls-cluster, tls-replication), so one cluster
# serves both kinds of client: CLUSTER SLOTS, CLUSTER SHARDS, MOVED and ASK
# name the TLS ports to a TLS client, the plaintext ports to a plaintext one.
# Its state is in DIR/PORT/nodes.conf, which the node rewrites as the
# cluster changes: a node restarts in the role it last had.
#
# The ctl verbs (bash ci/servers/redis.sh ctl DIR VERB ARGS).  A PORT may
# be a node's plaintext or TLS port; ports are printed as plaintext ports.
# Every wait gives up after 30 s, says why on stderr, and fails.
#
#   cluster-master SLOT        the port of the master serving SLOT (0..16383),
#                              once the running nodes agree on it
#   cluster-slot-begin SLOT PORT   start moving SLOT from its master to the
#                              master PORT: CLUSTER SETSLOT IMPORTING on PORT,
#                              then MIGRATING on the source; no key moves
#   cluster-slot-keys SLOT     MIGRATE every key of SLOT, in batches, from the
#                              migrating source to the importing target (one
#                              key a line: no newline in a key name)
#   cluster-slot-end SLOT      CLUSTER SETSLOT NODE on the importing target,
#                              the source, then every other master; waits
#                              until every running node says the target
#                              serves SLOT.  Refused while the source holds
#                              keys of SLOT (it would drop them)
#   cluster-migrate SLOT PORT  the three above (none when PORT serves SLOT)
#   cluster-kill PORT          SIGKILL the node (a crash); DIR/PORT stays
#   cluster-wait-failover PORT after the master PORT was killed: waits until
#                              another master (its replica) serves its slots,
#                              every running node says cluster_state:ok and
#                              they agree on the slots; prints that master
#   cluster-rejoin PORT        starts the node again (unless it runs) and
#                              waits until it replicates, in sync, the master
#                              that serves its old slots (or serves them
#                              itself, when it came back before a failover)
#                              and the cluster is ready
#   cluster-failover PORT      CLUSTER FAILOVER on the replica of the master
#                              PORT; waits until that replica is the master,
#                              PORT its replica in sync and the cluster ready;
#                              prints the new master.  ~1 s; but a replica
#                              elected less than 8 s before is first given
#                              those 8 s (see dlock_redis_cluster_failover)
#   cluster-wait-ready         waits until the cluster is whole: all six nodes
#                              run, each says cluster_state:ok, sees the five
#                              others connected and not failing, and they agree
#                              on the roles and the slots; three masters, each
#                              with one replica in sync
#
# Timings, node timeout 2000 ms.  A master killed is failed over in ~4 s:
# marked FAIL 2.9-3.3 s after the kill (PFAIL after the node timeout, then
# FAIL once the other masters' gossip agrees), its replica elected 0.7-0.9 s
# later (0.5 s + random 0-0.5 s), all nodes agreeing 3.8-4.6 s after the
# kill (ctl cluster-wait-failover).  A master started again before its
# failover keeps its slots, empty (no persistence): its replica syncs that,
# and the keys of its slots are gone.  A master (re)started turns writable,
# cluster_state:ok, only 2 s after its start; so a new cluster is ready
# ~2.5 s after its nodes start, 3.5 s when redis-cli --cluster create
# sleeps a second more (about every other time).

# PREPARE (see dlock_redis_launch_free_with) for a node: the files of a
# plaintext+TLS instance, a free port for its cluster bus, the cluster
# options.  A replica loads a full sync straight from the socket: by default
# it would keep the RDB it received as DIR/PORT/dump.rdb, and a node started
# again would load that old copy (a master back before its failover would
# serve keys long gone, and its replica would sync them).
dlock_redis_cluster_prep() {
	local dir=$1 port=$2 cport
	dlock_redis_prep_tls "$dir" "$port" no || return 1
	cport=$(dlock_redis_free_port) || return 1
	while [ "$cport" = "$port" ] || [ "$cport" = "$(cat "$dir/$port/tls-port")" ]; do
		cport=$(dlock_redis_free_port) || return 1
	done
	echo "$cport" >"$dir/$port/cluster-port"
	echo "$(cat "$dir/$port/args") --tls-cluster yes --tls-replication yes --cluster-enabled yes" \
		"--cluster-config-file $dir/$port/nodes.conf --cluster-node-timeout 2000" \
		"--cluster-port $cport --repl-diskless-load swapdb" >"$dir/$port/args"
}

# Start the six nodes, one after the other (each answers PING before the
# next takes its free ports), then let redis-cli make them a cluster in the
# background: 1 or 2 s, most of it in sleep(1)s of its own.  Its PID is
# in DIR/cluster-create.pid for dlock_redis_cluster_started; `timeout`
# bounds it (redis-cli waits for the nodes to join without a deadline).
dlock_redis_cluster_start() {
	local dir=$1 port ports=() addrs=()
	for _ in 1 2 3 4 5 6; do
		port=$(dlock_redis_launch_free_with "$dir" dlock_redis_cluster_prep) || return 1
		echo "$port" >>"$dir/ports"
		ports+=("$port")
		addrs+=("127.0.0.1:$port")
	done
	echo "${ports[*]}" >"$dir/cluster.nodes"
	# Three masters (the first three nodes), one replica each.
	timeout 30 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
		</dev/null >"$dir/cluster-create.log" 2>&1 &
	echo $! >"$dir/cluster-create.pid"
}

# Wait for redis-cli --cluster create (started by dlock_redis_cluster_start
# in this shell), then until the cluster is ready, before DEADLINE.
dlock_redis_cluster_started() {
	local dir=$1 deadline=$2 pid
	pid=$(cat "$dir/cluster-create.pid") || return 1
	rm -f "$dir/cluster-create.pid"
	if ! wait "$pid"; then
		echo "redis-cli --cluster create failed; its output:" >&2
		cat "$dir/cluster-create.log" >&2
		return 1
	fi
	dlock_redis_cluster_wait_ready "$dir" "$deadline"
}

# "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3": the first three nodes, by their
# plaintext ports (plain) or their TLS ports (tls).
dlock_redis_cluster_seeds() {
	local dir=$1 kind=$2 ports port seeds=()
	read -r -a ports <"$dir/cluster.nodes" || return 1
	for port in "${ports[@]:0:3}"; do
		[ "$kind" = plain ] || port=$(cat "$dir/$port/tls-port")
		seeds+=("127.0.0.1:$port")
	done
	(
		IFS=,
		echo "${seeds[*]}"
	)
}

# The node (its plaintext port) that listens on PORT, if it is one of the cluster's.
dlock_redis_cluster_node() {
	local dir=$1 port
	port=$(dlock_redis_instance "$dir" "$2") || return 1
	grep -qw "$port" "$dir/cluster.nodes" && echo "$port"
}

dlock_redis_cluster_nodes() {
	cat "$1/cluster.nodes"
}

# The PID of the node of DIR/PORT, when it runs and is ours: a live
# redis-server in that directory (as dlock_redis_halt checks).  A node
# killed by other means than cluster-kill (its pidfile left) does not run.
dlock_redis_cluster_pid() {
	local dir=$1 port=$2 pid
	pid=$(cat "$dir/$port/redis.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] &&
		[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$(cd "$dir/$port" && pwd -P)" ] &&
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q redis-server &&
		[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] && echo "$pid"
}

dlock_redis_cluster_runs() {
	dlock_redis_cluster_pid "$1" "$2" >/dev/null
}

# One redis-cli to the node on PORT: CLUSTER INFO, CLUSTER NODES and INFO
# replication, one after the other.  Their lines are told apart by their
# shape: "cluster_…:…", node lines ("ID IP:PORT@BUS FLAGS …"), the rest.
dlock_redis_cluster_probe() {
	printf '%s\n' "CLUSTER INFO" "CLUSTER NODES" "INFO replication" |
		dlock_redis_cli "$1" "$2" 2>/dev/null | tr -d '\r'
}

# From CLUSTER NODES lines (on stdin, among others), what a node thinks of
# the cluster, a line per node sorted by port: "PORT ROLE MASTER SLOTS",
# ROLE master or slave, MASTER the port of its master (or -), SLOTS the
# slots it serves ("0-5460,5462", or -).  No flags other than the role: the
# views of two nodes are the same when they agree.
dlock_redis_cluster_view() {
	awk 'NF >= 8 && $2 ~ /@/ {
			n++; id[n] = $1; a = $2; sub(/@.*/, "", a); sub(/.*:/, "", a); port[$1] = a
			role[n] = ($3 ~ /(^|,)master(,|$)/) ? "master" : "slave"; m[n] = $4; s = ""
			for (i = 9; i <= NF; i++) if ($i !~ /^\[/) s = s (s == "" ? "" : ",") $i
			slots[n] = (s == "") ? "-" : s
		}
		END {
			for (i = 1; i <= n; i++)
				print port[id[i]], role[i], (m[i] == "-") ? "-" : ((m[i] in port) ? port[m[i]] : "?"), slots[i]
		}' | sort -n
}

# The nodes a node (its CLUSTER NODES lines on stdin) does not see well:
# "PORT(FLAGS,LINK)" for every one failing, suspected (fail?), in handshake,
# without an address or not connected.
dlock_redis_cluster_unwell() {
	awk 'NF >= 8 && $2 ~ /@/ && ($3 ~ /fail|handshake|noaddr/ || $8 != "connected") {
			a = $2; sub(/@.*/, "", a); sub(/.*:/, "", a); printf "%s%s(%s,%s)", sep, a, $3, $8; sep = " "
		}'
}

# The port serving SLOT in the slots (on stdin, "PORT SLOTS" a line, see
# dlock_redis_cluster_slots), or nothing.
dlock_redis_cluster_owner() {
	awk -v slot="$1" '{
			k = split($2, r, ",")
			for (i = 1; i <= k; i++) {
				if (split(r[i], b, "-") == 1) b[2] = b[1]
				if (slot + 0 >= b[1] + 0 && slot + 0 <= b[2] + 0) { print $1; exit }
			}
		}'
}

# Is the node whose probe is OUT a replica in sync of the node whose TLS
# port is TPORT?  (Replicas connect to their master's TLS port.)
dlock_redis_cluster_synced() {
	local out=$1 tport=$2
	grep -qx "role:slave" <<<"$out" && grep -qx "master_port:$tport" <<<"$out" &&
		grep -qx "master_link_status:up" <<<"$out" && grep -qx "master_sync_in_progress:0" <<<"$out"
}

# Print the slots as every running node sees them ("PORT SLOTS" a line, the
# masters that serve some), when they all answer and agree; with OK, also
# when each says cluster_state:ok.  Else say why in $DLOCK_REDIS_WHY.
dlock_redis_cluster_slots() {
	local dir=$1 ok=${2:-} n out map first="" fn=""
	for n in $(dlock_redis_cluster_nodes "$dir"); do
		dlock_redis_cluster_runs "$dir" "$n" || continue
		out=$(dlock_redis_cluster_probe "$dir" "$n")
		map=$(dlock_redis_cluster_view <<<"$out" | awk '$4 != "-" {print $1, $4}')
		[ -n "$map" ] || { DLOCK_REDIS_WHY="node $n does not answer CLUSTER NODES"; return 1; }
		if [ -n "$ok" ] && ! grep -qx "cluster_state:ok" <<<"$out"; then
			DLOCK_REDIS_WHY="node $n says $(grep -m 1 '^cluster_state:' <<<"$out")"
			return 1
		fi
		if [ -z "$first" ]; then
			first=$map
			fn=$n
		elif [ "$map" != "$first" ]; then
			DLOCK_REDIS_WHY="nodes $fn and $n do not agree on the slots: $(paste -sd ';' <<<"$first") vs $(paste -sd ';' <<<"$map")"
			return 1
		fi
	done
	[ -n "$first" ] || { DLOCK_REDIS_WHY="no node of the cluster runs"; return 1; }
	DLOCK_REDIS_WHY=""
	echo "$first"
}

# Is the cluster whole (see ctl cluster-wait-ready)?  Says why not in
# $DLOCK_REDIS_WHY.  One redis-cli a node.
dlock_redis_cluster_is_ready() {
	local dir=$1 n out view first="" fn="" bad m
	for n in $(dlock_redis_cluster_nodes "$dir"); do
		dlock_redis_cluster_runs "$dir" "$n" || { DLOCK_REDIS_WHY="node $n is stopped"; return 1; }
		out=$(dlock_redis_cluster_probe "$dir" "$n")
		grep -qx "cluster_state:ok" <<<"$out" ||
			{ DLOCK_REDIS_WHY="node $n says $(grep -m 1 '^cluster_state:' <<<"$out" || echo nothing)"; return 1; }
		bad=$(dlock_redis_cluster_unwell <<<"$out")
		[ -z "$bad" ] || { DLOCK_REDIS_WHY="node $n sees $bad"; return 1; }
		view=$(dlock_redis_cluster_view <<<"$out")
		if [ -z "$first" ]; then
			first=$view
			fn=$n
		elif [ "$view" != "$first" ]; then
			DLOCK_REDIS_WHY="nodes $fn and $n do not agree: $(paste -sd ';' <<<"$first") vs $(paste -sd ';' <<<"$view")"
			return 1
		fi
		# Its own replication, as its view says.
		m=$(awk -v p="$n" '$1 == p && $2 == "slave" {print $3}' <<<"$view")
		if [ -n "$m" ] && ! { [[ $m =~ ^[0-9]+$ ]] &&
			dlock_redis_cluster_synced "$out" "$(cat "$dir/$m/tls-port" 2>/dev/null)"; }; then
			DLOCK_REDIS_WHY="replica $n is not in sync with $m"
			return 1
		fi
	done
	# Six nodes, ours; three masters serving slots, each with one replica.
	[ "$(awk '{print $1}' <<<"$first" | paste -sd ' ')" = "$(tr ' ' '\n' <"$dir/cluster.nodes" | sort -n | paste -sd ' ')" ] ||
		{ DLOCK_REDIS_WHY="the nodes know $(awk '{print $1}' <<<"$first" | paste -sd ' ')"; return 1; }
	DLOCK_REDIS_WHY=$(awk '$2 == "master" { k++; ms[$1] = 1; if ($4 == "-") why = why "; master " $1 " serves no slot" }
		$2 == "slave" { r[$3]++ }
		END {
			for (m in ms) if (r[m] + 0 != 1) why = why "; master " m " has " r[m] + 0 " replicas"
			if (k != 3) why = why "; " k " masters"
			print substr(why, 3)
		}' <<<"$first")
	[ -z "$DLOCK_REDIS_WHY" ]
}

dlock_redis_cluster_wait_ready() {
	local dir=$1 deadline=$2
	until dlock_redis_cluster_is_ready "$dir"; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "redis cluster not ready: $DLOCK_REDIS_WHY" >&2
			return 1
		fi
		sleep 0.05
	done
}

# Print the port serving SLOT, once the running nodes agree.
dlock_redis_cluster_master() {
	local dir=$1 slot=$2 deadline=$3 map m
	until map=$(dlock_redis_cluster_slots "$dir") && m=$(dlock_redis_cluster_owner "$slot" <<<"$map") &&
		[ -n "$m" ]; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "no master of slot $slot: ${DLOCK_REDIS_WHY:-no node serves it}" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "$m"
}

# The ID of the node on PORT.
dlock_redis_cluster_id() {
	local id
	id=$(dlock_redis_cli "$1" "$2" cluster myid 2>/dev/null | tr -d '\r')
	[[ $id =~ ^[0-9a-f]{40}$ ]] || { echo "node $2 does not tell its ID: $id" >&2; return 1; }
	echo "$id"
}

# Run a Redis command on the node on PORT that must answer OK; else say
# what it answered.
dlock_redis_cluster_must() {
	local dir=$1 port=$2 r
	shift 2
	r=$(dlock_redis_cli "$dir" "$port" "$@" 2>&1 | tr -d '\r')
	[ "$r" = OK ] && return 0
	echo "node $port: $*: $r" >&2
	return 1
}

# The migration of SLOT under way: "SOURCE TARGET" (ports), from the nodes
# that say (in their own line of CLUSTER NODES, "[SLOT->-TARGET_ID]" and
# "[SLOT-<-SOURCE_ID]") that they migrate or import it.  Either may be "-".
dlock_redis_cluster_moving() {
	local dir=$1 slot=$2 n src=- tgt=-
	for n in $(dlock_redis_cluster_nodes "$dir"); do
		dlock_redis_cluster_runs "$dir" "$n" || continue
		case " $(dlock_redis_cli "$dir" "$n" cluster nodes 2>/dev/null | awk '$3 ~ /myself/' | tr -d '\r') " in
		*" [$slot->-"*) src=$n ;;
		*" [$slot-<-"*) tgt=$n ;;
		esac
	done
	echo "$src $tgt"
}

# ctl cluster-slot-begin
dlock_redis_cluster_slot_begin() {
	local dir=$1 slot=$2 tgt=$3 deadline=$4 src sid tid
	src=$(dlock_redis_cluster_master "$dir" "$slot" "$deadline") || return 1
	if [ "$src" = "$tgt" ]; then
		echo "node $tgt already serves slot $slot" >&2
		return 1
	fi
	[ "$(dlock_redis_role "$dir" "$tgt")" = master ] || { echo "node $tgt is not a master" >&2; return 1; }
	sid=$(dlock_redis_cluster_id "$dir" "$src") && tid=$(dlock_redis_cluster_id "$dir" "$tgt") &&
		dlock_redis_cluster_must "$dir" "$tgt" cluster setslot "$slot" importing "$sid" &&
		dlock_redis_cluster_must "$dir" "$src" cluster setslot "$slot" migrating "$tid"
}

# ctl cluster-slot-keys: CLUSTER GETKEYSINSLOT and MIGRATE, 100 keys at a
# time.  With tls-cluster, MIGRATE connects to the target in TLS: it must be
# given the target's TLS port (given the plaintext one, it waits for its
# timeout, and a master blocked for longer than the node timeout is failed
# over); a short timeout, so that it cannot block for long anyway.
dlock_redis_cluster_slot_keys() {
	local dir=$1 slot=$2 deadline=$3 src tgt tport keys r
	read -r src tgt <<<"$(dlock_redis_cluster_moving "$dir" "$slot")"
	if [ "$src" = - ] || [ "$tgt" = - ]; then
		echo "slot $slot is not being moved (migrating from: $src, importing to: $tgt)" >&2
		return 1
	fi
	tport=$(cat "$dir/$tgt/tls-port") || return 1
	while :; do
		# (No keys: redis-cli prints an empty line.)
		mapfile -t keys < <(dlock_redis_cli "$dir" "$src" cluster getkeysinslot "$slot" 100 2>/dev/null | grep -v '^$')
		[ "${#keys[@]}" -gt 0 ] || return 0
		r=$(dlock_redis_cli "$dir" "$src" migrate 127.0.0.1 "$tport" "" 0 1000 keys "${keys[@]}" 2>&1 | tr -d '\r')
		case "$r" in
		OK | NOKEY) ;;
		*)
			echo "node $src: MIGRATE of slot $slot to $tgt ($tport): $r" >&2
			return 1
			;;
		esac
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "slot $slot still has keys on $src" >&2
			return 1
		fi
	done
}

# ctl cluster-slot-end: CLUSTER SETSLOT NODE in the order of the Redis
# Cluster specification (the target first: were the source told first and
# the target not yet, a client redirected to the target would be sent back).
# Not while the source holds keys of SLOT: the target's claim reaches it
# within milliseconds, before its own SETSLOT (which would refuse), and it
# deletes them without a word.
dlock_redis_cluster_slot_end() {
	local dir=$1 slot=$2 deadline=$3 src tgt tid n map
	read -r src tgt <<<"$(dlock_redis_cluster_moving "$dir" "$slot")"
	[ "$tgt" != - ] || { echo "no node imports slot $slot" >&2; return 1; }
	if [ "$src" = - ]; then
		src=$(dlock_redis_cluster_master "$dir" "$slot" "$deadline") || return 1
	fi
	n=$(dlock_redis_cli "$dir" "$src" cluster countkeysinslot "$slot" 2>&1 | tr -d '\r')
	if [ "$n" != 0 ]; then
		echo "node $src still holds keys of slot $slot ($n): move them first (cluster-slot-keys)" >&2
		return 1
	fi
	tid=$(dlock_redis_cluster_id "$dir" "$tgt") || return 1
	dlock_redis_cluster_must "$dir" "$tgt" cluster setslot "$slot" node "$tid" || return 1
	dlock_redis_cluster_must "$dir" "$src" cluster setslot "$slot" node "$tid" || return 1
	for n in $(dlock_redis_cluster_nodes "$dir"); do
		if [ "$n" = "$tgt" ] || [ "$n" = "$src" ] || ! dlock_redis_cluster_runs "$dir" "$n" ||
			[ "$(dlock_redis_role "$dir" "$n")" != master ]; then
			continue
		fi
		dlock_redis_cluster_must "$dir" "$n" cluster setslot "$slot" node "$tid" || return 1
	done
	until map=$(dlock_redis_cluster_slots "$dir") && [ "$(dlock_redis_cluster_owner "$slot" <<<"$map")" = "$tgt" ]; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "the nodes do not all say that $tgt serves slot $slot: ${DLOCK_REDIS_WHY:-}" >&2
			return 1
		fi
		sleep 0.05
	done
}

# ctl cluster-migrate
dlock_redis_cluster_migrate() {
	local dir=$1 slot=$2 tgt=$3 deadline=$4 src
	src=$(dlock_redis_cluster_master "$dir" "$slot" "$deadline") || return 1
	[ "$src" != "$tgt" ] || return 0
	dlock_redis_cluster_slot_begin "$dir" "$slot" "$tgt" "$deadline" &&
		dlock_redis_cluster_slot_keys "$dir" "$slot" "$deadline" &&
		dlock_redis_cluster_slot_end "$dir" "$slot" "$deadline"
}

# ctl cluster-kill: SIGKILL, then wait until the process is gone (a zombie
# counts: PID 1 may reap daemonized servers late).  The pidfile goes: the
# node no longer runs for the other verbs.
dlock_redis_cluster_kill() {
	local dir=$1 port=$2 pid
	if pid=$(dlock_redis_cluster_pid "$dir" "$port"); then
		kill -KILL "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo Z)" = Z ] && break
			sleep 0.05
		done
	fi
	rm -f "$dir/$port/redis.pid"
}

# The first slot the node of DIR/PORT served when it last saved its
# nodes.conf; with ANY, the first of its master's when it was a replica.
dlock_redis_cluster_old_slot() {
	local conf=$1/$2/nodes.conf any=${3:-}
	awk -v any="$any" 'NF >= 8 && $2 ~ /@/ {
			s = ""
			for (i = 9; i <= NF && s == ""; i++) if ($i !~ /^\[/) { s = $i; sub(/-.*/, "", s) }
			first[$1] = s
			if ($3 ~ /myself/) { mine = s; m = $4 }
		}
		END {
			if (mine == "" && any != "" && m != "-") mine = first[m]
			if (mine == "") exit 1
			print mine
		}' "$conf" 2>/dev/null
}

# ctl cluster-wait-failover
dlock_redis_cluster_wait_failover() {
	local dir=$1 port=$2 deadline=$3 slot map m
	slot=$(dlock_redis_cluster_old_slot "$dir" "$port") ||
		{ echo "node $port served no slot (per its nodes.conf)" >&2; return 1; }
	until map=$(dlock_redis_cluster_slots "$dir" ok) && m=$(dlock_redis_cluster_owner "$slot" <<<"$map") &&
		[ -n "$m" ] && [ "$m" != "$port" ] && [ "$(dlock_redis_role "$dir" "$m")" = master ]; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "no failover of $port (slot $slot): ${DLOCK_REDIS_WHY:-slot $slot still on ${m:-no master}}" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "$m"
}

# ctl cluster-rejoin
dlock_redis_cluster_rejoin() {
	local dir=$1 port=$2 deadline=$3 slot map m
	slot=$(dlock_redis_cluster_old_slot "$dir" "$port" any) ||
		{ echo "node $port: no slot in its nodes.conf, neither its own nor its master's" >&2; return 1; }
	if ! dlock_redis_cluster_pid "$dir" "$port" >/dev/null; then
		dlock_redis_halt "$dir" "$port"
		dlock_redis_launch "$dir" "$port" || return 1
	fi
	while :; do
		if dlock_redis_cluster_is_ready "$dir"; then
			map=$(dlock_redis_cluster_slots "$dir") && m=$(dlock_redis_cluster_owner "$slot" <<<"$map")
			[ "$m" = "$port" ] && return 0
			[ -n "$m" ] && [ "$(dlock_redis_role "$dir" "$port" 3)" = "slave 127.0.0.1 $(cat "$dir/$m/tls-port")" ] &&
				return 0
			DLOCK_REDIS_WHY="$port does not replicate ${m:-the master of slot $slot}"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "redis cluster node $port did not rejoin: $DLOCK_REDIS_WHY" >&2
			return 1
		fi
		sleep 0.05
	done
}

# Milliseconds since the node of DIR/PORT last started a failover election,
# per its log (no command tells), or nothing.
dlock_redis_cluster_election_age() {
	local t
	t=$(awk '/Starting a failover election/ {t = $2 " " $3 " " $4 " " $5} END {print t}' "$1/$2/redis.log" 2>/dev/null)
	[ -n "$t" ] && t=$(date -d "$t" +%s%3N 2>/dev/null) && echo $(($(date +%s%3N) - t))
}

# ctl cluster-failover
dlock_redis_cluster_failover() {
	local dir=$1 port=$2 deadline=$3 map slot r sent age
	map=$(dlock_redis_cluster_slots "$dir" ok) || { echo "redis cluster: $DLOCK_REDIS_WHY" >&2; return 1; }
	slot=$(awk -v p="$port" '$1 == p {s = $2; sub(/[-,].*/, "", s); print s}' <<<"$map")
	[ -n "$slot" ] || { echo "node $port is not a master serving slots" >&2; return 1; }
	r=$(dlock_redis_cluster_probe "$dir" "$port" | dlock_redis_cluster_view |
		awk -v p="$port" '$2 == "slave" && $3 == p {print $1; exit}')
	[ -n "$r" ] || { echo "master $port has no replica" >&2; return 1; }
	# A replica starts no election within 8 s (4 x node timeout) of its last
	# one; within the first 4 s it even "wins" at once, on that election's
	# votes, and is turned back into a replica (its epoch is stale).  Either
	# way the master, paused for the manual failover, holds its clients for
	# up to 5 s, until "Manual failover timed out".  Only time ends that
	# window: wait it out.
	if age=$(dlock_redis_cluster_election_age "$dir" "$r") && [ "$age" -lt 8100 ]; then
		sleep "$(awk -v ms=$((8100 - age)) 'BEGIN { printf "%.3f", ms / 1000 }')"
	fi
	dlock_redis_cluster_must "$dir" "$r" cluster failover || return 1
	sent=$SECONDS
	while :; do
		# Ready: every replica in sync, PORT included, which can only be r's.
		if dlock_redis_cluster_is_ready "$dir"; then
			map=$(dlock_redis_cluster_slots "$dir") && [ "$(dlock_redis_cluster_owner "$slot" <<<"$map")" = "$r" ] &&
				break
			DLOCK_REDIS_WHY="$r does not serve slot $slot yet"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "CLUSTER FAILOVER on $r (replica of $port) did not complete: $DLOCK_REDIS_WHY" >&2
			return 1
		fi
		# A manual failover not done 5 s after the request is given up
		# ("Manual failover timed out"): ask again.
		if [ $((SECONDS - sent)) -ge 6 ] && [ "$(dlock_redis_role "$dir" "$r")" = slave ]; then
			dlock_redis_cluster_must "$dir" "$r" cluster failover || return 1
			sent=$SECONDS
		fi
		sleep 0.05
	done
	echo "$r"
}

dlock_redis_cluster_usage() {
	cat >&2 <<-'EOF'
		usage: redis.sh ctl DIR {cluster-master|cluster-slot-keys|cluster-slot-end} SLOT
		       redis.sh ctl DIR {cluster-slot-begin|cluster-migrate} SLOT PORT
		       redis.sh ctl DIR {cluster-kill|cluster-wait-failover|cluster-rejoin|cluster-failover} PORT
		       redis.sh ctl DIR cluster-wait-ready
		(SLOT 0..16383; PORT a cluster node's plaintext or TLS port)
	EOF
	return 2
}

# ctl DIR cluster-VERB ARGS (see the top of this file).
dlock_redis_cluster_ctl() {
	local dir=$1 cmd=$2 a=${3:-} b=${4:-} slot="" port="" deadline=$((SECONDS + 30))
	[ -f "$dir/cluster.nodes" ] || { echo "redis.sh ctl: no cluster in $dir" >&2; return 2; }
	case "$cmd" in
	cluster-master | cluster-slot-keys | cluster-slot-end | cluster-slot-begin | cluster-migrate)
		if ! [[ $a =~ ^(0|[1-9][0-9]{0,4})$ ]] || [ "$a" -gt 16383 ]; then
			dlock_redis_cluster_usage
			return
		fi
		slot=$a
		;;
	esac
	case "$cmd" in
	cluster-slot-begin | cluster-migrate)
		port=$(dlock_redis_cluster_node "$dir" "$b") || { dlock_redis_cluster_usage; return; }
		;;
	cluster-kill | cluster-wait-failover | cluster-rejoin | cluster-failover)
		port=$(dlock_redis_cluster_node "$dir" "$a") || { dlock_redis_cluster_usage; return; }
		;;
	esac
	case "$cmd" in
	cluster-master) dlock_redis_cluster_master "$dir" "$slot" "$deadline" ;;
	cluster-slot-begin) dlock_redis_cluster_slot_begin "$dir" "$slot" "$port" "$deadline" ;;
	cluster-slot-keys) dlock_redis_cluster_slot_keys "$dir" "$slot" "$deadline" ;;
	cluster-slot-end) dlock_redis_cluster_slot_end "$dir" "$slot" "$deadline" ;;
	cluster-migrate) dlock_redis_cluster_migrate "$dir" "$slot" "$port" "$deadline" ;;
	cluster-kill) dlock_redis_cluster_kill "$dir" "$port" ;;
	cluster-wait-failover) dlock_redis_cluster_wait_failover "$dir" "$port" "$deadline" ;;
	cluster-rejoin) dlock_redis_cluster_rejoin "$dir" "$port" "$deadline" ;;
	cluster-failover) dlock_redis_cluster_failover "$dir" "$port" "$deadline" ;;
	cluster-wait-ready) dlock_redis_cluster_wait_ready "$dir" "$deadline" ;;
	*)
		echo "redis.sh ctl: unknown command '$cmd'" >&2
		dlock_redis_cluster_usage
		;;
	esac
}
