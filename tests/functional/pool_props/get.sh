#!/usr/bin/env bash
# pool get: zpool's columns NAME PROPERTY VALUE SOURCE; all or a comma list, in the order
# asked; -H tab-separated, -p exact bytes, -o columns; altroot and cachefile from the daemon;
# an unknown property is an error naming the known ones.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool get all|PROP[,PROP] with -H, -p and -o"

log_must tarn pool get all "$TESTPOOL"
assert_eq "$(head -n1 "$LAST_STDOUT" | tr -s ' ')" "NAME PROPERTY VALUE SOURCE" "header"
for prop in size capacity health guid allocated free freeing fragmentation readonly altroot \
	cachefile feature@embedded_data; do
	awk -v p="$prop" '$2 == p { found = 1 } END { exit !found }' "$LAST_STDOUT" ||
		log_fail "pool get all lacks $prop"
done

log_must tarn pool get -H -p -o property,value,source health,freeing,readonly,altroot,cachefile "$TESTPOOL"
assert_eq "$(last_stdout)" "$(printf 'health\tONLINE\t-\nfreeing\t0\t-\nreadonly\toff\t-\naltroot\t%s\tlocal\ncachefile\t-\tdefault' "$ALTROOT")" "-H -p -o"

log_must tarn pool get -H -p -o value size "$TESTPOOL"
size=$(last_stdout)
case "$size" in '' | *[!0-9]*) log_fail "-p size is not a byte count: $size" ;; esac
log_must tarn pool get -H -p -o value allocated,free "$TESTPOOL"
sum=$(awk '{ s += $1 } END { print s }' "$LAST_STDOUT")
assert_eq "$sum" "$size" "allocated + free"

log_mustnot_msg "pool properties:" tarn pool get bogus "$TESTPOOL"
log_mustnot_msg "no such pool" tarn pool get size nosuchpool
log_mustnot_msg "bogus" tarn pool get -o name,bogus size "$TESTPOOL"
log_pass
