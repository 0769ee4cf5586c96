#!/usr/bin/env bash
# Without -s, a missing vdev path is an error naming the path and suggesting -s.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create without -s refuses missing paths and creates nothing"
trap destroy_all_pools EXIT

truncate -s "$VDEV_SIZE" "$(vdev present)"
before=$(digest "$(vdev present)")
log_mustnot_msg "does not exist" tarn pool create -R "$ALTROOT" "$TESTPOOL" mirror "$(vdev present)" "$(vdev missing)"
stderr_has "$(vdev missing)"
stderr_has "-s"
[ ! -e "$(vdev missing)" ] || log_fail "the missing path was created"
assert_eq "$(digest "$(vdev present)")" "$before" "the existing vdev after the refused create"
assert_eq "$(pool_names)" "" "pools after the refused create"
log_pass
