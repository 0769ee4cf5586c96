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
cargo test --workspace --release
