#!/usr/bin/env bash
# Reservations through mounts: a dataset's reservation counts as used in its parent and is
# taken from everyone else's avail; a sibling writing through its mount gets ENOSPC from
# write(2) while the reserved dataset still writes into its reservation; a reservation
# beyond what is available is refused; refreservation shows as usedbyrefreservation.
. "$STF_SUITE/include/libtest.sh"
require_python
log_assert "a reservation makes a sibling's writes fail with ENOSPC; the reserved dataset still writes"
trap destroy_all_pools EXIT

helper="$STF_SUITE/include/write_full.py"
MIB=1048576

json() {
	python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print(v)' \
		"${3:-$SCRATCH/out}" "$1" ${2:+"$2"}
}

value() { get_prop "$1" "$2" || log_fail "cannot get $1 of $2"; }

default_setup
log_must tarn create -o compression=off "$TESTPOOL/kept"
log_must tarn create -o compression=off "$TESTPOOL/other"
before=$(value available "$TESTPOOL/other")
log_mustnot_msg "greater than available" tarn set reservation=$((before + 64 * MIB)) "$TESTPOOL/kept"
reserved=$((before - 40 * MIB))
log_must tarn set reservation=$reserved "$TESTPOOL/kept"
assert_eq "$(value reservation "$TESTPOOL/kept")" "$reserved" "the reservation"
[ "$(value used "$TESTPOOL")" -ge "$reserved" ] || log_fail "the pool's root does not count the reservation as used"
other=$(value available "$TESTPOOL/other")
[ "$other" -le $((41 * MIB)) ] || log_fail "the sibling still sees $other bytes available"

# The sibling runs out of space at write(2), having written no more than is left.
python3 "$helper" write-loop "$ALTROOT/$TESTPOOL/other/loop" $MIB $((400 * MIB)) >"$SCRATCH/out" ||
	log_fail "write-loop"
log_note "sibling: $(cat "$SCRATCH/out")"
assert_eq "$(json first call)" "write" "the sibling's first failing call"
assert_eq "$(json first errno)" "ENOSPC" "its errno"
[ "$(json written)" -le $((41 * MIB)) ] || log_fail "the sibling wrote $(json written) bytes"

# The reserved dataset still writes 64 MiB into its reservation.
python3 "$helper" pattern-file "$ALTROOT/$TESTPOOL/kept/data" $((64 * MIB)) || log_fail "writing into the reservation"
log_must sync -f "$ALTROOT/$TESTPOOL/kept/data"

# refreservation: what the dataset does not fill shows as usedbyrefreservation.
log_must tarn set refreservation=16M "$TESTPOOL/other"
log_must tarn set reservation=none "$TESTPOOL/kept"
rm -f "$ALTROOT/$TESTPOOL/other/loop"
log_must tarn pool sync "$TESTPOOL"
log_must tarn pool sync "$TESTPOOL"
refrsrv=$(value usedbyrefreservation "$TESTPOOL/other")
dataset=$(value usedbydataset "$TESTPOOL/other")
assert_eq "$refrsrv" "$((16 * MIB - dataset))" "usedbyrefreservation"
log_must tarn list -H -o name,quota,reservation,refreservation "$TESTPOOL/other"
stdout_has "none"
stdout_has "16M"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
