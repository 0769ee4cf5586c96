#!/usr/bin/env bash
# bench workloads: on a small generated tree, every workload (untar, git commit,
# git status, random writes, rm -rf) runs on a tarn mount and on the host's file system and
# is printed with its baseline and ratio; -j is JSON with the same rows; the bench leaves no
# files, mounts or pools behind; bad arguments are refused.
. "$STF_SUITE/include/libtest.sh"
log_assert "bench workloads prints each workload beside the host file system"

dir="$SCRATCH/workloads"
args=(--dir "$dir" --files 200 --tree-size 2M --fio-size 16M --fio-seconds 1 --vdev-size 512M --no-btrfs)
log_must tarn bench workloads "${args[@]}"
for row in "untar 200 files, s" "git add -A && git commit, s" "git status, s" \
	"4 KiB random buffered writes, IOPS" "rm -rf of the 200 files, s"; do
	grep -F "$row" "$LAST_STDOUT" | grep -q "host file system" || log_fail "no row for $row"
done
awk 'NR > 1 && $NF !~ /^[0-9.]+$/ { bad = 1 } END { exit bad }' "$LAST_STDOUT" ||
	log_fail "a row has no numeric ratio"

log_must tarn bench workloads -j "${args[@]}"
python3 - "$LAST_STDOUT" <<'PY' || log_fail "-j is not the rows as JSON"
import json, sys
rows = json.load(open(sys.argv[1]))["workloads"]
assert len(rows) == 5, rows
assert all(row["tarn"] > 0 and row["baseline_value"] > 0 for row in rows), rows
PY
[ -z "$(ls -A "$dir" | grep -v '^\.' | grep -v lock)" ] || log_fail "files left behind: $(ls -A "$dir")"
! grep -q " $dir/" /proc/mounts || log_fail "a mount left behind"
log_mustnot tarn pool list benchwork

log_mustnot tarn bench workloads --dir "$dir" --files 0
log_mustnot tarn bench workloads --dir "$dir" --tree-size lots
log_pass
