#!/usr/bin/env bash
# pool iostat POOL: zpool iostat's header and columns; -H -p prints one tab-separated line of
# exact integers per vdev; writing a file shows write operations and bytes; -l adds eleven
# latency columns (a measured write wait is a positive number of nanoseconds, an unmeasured
# one is -), -q fourteen queue columns; -v adds a line per leaf.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool iostat prints zpool iostat's columns, and -H -p exact figures"

dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/iostat-file" bs=64k count=32 2>/dev/null ||
	log_fail "cannot write a file"
log_must tarn pool sync "$TESTPOOL"

log_must tarn pool iostat "$TESTPOOL"
header=$(sed -n 2p "$LAST_STDOUT" | tr -s ' ')
assert_eq "$header" "pool alloc free read write read write" "column names"
sed -n 1p "$LAST_STDOUT" | grep -q "capacity *operations *bandwidth" || log_fail "group line"

log_must tarn pool iostat -H -p "$TESTPOOL"
assert_eq "$(wc -l <"$LAST_STDOUT")" "1" "one line without -v"
awk -F'\t' -v pool="$TESTPOOL" 'NF != 7 || $1 != pool { bad = 1 }
	$2 !~ /^[0-9]+$/ || $3 !~ /^[0-9]+$/ || $5 !~ /^[0-9]+$/ || $7 !~ /^[0-9]+$/ { bad = 1 }
	$2 <= 0 || $5 <= 0 || $7 <= 0 { bad = 1 } END { exit bad }' "$LAST_STDOUT" ||
	log_fail "-H -p line is not pool, alloc, free, ops and bytes: $(last_stdout)"

log_must tarn pool iostat -H -p -l "$TESTPOOL"
awk -F'\t' 'NF != 18 { bad = 1 } $9 !~ /^[0-9]+$/ || $9 <= 0 { bad = 1 }
	$17 != "-" { bad = 1 } END { exit bad }' "$LAST_STDOUT" ||
	log_fail "-l: expected 18 fields, a write total_wait in ns and no trim wait: $(last_stdout)"

log_must tarn pool iostat -H -p -q "$TESTPOOL"
awk -F'\t' 'NF != 21 { bad = 1 } END { exit bad }' "$LAST_STDOUT" || log_fail "-q: 21 fields"

log_must tarn pool iostat -v -H "$TESTPOOL"
assert_eq "$(wc -l <"$LAST_STDOUT")" "2" "pool and leaf lines with -v"
grep -qF "$(vdev "$TESTPOOL")" "$LAST_STDOUT" || log_fail "-v does not name the leaf"

log_must tarn pool iostat -l -v "$TESTPOOL"
sed -n 1p "$LAST_STDOUT" | grep -q "total_wait *disk_wait *syncq_wait *asyncq_wait *scrub *trim *rebuild" ||
	log_fail "-l group line"
log_pass
