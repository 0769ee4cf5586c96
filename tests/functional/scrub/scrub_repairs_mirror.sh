#!/usr/bin/env bash
# Damage one side of a mirror (marked 4 KiB data blocks, past the labels): the file reads
# right, a scrub counts exactly the damaged blocks as checksum errors on that side and repairs
# them all, a second scrub finds nothing, and check is clean.
. "$STF_SUITE/include/libtest.sh"
log_assert "scrub finds and repairs every damaged block on one side of a mirror"

damaged=40
create_pool scrubbed -O recordsize=4K -O compression=off mirror "$(vdev s-a)" "$(vdev s-b)"
write_marked_file "$ALTROOT/scrubbed/data" 512
want=$(digest "$ALTROOT/scrubbed/data")
log_must tarn pool export scrubbed
damage_marked_blocks "$(vdev s-b)" "$damaged"
import_pool scrubbed
assert_eq "$(digest "$ALTROOT/scrubbed/data")" "$want" "file contents with side b damaged"

log_must tarn pool scrub scrubbed
log_must tarn pool wait -t scrub scrubbed
log_must tarn pool status scrubbed
stdout_has "scan: scrub repaired"
stdout_has "with 0 errors"
# The CKSUM column of side b counts every damaged block once; side a none.
cksum_b=$(awk -v dev="$(vdev s-b)" '$1 == dev { print $5 }' "$LAST_STDOUT")
cksum_a=$(awk -v dev="$(vdev s-a)" '$1 == dev { print $5 }' "$LAST_STDOUT")
log_note "injected $damaged damaged blocks; scrub counted $cksum_b on side b"
assert_eq "$cksum_b" "$damaged" "checksum errors on side b"
assert_eq "$cksum_a" "0" "checksum errors on side a"
log_must tarn pool status -j -p scrubbed
repaired=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pools"]["scrubbed"]["scan_stats"]["copies_bad"])' "$LAST_STDOUT")
assert_eq "$repaired" "$damaged" "bad copies the scrub found"

# Nothing left for a second scrub; check agrees.
log_must tarn pool scrub scrubbed
log_must tarn pool wait -t scrub scrubbed
log_must tarn pool status -j -p scrubbed
again=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pools"]["scrubbed"]["scan_stats"]["copies_bad"])' "$LAST_STDOUT")
assert_eq "$again" "0" "bad copies found by the second scrub"
verify_pool scrubbed

# Side b alone is whole now: damage every marked block of side a and read the file again.
log_must tarn pool export scrubbed
damage_marked_blocks "$(vdev s-a)" 512
import_pool scrubbed
assert_eq "$(digest "$ALTROOT/scrubbed/data")" "$want" "file contents from side b alone"
log_must tarn pool destroy scrubbed
log_pass
