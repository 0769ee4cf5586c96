#!/usr/bin/env bash
# pool clear: resets the error counts of a device (or of every device) and forgets
# the error log; an unknown device is refused with a clear message.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool clear resets error counts and the error log"
trap destroy_all_pools EXIT

default_setup
write_marked_file "$ALTROOT/$TESTPOOL/data" 64
log_must tarn pool export "$TESTPOOL"
damage_marked_blocks "$(vdev "$TESTPOOL")" 4
import_pool "$TESTPOOL"
cat "$ALTROOT/$TESTPOOL/data" >/dev/null 2>&1 && log_fail "the damaged file read without an error"
log_must tarn pool status "$TESTPOOL"
row=$(grep -F "$(vdev "$TESTPOOL")" "$LAST_STDOUT" | tr -s ' \t' ' ' | sed 's/^ //')
cksum=${row##* }
[ "$cksum" -gt 0 ] || log_fail "no checksum error counted: $row"
stdout_has "errors: 1 data error"

log_mustnot_msg "no such device" tarn pool clear "$TESTPOOL" /nonexistent.img
log_must tarn pool clear "$TESTPOOL" "$(vdev "$TESTPOOL")"
log_must tarn pool status "$TESTPOOL"
row=$(grep -F "$(vdev "$TESTPOOL")" "$LAST_STDOUT" | tr -s ' \t' ' ' | sed 's/^ //')
assert_eq "$row" "$(vdev "$TESTPOOL") ONLINE 0 0 0" "vdev row after clear DEV"
stdout_has "errors: 1 data error"
log_must tarn pool clear "$TESTPOOL"
log_must tarn pool status "$TESTPOOL"
stdout_has "errors: No known data errors"
log_must tarn pool history "$TESTPOOL"
stdout_has "tarn pool clear $TESTPOOL"
# The damaged block goes with its file, so that the cleanup's check finds the pool clean.
log_must rm "$ALTROOT/$TESTPOOL/data"
log_must tarn pool sync "$TESTPOOL"
log_pass
