#!/usr/bin/env bash
# A vdev file below the minimum size is refused with its size and the minimum; it is unchanged.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create refuses a vdev file that is too small"
trap destroy_all_pools EXIT

head -c 1M /dev/urandom >"$(vdev small)"
before=$(digest "$(vdev small)")
log_mustnot_msg "too small" tarn pool create -R "$ALTROOT" "$TESTPOOL" "$(vdev small)"
stderr_has "$(vdev small)"
assert_eq "$(digest "$(vdev small)")" "$before" "the small file after the refused create"
assert_eq "$(pool_names)" "" "pools after the refused create"
log_pass
