#!/usr/bin/env bash
# Properties set on a parent are inherited by children ("inherited from PARENT"); a local value
# overrides; inherit drops the local value; get -j has the documented shape.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "property inheritance and tarn inherit"
trap destroy_all_pools EXIT

default_setup
log_must tarn create -p "$TESTPOOL/a/b"
assert_prop "$TESTPOOL/a/b" compression "$(get_prop compression "$TESTPOOL")" default
log_must tarn set compression=zstd "$TESTPOOL/a"
assert_prop "$TESTPOOL/a" compression zstd local
assert_prop "$TESTPOOL/a/b" compression zstd "inherited from $TESTPOOL/a"
log_must tarn set atime=off "$TESTPOOL"
assert_prop "$TESTPOOL/a/b" atime off "inherited from $TESTPOOL"

log_must tarn set compression=off "$TESTPOOL/a/b"
assert_prop "$TESTPOOL/a/b" compression off local
log_must tarn inherit compression "$TESTPOOL/a/b"
assert_prop "$TESTPOOL/a/b" compression zstd "inherited from $TESTPOOL/a"
log_must tarn inherit compression "$TESTPOOL/a"
assert_eq "$(get_source compression "$TESTPOOL/a")" default "source after inherit on a"
log_mustnot tarn inherit used "$TESTPOOL/a"
log_mustnot tarn inherit nosuchprop "$TESTPOOL/a"

log_must tarn get -H -o name,property,value,source atime,compression "$TESTPOOL/a/b"
assert_eq "$(last_stdout)" "$(printf '%s\tatime\toff\tinherited from %s\n%s\tcompression\t%s\tdefault' \
	"$TESTPOOL/a/b" "$TESTPOOL" "$TESTPOOL/a/b" "$(get_prop compression "$TESTPOOL")")" "get -H"
log_must tarn get all "$TESTPOOL/a/b"
for prop in recordsize compression checksum copies mountpoint canmount atime readonly used available referenced; do
	grep -qw "$prop" "$LAST_STDOUT" || log_fail "get all lacks $prop"
done
if command -v python3 >/dev/null; then
	# zfs get -j: datasets keyed by name, each property a value/source pair whose source
	# names the dataset inherited from.
	log_must tarn get -j atime "$TESTPOOL/a/b" "$TESTPOOL"
	got=$(python3 -c '
import json, sys
sets = json.load(sys.stdin)["datasets"]
for name in sys.argv[1:]:
    p = sets[name]["properties"]["atime"]
    print(name, p["value"], p["source"]["type"], p["source"]["data"])
' "$TESTPOOL/a/b" "$TESTPOOL" <"$LAST_STDOUT") || log_fail "get -j does not have the documented shape"
	assert_eq "$got" "$(printf '%s off INHERITED %s\n%s off LOCAL -' "$TESTPOOL/a/b" "$TESTPOOL" "$TESTPOOL")" "get -j"
fi
log_pass
