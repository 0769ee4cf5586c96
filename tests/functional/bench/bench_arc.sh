#!/usr/bin/env bash
# bench arc on a small pool: a working set larger than the ARC as contents but not
# as stored gets more hits with the compressed ARC than with the ARC keeping contents; stored
# bytes below logical bytes only when compressed; without decoded copies metadata hits
# decompress; the read counters' cost rows are there with "off" as their baseline; in JSON.
. "$STF_SUITE/include/libtest.sh"
log_assert "bench arc compares the compressed ARC with contents and the counters on with off"
require_python

log_must tarn bench arc --dir "$SCRATCH/bench" --working-set 24M --arc-max 16M --files 300 \
	--hot-files 20 --device-delay-us 200 --seconds 0.3 -j
python3 - "$LAST_STDOUT" <<'PY' || log_fail "bench arc figures out of range"
import json, sys
rows = json.load(open(sys.argv[1]))["arc"]
def row(workload, arc):
    found = [r for r in rows if r["workload"].startswith(workload) and r["arc"] == arc]
    assert len(found) == 1, (workload, arc, found)
    return found[0]
compressed, contents = row("working set", "compressed"), row("working set", "contents (compressed ARC off)")
assert compressed["hit_pct"] > contents["hit_pct"], (compressed, contents)
assert compressed["arc_stored"] < compressed["arc_logical"], compressed
assert contents["arc_stored"] == contents["arc_logical"], contents
assert row("metadata", "compressed, no decoded copies")["decompress_per_op"] > 0.5
assert row("metadata", "compressed")["decompress_per_op"] < 0.5
on, off = row("ARC hits alone", "counters on"), row("ARC hits alone", "counters off")
assert on["ops_s"] > 0 and off["vs_baseline"] == 1.0, (on, off)
print("working set hits %d%% vs %d%%; counters on/off %.2f" % (compressed["hit_pct"], contents["hit_pct"], on["vs_baseline"]))
PY
[ ! -e "$SCRATCH/bench/bench-arc-data.img" ] || log_fail "the benchmark left its vdev behind"
log_pass
