#!/usr/bin/env bash
# Destroying a pool that does not exist fails clearly and leaves the others alone.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool destroy of an unknown pool fails and changes nothing"
trap destroy_all_pools EXIT

default_setup
log_mustnot_msg "nosuchpool" tarn pool destroy nosuchpool
log_mustnot_msg "nosuchpool" tarn pool destroy -f nosuchpool
assert_eq "$(pool_names)" "$TESTPOOL" "pools after refused destroys"
verify_pool "$TESTPOOL"
log_pass
