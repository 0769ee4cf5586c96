#!/usr/bin/env bash
# tarn pool resilver (zpool resilver): with no device missing writes it does nothing and says
# so; a side that missed writes (its writes failed under `tarn inject`) is resilvered by it,
# the scrub in progress giving way; run again during that resilver it starts over from the
# beginning; and the resilver that finishes leaves the side holding everything.
. "$STF_SUITE/include/libtest.sh"
. "$STF_SUITE/scrub/scan_lib.sh"
require_python
log_assert "pool resilver: nothing to do, takes over a scrub, restarts a resilver, converges"
trap destroy_all_pools EXIT

pool=rrestart
create_pool $pool -O recordsize=4K -O compression=off mirror "$(vdev rr-a)" "$(vdev rr-b)"
mnt="$ALTROOT/$pool"
write_marked_file "$mnt/before" 64
log_must tarn pool sync $pool

# No device misses a write: nothing happens, successfully, and no scan shows.
log_must tarn pool resilver $pool
stdout_has "nothing to resilver"
log_must tarn pool status $pool
stdout_lacks "resilver"
log_mustnot tarn pool resilver nosuchpool
stderr_has "nosuchpool"

# A slow scan from here on: 2 blocks per txg, one txg a second.
log_must tarn pool export $pool
log_must tarn daemon --stop
export TARN_TUNABLE_scan_blocks_per_txg_max=2 TARN_TUNABLE_txg_timeout=1
import_pool $pool
log_must tarn pool scrub $pool
log_must tarn pool status $pool
stdout_has "scan: scrub in progress"

# Side a's writes fail while a file is written: side a misses those txgs, and the scrub goes
# on (it does not resilver).
log_must tarn inject -d rr-a.img -e io -T write $pool
write_marked_file "$mnt/missed" 256
log_must tarn pool sync $pool
log_must tarn inject -c all $pool
log_must tarn pool clear $pool
want=$(digest "$mnt/before" "$mnt/missed")
log_must tarn pool status $pool
stdout_has "scan: scrub in progress"

# The resilver takes the scrub's place.
log_must tarn pool resilver $pool
stdout_lacks "nothing to resilver"
log_must tarn pool status $pool
stdout_has "scan: resilver in progress"

# Run again part-way, it starts from the beginning. Its first round examines the same blocks
# every time (the MOS, then 2 data blocks): it has gone well past them first.
first=$(scan_examined $pool resilver)
wait_for 120 "[ \"\$(scan_examined $pool resilver)\" -ge $((2 * first + 16384)) ]" ||
	log_fail "the resilver made no progress past $first"
before=$(scan_examined $pool resilver)
log_must tarn pool resilver $pool
after=$(scan_examined $pool resilver)
log_note "resilver examined before the restart: $before, after: $after"
[ "$after" -ge 0 ] || log_fail "no resilver in progress after the restart"
[ "$after" -lt "$before" ] || log_fail "the resilver went on from $after (it had examined $before)"

# At full speed it finishes: side a misses nothing, a scrub finds nothing to repair.
log_must tarn pool export $pool
log_must tarn daemon --stop
unset TARN_TUNABLE_scan_blocks_per_txg_max TARN_TUNABLE_txg_timeout
import_pool $pool
log_must tarn pool wait -t resilver $pool
log_must tarn pool status $pool
stdout_has "scan: resilvered"
stdout_has "with 0 errors"
stdout_lacks "(missed txgs"
log_must tarn pool scrub -w $pool
log_must tarn pool status $pool
stdout_has "scan: scrub repaired 0B"
verify_pool $pool

# Side a alone holds everything.
log_must tarn pool export $pool
damage_marked_blocks "$(vdev rr-b)" 320
import_pool $pool
assert_eq "$(digest "$mnt/before" "$mnt/missed")" "$want" "contents read from side a alone"
log_must tarn pool destroy $pool
log_pass
