#!/usr/bin/env bash
# Count the public items of the engine crate (tarn-engine, `tarn`) that a dependent can reach.
#
# Method. An item is a line that declares something `pub`, not `pub(crate)`, `pub(super)` or
# `pub(in ...)`: `pub fn|struct|enum|trait|type|const|static|mod|use` (methods included; struct
# fields and enum variants are not items). A file counts when its top-level module is reachable
# from outside the crate: lib.rs itself, and each top-level module that lib.rs declares
# `pub mod NAME;` with no `#[cfg(feature = "internals")]` among the attributes just above it. A module kept
# public only under the `internals` feature (for the engine's own integration tests and
# tarn-stress) or declared `pub(crate)` is left out with everything in it. Public items inside
# private submodules and `#[cfg(test)]` blocks are counted all the same: the figure is an upper
# bound, measured the same way before and after a change, which is what it is for.
#
# Usage: scripts/count-public-items.sh [-v]   (-v: the count of each top-level module too)
set -euo pipefail
cd "$(dirname "$0")/.."
src=crates/engine/src
verbose=${1:-}

items() {
	# Public item declarations in the given files or directories.
	grep -rhE '^\s*pub (unsafe )?(fn|struct|enum|trait|type|const|static|mod|use)\b' "$@" | wc -l
}

total=$(grep -cE '^\s*pub (unsafe )?(fn|struct|enum|trait|type|const|static|mod|use)\b' "$src/lib.rs" || true)
attributes=""
while IFS= read -r line; do
	if [[ $line =~ ^pub\ mod\ ([a-z_0-9]+)\; ]] && [[ $attributes != *'#[cfg(feature = "internals")]'* ]]; then
		name=${BASH_REMATCH[1]}
		paths=()
		[ -f "$src/$name.rs" ] && paths+=("$src/$name.rs")
		[ -d "$src/$name" ] && paths+=("$src/$name")
		count=$(items "${paths[@]}")
		total=$((total + count))
		[ "$verbose" = -v ] && printf '%6d  %s\n' "$count" "$name"
	fi
	# The attributes on the lines just above the next item (`#[...]`), blank lines skipped.
	if [[ $line =~ ^#\[ ]]; then
		attributes+="$line"
	elif ! [[ $line =~ ^[[:space:]]*$ ]]; then
		attributes=""
	fi
done <"$src/lib.rs"
echo "$total public items reachable from outside tarn-engine"
