#!/usr/bin/env bash
# clone FS@SNAP FS makes a writable file system sharing the snapshot's blocks (mounted, its
# origin shown), which diverges without touching the origin; its `written` counts from the
# origin (0 when fresh, what it wrote since), as its first snapshot's does; a snapshot with clones is destroyed
# only with -R, which destroys the clones first; misuse is refused and changes nothing.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "clone: shares the origin, diverges, -R destroys dependents"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
mnt=$ALTROOT/$fs
log_must tarn create -o compression=off "$fs"
dd if=/dev/urandom of="$mnt/data" bs=1M count=4 status=none
want=$(digest "$mnt/data")
log_must tarn snapshot "$fs@base"
alloc_before=$(tarn pool list -H -p -o alloc "$TESTPOOL")
log_must tarn clone -o atime=off "$fs@base" "$TESTPOOL/work"
assert_mounted "$TESTPOOL/work" "$ALTROOT/$TESTPOOL/work"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/work/data")" "$want" "clone contents"
assert_prop "$TESTPOOL/work" origin "$fs@base"
assert_prop "$fs@base" clones "$TESTPOOL/work"
assert_prop "$TESTPOOL/work" atime off local
[ "$(get_prop used "$TESTPOOL/work")" -lt $((1 << 20)) ] || log_fail "a fresh clone uses its origin's space"
assert_eq "$(get_prop written "$TESTPOOL/work")" 0 "written of a fresh clone"
alloc_after=$(tarn pool list -H -p -o alloc "$TESTPOOL")
[ $((alloc_after - alloc_before)) -lt $((1 << 20)) ] || log_fail "clone copied data: $alloc_before -> $alloc_after"

# Diverge: the origin and its snapshot keep their data.
dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/work/data" bs=1M count=1 conv=notrunc status=none
echo new >"$ALTROOT/$TESTPOOL/work/new"
log_must tarn pool sync "$TESTPOOL"
assert_eq "$(digest "$mnt/data")" "$want" "origin after the clone changed"
[ ! -e "$mnt/new" ] || log_fail "a file created in the clone appeared in the origin"
written=$(get_prop written "$TESTPOOL/work")
[ "$written" -ge $((1 << 20)) ] && [ "$written" -lt $((2 << 20)) ] || log_fail "written of the clone after 1 MiB: $written"
log_must tarn snapshot "$TESTPOOL/work@w1"
assert_eq "$(get_prop written "$TESTPOOL/work@w1")" "$written" "written of the clone's first snapshot"
assert_eq "$(get_prop written "$TESTPOOL/work")" 0 "written of the clone after its snapshot"

# Misuse.
before=$(tarn list -H -p -t all -o name,used,refer)
log_mustnot_msg "does not exist" tarn clone "$fs@nosuch" "$TESTPOOL/c2"
log_mustnot_msg "exists" tarn clone "$fs@base" "$TESTPOOL/work"
log_mustnot_msg "FILESYSTEM@SNAPSHOT" tarn clone "$fs" "$TESTPOOL/c2"
log_mustnot_msg "does not exist" tarn clone "$fs@base" "$TESTPOOL/nosuch/c2"
log_mustnot_msg "copies" tarn clone -o copies=9 "$fs@base" "$TESTPOOL/c2"
log_mustnot_msg "clones" tarn destroy "$fs@base"
log_mustnot_msg "clones" tarn destroy -r "$fs"
assert_mounted "$fs" "$mnt"
assert_eq "$(tarn list -H -p -t all -o name,used,refer)" "$before" "datasets after refused commands"

# -R destroys the clone (and its snapshot) first.
log_must tarn destroy -R "$fs@base"
stdout_has "destroyed $TESTPOOL/work"
stdout_has "destroyed $fs@base"
assert_unmounted "$TESTPOOL/work"
log_must tarn list -H -t all -o name
assert_eq "$(last_stdout)" "$TESTPOOL
$fs" "datasets after destroy -R"
assert_eq "$(digest "$mnt/data")" "$want" "origin after its clone was destroyed"
log_must tarn pool wait -t free "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
