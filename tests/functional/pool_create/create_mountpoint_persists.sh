#!/usr/bin/env bash
# The mountpoint given with -m (a path, or none) is the root file system's mountpoint property:
# it survives export and import, as in ZFS. Known failure until the root dataset keeps its
# mountpoint property (import mounts at ALTROOT/POOL whatever -m said at create).
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create -m PATH and -m none survive export and import"
trap destroy_all_pools EXIT

create_pool "$TESTPOOL" -m /elsewhere/data "$(vdev a)"
create_pool nomount -m none "$(vdev b)"
log_must tarn pool export "$TESTPOOL"
log_must tarn pool export nomount
import_pool "$TESTPOOL"
import_pool nomount
is_mounted "$ALTROOT/elsewhere/data" || log_fail "after import, not mounted at $ALTROOT/elsewhere/data"
assert_eq "$(mounted_at nomount)" "" "mounts of a -m none pool after import"
log_pass
