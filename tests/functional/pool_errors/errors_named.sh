#!/usr/bin/env bash
# Damage to the only copy of data blocks on a single-vdev pool: reads of the file
# fail with EIO and nothing panics; pool status counts the damaged file and -v names it by path;
# the error log survives export and import; once the file is rewritten the entry drops out.
# Before the error log, status said "No known data errors" here.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status -v names files with permanent errors"
trap destroy_all_pools EXIT

default_setup
log_must mkdir "$ALTROOT/$TESTPOOL/dir"
write_marked_file "$ALTROOT/$TESTPOOL/dir/victim" 64
log_must dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/fine" bs=64k count=4 status=none
fine=$(digest "$ALTROOT/$TESTPOOL/fine")
log_must tarn pool status "$TESTPOOL"
stdout_has "errors: No known data errors"
log_must tarn pool export "$TESTPOOL"
damage_marked_blocks "$(vdev "$TESTPOOL")" 8

import_pool "$TESTPOOL"
if cat "$ALTROOT/$TESTPOOL/dir/victim" >/dev/null 2>"$SCRATCH/read.err"; then
	log_fail "the damaged file read without an error"
fi
grep -q "Input/output error" "$SCRATCH/read.err" || log_fail "the read failed, but not with EIO: $(cat "$SCRATCH/read.err")"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/fine")" "$fine" "the undamaged file"

log_must tarn pool status "$TESTPOOL"
stdout_has "errors: 1 data error, use '-v' for a list"
stdout_lacks "dir/victim"
log_must tarn pool status -v "$TESTPOOL"
stdout_has "errors: Permanent errors have been detected in the following files:"
stdout_has "$TESTPOOL:/dir/victim"
stdout_lacks "fine"
log_must tarn pool status -j -p "$TESTPOOL"
count=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["pools"][sys.argv[1]]["error_count"])' "$TESTPOOL" <"$LAST_STDOUT")
assert_eq "$count" 1 "error_count in status -j -p"

# Kept in the pool: an export and import do not lose it.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
log_must tarn pool status -v "$TESTPOOL"
stdout_has "$TESTPOOL:/dir/victim"

# check finds the same file and says so per device; exit status non-zero.
_run_logged tarn check "$TESTPOOL"
[ "$LAST_STATUS" -ne 0 ] || log_fail "check exited 0 on unrecoverable damage"
stdout_has "unrecoverable blocks:"
grep -qE "device $(vdev "$TESTPOOL"): [0-9]+ bad copies \(0 repaired, [1-9][0-9]* unrecoverable\)" "$LAST_STDOUT" ||
	log_fail "check does not count the device's unrecoverable copies"
bad=$(sed -n 's/.*(\([0-9]*\) bad, \([0-9]*\) repaired).*/\1/p' "$LAST_STDOUT")
[ "${bad:-0}" -gt 0 ] || log_fail "check counted no bad copy although blocks are unreadable"

# Rewritten, the file's damaged blocks are no longer referenced: the entry drops out.
log_must dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/dir/victim" bs=64k count=4 status=none
log_must tarn pool sync "$TESTPOOL"
log_must tarn pool status -v "$TESTPOOL"
stdout_has "errors: No known data errors"
verify_pool "$TESTPOOL"
log_pass
