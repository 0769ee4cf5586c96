#!/usr/bin/env bash
# Misuse of the snapshot verbs gets a clear error and changes nothing: bad names, missing file
# systems, duplicates (also within one request: nothing is taken), destroying what does not
# exist, properties of snapshots, renames out of the file system.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "snapshot verbs: misuse is refused, nothing changes"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
log_must tarn create "$fs"
log_must tarn snapshot "$fs@a"
before=$(tarn list -H -p -t all -o name,used,refer)

log_mustnot_msg "FILESYSTEM@SNAPSHOT" tarn snapshot "$fs"
log_mustnot_msg "FILESYSTEM@SNAPSHOT" tarn snapshot "$fs@"
log_mustnot_msg "invalid" tarn snapshot "$fs@bad name"
log_mustnot_msg "invalid" tarn snapshot "$fs@a@b"
log_mustnot_msg "does not exist" tarn snapshot "$TESTPOOL/nosuch@x"
log_mustnot_msg "already exists" tarn snapshot "$fs@a"
log_mustnot_msg "already exists" tarn snapshot "$fs@new" "$fs@a"
log_mustnot_msg "not imported" tarn snapshot "nosuchpool/fs@x"
log_mustnot_msg "does not exist" tarn destroy "$fs@nosuch"
log_mustnot_msg "does not exist" tarn destroy "$fs@nosuch%a"
log_mustnot_msg "read-only" tarn set compression=off "$fs@a"
log_mustnot_msg "read-only" tarn inherit compression "$fs@a"
log_mustnot_msg "stays in its file system" tarn rename "$fs@a" "$TESTPOOL@b"
log_mustnot_msg "already exists" tarn rename "$fs@a" "$fs@a"
log_mustnot_msg "name a snapshot" tarn rollback "$fs"
log_mustnot_msg "does not exist" tarn rollback "$fs@nosuch"
log_mustnot_msg "-r" tarn destroy "$fs"
log_mustnot tarn debug dataset "$fs@nosuch"
assert_eq "$(tarn list -H -p -t all -o name,used,refer)" "$before" "datasets after refused commands"
verify_pool "$TESTPOOL"
log_pass
