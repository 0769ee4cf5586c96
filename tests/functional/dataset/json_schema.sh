#!/usr/bin/env bash
# -j follows OpenZFS 2.3's JSON schema on a real pool, verb by verb: every document opens with
# output_version (command, vers_major 0, vers_minor 1); pool list, pool status and pool get -j
# key the pool by name (zpool's shape), list and get -j key datasets by name (zfs's shape),
# each property a value/source pair (NONE for statistics, DEFAULT, LOCAL, INHERITED with the
# dataset it comes from); -p makes values exact integers, agreeing with -H -p; version -j gives
# both sides' versions.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_python
log_assert "-j prints OpenZFS 2.3's JSON schema for pool list/status/get, list, get and version"
trap destroy_all_pools EXIT

default_setup
log_must tarn set compression=lz4 "$TESTPOOL"
log_must tarn create -o recordsize=16K "$TESTPOOL/a"
log_must tarn create "$TESTPOOL/a/b"
log_must tarn snapshot "$TESTPOOL/a@s1"

# check_json COMMAND PYTHON ARGS...: run PYTHON on the last stdout, a JSON document, after
# checking its header names COMMAND; PYTHON sees the document as `d` and ARGS as sys.argv[1:].
check_json() {
	local command=$1 code=$2
	shift 2
	python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d)[0] == 'output_version', list(d)
assert d['output_version'] == {'command': sys.argv[2], 'vers_major': 0, 'vers_minor': 1}, d['output_version']
sys.argv = sys.argv[2:]
def source(p):
    return p['source']['type'] + ' ' + p['source']['data']
$code
" "$LAST_STDOUT" "$command" "$@" || log_fail "$command -j does not have the documented shape"
}

log_must tarn pool list -j "$TESTPOOL"
check_json "tarn pool list" '
pool = d["pools"][sys.argv[1]]
assert (pool["name"], pool["type"], pool["state"]) == (sys.argv[1], "POOL", "ONLINE"), pool
assert isinstance(pool["guid"], str) and pool["guid"].isdigit(), pool
for name in ("size", "allocated", "free", "fragmentation", "capacity", "health"):
    assert isinstance(pool["properties"][name]["value"], str), name
    assert source(pool["properties"][name]) == "NONE -", name
' "$TESTPOOL"
log_must tarn pool list -H -p -o size,alloc "$TESTPOOL"
expected=$(last_stdout)
log_must tarn pool list -j -p "$TESTPOOL"
got=$(python3 -c 'import json,sys; p=json.load(sys.stdin)["pools"][sys.argv[1]]["properties"]; print("%d\t%d" % (p["size"]["value"], p["allocated"]["value"]))' "$TESTPOOL" <"$LAST_STDOUT")
assert_eq "$got" "$expected" "pool list -j -p against -H -p"

log_must tarn pool status -j "$TESTPOOL"
check_json "tarn pool status" '
pool = d["pools"][sys.argv[1]]
assert pool["state"] == "ONLINE" and pool["error_count"] == "0", pool
root = pool["vdevs"][sys.argv[1]]
assert root["vdev_type"] == "root" and root["state"] == "HEALTHY", root
leaf = root["vdevs"][sys.argv[2]]
assert (leaf["name"], leaf["path"], leaf["vdev_type"], leaf["state"]) == (sys.argv[2], sys.argv[2], "file", "HEALTHY"), leaf
assert (leaf["read_errors"], leaf["write_errors"], leaf["checksum_errors"]) == ("0", "0", "0"), leaf
' "$TESTPOOL" "$(vdev "$TESTPOOL")"

log_must tarn pool get -j -p all "$TESTPOOL"
check_json "tarn pool get" '
pool = d["pools"][sys.argv[1]]
props = pool["properties"]
assert isinstance(props["size"]["value"], int) and source(props["size"]) == "NONE -", props["size"]
assert props["guid"]["value"] == pool["guid"], (props["guid"], pool["guid"])
assert source(props["altroot"]) == "LOCAL -", props["altroot"]
assert props["health"]["value"] == "ONLINE", props["health"]
' "$TESTPOOL"

log_must tarn list -j -r -t all -o name,used,compression,recordsize,mountpoint "$TESTPOOL"
check_json "tarn list" '
pool = sys.argv[1]
sets = d["datasets"]
assert sorted(sets) == [pool, pool + "/a", pool + "/a/b", pool + "/a@s1"], sorted(sets)
b = sets[pool + "/a/b"]
assert (b["name"], b["type"], b["pool"]) == (pool + "/a/b", "FILESYSTEM", pool), b
assert source(b["properties"]["used"]) == "NONE -", b
assert source(b["properties"]["compression"]) == "INHERITED " + pool, b
assert source(b["properties"]["recordsize"]) == "INHERITED " + pool + "/a", b
assert b["properties"]["recordsize"]["value"] == "16K", b
assert source(sets[pool + "/a"]["properties"]["recordsize"]) == "LOCAL -", sets[pool + "/a"]
assert source(sets[pool]["properties"]["recordsize"]) == "DEFAULT -", sets[pool]
s = sets[pool + "/a@s1"]
assert (s["type"], s["dataset"], s["snapshot_name"]) == ("SNAPSHOT", pool + "/a", "s1"), s
' "$TESTPOOL"

log_must tarn get -j -p all "$TESTPOOL/a/b"
check_json "tarn get" '
name = sys.argv[1]
b = d["datasets"][name]
assert (b["name"], b["type"], b["pool"]) == (name, "FILESYSTEM", sys.argv[2]), b
assert isinstance(b["createtxg"], int), b
props = b["properties"]
assert props["recordsize"]["value"] == 16384 and source(props["recordsize"]) == "INHERITED " + sys.argv[2] + "/a", props["recordsize"]
assert props["compression"]["value"] == "lz4" and source(props["compression"]) == "INHERITED " + sys.argv[2], props["compression"]
assert isinstance(props["used"]["value"], int) and source(props["used"]) == "NONE -", props["used"]
assert source(props["atime"]) == "DEFAULT -", props["atime"]
' "$TESTPOOL/a/b" "$TESTPOOL"

log_must tarn version -j
check_json "tarn version" '
v = d["tarn_version"]
assert v["userland"].startswith("tarn-") and v["userland"] == v["daemon"], v
assert v["userland_protocol"] == v["daemon_protocol"] and v["userland_protocol"].isdigit(), v
'
log_pass
