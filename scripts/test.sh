#!/usr/bin/env bash
# Install what is needed and run every check and test: formatting, lints, unit tests,
# integration tests (real pools on sparse files, crash and fault-injection tests), then the
# functional suite (CLI scripts through real FUSE mounts, tests/functional).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
phase_started=$SECONDS
phase_name=""
phase_times=""
# phase NAME: end the phase running (its time joins the summary) and start NAME.
phase() {
    if [ -n "$phase_name" ]; then
        phase_times="$phase_times$(printf '  %-32s %5ds' "$phase_name" $((SECONDS - phase_started)))"$'\n'
    fi
    phase_name=$1
    phase_started=$SECONDS
    [ -z "$phase_name" ] || echo "== $phase_name"
}
phase "install dependencies"
bash scripts/install-deps.sh
# A one-shot run gains nothing from incremental state, which is a third of target/ in size.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo "== disk: $(df -h --output=avail . | tail -n 1 | tr -d ' ') free"
phase "cargo fmt --check"
cargo fmt --all -- --check
phase "module cycles"
python3 scripts/check-cycles.py
phase "build the tests, with clippy's lints"
# Clippy's lints are checked while the tests build, not in a second compilation: clippy-driver
# is rustc with clippy's lint passes, and cargo hands it every workspace crate (as `cargo
# clippy` does, which sets the same two variables, but for a metadata-only build that shares
# nothing with this one). A lint fails the build as `cargo clippy -- -D warnings` fails. A
# separate `cargo clippy --workspace --all-targets` checked all 300 dependencies and every
# workspace target again, beside the tests: two cores' worth of work for five minutes of a run.
# The `cargo test` below runs with the same variables, so it finds the binaries built here.
export RUSTC_WORKSPACE_WRAPPER
RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver)
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# --timings: where a clean build's time goes, kept in target/cargo-timings/ (an HTML report).
# This also puts the binaries the functional suite drives, target/debug/tarn and tarn-stress,
# in place (the integration tests need them). A separate `cargo build -p tarn-cli -p tarn-stress`
# resolved features without the dev-dependencies and so rebuilt a dozen crates: 138 s.
cargo test --workspace --lib --bins --tests --no-run --timings
phase "cargo test, functional suite and lints"
log=$(mktemp)
functional_log=$(mktemp)
lint_log=$(mktemp)
uring_functional_log=$(mktemp)
# A test that cannot run here records why in this file (tarn-test-support), counted apart from
# the passes. What this command installs, or needs anyway for the functional suite, is required:
# a test that would skip for lack of it fails instead.
export TARN_TEST_SKIPS
TARN_TEST_SKIPS=$(mktemp)
export TARN_TEST_REQUIRE="fuse,root,loop,fio,mkfs.btrfs,fincore"
# FUSE over io_uring (crates/fuser/src/uring): the host's switch is turned on here, explicitly
# and said so (tarn never turns it on by itself, nor does any test), and set back at the end.
# The cargo tests then serve every mount through the ring (TARN_FUSE_TRANSPORT=uring: a mount
# that cannot have it fails, none silently tests /dev/fuse); the functional suite runs whole
# over /dev/fuse, and its mount-heavy areas over the ring too, beside it.
uring_switch=/sys/module/fuse/parameters/enable_uring
uring_before=$(cat "$uring_switch" 2>/dev/null || true)
restore_uring() { [ -z "$uring_before" ] || echo "$uring_before" >"$uring_switch" 2>/dev/null || true; }
export TARN_FUSE_TRANSPORT=dev
if [ -n "$uring_before" ] && echo Y >"$uring_switch" 2>/dev/null; then
    echo "== FUSE over io_uring: $uring_switch: $uring_before -> Y for this run (set back at the end)"
    TARN_TEST_REQUIRE="$TARN_TEST_REQUIRE,fuse-uring"
    TARN_FUSE_TRANSPORT=uring
else
    echo "== FUSE over io_uring: not available here ($uring_switch: ${uring_before:-absent}); every mount uses /dev/fuse"
fi
trap 'rm -f "$log" "$functional_log" "$uring_functional_log" "$lint_log" "$TARN_TEST_SKIPS"; restore_uring' EXIT
set +e
# The functional suite runs beside the cargo tests: both spend most of their time waiting on
# syncs, mounts and child processes, and each has its own daemon sockets, pools and mounts. It
# runs in two lanes of areas at once (run.sh -j), for the same reason; each test's line and time
# are printed (where the suite's time goes).
functional_status_file=$(mktemp)
(
    bash tests/functional/run.sh -j 2 -F dev -b target/debug/tarn >"$functional_log" 2>&1
    echo $? >"$functional_status_file"
) &
functional_pid=$!
# The areas that work through mounts most, again over the ring.
uring_functional_status_file=$(mktemp)
(
    status=0
    if [ "$TARN_FUSE_TRANSPORT" = uring ]; then
        bash tests/functional/run.sh -a mount,dataset,snapshot,xattr -F uring -b target/debug/tarn >"$uring_functional_log" 2>&1 || status=$?
    else
        echo "skipped: no FUSE over io_uring on this host" >"$uring_functional_log"
    fi
    echo $status >"$uring_functional_status_file"
) &
uring_functional_pid=$!
# The command crates' lint runs beside the tests: built alone, without the `internals` feature
# that tarn-stress and tarn-bench turn on for the whole workspace build, a reach below the
# engine's facade fails here. (The workspace's own lints were checked by the build above.) It
# checks in the build's own target directory (the tests run from their binaries, not through
# cargo, so nothing holds its lock), which gives it the build scripts' output and the proc
# macros already built: 84 CPU seconds, against 183 in a target directory of its own, where
# zstd's C sources were compiled again.
lint_status_file=$(mktemp)
(
    status=0
    {
        echo "-- the command crates against the engine's facade"
        env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS \
            cargo clippy -p tarn-protocol -p tarn-fuse -p tarn-ops -p tarn-daemon -p tarn-cli --no-default-features -- -D warnings || status=1
    } >"$lint_log" 2>&1
    echo $status >"$lint_status_file"
) &
lint_pid=$!
# The test binaries built above, two at a time (scripts/run-tests.py, longest first; cargo
# would run them one after another), one test per core in each (libtest's default): most of a
# test's time is spent waiting on syncs, fsyncs, mounts and child processes. The crash tests'
# children are killed after work they report, not after a fixed time, in the rounds that their
# floors of work done count (tests/common: run_child_until_then_kill), so that load slows
# them down without failing them.
artifacts=$(mktemp)
cargo test --workspace --lib --bins --tests --no-run --message-format=json >"$artifacts"
python3 scripts/run-tests.py --lanes 2 <"$artifacts" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
rm -f "$artifacts"
wait "$functional_pid"
wait "$uring_functional_pid"
wait "$lint_pid"
echo "== lints of the command crates against the facade (cargo clippy -D warnings; ran beside cargo test)"
cat "$lint_log"
lint_status=$(cat "$lint_status_file")
rm -f "$lint_status_file"
echo "== functional suite (tests/functional, ZFS Test Suite style; ran beside cargo test)"
cat "$functional_log"
functional_status=$(cat "$functional_status_file")
rm -f "$functional_status_file"
echo "== functional suite's mount areas over FUSE over io_uring (ran beside cargo test)"
cat "$uring_functional_log"
uring_functional_status=$(cat "$uring_functional_status_file")
rm -f "$uring_functional_status_file"
[ "$functional_status" -ne 0 ] || functional_status=$uring_functional_status
phase ""
set -e
echo "time by phase:"
printf '%s' "$phase_times"
printf '  %-32s %5ds\n' total $((SECONDS - started))
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "cargo tests: %d passed, %d failed\n", p, f }' "$log"
skips=$(wc -l <"$TARN_TEST_SKIPS")
echo "cargo tests skipped (counted as passed above): $skips"
sed 's/^/  /' "$TARN_TEST_SKIPS"
functional_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$functional_log" | tail -n 1)
echo "functional suite (/dev/fuse): ${functional_line:-did not finish}"
uring_line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$uring_functional_log" | tail -n 1)
if [ "$TARN_FUSE_TRANSPORT" = uring ]; then
    echo "functional suite's mount areas (io_uring): ${uring_line:=0 passed, 1 failed}"
else
    uring_line="0 passed, 0 failed"
fi
echo "cargo tests' mounts: $TARN_FUSE_TRANSPORT"
awk -v functional="${functional_line:-0 passed, 1 failed}" -v uring="$uring_line" '
     /^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { split(functional, words, " "); split(uring, more, " ");
           printf "tests: %d passed, %d failed\n", p + words[1] + more[1], f + words[3] + more[3] }' "$log"
echo "lints: $([ "$lint_status" -eq 0 ] && echo clean || echo FAILED, see above)"
if [ "$status" -ne 0 ]; then exit "$status"; fi
if [ "$lint_status" -ne 0 ]; then exit "$lint_status"; fi
exit "$functional_status"
