#!/usr/bin/env bash
# set and get of each settable property: documented values are accepted and read back with
# source local; bad values are refused and change nothing.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "set/get of recordsize, compression, checksum, copies, atime, readonly, canmount, sync"
trap destroy_all_pools EXIT

default_setup
fs="$TESTPOOL/fs"
log_must tarn create "$fs"
assert_prop "$fs" copies 1 default
for value in 2 3 1; do
	log_must tarn set copies=$value "$fs"
	assert_prop "$fs" copies $value local
done
log_must tarn set recordsize=64K "$fs"
assert_prop "$fs" recordsize 65536 local
log_must tarn set recordsize=1M "$fs"
assert_prop "$fs" recordsize 1048576 local
for value in off lz4 zstd on; do
	log_must tarn set compression=$value "$fs"
	[ "$value" = on ] && [ "$(get_prop compression "$fs")" = lz4 ] && continue
	assert_prop "$fs" compression $value local
done
for value in blake3 sha256 fletcher4; do
	log_must tarn set checksum=$value "$fs"
	assert_prop "$fs" checksum $value local
done
for prop in atime readonly; do
	for value in off on off; do
		log_must tarn set $prop=$value "$fs"
		assert_prop "$fs" $prop $value local
	done
done
for value in noauto off on; do
	log_must tarn set canmount=$value "$fs"
	assert_prop "$fs" canmount $value local
done
# sync (the intent log): standard by default, then each value on the mounted file system.
assert_prop "$fs" sync standard default
for value in always disabled standard; do
	log_must tarn set sync=$value "$fs"
	assert_prop "$fs" sync $value local
done

# Refused values leave the property as it was.
for bad in copies=0 copies=4 copies=x recordsize=3K recordsize=2M recordsize=0 compression=gzip-99 \
	compression=bogus checksum=md5 atime=maybe readonly=2 canmount=sometimes mountpoint=relative sync=sometimes \
	nosuchprop=1 used=5 novalue; do
	log_mustnot tarn set "$bad" "$fs"
done
assert_prop "$fs" copies 1 local
assert_prop "$fs" recordsize 1048576 local
assert_prop "$fs" checksum fletcher4 local
log_mustnot_msg "nosuch" tarn set atime=off "$TESTPOOL/nosuch"

# Read-only properties: numbers with -p, source "-".
for prop in used available referenced; do
	value=$(get_prop $prop "$fs")
	[[ $value =~ ^[0-9]+$ ]] || log_fail "$prop is '$value', not a number of bytes"
	assert_eq "$(get_source $prop "$fs")" "-" "source of $prop"
done
log_pass
