#!/usr/bin/env bash
# Holds misused: a file system or bookmark instead of a snapshot, a snapshot that does not
# exist, empty and over-long tags, missing arguments, snapshots of two pools in one request,
# destroy -d of a file system, and a pool created without feature user_holds; each is refused
# with a message, no panic, and the pool is intact.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "hold, release and holds refuse bad requests cleanly"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
log_must tarn create "$fs"
log_must tarn snapshot "$fs@s"
log_must tarn bookmark "$fs@s" "$fs#b"
log_mustnot_msg "FS@SNAP" tarn hold keep "$fs"
log_mustnot_msg "FS@SNAP" tarn hold keep "$fs#b"
log_mustnot_msg "FS@SNAP" tarn holds "$fs"
log_mustnot_msg "FS@SNAP" tarn release keep "$TESTPOOL"
log_mustnot_msg "does not exist" tarn hold keep "$fs@nope"
log_mustnot_msg "does not exist" tarn holds "$fs@nope"
log_mustnot_msg "empty" tarn hold "" "$fs@s"
log_mustnot_msg "255 bytes" tarn hold "$(printf 'x%.0s' $(seq 256))" "$fs@s"
log_mustnot tarn hold keep
log_mustnot tarn hold
log_mustnot_msg "invalid field" tarn holds -o name,bogus "$fs@s"
log_mustnot_msg "no such tag" tarn release keep "$fs@s"
log_mustnot_msg "applies to snapshots" tarn destroy -d "$fs"
log_must tarn pool create -s "$VDEV_SIZE" -R "$ALTROOT" -o feature@user_holds=disabled other "$(vdev other)"
log_must tarn snapshot other@s
log_mustnot_msg "one pool" tarn hold keep "$fs@s" other@s
log_mustnot_msg "feature@user_holds" tarn hold keep other@s
log_must tarn holds -H other@s
assert_eq "$(last_stdout)" "" "no holds on a pool without the feature"
log_must tarn holds -H "$fs@s"
assert_eq "$(last_stdout)" "" "refused holds held nothing"
verify_pool "$TESTPOOL"
verify_pool other
log_pass
