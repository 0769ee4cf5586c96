#!/usr/bin/env bash
# Area setup: the default pool, $TESTPOOL on one sparse vdev, which the area's tests share.
. "$STF_SUITE/include/libtest.sh"
[ -e /dev/fuse ] || log_unsupported "/dev/fuse is not available"
destroy_all_pools
default_setup
log_pass
