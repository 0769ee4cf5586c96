#!/usr/bin/env bash
# list -d N (children at 1, a file system's snapshots one level below it), -s FIELD and
# -S FIELD (numbers by value, text in byte order, keys in the order given), as zfs list; an
# unknown sort field is refused naming the valid ones.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "list -d, -s and -S"
trap destroy_all_pools EXIT

default_setup
p=$TESTPOOL
log_must tarn create -o compression=off "$p/b"
log_must tarn create -o compression=off "$p/a"
log_must tarn create -o compression=zstd "$p/a/x"
log_must tarn create "$p/a/x/y"
head -c 3M /dev/urandom >"$ALTROOT/$p/a/big"
head -c 1M /dev/urandom >"$ALTROOT/$p/b/small"
log_must tarn snapshot -r "$p/a@s"
log_must tarn pool sync "$p"

names() { last_stdout | tr '\n' ' '; }
log_must tarn list -H -o name -d 1 "$p/a"
assert_eq "$(names)" "$p/a $p/a/x " "list -d 1 (file systems)"
log_must tarn list -H -o name -d 1 -t all "$p/a"
assert_eq "$(names)" "$p/a $p/a@s $p/a/x " "list -d 1 -t all: own snapshots, not the children's"
log_must tarn list -H -o name -d 0 -t all "$p/a"
assert_eq "$(names)" "$p/a " "list -d 0"
log_must tarn list -H -o name -d 2 -t snapshot "$p/a"
assert_eq "$(names)" "$p/a@s $p/a/x@s " "list -d 2 -t snapshot"
log_must tarn list -H -o name -r -t snapshot "$p/a"
assert_eq "$(names)" "$p/a@s $p/a/x@s $p/a/x/y@s " "list -r -t snapshot"

log_must tarn list -H -o name -d 1 -S used "$p"
assert_eq "$(last_stdout | head -n 1)" "$p" "-S used: the pool's root first"
assert_eq "$(last_stdout | sed -n 2p)" "$p/a" "-S used: then the 3 MiB file system"
assert_eq "$(last_stdout | sed -n 3p)" "$p/b" "-S used: then the 1 MiB one"
log_must tarn list -H -o name -d 1 -s used "$p"
assert_eq "$(last_stdout | head -n 1)" "$p/b" "-s used: the smallest first"
log_must tarn list -H -o name -r -s name "$p"
assert_eq "$(names)" "$p $p/a $p/a/x $p/a/x/y $p/b " "-s name"
log_must tarn list -H -o name -r -s compression -S name "$p/a"
assert_eq "$(names)" "$p/a $p/a/x/y $p/a/x " "-s compression -S name: off before zstd, then names descending"
log_mustnot_msg "valid fields are" tarn list -s bogus "$p"
verify_pool "$p"
log_pass
