#!/usr/bin/env bash
# snapshot FS@SNAP freezes the file system: after overwrites, truncates and deletes in the head,
# the snapshot's figures say what it alone holds (used), what it references and what was written
# before it; list -t snapshot|all shows it after its file system; destroy returns the space.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "snapshot: frozen contents, space figures, list, destroy"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
mnt=$ALTROOT/$fs
log_must tarn create -o compression=off "$fs"
dd if=/dev/urandom of="$mnt/big" bs=1M count=4 status=none
dd if=/dev/urandom of="$mnt/trunc" bs=1M count=2 status=none
echo small >"$mnt/gone"
log_must tarn pool sync "$TESTPOOL"
log_must tarn snapshot "$fs@one"
stdout_lacks "error"
referenced=$(get_prop referenced "$fs@one")
assert_eq "$(get_prop used "$fs@one")" 0 "used of a fresh snapshot"
assert_eq "$(get_prop type "$fs@one")" snapshot "type"
assert_eq "$(get_prop written "$fs@one")" "$referenced" "written of the first snapshot"
guid=$(get_prop guid "$fs@one")
[[ "$guid" =~ ^[1-9][0-9]*$ ]] || log_fail "guid $guid"

# Change the head: overwrite 2 MiB, truncate 2 MiB to 0, delete a file.
dd if=/dev/urandom of="$mnt/big" bs=1M count=2 conv=notrunc status=none
: >"$mnt/trunc"
rm "$mnt/gone"
log_must tarn pool sync "$TESTPOOL"
used=$(get_prop used "$fs@one")
[ "$used" -ge $((4 << 20)) ] || log_fail "snapshot used $used, expected at least 4 MiB"
assert_eq "$(get_prop usedbysnapshots "$fs")" "$used" "usedbysnapshots of $fs"
assert_eq "$(get_prop referenced "$fs@one")" "$referenced" "referenced of the snapshot after changes"
[ "$(get_prop written "$fs")" -ge $((2 << 20)) ] || log_fail "written of $fs"
fs_used=$(get_prop used "$fs")
assert_eq "$fs_used" $(($(get_prop usedbydataset "$fs") + used)) "used = usedbydataset + usedbysnapshots"

log_must tarn list -H -t snapshot -o name
assert_eq "$(last_stdout)" "$fs@one" "list -t snapshot"
log_must tarn list -H -t all -o name,type -r "$TESTPOOL"
assert_eq "$(last_stdout | tr '\t' ' ')" "$TESTPOOL filesystem
$fs filesystem
$fs@one snapshot" "list -t all"
log_must tarn list -H -o name
stdout_lacks "@"

# The snapshot destroyed: its space comes back (in the background).
log_must tarn destroy -n "$fs@one"
stdout_has "would destroy $fs@one"
log_must tarn list -H -t snapshot -o name
stdout_has "$fs@one"
log_must tarn destroy "$fs@one"
stdout_has "destroyed $fs@one"
log_must tarn pool wait -t free "$TESTPOOL"
assert_eq "$(get_prop usedbysnapshots "$fs")" 0 "usedbysnapshots after destroy"
log_mustnot tarn list "$fs@one"
verify_pool "$TESTPOOL"
log_pass
