#!/usr/bin/env bash
# .zfs at the root of every mount: found by lookup, listed by readdir only with snapdir=visible
# (default hidden, inherited, applied at once to mounted file systems); read-only.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert ".zfs is hidden unless snapdir=visible, and read-only"
trap destroy_all_pools EXIT

default_setup
root="$ALTROOT/$TESTPOOL" fs="$TESTPOOL/fs" dir="$ALTROOT/$TESTPOOL/fs"
log_must tarn create "$fs"
echo data >"$dir/file"

log_must tarn get -H -o value snapdir "$fs"
assert_eq "$(cat "$LAST_STDOUT")" hidden "default snapdir"
ls -a "$dir" | grep -qx '.zfs' && log_fail ".zfs listed with snapdir=hidden"
[ -d "$dir/.zfs/snapshot" ] || log_fail ".zfs/snapshot not found by lookup"
assert_eq "$(ls -A "$dir/.zfs")" snapshot ".zfs holds snapshot"
assert_eq "$(stat -c %a "$dir/.zfs")" 555 ".zfs mode"

# Inherited from the pool's root, and applied to the mounted child at once.
log_must tarn set snapdir=visible "$TESTPOOL"
ls -a "$dir" | grep -qx '.zfs' || log_fail ".zfs not listed after snapdir=visible on the parent"
ls -a "$root" | grep -qx '.zfs' || log_fail ".zfs not listed in the pool's root"
log_must tarn get -H -o value,source snapdir "$fs"
assert_eq "$(cat "$LAST_STDOUT")" "$(printf 'visible\tinherited from %s' "$TESTPOOL")" "inherited snapdir"
log_must tarn set snapdir=hidden "$fs"
ls -a "$dir" | grep -qx '.zfs' && log_fail ".zfs listed after snapdir=hidden"
log_must tarn inherit snapdir "$fs"
ls -a "$dir" | grep -qx '.zfs' || log_fail ".zfs not listed after inherit"
log_mustnot_msg "invalid value" tarn set snapdir=on "$fs"

# Nothing can be made or removed there, and .zfs itself stays.
log_mustnot_msg "Read-only file system" mkdir "$dir/.zfs/snapshot/new"
log_mustnot_msg "Read-only file system" touch "$dir/.zfs/file"
log_mustnot_msg "Read-only file system" rmdir "$dir/.zfs"
log_mustnot_msg "File exists" mkdir "$dir/.zfs"
assert_eq "$(cat "$dir/file")" data "the head is untouched"
log_pass
