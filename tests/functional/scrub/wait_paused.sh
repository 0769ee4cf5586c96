#!/usr/bin/env bash
# `pool wait -t scrub` returns when the scrub is paused (a paused scrub never ends by itself),
# as zpool wait does; after `pool scrub` resumes it, waiting lasts until it has finished.
. "$STF_SUITE/include/libtest.sh"
log_assert "waiting for a paused scrub returns"

create_pool paused -O recordsize=4K mirror "$(vdev p-a)" "$(vdev p-b)"
write_marked_file "$ALTROOT/paused/data" 256
log_must tarn pool export paused
log_must tarn daemon --stop

# A slow scan: 2 blocks per txg, one txg a second.
export TARN_TUNABLE_scan_blocks_per_txg_max=2 TARN_TUNABLE_txg_timeout=1
import_pool paused
log_must tarn pool scrub paused
log_must tarn pool scrub -p paused
log_must timeout 20 "$TARN" pool wait -t scrub paused
log_must tarn pool status paused
stdout_has "scrub paused"

# Resumed at full speed, waiting lasts until the end.
log_must tarn pool export paused
log_must tarn daemon --stop
unset TARN_TUNABLE_scan_blocks_per_txg_max TARN_TUNABLE_txg_timeout
import_pool paused
log_must tarn pool scrub paused
log_must timeout 120 "$TARN" pool wait -t scrub paused
log_must tarn pool status paused
stdout_has "scan: scrub repaired 0B"
verify_pool paused
log_must tarn pool destroy paused
log_pass
