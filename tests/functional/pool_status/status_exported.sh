#!/usr/bin/env bash
# pool status shows imported pools only, as zpool status does: a pool exported on disk is not
# shown, by name it is "no such pool", and `pool import` (no pool name) shows its vdev tree and
# state instead. With no pool imported, "no pools available" on stderr and exit 0. -d is not an
# option of pool status: it is refused with a message naming `pool import -d DIR`.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status shows imported pools only; pool import shows the exported ones"
require_python

create_pool statexp mirror "$(vdev statexp-a)" "$(vdev statexp-b)"
log_must tarn pool export statexp
log_must tarn pool status
stdout_has "pool: $TESTPOOL"
stdout_lacks statexp
log_mustnot_msg "cannot open 'statexp': no such pool" tarn pool status statexp
log_mustnot_msg "tarn pool import -d $VDEV_DIR" tarn pool status -d "$VDEV_DIR" statexp
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: statexp"
grep -qE '^\s+mirror-0\s+ONLINE$' "$LAST_STDOUT" || log_fail "the listing shows statexp's mirror"
stdout_has "$(vdev statexp-a)"
stdout_has "$(vdev statexp-b)"

# Nothing imported (the daemon exits with its last pool): said on stderr, exit 0.
log_must tarn pool export "$TESTPOOL"
log_must tarn pool status
assert_eq "$(last_stdout)" "" "pool status stdout with no pool imported"
grep -qx "no pools available" "$LAST_STDERR" || log_fail "pool status should say no pools available"
log_must tarn pool status -j
python3 -c 'import json, sys; assert json.load(sys.stdin)["pools"] == {}' <"$LAST_STDOUT" ||
	log_fail "pool status -j with no pool imported should show no pools"

import_pool "$TESTPOOL"
log_must tarn pool destroy -d "$VDEV_DIR" statexp
rm -f "$(vdev statexp-a)" "$(vdev statexp-b)"
log_pass
