#!/usr/bin/env bash
# pool list shows imported pools only, as zpool list does: a pool exported on disk is not
# listed, by name it is "no such pool", and `pool import` (no pool name) lists it instead. With
# no pool imported, "no pools available" and exit 0 (nothing with -H, no pools with -j). -d is
# not an option of pool list: it is refused with a message naming `pool import -d DIR`.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool list shows imported pools only; pool import lists the exported ones"
require_python

create_pool listexp "$(vdev listexp)"
log_must tarn pool export listexp
log_must tarn pool list -H -o name
assert_eq "$(last_stdout)" "$TESTPOOL" "pool list -H with $TESTPOOL imported and listexp exported"
log_must tarn pool list
stdout_lacks listexp
log_mustnot_msg "cannot open 'listexp': no such pool" tarn pool list listexp
log_mustnot_msg "tarn pool import -d $VDEV_DIR" tarn pool list -d "$VDEV_DIR"
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: listexp"
stdout_has "$(vdev listexp)"
stdout_lacks "pool: $TESTPOOL"
stdout_has "already imported by the tarn daemon on $TARN_SOCKET: $TESTPOOL"

# Nothing imported (the daemon exits with its last pool): said on stdout, exit 0.
log_must tarn pool export "$TESTPOOL"
log_must tarn pool list
assert_eq "$(last_stdout)" "no pools available" "pool list with no pool imported"
log_must tarn pool list -H
assert_eq "$(last_stdout)" "" "pool list -H with no pool imported"
log_must tarn pool list -j
python3 -c 'import json, sys; assert json.load(sys.stdin)["pools"] == {}' <"$LAST_STDOUT" ||
	log_fail "pool list -j with no pool imported should list no pools"
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: listexp"
stdout_has "pool: $TESTPOOL"

import_pool "$TESTPOOL"
log_must tarn pool destroy -d "$VDEV_DIR" listexp
rm -f "$(vdev listexp)"
log_pass
