#!/usr/bin/env bash
# send -R sends a file system's tree (every descendant with the snapshot, every snapshot up to
# it, local properties); receive recreates it below the target, mounts it, and takes -o and -x;
# an incremental tree stream (-R -i) brings new snapshots and a file system made since whole.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "send -R | receive replicates a tree of file systems"
trap destroy_all_pools EXIT

default_setup
src=$TESTPOOL/src
log_must tarn create "$src"
log_must tarn create -o compression=zstd "$src/a"
log_must tarn create -o recordsize=16K "$src/a/b"
for fs in "$src" "$src/a" "$src/a/b"; do
	head -c 500000 /dev/urandom >"$ALTROOT/$fs/data"
done
log_must tarn snapshot -r "$src@1"
echo two >"$ALTROOT/$src/a/two"
log_must tarn snapshot -r "$src@2"
tarn send -R "$src@2" | tarn receive -x recordsize -o checksum=blake3 "$TESTPOOL/dst" ||
	log_fail "send -R | receive"
log_must tarn list -H -o name -t snapshot -r "$TESTPOOL/dst"
for name in dst@1 dst@2 dst/a@1 dst/a@2 dst/a/b@1 dst/a/b@2; do stdout_has "$TESTPOOL/$name"; done
for fs in "" /a /a/b; do
	log_must diff -r "$ALTROOT/$src$fs" "$ALTROOT/$TESTPOOL/dst$fs"
done
assert_prop "$TESTPOOL/dst/a" compression zstd
assert_eq "$(get_prop recordsize "$TESTPOOL/dst/a/b")" 131072 "recordsize excluded with -x"
assert_prop "$TESTPOOL/dst/a/b" checksum blake3

log_must tarn create "$src/new"
echo new >"$ALTROOT/$src/new/file"
log_must tarn snapshot -r "$src@3"
tarn send -R -i @2 "$src@3" | tarn receive -F "$TESTPOOL/dst" || log_fail "send -R -i | receive"
log_must tarn list -H -o name -t snapshot -r "$TESTPOOL/dst"
for name in dst@3 dst/a@3 dst/a/b@3 dst/new@3; do stdout_has "$TESTPOOL/$name"; done
assert_eq "$(cat "$ALTROOT/$TESTPOOL/dst/new/file")" new "a file system made since the source"
verify_pool "$TESTPOOL"
log_pass
