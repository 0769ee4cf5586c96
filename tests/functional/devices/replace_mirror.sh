#!/usr/bin/env bash
# Replace a mirror side while the file system is mounted: the new device is resilvered, the
# old one detached by itself; a file read back through the FUSE mount after the replace is
# right, and after export and import the new side alone holds the data. A slow resilver shows
# the replacing-N group in status while it runs.
. "$STF_SUITE/include/libtest.sh"
log_assert "replace resilvers the new device and detaches the old one"

create_pool replaced -O recordsize=4K -O compression=off mirror "$(vdev rp-a)" "$(vdev rp-b)"
write_marked_file "$ALTROOT/replaced/data" 256
want=$(digest "$ALTROOT/replaced/data")
truncate -s "$VDEV_SIZE" "$(vdev rp-c)"
log_must tarn pool replace -w replaced "$(vdev rp-b)" "$(vdev rp-c)"
log_must tarn pool status replaced
stdout_lacks "$(vdev rp-b)"
stdout_lacks "replacing"
stdout_has "$(vdev rp-c)"
stdout_has "scan: resilvered"
# Read back through the mount, with the kernel's page cache dropped for this file.
log_must dd if="$ALTROOT/replaced/data" iflag=direct of=/dev/null bs=1M status=none
assert_eq "$(digest "$ALTROOT/replaced/data")" "$want" "file read back through the mount after replace"
verify_pool replaced
log_must tarn pool history replaced
stdout_has "tarn pool replace -w replaced"

# The new side alone holds everything: damage every marked block of side a.
log_must tarn pool export replaced
damage_marked_blocks "$(vdev rp-a)" 256
import_pool replaced
assert_eq "$(digest "$ALTROOT/replaced/data")" "$want" "contents read from the new side alone"
log_must tarn pool scrub -w replaced
log_must tarn pool export replaced
log_must tarn daemon --stop

# A slow resilver: the pair shows as replacing-1 until it is done.
export TARN_TUNABLE_scan_blocks_per_txg_max=2 TARN_TUNABLE_txg_timeout=1
import_pool replaced
truncate -s "$VDEV_SIZE" "$(vdev rp-d)"
log_must tarn pool replace replaced "$(vdev rp-a)" "$(vdev rp-d)"
log_must tarn pool status replaced
stdout_has "replacing-0"
stdout_has "(resilvering)"
log_must tarn pool export replaced
log_must tarn daemon --stop
unset TARN_TUNABLE_scan_blocks_per_txg_max TARN_TUNABLE_txg_timeout
import_pool replaced
wait_for 120 "! \"\$TARN\" pool status replaced | grep -q replacing" || log_fail "the replace did not finish"
log_must tarn pool status replaced
stdout_lacks "$(vdev rp-a)"
stdout_has "$(vdev rp-d)"
assert_eq "$(digest "$ALTROOT/replaced/data")" "$want" "contents after the second replace"
verify_pool replaced
log_must tarn pool destroy replaced
log_pass
