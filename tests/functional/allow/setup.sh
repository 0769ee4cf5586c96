#!/usr/bin/env bash
# Area setup: FUSE is available and this run's daemon holds no pool; each test makes its own.
. "$STF_SUITE/include/libtest.sh"
[ -e /dev/fuse ] || log_unsupported "/dev/fuse is not available"
destroy_all_pools
assert_eq "$(pool_names)" "" "pools left before the area"
log_pass
