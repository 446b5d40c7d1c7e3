#!/usr/bin/env bash
# Static analysis of core/, backends/ and tools/ with cppcheck and
# clang-tidy, over the compile commands of a configure-only build in
# build/static (DLOCK_STATIC_BUILD), after a check that no file includes
# a private header (the core's internal.h, a backend's *_internal.h)
# outside its owner's folder.  Exit 0 when all are clean.
#
# Usage: bash ci/static.sh
#
# Configuration, checked in under ci/static/:
#   clang-tidy.yaml     the checks, and why some are left out
#   clang-tidy.supp     clang-tidy false positives (file|check|source line)
#   cppcheck.supp       cppcheck false positives
#   analyzer-model.h    tells the analyzer what dlock_error_set() returns
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=${DLOCK_STATIC_BUILD:-build/static}
cfg=ci/static
for tool in cppcheck clang-tidy; do
	command -v "$tool" >/dev/null || { echo "static: $tool not found (bash ci/install-deps.sh)" >&2; exit 1; }
done

# Configuring is enough: it writes compile_commands.json and the generated
# builtin_drivers.c.  Tests are left out (they are not analysed).
mkdir -p "$(dirname "$out")"
cmake -S . -B "$out" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DDLOCK_BUILD_TESTS=OFF >"$out.cmake.log" ||
	{ cat "$out.cmake.log" >&2; exit 1; }

mapfile -t files < <(python3 - "$out/compile_commands.json" "$PWD" <<'EOF'
import json, os, sys
root = sys.argv[2] + "/"
for e in json.load(open(sys.argv[1])):
    f = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if f.startswith(root) and f[len(root):].split("/")[0] in ("core", "backends", "tools"):
        print(f[len(root):])
EOF
)
[ ${#files[@]} -gt 0 ] || { echo "static: no source files in $out/compile_commands.json" >&2; exit 1; }
echo "static: ${#files[@]} files"

rc=0

# ---- private headers: the core's headers (internal.h, uri.h, registry.h,
# every core/*.h) are included only in core/, a backend's *_internal.h only in
# its own folder backends/NAME/ (unit tests of a folder's internals live there
# too); everything else goes through the public headers and the control door.
# The one exception is tests/fuzz/: a harness of a folder's internals includes
# its headers, and tests/fuzz/CMakeLists.txt puts that folder alone (the
# harness's _OWNER) on its include path.
echo "== private headers"
leaks=()
while IFS= read -r hit; do
	file=${hit%%:*}
	[[ $file == tests/fuzz/* ]] && continue
	header=$(sed -E 's/^[^:]*:[0-9]+:.*#[[:space:]]*include[[:space:]]*[<"]([^">]*)[">].*/\1/' <<<"$hit")
	base=${header##*/}
	if [ -f "core/$base" ] && [[ $header != dlock/* ]]; then
		[[ $file == core/* ]] || leaks+=("$hit")
		continue
	fi
	for owner in backends/*/"$base"; do
		[ -f "$owner" ] || continue
		[[ $file == "${owner%/*}"/* ]] || leaks+=("$hit")
	done
done < <(grep -rnE --include='*.c' --include='*.h' \
	'^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*\.h"' \
	tests tools examples backends core 2>/dev/null || true)
if [ ${#leaks[@]} -gt 0 ]; then
	echo "static: private headers included outside their owner's folder:" >&2
	printf '  %s\n' "${leaks[@]}" >&2
	rc=1
fi

# ---- cppcheck: warnings, performance and portability (style is left to review)
echo "== cppcheck"
if ! cppcheck --project="$out/compile_commands.json" --file-filter="core/*" \
	--file-filter="backends/*" --file-filter="tools/*" \
	--enable=warning,performance,portability --inconclusive --std=c11 --quiet -j"$(nproc)" \
	--suppressions-list="$cfg/cppcheck.supp" --error-exitcode=1 \
	--template='{file}:{line}: {severity}: {message} [{id}]'; then
	echo "static: cppcheck found problems" >&2
	rc=1
fi

# ---- clang-tidy: one process per file (clang-tidy 14 carries analyzer
# state from one file to the next and then reports phantom va_list misuse).
echo "== clang-tidy"
tidy_one() {
	local extra=(--extra-arg=-include --extra-arg="$PWD/$cfg/analyzer-model.h" --extra-arg=-Wno-unused-value)
	# status.c defines dlock_error_set(): it cannot take the model's macro.
	[ "$1" != core/status.c ] || extra=()
	clang-tidy -p "$out" --config-file="$cfg/clang-tidy.yaml" --quiet "${extra[@]}" "$1" 2>/dev/null || true
}
export -f tidy_one
export out cfg
report=$(printf '%s\n' "${files[@]}" | xargs -P"$(nproc)" -I{} bash -c 'tidy_one "$1"' _ {})

# Keep the findings ("FILE:LINE:COL: warning: ... [check]") that are not
# listed in clang-tidy.supp; the list names the flagged line by its text.
findings=$(grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error): ' <<<"$report" | sort -u || true)
left=()
while IFS= read -r line; do
	[ -n "$line" ] || continue
	file=${line%%:*}
	file=${file#"$PWD/"}
	lineno=$(cut -d: -f2 <<<"$line")
	check=$(sed -E 's/.*\[([^]]+)\]$/\1/' <<<"$line")
	text=$(sed -n "${lineno}p" "$file" | sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//')
	if grep -qxF "$file|$check|$text" "$cfg/clang-tidy.supp"; then
		echo "  (suppressed) $file:$lineno [$check]"
		continue
	fi
	left+=("$line")
done <<<"$findings"
if [ ${#left[@]} -gt 0 ]; then
	printf '%s\n' "$report"
	echo "static: clang-tidy found ${#left[@]} problems:" >&2
	printf '  %s\n' "${left[@]#"$PWD/"}" >&2
	rc=1
fi

[ "$rc" -eq 0 ] && echo "static: private headers, cppcheck and clang-tidy clean"
exit "$rc"
