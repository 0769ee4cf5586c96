#!/usr/bin/env bash
# debug metaslabs -m|-mm|-mmm (zdb -m): the per-metaslab table with a loaded column; -mm adds
# every metaslab's on-disk histogram and fragmentation; -mmm its largest free segment and
# in-memory histogram, loaded or replayed from the space map; -j carries the same figures; a
# fresh pool reads 0% fragmentation; the same works on the exported pool (-d).
. "$STF_SUITE/include/libtest.sh"
log_assert "debug metaslabs shows metaslabs at three levels of detail"
trap destroy_all_pools EXIT

default_setup
write_marked_file "$ALTROOT/$TESTPOOL/data" 512
log_must tarn pool sync "$TESTPOOL"
log_must tarn debug metaslabs "$TESTPOOL"
stdout_has "fragmentation 0%"
stdout_has "loaded"
stdout_lacks "on-disk histogram"
log_must tarn debug metaslabs -mm "$TESTPOOL"
stdout_has "on-disk histogram (fragmentation"
stdout_lacks "in-memory histogram"
log_must tarn debug metaslabs -mmm "$TESTPOOL"
stdout_has "in-memory histogram (loaded), largest free segment"
stdout_has "in-memory histogram (from the space map), largest free segment"
log_must tarn debug metaslabs -j -mmm "$TESTPOOL"
grep -q '"largest_free_segment"' "$LAST_STDOUT" || log_fail "no largest_free_segment in -j"
grep -q '"tree_histogram"' "$LAST_STDOUT" || log_fail "no tree_histogram in -j"

log_must tarn pool export "$TESTPOOL"
log_must tarn debug metaslabs -mmm -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "in-memory histogram (from the space map)"
log_pass
