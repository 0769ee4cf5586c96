#!/usr/bin/env bash
# bench workloads: on a small generated tree, every workload (untar, git commit,
# git status, random writes (on tarn at recordsize 128K and 16K), rm -rf) runs on a tarn mount, on the null FUSE floor (over the
# same transport) and on the host's file system, and is printed with its baselines and ratios,
# then the requests each FUSE target served by opcode and the server's time per request of
# each opcode; -j is JSON with the same rows; over
# both transports (when the host has FUSE over io_uring on) each figure is also compared with
# /dev/fuse's and the ring serves the requests; the bench leaves no files, mounts or pools
# behind; bad arguments are refused.
. "$STF_SUITE/include/libtest.sh"
log_assert "bench workloads prints each workload beside its floor and the host file system"

dir="$SCRATCH/workloads"
args=(--dir "$dir" --files 200 --tree-size 2M --fio-size 16M --fio-seconds 1 --vdev-size 512M --no-btrfs)
log_must tarn bench workloads --fuse-transport dev "${args[@]}"
for row in "untar 200 files, s" "git add -A && git commit, s" "git status, s" \
	"4 KiB random buffered writes, IOPS" "4 KiB random buffered writes, IOPS, tarn recordsize 16K" \
	"rm -rf of the 200 files, s"; do
	for baseline in "host file system" "null FUSE floor over /dev/fuse"; do
		grep -F "$row: tarn over /dev/fuse" "$LAST_STDOUT" | grep -qF "$baseline" ||
			log_fail "no row for $row beside $baseline"
	done
done
sed -n '/^workload/,/^$/p' "$LAST_STDOUT" | awk 'NR > 1 && NF && $NF !~ /^[0-9.]+$/ { bad = 1 } END { exit bad }' ||
	log_fail "a row has no numeric ratio"
grep -qE '^create +[0-9]+\+0 +[0-9]+\+0$' "$LAST_STDOUT" || log_fail "no request counts for create over /dev/fuse"
# The server's time per create, for tarn and the floor: microseconds (not zero) and the rate.
grep -qE '^create( +[0-9]+\.[0-9] us [0-9]+/s){2}$' "$LAST_STDOUT" || log_fail "no server time per create"
! grep -qE '^create +0\.0 us' "$LAST_STDOUT" || log_fail "tarn's creates took no time"

log_must tarn bench workloads -j --fuse-transport dev "${args[@]}"
python3 - "$LAST_STDOUT" <<'PY' || log_fail "-j is not the rows as JSON"
import json, sys
rows = json.load(open(sys.argv[1]))["workloads"]
assert len(rows) == 12, rows
assert all(row["tarn"] > 0 and row["baseline_value"] > 0 for row in rows), rows
PY

if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
	log_must tarn bench workloads --fuse-transport dev,uring "${args[@]}"
	grep -F "untar 200 files, s: tarn over io_uring" "$LAST_STDOUT" | grep -qF "tarn over /dev/fuse" ||
		log_fail "no row comparing the ring with /dev/fuse"
	grep -F "untar 200 files, s: null FUSE floor over io_uring" "$LAST_STDOUT" | grep -qF "null FUSE floor over /dev/fuse" ||
		log_fail "no row comparing the floor's transports"
	# create: tarn and the floor over /dev/fuse, then both over the ring.
	grep -qE '^create +[0-9]+\+0 +[0-9]+\+0 +0\+[0-9]+ +0\+[0-9]+$' "$LAST_STDOUT" ||
		log_fail "the ring did not serve the creates"
fi
[ -z "$(ls -A "$dir" | grep -v '^\.' | grep -v lock)" ] || log_fail "files left behind: $(ls -A "$dir")"
! grep -q " $dir/" /proc/mounts || log_fail "a mount left behind"
log_mustnot tarn pool list benchwork

log_mustnot tarn bench workloads --dir "$dir" --files 0
log_mustnot tarn bench workloads --dir "$dir" --tree-size lots
log_mustnot_msg "unknown FUSE transport" tarn bench workloads --dir "$dir" --fuse-transport ring
log_mustnot_msg "not auto" tarn bench workloads --dir "$dir" --fuse-transport auto
log_pass
