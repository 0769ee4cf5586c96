#!/usr/bin/env bash
# Area setup: nothing shared; each test makes its own mirror (scrub and resilver change it).
. "$STF_SUITE/include/libtest.sh"
[ -e /dev/fuse ] || log_unsupported "/dev/fuse is not available"
destroy_all_pools
log_pass
