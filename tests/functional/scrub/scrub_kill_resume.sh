#!/usr/bin/env bash
# Kill -9 the daemon during a slow scrub (a few blocks per txg): after import the scrub is
# still in progress, resumed from its persisted position, and finishes clean.
. "$STF_SUITE/include/libtest.sh"
. "$STF_SUITE/scrub/scan_lib.sh"
log_assert "a scrub interrupted by kill -9 resumes after import"

create_pool killed -O recordsize=4K mirror "$(vdev k-a)" "$(vdev k-b)"
write_marked_file "$ALTROOT/killed/data" 256
log_must tarn pool export killed
log_must tarn daemon --stop

# A slow scan: 2 blocks per txg, one txg a second.
export TARN_TUNABLE_scan_blocks_per_txg_max=2 TARN_TUNABLE_txg_timeout=1
import_pool killed
log_must tarn pool scrub killed
kill_during_scan killed scrub
log_must tarn pool status killed
stdout_has "scan: scrub in progress"

# Let it finish at full speed.
log_must tarn pool export killed
log_must tarn daemon --stop
unset TARN_TUNABLE_scan_blocks_per_txg_max TARN_TUNABLE_txg_timeout
import_pool killed
log_must tarn pool wait -t scrub killed
log_must tarn pool status killed
stdout_has "scan: scrub repaired 0B"
stdout_has "with 0 errors"
verify_pool killed
log_must tarn pool destroy killed
log_pass
