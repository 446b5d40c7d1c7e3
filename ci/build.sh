#!/usr/bin/env bash
# Configure and build one variant of dlock into build/NAME (warnings are errors).
#
# Usage: bash ci/build.sh NAME [cmake args...]
#   plain  RelWithDebInfo, the compiler CMake finds (gcc on Debian)
#   asan   AddressSanitizer + UndefinedBehaviorSanitizer, asserts on, -O1
#   tsan   ThreadSanitizer with clang, asserts on, -O1
#   other  names get only -DDLOCK_WERROR=ON and the given args
# Extra cmake args come last, so they override the defaults above.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 1 ] || [ -z "$1" ] || [[ "$1" == */* ]]; then
	echo "usage: bash ci/build.sh NAME [cmake args...]   (NAME: plain, asan, tsan, ...)" >&2
	exit 2
fi
name=$1
shift

args=(-DDLOCK_WERROR=ON)
case "$name" in
plain)
	args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
	;;
asan)
	args+=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O1 -g"
		"-DDLOCK_SANITIZE=address,undefined")
	;;
tsan)
	# clang for ThreadSanitizer: gcc's TSan runtime has been flaky on some kernels.
	clang=$(command -v clang) || { echo "build: clang not found (bash ci/install-deps.sh)" >&2; exit 1; }
	args+=("-DCMAKE_C_COMPILER=$clang" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O1 -g"
		-DDLOCK_SANITIZE=thread)
	;;
esac

dir=build/$name
echo "build: cmake -S . -B $dir ${args[*]} $*"
cmake -S . -B "$dir" "${args[@]}" "$@"
cmake --build "$dir" -j"$(nproc)"
