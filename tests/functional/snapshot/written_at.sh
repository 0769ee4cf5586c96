#!/usr/bin/env bash
# written@SNAP: what a file system references that SNAP did not (new and overwritten blocks
# since, whatever was removed since), from any of its snapshots; equal to `written` for the
# newest; logicalused and logicalreferenced are the uncompressed sizes (at least the physical
# ones for compressible data).
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "written@SNAP, logicalused, logicalreferenced"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
mnt=$ALTROOT/$fs
log_must tarn create -o compression=off "$fs"
head -c 3M /dev/urandom >"$mnt/a"
log_must tarn snapshot "$fs@one"
head -c 1M /dev/urandom >"$mnt/b"
log_must tarn snapshot "$fs@two"
head -c 2M /dev/urandom >"$mnt/c"
rm "$mnt/a"
log_must tarn pool sync "$TESTPOOL"
w1=$(get_prop written@one "$fs")
w2=$(get_prop written@two "$fs")
assert_eq "$w2" "$(get_prop written "$fs")" "written@ the newest snapshot is written"
[ "$w2" -ge $((2 << 20)) ] && [ "$w2" -lt $((5 << 19)) ] || log_fail "written@two: $w2 (2 MiB new)"
[ "$w1" -ge $((w2 + (1 << 20))) ] && [ "$w1" -lt $((w2 + (5 << 18))) ] || log_fail "written@one: $w1 (written@two $w2 plus 1 MiB)"
log_must tarn get -H -p -o value written@two "$TESTPOOL/fs@one"
assert_eq "$(last_stdout)" "-" "written@ of a snapshot is not computed"
log_mustnot_msg "no such snapshot" tarn get written@nope "$fs"

log_must tarn create -o compression=lz4 "$TESTPOOL/z"
head -c 4M /dev/zero | tr '\0' 'a' >"$ALTROOT/$TESTPOOL/z/text"
log_must tarn pool sync "$TESTPOOL"
[ "$(get_prop logicalreferenced "$TESTPOOL/z")" -ge $((4 << 20)) ] || log_fail "logicalreferenced counts the uncompressed bytes"
[ "$(get_prop referenced "$TESTPOOL/z")" -lt $((1 << 20)) ] || log_fail "referenced counts the compressed bytes"
[ "$(get_prop logicalused "$TESTPOOL/z")" -ge "$(get_prop logicalreferenced "$TESTPOOL/z")" ] || log_fail "logicalused at least logicalreferenced"
verify_pool "$TESTPOOL"
log_pass
