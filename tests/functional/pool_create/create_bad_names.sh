#!/usr/bin/env bash
# Invalid pool names are refused with the naming rule, before any vdev file is created.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create refuses reserved, malformed and too long names and creates nothing"
trap destroy_all_pools EXIT

long=$(printf 'p%.0s' $(seq 300))
for name in mirror raidz spare log cache 1abc _abc "bad/name" "bad name" "" "$long"; do
	log_mustnot_msg "invalid pool name" tarn pool create -s 128M -R "$ALTROOT" "$name" "$(vdev named)"
	[ ! -e "$(vdev named)" ] || log_fail "refused name '$name' created $(vdev named)"
done
assert_eq "$(pool_names)" "" "pools after refused names"
log_pass
