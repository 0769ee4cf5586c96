#!/usr/bin/env bash
# RAID-Z expansion (OpenZFS 2.3's `zpool attach POOL raidz1-0 NEWDEV`) while the file system is
# mounted: a raidz1 of 4 gains a fifth child, the copy runs in the background and `pool wait -t
# raidz_expand` waits for it; `pool status` shows the `expand:` line while it runs (held at a
# point by raidz_expand_max_reflow_bytes, a second attach refused meanwhile) and once it has
# finished, `-j` the same as raidz_expand_stats, the history the internal start and completion
# records, and the pool grows. `attach -w` expands again to 6 and returns once it has finished.
# A device too small and a raidz vdev that does not exist are refused and change nothing. Every
# file reads back right after the expansions, across export and import, and check is clean.
. "$STF_SUITE/include/libtest.sh"
log_assert "attach to a raidz vdev expands it in the background; status, wait, history and size follow"
require_python

# A paused copy does not end by itself: a wait for it that has not returned after $1 seconds
# is what this expects.
wait_times_out() {
	timeout "$1" "$TARN" pool wait -t raidz_expand rz
	[ $? -eq 124 ] || log_fail "pool wait -t raidz_expand returned while the copy was held"
}

# The leaves under raidz1-0 in `pool status` and their states, one per line.
raidz_children() {
	"$TARN" pool status rz | awk -v dir="$VDEV_DIR/" 'index($1, dir) == 1 { print $1, $2 }'
}

# One field of raidz_expand_stats in `pool status -j -p`.
expand_stat() {
	"$TARN" pool status -j -p rz | python3 -c '
import json, sys
print(json.load(sys.stdin)["pools"]["rz"]["raidz_expand_stats"][sys.argv[1]])' "$1"
}

create_pool rz -O compression=off -O recordsize=16K \
	raidz1 "$(vdev rz-0)" "$(vdev rz-1)" "$(vdev rz-2)" "$(vdev rz-3)"
write_marked_file "$ALTROOT/rz/small" 4096 SMALLREC
log_must tarn create -o recordsize=128K rz/big
write_marked_file "$ALTROOT/rz/big/data" 8192 BIGBLOCK
want=$(digest "$ALTROOT/rz/small" "$ALTROOT/rz/big/data")
size_before=$(tarn pool list -H -p -o size rz)
log_must tarn pool status rz
stdout_lacks "expand:"

# Refusals: a device smaller than the children, a raidz vdev the pool does not have.
truncate -s 64M "$(vdev rz-tiny)"
log_mustnot_msg "too small" tarn pool attach rz raidz1-0 "$(vdev rz-tiny)"
truncate -s "$VDEV_SIZE" "$(vdev rz-4)"
log_mustnot_msg "raidz1-9" tarn pool attach rz raidz1-9 "$(vdev rz-4)"
assert_eq "$(raidz_children | wc -l)" 4 "children after the refused attaches"
log_must tarn pool status rz
stdout_lacks "expand:"
stdout_lacks "$(vdev rz-tiny)"
stdout_lacks "$(vdev rz-4)"
assert_eq "$(tarn pool list -H -p -o size rz)" "$size_before" "size after the refused attaches"

# The copy held at 32 MiB of the address space: in progress, paused, and one at a time.
log_must tarn pool export rz
log_must tarn daemon --stop
export TARN_TUNABLE_raidz_expand_max_reflow_bytes=$((32 << 20))
import_pool rz
log_must tarn pool attach rz raidz1-0 "$(vdev rz-4)"
wait_for 60 "\"\$TARN\" pool status rz | grep -q 'paused: stopped at raidz_expand_max_reflow_bytes'" ||
	log_fail "the copy did not stop at raidz_expand_max_reflow_bytes"
log_must tarn pool status rz
stdout_has "expand: expansion of raidz1-0 in progress since "
stdout_has "% done, paused: stopped at raidz_expand_max_reflow_bytes"
grep -A1 "^expand:" "$LAST_STDOUT" | grep -qE $'^\t[0-9.]+[KMG]? / [0-9.]+[KMG] copied, [0-9.]+% done, paused: ' ||
	log_fail "the expand: lines do not read as expected: $(grep -A1 '^expand:' "$LAST_STDOUT")"
assert_eq "$(raidz_children | wc -l)" 5 "children while the copy runs"
assert_eq "$(expand_stat state) $(expand_stat name) $(expand_stat waiting_for_resilver) $(expand_stat width)" \
	"SCANNING raidz1-0 1 5" "raidz_expand_stats while held"
reflowed=$(expand_stat reflowed)
[ "$reflowed" -gt 0 ] && [ "$reflowed" -lt "$(expand_stat to_reflow)" ] ||
	log_fail "reflowed $reflowed of $(expand_stat to_reflow) while held"
truncate -s "$VDEV_SIZE" "$(vdev rz-5)"
log_mustnot_msg "already in progress" tarn pool attach rz raidz1-0 "$(vdev rz-5)"
wait_times_out 3
assert_eq "$(digest "$ALTROOT/rz/small" "$ALTROOT/rz/big/data")" "$want" "contents while the copy is held"

# Export stops the copy, import goes on with it: let it run to the end.
log_must tarn pool export rz
log_must tarn daemon --stop
unset TARN_TUNABLE_raidz_expand_max_reflow_bytes
import_pool rz
log_must tarn pool wait -t raidz_expand rz
log_must tarn pool status rz
stdout_has "expand: expanded raidz1-0 copied "
grep -qE "^expand: expanded raidz1-0 copied [0-9.]+[KMG]? in [0-9]{2}:[0-9]{2}:[0-9]{2}, on [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}$" "$LAST_STDOUT" ||
	log_fail "the expand: line does not read as expected: $(grep '^expand:' "$LAST_STDOUT")"
stdout_lacks "expand: expansion of"
assert_eq "$(raidz_children | awk '$2 == "ONLINE"' | wc -l)" 5 "ONLINE children after the expansion"
raidz_children | grep -q "^$(vdev rz-4) ONLINE$" || log_fail "rz-4 is not an ONLINE child"
assert_eq "$(expand_stat state) $(expand_stat width) $(expand_stat waiting_for_resilver)" "FINISHED 5 0" \
	"raidz_expand_stats once finished"
assert_eq "$(expand_stat reflowed)" "$(expand_stat to_reflow)" "reflowed once finished"
[ "$(expand_stat copied)" -gt 0 ] || log_fail "nothing copied"
size_after=$(tarn pool list -H -p -o size rz)
log_note "size $size_before before the expansion, $size_after after"
# Four children's worth of space became five (less what rounds to whole metaslabs).
[ "$((size_after * 100))" -ge "$((size_before * 120))" ] ||
	log_fail "size $size_after after the expansion, $size_before before: it did not grow by a child"
log_must tarn pool history rz
stdout_has "tarn pool attach rz raidz1-0 $(vdev rz-4)"
stdout_has "[internal] raidz vdev expansion started: raidz1-0 new width 5, device $(vdev rz-4)"
stdout_has "[internal] raidz vdev expansion completed: raidz1-0 new width 5, copied "
stdout_lacks "$(vdev rz-5)"
assert_eq "$(digest "$ALTROOT/rz/small" "$ALTROOT/rz/big/data")" "$want" "contents after the expansion"

# Blocks written at the new width beside the old ones; a second expansion, waited for by -w.
write_marked_file "$ALTROOT/rz/big/after" 2048 AFTERWID
want_after=$(digest "$ALTROOT/rz/big/after")
log_must tarn pool wait rz
log_must tarn pool attach -w rz raidz1-0 "$(vdev rz-5)"
log_must tarn pool status rz
stdout_has "expand: expanded raidz1-0 copied "
assert_eq "$(raidz_children | awk '$2 == "ONLINE"' | wc -l)" 6 "ONLINE children after the second expansion"
assert_eq "$(expand_stat state) $(expand_stat width)" "FINISHED 6" "raidz_expand_stats of the second expansion"
[ "$(tarn pool list -H -p -o size rz)" -gt "$size_after" ] || log_fail "the second expansion did not grow the pool"
log_must tarn pool history rz
stdout_has "[internal] raidz vdev expansion completed: raidz1-0 new width 6, copied "

# Everything reads back after export and import, a scrub finds nothing, and check is clean.
log_must tarn pool wait rz
log_must tarn pool export rz
import_pool rz
log_must tarn pool status rz
stdout_has "expand: expanded raidz1-0 copied "
assert_eq "$(digest "$ALTROOT/rz/small" "$ALTROOT/rz/big/data")" "$want" "contents after export and import"
assert_eq "$(digest "$ALTROOT/rz/big/after")" "$want_after" "contents written between the expansions"
log_must tarn pool scrub -w rz
log_must tarn pool status rz
stdout_has "scan: scrub repaired 0B"
stdout_has "with 0 errors"
verify_pool rz
log_must tarn pool destroy rz
log_pass
