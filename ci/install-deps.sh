#!/usr/bin/env bash
# Install the Debian packages needed to build and test dlock.
#
# Usage: bash ci/install-deps.sh
# Returns at once when every package is already installed, so it is safe to
# rerun.  Runs apt-get as root, through sudo otherwise; without either it
# prints the install command and fails.
set -euo pipefail

packages=(
	# build
	cmake gcc clang pkg-config make libssl-dev libcunit1-dev
	# client libraries of the server backends
	libhiredis-dev libzookeeper-mt-dev libpq-dev
	# servers the tests start on free loopback ports
	redis-server redis-tools zookeeper postgresql pgbouncer
	# memory checking, static analysis, and the sanitizer and libFuzzer
	# runtimes of clang (only recommended by clang, so not pulled in)
	valgrind cppcheck clang-tidy libclang-rt-dev
	# ci/install-check.sh: API reference, man page rendering
	doxygen man-db groff-base
)

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
	echo "install-deps: all ${#packages[@]} packages already installed"
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
