#!/usr/bin/env bash
# snapshot -r takes one snapshot of every descendant, in one txg (the same createtxg);
# destroy -r FS@SNAP destroys that name everywhere below; ranges FS@A%B and lists FS@A,B;
# destroy -r FS destroys a file system with its snapshots. Writes still in the kernel's cache
# of every mount below are in the snapshots (the daemon writes them all back first, together).
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "snapshot -r, destroy -r, ranges and lists"
trap destroy_all_pools EXIT

default_setup
log_must tarn create -p "$TESTPOOL/a/b/c"
echo data >"$ALTROOT/$TESTPOOL/a/b/file"
echo top >"$ALTROOT/$TESTPOOL/a/top"
echo deep >"$ALTROOT/$TESTPOOL/a/b/c/deep"
log_must tarn snapshot -r "$TESTPOOL/a@r"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/a/.zfs/snapshot/r/top")" top "a@r's file"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/a/b/.zfs/snapshot/r/file")" data "a/b@r's file"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/a/b/c/.zfs/snapshot/r/deep")" deep "a/b/c@r's file"
log_must tarn list -H -t snapshot -o name
assert_eq "$(last_stdout)" "$TESTPOOL/a@r
$TESTPOOL/a/b@r
$TESTPOOL/a/b/c@r" "snapshots after snapshot -r"
txgs=$(tarn list -H -t snapshot -o createtxg | sort -u | wc -l)
assert_eq "$txgs" 1 "distinct createtxg of a recursive snapshot"

for snap in s1 s2 s3 s4 s5; do
	echo "$snap" >>"$ALTROOT/$TESTPOOL/a/b/file"
	log_must tarn snapshot "$TESTPOOL/a/b@$snap"
done
log_must tarn destroy "$TESTPOOL/a/b@s2%s3"
log_must tarn destroy "$TESTPOOL/a/b@s1,s5"
log_must tarn list -H -t snapshot -o name "$TESTPOOL/a/b" -r
assert_eq "$(last_stdout)" "$TESTPOOL/a/b@r
$TESTPOOL/a/b@s4
$TESTPOOL/a/b/c@r" "snapshots after range and list destroys"

log_must tarn destroy -r "$TESTPOOL/a@r"
log_must tarn list -H -t snapshot -o name
assert_eq "$(last_stdout)" "$TESTPOOL/a/b@s4" "snapshots after destroy -r a@r"
log_must tarn snapshot "$TESTPOOL/a/b/c@last"
log_mustnot_msg "-r" tarn destroy "$TESTPOOL/a/b/c"
log_must tarn destroy -r "$TESTPOOL/a"
log_must tarn list -H -t all -o name
assert_eq "$(last_stdout)" "$TESTPOOL" "datasets after destroy -r"
log_must tarn pool wait -t free "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
