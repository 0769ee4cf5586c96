#!/usr/bin/env bash
# Install what is needed and run every check and test: formatting, lints, unit tests,
# integration tests (real pools on sparse files, crash and fault-injection tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --no-fail-fast --lib --bins --tests 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
