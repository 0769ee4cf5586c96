#!/usr/bin/env bash
# readonly=on: reads work, writes fail with EROFS ("Read-only file system"); off writes again.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "readonly=on refuses writes with EROFS"
trap destroy_all_pools EXIT

default_setup
fs="$TESTPOOL/fs" dir="$ALTROOT/$TESTPOOL/fs"
log_must tarn create "$fs"
echo before >"$dir/file"
log_must tarn set readonly=on "$fs"
assert_eq "$(cat "$dir/file")" before "read on a read-only file system"
log_mustnot_msg "Read-only file system" sh -c "echo after > '$dir/file'"
log_mustnot_msg "Read-only file system" touch "$dir/new"
log_mustnot_msg "Read-only file system" mkdir "$dir/newdir"
log_mustnot_msg "Read-only file system" rm "$dir/file"
assert_eq "$(cat "$dir/file")" before "file after refused writes"
log_must tarn create -o readonly=on "$TESTPOOL/ro"
log_mustnot_msg "Read-only file system" touch "$ALTROOT/$TESTPOOL/ro/new"
log_must tarn set readonly=off "$fs"
log_must sh -c "echo after > '$dir/file'"
assert_eq "$(cat "$dir/file")" after "write after readonly=off"
log_pass
