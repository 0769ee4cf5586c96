#!/usr/bin/env bash
# pool list: a header with the documented columns and one row per pool, sizes that add up.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool list shows NAME SIZE ALLOC FREE FRAG CAP HEALTH, one row per pool"

log_must tarn pool list
assert_eq "$(head -n 1 "$LAST_STDOUT" | tr -s ' ')" "NAME SIZE ALLOC FREE FRAG CAP HEALTH" "header"
assert_eq "$(awk 'NR > 1 { print $1, $7 }' "$LAST_STDOUT")" "$TESTPOOL ONLINE" "rows"
log_must tarn pool list "$TESTPOOL"
assert_eq "$(wc -l <"$LAST_STDOUT")" 2 "lines for one pool"
log_must tarn pool list -H -p
IFS=$'\t' read -r name size alloc free frag cap health <"$LAST_STDOUT"
assert_eq "$name" "$TESTPOOL" "name"
assert_eq "$health" ONLINE "health"
for value in "$size" "$alloc" "$free" "$frag" "$cap"; do
	[[ $value =~ ^[0-9]+$ ]] || log_fail "-p value '$value' is not an exact number"
done
assert_eq "$((alloc + free))" "$size" "alloc + free"
[ "$alloc" -gt 0 ] || log_fail "alloc is 0"
[ "$cap" -le 100 ] && [ "$frag" -le 100 ] || log_fail "cap $cap or frag $frag above 100"
log_pass
