#!/usr/bin/env bash
# Malformed option values (sizes, -o values, directories, metaslab numbers, sockets) fail with a
# message about the value, and change nothing.
. "$STF_SUITE/include/libtest.sh"
log_assert "malformed option values are refused clearly"
trap destroy_all_pools EXIT

default_setup
pools_before=$(pool_names)
for size in abc 0 -5 1X 99999999999999999999; do
	log_mustnot tarn pool create -s "$size" -R "$ALTROOT" other "$(vdev other)"
	[ ! -e "$(vdev other)" ] || log_fail "-s $size created $(vdev other)"
done
log_mustnot_msg "readonly" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" -o readonly=maybe "$TESTPOOL"
log_mustnot_msg "bogus" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" -o bogus=on "$TESTPOOL"
log_mustnot tarn pool import -d "$SCRATCH/no/such/dir" -R "$ALTROOT" "$TESTPOOL"
log_mustnot tarn check -d "$SCRATCH/no/such/dir" "$TESTPOOL-exported"
log_mustnot tarn debug spacemap "$TESTPOOL" 99 0
log_mustnot tarn debug spacemap "$TESTPOOL" 0 999999
log_mustnot tarn debug spacemap "$TESTPOOL" x y
log_mustnot tarn pool create -R "$ALTROOT" other mirror
[ "$(pool_names)" = "$pools_before" ] || log_fail "pools changed"
log_mustnot tarn --socket "$SCRATCH/no/such/dir/tarn.sock" pool list "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
