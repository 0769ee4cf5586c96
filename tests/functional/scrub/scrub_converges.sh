#!/usr/bin/env bash
# Zero most of one mirror side (its data area; the labels stay) beneath the running daemon,
# after an import that left the cache cold: ONE scrub repairs every bad copy and reports what
# it did. Its "repaired" is not zero, its bad copies are exactly the ones the damaged leaf's
# CKSUM column counted (the walk's own reads of indirect and dnode blocks repair copies too,
# and those count), "issued" does not pass "scanned", check -n then finds no bad copy, a
# second scrub repairs nothing and the CKSUM column does not grow; finally the repaired side
# alone holds every block.
. "$STF_SUITE/include/libtest.sh"
log_assert "one scrub repairs every bad copy of a wiped mirror side and reports it"
trap destroy_all_pools EXIT

pool=converged
a=$(vdev v-a)
b=$(vdev v-b)

# scan_field FIELD: a field of the pool's scan_stats in `pool status -j -p`.
scan_field() {
	"$TARN" pool status -j -p "$pool" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pools"][sys.argv[1]]["scan_stats"][sys.argv[2]])' "$pool" "$1"
}
# cksum PATH: the CKSUM count of one leaf of the pool (its vdevs are keyed by name, leaves by
# path, at any depth).
cksum() {
	"$TARN" pool status -j -p "$pool" | python3 -c '
import json, sys
def leaves(vdevs):
    for name, vdev in vdevs.items():
        yield name, vdev
        yield from leaves(vdev.get("vdevs", {}))
pool = json.load(sys.stdin)["pools"][sys.argv[1]]
for name, vdev in leaves(pool["vdevs"]):
    if vdev.get("path") == sys.argv[2]:
        print(vdev["checksum_errors"])' "$pool" "$1"
}
# scrub_once: start a scrub and wait for it.
scrub_once() {
	log_must tarn pool scrub "$pool"
	log_must tarn pool wait -t scrub "$pool"
}

create_pool "$pool" -O recordsize=16K mirror "$a" "$b"
log_must tarn create "$pool/fs"
for i in $(seq 1 12); do
	head -c $((i * 40000)) /dev/urandom >"$ALTROOT/$pool/fs/file$i" || log_fail "cannot write file$i"
done
mkdir "$ALTROOT/$pool/fs/dir" || log_fail "mkdir failed"
for i in $(seq 1 150); do echo "small file $i" >"$ALTROOT/$pool/fs/dir/small$i"; done
log_must tarn snapshot "$pool/fs@before"
for i in 1 2 3; do head -c 30000 /dev/urandom >"$ALTROOT/$pool/fs/file$i"; done
want=$(digest "$ALTROOT/$pool/fs"/file* "$ALTROOT/$pool/fs/dir"/small*)
# A fresh import: nothing of the pool is cached, so the scrub's walk reads its indirect and
# dnode blocks from disk, from side a first.
log_must tarn pool export "$pool"
import_pool "$pool"

# Zero side a's data area (4 MiB after the start, up to the two end labels) beneath the daemon.
size=$(stat -c %s "$a")
dd if=/dev/zero of="$a" bs=1M seek=4 count=$((size / 1048576 - 5)) conv=notrunc status=none ||
	log_fail "dd into $a failed"
# A sync first, so that what the syncing of any txg reads (and repairs) on its own is counted
# before the scrub starts: the CKSUM growth measured from here on is the scrub's.
log_must tarn pool sync "$pool"
cksum_before=$(cksum "$a")

scrub_once
log_must tarn pool status "$pool"
stdout_has "scan: scrub repaired"
stdout_lacks "scan: scrub repaired 0B"
stdout_has "with 0 errors"
examined=$(scan_field examined)
issued=$(scan_field issued)
repaired=$(scan_field processed)
copies_bad=$(scan_field copies_bad)
cksum_a=$(($(cksum "$a") - cksum_before))
log_note "scrub: examined $examined, issued $issued, repaired $repaired bytes, $copies_bad bad copies; CKSUM of side a grew by $cksum_a"
[ "$repaired" -gt 0 ] || log_fail "the scrub repaired nothing"
[ "$issued" -le "$examined" ] || log_fail "issued $issued is more than scanned $examined"
assert_eq "$(scan_field unrepaired)" 0 "bad copies the scrub could not repair"
assert_eq "$copies_bad" "$cksum_a" "bad copies the scrub reported (against the CKSUM growth of side a)"
assert_eq "$(cksum "$b")" 0 "CKSUM of side b"

# Nothing is left: check -n reads every copy and finds none bad.
log_must tarn check -n "$pool"
stdout_has "(0 bad, 0 repaired)"
stdout_has "no errors found"
stdout_lacks "bad copies"

# A second scrub repairs nothing and finds nothing.
cksum_after=$(cksum "$a")
scrub_once
log_must tarn pool status "$pool"
stdout_has "scan: scrub repaired 0B"
stdout_has "with 0 errors"
assert_eq "$(scan_field copies_bad)" 0 "bad copies found by the second scrub"
assert_eq "$(cksum "$a")" "$cksum_after" "CKSUM of side a after the second scrub"
[ "$(scan_field issued)" -le "$(scan_field examined)" ] || log_fail "second scrub: issued is more than scanned"

# Side a alone now holds every block: zero side b the same way and read everything back.
log_must tarn pool export "$pool"
dd if=/dev/zero of="$b" bs=1M seek=4 count=$((size / 1048576 - 5)) conv=notrunc status=none ||
	log_fail "dd into $b failed"
import_pool "$pool"
assert_eq "$(digest "$ALTROOT/$pool/fs"/file* "$ALTROOT/$pool/fs/dir"/small*)" "$want" "files read from side a alone"
log_must tarn pool destroy "$pool"
log_pass
