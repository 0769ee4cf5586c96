# shellcheck shell=bash
# Helpers for tarn's functional tests, in the spirit of the ZFS Test Suite's libtest.shlib.
#
# Every test and every setup/cleanup script sources this file. The runner (run.sh) exports:
#   TARN         absolute path of the tarn binary under test
#   TARN_SOCKET  this run's own daemon socket (never the system's /run/tarn/tarn.sock)
#   ALTROOT      this run's altroot: every pool is created and imported with -R "$ALTROOT"
#   VDEV_DIR     directory for this run's sparse vdev files;  VDEV_SIZE  their size (e.g. 256M)
#   TESTPOOL     the default pool name;  SCRATCH  an empty directory for this test (also its cwd)
#   STF_SUITE    the tests/functional directory
# A test ends with log_pass (exit 0), log_fail (exit 1) or log_unsupported (exit 4: SKIP); any
# other exit is a failure. Commands are run through log_must / log_mustnot, which record the
# command, its exit status and its output in the test's log, and fail the test on a panic.

TESTPOOL=${TESTPOOL:-testpool}
TESTPOOL2=${TESTPOOL2:-testpool2}

# Exit statuses the runner understands (as ZTS: 0 pass, 1 fail, 4 unsupported).
readonly STF_PASS=0 STF_FAIL=1 STF_UNSUPPORTED=4

# Output of the last command run through log_must / log_mustnot / run_tarn.
LAST_STDOUT="$SCRATCH/.last.stdout"
LAST_STDERR="$SCRATCH/.last.stderr"
LAST_STATUS=0

log_note() { echo "NOTE: $*"; }
log_assert() { echo "ASSERTION: $*"; }
log_pass() { echo "PASS: ${*:-test passed}"; exit "$STF_PASS"; }
log_fail() { echo "FAIL: $*" >&2; exit "$STF_FAIL"; }
log_unsupported() { echo "UNSUPPORTED: $*"; exit "$STF_UNSUPPORTED"; }

# tarn ARGS...: the binary under test (a function so that tests read like a shell session).
tarn() { "$TARN" "$@"; }

# Run a command, keep its output in $LAST_STDOUT / $LAST_STDERR and its status in $LAST_STATUS,
# copy both to the log, and fail the test if it panicked or was killed by a signal.
_run_logged() {
	"$@" >"$LAST_STDOUT" 2>"$LAST_STDERR"
	LAST_STATUS=$?
	echo "\$ $* [exit $LAST_STATUS]"
	sed 's/^/  | /' "$LAST_STDOUT"
	sed 's/^/  ! /' "$LAST_STDERR"
	if grep -q 'panicked' "$LAST_STDOUT" "$LAST_STDERR"; then
		log_fail "panic in: $*"
	fi
	if [ "$LAST_STATUS" -eq 101 ] || [ "$LAST_STATUS" -gt 128 ]; then
		log_fail "exit $LAST_STATUS (panic or signal) from: $*"
	fi
}

# log_must CMD...: CMD must succeed.
log_must() {
	_run_logged "$@"
	[ "$LAST_STATUS" -eq 0 ] || log_fail "expected success: $*"
}

# log_mustnot CMD...: CMD must fail cleanly: non-zero exit, no panic, a message on stderr.
log_mustnot() {
	_run_logged "$@"
	[ "$LAST_STATUS" -ne 0 ] || log_fail "expected failure: $*"
	[ -s "$LAST_STDERR" ] || log_fail "failed without a message on stderr: $*"
}

# log_mustnot_msg NEEDLE CMD...: as log_mustnot, and stderr contains NEEDLE (case-insensitive).
log_mustnot_msg() {
	local needle=$1
	shift
	log_mustnot "$@"
	grep -qiF -- "$needle" "$LAST_STDERR" || log_fail "stderr of '$*' should mention '$needle'"
}

# stdout_has / stderr_has NEEDLE: the last command's output contains NEEDLE (fixed string).
stdout_has() { grep -qF -- "$1" "$LAST_STDOUT" || log_fail "stdout should contain '$1'"; }
stdout_lacks() { ! grep -qF -- "$1" "$LAST_STDOUT" || log_fail "stdout should not contain '$1'"; }
stderr_has() { grep -qF -- "$1" "$LAST_STDERR" || log_fail "stderr should contain '$1'"; }
last_stdout() { cat "$LAST_STDOUT"; }

# assert_eq ACTUAL EXPECTED WHAT
assert_eq() {
	[ "$1" = "$2" ] || log_fail "$3: expected '$2', got '$1'"
}

# Names of the imported pools (those this run's daemon holds), one a line, sorted.
pool_names() { "$TARN" pool list -H -o name 2>/dev/null | sort; }

# exported_pool_ids DIR...: the ids (guids) of the pools `tarn pool import -d DIR...` lists, one
# a line: pools exported there, or left by a daemon killed without exporting them; not the
# imported ones, which pool_names gives, nor destroyed ones. pool list shows imported pools
# only, as zpool list does, so this is how the cleanup finds the rest.
exported_pool_ids() {
	local dir args=()
	for dir in "$@"; do args+=(-d "$dir"); done
	"$TARN" pool import "${args[@]}" 2>/dev/null | sed -n 's/^ *id: //p'
}

pool_is_imported() { pool_names | grep -qx -- "$1"; }

# The mount point of whatever is mounted exactly at PATH, from /proc/mounts ("" if nothing).
is_mounted() { awk -v p="$1" '$2 == p { found = 1 } END { exit !found }' /proc/mounts; }

# vdev PATH for NAME in this run's vdev directory.
vdev() { echo "$VDEV_DIR/$1.img"; }

# A digest of FILES (content and size), to prove that a refused command changed nothing.
digest() { cat -- "$@" | md5sum | cut -d' ' -f1; }

# create_pool NAME VDEVSPEC...: a pool under this run's altroot, missing vdev files created.
create_pool() {
	local name=$1
	shift
	log_must "$TARN" pool create -s "$VDEV_SIZE" -R "$ALTROOT" "$name" "$@"
}

# import_pool ARGS...: import from this run's vdev directory under this run's altroot.
import_pool() { log_must "$TARN" pool import -d "$VDEV_DIR" -R "$ALTROOT" "$@"; }

# default_setup: $TESTPOOL on one sparse vdev, mounted at $ALTROOT/$TESTPOOL.
default_setup() {
	create_pool "$TESTPOOL" "$(vdev "$TESTPOOL")"
	is_mounted "$ALTROOT/$TESTPOOL" || log_fail "$TESTPOOL is not mounted at $ALTROOT/$TESTPOOL"
}

# default_mirror_setup: $TESTPOOL on a two-way mirror.
default_mirror_setup() {
	create_pool "$TESTPOOL" mirror "$(vdev "$TESTPOOL-a")" "$(vdev "$TESTPOOL-b")"
}

# verify_pool POOL: `tarn check` finds no errors in an imported pool.
verify_pool() {
	log_must "$TARN" check "$1"
	stdout_has "no errors found"
}

# Pools a test damaged on purpose (blocks with no good copy, a suspended pool), which the
# cleanup's check must not count against it: a test names them with skip_final_check POOL.
UNCHECKED_POOLS=""
skip_final_check() { UNCHECKED_POOLS="$UNCHECKED_POOLS $*"; }

# check_before_destroy POOL: `tarn check` of a pool a test leaves behind, so that every test
# ends with its pools verified, whatever it set out to test (damage made where features meet
# shows here even when the test looked elsewhere). Only an imported pool that is ONLINE or
# DEGRADED is checked; prints why it fails and returns non-zero if the check finds errors.
check_before_destroy() {
	local pool=$1 health output
	case " $UNCHECKED_POOLS " in *" $pool "*) return 0 ;; esac
	health=$("$TARN" pool list -H -o health "$pool" 2>/dev/null)
	case "$health" in ONLINE | DEGRADED) ;; *) return 0 ;; esac
	if output=$("$TARN" check "$pool" 2>&1) && grep -q "no errors found" <<<"$output"; then
		return 0
	fi
	echo "FAIL: cleanup: tarn check $pool (left by the test) found errors:" >&2
	sed 's/^/  | /' <<<"$output" >&2
	return 1
}

# destroy_all_pools: check and destroy every pool this run's daemon holds, destroy the pools
# left exported on this test's files ($VDEV_DIR and $SCRATCH), and remove the vdev files, so
# that the next test starts from nothing. Used by default_cleanup and by tests' EXIT traps; a
# pool that fails its check (check_before_destroy) fails the script, whatever its status was.
# Under run.sh -k the pools are exported instead and their vdev files moved into this test's
# $SCRATCH, which is kept.
destroy_all_pools() {
	local pool id check_failed=0
	for pool in $(pool_names); do
		check_before_destroy "$pool" || check_failed=1
		if [ "${KEEP_WORK:-0}" -eq 1 ]; then
			"$TARN" pool export -f "$pool"
		else
			"$TARN" pool destroy -f "$pool" || "$TARN" pool export -f "$pool"
		fi
	done
	if [ "${KEEP_WORK:-0}" -ne 1 ]; then
		for id in $(exported_pool_ids "$VDEV_DIR" "$SCRATCH"); do
			"$TARN" pool destroy -f -d "$VDEV_DIR" -d "$SCRATCH" "$id" >/dev/null 2>&1
		done
	fi
	unmount_stale
	if [ "${KEEP_WORK:-0}" -eq 1 ]; then
		find "$VDEV_DIR" -maxdepth 1 -name '*.img' -exec mv -t "$SCRATCH" {} +
	fi
	rm -f "$VDEV_DIR"/*.img
	# Empty mountpoint directories left under the altroot would only confuse later tests.
	find "$ALTROOT" -xdev -mindepth 1 -depth -type d -empty -delete 2>/dev/null
	if [ "$check_failed" -eq 1 ]; then exit "$STF_FAIL"; fi
	return 0
}

# unmount_stale: lazily unmount whatever is still mounted under this run's altroot (a FUSE
# mount left by a killed daemon answers "Transport endpoint is not connected").
unmount_stale() {
	local mountpoint
	for mountpoint in $(awk -v root="$ALTROOT/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount -l "$mountpoint" 2>/dev/null || fusermount -uz "$mountpoint" 2>/dev/null || true
	done
}

default_cleanup() { destroy_all_pools; }

# daemon_pid: the pid of this run's daemon ("" if none).
daemon_pid() { cat "$TARN_SOCKET.pid" 2>/dev/null; }

# kill_daemon: kill -9 this run's daemon, as a crash would, and wait until it is gone.
kill_daemon() {
	local pid
	pid=$(daemon_pid)
	[ -n "$pid" ] || log_fail "no daemon pid in $TARN_SOCKET.pid"
	kill -9 "$pid"
	wait_for 30 "! kill -0 $pid 2>/dev/null" || log_fail "daemon $pid did not die"
	unmount_stale
}

# wait_for SECONDS SHELL-CONDITION: poll until the condition holds; false on timeout.
wait_for() {
	local deadline=$((SECONDS + $1))
	while ! eval "$2"; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}

# require_dataset_verbs: SKIP unless this tarn has the dataset verbs (tarn create ...).
require_dataset_verbs() {
	"$TARN" create --help >/dev/null 2>&1 || log_unsupported "this tarn has no dataset verbs (tarn create)"
}

# require_snapshot_verbs: SKIP unless this tarn has the snapshot verbs (tarn snapshot ...).
require_snapshot_verbs() {
	"$TARN" snapshot --help >/dev/null 2>&1 || log_unsupported "this tarn has no snapshot verbs (tarn snapshot)"
}

# require_python: SKIP unless python3 is available (JSON parsing).
require_python() {
	command -v python3 >/dev/null 2>&1 || log_unsupported "python3 is not installed"
}

# write_marked_file PATH BLOCKS [MARKER]: BLOCKS x 4 KiB of incompressible data, each 4 KiB
# starting with the 8-character MARKER (default TZTSMARK), so that a test can find the file's
# blocks inside a vdev file (a marker of its own per file finds one file's blocks). The data
# is made in $SCRATCH and copied in 1 MiB writes with O_DIRECT, each reaching the pool whole,
# so that each record is written once and no stale (freed) copy of it lingers in the vdev to be
# miscounted. (Through the page cache, write-back could send part of a record in one txg and the
# rest in the next: on a loaded CI machine a vdev held 527 markers of a 512-block file.)
write_marked_file() {
	local i staged="$SCRATCH/.marked.$$" marker=${3:-TZTSMARK}
	[ ${#marker} -eq 8 ] || log_fail "marker '$marker' is not 8 characters"
	for ((i = 0; i < $2; i++)); do
		printf '%s%08d' "$marker" "$i"
		head -c 4080 /dev/urandom
	done >"$staged"
	dd if="$staged" of="$1" bs=1M oflag=direct status=none || log_fail "cannot write $1"
	rm -f "$staged"
}

# damage_marked_blocks VDEV COUNT [MARKER]: overwrite the first COUNT 4 KiB pieces marked with
# MARKER (default TZTSMARK) in VDEV with random bytes (data blocks only: labels and metadata
# never hold the marker).
damage_marked_blocks() {
	local offsets offset
	offsets=$(grep -a -b -o "${3:-TZTSMARK}" "$1" | head -n "$2" | cut -d: -f1)
	[ -n "$offsets" ] || log_fail "no marked block found in $1"
	for offset in $offsets; do
		dd if=/dev/urandom of="$1" bs=4096 count=1 seek="$offset" oflag=seek_bytes conv=notrunc status=none ||
			log_fail "dd into $1 failed"
	done
}

# get_prop PROP DATASET: the exact (-p) value of one property.
get_prop() { "$TARN" get -H -p -o value "$1" "$2"; }

# get_source PROP DATASET: where the value comes from (default, local, inherited from NAME, -).
get_source() { "$TARN" get -H -o source "$1" "$2"; }

# assert_prop DATASET PROP VALUE [SOURCE]
assert_prop() {
	assert_eq "$(get_prop "$2" "$1")" "$3" "$2 of $1"
	[ $# -lt 4 ] || assert_eq "$(get_source "$2" "$1")" "$4" "source of $2 of $1"
}

# mounted_at DATASET: where DATASET is mounted, from /proc/mounts ("" if not mounted). Only
# mounts inside this run's work directory count: another run may mount a pool of the same name.
mounted_at() {
	awk -v fs="tarn:$1" -v work="${ALTROOT%/*}/" '$1 == fs && index($2, work) == 1 { print $2 }' /proc/mounts
}

# assert_mounted DATASET PATH / assert_unmounted DATASET
assert_mounted() { assert_eq "$(mounted_at "$1")" "$2" "mountpoint of $1"; }
assert_unmounted() { assert_eq "$(mounted_at "$1")" "" "mountpoint of $1 (should not be mounted)"; }
