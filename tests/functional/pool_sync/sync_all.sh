#!/usr/bin/env bash
# pool sync with no pool syncs every imported pool; an unknown pool is a clean error.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool sync with no argument syncs all pools; unknown pools fail"

create_pool second "$(vdev second)"
log_must tarn pool sync
stdout_has "$TESTPOOL"
stdout_has "second"
log_mustnot_msg "nosuchpool" tarn pool sync nosuchpool
log_must tarn pool destroy second
log_pass
