#!/usr/bin/env bash
# A two-way mirror: one mirror-0 with both children ONLINE, the size of one side.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create mirror A B gives one mirror vdev with two children"
trap destroy_all_pools EXIT

create_pool single "$(vdev single)"
log_must tarn pool list -H -p -o size single
size_one=$(last_stdout)
create_pool "$TESTPOOL" mirror "$(vdev a)" "$(vdev b)"
log_must tarn pool status "$TESTPOOL"
stdout_has "mirror-0"
[ "$(grep -c -F -e "$(vdev a)" -e "$(vdev b)" "$LAST_STDOUT")" -eq 2 ] || log_fail "both sides listed once"
[ "$(grep -c ONLINE "$LAST_STDOUT")" -ge 4 ] || log_fail "pool, mirror and both sides ONLINE"
log_must tarn pool list -H -p -o size "$TESTPOOL"
assert_eq "$(last_stdout)" "$size_one" "mirror size"
verify_pool "$TESTPOOL"
log_pass
