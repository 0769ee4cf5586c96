#!/usr/bin/env bash
# Export of a pool whose mount is in use fails with EBUSY and leaves it imported; -f exports.
. "$STF_SUITE/include/libtest.sh"
log_assert "export of a busy mount needs -f"
trap destroy_all_pools EXIT

default_setup
(cd "$ALTROOT/$TESTPOOL" && exec sleep 60) &
busy=$!
wait_for 10 "[ \"\$(readlink /proc/$busy/cwd)\" = \"$ALTROOT/$TESTPOOL\" ]" || log_fail "the busy process did not start"
log_mustnot_msg "busy" tarn pool export "$TESTPOOL"
stderr_has "-f"
assert_eq "$(pool_names)" "$TESTPOOL" "pools after the refused export"
is_mounted "$ALTROOT/$TESTPOOL" || log_fail "the refused export unmounted the pool"
log_must tarn pool export -f "$TESTPOOL"
assert_eq "$(pool_names)" "" "pools after export -f"
kill "$busy"
wait "$busy" 2>/dev/null
import_pool "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
