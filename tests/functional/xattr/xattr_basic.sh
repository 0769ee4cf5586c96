#!/usr/bin/env bash
# Extended attributes through the CLI's mounts: setfattr/getfattr round trips of small values
# (packed with the znode), large ones (the hidden xattr directory, up to 64 KiB) and
# directories'; the xattr property (sa by default, dir, inherited); xattrs survive export and
# import, are read-only in .zfs/snapshot, and go with their file (check finds no leak).
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
require_python
log_assert "xattrs round trip, persist, show read-only in snapshots, free with their file"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs dir=$ALTROOT/$TESTPOOL/fs
log_must tarn create "$fs"
assert_prop "$fs" xattr sa
echo data >"$dir/f"
mkdir "$dir/d"
log_must setfattr -n user.small -v hello "$dir/f"
log_must setfattr -n trusted.t -v secret "$dir/f"
log_must setfattr -n user.on_dir -v yes "$dir/d"
head -c 65536 /dev/urandom >"$SCRATCH/large"
# (setfattr would take it as a 128 KiB hex argument, which the log would repeat.)
log_must python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.large", open(sys.argv[2], "rb").read())' "$dir/f" "$SCRATCH/large"
large_digest=$(md5sum <"$SCRATCH/large" | cut -d' ' -f1)
get_large() { getfattr --only-values -n user.large "$1" | md5sum | cut -d' ' -f1; }
assert_eq "$(getfattr --only-values -n user.small "$dir/f")" hello "small value"
assert_eq "$(get_large "$dir/f")" "$large_digest" "64 KiB value"
assert_eq "$(getfattr --absolute-names -m - -d "$dir/f" | grep -c '=')" 3 "names listed"
assert_eq "$(getfattr --only-values -n user.on_dir "$dir/d")" yes "directory xattr"

# xattr=dir, set on the parent, reaches the child for new xattrs; old ones stay readable.
log_must tarn set xattr=dir "$TESTPOOL"
assert_prop "$fs" xattr dir
log_must setfattr -n user.in_dir -v there "$dir/f"
assert_eq "$(getfattr --only-values -n user.in_dir "$dir/f")" there "xattr=dir value"
assert_eq "$(getfattr --only-values -n user.small "$dir/f")" hello "SA value after xattr=dir"
log_must tarn inherit xattr "$TESTPOOL"

# Snapshots: old values, read-only.
log_must tarn snapshot "$fs@s"
log_must setfattr -n user.small -v changed "$dir/f"
log_must setfattr -x user.large "$dir/f"
snap=$dir/.zfs/snapshot/s
assert_eq "$(getfattr --only-values -n user.small "$snap/f")" hello "snapshot value"
assert_eq "$(get_large "$snap/f")" "$large_digest" "snapshot large value"
log_mustnot_msg "Read-only file system" setfattr -n user.x -v y "$snap/f"
log_mustnot_msg "Read-only file system" setfattr -x user.small "$snap/f"

# Export and import.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(getfattr --only-values -n user.small "$dir/f")" changed "value after import"
assert_eq "$(getfattr --only-values -n user.in_dir "$dir/f")" there "xattr=dir value after import"
getfattr -n user.large "$dir/f" >/dev/null 2>&1 && log_fail "removed xattr back after import"

# Removing the files frees their xattrs: check counts every block against the space maps.
log_must tarn destroy "$fs@s"
rm -r "$dir/f" "$dir/d"
log_must tarn pool sync "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
