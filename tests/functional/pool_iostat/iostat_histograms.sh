#!/usr/bin/env bash
# pool iostat -w: 37 latency buckets from 1ns to 137s, eleven columns; -r: request sizes from
# 512 to 16M, ind and agg for seven classes; the txg's writes show up in the async write
# columns.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool iostat -w and -r print latency and request-size histograms"

dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/histogram-file" bs=128k count=16 2>/dev/null ||
	log_fail "cannot write a file"
log_must tarn pool sync "$TESTPOOL"

log_must tarn pool iostat -w "$TESTPOOL"
sed -n 2p "$LAST_STDOUT" | grep -q "^latency *read *write" || log_fail "-w header"
grep -q "^1ns " "$LAST_STDOUT" || log_fail "no 1ns row"
grep -q "^137s " "$LAST_STDOUT" || log_fail "no 137s row"

log_must tarn pool iostat -w -H -p "$TESTPOOL"
assert_eq "$(wc -l <"$LAST_STDOUT")" "37" "latency rows"
awk -F'\t' 'NF != 13 { bad = 1 } END { exit bad }' "$LAST_STDOUT" || log_fail "-w -H: 13 fields"
# Async write queue waits were measured (column 10: asyncq_wait write).
awk -F'\t' '{ sum += $10 } END { exit !(sum > 0) }' "$LAST_STDOUT" || log_fail "no async write queue waits"

log_must tarn pool iostat -r -H -p "$TESTPOOL"
assert_eq "$(wc -l <"$LAST_STDOUT")" "16" "request-size rows"
head -1 "$LAST_STDOUT" | awk -F'\t' '$2 != 512 || NF != 16 { exit 1 }' || log_fail "-r first row"
awk -F'\t' '{ sum += $9 + $10 } END { exit !(sum > 0) }' "$LAST_STDOUT" || log_fail "no async writes"

log_mustnot tarn pool iostat -w -l "$TESTPOOL"
stderr_has "cannot be combined"
log_pass
