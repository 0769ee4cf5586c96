#!/usr/bin/env bash
# -R ALTROOT: the root file system mounts at ALTROOT/POOL and nowhere else, on create and on
# import, and a different altroot on import moves it.
. "$STF_SUITE/include/libtest.sh"
log_assert "the altroot is honoured by create and import"
trap destroy_all_pools EXIT

default_setup
mounts() { awk -v pool="tarn:$TESTPOOL" '$1 == pool { print $2 }' /proc/mounts; }
assert_eq "$(mounts)" "$ALTROOT/$TESTPOOL" "mounts after create"
[ -e "/$TESTPOOL" ] && log_fail "/$TESTPOOL exists"
log_must tarn pool export "$TESTPOOL"
assert_eq "$(mounts)" "" "mounts after export"
log_must tarn pool import -d "$VDEV_DIR" -R "$ALTROOT/other" "$TESTPOOL"
assert_eq "$(mounts)" "$ALTROOT/other/$TESTPOOL" "mounts after import under another altroot"
log_pass
