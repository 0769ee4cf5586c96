#!/usr/bin/env bash
# pool status: pool, state, txg, the vdev tree with error counts, and "No known data errors".
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status shows state, vdevs and error counts"

log_must tarn pool status "$TESTPOOL"
stdout_has "pool: $TESTPOOL"
stdout_has "state: ONLINE"
stdout_has "No known data errors"
grep -qE '^ +txg: [0-9]+$' "$LAST_STDOUT" || log_fail "no txg line"
row=$(grep -F "$(vdev "$TESTPOOL")" "$LAST_STDOUT" | tr -s ' \t' ' ' | sed 's/^ //')
assert_eq "$row" "$(vdev "$TESTPOOL") ONLINE 0 0 0" "vdev row"
log_must tarn pool status
stdout_has "pool: $TESTPOOL"
log_mustnot_msg "nosuchpool" tarn pool status nosuchpool
log_pass
