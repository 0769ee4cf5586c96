#!/usr/bin/env bash
# Install what is needed, build tarn, and run the guided quickstart on sparse files.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release -p tarn-cli
./target/release/tarn quickstart "${1:-/var/tmp/tarn-quickstart}"
