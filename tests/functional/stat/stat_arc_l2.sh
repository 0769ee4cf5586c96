#!/usr/bin/env bash
# stat arc on a pool with a cache device: the l2_* fields (arcstats names) are printed (-p, -j
# and Prometheus as node_zfs_arc_l2_*); the feed writes what a read left in the ARC
# (l2_write_bytes, l2_size grow); after export and import the L2ARC is rebuilt from the
# device (l2_rebuild_bufs) and a cold read hits it (l2_hits) with the right data; stat arc
# INTERVAL -o prints arcstat's L2ARC columns.
. "$STF_SUITE/include/libtest.sh"
log_assert "stat arc shows the L2ARC's counters and the L2ARC survives export/import"

create_pool l2stat -O compression=lz4 "$(vdev l2-data)" cache "$(vdev l2-cache)"
field() { awk -v f="$1" '$1 == f { print $3 }' "$LAST_STDOUT"; }

log_must tarn stat arc -p l2stat
for name in l2_hits l2_misses l2_feeds l2_read_bytes l2_write_bytes l2_writes_sent l2_writes_done \
	l2_writes_error l2_evict_reading l2_evict_l1cached l2_cksum_bad l2_io_error l2_size l2_asize \
	l2_hdr_size l2_log_blk_writes l2_log_blk_count l2_rebuild_success l2_rebuild_unsupported \
	l2_rebuild_io_errors l2_rebuild_cksum_lb_errors l2_rebuild_lowmem l2_rebuild_size \
	l2_rebuild_asize l2_rebuild_bufs l2_rebuild_log_blks l2_ndev; do
	grep -q "^$name " "$LAST_STDOUT" || log_fail "field $name missing"
done
assert_eq "$(field l2_ndev)" 1 "l2_ndev"

file="$ALTROOT/l2stat/file"
python3 -c "import sys; sys.stdout.buffer.write((bytes(range(256)) * 64 + bytes(16384)) * 320)" >"$file" ||
	log_fail "cannot write the file"
want=$(digest "$file")
log_must tarn pool sync l2stat
log_must cat "$file" >/dev/null
# The feed runs every second: wait until it has written the file's blocks.
wait_l2() {
	tarn stat arc -p l2stat >"$SCRATCH/arc" 2>&1 &&
		awk '$1 == "l2_size" && $3 >= 4194304 { ok = 1 } END { exit !ok }' "$SCRATCH/arc"
}
wait_for 30 wait_l2 || log_fail "the feed wrote too little: $(cat "$SCRATCH/arc")"
log_must tarn stat arc -p l2stat
[ "$(field l2_write_bytes)" -gt 0 ] || log_fail "l2_write_bytes is 0"
[ "$(field l2_log_blk_writes)" -gt 0 ] || log_fail "no log block written"
[ "$(field l2_asize)" -lt "$(field l2_size)" ] || log_fail "the L2ARC does not hold compressed bytes"
assert_eq "$(field l2_writes_done)" "$(field l2_writes_sent)" "writes done"

log_must tarn stat arc -j l2stat
grep -q '"l2_hits"' "$LAST_STDOUT" || log_fail "no l2_hits in -j output"
log_must tarn stat --prometheus
grep -Eq '^node_zfs_arc_l2_hits\{zpool="l2stat"\} [0-9]+$' "$LAST_STDOUT" || log_fail "no node_zfs_arc_l2_hits sample"
grep -Eq '^node_zfs_arc_l2_size\{zpool="l2stat"\} [0-9]+$' "$LAST_STDOUT" || log_fail "no node_zfs_arc_l2_size sample"

# Export and import: rebuilt from the device; a cold read hits the L2ARC.
log_must tarn pool export l2stat
import_pool l2stat
rebuilt() {
	tarn stat arc -p l2stat >"$SCRATCH/arc" 2>&1 &&
		awk '$1 == "l2_rebuild_success" && $3 >= 1 { ok = 1 } END { exit !ok }' "$SCRATCH/arc"
}
wait_for 30 rebuilt || log_fail "no rebuild: $(cat "$SCRATCH/arc")"
log_must tarn stat arc -p l2stat
[ "$(field l2_rebuild_bufs)" -gt 0 ] || log_fail "nothing rebuilt"
hits_before=$(field l2_hits)
assert_eq "$(digest "$file")" "$want" "file read after import"
log_must tarn stat arc -p l2stat
[ "$(field l2_hits)" -gt "$hits_before" ] || log_fail "the cold read did not hit the L2ARC ($hits_before -> $(field l2_hits))"
assert_eq "$(field l2_cksum_bad)" 0 "l2_cksum_bad"

# arcstat's L2ARC columns, picked with -o (arcstat -f).
log_must tarn stat arc -p -o time,l2read,l2hit%,l2miss%,l2size,l2asize l2stat 0.2 1
header=$(head -1 "$LAST_STDOUT" | tr -s ' ' | sed 's/^ //')
assert_eq "$header" "TIME L2READ L2HIT% L2MISS% L2SIZE L2ASIZE" "arcstat L2 header"
l2size=$(tail -1 "$LAST_STDOUT" | awk '{ print $5 }')
[ "$l2size" -gt 0 ] || log_fail "l2size column is $l2size"
verify_pool l2stat
log_must tarn pool destroy l2stat
log_pass
