#!/usr/bin/env bash
# Two copies of one vdev image: a `cp` of an exported pool's vdev next to the
# original is shown as a copy in the listing; importing from both directories is refused with
# both paths named (they cannot be told apart); once the original has moved on, it is the one
# imported and the stale copy is named in a warning and left untouched.
. "$STF_SUITE/include/libtest.sh"
log_assert "copies of one vdev are never combined"
trap destroy_all_pools EXIT

default_setup
log_must tarn pool export "$TESTPOOL"
mkdir -p "$SCRATCH/copy"
log_must cp --sparse=always "$(vdev "$TESTPOOL")" "$SCRATCH/copy/"
copy="$SCRATCH/copy/$TESTPOOL.img"
log_must tarn pool import -d "$VDEV_DIR" -d "$SCRATCH/copy"
assert_eq "$(grep -c "pool: $TESTPOOL" "$LAST_STDOUT")" 1 "listings of the pool"
grep "carry the same vdev" "$LAST_STDOUT" | grep -qF "$copy" || log_fail "the listing does not name the copy"
grep "carry the same vdev" "$LAST_STDOUT" | grep -qF "$(vdev "$TESTPOOL")" || log_fail "the listing does not name the original"
log_mustnot_msg "cannot be told apart" tarn pool import -d "$VDEV_DIR" -d "$SCRATCH/copy" -R "$ALTROOT" "$TESTPOOL"
stderr_has "$copy"

# The original moves on; the copy does not.
import_pool "$TESTPOOL"
log_must dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/newer" bs=64k count=2 status=none
log_must tarn pool export "$TESTPOOL"
stale=$(digest "$copy")
log_must tarn pool import -d "$VDEV_DIR" -d "$SCRATCH/copy" -R "$ALTROOT" "$TESTPOOL"
stderr_has "$copy is an older copy"
[ -f "$ALTROOT/$TESTPOOL/newer" ] || log_fail "the older copy was imported"
log_must tarn pool export "$TESTPOOL"
assert_eq "$(digest "$copy")" "$stale" "the older copy after the import"
import_pool "$TESTPOOL"
log_pass
