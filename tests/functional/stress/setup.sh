#!/usr/bin/env bash
# Area setup: FUSE is available; the stress tool runs daemons of its own.
. "$STF_SUITE/include/libtest.sh"
[ -e /dev/fuse ] || log_unsupported "/dev/fuse is not available"
log_pass
