#!/usr/bin/env bash
# pool status -j follows zpool status -j (OpenZFS 2.3): output_version, "pools" keyed by name,
# the vdev tree under vdevs (the root named after the pool, its vdevs keyed by name) with
# zpool's vdev states (HEALTHY) and error counts; -p makes the counts integers.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status -j prints zpool's JSON schema"
require_python

log_must tarn pool status -j -p "$TESTPOOL"
got=$(python3 -c '
import json, sys
document = json.load(sys.stdin)
assert document["output_version"]["command"] == "tarn pool status", document["output_version"]
pool = document["pools"][sys.argv[1]]
assert isinstance(pool["txg"], int) and isinstance(pool["guid"], int), pool
root = pool["vdevs"][sys.argv[1]]
assert root["vdev_type"] == "root", root
leaves = [v for v in root["vdevs"].values() if v["vdev_type"] in ("file", "disk")]
errors = sum(v["read_errors"] + v["write_errors"] + v["checksum_errors"] for v in leaves)
print(pool["name"], pool["state"], " ".join(v["path"] + ":" + v["state"] for v in leaves), errors, pool["error_count"])
' "$TESTPOOL" <"$LAST_STDOUT") || log_fail "JSON does not have the documented shape"
assert_eq "$got" "$TESTPOOL ONLINE $(vdev "$TESTPOOL"):HEALTHY 0 0" "status -j -p"
log_must tarn pool status -j "$TESTPOOL"
python3 -c 'import json, sys; assert json.load(sys.stdin)["pools"][sys.argv[1]]["error_count"] == "0"' "$TESTPOOL" <"$LAST_STDOUT" ||
	log_fail "-j without -p should give counts as strings"
log_mustnot tarn pool status -p "$TESTPOOL"
log_pass
