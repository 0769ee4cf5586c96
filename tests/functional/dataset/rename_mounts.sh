#!/usr/bin/env bash
# A rename that fails leaves every mount as it was; one that succeeds moves the renamed tree
# (parents before children, explicitly mounted canmount=noauto file systems included) and
# touches nothing else; setting canmount to on or noauto leaves a mounted file system mounted.
#
# Guards against a rename that unmounted the tree before validating the new name and then
# mounted back only what mounts automatically: a failed rename lost a canmount=noauto child's
# mount and a busy file system's children stayed unmounted; and against `set canmount=noauto`
# unmounting and remounting (failing as busy while a file was open).
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "rename validates before it unmounts; canmount on/noauto keep a mount"
trap 'exec 3>&- 4>&-; destroy_all_pools' EXIT

# mount_id PATH: the mount's id in mountinfo ("" if nothing is mounted at PATH); the same id
# before and after means the file system was never unmounted in between.
mount_id() { awk -v p="$1" '$5 == p { print $1 }' /proc/self/mountinfo; }

default_setup
fs="$TESTPOOL/fs"
log_must tarn create "$fs"
log_must tarn create -o canmount=noauto "$fs/noauto"
log_must tarn mount "$fs/noauto"
log_must tarn create "$fs/noauto/inner"
log_must tarn create "$TESTPOOL/other"
root="$ALTROOT/$TESTPOOL"
assert_mounted "$fs" "$root/fs"
assert_mounted "$fs/noauto" "$root/fs/noauto"
assert_mounted "$fs/noauto/inner" "$root/fs/noauto/inner"
fs_id=$(mount_id "$root/fs")
noauto_id=$(mount_id "$root/fs/noauto")
inner_id=$(mount_id "$root/fs/noauto/inner")
other_id=$(mount_id "$root/other")

# Cached writes that have returned and not been synced yet.
head -c 1048576 /dev/urandom >"$SCRATCH/data"
cp "$SCRATCH/data" "$root/fs/noauto/inner/file"
want=$(digest "$SCRATCH/data")

# Each of these renames is refused, and refused before anything is unmounted.
log_mustnot tarn rename "$fs" "$TESTPOOL/missing/fs"
log_mustnot tarn rename "$fs" "$TESTPOOL/other"
log_mustnot tarn rename "$fs" "$fs/noauto/below"
log_mustnot tarn rename "$fs" "elsewhere/fs"
log_mustnot tarn rename "$TESTPOOL" "$TESTPOOL/root"
assert_eq "$(mount_id "$root/fs")" "$fs_id" "mount of $fs after the failed renames"
assert_eq "$(mount_id "$root/fs/noauto")" "$noauto_id" "mount of $fs/noauto after the failed renames"
assert_eq "$(mount_id "$root/fs/noauto/inner")" "$inner_id" "mount of $fs/noauto/inner after the failed renames"

# A valid rename that cannot unmount (a directory is open in the noauto file system) is
# refused, and what it had unmounted already (the child, unmounted first) comes back.
exec 3<"$root/fs/noauto"
log_mustnot tarn rename "$fs/noauto" "$TESTPOOL/moved"
stderr_has "busy"
assert_mounted "$fs/noauto" "$root/fs/noauto"
assert_mounted "$fs/noauto/inner" "$root/fs/noauto/inner"
exec 3<&-

# A rename that succeeds moves the tree, the noauto file system it was mounted as well, and
# parents mount before their children (mountinfo lists mounts in the order they were made).
log_must tarn rename "$fs" "$TESTPOOL/other/fs"
assert_unmounted "$fs"
assert_mounted "$TESTPOOL/other/fs" "$root/other/fs"
assert_mounted "$TESTPOOL/other/fs/noauto" "$root/other/fs/noauto"
assert_mounted "$TESTPOOL/other/fs/noauto/inner" "$root/other/fs/noauto/inner"
order=$(awk -v r="$root/other/fs" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo | tr '\n' ' ')
assert_eq "$order" "$root/other/fs $root/other/fs/noauto $root/other/fs/noauto/inner " "mount order"
assert_eq "$(digest "$root/other/fs/noauto/inner/file")" "$want" "the file written before the renames"
[ "$(ls "$root/fs" 2>/dev/null)" = "" ] || log_fail "the old mountpoint is not empty"
assert_eq "$(mount_id "$root/other")" "$other_id" "mount of the sibling $TESTPOOL/other"

# canmount on and noauto leave a mounted (and busy) file system mounted; off unmounts it.
moved="$TESTPOOL/other/fs"
id=$(mount_id "$root/other/fs")
exec 4<"$root/other/fs/noauto/inner/file"
log_must tarn set canmount=noauto "$moved"
assert_eq "$(mount_id "$root/other/fs")" "$id" "mount of $moved after canmount=noauto"
log_must tarn set canmount=on "$moved"
assert_eq "$(mount_id "$root/other/fs")" "$id" "mount of $moved after canmount=on"
exec 4<&-
log_must tarn set canmount=off "$moved/noauto/inner"
assert_unmounted "$moved/noauto/inner"
assert_mounted "$moved/noauto" "$root/other/fs/noauto"
# canmount=on does not mount what is not mounted (zfs mounts it at the next mount -a).
log_must tarn set canmount=on "$moved/noauto/inner"
assert_unmounted "$moved/noauto/inner"
log_must tarn mount -a
assert_mounted "$moved/noauto/inner" "$root/other/fs/noauto/inner"
assert_eq "$(digest "$root/other/fs/noauto/inner/file")" "$want" "the file after the canmount changes"

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_mounted "$moved" "$root/other/fs"
assert_unmounted "$moved/noauto"
verify_pool "$TESTPOOL"
log_pass
