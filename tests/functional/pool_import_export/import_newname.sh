#!/usr/bin/env bash
# import POOL NEWNAME renames the pool: listed and mounted under the new name, for good.
. "$STF_SUITE/include/libtest.sh"
log_assert "import with a new name renames the pool"
trap destroy_all_pools EXIT

default_setup
echo renamed >"$ALTROOT/$TESTPOOL/file"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL" renamed
assert_eq "$(pool_names)" "renamed" "pools after import with a new name"
is_mounted "$ALTROOT/renamed" || log_fail "not mounted at $ALTROOT/renamed"
assert_eq "$(cat "$ALTROOT/renamed/file")" renamed "file after rename"
log_must tarn pool export renamed
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: renamed"
stdout_lacks "pool: $TESTPOOL"
log_mustnot_msg "invalid pool name" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" renamed 1bad
assert_eq "$(pool_names)" "" "pools after a refused new name"
import_pool renamed
verify_pool renamed
log_pass
