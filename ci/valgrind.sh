#!/usr/bin/env bash
# Valgrind memcheck over test_uri, test_core and the conformance suite on
# mem:// and file:// (no servers: DLOCK_TEST_URIS is unset for the run).
# Builds an uninstrumented debug variant into build/valgrind
# (DLOCK_VALGRIND_BUILD).  Exits non-zero on any memcheck error or leak.
#
# Usage: bash ci/valgrind.sh
#
# The conformance suite's counted loops run at half scale (DLOCK_TEST_SCALE,
# 0.5 unless set): memcheck looks for memory errors, which half as many
# rounds of the same code find as well (about 60 s at full scale, on 2
# cores).  ci/valgrind.supp holds suppressions for third-party code only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DLOCK_TEST_SCALE=${DLOCK_TEST_SCALE:-0.5}

out=${DLOCK_VALGRIND_BUILD:-build/valgrind}
command -v valgrind >/dev/null || { echo "valgrind: not installed (bash ci/install-deps.sh)" >&2; exit 1; }

# -O1 keeps stack traces readable; no sanitizer: valgrind cannot run them.
mkdir -p "$(dirname "$out")"
cmake -S . -B "$out" -DDLOCK_WERROR=ON -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O1 -g" \
	>"$out.cmake.log" || { cat "$out.cmake.log" >&2; exit 1; }
cmake --build "$out" --target test_uri test_core conformance -j"$(nproc)"

unset DLOCK_TEST_URIS DLOCK_TEST_REQUIRE_ALL

vg=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible
	--errors-for-leak-kinds=definite,indirect,possible --track-origins=yes --num-callers=30
	--suppressions="$PWD/ci/valgrind.supp" --quiet)

failed=()
for t in test_uri test_core conformance; do
	log=$(cd "$out" && pwd)/valgrind-$t.log
	echo "== valgrind $t"
	start=$SECONDS
	set +e
	(cd "$out/tests" && "${vg[@]}" --log-file="$log" "./$t") >"$out/$t.out" 2>&1
	status=$?
	set -e
	echo "   exit $status after $((SECONDS - start)) s"
	if [ "$status" -ne 0 ]; then
		failed+=("$t")
		# 99 is memcheck's; anything else is the test program's own failure.
		if [ "$status" -eq 99 ]; then
			cat "$log"
		else
			tail -n 40 "$out/$t.out"
		fi
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "valgrind: failed: ${failed[*]}" >&2
	exit 1
fi
echo "valgrind: test_uri, test_core and conformance (mem://, file://) clean"
