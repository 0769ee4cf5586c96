#!/usr/bin/env bash
# User properties (module:name=value): set with other properties in one `set`, inherited by
# children and shown with their source, seen by snapshots, listed by `get all`, cleared by
# `inherit` (and `inherit -r` below), given at create and clone with -o and at pool create
# with -O, kept across export and import, carried by `send -p` and `send -R`; bad names and
# values are refused and change nothing; the feature goes active.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "user properties: set, inherit, get all, persist, send -p"
trap destroy_all_pools EXIT

default_setup
log_must tarn create -p "$TESTPOOL/a/b/c"
assert_eq "$(tarn pool get -H -o value feature@user_properties "$TESTPOOL")" enabled "feature before"
log_must tarn set com.sun:auto-snapshot=false "org.example:note=two words, and = sign" atime=off "$TESTPOOL/a"
assert_eq "$(tarn pool get -H -o value feature@user_properties "$TESTPOOL")" active "feature after"
assert_prop "$TESTPOOL/a" com.sun:auto-snapshot false local
assert_prop "$TESTPOOL/a" atime off local
assert_prop "$TESTPOOL/a/b/c" org.example:note "two words, and = sign" "inherited from $TESTPOOL/a"
log_must tarn set com.sun:auto-snapshot=true "$TESTPOOL/a/b"
assert_prop "$TESTPOOL/a/b/c" com.sun:auto-snapshot true "inherited from $TESTPOOL/a/b"
# Unset: value and source are -.
log_must tarn get -H -o value,source com.example:unset "$TESTPOOL/a"
assert_eq "$(last_stdout)" "$(printf -- '-\t-')" "an unset user property"
# get all lists them after the others.
log_must tarn get -H -o property all "$TESTPOOL/a/b"
assert_eq "$(tail -n 2 "$LAST_STDOUT" | tr '\n' ' ')" "com.sun:auto-snapshot org.example:note " "get all ends with user properties"
# A snapshot shows its file system's.
log_must tarn snapshot "$TESTPOOL/a/b@s"
assert_prop "$TESTPOOL/a/b@s" com.sun:auto-snapshot true "inherited from $TESTPOOL/a/b"
assert_prop "$TESTPOOL/a/b@s" org.example:note "two words, and = sign" "inherited from $TESTPOOL/a"

# Refused: bad names, a value too long, a repeated property; nothing of the request is set.
log_mustnot_msg "invalid user property name" tarn set Com.Example:x=1 "$TESTPOOL/a"
log_mustnot_msg "invalid user property name" tarn set "com.example:a b=1" "$TESTPOOL/a"
log_mustnot_msg "1024 bytes" tarn set "com.example:big=$(head -c 1025 /dev/zero | tr '\0' x)" "$TESTPOOL/a"
log_mustnot_msg "more than once" tarn set com.example:x=1 com.example:x=2 "$TESTPOOL/a"
log_mustnot_msg "unknown property" tarn set com.example:y=1 nosuch=2 "$TESTPOOL/a"
assert_prop "$TESTPOOL/a" com.example:y - -
log_must tarn set "com.example:big=$(head -c 1024 /dev/zero | tr '\0' x)" "$TESTPOOL/a/b/c"
assert_eq "$(get_prop com.example:big "$TESTPOOL/a/b/c" | wc -c)" 1025 "a 1024-byte value (and newline)"

# create -o and clone -o take user properties (and owner quotas) with the native ones; a bad
# one refuses the whole create, which makes nothing.
log_must tarn create -o com.example:made=at-create -o compression=zstd "$TESTPOOL/a/made"
assert_prop "$TESTPOOL/a/made" com.example:made at-create local
assert_prop "$TESTPOOL/a/made" compression zstd local
log_mustnot_msg "invalid user property name" tarn create -o com.example:Bad=1 "$TESTPOOL/a/bad"
log_mustnot tarn list "$TESTPOOL/a/bad"
log_must tarn snapshot "$TESTPOOL/a/made@o"
log_must tarn clone -o com.example:cloned=yes "$TESTPOOL/a/made@o" "$TESTPOOL/a/clone"
assert_prop "$TESTPOOL/a/clone" com.example:cloned yes local
assert_prop "$TESTPOOL/a/clone" com.example:made - -
log_mustnot_msg "invalid user property name" tarn clone -o com.example:Bad=1 "$TESTPOOL/a/made@o" "$TESTPOOL/a/clone2"
log_mustnot tarn list "$TESTPOOL/a/clone2"
log_must tarn destroy "$TESTPOOL/a/clone"
log_must tarn destroy -r "$TESTPOOL/a/made"

# Kept across export and import.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_prop "$TESTPOOL/a/b/c" com.sun:auto-snapshot true "inherited from $TESTPOOL/a/b"

# send -p carries local user properties; send -R those of each file system.
tarn send -p "$TESTPOOL/a/b@s" | tarn receive "$TESTPOOL/copy" || log_fail "send -p | receive"
assert_prop "$TESTPOOL/copy" com.sun:auto-snapshot true received
assert_prop "$TESTPOOL/copy" org.example:note - -
log_must tarn snapshot -r "$TESTPOOL/a@r"
tarn send -R "$TESTPOOL/a@r" | tarn receive "$TESTPOOL/tree" || log_fail "send -R | receive"
assert_prop "$TESTPOOL/tree" org.example:note "two words, and = sign" received
assert_prop "$TESTPOOL/tree/b/c" com.sun:auto-snapshot true "inherited from $TESTPOOL/tree/b"

# inherit clears the local setting; inherit -r every setting below too.
log_must tarn inherit com.sun:auto-snapshot "$TESTPOOL/a/b"
assert_prop "$TESTPOOL/a/b/c" com.sun:auto-snapshot false "inherited from $TESTPOOL/a"
log_must tarn set com.sun:auto-snapshot=true "$TESTPOOL/a/b/c"
log_must tarn inherit -r com.sun:auto-snapshot "$TESTPOOL/a"
for fs in a a/b a/b/c; do
	assert_prop "$TESTPOOL/$fs" com.sun:auto-snapshot - -
done
verify_pool "$TESTPOOL"

# pool create -O takes them for the root file system; a bad one creates nothing.
create_pool up2 -O com.example:root=yes "$(vdev up2)"
assert_prop up2 com.example:root yes local
log_mustnot_msg "invalid user property name" tarn pool create -s "$VDEV_SIZE" -R "$ALTROOT" -O com.example:Root=1 up3 "$(vdev up3)"
log_mustnot tarn pool list up3
verify_pool up2
log_pass
