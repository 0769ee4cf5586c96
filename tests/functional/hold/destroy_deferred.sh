#!/usr/bin/env bash
# destroy -d: a snapshot with neither holds nor clones goes at once; a held or cloned one is
# marked (defer_destroy=on), survives export and import, and goes with its last hold (release)
# or its last clone (destroy of the clone), whichever is last; -n says what would happen.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "deferred destroy waits for the last hold and clone"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
log_must tarn create "$fs"
dd if=/dev/urandom of="$ALTROOT/$fs/file" bs=64k count=4 status=none
for snapshot in free held cloned both; do
	log_must tarn snapshot "$fs@$snapshot"
done
log_must tarn hold keep "$fs@held" "$fs@both"
log_must tarn clone "$fs@cloned" "$TESTPOOL/c1"
log_must tarn clone "$fs@both" "$TESTPOOL/c2"
log_mustnot_msg "has dependent clones" tarn destroy "$fs@cloned"

log_must tarn destroy -n -d "$fs@free%both"
stdout_has "would destroy $fs@free"
stdout_has "would defer the destroy of $fs@held"
assert_eq "$(get_prop defer_destroy "$fs@held")" off "a dry run marks nothing"
log_must tarn destroy -d "$fs@free%both"
stdout_has "destroyed $fs@free"
stdout_has "deferred the destroy of $fs@cloned"
log_mustnot tarn list "$fs@free"
for snapshot in held cloned both; do
	assert_eq "$(get_prop defer_destroy "$fs@$snapshot")" on "defer_destroy of $snapshot"
done

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(get_prop defer_destroy "$fs@both")" on "defer_destroy after import"

log_must tarn release keep "$fs@held"
stdout_has "destroyed $fs@held"
log_must tarn destroy "$TESTPOOL/c1"
stdout_has "destroyed $fs@cloned"
log_must tarn destroy "$TESTPOOL/c2"
stdout_lacks "$fs@both"
log_must tarn list -H -t snapshot -o name "$fs"
assert_eq "$(last_stdout)" "$fs@both" "the held snapshot stays after its clone goes"
log_must tarn release keep "$fs@both"
stdout_has "destroyed $fs@both"
log_must tarn list -H -t snapshot -o name "$fs"
assert_eq "$(last_stdout)" "" "every snapshot gone"
assert_eq "$(tarn pool get -H -o value feature@user_holds "$TESTPOOL")" enabled "feature at the end"
log_must tarn pool wait -t free "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
