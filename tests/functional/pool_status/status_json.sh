#!/usr/bin/env bash
# pool status -j: {"pools": [{name, state, txg, vdevs: [{children: [{path, state, *_errors}]}]}]}
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status -j prints the vdev tree as JSON"
require_python

log_must tarn pool status -j "$TESTPOOL"
got=$(python3 -c '
import json, sys
pool = json.load(sys.stdin)["pools"][0]
assert isinstance(pool["txg"], int)
leaves = [c for v in pool["vdevs"] for c in v["children"]]
errors = sum(c["read_errors"] + c["write_errors"] + c["checksum_errors"] for c in leaves)
print(pool["name"], pool["state"], " ".join(c["path"] for c in leaves), errors)
' <"$LAST_STDOUT") || log_fail "JSON does not have the documented shape"
assert_eq "$got" "$TESTPOOL ONLINE $(vdev "$TESTPOOL") 0" "status -j"
log_pass
