#!/usr/bin/env bash
# bench scrub on a small mirror: the scrub's rate beside fio's sequential read of the
# same vdev files, and a resilver that reads and writes about what the side missed (at most
# 1.1x), in JSON.
. "$STF_SUITE/include/libtest.sh"
log_assert "bench scrub reports scrub and resilver figures beside their baselines"
require_python
command -v fio >/dev/null 2>&1 || log_unsupported "fio is not installed"

log_must tarn bench scrub --dir "$SCRATCH/bench" --size 64M --missed 32M --vdev-size 512M -j
python3 - "$LAST_STDOUT" <<'PY' || log_fail "bench scrub figures out of range"
import json, sys
record = json.load(open(sys.argv[1]))
scrub, resilver = record["scrub"], record["resilver"]
assert scrub["read_bytes"] >= 2 * scrub["data_bytes"], scrub      # every copy of every block
assert scrub["mib_per_second"] > 0 and scrub["fio_read_mib_per_second"] > 0, scrub
assert scrub["ratio"] > 0, scrub
assert resilver["missed_bytes"] >= 32 << 20, resilver
assert resilver["written_per_missed"] <= 1.1, resilver
assert resilver["read_per_missed"] <= 1.1, resilver
print("scrub ratio %.2f, resilver read %.2fx written %.2fx" % (scrub["ratio"], resilver["read_per_missed"], resilver["written_per_missed"]))
PY
[ ! -e "$SCRATCH/bench/scrub-bench" ] || log_fail "the benchmark left its vdevs behind"
log_pass
