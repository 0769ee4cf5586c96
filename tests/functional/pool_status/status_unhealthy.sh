#!/usr/bin/env bash
# pool status -x: "all pools are healthy" while every pool is (quiet otherwise), "pool 'NAME' is
# healthy" for one named; a pool with a device offline is shown, whole, and the healthy one
# beside it is not; online again, all are healthy.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status -x shows only the pools with a problem"


create_pool sick mirror "$(vdev sick-a)" "$(vdev sick-b)"
log_must tarn pool status -x
assert_eq "$(last_stdout)" "all pools are healthy" "status -x of healthy pools"
log_must tarn pool status -x sick
assert_eq "$(last_stdout)" "pool 'sick' is healthy" "status -x of a healthy pool named"
log_must tarn pool offline sick "$(vdev sick-b)"
log_must tarn pool status -x
stdout_has "pool: sick"
stdout_has "OFFLINE"
stdout_has "status: "
stdout_lacks "pool: $TESTPOOL"
log_must tarn pool status -x -j
stdout_has '"sick"'
stdout_lacks "\"$TESTPOOL\""
log_must tarn pool online sick "$(vdev sick-b)"
log_must tarn pool wait -t resilver sick
log_must tarn pool status -x
assert_eq "$(last_stdout)" "all pools are healthy" "status -x after the device is back"
log_must tarn pool destroy sick
log_pass
