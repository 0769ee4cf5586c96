#!/usr/bin/env bash
# Replace a raidz2 child while the file system is mounted: the new device takes the old one's
# column slot (shown as replacing-N under raidz2-0 while a slow resilver runs), the old one is
# detached by itself, and the new child alone serves its columns afterwards: with the old file
# gone and two other children taken offline, the file reads back right. A lost child (its file
# deleted while exported) is rebuilt whole by replace.
. "$STF_SUITE/include/libtest.sh"
log_assert "replace of a raidz child resilvers its columns onto the new device"

create_pool rz -O recordsize=16K -O compression=off \
	raidz2 "$(vdev rz-0)" "$(vdev rz-1)" "$(vdev rz-2)" "$(vdev rz-3)" "$(vdev rz-4)"
write_marked_file "$ALTROOT/rz/data" 512
want=$(digest "$ALTROOT/rz/data")
truncate -s "$VDEV_SIZE" "$(vdev rz-new1)"
log_must tarn pool replace -w rz "$(vdev rz-1)" "$(vdev rz-new1)"
log_must tarn pool status rz
stdout_lacks "$(vdev rz-1)"
stdout_lacks "replacing"
stdout_has "raidz2-0"
stdout_has "$(vdev rz-new1)"
log_mustnot_msg "can only attach to mirrors" tarn pool attach rz "$(vdev rz-0)" "$(vdev rz-x)"
log_mustnot_msg "only applicable to mirror" tarn pool detach rz "$(vdev rz-0)"
verify_pool rz

# The new child holds its columns: the old file is gone, two others offline.
log_must tarn pool export rz
rm -f "$(vdev rz-1)"
import_pool rz
log_must tarn pool offline rz "$(vdev rz-0)"
log_must tarn pool offline rz "$(vdev rz-2)"
log_must dd if="$ALTROOT/rz/data" iflag=direct of=/dev/null bs=1M status=none
assert_eq "$(digest "$ALTROOT/rz/data")" "$want" "contents with the new child and two offline"
log_must tarn pool online rz "$(vdev rz-0)"
log_must tarn pool online rz "$(vdev rz-2)"
log_must tarn pool wait -t resilver rz

# A lost child, rebuilt whole; a slow resilver shows the pair under the raidz vdev.
log_must tarn pool export rz
log_must tarn daemon --stop
rm -f "$(vdev rz-3)"
export TARN_TUNABLE_scan_blocks_per_txg_max=2 TARN_TUNABLE_txg_timeout=1
import_pool rz
log_must tarn pool status rz
stdout_has "DEGRADED"
truncate -s "$VDEV_SIZE" "$(vdev rz-new3)"
log_must tarn pool replace rz "$(vdev rz-3)" "$(vdev rz-new3)"
log_must tarn pool status rz
stdout_has "replacing-3"
log_must tarn pool export rz
log_must tarn daemon --stop
unset TARN_TUNABLE_scan_blocks_per_txg_max TARN_TUNABLE_txg_timeout
import_pool rz
wait_for 120 "! \"\$TARN\" pool status rz | grep -q replacing" || log_fail "the replace did not finish"
log_must tarn pool status rz
stdout_has "ONLINE"
stdout_has "$(vdev rz-new3)"
assert_eq "$(digest "$ALTROOT/rz/data")" "$want" "contents after the rebuild"
log_must tarn pool scrub -w rz
verify_pool rz
log_must tarn pool destroy rz
log_pass
