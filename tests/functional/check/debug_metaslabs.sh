#!/usr/bin/env bash
# debug metaslabs -m|-mm|-mmm (zdb -m): the per-metaslab table with a loaded column; -mm adds
# every metaslab's on-disk histogram and fragmentation; -mmm its largest free segment and
# in-memory histogram, loaded or replayed from the space map; -j carries the same figures; a
# fresh pool reads 0% fragmentation; debug map writes an SVG with a cell per metaslab; the same
# works on the exported pool (-d).
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

# debug logs (the log space map, on by default): the logs with their txgs and blocks, the
# summary; the metaslab table has an unflushed column.
log_must tarn debug logs "$TESTPOOL"
stdout_has "log space map of $TESTPOOL"
stdout_has "summary:"
log_must tarn debug logs -j "$TESTPOOL"
grep -q '"block_limit"' "$LAST_STDOUT" || log_fail "no block_limit in debug logs -j"
log_must tarn debug metaslabs "$TESTPOOL"
stdout_has "unflushed"

# debug map draws one cell per metaslab; PNG is refused with a clear message.
log_must tarn debug map -o "$SCRATCH/map.svg" "$TESTPOOL"
grep -q '<svg' "$SCRATCH/map.svg" || log_fail "no SVG written"
cells=$(grep -c '<g><title>metaslab' "$SCRATCH/map.svg")
[ "$cells" -ge 1 ] || log_fail "no metaslab cells in the map"
log_mustnot_msg "only SVG" tarn debug map -o "$SCRATCH/map.png" "$TESTPOOL"

log_must tarn pool export "$TESTPOOL"
log_must tarn debug metaslabs -mmm -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "in-memory histogram (from the space map)"
log_must tarn debug map -d "$VDEV_DIR" -o "$SCRATCH/map-exported.svg" "$TESTPOOL"
log_must tarn debug logs -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "log space map of $TESTPOOL"
grep -q '<svg' "$SCRATCH/map-exported.svg" || log_fail "no SVG written for the exported pool"
log_pass
