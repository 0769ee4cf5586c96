#!/usr/bin/env bash
# A mirror side wiped while the pool was exported is not found at import: the pool imports
# DEGRADED without it. `pool status` once said only "put the missing device back", which is
# wrong advice for a disk that is back but blank: import never takes it again, only a replace
# in place does. Now status tells the two apart, as zpool's "corrupted data" and "cannot open"
# notes do: a blank disk at the path is "invalid label" (problem corrupt_label, action: replace
# in place), a path with nothing there is "cannot open" (problem missing_device).
. "$STF_SUITE/include/libtest.sh"
log_assert "status after import tells a blank mirror side from an absent one, and names replace"
require_python

# problem_of POOL: the pool's state, the reason of its problem (none), and why each leaf of its
# mirror cannot be used (its aux; None when it can), from `pool status -j`.
problem_of() {
    log_must tarn pool status -j "$1" >&2
    python3 -c '
import json, sys
pool = json.load(sys.stdin)["pools"][sys.argv[1]]
mirror = pool["vdevs"][sys.argv[1]]["vdevs"]["mirror-0"]
leaves = [mirror["vdevs"][name] for name in sorted(mirror["vdevs"])]
print(pool["state"], pool.get("reason", "none"), " ".join(str(c.get("aux")) for c in leaves))
' "$1" <"$LAST_STDOUT" || log_fail "status -j does not have the documented shape"
}

create_pool ib -O recordsize=4K -O compression=off mirror "$(vdev ib-a)" "$(vdev ib-b)"
write_marked_file "$ALTROOT/ib/data" 64
want=$(digest "$ALTROOT/ib/data")
log_must tarn pool export ib

# Side b comes back blank: every byte zero, labels included.
size=$(stat -c %s "$(vdev ib-b)")
log_must dd if=/dev/zero of="$(vdev ib-b)" bs=1M count=$((size >> 20)) conv=notrunc status=none
import_pool ib
log_must tarn pool status ib
grep -F -- "$(vdev ib-b)" "$LAST_STDOUT" | grep -q "UNAVAIL.*invalid label" ||
    log_fail "the blank side's line does not say UNAVAIL ... invalid label"
stdout_has "label is missing or invalid"
stdout_has "tarn pool replace ib"
stdout_lacks "put the missing device back"
assert_eq "$(problem_of ib)" "DEGRADED corrupt_label None invalid label" "status -j of a blank side"

# Replace in place takes it back whole.
log_must tarn pool replace -w ib "$(vdev ib-b)"
assert_eq "$(problem_of ib)" "ONLINE none None None" "status -j after the replace"
assert_eq "$(digest "$ALTROOT/ib/data")" "$want" "contents after the replace"
verify_pool ib

# With nothing at the path, the side cannot be opened: that is a missing device. (Moved out
# of the directory import searches: within it, import would find it by its label.)
away="$(dirname "$VDEV_DIR")/ib-b.away"
log_must tarn pool export ib
log_must mv "$(vdev ib-b)" "$away"
import_pool ib
log_must tarn pool status ib
grep -F -- "$(vdev ib-b)" "$LAST_STDOUT" | grep -q "UNAVAIL.*cannot open" ||
    log_fail "the absent side's line does not say UNAVAIL ... cannot open"
stdout_has "could not be opened"
assert_eq "$(problem_of ib)" "DEGRADED missing_device None cannot open" "status -j of an absent side"
log_must tarn pool export ib
log_must mv "$away" "$(vdev ib-b)"
import_pool ib
assert_eq "$(digest "$ALTROOT/ib/data")" "$want" "contents with both sides back"
log_must tarn pool destroy ib
log_pass
