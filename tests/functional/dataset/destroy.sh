#!/usr/bin/env bash
# destroy FS unmounts and removes it; a file system with children needs -r; the root file
# system is never destroyed this way (pool destroy is the verb for that).
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "destroy: children need -r, the root is refused"
trap destroy_all_pools EXIT

default_setup
log_must tarn create -p "$TESTPOOL/a/b"
log_must tarn create "$TESTPOOL/leaf"
echo kept >"$ALTROOT/$TESTPOOL/a/b/file"
log_must tarn destroy "$TESTPOOL/leaf"
assert_unmounted "$TESTPOOL/leaf"
log_mustnot tarn list "$TESTPOOL/leaf"

log_mustnot_msg "-r" tarn destroy "$TESTPOOL/a"
assert_mounted "$TESTPOOL/a/b" "$ALTROOT/$TESTPOOL/a/b"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/a/b/file")" kept "file after the refused destroy"

log_mustnot_msg "pool destroy" tarn destroy "$TESTPOOL"
log_mustnot_msg "pool destroy" tarn destroy -r "$TESTPOOL"
assert_eq "$(pool_names)" "$TESTPOOL" "pools after the refused root destroy"
log_mustnot_msg "nosuch" tarn destroy "$TESTPOOL/nosuch"

log_must tarn destroy -r "$TESTPOOL/a"
assert_unmounted "$TESTPOOL/a"
assert_unmounted "$TESTPOOL/a/b"
log_must tarn list -H -r -o name "$TESTPOOL"
assert_eq "$(last_stdout)" "$TESTPOOL" "datasets after destroy -r"
log_must tarn pool sync "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
