#!/usr/bin/env bash
# One mirror side damaged (data blocks, while exported): check -n counts the bad copies and
# repairs nothing; check reports them repaired and exits 0, restoring the damaged side from the
# good one; a second check finds nothing; the file reads back intact.
. "$STF_SUITE/include/libtest.sh"
log_assert "check repairs a damaged mirror copy from the good one"
trap destroy_all_pools EXIT

default_mirror_setup
write_marked_file "$ALTROOT/$TESTPOOL/data" 512
sum=$(digest "$ALTROOT/$TESTPOOL/data")
log_must tarn pool export "$TESTPOOL"
markers() { grep -a -o TZTSMARK "$1" | wc -l; }
assert_eq "$(markers "$(vdev "$TESTPOOL-a")")" 512 "marked pieces on side a"
damage_marked_blocks "$(vdev "$TESTPOOL-a")" 64
[ "$(markers "$(vdev "$TESTPOOL-a")")" -lt 512 ] || log_fail "the damage did not land"

log_must tarn check -n -d "$VDEV_DIR" "$TESTPOOL"
bad=$(sed -n 's/.*(\([0-9]*\) bad, \([0-9]*\) repaired).*/\1/p' "$LAST_STDOUT")
[ "${bad:-0}" -gt 0 ] || log_fail "check -n found no bad copy"
stdout_has "(${bad} bad, 0 repaired)"
# The damaged side is named with its count, the good side not; nothing claims "no errors"
# while bad copies remain (it once said "no errors found" without naming the device).
stdout_has "device $(vdev "$TESTPOOL-a"): ${bad} bad copies (0 repaired, 0 unrecoverable)"
stdout_lacks "device $(vdev "$TESTPOOL-b")"
stdout_has "${bad} bad copies were not repaired"
stdout_lacks "no errors found"

log_must tarn check -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "(${bad} bad, ${bad} repaired)"
stdout_has "device $(vdev "$TESTPOOL-a"): ${bad} bad copies (${bad} repaired, 0 unrecoverable)"
assert_eq "$(markers "$(vdev "$TESTPOOL-a")")" 512 "marked pieces on side a after repair"
assert_eq "$(markers "$(vdev "$TESTPOOL-b")")" 512 "marked pieces on side b after repair"
log_must tarn check -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "(0 bad, 0 repaired)"
import_pool "$TESTPOOL"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/data")" "$sum" "file after repair"
log_pass
