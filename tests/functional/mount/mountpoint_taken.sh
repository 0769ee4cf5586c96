#!/usr/bin/env bash
# A non-empty directory at the mountpoint: create and import refuse it clearly and leave no pool
# imported; once it is emptied, import works.
. "$STF_SUITE/include/libtest.sh"
log_assert "a taken mountpoint is refused by create and import"
trap destroy_all_pools EXIT

mkdir -p "$ALTROOT/$TESTPOOL"
echo squatter >"$ALTROOT/$TESTPOOL/file"
log_mustnot_msg "not empty" tarn pool create -s "$VDEV_SIZE" -R "$ALTROOT" "$TESTPOOL" "$(vdev "$TESTPOOL")"
assert_eq "$(pool_names)" "" "pools after the refused create"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/file")" squatter "the squatter's file"
rm "$ALTROOT/$TESTPOOL/file"

default_setup
log_must tarn pool export "$TESTPOOL"
echo squatter >"$ALTROOT/$TESTPOOL/file"
log_mustnot_msg "not empty" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
stderr_has "$ALTROOT/$TESTPOOL"
assert_eq "$(pool_names)" "" "pools after the refused import"
rm "$ALTROOT/$TESTPOOL/file"
import_pool "$TESTPOOL"
is_mounted "$ALTROOT/$TESTPOOL" || log_fail "not mounted after the import"
log_pass
