#!/usr/bin/env bash
# tarn's functional test runner, in the spirit of the ZFS Test Suite's zfs-tests.sh.
#
# Reads a runfile (runfiles/common.run: areas, their tests, setup, cleanup, tags; format in
# README.md), runs the selected tests as CLI-level shell scripts against a tarn binary, and
# prints one line per test: PASS, FAIL or SKIP, its time, and area/test; then a summary with
# "N passed, N failed" and the log directory. Each run has a work directory of its own holding
# its daemon socket (TARN_SOCKET), its altroot (every pool is created and imported with -R, so
# nothing mounts outside it), its sparse vdev files and its logs; at the end, even on failure
# or interrupt, the daemon exports every pool and stops, and stale mounts are removed.
set -uo pipefail

SUITE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SUITE/../.." && pwd)

usage() {
	cat <<USAGE
Usage: $(basename "$0") [-vqk] [-T TAGS] [-a AREAS] [-t TEST] [-j N] [-d DIR] [-s SIZE] [-I N] [-b TARN] [-r RUNFILE]
  -v          verbose: show each test's output on the terminal
  -q          quiet: print only failures and the summary
  -k          keep the work directory: each test's pools are exported, not destroyed, and
              their vdev files moved to the test's scratch directory
  -T TAGS     run only the areas carrying one of these tags (comma-separated)
  -a AREAS    run only these areas (comma-separated names)
  -j N        run the selected areas in N lanes at once, each a run of its own (its own
              work directory, daemon, pools and mounts), areas shared out by their tests'
              weight; the lanes' outputs follow one another, then the totals
  -t TEST     run one test: area/test, test, or the path of its script
  -d DIR      directory for the sparse vdev files (default: in the work directory)
  -s SIZE     size of each vdev file (default 256M)
  -I N        run the selection N times (default 1)
  -b TARN     the tarn binary (default: target/debug/tarn; build it with cargo build -p tarn-cli)
  -r RUNFILE  the runfile (default: runfiles/common.run)
  -F TRANSPORT  the FUSE transport of the daemon's mounts: auto, uring or dev (default: the
              daemon's own, auto); the run sets TARN_FUSE_TRANSPORT for it
The work directory is a fresh mktemp directory under \$TMPDIR or /var/tmp; its logs/ are kept.
USAGE
}

verbose=0 quiet=0 keep=0 tags="" only="" vdev_dir="" vdev_size=256M iterations=1 only_areas="" lanes=1
tarn="$REPO/target/debug/tarn" runfile="$SUITE/runfiles/common.run"
while getopts "vqkT:a:t:j:d:s:I:b:r:F:h" option; do
	case $option in
	v) verbose=1 ;;
	q) quiet=1 ;;
	k) keep=1 ;;
	T) tags=$OPTARG ;;
	a) only_areas=$OPTARG ;;
	j) lanes=$OPTARG ;;
	F) fuse_transport=$OPTARG ;;
	t) only=$OPTARG ;;
	d) vdev_dir=$OPTARG ;;
	s) vdev_size=$OPTARG ;;
	I) iterations=$OPTARG ;;
	b) tarn=$OPTARG ;;
	r) runfile=$OPTARG ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "run.sh: unexpected argument '$1'" >&2; usage >&2; exit 2; }
[[ $iterations =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -I wants a positive count, not '$iterations'" >&2; exit 2; }
case "${fuse_transport:=}" in
	"" | auto | uring | dev) ;;
	*) echo "run.sh: -F wants auto, uring or dev, not '$fuse_transport'" >&2; exit 2 ;;
esac
[[ $lanes =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -j wants a positive count, not '$lanes'" >&2; exit 2; }
[ -x "$tarn" ] || { echo "run.sh: no tarn binary at $tarn (build it: cargo build -p tarn-cli, or name it with -b)" >&2; exit 2; }
[ -r "$runfile" ] || { echo "run.sh: cannot read runfile $runfile" >&2; exit 2; }
tarn=$(cd "$(dirname "$tarn")" && pwd)/$(basename "$tarn")
[ "$(id -u)" -eq 0 ] || echo "run.sh: warning: not root; mounting through FUSE may fail" >&2

# --- The runfile: areas in order, and per area its tags, setup, cleanup, timeout, tests.
declare -a areas=()
declare -A area_tags=() area_setup=() area_cleanup=() area_timeout=() area_tests=() area_known=()
declare -A area_weight=()
parse_runfile() {
	local line key value area="" number=0
	while IFS= read -r line || [ -n "$line" ]; do
		number=$((number + 1))
		line=${line%%#*}
		line=$(echo "$line" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
		[ -n "$line" ] || continue
		if [[ $line =~ ^\[([A-Za-z0-9_.-]+)\]$ ]]; then
			area=${BASH_REMATCH[1]}
			areas+=("$area")
			area_tags[$area]="" area_setup[$area]="" area_cleanup[$area]=""
			area_timeout[$area]=300 area_tests[$area]="" area_known[$area]="" area_weight[$area]=0
			continue
		fi
		if [ -z "$area" ] || ! [[ $line =~ ^([a-z_]+)[[:space:]]*=[[:space:]]*(.*)$ ]]; then
			echo "run.sh: $runfile:$number: expected [area] or key = value" >&2
			exit 2
		fi
		key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]//,/ }
		case $key in
		tags) area_tags[$area]+=" $value" ;;
		setup) area_setup[$area]=$value ;;
		cleanup) area_cleanup[$area]=$value ;;
		timeout) area_timeout[$area]=$value ;;
		tests) area_tests[$area]+=" $value" ;;
		known_failures) area_known[$area]+=" $value" ;;
		weight) area_weight[$area]=$value ;;
		*) echo "run.sh: $runfile:$number: unknown key '$key'" >&2; exit 2 ;;
		esac
	done <"$runfile"
}
parse_runfile

# --- Selection: which tests of which areas run (-T, -t).
declare -A selected=()
only_name=${only%.sh}
only_name=${only_name#"$SUITE"/}
only_name=${only_name#tests/functional/}
matched=0
for area in "${areas[@]}"; do
	if [ -n "$tags" ]; then
		wanted=0
		for tag in ${tags//,/ }; do
			for have in ${area_tags[$area]}; do [ "$tag" = "$have" ] && wanted=1; done
		done
		[ "$wanted" -eq 1 ] || continue
	fi
	if [ -n "$only_areas" ] && [[ ",$only_areas," != *",$area,"* ]]; then
		continue
	fi
	list=""
	for test in ${area_tests[$area]}; do
		if [ -z "$only" ] || [ "$only_name" = "$area/$test" ] || [ "$only_name" = "$test" ]; then
			list+=" $test"
			matched=$((matched + 1))
		fi
	done
	[ -z "$list" ] || selected[$area]=$list
done
if [ "$matched" -eq 0 ]; then
	echo "run.sh: no test matches${only:+ -t $only}${tags:+ -T $tags}" >&2
	exit 2
fi

# --- Lanes (-j): the selected areas shared out among runs of this script that go at once.
# An area stays whole in one lane (its setup and cleanup bracket its tests). Areas go, heaviest
# first, to the lane with the least weight so far; an area's weight is its runfile `weight`
# (seconds its tests took, measured), else 10 per test.
if [ "$lanes" -gt 1 ]; then
	declare -a lane_areas=() lane_load=()
	for ((lane = 0; lane < lanes; lane++)); do lane_areas[lane]="" lane_load[lane]=0; done
	weighed=$(for area in "${!selected[@]}"; do
		weight=${area_weight[$area]}
		# shellcheck disable=SC2086
		[ "$weight" -gt 0 ] || weight=$((10 * $(echo ${selected[$area]} | wc -w)))
		echo "$weight $area"
	done | sort -rn)
	while read -r weight area; do
		lightest=0
		for ((lane = 1; lane < lanes; lane++)); do
			[ "${lane_load[lane]}" -lt "${lane_load[lightest]}" ] && lightest=$lane
		done
		lane_areas[lightest]+="${lane_areas[lightest]:+,}$area"
		lane_load[lightest]=$((lane_load[lightest] + weight))
	done <<<"$weighed"
	lane_dir=$(mktemp -d "${TMPDIR:-/var/tmp}/tarn-functional-lanes.XXXXXX") || exit 2
	declare -a lane_pids=()
	started_run=$(date +%s)
	for ((lane = 0; lane < lanes; lane++)); do
		[ -n "${lane_areas[lane]}" ] || continue
		args=(-a "${lane_areas[lane]}" -s "$vdev_size" -I "$iterations" -b "$tarn" -r "$runfile")
		[ "$verbose" -eq 0 ] || args+=(-v)
		[ "$quiet" -eq 0 ] || args+=(-q)
		[ "$keep" -eq 0 ] || args+=(-k)
		[ -z "$tags" ] || args+=(-T "$tags")
		[ -z "$only" ] || args+=(-t "$only")
		[ -z "$vdev_dir" ] || args+=(-d "$vdev_dir/lane$lane")
		[ -z "$fuse_transport" ] || args+=(-F "$fuse_transport")
		bash "$0" "${args[@]}" >"$lane_dir/lane$lane.out" 2>&1 &
		lane_pids[lane]=$!
	done
	lanes_failed=0
	for lane in "${!lane_pids[@]}"; do
		wait "${lane_pids[lane]}" || lanes_failed=1
	done
	total_passed=0 total_failed=0 total_skipped=0
	for lane in "${!lane_pids[@]}"; do
		echo "== lane $((lane + 1)) of $lanes: ${lane_areas[lane]//,/ } (weight ${lane_load[lane]})"
		cat "$lane_dir/lane$lane.out"
		counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$lane_dir/lane$lane.out" | tail -n 1)
		[ -n "$counts" ] || { counts="0 passed, 1 failed"; echo "lane $((lane + 1)) did not finish"; }
		total_passed=$((total_passed + ${counts%% *}))
		counts=${counts#*, }
		total_failed=$((total_failed + ${counts%% *}))
		lane_skipped=$(grep -E '^[0-9]+ skipped$' "$lane_dir/lane$lane.out" | tail -n 1)
		total_skipped=$((total_skipped + ${lane_skipped%% *}))
	done
	rm -rf "$lane_dir"
	echo
	echo "Results: $(($(date +%s) - started_run))s in $lanes lanes, tarn $("$tarn" --version 2>/dev/null | sed 's/^tarn //')${fuse_transport:+, FUSE transport $fuse_transport}"
	echo "$total_skipped skipped"
	echo "$total_passed passed, $total_failed failed"
	[ "$total_failed" -eq 0 ] && [ "$lanes_failed" -eq 0 ]
	exit
fi

# --- The work directory and the environment the tests see.
work=$(mktemp -d "${TMPDIR:-/var/tmp}/tarn-functional.XXXXXX") || exit 2
logs="$work/logs"
mkdir -p "$logs" "$work/run" "$work/altroot" "$work/scratch"
if [ -z "$vdev_dir" ]; then
	vdev_dir="$work/vdevs"
	mkdir -p "$vdev_dir"
else
	mkdir -p "$vdev_dir" || exit 2
	vdev_dir=$(cd "$vdev_dir" && pwd)
fi
for key in $(env | sed -n 's/^\(TARN_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$key"; done
export TARN="$tarn" TARN_SOCKET="$work/run/tarn.sock" ALTROOT="$work/altroot"
[ -z "$fuse_transport" ] || export TARN_FUSE_TRANSPORT="$fuse_transport"
export VDEV_DIR="$vdev_dir" VDEV_SIZE="$vdev_size" STF_SUITE="$SUITE" KEEP_WORK="$keep"

# Stop the daemon (it exports every pool), kill it if it does not go, and remove stale mounts.
teardown() {
	local pid
	"$TARN" daemon --stop >>"$logs/teardown.log" 2>&1
	pid=$(cat "$TARN_SOCKET.pid" 2>/dev/null)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		sleep 2
		kill -9 "$pid" 2>/dev/null
	fi
	awk -v root="$work/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r |
		while read -r mountpoint; do umount -l "$mountpoint" 2>/dev/null; done
	[ -f "$TARN_SOCKET.log" ] && cp "$TARN_SOCKET.log" "$logs/daemon.log"
	if [ "$keep" -eq 0 ]; then
		rm -rf "$work/vdevs" "$work/altroot" "$work/run" "$work/scratch"
		[ "$vdev_dir" = "$work/vdevs" ] || rm -f "$vdev_dir"/*.img
	fi
}
trap teardown EXIT
trap 'echo "run.sh: interrupted; log directory: $logs" >&2; exit 130' INT TERM

passed=0 failed=0 skipped=0 known=0
declare -a failures=()

# run_one AREA NAME SCRIPT KIND: run SCRIPT with a timeout, print its line, count its result.
# KIND is "test" or "setup"/"cleanup". Sets $result to PASS, FAIL or SKIP.
run_one() {
	local area=$1 name=$2 script=$3 kind=$4 log status started elapsed note="" log_before
	log="$logs/$iteration/$area/$name.log"
	mkdir -p "$(dirname "$log")"
	export SCRATCH="$work/scratch/$area/$name"
	rm -rf "$SCRATCH"
	mkdir -p "$SCRATCH"
	log_before=$(stat -c %s "$TARN_SOCKET.log" 2>/dev/null || echo 0)
	started=$(date +%s%N)
	if [ ! -f "$script" ]; then
		echo "no such script: $script" >"$log"
		status=1
	elif [ "$verbose" -eq 1 ]; then
		(cd "$SCRATCH" && timeout -k 10 "${area_timeout[$area]}" bash "$script") 2>&1 | tee "$log"
		status=${PIPESTATUS[0]}
	else
		(cd "$SCRATCH" && timeout -k 10 "${area_timeout[$area]}" bash "$script") >"$log" 2>&1
		status=$?
	fi
	elapsed=$(( ($(date +%s%N) - started) / 1000000 ))
	case $status in
	0) result=PASS ;;
	4) result=SKIP ;;
	124 | 137) result=FAIL note=" (timed out after ${area_timeout[$area]}s)" ;;
	*) result=FAIL ;;
	esac
	# A panic in the daemon fails the test that caused it, whatever the script concluded.
	if [ -f "$TARN_SOCKET.log" ] && tail -c +"$((log_before + 1))" "$TARN_SOCKET.log" | grep -q panicked; then
		result=FAIL note=" (the daemon panicked: see $logs/daemon.log)"
		tail -c +"$((log_before + 1))" "$TARN_SOCKET.log" >>"$log"
	fi
	if [ "$result" = FAIL ] && [ "$kind" = test ] && [[ " ${area_known[$area]} " == *" $name "* ]]; then
		note="$note (known failure)"
		known=$((known + 1))
		result=KNOWN
	fi
	case $result in
	PASS) passed=$((passed + 1)) ;;
	SKIP) skipped=$((skipped + 1)) ;;
	FAIL) failed=$((failed + 1)); failures+=("$area/$name$note: $log") ;;
	esac
	local shown=$result
	[ "$shown" = KNOWN ] && shown=FAIL
	if [ "$quiet" -eq 0 ] || [ "$shown" = FAIL ]; then
		printf '%-4s  %6s  %s%s\n' "$shown" "$(printf '%d.%01ds' $((elapsed / 1000)) $((elapsed % 1000 / 100)))" "$area/$name" "$note"
		if [ "$result" = FAIL ] && [ "$verbose" -eq 0 ]; then
			tail -n 15 "$log" | sed 's/^/        /'
		fi
	fi
	[ "$shown" = FAIL ] && return 1
	return 0
}

started_run=$(date +%s)
for ((iteration = 1; iteration <= iterations; iteration++)); do
	[ "$iterations" -eq 1 ] || [ "$quiet" -eq 1 ] || echo "== iteration $iteration of $iterations"
	for area in "${areas[@]}"; do
		[ -n "${selected[$area]:-}" ] || continue
		setup_ok=1
		if [ -n "${area_setup[$area]}" ]; then
			run_one "$area" "${area_setup[$area]}" "$SUITE/$area/${area_setup[$area]}.sh" setup || setup_ok=0
		fi
		for test in ${selected[$area]}; do
			if [ "$setup_ok" -eq 1 ]; then
				run_one "$area" "$test" "$SUITE/$area/$test.sh" test
			else
				skipped=$((skipped + 1))
				[ "$quiet" -eq 1 ] || printf '%-4s  %6s  %s (setup failed)\n' SKIP 0.0s "$area/$test"
			fi
		done
		if [ -n "${area_cleanup[$area]}" ]; then
			run_one "$area" "${area_cleanup[$area]}" "$SUITE/$area/${area_cleanup[$area]}.sh" cleanup
		fi
	done
done

echo
echo "Results: $(($(date +%s) - started_run))s, tarn $("$TARN" --version 2>/dev/null | sed 's/^tarn //')${fuse_transport:+, FUSE transport $fuse_transport}"
if [ "${#failures[@]}" -gt 0 ]; then
	echo "Failures:"
	printf '  %s\n' "${failures[@]}"
fi
[ "$known" -eq 0 ] || echo "$known known failures (listed in the runfile)"
echo "$skipped skipped"
echo "$passed passed, $failed failed"
echo "log directory: $logs"
[ "$failed" -eq 0 ]
