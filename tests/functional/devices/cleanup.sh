#!/usr/bin/env bash
# Area cleanup: destroy what the tests left and their vdev files.
. "$STF_SUITE/include/libtest.sh"
default_cleanup
assert_eq "$(pool_names)" "" "pools left after cleanup"
log_pass
