#!/usr/bin/env bash
# bench steady --replay: a CSV series (a time column, columns named as the
# metrics, an empty cell for a failed collection) replays with the verdict of every interval;
# the thresholds are options; bad files are errors that name the file and the problem.
. "$STF_SUITE/include/libtest.sh"
log_assert "bench steady replays CSV series with the live run's rules"

series="$SCRATCH/series.csv"
{
	echo "t,pool_kops,pool_mibps,pool_lat_ms,arc_hit_pct"
	for t in 0 15 30 45; do echo "$t,$((t / 15 + 1)),$((t / 15 * 4 + 4)),2.0,99"; done
	for t in 60 75 90 105; do echo "$t,5,20,2.0,99"; done
	echo "120,5,20,,99"
} >"$series"
log_must tarn bench steady --replay "$series" --window 3
stdout_has "steady at interval 6 (t = 90), window 3"
# The failed cell: flagged, still counted steady (the system stays steady).
tail -n 3 "$LAST_STDOUT" | head -1 | grep -q -- '-\*!' || log_fail "the failed cell is not flagged"
log_must tarn bench steady --replay "$series" --window 3 -j
grep -q '"steady_at": 6' "$LAST_STDOUT" || log_fail "-j has no steady_at 6"
# A stricter range moves nothing here (flat is flat); a window of 9 is never full in time.
log_must tarn bench steady --replay "$series" --window 9
stdout_has "never steady in 9 intervals, window 9"

echo "t,pool_kopz" >"$SCRATCH/bad.csv"
echo "0,1" >>"$SCRATCH/bad.csv"
log_mustnot tarn bench steady --replay "$SCRATCH/bad.csv"
stderr_has "bad.csv: the CSV header names an unknown column \"pool_kopz\""
log_mustnot tarn bench steady --replay "$SCRATCH/missing.csv"
stderr_has "missing.csv"
log_pass
