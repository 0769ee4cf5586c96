#!/usr/bin/env bash
# Build the tarn binaries (tarn, and tarn-stress for the stress area) and run the functional
# suite (tests/functional, in the style of the ZFS Test Suite) with its defaults; extra arguments go to tests/functional/run.sh (e.g. -T pool,
# -t create_mirror, -I 3, -k). Needs root and /dev/fuse: the tests mount pools through FUSE,
# under an altroot and with a daemon socket of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p tarn-cli -p tarn-stress
exec bash tests/functional/run.sh -b target/debug/tarn "$@"
