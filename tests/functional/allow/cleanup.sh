#!/usr/bin/env bash
# Area cleanup: destroy whatever pools the area's tests left and remove their vdev files.
. "$STF_SUITE/include/libtest.sh"
default_cleanup
assert_eq "$(pool_names)" "" "pools left after cleanup"
log_pass
