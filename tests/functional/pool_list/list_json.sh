#!/usr/bin/env bash
# pool list -j: {"pools": [{name, size, alloc, free, frag, cap, health}]} with numbers as numbers,
# agreeing with -H -p.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool list -j prints the documented JSON"
require_python

log_must tarn pool list -H -p -o name,size,alloc,free,health
expected=$(last_stdout)
log_must tarn pool list -j
got=$(python3 -c '
import json, sys
pools = json.load(sys.stdin)["pools"]
for p in pools:
    for key in ("size", "alloc", "free", "frag", "cap"):
        assert isinstance(p[key], int), key
    print("\t".join(str(p[k]) for k in ("name", "size", "alloc", "free", "health")))
' <"$LAST_STDOUT") || log_fail "JSON does not have the documented shape"
assert_eq "$got" "$expected" "-j against -H -p"
log_must tarn pool list -j -o name
python3 -c 'import json, sys; assert list(json.load(sys.stdin)["pools"][0]) == ["name"]' <"$LAST_STDOUT" ||
	log_fail "-j -o name should give only the name"
log_pass
