#!/usr/bin/env bash
# rename renames a snapshot within its file system, and a file system anywhere in its pool (its
# children and snapshots follow, it is remounted at the new place); snapshots, their figures and
# their deadlists survive export and import; debug dataset shows the record and the deadlist.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "rename, persistence, debug dataset"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
mnt=$ALTROOT/$fs
log_must tarn create "$fs"
dd if=/dev/urandom of="$mnt/f" bs=128K count=8 status=none
log_must tarn snapshot "$fs@old"
dd if=/dev/urandom of="$mnt/f" bs=128K count=4 conv=notrunc status=none
log_must tarn snapshot "$fs@later"
log_must tarn rename "$fs@old" "$fs@new"
log_must tarn rename "$fs@later" newer
log_must tarn list -H -t snapshot -o name
assert_eq "$(last_stdout)" "$fs@new
$fs@newer" "names after rename"

# A file system with a child and a snapshot moves under another parent.
log_must tarn create "$fs/child"
echo inside >"$mnt/child/file"
log_must tarn create "$TESTPOOL/other"
log_mustnot_msg "below itself" tarn rename "$fs" "$fs/child/x"
log_mustnot_msg "exists" tarn rename "$fs" "$TESTPOOL/other"
log_mustnot_msg "does not exist" tarn rename "$fs" "$TESTPOOL/nosuch/fs"
log_must tarn rename "$fs" "$TESTPOOL/other/fs"
fs=$TESTPOOL/other/fs
mnt=$ALTROOT/$fs
assert_mounted "$fs" "$mnt"
assert_mounted "$fs/child" "$mnt/child"
assert_unmounted "$TESTPOOL/fs"
assert_eq "$(cat "$mnt/child/file")" inside "file after the move"
log_must tarn list -H -t snapshot -o name
assert_eq "$(last_stdout)" "$fs@new
$fs@newer" "snapshot names after the move"
log_must tarn pool sync "$TESTPOOL" # the mountpoint directories the remount made
before=$(tarn list -H -p -t all -o name,used,refer,written)

log_must tarn debug dataset "$fs@newer"
stdout_has "Deadlist:"
stdout_has "mintxg 0"
log_must tarn debug dataset "$fs"
stdout_has "prev_snap_txg"
stdout_has "used_breakdown[SNAP]"

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(tarn list -H -p -t all -o name,used,refer,written)" "$before" "figures after import"
verify_pool "$TESTPOOL"
log_pass
