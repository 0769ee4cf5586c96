#!/usr/bin/env bash
# bench run on a tarn mount: a random read job with O_DIRECT (so that every read
# reaches the daemon and its ARC, not the kernel's page cache) on the default pool's mount,
# preconditioned and synced first, sampled every second from the daemon's ARC table and iostat
# with a window of 5, reaches steady state, measures, writes its JSON record (every interval,
# the ten metrics' names, the L2ARC ones absent) and its SVG chart, removes its files, and
# replays through bench steady to the same first steady interval. (A buffered job would sit in
# the page cache until the kernel writes it back 30 s later, in one or two bursts: its verdict
# would depend on when those fall.)
. "$STF_SUITE/include/libtest.sh"
log_assert "bench run reaches steady state on a tarn mount and charts it"

mnt="$ALTROOT/$TESTPOOL"
log_must tarn bench run --directory "$mnt" --pool "$TESTPOOL" --rw randread --bs 4K --size 8M --direct \
	--precondition --interval 1 --window 5 --measure 1 --max-time 30 \
	--json "$SCRATCH/run.json" --chart "$SCRATCH/run.svg"
stdout_has "tarn pool $TESTPOOL: steady at interval"
grep -Eq '"steady_at": [0-9]+' "$SCRATCH/run.json" || log_fail "no steady_at in the record"
grep -q '"ending": "measured"' "$SCRATCH/run.json" || log_fail "the run did not measure"
for metric in arc_size_pct arc_mru_pct arc_data_pct arc_hit_pct pool_kops pool_mibps pool_lat_ms; do
	grep -q "\"$metric\"" "$SCRATCH/run.json" || log_fail "$metric missing from the record"
done
! grep -q '"l2_size_pct"' "$SCRATCH/run.json" || log_fail "L2ARC metrics recorded without an L2ARC"
head -c 4 "$SCRATCH/run.svg" | grep -q '<svg' || log_fail "the chart is not SVG"
grep -q 'pool_kops' "$SCRATCH/run.svg" || log_fail "the chart has no pool_kops panel"
[ ! -e "$mnt/tarn-bench-job.0" ] || log_fail "the workload's file was left behind"

steady_at=$(grep -Eo '"steady_at": [0-9]+' "$SCRATCH/run.json" | grep -Eo '[0-9]+$')
log_must tarn bench steady --replay "$SCRATCH/run.json"
stdout_has "steady at interval $steady_at "

# Without a pool to measure, or a pool the daemon does not hold: clear errors.
log_mustnot tarn bench run --directory "$mnt" --interval 1
stderr_has "--pool POOL"
log_mustnot tarn bench run --directory "$mnt" --pool nosuchpool --interval 1 --max-time 2
stderr_has "nosuchpool"
log_pass
