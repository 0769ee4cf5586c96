#!/usr/bin/env bash
# -o feature@NAME=disabled is accepted for known features; unknown features and properties and
# malformed -o values are refused and create nothing.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create -o feature@embedded_data=disabled works; bad -o values are refused"
trap destroy_all_pools EXIT

log_mustnot_msg "unknown feature" tarn pool create -s 128M -R "$ALTROOT" -o feature@bogus=disabled "$TESTPOOL" "$(vdev f)"
log_mustnot_msg "foo" tarn pool create -s 128M -R "$ALTROOT" -o foo=bar "$TESTPOOL" "$(vdev f)"
log_mustnot_msg "prop=value" tarn pool create -s 128M -R "$ALTROOT" -o novalue "$TESTPOOL" "$(vdev f)"
log_mustnot_msg "maybe" tarn pool create -s 128M -R "$ALTROOT" -o feature@embedded_data=maybe "$TESTPOOL" "$(vdev f)"
assert_eq "$(pool_names)" "" "pools after refused -o"
[ ! -e "$(vdev f)" ] || log_fail "a refused create left $(vdev f)"

create_pool "$TESTPOOL" -o feature@embedded_data=disabled "$(vdev f)"
if tarn pool get --help >/dev/null 2>&1; then
	log_must tarn pool get feature@embedded_data "$TESTPOOL"
	stdout_has "disabled"
else
	log_note "no 'tarn pool get' yet: the feature's state is not checked"
fi
log_must sh -c "head -c 100 /dev/urandom > '$ALTROOT/$TESTPOOL/tiny'"
verify_pool "$TESTPOOL"
destroy_all_pools

# The log space map is on by default; -o feature@log_spacemap=disabled makes a pool without it,
# and it cannot be turned on later.
create_pool "$TESTPOOL" -o feature@log_spacemap=disabled "$(vdev f)"
log_must tarn pool get feature@log_spacemap "$TESTPOOL"
stdout_has "disabled"
log_mustnot_msg "when the pool is created" tarn pool set feature@log_spacemap=enabled "$TESTPOOL"
log_must tarn debug logs "$TESTPOOL"
stdout_has "does not use the log space map"
log_must sh -c "head -c 100000 /dev/urandom > '$ALTROOT/$TESTPOOL/data'"
verify_pool "$TESTPOOL"
log_pass
