#!/usr/bin/env bash
# promote CLONE: the origin's snapshots up to the origin move to the clone (renamed under it),
# the old origin becomes a clone of the promoted one's snapshot, data and space stay, and the
# old origin can then be destroyed while the promoted one keeps everything; misuse (a file
# system that is not a clone, a snapshot, a missing name, a snapshot name conflict) is refused
# and changes nothing.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "promote: snapshots and space move, the old origin becomes a clone"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
mnt=$ALTROOT/$fs
log_must tarn create -o compression=off "$fs"
dd if=/dev/urandom of="$mnt/data" bs=1M count=2 status=none
want1=$(digest "$mnt/data")
log_must tarn snapshot "$fs@s1"
dd if=/dev/urandom of="$mnt/data" bs=1M count=1 conv=notrunc status=none
want2=$(digest "$mnt/data")
log_must tarn snapshot "$fs@s2"
echo later >"$mnt/later"
log_must tarn snapshot "$fs@s3"
log_must tarn clone "$fs@s2" "$TESTPOOL/work"
work=$ALTROOT/$TESTPOOL/work
dd if=/dev/urandom of="$work/data" bs=512K count=1 conv=notrunc status=none
want_work=$(digest "$work/data")
log_must tarn snapshot "$TESTPOOL/work@w1"
log_must tarn pool sync "$TESTPOOL"
total=$(get_prop used "$TESTPOOL")

# Misuse: nothing changes.
before=$(tarn list -H -p -t all -o name,used,refer)
log_mustnot_msg "not a cloned file system" tarn promote "$fs"
log_mustnot_msg "snapshot" tarn promote "$TESTPOOL/work@w1"
log_mustnot_msg "does not exist" tarn promote "$TESTPOOL/nosuch"
log_must tarn snapshot "$TESTPOOL/work@s1"
log_mustnot_msg "conflict" tarn promote "$TESTPOOL/work"
log_must tarn destroy "$TESTPOOL/work@s1"
log_must tarn pool sync "$TESTPOOL"
assert_eq "$(tarn list -H -p -t all -o name,used,refer)" "$before" "datasets after refused commands"

log_must tarn promote "$TESTPOOL/work"
stdout_has "moved $TESTPOOL/work@s1"
stdout_has "moved $TESTPOOL/work@s2"
log_must tarn list -H -t snapshot -o name
assert_eq "$(last_stdout)" "$fs@s3
$TESTPOOL/work@s1
$TESTPOOL/work@s2
$TESTPOOL/work@w1" "snapshots after promote"
assert_prop "$fs" origin "$TESTPOOL/work@s2"
assert_prop "$TESTPOOL/work" origin "-"
assert_prop "$TESTPOOL/work@s2" clones "$fs"
log_must tarn pool sync "$TESTPOOL"
assert_eq "$(get_prop used "$TESTPOOL")" "$total" "pool used after promote"
assert_eq "$(digest "$work/.zfs/snapshot/s1/data")" "$want1" "moved s1"
assert_eq "$(digest "$work/.zfs/snapshot/s2/data")" "$want2" "moved s2"
assert_eq "$(digest "$work/data")" "$want_work" "promoted head"
assert_eq "$(digest "$mnt/data")" "$want2" "old origin head"
[ -e "$mnt/.zfs/snapshot/s3/later" ] || log_fail "the old origin's s3 lost a file"
verify_pool "$TESTPOOL"

# A second promote of the same clone is refused (it is no clone any more).
log_mustnot_msg "not a cloned file system" tarn promote "$TESTPOOL/work"

# The old origin (now a clone) goes; the promoted file system keeps everything.
log_must tarn destroy -r "$fs"
log_must tarn pool wait -t free "$TESTPOOL"
assert_eq "$(digest "$work/.zfs/snapshot/s1/data")" "$want1" "s1 after the old origin was destroyed"
assert_eq "$(digest "$work/data")" "$want_work" "promoted head after the old origin was destroyed"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_prop "$TESTPOOL/work" origin "-"
verify_pool "$TESTPOOL"
log_pass
