#!/usr/bin/env bash
# A scrub's findings show in pool status at once, without a re-import. Damage with no good
# copy (a single-vdev pool, blocks of two files overwritten): right after the scrub the damaged
# files are named by `status -v` (and counted without -v and in -j), with the data corruption
# status and action lines; the entries are on disk after the next sync (a kill -9 and import
# keep them). Damage a mirror repairs (one side): the device's checksum errors give the
# "applications are unaffected" status, and there are no data errors; `pool clear` ends it.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status names the files a scrub found damaged, with status and action lines"
require_python

cleanup() {
	local pool
	for pool in scrubbad scrubfix; do
		pool_is_imported "$pool" && "$TARN" pool destroy -f "$pool"
	done
	return 0
}
trap cleanup EXIT

# problem_of_last: the problem's reason, the error count and the files named (errlist) by the
# last `pool status -v -j`.
problem_of_last() {
	python3 -c '
import json, sys
(pool,) = json.load(open(sys.argv[1]))["pools"].values()
print(pool.get("reason", "none"), pool["error_count"], " ".join(pool.get("errlist", [])))
' "$LAST_STDOUT"
}

# Unrecoverable: the only copy of 3 blocks of /a and 2 of /dir/b.
create_pool scrubbad -O recordsize=4K -O compression=off "$(vdev scrubbad)"
log_must mkdir "$ALTROOT/scrubbad/dir"
write_marked_file "$ALTROOT/scrubbad/a" 32 SCRUBDMA
write_marked_file "$ALTROOT/scrubbad/dir/b" 32 SCRUBDMB
write_marked_file "$ALTROOT/scrubbad/intact" 32 SCRUBOK0
log_must tarn pool export scrubbad
damage_marked_blocks "$(vdev scrubbad)" 3 SCRUBDMA
damage_marked_blocks "$(vdev scrubbad)" 2 SCRUBDMB
import_pool scrubbad
log_must tarn pool status -v scrubbad
stdout_has "errors: No known data errors"

log_must tarn pool scrub scrubbad
log_must tarn pool wait -t scrub scrubbad
log_must tarn pool status -v scrubbad
stdout_has "scan: scrub repaired 0B in"
stdout_has "with 5 errors on"
stdout_has "status: one or more devices has experienced an error resulting in data corruption; applications may be affected."
stdout_has "action: restore the file in question if possible, otherwise restore the entire pool from backup."
stdout_has "   see: 'tarn pool status -v scrubbad' names the damaged files"
stdout_has "errors: Permanent errors have been detected in the following files:"
files=$(sed -n '/^errors: Permanent errors/,$p' "$LAST_STDOUT" | awk 'NF == 1 { print $1 }' | tr '\n' ' ')
assert_eq "$files" "scrubbad:/a scrubbad:/dir/b " "files named right after the scrub"
stdout_lacks "No known data errors"
stdout_lacks "intact"
cksum=$(awk -v dev="$(vdev scrubbad)" '$1 == dev { print $5 }' "$LAST_STDOUT")
[ "${cksum:-0}" -ge 5 ] || log_fail "checksum errors on the vdev: '$cksum', expected at least 5"
log_must tarn pool status scrubbad
stdout_has "errors: 2 data errors, use '-v' for a list"
stdout_has "status: one or more devices has experienced an error resulting in data corruption"
log_must tarn pool status -v -j scrubbad
assert_eq "$(problem_of_last)" "corrupt_data 2 scrubbad:/a scrubbad:/dir/b" "status -v -j"

# On disk once the next txg is synced: a crash and an import keep them.
log_must tarn pool sync scrubbad
kill_daemon
import_pool scrubbad
log_must tarn pool status -v -j scrubbad
assert_eq "$(problem_of_last)" "corrupt_data 2 scrubbad:/a scrubbad:/dir/b" "status -v -j after kill -9 and import"
log_must tarn pool destroy scrubbad

# Repairable: 10 blocks damaged on one side of a mirror only.
create_pool scrubfix -O recordsize=4K -O compression=off mirror "$(vdev scrubfix-a)" "$(vdev scrubfix-b)"
write_marked_file "$ALTROOT/scrubfix/data" 64 SCRUBFIX
log_must tarn pool export scrubfix
damage_marked_blocks "$(vdev scrubfix-b)" 10 SCRUBFIX
import_pool scrubfix
log_must tarn pool scrub scrubfix
log_must tarn pool wait -t scrub scrubfix
log_must tarn pool status -v scrubfix
stdout_has "scan: scrub repaired"
stdout_has "with 0 errors on"
stdout_has "status: one or more devices has experienced an unrecoverable error; an attempt was made to correct the error; applications are unaffected."
stdout_has "action: determine if the device needs to be replaced, and clear the errors using 'tarn pool clear scrubfix' or replace the device with 'tarn pool replace scrubfix DEVICE NEW_DEVICE'."
stdout_has "errors: No known data errors"
stdout_lacks "data corruption"
stdout_lacks "   see: "
cksum=$(awk -v dev="$(vdev scrubfix-b)" '$1 == dev { print $5 }' "$LAST_STDOUT")
assert_eq "$cksum" "10" "checksum errors on the damaged side"
log_must tarn pool status -v -j scrubfix
assert_eq "$(problem_of_last)" "failing_device 0 " "status -v -j of the repaired mirror"
# Cleared, the pool has nothing to explain.
log_must tarn pool clear scrubfix
log_must tarn pool status -v scrubfix
stdout_lacks "status: "
stdout_lacks "action: "
log_must tarn pool status -v -j scrubfix
assert_eq "$(problem_of_last)" "none 0 " "status -v -j after pool clear"
log_must tarn pool destroy scrubfix
log_pass
