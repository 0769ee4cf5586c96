#!/usr/bin/env bash
# Cache devices (the L2ARC): pool create ... cache DEV and pool add POOL cache DEV show a cache
# section in pool status and iostat -v, add no space and no vdev; pool remove takes a cache
# device out (a data vdev is refused with a clear message); pool history records both; export
# and import keep the device, and a missing one is UNAVAIL without stopping the import.
. "$STF_SUITE/include/libtest.sh"
log_assert "cache devices are added, shown, removed and survive export and import"

create_pool cached -O compression=off "$(vdev ca-data)" cache "$(vdev ca-c1)"
log_must tarn pool status cached
stdout_has "cache"
awk -v dev="$(vdev ca-c1)" '$1 == dev && $2 == "ONLINE" { found = 1 } END { exit !found }' "$LAST_STDOUT" ||
	log_fail "no ONLINE line for the cache device: $(cat "$LAST_STDOUT")"
size_before=$(tarn pool list -H -p -o size cached)

truncate -s "$VDEV_SIZE" "$(vdev ca-c2)"
log_must tarn pool add -n cached cache "$(vdev ca-c2)"
stdout_has "would update 'cached'"
log_must tarn pool status cached
stdout_lacks "$(vdev ca-c2)"
log_must tarn pool add cached cache "$(vdev ca-c2)"
log_must tarn pool status cached
stdout_has "$(vdev ca-c2)"
assert_eq "$(tarn pool list -H -p -o size cached)" "$size_before" "pool size after adding a cache device"
log_must tarn pool status -j cached
grep -q '"l2cache"' "$LAST_STDOUT" || log_fail "no l2cache object in status -j"

# A cache device of this pool cannot be added again, nor used for another pool without -f.
log_mustnot tarn pool add cached cache "$(vdev ca-c2)"
log_mustnot_msg "cache device of pool" tarn pool create -R "$ALTROOT" other "$(vdev ca-c2)"

head -c 16M /dev/urandom >"$SCRATCH/data"
log_must cp "$SCRATCH/data" "$ALTROOT/cached/data"
log_must tarn pool sync cached
log_must cat "$ALTROOT/cached/data" >/dev/null
log_must tarn pool iostat -v cached
stdout_has "cache"
stdout_has "$(vdev ca-c1)"

# Only cache devices can be removed.
log_mustnot_msg "only cache devices can be removed" tarn pool remove cached "$(vdev ca-data)"
log_must tarn pool remove cached "$(vdev ca-c2)"
log_must tarn pool status cached
stdout_lacks "$(vdev ca-c2)"
log_must tarn pool history cached
stdout_has "tarn pool add cached cache"
stdout_has "tarn pool remove cached"
# Its labels are cleared: a new pool takes it without -f.
log_must tarn pool create -R "$ALTROOT" reuse "$(vdev ca-c2)"
log_must tarn pool destroy reuse

# Export and import keep the cache device.
want=$(digest "$SCRATCH/data")
log_must tarn pool export cached
import_pool cached
log_must tarn pool status cached
awk -v dev="$(vdev ca-c1)" '$1 == dev && $2 == "ONLINE" { found = 1 } END { exit !found }' "$LAST_STDOUT" ||
	log_fail "the cache device is not back after import: $(cat "$LAST_STDOUT")"
assert_eq "$(digest "$ALTROOT/cached/data")" "$want" "file after import"

# A missing cache device does not stop the import.
log_must tarn pool export cached
mkdir -p "$SCRATCH/away"
log_must mv "$(vdev ca-c1)" "$SCRATCH/away/"
import_pool cached
log_must tarn pool status cached
awk -v dev="$(vdev ca-c1)" '$1 == dev && $2 == "UNAVAIL" { found = 1 } END { exit !found }' "$LAST_STDOUT" ||
	log_fail "the missing cache device is not UNAVAIL: $(cat "$LAST_STDOUT")"
assert_eq "$(digest "$ALTROOT/cached/data")" "$want" "file without the cache device"
verify_pool cached
log_must tarn pool destroy cached
rm -f "$SCRATCH/away/ca-c1.img"
log_pass
