#!/usr/bin/env bash
# pool list -j follows zpool list -j (OpenZFS 2.3): output_version, then "pools" keyed by name,
# each with name, type POOL, state, guid, txg and "properties" of value/source pairs named as
# zpool names them (allocated, fragmentation, capacity); -p makes the values exact integers that
# agree with -H -p; -o selects the properties.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool list -j prints zpool's JSON schema"
require_python

log_must tarn pool list -H -p -o name,size,alloc,free,health
expected=$(last_stdout)
log_must tarn pool list -j -p
got=$(python3 -c '
import json, sys
document = json.load(sys.stdin)
assert document["output_version"] == {"command": "tarn pool list", "vers_major": 0, "vers_minor": 1}, document["output_version"]
for name, pool in document["pools"].items():
    assert pool["name"] == name and pool["type"] == "POOL", pool
    assert isinstance(pool["guid"], int) and isinstance(pool["txg"], int), pool
    props = pool["properties"]
    for key in ("size", "allocated", "free", "fragmentation", "capacity"):
        assert isinstance(props[key]["value"], int), key
        assert props[key]["source"] == {"type": "NONE", "data": "-"}, props[key]
    print("\t".join([name] + [str(props[k]["value"]) for k in ("size", "allocated", "free", "health")]))
' <"$LAST_STDOUT") || log_fail "pool list -j -p does not have the documented shape"
assert_eq "$got" "$expected" "-j -p against -H -p"
log_must tarn pool list -j
python3 -c '
import json, sys
props = json.load(sys.stdin)["pools"][sys.argv[1]]["properties"]
assert all(isinstance(p["value"], str) for p in props.values()), props
assert props["capacity"]["value"].endswith("%"), props
' "$TESTPOOL" <"$LAST_STDOUT" || log_fail "-j without -p should give strings as people read them"
log_must tarn pool list -j -o name,freeing
python3 -c 'import json, sys; assert list(json.load(sys.stdin)["pools"][sys.argv[1]]["properties"]) == ["freeing"]' "$TESTPOOL" <"$LAST_STDOUT" ||
	log_fail "-j -o name,freeing should give only freeing among the properties"
log_pass
