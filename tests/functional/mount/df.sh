#!/usr/bin/env bash
# df and statfs on the mount: a tarn file system whose size is close to the pool's and whose
# used space grows as data is written and synced.
. "$STF_SUITE/include/libtest.sh"
log_assert "df on the mount reports the pool's space"
trap destroy_all_pools EXIT

default_setup
root="$ALTROOT/$TESTPOOL"
log_must df -P "$root"
stdout_has "tarn:$TESTPOOL"
read -r _ blocks used _ <<<"$(tail -n 1 "$LAST_STDOUT")"
[ "$blocks" -gt 0 ] || log_fail "df size is 0"
log_must tarn pool list -H -p -o size "$TESTPOOL"
pool_kib=$(($(last_stdout) / 1024))
[ "$blocks" -le "$pool_kib" ] && [ "$blocks" -ge $((pool_kib / 2)) ] ||
	log_fail "df says $blocks KiB for a pool of $pool_kib KiB"
write_marked_file "$root/data" 2048
log_must tarn pool sync "$TESTPOOL"
log_must df -P "$root"
read -r _ _ used_after _ <<<"$(tail -n 1 "$LAST_STDOUT")"
[ "$used_after" -ge $((used + 7000)) ] || log_fail "df used went from $used to $used_after KiB after 8 MiB"
log_pass
