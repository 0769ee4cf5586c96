#!/usr/bin/env bash
# Attach a second device to a single-device pool (it becomes a mirror, the new side is
# resilvered), detach the original: the pool lives on the new device alone, across export and
# import, with every file intact, check clean, and both commands in the pool's history.
. "$STF_SUITE/include/libtest.sh"
log_assert "attach makes a mirror and resilvers it; detach leaves the other side alone"

create_pool attached -O recordsize=4K -O compression=off "$(vdev at-a)"
write_marked_file "$ALTROOT/attached/data" 256
want=$(digest "$ALTROOT/attached/data")
truncate -s "$VDEV_SIZE" "$(vdev at-b)"
log_must tarn pool attach -w attached "$(vdev at-a)" "$(vdev at-b)"
log_must tarn pool status attached
stdout_has "mirror-0"
stdout_has "scan: resilvered"
stdout_has "with 0 errors"
awk -v dev="$(vdev at-b)" '$1 == dev { print $2 }' "$LAST_STDOUT" | grep -qx ONLINE || log_fail "at-b is not ONLINE"
verify_pool attached

log_must tarn pool detach attached "$(vdev at-a)"
log_must tarn pool status attached
stdout_lacks "mirror-0"
stdout_lacks "$(vdev at-a)"
stdout_has "$(vdev at-b)"
# The detached device no longer carries the pool's label: a listing does not name it.
log_must tarn pool export attached
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "attached"
import_pool attached
assert_eq "$(digest "$ALTROOT/attached/data")" "$want" "contents read from the new side alone"
log_must tarn pool status attached
stdout_lacks "$(vdev at-a)"
verify_pool attached
# The old device can be attached again (its label was cleared, no -f needed).
log_must tarn pool attach -w attached at-b.img "$(vdev at-a)"
log_must tarn pool history attached
stdout_has "tarn pool attach -w attached"
stdout_has "tarn pool detach attached"
log_must tarn pool destroy attached
log_pass
