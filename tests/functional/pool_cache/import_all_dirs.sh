#!/usr/bin/env bash
# pool import -a honours the options given with it, as zpool import -a: with -d DIR it imports
# every exported pool found in DIR (not the cache file's), each under -R ALTROOT and with -o;
# with -D -f every destroyed pool found there. Before, -a read the cache file whatever was
# given: -d, -R, -o, -D and -f were parsed and ignored.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool import -a -d DIR imports the pools found in DIR, with the options given"
trap destroy_all_pools EXIT

dir=$SCRATCH/pools
mkdir -p "$dir"
create_pool alpha "$dir/alpha.img"
create_pool beta "$dir/beta.img"
echo data >"$ALTROOT/alpha/file"
log_must tarn pool export alpha
log_must tarn pool export beta
assert_eq "$(pool_names)" "" "pools after the exports"

log_must tarn pool import -a -d "$dir" -R "$ALTROOT" -o readonly=on
assert_eq "$(pool_names | tr '\n' ' ')" "alpha beta " "pools imported by -a -d"
assert_mounted alpha "$ALTROOT/alpha"
assert_eq "$(cat "$ALTROOT/alpha/file")" "data" "file of a pool imported by -a -d"
log_must tarn pool get -H -o value readonly alpha
assert_eq "$(last_stdout)" "on" "readonly of a pool imported by -a -o readonly=on"
# Every pool found is imported already: nothing to do, and no failure.
log_must tarn pool import -a -d "$dir" -R "$ALTROOT"
stdout_has "pool alpha is imported"

log_must tarn pool export beta
log_must tarn pool export alpha
log_must tarn pool import -d "$dir" -R "$ALTROOT" alpha
log_must tarn pool destroy alpha
log_mustnot_msg "-D and -f" tarn pool import -a -D -d "$dir" -R "$ALTROOT"
assert_eq "$(pool_names)" "" "pools after -a -D without -f"
log_must tarn pool import -a -D -f -d "$dir" -R "$ALTROOT"
assert_eq "$(pool_names)" "alpha" "pools after -a -D -f (the destroyed one only)"
assert_eq "$(cat "$ALTROOT/alpha/file")" "data" "file of the destroyed pool imported again"
log_pass
