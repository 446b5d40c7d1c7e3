#!/usr/bin/env bash
# Check dlock the way a user meets it: build, `cmake --install` into a
# temporary prefix, then use only what was installed.
#
# Usage: bash ci/install-check.sh          (from any directory)
#
#   1. files    the libraries (SONAME), headers, programs, man pages,
#               dlock.pc and the CMake package are where they belong
#   2. version  project(), DLOCK_VERSION_*, dlock_version(), dlock.pc,
#               dlock --version, the Doxyfile and the man pages agree
#   3. build    examples/ against the prefix: CMake find_package(dlock)
#               (shared and COMPONENTS static) and pkg-config (make, shared
#               and STATIC=1), each with the event-loop examples on libuv
#               and libevent (the installed adapters); the README's link
#               commands: a shared link runs only with the libdir in the
#               RPATH or LD_LIBRARY_PATH, and `pkg-config --static` links
#               libdlock.a
#   4. run      each example against file:// and mem://, and against the
#               first URI of each backend in DLOCK_TEST_URIS when set
#               (ci/servers.sh sets it); the other topologies, whose
#               behaviour the conformance suite covers, run choose_backend;
#               the event-loop examples hold 3 locks for a second on file://
#               and mem://
#   5. man      `man -l` renders every page with no groff warning; the
#               options and environment of --help and the man page match
#   6. docs     Doxygen on the public headers prints no warning
#
# Builds into build/install-check (kept, so a rerun is incremental);
# everything else goes to a temporary directory that is removed at the end.
# Exits non-zero when any check failed, after running all it could.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

work=$(mktemp -d /tmp/dlock-install-check.XXXXXX)
bg_pids=()
cleanup() {
	local pid
	for pid in "${bg_pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

failures=0
step() { echo; echo "==== [install-check] $*"; }
ok() { echo "  ok    $*"; }
bad() {
	echo "  FAIL  $*"
	failures=$((failures + 1))
}

step "dependencies"
bash ci/install-deps.sh build docs

# ---------------------------------------------------------------- build
step "build and install into a temporary prefix"
build=build/install-check
prefix=$work/prefix
# Configured for /usr/local, installed elsewhere: the package must not care.
cmake -S . -B "$build" -DDLOCK_WERROR=ON -DDLOCK_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/configure.log" ||
	{ cat "$work/configure.log"; exit 1; }
grep -E "dlock backends|left out" "$work/configure.log" || true
cmake --build "$build" -j"$(nproc)" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
echo "installed $(wc -l <"$work/install.log") files into $prefix"

# ---------------------------------------------------------------- files
step "installed files"
pc=$(find "$prefix" -name dlock.pc -path '*/pkgconfig/*' | head -n 1)
libdir=$(dirname "$(dirname "$pc")")
version=$(sed -n 's/^project(dlock VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
major=${version%%.*}
bench=0
[ -x "$prefix/bin/dlock-bench" ] && bench=1
expect=(
	"$libdir/libdlock.so" "$libdir/libdlock.so.$major" "$libdir/libdlock.so.$version" "$libdir/libdlock.a"
	"$prefix/include/dlock/dlock.h" "$prefix/include/dlock/sys/driver.h" "$prefix/include/dlock/loop.h"
	"$prefix/include/dlock/adapters/libuv.h" "$prefix/include/dlock/adapters/libevent.h"
	"$prefix/bin/dlock" "$prefix/share/man/man1/dlock.1" "$prefix/share/man/man3/dlock.3"
	"$libdir/pkgconfig/dlock.pc" "$libdir/cmake/dlock/dlockConfig.cmake"
	"$libdir/cmake/dlock/dlockConfigVersion.cmake"
)
[ "$bench" = 1 ] && expect+=("$prefix/share/man/man1/dlock-bench.1")
for f in "${expect[@]}"; do
	if [ -e "$f" ]; then ok "${f#"$prefix"/}"; else bad "missing ${f#"$prefix"/}"; fi
done
[ "$bench" = 1 ] || echo "  note  no dlock-bench in this build: neither it nor its man page is installed"
soname=$(readelf -d "$libdir/libdlock.so.$version" 2>/dev/null | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
if [ "$soname" = "libdlock.so.$major" ]; then ok "SONAME $soname"; else bad "SONAME '$soname', expected libdlock.so.$major"; fi
if "$prefix/bin/dlock" --version >"$work/dlock-version" 2>&1; then
	ok "installed dlock runs: $(tr '\n' ' ' <"$work/dlock-version")"
else
	bad "installed dlock does not run: $(cat "$work/dlock-version")"
fi

export PKG_CONFIG_PATH=$libdir/pkgconfig
export CMAKE_PREFIX_PATH=$prefix

# -------------------------------------------------------------- version
step "version $version everywhere"
cat >"$work/version.c" <<'EOF'
#include <dlock/dlock.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	char macros[64];

	snprintf(macros, sizeof macros, "%d.%d.%d", DLOCK_VERSION_MAJOR, DLOCK_VERSION_MINOR,
	         DLOCK_VERSION_PATCH);
	printf("%s %s %s\n", macros, DLOCK_VERSION_STRING, dlock_version());
	return 0;
}
EOF
# shellcheck disable=SC2046  # pkg-config output is a list of flags
cc -std=c11 -Wall -Wextra -Werror "$work/version.c" -o "$work/version" $(pkg-config --cflags --libs dlock) \
	-Wl,-rpath,"$libdir"
versions=(
	"header-macros library-and-header:$("$work/version")"
	"dlock.pc:$(pkg-config --modversion dlock)"
	"dlock --version:$(sed -n '1s/^dlock //p' "$work/dlock-version")"
	"docs/Doxyfile:$(sed -n 's/^PROJECT_NUMBER *= *//p' docs/Doxyfile)"
)
for page in man/*.[13]; do
	versions+=("$page:$(sed -n 's/^\.TH .*"dlock \([0-9.]*\)".*/\1/p' "$page")")
done
for v in "${versions[@]}"; do
	what=${v%%:*}
	got=${v#*:}
	if [ "$got" = "$version" ] || [ "$got" = "$version $version $version" ]; then
		ok "$what: $got"
	else
		bad "$what says '$got', CMakeLists.txt says $version"
	fi
done

# ------------------------------------------------------ build examples
step "build the examples against the prefix"
examples=(create_order scheduled_job lost_lock_worker choose_backend worker_pool leader_service leader_observer
	loop_poll loop_libuv loop_libevent)
declare -A bin_dirs=()
build_cmake() { # NAME STATIC
	if cmake -S examples -B "$work/$1" -DDLOCK_EXAMPLES_STATIC="$2" >"$work/$1.log" 2>&1 &&
		cmake --build "$work/$1" -j"$(nproc)" >>"$work/$1.log" 2>&1; then
		ok "$1: find_package(dlock)$([ "$2" = ON ] && echo ' COMPONENTS static') + dlock::dlock$([ "$2" = ON ] && echo _static)"
		bin_dirs[$1]=$work/$1
	else
		bad "$1:"
		sed 's/^/        /' "$work/$1.log"
	fi
}
build_make() { # NAME STATIC
	cp -r examples "$work/$1"
	rm -rf "$work/$1/build"*
	if make -C "$work/$1" STATIC="$2" -j"$(nproc)" >"$work/$1.log" 2>&1; then
		ok "$1: make with pkg-config$([ "$2" = 1 ] && echo ', STATIC=1')"
		bin_dirs[$1]=$work/$1
	else
		bad "$1:"
		sed 's/^/        /' "$work/$1.log"
	fi
}
build_cmake cmake-shared OFF
build_cmake cmake-static ON
build_make make-shared 0
build_make make-static 1
# Built only where libuv and libevent are found, which install-deps provides.
for d in "${!bin_dirs[@]}"; do
	for e in loop_libuv loop_libevent; do
		[ -x "${bin_dirs[$d]}/$e" ] || bad "$d: $e was not built (libuv1-dev, libevent-dev: bash ci/install-deps.sh build)"
	done
done
for d in "${!bin_dirs[@]}"; do
	case $d in
	*static)
		if ldd "${bin_dirs[$d]}/create_order" | grep -q libdlock; then
			bad "$d: create_order needs libdlock.so"
		fi
		;;
	esac
done

# The README's commands, word for word but for the file names.
# shellcheck disable=SC2046  # pkg-config output is a list of flags
if cc "$work/version.c" -o "$work/version-plain" $(pkg-config --cflags --libs dlock) 2>"$work/plain.log" &&
	! "$work/version-plain" >/dev/null 2>&1 && LD_LIBRARY_PATH=$libdir "$work/version-plain" >/dev/null; then
	ok "shared, no RPATH: libdlock.so.$major not found until LD_LIBRARY_PATH names the libdir"
else
	bad "shared link without RPATH: expected a program that runs only with LD_LIBRARY_PATH:"
	sed 's/^/        /' "$work/plain.log"
fi
# shellcheck disable=SC2046
if cc "$work/version.c" -o "$work/version-rpath" $(pkg-config --cflags --libs dlock) \
	-Wl,-rpath,$(pkg-config --variable=libdir dlock) 2>"$work/rpath.log" && "$work/version-rpath" >/dev/null; then
	ok "shared, -Wl,-rpath,\$(pkg-config --variable=libdir dlock): runs"
else
	bad "shared link with the libdir as RPATH does not run:"
	sed 's/^/        /' "$work/rpath.log"
fi
# pkg-config --static: libdlock.a and the shared client libraries.  This
# used to fail on Debian (libpq's static flags: -lpgport, -lgssapi_krb5).
# shellcheck disable=SC2046
if cc "$work/version.c" -o "$work/version-static" \
	$(pkg-config --static --cflags --libs dlock | sed 's/-ldlock\b/-l:libdlock.a/') 2>"$work/static.log" &&
	"$work/version-static" >/dev/null && ! ldd "$work/version-static" | grep -q libdlock; then
	ok "static: pkg-config --static --cflags --libs dlock, with -l:libdlock.a: links and runs"
else
	bad "static link from pkg-config --static (flags: $(pkg-config --static --libs dlock)):"
	sed 's/^/        /' "$work/static.log"
fi

# -------------------------------------------------------- run examples
step "run the examples"
# expect WHAT RC PATTERN CMD...: run CMD (at most 60 s); it must exit with
# RC and print a line matching PATTERN.  Says ok WHAT, or shows the output.
run_n=0
expect() {
	local what=$1 want=$2 pattern=$3 rc=0 out
	shift 3
	run_n=$((run_n + 1))
	out=$work/out.$run_n
	timeout 60 "$@" >"$out" 2>&1 || rc=$?
	if [ "$rc" = "$want" ] && grep -q -- "$pattern" "$out"; then
		ok "$what"
		return 0
	fi
	bad "$what: exit $rc (expected $want, and a line matching '$pattern'): $*"
	sed 's/^/        /' "$out"
	return 1
}

# A URI with more parameters.
with_params() { case $1 in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac; }

# choose_backend prints the capabilities that the other checks depend on.
cap() { awk -v k="$1" '$1 == k { print $2 }' "$work/caps"; }

# await_line FILE PATTERN: up to 20 s for FILE to have a line matching PATTERN.
await_line() {
	local _
	for _ in $(seq 1 200); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# The term an observer printed for ADDRESS (its last line about it).
term_of() { sed -n "s/^leader $2 term \([0-9]*\)$/\1/p" "$1" | tail -1; }

elect_on() { # DIR URI SCOPE LEASE
	local dir=$1 uri=$2 scope=$3 lease=$4 rc=0 short obs po pa pb ta tb name=install-check-leader-$run_n
	run_n=$((run_n + 1))
	# leader_service: elected, leads a second, resigns.
	timeout 60 "$dir/leader_service" "$uri" "$name" svc-only 1 >"$work/svc.$run_n" 2>&1 || rc=$?
	if [ "$rc" = 2 ] && grep -q "has no leader election" "$work/svc.$run_n"; then
		ok "leader_service: no elections on $(cap backend) here, and it says so"
		return 0
	fi
	if [ "$rc" = 0 ] && grep -q "elected: svc-only leads" "$work/svc.$run_n" && grep -q "resigned term" "$work/svc.$run_n"; then
		ok "leader_service: elected, then resigned"
	else
		bad "leader_service: exit $rc (expected 0, elected and resigned):"
		sed 's/^/        /' "$work/svc.$run_n"
		return 0
	fi
	# A lease that is not renewed runs out: leadership lost, exit 76.
	[[ $uri == *ttl=* || $uri == *renew=* ]] && return 0
	if [ "$lease" = ttl ]; then
		expect "leader_service: exit 76 when its 1 s lease ran out" 76 "lost leadership" \
			"$dir/leader_service" "$(with_params "$uri" 'ttl=1s&renew=off')" "$name" svc-lost 0 || true
	fi
	[ "$scope" = process ] && return 0
	# The observer follows: A leads, B waits; A resigns (SIGTERM): B, a larger term; B killed: nobody.
	short=$(with_params "$uri" 'ttl=3s')
	obs=$work/obs.$run_n
	timeout 60 "$dir/leader_observer" "$short" "$name" 0 >"$obs" 2>&1 &
	po=$!
	bg_pids+=("$po")
	timeout 60 "$dir/leader_service" "$short" "$name" svc-a 0 >"$work/svc-a" 2>&1 &
	pa=$!
	bg_pids+=("$pa")
	if ! await_line "$obs" "^leader svc-a term"; then
		bad "leader_observer: never saw svc-a lead:"
		sed 's/^/        /' "$obs" "$work/svc-a"
		return 0
	fi
	ok "leader_observer: sees the leader's address (svc-a, term $(term_of "$obs" svc-a))"
	timeout 60 "$dir/leader_service" "$short" "$name" svc-b 0 >"$work/svc-b" 2>&1 &
	pb=$!
	bg_pids+=("$pb")
	await_line "$work/svc-b" "^campaigning" || true
	kill -TERM "$pa"
	rc=0
	wait "$pa" || rc=$?
	if [ "$rc" = 0 ] && grep -q "resigned term" "$work/svc-a" && await_line "$obs" "^leader svc-b term"; then
		ta=$(term_of "$obs" svc-a)
		tb=$(term_of "$obs" svc-b)
		if [ -n "$ta" ] && [ -n "$tb" ] && [ "$tb" -gt "$ta" ]; then
			ok "leader_service: svc-a resigned on SIGTERM; the observer follows svc-b, term $tb > $ta"
		else
			bad "leader_observer: svc-b's term '$tb' is not above svc-a's '$ta'"
		fi
	else
		bad "leader_service: svc-a exit $rc on SIGTERM, or the observer never saw svc-b:"
		sed 's/^/        /' "$work/svc-a" "$obs"
	fi
	pkill -KILL -P "$pb" 2>/dev/null || true # the service itself, not the timeout that runs it
	wait "$pb" 2>/dev/null || true
	for _ in $(seq 1 200); do
		[ "$(tail -1 "$obs")" = "no leader" ] && break
		sleep 0.1
	done
	if [ "$(tail -1 "$obs")" = "no leader" ]; then
		ok "leader_observer: no leader once svc-b was killed"
	else
		bad "leader_observer: still follows a killed leader:"
		sed 's/^/        /' "$obs"
	fi
	kill -TERM "$po" 2>/dev/null || true
	wait "$po" 2>/dev/null || true
	bg_pids=()
}

declare -A examples_ran=() # backend name -> 1 once every example ran on one of its URIs

examples_on() { # DIR URI
	local dir=$1 uri=$2 scope lease i rc pid pids=() created found
	local store=$work/orders.$run_n n=4

	# choose_backend: AP refused (exit 3), anything else does the transfer.
	timeout 60 "$dir/choose_backend" "$uri" >"$work/caps" 2>&1 || true
	scope=$(cap scope)
	lease=$(cap lease)
	if [ "$(cap consistency)" = AP ]; then
		expect "choose_backend refuses $(cap backend): AP" 3 refusing "$dir/choose_backend" "$uri" || true
	else
		expect "choose_backend: $(cap backend), $(cap consistency), lease $lease, scope $scope" 0 \
			"transfer done" "$dir/choose_backend" "$uri" || return 0
	fi
	# The other examples: once per backend (the first of its URIs).
	if [ -n "${examples_ran[$(cap backend)]:-}" ]; then
		return 0
	fi
	examples_ran[$(cap backend)]=1

	# create_order: several processes, one creates.  mem:// locks are per
	# process, so there one process runs twice instead.
	if [ "$scope" = process ]; then
		if expect "create_order: created" 0 "order 42 created" "$dir/create_order" "$uri" 42 "$store"; then
			expect "create_order: then found" 0 "already exists" "$dir/create_order" "$uri" 42 "$store" || true
		fi
	else
		for i in $(seq 1 $n); do
			timeout 60 "$dir/create_order" "$uri" 42 "$store" >"$work/order.$i" 2>&1 &
			pids+=($!)
			bg_pids+=($!)
		done
		rc=0
		for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
		bg_pids=()
		created=$(cat "$work"/order.* | grep -c "created" || true)
		found=$(cat "$work"/order.* | grep -c "already exists" || true)
		if [ "$rc" = 0 ] && [ "$created" = 1 ] && [ "$found" = $((n - 1)) ] &&
			grep -q '^fencing_token ' "$store/order-42"; then
			ok "create_order: $n processes: 1 created it ($(grep '^fencing_token' "$store/order-42")), $found found it"
		else
			bad "create_order: $n processes: exit $rc, $created created it, $found found it"
			cat "$work"/order.* | sed 's/^/        /'
		fi
		rm -f "$work"/order.*
	fi

	# scheduled_job: a run that starts while another holds the lock skips.
	if [ "$scope" = process ]; then
		expect "scheduled_job: ran" 0 "nightly-report done" "$dir/scheduled_job" "$uri" 0 || true
	else
		timeout 60 "$dir/scheduled_job" "$uri" 3 >"$work/job1" 2>&1 &
		pid=$!
		bg_pids+=("$pid")
		for _ in $(seq 1 100); do
			grep -q running "$work/job1" && break
			sleep 0.1
		done
		expect "scheduled_job: a second run skips while the first holds the lock" 0 skipped \
			"$dir/scheduled_job" "$uri" 0 || true
		rc=0
		wait "$pid" || rc=$?
		bg_pids=()
		if [ "$rc" = 0 ] && grep -q "nightly-report done" "$work/job1"; then
			ok "scheduled_job: the first run finished"
		else
			bad "scheduled_job: first run: exit $rc:"
			sed 's/^/        /' "$work/job1"
		fi
		# A short run keeps the lock for its minimum hold: a late run on another host skips.
		timeout 60 "$dir/scheduled_job" "$uri" 0 3 >"$work/job1" 2>&1 &
		pid=$!
		bg_pids+=("$pid")
		for _ in $(seq 1 100); do
			grep -q done "$work/job1" && break
			sleep 0.1
		done
		expect "scheduled_job: a run just after a short one skips (minimum hold)" 0 skipped \
			"$dir/scheduled_job" "$uri" 0 0 || true
		wait "$pid" || true
		bg_pids=()
	fi

	# worker_pool: 6 processes, 2 permits: never more than 2 calls at once.
	if [ "$scope" != process ]; then
		run_n=$((run_n + 1))
		rc=0
		timeout 60 "$dir/worker_pool" "$uri" 6 2 >"$work/pool.$run_n" 2>&1 || rc=$?
		if [ "$rc" = 2 ] && grep -q "has no semaphores" "$work/pool.$run_n"; then
			ok "worker_pool: no semaphores on $(cap backend) here, and it says so"
		else
			expect "worker_pool: 6 processes under 2 permits" 0 "at most [12] at once (limit 2)" \
				"$dir/worker_pool" "$uri" 6 2 || true
		fi
	fi

	# lost_lock_worker: done when the lock stays; stopped when a lease that
	# is not renewed runs out (TTL backends).
	expect "lost_lock_worker: all steps done" 0 "all 3 steps done" "$dir/lost_lock_worker" "$uri" 3 || true
	if [ "$lease" = ttl ] && [[ $uri != *ttl=* && $uri != *renew=* ]]; then
		expect "lost_lock_worker: stopped when its 1 s lease ran out" 3 "stopped after" \
			"$dir/lost_lock_worker" "$(with_params "$uri" 'ttl=1s&renew=off')" 10 || true
	fi

	# leader_service and leader_observer (elections).
	elect_on "$dir" "$uri" "$scope" "$lease"
}

. ci/servers.sh # dlock_uris_masked
uris=("file://$work/locks" "mem://install-check")
read -r -a server_uris <<<"${DLOCK_TEST_URIS:-}"
uris+=("${server_uris[@]}")
[ ${#server_uris[@]} -gt 0 ] || echo "  note  DLOCK_TEST_URIS unset: file:// and mem:// only"
if [ -n "${bin_dirs[cmake-shared]:-}" ]; then
	for uri in "${uris[@]}"; do
		echo "  -- $(dlock_uris_masked "$uri")"
		examples_on "${bin_dirs[cmake-shared]}" "$uri"
	done
fi
# The event-loop examples, briefly: 3 locks held for a second on the loop.
if [ -n "${bin_dirs[cmake-shared]:-}" ]; then
	for e in loop_poll loop_libuv loop_libevent; do
		for uri in "file://$work/locks" "mem://install-check"; do
			expect "$e: 3 locks held a second on ${uri%%:*}://" 0 "^acquired=3 lost=0 " \
				"${bin_dirs[cmake-shared]}/$e" "$uri" 3 1 || true
		done
	done
fi
# A backend of the application's own (kv_driver.c, kv_driver_loop.c) on the test Redis.
if [ -n "${DLOCK_TEST_REDIS_URI:-}" ]; then
	for d in "${!bin_dirs[@]}"; do
		expect "$d: custom_backend registers kv:// and locks on Redis" 0 "held install-check with token" \
			"${bin_dirs[$d]}/custom_backend" "kv://${DLOCK_TEST_REDIS_URI#redis://}" install-check || true
	done
fi
# The other builds: the same programs, linked differently; one run each.
for d in cmake-static make-shared make-static; do
	[ -n "${bin_dirs[$d]:-}" ] || continue
	for e in "${examples[@]}"; do
		# Extra arguments: ORDER_ID and STORE_DIR, SECONDS (and AT_LEAST), STEPS, WORKERS and PERMITS,
		# COUNT and SECONDS.
		extra=(1 "$work/orders-$d")
		[ "$e" = worker_pool ] && extra=(2 1)
		[[ $e == loop_* ]] && extra=(3 1)
		[ "$e" = scheduled_job ] && extra=(0 0) # SECONDS and AT_LEAST
		uri=file://$work/locks-$d
		# Elections: not on file://; one process on mem://, for a second.
		[ "$e" = leader_service ] && uri=mem://install-check extra=(leader svc 1)
		[ "$e" = leader_observer ] && uri=mem://install-check extra=(leader 1)
		expect "$d: $e" 0 . "${bin_dirs[$d]}/$e" "$uri" "${extra[@]}" || true
	done
done

# ------------------------------------------------------------ man pages
step "man pages"
render() { LC_ALL=C.UTF-8 MANWIDTH=300 man --warnings=all -l "$1"; }
for page in man/*.[13] "$prefix"/share/man/man*/*; do
	if render "$page" >"$work/page" 2>"$work/page.err" && [ ! -s "$work/page.err" ] && [ -s "$work/page" ]; then
		ok "man -l ${page#"$work"/}"
	else
		bad "man -l ${page#"$work"/}:"
		sed 's/^/        /' "$work/page.err"
	fi
done

# Options and environment variables named by --help and by the page.
names() { grep -oE -- '--[a-z][a-z-]*[a-z]|\b(DLOCK|XDG)_[A-Z_]*[A-Z]\b' | sort -u; }
agree() { # PROGRAM PAGE
	"$1" --help | names >"$work/help.names"
	render "$2" 2>/dev/null | sed 's/.\x08//g' | names >"$work/man.names"
	if cmp -s "$work/help.names" "$work/man.names"; then
		ok "$(basename "$1") --help and $(basename "$2") name the same options and variables"
	else
		bad "$(basename "$1") --help and $(basename "$2") differ (< help, > man):"
		diff "$work/help.names" "$work/man.names" | grep '^[<>]' | sed 's/^/        /'
	fi
}
agree "$prefix/bin/dlock" man/dlock.1
if [ "$bench" = 1 ]; then
	agree "$prefix/bin/dlock-bench" man/dlock-bench.1
fi

# ----------------------------------------------------------------- docs
step "Doxygen"
if (cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $work/docs") | doxygen - >"$work/doxygen.log" 2>&1 &&
	[ ! -s "$work/doxygen.log" ]; then
	ok "doxygen docs/Doxyfile: no warning ($(find "$work/docs/html" -name '*.html' | wc -l) pages)"
else
	bad "doxygen docs/Doxyfile:"
	sed 's/^/        /' "$work/doxygen.log"
fi

echo
if [ "$failures" -ne 0 ]; then
	echo "==== [install-check] FAILED: $failures check(s)"
	exit 1
fi
echo "==== [install-check] passed"
