#!/usr/bin/env bash
# Area setup: no pool (each test makes the pools it needs, with the features it needs).
. "$STF_SUITE/include/libtest.sh"
[ -e /dev/fuse ] || log_unsupported "/dev/fuse is not available"
destroy_all_pools
log_pass
