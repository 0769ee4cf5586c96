#!/usr/bin/env bash
# The same path twice (in a mirror, or as two vdevs, or through another spelling) is refused.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create refuses a vdev path named twice"
trap destroy_all_pools EXIT

log_mustnot_msg "named twice" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" mirror "$(vdev d)" "$(vdev d)"
log_mustnot_msg "twice" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" "$(vdev d)" "$(vdev d)"
log_mustnot_msg "twice" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" "$(vdev d)" "$VDEV_DIR/./d.img"
assert_eq "$(pool_names)" "" "pools after the refused creates"
log_pass
