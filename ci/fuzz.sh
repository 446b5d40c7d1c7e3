#!/usr/bin/env bash
# Build the libFuzzer harnesses (tests/fuzz/fuzz_*.c) with clang,
# AddressSanitizer and UBSan, then run each for DLOCK_FUZZ_SECONDS (default
# 15) on its seed corpus, as many at once as there are cores.  Exits non-zero when a
# harness finds a crash, a leak or a broken property; the input that did it
# is saved in BUILD/crashes/.
#
# Usage: bash ci/fuzz.sh [HARNESS...]     (default: every harness built)
#
# BUILD is build/fuzz (DLOCK_FUZZ_BUILD).  The seeds in
# tests/fuzz/corpus/HARNESS/ are only read; what the fuzzer learns goes to
# BUILD/corpus/HARNESS/ and is kept between runs.  A crash input becomes a
# regression case by being copied into the seed directory: every later run
# (and `ctest -L fuzz` in BUILD) replays it first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${DLOCK_FUZZ_SECONDS:-15}
out=${DLOCK_FUZZ_BUILD:-build/fuzz} # the build directory
clang=$(command -v clang) || { echo "fuzz: clang not found (bash ci/install-deps.sh)" >&2; exit 1; }

# Configured here rather than by ci/build.sh: only the harnesses are built
# (the rest of the tree would be instrumented for nothing).
mkdir -p "$(dirname "$out")"
cmake -S . -B "$out" -DDLOCK_WERROR=ON "-DCMAKE_C_COMPILER=$clang" -DCMAKE_BUILD_TYPE=Debug \
	"-DCMAKE_C_FLAGS_DEBUG=-O1 -g" -DDLOCK_SANITIZE=address,undefined -DDLOCK_FUZZ=ON >"$out.cmake.log" ||
	{ cat "$out.cmake.log" >&2; exit 1; }
cmake --build "$out" --target fuzzers -j"$(nproc)"

if [ $# -gt 0 ]; then
	harnesses=("$@")
else
	harnesses=()
	for f in "$out"/tests/fuzz/fuzz_*; do
		[ -x "$f" ] && harnesses+=("$(basename "$f")")
	done
fi
[ ${#harnesses[@]} -gt 0 ] || { echo "fuzz: no harness built" >&2; exit 1; }

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$out/crashes"
# One harness: its seeds (read only) and what it learned; its exit status
# goes to BUILD/HARNESS.rc (0: no crash).
fuzz_one() {
	local h=$1 seeds learned rc=0
	seeds=tests/fuzz/corpus/$h
	learned=$out/corpus/$h
	mkdir -p "$learned"
	# -max_len: URIs are at most 8 KiB; longer inputs only cost time.
	"$out/tests/fuzz/$h" -max_total_time="$seconds" -max_len=9000 -timeout=10 \
		-print_final_stats=1 -artifact_prefix="$out/crashes/$h-" "$learned" "$seeds" >"$out/$h.log" 2>&1 || rc=$?
	echo "$rc" >"$out/$h.rc"
}

# As many harnesses at once as there are cores (each is one process), then
# each one's result in order.
jobs=$(nproc)
pids=()
for h in "${harnesses[@]}"; do
	rm -f "$out/$h.rc"
	while [ "$(jobs -pr | wc -l)" -ge "$jobs" ]; do sleep 1; done
	echo "== fuzz $h: ${seconds}s"
	fuzz_one "$h" &
	pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
failed=()
for h in "${harnesses[@]}"; do
	if [ "$(cat "$out/$h.rc" 2>/dev/null)" != 0 ]; then
		failed+=("$h")
		tail -n 60 "$out/$h.log"
		echo "== fuzz $h: FAILED (input in $out/crashes/$h-*)" >&2
	else
		echo "== fuzz $h: $(grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$out/$h.log" | tr '\n' ' ')"
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: ${#harnesses[@]} harnesses, ${seconds}s each, no crash"
