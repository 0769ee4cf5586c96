#!/usr/bin/env bash
# Local property values, the hierarchy and the data survive export/import and a kill -9 after a
# sync; the check is clean.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "properties survive export/import and a crash"
trap destroy_all_pools EXIT

default_setup
fs="$TESTPOOL/a/b"
log_must tarn create -p -o recordsize=32K -o compression=zstd "$fs"
log_must tarn set copies=2 "$fs"
log_must tarn set checksum=sha256 "$TESTPOOL/a"
log_must tarn set atime=off "$TESTPOOL"
write_marked_file "$ALTROOT/$fs/data" 256
sum=$(digest "$ALTROOT/$fs/data")
snapshot() { tarn get -H -o name,property,value,source recordsize,compression,copies,checksum,atime "$TESTPOOL" "$TESTPOOL/a" "$fs"; }
before=$(snapshot)
assert_prop "$fs" recordsize 32768 local
assert_prop "$fs" checksum sha256 "inherited from $TESTPOOL/a"

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(snapshot)" "$before" "properties after export/import"
assert_eq "$(digest "$ALTROOT/$fs/data")" "$sum" "data after export/import"

log_must tarn set compression=off "$fs"
log_must tarn pool sync "$TESTPOOL"
kill_daemon
import_pool "$TESTPOOL"
assert_prop "$fs" compression off local
assert_eq "$(digest "$ALTROOT/$fs/data")" "$sum" "data after kill -9"
verify_pool "$TESTPOOL"
log_pass
