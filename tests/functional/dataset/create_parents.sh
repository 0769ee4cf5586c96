#!/usr/bin/env bash
# create of a nested file system needs its parent, unless -p creates the missing ancestors.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "create -p makes missing parents; without -p it fails and creates nothing"
trap destroy_all_pools EXIT

default_setup
log_mustnot_msg "$TESTPOOL/a" tarn create "$TESTPOOL/a/b/c"
log_must tarn list -H -o name
assert_eq "$(last_stdout)" "$TESTPOOL" "datasets after the refused create"
log_must tarn create -p "$TESTPOOL/a/b/c"
log_must tarn list -H -r -o name "$TESTPOOL"
assert_eq "$(last_stdout | tr '\n' ' ')" "$TESTPOOL $TESTPOOL/a $TESTPOOL/a/b $TESTPOOL/a/b/c " "datasets after create -p"
assert_mounted "$TESTPOOL/a/b/c" "$ALTROOT/$TESTPOOL/a/b/c"
log_must tarn create -p "$TESTPOOL/a/b/c"
log_mustnot_msg "nosuchpool" tarn create -p nosuchpool/a/b
log_pass
