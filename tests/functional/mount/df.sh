#!/usr/bin/env bash
# df and statfs on the mount, as zfs reports them: available is the dataset's avail (the pool's
# free space less the slop, as `tarn list` says), size is used + available, and used grows as
# data is written and synced.
. "$STF_SUITE/include/libtest.sh"
log_assert "df on the mount reports the dataset's space"
trap destroy_all_pools EXIT

default_setup
root="$ALTROOT/$TESTPOOL"
log_must df -P "$root"
stdout_has "tarn:$TESTPOOL"
read -r _ blocks used available _ <<<"$(tail -n 1 "$LAST_STDOUT")"
[ "$blocks" -gt 0 ] || log_fail "df size is 0"
log_must tarn list -H -p -o avail "$TESTPOOL"
avail_kib=$(($(last_stdout) / 1024))
difference=$((available - avail_kib))
[ "${difference#-}" -le 1024 ] ||
	log_fail "df says $available KiB available, tarn list says $avail_kib KiB"
log_must tarn pool list -H -p -o size "$TESTPOOL"
[ "$blocks" -le $(($(last_stdout) / 1024)) ] || log_fail "df size $blocks KiB exceeds the pool"
write_marked_file "$root/data" 2048
log_must tarn pool sync "$TESTPOOL"
log_must df -P "$root"
read -r _ _ used_after _ <<<"$(tail -n 1 "$LAST_STDOUT")"
[ "$used_after" -ge $((used + 7000)) ] || log_fail "df used went from $used to $used_after KiB after 8 MiB"
log_pass
