#!/usr/bin/env bash
# stat txgs POOL: OpenZFS's txgs kstat columns in order, then passes, blocks_written and
# write_ios, then the space layer's columns (the log space map's log_writes and ms_flushed
# among them); a written file's txg shows up committed (state C) with blocks written, device
# writes and at least one pass; the open txg comes last.
. "$STF_SUITE/include/libtest.sh"
log_assert "stat txgs prints the txg history with the kstat columns"

log_must tarn stat txgs "$TESTPOOL"
header=$(head -1 "$LAST_STDOUT" | tr -s ' ' | sed 's/^ //')
assert_eq "$header" "TXG BIRTH STATE NDIRTY NREAD NWRITTEN READS WRITES OTIME QTIME WTIME STIME PASSES BLOCKS_WRITTEN WRITE_IOS SPACEMAP_WRITES MS_CONDENSED MS_LOADED MS_UNLOADED ALLOC_SEGMENTS_P999 ALLOC_LOAD_WAITS ALLOC_P999_NS GANG_BLOCKS LOG_WRITES MS_FLUSHED" "header"

echo "some data" >"$ALTROOT/$TESTPOOL/stat-file"
log_must tarn pool sync "$TESTPOOL"
log_must tarn stat txgs -H -p "$TESTPOOL"
awk -F'\t' 'NF != 25 { bad = 1 } END { exit bad }' "$LAST_STDOUT" ||
	log_fail "a row without 25 tab-separated fields"
tail -1 "$LAST_STDOUT" | awk -F'\t' '$3 != "O" { exit 1 }' || log_fail "the open txg is not last"
# A committed txg that wrote blocks: writes, write I/Os and passes are all positive.
awk -F'\t' '$3 == "C" && $14 > 0 && $8 > 0 && $15 > $8 && $13 >= 1 { found = 1 } END { exit !found }' \
	"$LAST_STDOUT" || log_fail "no committed txg with plausible write figures"
# The same txg wrote space-map blocks (three copies each) and examined segments to allocate.
awk -F'\t' '$3 == "C" && $14 > 0 && $16 >= 3 && $16 % 3 == 0 && $20 >= 1 { found = 1 } END { exit !found }' \
	"$LAST_STDOUT" || log_fail "no committed txg with space-map writes and allocation figures"
# With the log space map (on by default) part of those writes are the log's, never more.
awk -F'\t' '$3 == "C" && $14 > 0 && $24 >= 3 && $24 <= $16 { found = 1 } END { exit !found }' \
	"$LAST_STDOUT" || log_fail "no committed txg with log writes within its space-map writes"

log_must tarn stat txgs -j "$TESTPOOL"
grep -q '"txgs"' "$LAST_STDOUT" || log_fail "no txgs array in -j output"
log_pass
