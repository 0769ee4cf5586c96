#!/usr/bin/env bash
# Export unmounts and releases a pool; import by name brings it and its files back.
. "$STF_SUITE/include/libtest.sh"
log_assert "export then import by name keeps the pool's files"
trap destroy_all_pools EXIT

default_setup
log_must cp -r "$STF_SUITE/include" "$ALTROOT/$TESTPOOL/tree"
sum=$(digest "$ALTROOT/$TESTPOOL/tree/libtest.sh")
log_must tarn pool export "$TESTPOOL"
stdout_has "exported pool $TESTPOOL"
assert_eq "$(pool_names)" "" "pools after export"
is_mounted "$ALTROOT/$TESTPOOL" && log_fail "still mounted after export"
log_mustnot tarn pool status "$TESTPOOL"
log_mustnot_msg "$TESTPOOL" tarn pool export "$TESTPOOL"

import_pool "$TESTPOOL"
assert_eq "$(pool_names)" "$TESTPOOL" "pools after import"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/tree/libtest.sh")" "$sum" "file after import"
verify_pool "$TESTPOOL"
log_pass
