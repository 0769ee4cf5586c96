#!/usr/bin/env bash
# pool create raidz|raidz1|raidz2|raidz3: a RAID-Z vdev over the devices, shown as raidzP-N in
# status, with feature@raidz active; files written through the mount read back after export and
# import, and after one child (two for raidz2) is taken offline; too few devices, raidz beside
# a mirror without -f, and a raidz log are refused and make nothing; pool add takes another
# raidz vdev; datasets count data bytes (parity deflated) while pool list counts what is
# allocated.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create makes RAID-Z vdevs that serve reads with children gone"
trap destroy_all_pools EXIT

log_mustnot_msg "at least 3 devices" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" \
	raidz2 "$(vdev a)" "$(vdev b)"
log_mustnot_msg "mismatched replication level" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" \
	raidz "$(vdev a)" "$(vdev b)" "$(vdev c)" mirror "$(vdev d)" "$(vdev e)"
stderr_has "a 3-wide raidz1 and a 2-way mirror"
log_mustnot_msg "log devices cannot be raidz" tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" \
	"$(vdev a)" log raidz "$(vdev b)" "$(vdev c)"
assert_eq "$(pool_names)" "" "pools after the refused creates"
for side in a b c d e; do
	[ ! -e "$(vdev $side)" ] || log_fail "a refused create left $(vdev $side) behind"
done

log_must tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" \
	raidz2 "$(vdev r0)" "$(vdev r1)" "$(vdev r2)" "$(vdev r3)" "$(vdev r4)"
log_must tarn pool status "$TESTPOOL"
stdout_has "raidz2-0"
log_must tarn pool get -H -o value feature@raidz "$TESTPOOL"
assert_eq "$(last_stdout)" "active" "feature@raidz of a raidz pool"
log_must tarn create -o compression=off "$TESTPOOL/fs"
head -c 3M /dev/urandom >"$VDEV_DIR/big.data"
cp "$VDEV_DIR/big.data" "$ALTROOT/$TESTPOOL/fs/big"
for i in $(seq 1 30); do head -c $((i * 1000)) /dev/urandom >"$ALTROOT/$TESTPOOL/fs/small$i"; done
(cd "$ALTROOT/$TESTPOOL/fs" && md5sum small* big) >"$VDEV_DIR/sums.txt"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
(cd "$ALTROOT/$TESTPOOL/fs" && md5sum -c --quiet "$VDEV_DIR/sums.txt") || log_fail "files differ after import"
# Space speaks of data: the file system's referenced is about the 3.5 MB written (parity
# deflated away), while the pool's alloc holds the parity too (3 data columns of 5).
refer=$(tarn list -H -p -o refer "$TESTPOOL/fs")
alloc=$(tarn pool list -H -p -o alloc "$TESTPOOL")
[ "$refer" -ge 3400000 ] && [ "$refer" -le 4200000 ] ||
	log_fail "referenced $refer for about 3.5 MB written"
[ "$alloc" -ge $((refer * 3 / 2)) ] || log_fail "pool alloc $alloc, dataset referenced $refer"
log_must tarn pool offline "$TESTPOOL" "$(vdev r1)"
log_must tarn pool offline "$TESTPOOL" "$(vdev r3)"
log_mustnot_msg "no valid replicas" tarn pool offline "$TESTPOOL" "$(vdev r0)"
log_must tarn pool status "$TESTPOOL"
stdout_has "DEGRADED"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
(cd "$ALTROOT/$TESTPOOL/fs" && md5sum -c --quiet "$VDEV_DIR/sums.txt") || log_fail "files differ with two children offline"
log_must tarn pool online "$TESTPOOL" "$(vdev r1)"
log_must tarn pool online "$TESTPOOL" "$(vdev r3)"
log_must tarn pool wait -t resilver "$TESTPOOL"
log_must tarn pool scrub -w "$TESTPOOL"
log_must tarn pool status "$TESTPOOL"
stdout_has "ONLINE"
# pool add: another raidz2 of the same width; a mirror needs -f.
for new in m0 m1 s0 s1 s2 s3 s4; do truncate -s 128M "$(vdev $new)"; done
log_mustnot_msg "mismatched replication level" tarn pool add "$TESTPOOL" mirror "$(vdev m0)" "$(vdev m1)"
log_must tarn pool add "$TESTPOOL" raidz2 "$(vdev s0)" "$(vdev s1)" "$(vdev s2)" "$(vdev s3)" "$(vdev s4)"
log_must tarn pool status "$TESTPOOL"
stdout_has "raidz2-1"
head -c 2M /dev/urandom >"$ALTROOT/$TESTPOOL/fs/after_add"
log_must tarn pool sync "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
