#!/usr/bin/env bash
# -R ALTROOT: the root file system mounts at ALTROOT/POOL and nowhere else, on create and on
# import, and a different altroot on import moves it.
. "$STF_SUITE/include/libtest.sh"
log_assert "the altroot is honoured by create and import"
trap destroy_all_pools EXIT

default_setup
assert_eq "$(mounted_at "$TESTPOOL")" "$ALTROOT/$TESTPOOL" "mounts after create"
[ -e "/$TESTPOOL" ] && log_fail "/$TESTPOOL exists"
log_must tarn pool export "$TESTPOOL"
assert_eq "$(mounted_at "$TESTPOOL")" "" "mounts after export"
log_must tarn pool import -d "$VDEV_DIR" -R "$ALTROOT/second-altroot" "$TESTPOOL"
assert_eq "$(mounted_at "$TESTPOOL")" "$ALTROOT/second-altroot/$TESTPOOL" "mounts after import under another altroot"
log_pass
