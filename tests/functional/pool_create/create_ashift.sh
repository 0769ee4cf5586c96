#!/usr/bin/env bash
# pool create -o ashift=9|12: the vdevs' sector size, which sets the smallest allocation (a
# 512-byte bucket appears in the metaslab histograms with ashift=9, never with 12, the
# default); it survives export and import; values outside 9..16 are refused and create nothing.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "pool create -o ashift sets the vdevs' sector size"
trap destroy_all_pools EXIT

for bad in 8 17 x -1; do
	log_mustnot_msg "ashift" tarn pool create -s 128M -R "$ALTROOT" -o ashift=$bad "$TESTPOOL" "$(vdev s)"
done
assert_eq "$(pool_names)" "" "pools after refused ashift values"

smallest_bucket() {
	tarn debug metaslabs -mm "$1" | awk '/histogram/ { getline; print $1; exit }'
}
small_files() {
	log_must tarn create -o compression=off "$1/f"
	for i in $(seq 1 40); do head -c 700 /dev/urandom >"$ALTROOT/$1/f/file$i"; done
	log_must tarn pool sync "$1"
}
log_must tarn pool create -s 128M -R "$ALTROOT" -o ashift=9 a9 "$(vdev a9)"
small_files a9
assert_eq "$(smallest_bucket a9)" 512 "smallest allocation with ashift=9"
log_must tarn pool export a9
import_pool a9
assert_eq "$(smallest_bucket a9)" 512 "ashift=9 after import"
log_must tarn pool create -s 128M -R "$ALTROOT" -o ashift=12 a12 "$(vdev a12)"
small_files a12
assert_eq "$(smallest_bucket a12)" 4K "smallest allocation with ashift=12"
verify_pool a9
verify_pool a12
log_pass
