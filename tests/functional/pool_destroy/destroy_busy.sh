#!/usr/bin/env bash
# Destroy of a pool whose mount is in use fails with EBUSY and leaves it whole; -f destroys it.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool destroy of a busy pool needs -f"
trap destroy_all_pools EXIT

default_setup
echo kept >"$ALTROOT/$TESTPOOL/file"
(cd "$ALTROOT/$TESTPOOL" && exec sleep 60) &
busy=$!
wait_for 10 "[ \"\$(readlink /proc/$busy/cwd)\" = \"$ALTROOT/$TESTPOOL\" ]" || log_fail "the busy process did not start"
log_mustnot_msg "busy" tarn pool destroy "$TESTPOOL"
assert_eq "$(pool_names)" "$TESTPOOL" "pools after the refused destroy"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/file")" kept "file after the refused destroy"
log_must tarn pool destroy -f "$TESTPOOL"
assert_eq "$(pool_names)" "" "pools after destroy -f"
kill "$busy"
wait "$busy" 2>/dev/null
log_pass
