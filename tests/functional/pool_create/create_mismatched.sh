#!/usr/bin/env bash
# A single disk beside a mirror (or mirrors of two widths) is refused without -f, as zpool
# create refuses "mismatched replication level", and nothing is made; -f makes the pool.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create with mismatched replication levels needs -f"
trap destroy_all_pools EXIT

log_mustnot_msg "mismatched replication level" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" \
	"$(vdev a)" mirror "$(vdev b)" "$(vdev c)"
stderr_has "a single device and a 2-way mirror"
stderr_has "-f"
log_mustnot_msg "mismatched replication level" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" \
	mirror "$(vdev a)" "$(vdev b)" mirror "$(vdev c)" "$(vdev d)" "$(vdev e)"
assert_eq "$(pool_names)" "" "pools after the refused creates"
for side in a b c d e; do
	[ ! -e "$(vdev $side)" ] || log_fail "a refused create left $(vdev $side) behind"
done

log_must tarn pool create -f -s 128M -R "$ALTROOT" "$TESTPOOL" \
	"$(vdev a)" mirror "$(vdev b)" "$(vdev c)"
log_must tarn pool status "$TESTPOOL"
stdout_has "mirror-1"
verify_pool "$TESTPOOL"
log_pass
