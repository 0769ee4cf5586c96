#!/usr/bin/env bash
# Install what is needed and run every check and test: formatting, lints, unit tests,
# integration tests (real pools on sparse files, crash and fault-injection tests), then the
# functional suite (CLI scripts through real FUSE mounts, tests/functional).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# A one-shot run gains nothing from incremental state, which is a third of target/ in size.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo "== disk: $(df -h --output=avail . | tail -n 1 | tr -d ' ') free"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== module cycles (scripts/check-cycles.py)"
python3 scripts/check-cycles.py
echo "== cargo test"
log=$(mktemp)
functional_log=$(mktemp)
trap 'rm -f "$log" "$functional_log"' EXIT
set +e
cargo test --workspace --no-fail-fast --lib --bins --tests 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "== functional suite (tests/functional, ZFS Test Suite style)"
bash scripts/functional.sh -q 2>&1 | tee "$functional_log"
functional_status=${PIPESTATUS[0]}
set -e
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "cargo tests: %d passed, %d failed\n", p, f }' "$log"
functional_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$functional_log" | tail -n 1)
echo "functional suite: ${functional_line:-did not finish}"
awk -v functional="${functional_line:-0 passed, 1 failed}" '
     /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { split(functional, words, " "); printf "tests: %d passed, %d failed\n", p + words[1], f + words[3] }' "$log"
if [ "$status" -ne 0 ]; then exit "$status"; fi
exit "$functional_status"
