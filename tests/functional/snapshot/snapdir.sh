#!/usr/bin/env bash
# .zfs/snapshot/NAME through the CLI: old contents after the head's files are overwritten and
# deleted, EROFS there, inode numbers distinct from the head's and stable across a remount, a
# rollback visible at once (paths; a regular file held open goes stale: EIO), destroyed and renamed snapshots
# leaving the directory.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert ".zfs/snapshot shows snapshots read-only; rollback shows at once"
trap destroy_all_pools EXIT

default_setup
fs="$TESTPOOL/fs" dir="$ALTROOT/$TESTPOOL/fs"
log_must tarn create "$fs"
echo first >"$dir/a"
mkdir "$dir/d" && echo kept >"$dir/d/b"
log_must tarn snapshot "$fs@s1"

echo "second, longer" >"$dir/a"
rm "$dir/d/b"
echo new >"$dir/c"
assert_eq "$(ls "$dir/.zfs/snapshot")" s1 "snapshot listing"
assert_eq "$(cat "$dir/.zfs/snapshot/s1/a")" first "snapshot keeps the overwritten file"
assert_eq "$(cat "$dir/.zfs/snapshot/s1/d/b")" kept "snapshot keeps the deleted file"
[ -e "$dir/.zfs/snapshot/s1/c" ] && log_fail "a file created after the snapshot is in it"
log_mustnot_msg "Read-only file system" sh -c "echo x > '$dir/.zfs/snapshot/s1/a'"
log_mustnot_msg "Read-only file system" touch "$dir/.zfs/snapshot/s1/new"
log_mustnot_msg "Read-only file system" rm "$dir/.zfs/snapshot/s1/a"

# Inode numbers: distinct between head and snapshot, the same after a remount.
head_ino=$(stat -c %i "$dir/a") snap_ino=$(stat -c %i "$dir/.zfs/snapshot/s1/a")
[ "$head_ino" != "$snap_ino" ] || log_fail "head and snapshot share inode $head_ino"
log_must tarn unmount "$fs"
log_must tarn mount "$fs"
assert_eq "$(stat -c %i "$dir/.zfs/snapshot/s1/a")" "$snap_ino" "snapshot inode after remount"
assert_eq "$(stat -c %i "$dir/a")" "$head_ino" "head inode after remount"

# Rollback: paths show the snapshot at once; a regular file held open across it goes stale
# (EIO, never the old size or pages: the kernel's writeback cache owns a cached file's size).
exec 7<"$dir/a"
cat "$dir/c" >/dev/null
log_must tarn rollback "$fs@s1"
assert_eq "$(cat "$dir/a")" first "file after rollback"
assert_eq "$(cat "$dir/d/b")" kept "deleted file back after rollback"
[ -e "$dir/c" ] && log_fail "a file created after the snapshot survives the rollback"
cat <&7 >/dev/null 2>&1 && log_fail "a file held open across the rollback still reads"
exec 7<&-

# Rename and destroy leave the directory at once.
log_must tarn snapshot "$fs@s2"
log_must tarn rename "$fs@s2" "$fs@s3"
assert_eq "$(ls "$dir/.zfs/snapshot" | tr '\n' ' ')" "s1 s3 " "listing after rename"
[ -e "$dir/.zfs/snapshot/s2" ] && log_fail "renamed snapshot still under its old name"
log_must tarn destroy "$fs@s1"
assert_eq "$(ls "$dir/.zfs/snapshot")" s3 "listing after destroy"
[ -e "$dir/.zfs/snapshot/s1/a" ] && log_fail "destroyed snapshot still readable"
log_must tarn check "$TESTPOOL"
log_pass
