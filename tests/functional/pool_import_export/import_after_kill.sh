#!/usr/bin/env bash
# After kill -9 of the daemon, the pool imports without -f at its last synced txg, with the data
# synced before the kill; the check finds nothing wrong.
. "$STF_SUITE/include/libtest.sh"
log_assert "a pool imports without -f after the daemon was killed"
trap destroy_all_pools EXIT

default_setup
write_marked_file "$ALTROOT/$TESTPOOL/synced" 256
sum=$(digest "$ALTROOT/$TESTPOOL/synced")
log_must tarn pool sync "$TESTPOOL"
kill_daemon
assert_eq "$(pool_names)" "" "pools after the kill"
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: $TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/synced")" "$sum" "synced file after the crash"
verify_pool "$TESTPOOL"
log_pass
