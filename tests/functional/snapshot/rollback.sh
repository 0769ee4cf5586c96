#!/usr/bin/env bash
# rollback FS@SNAP brings the mounted file system back to the snapshot at once (new, changed and
# deleted files); a snapshot that is not the newest needs -r, which destroys the newer ones.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "rollback: the mount shows the snapshot, -r destroys newer snapshots"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
mnt=$ALTROOT/$fs
log_must tarn create "$fs"
dd if=/dev/urandom of="$mnt/data" bs=64K count=20 status=none
mkdir "$mnt/dir"
echo one >"$mnt/dir/note"
want=$(digest "$mnt/data" "$mnt/dir/note")
log_must tarn snapshot "$fs@one"
dd if=/dev/urandom of="$mnt/data" bs=64K count=5 conv=notrunc status=none
echo two >"$mnt/dir/note"
echo new >"$mnt/added"
log_must tarn snapshot "$fs@two"
rm -r "$mnt/dir"

log_must tarn rollback "$fs@two"
assert_eq "$(cat "$mnt/dir/note")" two "note after rollback to two"
assert_eq "$(cat "$mnt/added")" new "added after rollback to two"

log_mustnot_msg "-r" tarn rollback "$fs@one"
log_must tarn list -H -t snapshot -o name
stdout_has "$fs@two"
log_must tarn rollback -r "$fs@one"
stdout_has "destroyed $fs@two"
assert_eq "$(digest "$mnt/data" "$mnt/dir/note")" "$want" "contents after rollback to one"
[ ! -e "$mnt/added" ] || log_fail "a file created after the snapshot survived the rollback"
log_must tarn list -H -t snapshot -o name
assert_eq "$(last_stdout)" "$fs@one" "snapshots after rollback -r"
# The file system keeps working after a rollback.
echo after >"$mnt/after"
log_must tarn pool sync "$TESTPOOL"
log_must tarn pool wait -t free "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
