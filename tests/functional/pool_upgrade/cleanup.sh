#!/usr/bin/env bash
# Area cleanup: destroy any pool a test left and its vdev files.
. "$STF_SUITE/include/libtest.sh"
default_cleanup
assert_eq "$(pool_names)" "" "pools left after cleanup"
log_pass
