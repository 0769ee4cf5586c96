#!/usr/bin/env bash
# Children mount at the parent's mountpoint plus their name; setting mountpoint remounts the
# file system and its children (under the altroot); mountpoint=none unmounts it.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "mountpoint: inherited paths, remount on set, none"
trap destroy_all_pools EXIT

default_setup
log_must tarn create -p "$TESTPOOL/a/b"
assert_mounted "$TESTPOOL/a" "$ALTROOT/$TESTPOOL/a"
assert_mounted "$TESTPOOL/a/b" "$ALTROOT/$TESTPOOL/a/b"
echo data >"$ALTROOT/$TESTPOOL/a/b/file"

log_must tarn set mountpoint=/moved "$TESTPOOL/a"
assert_eq "$(get_source mountpoint "$TESTPOOL/a")" local "source of mountpoint"
assert_mounted "$TESTPOOL/a" "$ALTROOT/moved"
assert_mounted "$TESTPOOL/a/b" "$ALTROOT/moved/b"
assert_eq "$(cat "$ALTROOT/moved/b/file")" data "file after the remount"
[ -e /moved ] && log_fail "the altroot was ignored: /moved exists"

log_must tarn set mountpoint=none "$TESTPOOL/a/b"
assert_unmounted "$TESTPOOL/a/b"
log_must tarn inherit mountpoint "$TESTPOOL/a/b"
assert_mounted "$TESTPOOL/a/b" "$ALTROOT/moved/b"
log_mustnot tarn set mountpoint=relative "$TESTPOOL/a"
assert_mounted "$TESTPOOL/a" "$ALTROOT/moved"

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_mounted "$TESTPOOL/a" "$ALTROOT/moved"
assert_mounted "$TESTPOOL/a/b" "$ALTROOT/moved/b"
log_pass
