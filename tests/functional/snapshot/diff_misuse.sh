#!/usr/bin/env bash
# Misuse of diff gets a clear error and changes nothing: a first argument that is no snapshot,
# a bookmark, snapshots of different file systems, the later snapshot first, names that do not
# exist.
. "$STF_SUITE/include/libtest.sh"
require_snapshot_verbs
log_assert "diff: misuse is refused, nothing changes"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
other=$TESTPOOL/other
log_must tarn create "$fs"
log_must tarn create "$other"
echo one >"$ALTROOT/$fs/file"
log_must tarn snapshot "$fs@a"
echo two >"$ALTROOT/$fs/file"
log_must tarn snapshot "$fs@b" "$other@o"
log_must tarn bookmark "$fs@a" "$fs#mark"
before=$(tarn list -H -p -t all -o name)

log_mustnot_msg "must be a snapshot" tarn diff "$fs"
log_mustnot_msg "must be a snapshot" tarn diff "$fs" "$fs@b"
log_mustnot_msg "not an earlier snapshot" tarn diff "$fs@b" "$fs@a"
log_mustnot_msg "not an earlier snapshot" tarn diff "$fs@a" "$fs@a"
log_mustnot_msg "not an earlier snapshot" tarn diff "$fs@a" "$other@o"
log_mustnot_msg "not an earlier snapshot" tarn diff "$other@o" "$fs"
log_mustnot_msg "bookmark" tarn diff "$fs#mark" "$fs@b"
log_mustnot_msg "bookmark" tarn diff "$fs@a" "$fs#mark"
log_mustnot_msg "nosuch" tarn diff "$fs@nosuch" "$fs@b"
log_mustnot_msg "nosuch" tarn diff "$fs@a" "$fs@nosuch"
log_mustnot_msg "nosuch" tarn diff "$fs@a" "$TESTPOOL/nosuch"
log_mustnot_msg "not imported" tarn diff "nosuchpool/fs@a"
log_mustnot_msg "name the file system" tarn diff "@a"
log_mustnot tarn diff
log_must tarn set mountpoint=none "$other"
log_mustnot_msg "mountpoint=none" tarn diff "$other@o"
log_must tarn inherit mountpoint "$other"
log_mustnot tarn diff -x "$fs@a"
assert_eq "$(tarn list -H -p -t all -o name)" "$before" "datasets after refused diffs"
log_must tarn diff "$fs@a" "$fs@b"
assert_eq "$(last_stdout)" "M	$ALTROOT/$fs/file" "the diff after the refusals"
verify_pool "$TESTPOOL"
log_pass
