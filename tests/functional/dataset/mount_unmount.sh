#!/usr/bin/env bash
# unmount by name and by mountpoint, mount by name, mount -a and unmount -a; tarn mount lists
# exactly what /proc/mounts shows.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "tarn mount / unmount"
trap destroy_all_pools EXIT

default_setup
log_must tarn create "$TESTPOOL/a"
log_must tarn create "$TESTPOOL/b"
echo a >"$ALTROOT/$TESTPOOL/a/file"
log_must tarn unmount "$TESTPOOL/a"
assert_unmounted "$TESTPOOL/a"
[ ! -e "$ALTROOT/$TESTPOOL/a/file" ] || log_fail "the file is still visible after unmount"
log_mustnot tarn unmount "$TESTPOOL/a"
log_must tarn unmount "$ALTROOT/$TESTPOOL/b"
assert_unmounted "$TESTPOOL/b"
log_must tarn mount "$TESTPOOL/a"
assert_mounted "$TESTPOOL/a" "$ALTROOT/$TESTPOOL/a"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/a/file")" a "file after remount"
log_mustnot tarn mount "$TESTPOOL/a"
log_must tarn mount -a
assert_mounted "$TESTPOOL/b" "$ALTROOT/$TESTPOOL/b"
log_must tarn mount
for fs in "$TESTPOOL" "$TESTPOOL/a" "$TESTPOOL/b"; do
	grep -qE "^$fs[[:space:]]+$(mounted_at "$fs")[[:space:]]+(uring|dev)\$" "$LAST_STDOUT" || log_fail "tarn mount does not list $fs"
done
(cd "$ALTROOT/$TESTPOOL/a" && exec sleep 60) &
busy=$!
wait_for 10 "[ \"\$(readlink /proc/$busy/cwd)\" = \"$ALTROOT/$TESTPOOL/a\" ]" || log_fail "the busy process did not start"
log_mustnot_msg "busy" tarn unmount "$TESTPOOL/a"
kill "$busy"
wait "$busy" 2>/dev/null
log_must tarn unmount -a
for fs in "$TESTPOOL" "$TESTPOOL/a" "$TESTPOOL/b"; do assert_unmounted "$fs"; done
log_must tarn mount -a
for fs in "$TESTPOOL" "$TESTPOOL/a" "$TESTPOOL/b"; do [ -n "$(mounted_at "$fs")" ] || log_fail "$fs not mounted by mount -a"; done
log_pass
