#!/usr/bin/env bash
# Add a top-level vdev to a pool: -n changes nothing, the add grows the pool and new writes
# land on it, export and import keep it; a single device beside a mirror is refused without -f.
. "$STF_SUITE/include/libtest.sh"
log_assert "add grows a pool by a top-level vdev that takes new allocations"

create_pool grown -O recordsize=64K -O compression=off "$(vdev gr-a)"
size_before=$(tarn pool list -H -p -o size grown)
truncate -s "$VDEV_SIZE" "$(vdev gr-b)"
log_must tarn pool add -n grown "$(vdev gr-b)"
stdout_has "would update 'grown'"
assert_eq "$(tarn pool list -H -p -o size grown)" "$size_before" "size after add -n"
log_must tarn pool add grown "$(vdev gr-b)"
size_after=$(tarn pool list -H -p -o size grown)
[ "$size_after" -gt "$size_before" ] || log_fail "size did not grow: $size_before -> $size_after"
log_must tarn pool status grown
stdout_has "$(vdev gr-b)"
head -c 40M /dev/urandom >"$SCRATCH/big"
log_must cp "$SCRATCH/big" "$ALTROOT/grown/big"
log_must tarn pool sync grown
want=$(digest "$SCRATCH/big")
log_must tarn pool iostat -v -p grown
awk -v dev="$(vdev gr-b)" '$1 == dev { print $2 }' "$LAST_STDOUT" | awk '$1 > 0 { found = 1 } END { exit !found }' ||
	log_fail "nothing allocated on the added vdev: $(cat "$LAST_STDOUT")"
log_must tarn pool export grown
import_pool grown
assert_eq "$(digest "$ALTROOT/grown/big")" "$want" "file spread over both vdevs"
verify_pool grown
log_must tarn pool history grown
stdout_has "tarn pool add grown"
stdout_lacks "tarn pool add -n"
log_must tarn pool destroy grown

create_pool mirrored mirror "$(vdev mi-a)" "$(vdev mi-b)"
truncate -s "$VDEV_SIZE" "$(vdev mi-c)"
log_mustnot_msg "mismatched replication level" tarn pool add mirrored "$(vdev mi-c)"
log_must tarn pool status mirrored
stdout_lacks "$(vdev mi-c)"
log_must tarn pool add -f mirrored "$(vdev mi-c)"
log_must tarn pool status mirrored
stdout_has "$(vdev mi-c)"
verify_pool mirrored
log_must tarn pool destroy mirrored
log_pass
