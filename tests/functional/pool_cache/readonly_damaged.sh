#!/usr/bin/env bash
# Read-only import of a damaged pool: every file system mounts read-only so that
# what is still good can be copied off; the damaged file gives EIO, the others read back.
# Before, `pool import -o readonly=on` mounted nothing.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool import -o readonly=on mounts every file system read-only"
trap destroy_all_pools EXIT

default_setup
log_must tarn create "$TESTPOOL/child"
write_marked_file "$ALTROOT/$TESTPOOL/bad" 16
log_must dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/child/good" bs=64k count=8 status=none
sum=$(digest "$ALTROOT/$TESTPOOL/child/good")
log_must tarn pool export "$TESTPOOL"
damage_marked_blocks "$(vdev "$TESTPOOL")" 2
before=$(digest "$(vdev "$TESTPOOL")")

import_pool -o readonly=on "$TESTPOOL"
is_mounted "$ALTROOT/$TESTPOOL" || log_fail "the root file system is not mounted"
is_mounted "$ALTROOT/$TESTPOOL/child" || log_fail "the child file system is not mounted"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/child/good")" "$sum" "the good file"
cat "$ALTROOT/$TESTPOOL/bad" >/dev/null 2>&1 && log_fail "the damaged file read without an error"
touch "$ALTROOT/$TESTPOOL/child/new" 2>/dev/null && log_fail "a read-only mount took a new file"
awk -v p="$ALTROOT/$TESTPOOL/child" '$2 == p { print $4 }' /proc/mounts | grep -q '^ro' ||
	log_fail "the child is not mounted ro"
log_must tarn pool status -v "$TESTPOOL"
stdout_has "$TESTPOOL:/bad"
log_must tarn pool export "$TESTPOOL"
assert_eq "$(digest "$(vdev "$TESTPOOL")")" "$before" "the vdev after a read-only import"
log_pass
