#!/usr/bin/env bash
# Take a mirror side offline, write, export and import (it stays offline, its missed txgs
# shown), bring it online: a resilver copies what it missed, after which it alone holds the
# data; check is clean.
. "$STF_SUITE/include/libtest.sh"
log_assert "an offline side is resilvered when brought back online"

create_pool resilvered -O recordsize=4K -O compression=off mirror "$(vdev r-a)" "$(vdev r-b)"
write_marked_file "$ALTROOT/resilvered/before" 64
log_must tarn pool offline resilvered "$(vdev r-b)"
log_must tarn pool status resilvered
stdout_has "state: DEGRADED"
awk -v dev="$(vdev r-b)" '$1 == dev { print $2 }' "$LAST_STDOUT" | grep -qx OFFLINE || log_fail "r-b is not OFFLINE"
# The last usable side cannot go.
log_mustnot tarn pool offline resilvered "$(vdev r-a)"
stderr_has "no valid replicas"

write_marked_file "$ALTROOT/resilvered/missed" 256
want=$(digest "$ALTROOT/resilvered/before" "$ALTROOT/resilvered/missed")
log_must tarn pool sync resilvered
log_must tarn pool status resilvered
stdout_has "(missed txgs"
log_must tarn pool export resilvered
import_pool resilvered
log_must tarn pool status resilvered
awk -v dev="$(vdev r-b)" '$1 == dev { print $2 }' "$LAST_STDOUT" | grep -qx OFFLINE || log_fail "r-b is not OFFLINE after import"
stdout_has "(missed txgs"

log_must tarn pool online resilvered "$(vdev r-b)"
log_must tarn pool wait -t resilver resilvered
log_must tarn pool status resilvered
stdout_has "state: ONLINE"
stdout_has "scan: resilvered"
stdout_has "with 0 errors"
stdout_lacks "(missed txgs"
verify_pool resilvered

# Side b alone holds everything: damage every marked block of side a.
log_must tarn pool export resilvered
damage_marked_blocks "$(vdev r-a)" 320
import_pool resilvered
assert_eq "$(digest "$ALTROOT/resilvered/before" "$ALTROOT/resilvered/missed")" "$want" "contents read from side b alone"
log_must tarn pool destroy resilvered
log_pass
