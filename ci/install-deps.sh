#!/usr/bin/env bash
# Install the Debian packages needed to build and test dlock.
#
# Usage: bash ci/install-deps.sh [GROUP]...
#
#   build    compiler, CMake, pkg-config and the -dev packages of the
#            client libraries (hiredis, libzookeeper_mt, libpq, libcrypto),
#            so that every backend is built, and of libuv and libevent, for
#            the event-loop examples (libdlock links neither): enough for
#            `cmake --build`, ci/main.sh, an install and its examples
#   tests    CUnit (the test programs), clang with its sanitizer and
#            libFuzzer runtimes, python3 (JSON checks of test_cli.sh)
#   servers  Redis, ZooKeeper (with a JRE), PostgreSQL and PgBouncer, which
#            ci/servers.sh starts on free loopback ports, and the openssl
#            command, with which it makes the Redis TLS certificates
#   checks   valgrind, cppcheck, clang-tidy
#   docs     Doxygen and man-db/groff (ci/install-check.sh)
#
# No GROUP: all of them (ci/test.sh).  Returns at once when every package is
# already installed, so it is safe to rerun.  Runs apt-get as root, through
# sudo otherwise; without either it prints the install command and fails.
set -euo pipefail

declare -A groups=(
	[build]="cmake gcc libc6-dev make pkg-config libssl-dev libhiredis-dev libzookeeper-mt-dev libpq-dev libuv1-dev libevent-dev"
	# libclang-rt-dev: the sanitizer and libFuzzer runtimes, only
	# recommended by clang, so not pulled in; python3: test_cli.sh parses
	# the JSON of `dlock status --json` (and ci/static.sh reads the compile
	# commands with it)
	[tests]="libcunit1-dev clang libclang-rt-dev python3"
	[servers]="redis-server redis-tools openssl zookeeper postgresql pgbouncer"
	[checks]="valgrind cppcheck clang-tidy"
	[docs]="doxygen man-db groff-base"
)
order=(build tests servers checks docs)

[ $# -gt 0 ] || set -- "${order[@]}"
packages=()
for g in "$@"; do
	if [ -z "${groups[$g]:-}" ]; then
		echo "install-deps: unknown group '$g' (groups: ${order[*]}; none: all)" >&2
		exit 2
	fi
	read -r -a more <<<"${groups[$g]}"
	packages+=("${more[@]}")
done

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
	echo "install-deps: this script needs Debian or Ubuntu (dpkg and apt-get)." >&2
	echo "install-deps: install the equivalents of: ${packages[*]}" >&2
	exit 1
fi

# One dpkg-query call for all packages; unknown ones print nothing on stdout.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
	grep -qx "$p installed" <<<"$installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} packages ($*) already installed"
	exit 0
fi
echo "install-deps: installing ${missing[*]}"

if [ "$(id -u)" -eq 0 ]; then
	as_root=()
elif command -v sudo >/dev/null 2>&1; then
	as_root=(sudo)
else
	echo "install-deps: not root and no sudo; as root, run:" >&2
	echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Slim images drop /usr/share/man/man1, where the JRE that zookeeper pulls
# in links its man pages during configuration: without it the install fails.
if [ ! -d /usr/share/man/man1 ]; then
	"${as_root[@]}" mkdir -p /usr/share/man/man1
fi
apt_opts=(-q -o Acquire::Retries=3 -o Dpkg::Use-Pty=0)
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y \
	--no-install-recommends -o Dpkg::Options::=--force-unsafe-io "${missing[@]}" </dev/null
echo "install-deps: done"
