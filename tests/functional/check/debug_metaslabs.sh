#!/usr/bin/env bash
# debug metaslabs -m|-mm|-mmm (zdb -m): the per-metaslab table with a loaded column; -mm adds
# every metaslab's on-disk histogram and fragmentation; -mmm its largest free segment and
# in-memory histogram, loaded or replayed from the space map; -j carries the same figures; a
# fresh pool reads 0% fragmentation; debug map writes an SVG with a cell per metaslab, or a PNG; the same
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

# debug map draws one cell per metaslab; a .png is the same drawing rasterized: a PNG of the
# SVG's width and height; without -o the map is POOL-map.svg here; other names are refused.
log_must tarn debug map -o "$SCRATCH/map.svg" "$TESTPOOL"
grep -q '<svg' "$SCRATCH/map.svg" || log_fail "no SVG written"
cells=$(grep -c '<g><title>metaslab' "$SCRATCH/map.svg")
[ "$cells" -ge 1 ] || log_fail "no metaslab cells in the map"
log_must tarn debug map -o "$SCRATCH/map.png" "$TESTPOOL"
stdout_has "wrote $SCRATCH/map.png"
# png_check FILE SVG: FILE starts with the PNG signature and its IHDR has SVG's size.
png_check() {
	assert_eq "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" "89504e470d0a1a0a" "PNG signature of $1"
	assert_eq "$(head -c 16 "$1" | tail -c 4)" "IHDR" "first chunk of $1"
	local width height
	width=$(head -c 20 "$1" | tail -c 4 | od -An -tu1 | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
	height=$(head -c 24 "$1" | tail -c 4 | od -An -tu1 | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
	assert_eq "$width" "$(grep -o '^<svg[^>]* width="[0-9]*"' "$2" | grep -o '[0-9]*"$' | tr -d '"')" "PNG width"
	assert_eq "$height" "$(grep -o '^<svg[^>]* height="[0-9]*"' "$2" | grep -o '[0-9]*"$' | tr -d '"')" "PNG height"
	[ "$(stat -c %s "$1")" -gt 1000 ] || log_fail "$1 is too small to hold the map"
}
png_check "$SCRATCH/map.png" "$SCRATCH/map.svg"
log_must tarn debug map "$TESTPOOL"
grep -q '<g><title>metaslab' "$SCRATCH/$TESTPOOL-map.svg" || log_fail "no default map $TESTPOOL-map.svg"
log_mustnot_msg ".svg or .png" tarn debug map -o "$SCRATCH/map.jpg" "$TESTPOOL"
[ -e "$SCRATCH/map.jpg" ] && log_fail "a refused map was written"

log_must tarn pool export "$TESTPOOL"
log_must tarn debug metaslabs -mmm -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "in-memory histogram (from the space map)"
log_must tarn debug map -d "$VDEV_DIR" -o "$SCRATCH/map-exported.svg" "$TESTPOOL"
log_must tarn debug logs -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "log space map of $TESTPOOL"
grep -q '<svg' "$SCRATCH/map-exported.svg" || log_fail "no SVG written for the exported pool"
log_must tarn debug map -d "$VDEV_DIR" -o "$SCRATCH/map-exported.png" "$TESTPOOL"
png_check "$SCRATCH/map-exported.png" "$SCRATCH/map-exported.svg"
log_pass
