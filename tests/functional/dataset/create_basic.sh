#!/usr/bin/env bash
# tarn create POOL/FS: the file system is listed, mounted at the parent's mountpoint plus its
# name (under the altroot), writable, and separate from its parent.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "create makes and mounts a child file system"
trap destroy_all_pools EXIT

default_setup
log_must tarn create "$TESTPOOL/fs"
assert_mounted "$TESTPOOL/fs" "$ALTROOT/$TESTPOOL/fs"
log_must tarn list -H -o name
assert_eq "$(last_stdout)" "$(printf '%s\n%s/fs' "$TESTPOOL" "$TESTPOOL")" "datasets"
echo child >"$ALTROOT/$TESTPOOL/fs/file" || log_fail "cannot write in the new file system"
echo parent >"$ALTROOT/$TESTPOOL/file"
log_must tarn mount
grep -qE "^$TESTPOOL/fs[[:space:]]+$ALTROOT/$TESTPOOL/fs[[:space:]]+(uring|dev)\$" "$LAST_STDOUT" || log_fail "tarn mount does not list $TESTPOOL/fs"

log_mustnot_msg "exists" tarn create "$TESTPOOL/fs"
log_mustnot tarn create "$TESTPOOL/bad name"
log_mustnot tarn create "$TESTPOOL/"
log_mustnot tarn create "$TESTPOOL//x"
log_mustnot_msg "bogus" tarn create -o bogus=1 "$TESTPOOL/other"
log_mustnot_msg "copies" tarn create -o copies=9 "$TESTPOOL/other"
log_must tarn list -H -o name
assert_eq "$(last_stdout)" "$(printf '%s\n%s/fs' "$TESTPOOL" "$TESTPOOL")" "datasets after refused creates"

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_mounted "$TESTPOOL/fs" "$ALTROOT/$TESTPOOL/fs"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/fs/file")" child "child file after export/import"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/file")" parent "parent file after export/import"
verify_pool "$TESTPOOL"
log_pass
