#!/usr/bin/env bash
# The spill block: xattrs that overflow the znode's bonus buffer continue in the dnode's spill
# block (seen with `tarn debug object`) before the hidden xattr directory; they round trip
# through a mount and export/import; removing them removes the spill block; debug object
# refuses a missing path or object with a message; check finds no leak.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_python
log_assert "SA xattrs spill to the dnode's spill block and go with it"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs dir=$ALTROOT/$TESTPOOL/fs
log_must tarn create "$fs"
echo data >"$dir/f"
# 30 values of 1000 bytes: 30 KB, far beyond the 320-byte bonus buffer.
set_many() {
	python3 - "$1" <<'PY'
import os, sys
for i in range(30):
    os.setxattr(sys.argv[1], f"user.v{i}", bytes([65 + i % 26]) * 1000)
PY
}
digest() { getfattr --absolute-names -d -m user "$1" | grep -v '^#' | md5sum | cut -d' ' -f1; }
log_must set_many "$dir/f"
before=$(digest "$dir/f")
assert_eq "$(getfattr --absolute-names -d -m user "$dir/f" | grep -c '=')" 30 "names listed"
log_must tarn pool sync "$TESTPOOL"
log_must tarn debug object "$fs" /f
stdout_has "[L0 Spill]"
stdout_has "PlainFile"

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(digest "$dir/f")" "$before" "xattrs after export and import"

for i in $(seq 0 29); do setfattr -x "user.v$i" "$dir/f"; done
log_must tarn pool sync "$TESTPOOL"
log_must tarn debug object "$fs" f
stdout_lacks "[L0 Spill]"
stdout_has "none"

log_mustnot_msg "no such file" tarn debug object "$fs" /no/such/file
log_mustnot_msg "does not exist" tarn debug object "$fs" 999999
rm "$dir/f"
log_must tarn pool sync "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
