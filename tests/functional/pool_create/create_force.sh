#!/usr/bin/env bash
# Vdevs of another pool are refused without -f (nothing changes); -f overwrites them.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create over another pool's vdevs needs -f"
trap destroy_all_pools EXIT

create_pool old "$(vdev a)"
log_must tarn pool export old
before=$(digest "$(vdev a)")
log_mustnot_msg "-f" tarn pool create -R "$ALTROOT" "$TESTPOOL" "$(vdev a)"
stderr_has 'part of pool "old"'
assert_eq "$(digest "$(vdev a)")" "$before" "vdev after the refused create"
assert_eq "$(pool_names)" "" "pools after the refused create"

# Imported pools' vdevs too.
create_pool live "$(vdev b)"
log_mustnot_msg "live" tarn pool create -R "$ALTROOT" "$TESTPOOL" "$(vdev b)"
assert_eq "$(pool_names)" "live" "pools after the refused create"

log_must tarn pool create -f -R "$ALTROOT" "$TESTPOOL" "$(vdev a)"
log_must tarn pool import -d "$VDEV_DIR"
stdout_lacks "pool: old"
log_mustnot tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" old
verify_pool "$TESTPOOL"
log_pass
