#!/usr/bin/env bash
# tarn inject (zinject) on a mirror, as an administrator rehearses a bad day: silent corruption
# of one side's reads is found by a scrub and counted on that side only; an object's blocks
# corrupted on both sides are named by `pool status -v`; write errors on one side leave a DTL
# that a resilver clears; a vanished side shows REMOVED and comes back; injections are listed,
# shown in `pool status`, cleared with -c, and gone after export.
. "$STF_SUITE/include/libtest.sh"
require_python
log_assert "tarn inject: corruption, object targets, write errors, vanish, list and clear"
trap destroy_all_pools EXIT

pool=injected
create_pool $pool -O recordsize=4K -O compression=off mirror "$(vdev i-a)" "$(vdev i-b)"
mnt="$ALTROOT/$pool"
write_marked_file "$mnt/data" 256
write_marked_file "$mnt/victim" 16
want=$(digest "$mnt/data")
log_must tarn pool sync $pool

# cksum DEV: the CKSUM column of DEV in `pool status`.
cksum() { "$TARN" pool status $pool | awk -v dev="$(vdev "$1")" '$1 == dev { print $5 }'; }

# Misuse is refused with a message, and changes nothing.
log_mustnot tarn inject -e melt $pool
stderr_has "bad fault"
log_mustnot tarn inject -f 0 $pool
log_mustnot tarn inject -d nosuch.img $pool
stderr_has "no device"
log_mustnot tarn inject -e vanish -o "$pool:/data" $pool
log_mustnot tarn inject -e io nosuchpool
log_must tarn inject
stdout_has "no injections"

# 1. One side's reads come back silently damaged: a scrub counts it on that side only, and
# repairs nothing it can trust less than the other side.
log_must tarn inject -d "$(vdev i-a)" -e corrupt -T read $pool
stdout_has "added injection 1"
log_must tarn inject
stdout_has "corrupt"
log_must tarn pool status $pool
stdout_has "inject: 1 fault injection(s) active"
log_must tarn pool scrub $pool
log_must tarn pool wait -t scrub $pool
log_must tarn pool status $pool
stdout_has "with 0 errors"
a=$(cksum i-a)
b=$(cksum i-b)
log_note "corrupt reads of side a: scrub counted CKSUM a=$a b=$b"
[ "$a" -gt 0 ] || log_fail "no checksum error counted on the corrupted side"
assert_eq "$b" "0" "checksum errors on the healthy side"
assert_eq "$(digest "$mnt/data")" "$want" "the file reads right through the corruption"
log_must tarn inject -c all
log_must tarn pool status $pool
stdout_lacks "inject:"
log_must tarn pool clear $pool
log_must tarn pool scrub $pool
log_must tarn pool wait -t scrub $pool
assert_eq "$(cksum i-a)" "0" "checksum errors after the injection was cleared"

# 2. One file's blocks corrupted on both sides: the scrub cannot repair them and names the file.
log_must tarn inject -e corrupt -T read -o "$pool:/victim" -l 0 $pool
stdout_has "$pool object"
log_must tarn pool scrub $pool
log_must tarn pool wait -t scrub $pool
log_must tarn pool status -v $pool
stdout_has "$pool:/victim"
stdout_lacks "$pool:/data"
log_must tarn inject -c all
log_must tarn pool clear $pool

# 3. Writes to side a fail: the pool goes on with side b, side a's missed txgs are recorded,
# and after the injection is cleared a scrub brings side a back; check is clean.
log_must tarn inject -d i-a.img -e io -T write $pool
head -c 4M /dev/urandom >"$mnt/late"
late=$(digest "$mnt/late")
log_must tarn pool sync $pool
log_must tarn pool status $pool
errors_a=$(awk -v dev="$(vdev i-a)" '$1 == dev { print $4 }' "$LAST_STDOUT")
log_note "write errors on side a: $errors_a"
[ "$errors_a" -gt 0 ] || log_fail "no write error counted on side a"
log_must tarn inject -c all
log_must tarn pool clear $pool
log_must tarn pool scrub $pool
log_must tarn pool wait -t scrub $pool
verify_pool $pool

# 4. Side a vanishes: REMOVED, the pool DEGRADED and still writable; cleared and onlined, it
# resilvers.
log_must tarn inject -d i-a.img -e vanish $pool
id=$(sed -n 's/^added injection \([0-9]*\) .*/\1/p' "$LAST_STDOUT")
log_must tarn pool status $pool
stdout_has "DEGRADED"
head -c 1M /dev/urandom >"$mnt/while_gone"
log_must tarn pool sync $pool
log_must tarn inject -c "$id" $pool
log_mustnot tarn inject -c "$id" $pool
stderr_has "no injection $id"
log_must tarn pool clear $pool
log_must tarn pool wait -t resilver $pool

# 5. A resilver whose writes to the returning side fail now and then still converges.
log_must tarn pool offline $pool "$(vdev i-a)"
head -c 8M /dev/urandom >"$mnt/missed"
missed=$(digest "$mnt/missed")
log_must tarn pool sync $pool
log_must tarn inject -d i-a.img -e io -T write -n 5 $pool
log_must tarn pool online $pool "$(vdev i-a)"
log_must tarn pool wait -t resilver $pool
log_must tarn inject -c all $pool
log_must tarn pool clear $pool
log_must tarn pool scrub $pool
log_must tarn pool wait -t scrub $pool
verify_pool $pool

# 6. Writes failing everywhere: the pool suspends (failmode=wait), reads go on, and once the
# injection is cleared `pool clear` resumes it.
log_must tarn inject -e io -T write $pool
log_mustnot tarn pool sync $pool
log_must tarn pool status $pool
stdout_has "the pool is suspended"
assert_eq "$(digest "$mnt/data")" "$want" "reads of a suspended pool"
log_must tarn inject -c all
log_must tarn pool clear $pool
log_must tarn pool status $pool
stdout_lacks "suspended"
log_must tarn pool sync $pool

# 7. Injections end with the pool's import.
log_must tarn inject -d i-b.img -e delay -D 1 -T read -n 5 $pool
log_must tarn pool export $pool
import_pool $pool
log_must tarn inject
stdout_has "no injections"
assert_eq "$(digest "$mnt/data")" "$want" "the file after everything"
assert_eq "$(digest "$mnt/late")" "$late" "the file written while side a failed"
assert_eq "$(digest "$mnt/missed")" "$missed" "the file the resilver brought to side a"
verify_pool $pool
log_pass
