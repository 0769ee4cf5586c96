#!/usr/bin/env bash
# A mirror side that comes back wiped (same path, no labels) must not be
# brought online. `pool online` once accepted it, resilvered only the txgs it had missed and
# showed it ONLINE, though it held none of the older blocks. Now online refuses it ("invalid
# label") and leaves it OFFLINE; `pool replace POOL DEV` resilvers it whole, after which the
# side alone holds the file.
. "$STF_SUITE/include/libtest.sh"
log_assert "online refuses a blank mirror side; replace in place resilvers it whole"

create_pool blank -O recordsize=4K -O compression=off mirror "$(vdev ob-a)" "$(vdev ob-b)"
write_marked_file "$ALTROOT/blank/data" 256
want=$(digest "$ALTROOT/blank/data")
log_must tarn pool offline blank "$(vdev ob-b)"
log_must tarn pool sync blank
# The disk comes back wiped: every byte of it zero, labels included.
size=$(stat -c %s "$(vdev ob-b)")
log_must dd if=/dev/zero of="$(vdev ob-b)" bs=1M count=$((size >> 20)) conv=notrunc status=none
log_mustnot_msg "label" tarn pool online blank "$(vdev ob-b)"
stderr_has "tarn pool replace blank"
log_must tarn pool status blank
grep -F -- "$(vdev ob-b)" "$LAST_STDOUT" | grep -q ONLINE && log_fail "the blank side shows ONLINE"
stdout_has "OFFLINE"
stdout_lacks "scan:"

# The pool keeps working on side a, and replace in place copies everything onto b.
write_marked_file "$ALTROOT/blank/more" 16
log_must tarn pool replace -w blank "$(vdev ob-b)"
log_must tarn pool status blank
stdout_lacks "OFFLINE"
stdout_lacks "DEGRADED"
stdout_has "scan: resilvered"
verify_pool blank

# Side b alone holds every block: damage every marked block of side a.
log_must tarn pool export blank
damage_marked_blocks "$(vdev ob-a)" 256
import_pool blank
assert_eq "$(digest "$ALTROOT/blank/data")" "$want" "contents read from the replaced side alone"
log_must tarn pool destroy blank
log_pass
