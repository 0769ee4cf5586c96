#!/usr/bin/env bash
# -m PATH mounts the root file system at ALTROOT/PATH; -m none mounts nothing; a relative -m
# is refused.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create -m sets where the root file system mounts"
trap destroy_all_pools EXIT

create_pool "$TESTPOOL" -m /elsewhere/data "$(vdev a)"
is_mounted "$ALTROOT/elsewhere/data" || log_fail "not mounted at $ALTROOT/elsewhere/data"
is_mounted "$ALTROOT/$TESTPOOL" && log_fail "also mounted at the default place"
[ -e "/elsewhere/data" ] && log_fail "-m ignored the altroot"

create_pool nomount -m none "$(vdev b)"
assert_eq "$(mounted_at nomount)" "" "mounts of a -m none pool"
assert_eq "$(pool_names | tr '\n' ' ')" "nomount $TESTPOOL " "pools"

log_mustnot_msg "absolute" tarn pool create -s 128M -R "$ALTROOT" -m relative/path other "$(vdev c)"
[ ! -e "$(vdev c)" ] || log_fail "a refused -m created $(vdev c)"

log_pass
