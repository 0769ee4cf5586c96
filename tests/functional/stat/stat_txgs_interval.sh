#!/usr/bin/env bash
# stat txgs POOL INTERVAL COUNT: COUNT reports, INTERVAL apart; later reports print only txgs
# committed since, so no txg number repeats; bad intervals and unknown pools fail cleanly.
. "$STF_SUITE/include/libtest.sh"
log_assert "stat txgs repeats with INTERVAL and COUNT"

(for _ in 1 2 3; do sleep 0.3; "$TARN" pool sync "$TESTPOOL" >/dev/null; done) &
syncer=$!
start=$(date +%s%N)
log_must tarn stat txgs -H -p -o txg,state "$TESTPOOL" 0.5 3
wait "$syncer"
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
[ "$elapsed_ms" -ge 1000 ] || log_fail "3 reports 0.5 s apart took only $elapsed_ms ms"
committed=$(awk -F'\t' '$2 == "C" { print $1 }' "$LAST_STDOUT")
assert_eq "$(echo "$committed" | sort -n | uniq -d)" "" "a committed txg printed twice"
[ "$(echo "$committed" | wc -l)" -ge 3 ] || log_fail "syncs between reports do not show"

log_mustnot_msg "interval" tarn stat txgs "$TESTPOOL" 0
log_mustnot_msg "not imported" tarn stat txgs nosuchpool
log_pass
