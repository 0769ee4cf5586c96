#!/usr/bin/env bash
# stat arc: the ARC's arcstats fields; -p exactly as /proc/spl/kstat/zfs/arcstats prints them
# (kstat header, "name type data", one "name 4 value" line per field); a cold read of a file
# counts demand data misses and fills the ARC; a compressible file is kept compressed
# (compressed_size below uncompressed_size, size = compressed_size + overhead_size); INTERVAL
# prints arcstat's columns; a pool the daemon does not hold is an error.
. "$STF_SUITE/include/libtest.sh"
log_assert "stat arc prints arcstats and arcstat lines"

file="$ALTROOT/$TESTPOOL/arc-file"
text="$ALTROOT/$TESTPOOL/arc-text"
log_must tarn set compression=lz4 "$TESTPOOL"
log_must dd if=/dev/urandom of="$file" bs=128k count=64 status=none
log_must sh -c "seq 1 2000000 | head -c 8388608 >'$text'"
log_must tarn pool export "$TESTPOOL"
log_must tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"

log_must tarn stat arc -p "$TESTPOOL"
head -1 "$LAST_STDOUT" | grep -Eq '^13 1 0x01 [0-9]+ ' || log_fail "no kstat header line"
sed -n 2p "$LAST_STDOUT" | tr -s ' ' | grep -qx 'name type data' || log_fail "no 'name type data' line"
tail -n +3 "$LAST_STDOUT" | awk 'NF != 3 || $2 != 4 || $3 !~ /^[0-9]+$/ { bad = 1 } END { exit bad }' ||
	log_fail "a field line is not 'name 4 value'"
for field in hits misses demand_data_hits demand_data_misses demand_metadata_hits mru_hits mfu_hits \
	mru_ghost_hits mfu_ghost_hits size compressed_size uncompressed_size overhead_size c c_min c_max \
	data_size metadata_size mru_size mfu_size; do
	grep -q "^$field " "$LAST_STDOUT" || log_fail "field $field missing"
done
misses_before=$(awk '$1 == "demand_data_misses" { print $3 }' "$LAST_STDOUT")

# A cold read (just imported) misses in the ARC and leaves the data in it.
log_must cat "$file" >/dev/null
log_must tarn stat arc -p "$TESTPOOL"
misses_after=$(awk '$1 == "demand_data_misses" { print $3 }' "$LAST_STDOUT")
data_size=$(awk '$1 == "data_size" { print $3 }' "$LAST_STDOUT")
[ "$misses_after" -gt "$misses_before" ] || log_fail "a cold read counted no data misses ($misses_before -> $misses_after)"
[ "$data_size" -ge $((4 << 20)) ] || log_fail "the ARC holds $data_size bytes of data after an 8 MiB read"

# The compressible file's blocks are kept as stored: fewer bytes than their contents.
field() { awk -v name="$1" '$1 == name { print $3 }' "$LAST_STDOUT"; }
log_must cat "$text" >/dev/null
log_must tarn stat arc -p "$TESTPOOL"
compressed=$(field compressed_size)
uncompressed=$(field uncompressed_size)
[ $((uncompressed - compressed)) -ge $((4 << 20)) ] ||
	log_fail "compressed_size $compressed, uncompressed_size $uncompressed after reading 8 MiB of text"
[ "$(field size)" -eq $((compressed + $(field overhead_size))) ] || log_fail "size is not compressed_size + overhead_size"

log_must tarn stat arc -j "$TESTPOOL"
grep -q '"c_max"' "$LAST_STDOUT" || log_fail "no c_max in -j output"

log_must tarn stat arc "$TESTPOOL" 0.2 2
header=$(head -1 "$LAST_STDOUT" | tr -s ' ' | sed 's/^ //')
assert_eq "$header" "TIME READ DDREAD DDH% DMREAD DMH% PREAD PH% SIZE C AVAIL" "arcstat header"
[ "$(wc -l <"$LAST_STDOUT")" -eq 3 ] || log_fail "expected a header and two lines"

log_mustnot tarn stat arc nosuchpool
log_must rm -f "$file" "$text"
log_pass
