#!/usr/bin/env bash
# get -r, -d N, -s SOURCES, -t TYPES over a tree with snapshots, and set with several
# properties at once, as zfs get and zfs set take them; bad sources and types are refused.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "get -r/-d/-s/-t and set P=V P=V"
trap destroy_all_pools EXIT

default_setup
p=$TESTPOOL
log_must tarn create -p "$p/a/b/c"
log_must tarn snapshot -r "$p/a@s"
log_must tarn set compression=zstd atime=off "$p/a/b"
assert_prop "$p/a/b" compression zstd local
assert_prop "$p/a/b" atime off local

names() { last_stdout | cut -f1 | tr '\n' ' '; }
log_must tarn get -H -r compression "$p/a"
assert_eq "$(names)" "$p/a $p/a@s $p/a/b $p/a/b@s $p/a/b/c $p/a/b/c@s " "get -r: file systems, each with its snapshots"
log_must tarn get -H -d 1 compression "$p/a"
assert_eq "$(names)" "$p/a $p/a@s $p/a/b " "get -d 1: children and own snapshots"
log_must tarn get -H -d 0 compression "$p/a"
assert_eq "$(names)" "$p/a " "get -d 0"
log_must tarn get -H -r -t filesystem compression "$p/a"
assert_eq "$(names)" "$p/a $p/a/b $p/a/b/c " "get -t filesystem"
log_must tarn get -H -r -t snapshot compression "$p/a"
assert_eq "$(names)" "$p/a@s $p/a/b@s $p/a/b/c@s " "get -t snapshot"
log_must tarn get -H -r -s local compression,atime "$p"
assert_eq "$(last_stdout | cut -f1,2 | tr '\t\n' ': ')" "$p/a/b:compression $p/a/b:atime " "get -s local"
log_must tarn get -H -r -s inherited -t filesystem -o name compression "$p"
assert_eq "$(names)" "$p/a/b/c " "get -s inherited"
log_must tarn get -H -s default,none -o property,source used,recordsize "$p/a"
assert_eq "$(last_stdout | tr '\t\n' ': ')" "used:- recordsize:default " "get -s default,none"
log_mustnot_msg "invalid source" tarn get -s bogus compression "$p"
log_mustnot_msg "invalid type" tarn get -t volume compression "$p"
log_mustnot_msg "does not exist" tarn get -r compression "$p/nope"
verify_pool "$p"
log_pass
