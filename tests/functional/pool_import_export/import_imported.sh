#!/usr/bin/env bash
# Importing a pool that is imported fails clearly and changes nothing.
. "$STF_SUITE/include/libtest.sh"
log_assert "import of an imported pool fails with 'already imported'"
trap destroy_all_pools EXIT

default_setup
log_mustnot_msg "already imported" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
assert_eq "$(pool_names)" "$TESTPOOL" "pools"
is_mounted "$ALTROOT/$TESTPOOL" || log_fail "the refused import unmounted the pool"
log_mustnot_msg "no pool named" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" nosuchpool
verify_pool "$TESTPOOL"
log_pass
