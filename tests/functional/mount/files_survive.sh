#!/usr/bin/env bash
# Files, directories, symlinks, hard links, permissions and a truncated file written through the
# mount read back the same after export and import.
. "$STF_SUITE/include/libtest.sh"
log_assert "what is written through the mount survives export and import"
trap destroy_all_pools EXIT

default_setup
root="$ALTROOT/$TESTPOOL"
log_must mkdir -p "$root/a/b/c"
log_must cp -r "$STF_SUITE/include" "$root/a/b/c/"
write_marked_file "$root/a/big" 300
log_must ln -s a/big "$root/link"
log_must ln "$root/a/big" "$root/hard"
log_must chmod 0640 "$root/a/big"
log_must sh -c "head -c 100000 /dev/urandom > '$root/cut' && truncate -s 5000 '$root/cut'"
listing() { (cd "$root" && find . -printf '%p %y %m %s %l\n' | sort && find . -type f -exec md5sum {} + | sort); }
before=$(listing)
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(listing)" "$before" "tree after export and import"
assert_eq "$(stat -c %h "$root/hard")" 2 "hard link count"
verify_pool "$TESTPOOL"
log_pass
