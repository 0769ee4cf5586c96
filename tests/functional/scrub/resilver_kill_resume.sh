#!/usr/bin/env bash
# Kill -9 the daemon during a slow resilver (a few blocks per txg): after import the resilver is
# still in progress, resumed from its persisted position (the side's missed txgs kept), and
# finishes; the side then holds everything.
. "$STF_SUITE/include/libtest.sh"
. "$STF_SUITE/scrub/scan_lib.sh"
log_assert "a resilver interrupted by kill -9 resumes after import"

create_pool rkilled -O recordsize=4K -O compression=off mirror "$(vdev rk-a)" "$(vdev rk-b)"
write_marked_file "$ALTROOT/rkilled/before" 64
log_must tarn pool offline rkilled "$(vdev rk-b)"
write_marked_file "$ALTROOT/rkilled/missed" 256
want=$(digest "$ALTROOT/rkilled/before" "$ALTROOT/rkilled/missed")
log_must tarn pool export rkilled
log_must tarn daemon --stop

# A slow scan: 2 blocks per txg, one txg a second.
export TARN_TUNABLE_scan_blocks_per_txg_max=2 TARN_TUNABLE_txg_timeout=1
import_pool rkilled
log_must tarn pool online rkilled "$(vdev rk-b)"
kill_during_scan rkilled resilver
log_must tarn pool status rkilled
stdout_has "scan: resilver in progress"
stdout_has "(resilvering)"

# Let it finish at full speed.
log_must tarn pool export rkilled
log_must tarn daemon --stop
unset TARN_TUNABLE_scan_blocks_per_txg_max TARN_TUNABLE_txg_timeout
import_pool rkilled
log_must tarn pool wait -t resilver rkilled
log_must tarn pool status rkilled
stdout_has "scan: resilvered"
stdout_has "with 0 errors"
stdout_lacks "(missed txgs"
stdout_has "state: ONLINE"
verify_pool rkilled

# Side b alone holds everything.
log_must tarn pool export rkilled
damage_marked_blocks "$(vdev rk-a)" 320
import_pool rkilled
assert_eq "$(digest "$ALTROOT/rkilled/before" "$ALTROOT/rkilled/missed")" "$want" "contents read from side b alone"
log_must tarn pool destroy rkilled
log_pass
