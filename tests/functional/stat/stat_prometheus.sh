#!/usr/bin/env bash
# stat --prometheus prints every table in the OpenMetrics text format with node_exporter's ZFS
# names; tarn daemon --metrics ADDR serves the same text at http://ADDR/metrics (a second
# daemon on its own socket, holding a pool of its own); misuse is refused.
. "$STF_SUITE/include/libtest.sh"
log_assert "stat --prometheus and daemon --metrics export every table"

log_must tarn stat --prometheus
text="$LAST_STDOUT"
tail -1 "$text" | grep -qx '# EOF' || log_fail "the text does not end with # EOF"
for family in node_zfs_arc_hits node_zfs_arc_size node_zfs_arc_c_max node_zfs_zpool_nread \
	node_zfs_zpool_writes node_zfs_zil_zil_commit_count node_zfs_zil_zil_itx_indirect_bytes \
	tarn_txg_sync_ns tarn_vdev_queue_pending; do
	grep -q "^# TYPE $family " "$text" || log_fail "family $family not declared"
done
grep -Eq "^node_zfs_arc_hits\{zpool=\"$TESTPOOL\"\} [0-9]+$" "$text" || log_fail "no arc hits sample for $TESTPOOL"
grep -v '^#' "$text" | awk '$2 !~ /^[0-9]+$/ || NF != 2 { bad = 1 } END { exit bad }' ||
	log_fail "a sample line is not 'name{labels} integer'"
log_mustnot tarn stat --prometheus txgs
log_mustnot tarn stat --prometheus -j

# A second daemon serving metrics over HTTP.
socket="$SCRATCH/metrics.sock"
port=$((20000 + $$ % 20000))
TARN_SOCKET="$socket" log_must tarn daemon --metrics "127.0.0.1:$port"
stop_second() { TARN_SOCKET="$socket" "$TARN" daemon --stop >/dev/null 2>&1; }
trap stop_second EXIT
TARN_SOCKET="$socket" log_must tarn pool create -R "$ALTROOT" -s 128M metricspool "$VDEV_DIR/metrics.img"
fetch() {
	python3 - "$port" "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=10) as r:
        print(r.status); print(r.headers["Content-Type"]); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
fetch /metrics >"$SCRATCH/metrics.out"
head -1 "$SCRATCH/metrics.out" | grep -qx 200 || log_fail "GET /metrics: $(head -1 "$SCRATCH/metrics.out")"
sed -n 2p "$SCRATCH/metrics.out" | grep -q '^application/openmetrics-text' || log_fail "content type"
grep -Eq '^node_zfs_arc_c_max\{zpool="metricspool"\} [0-9]+$' "$SCRATCH/metrics.out" ||
	log_fail "no c_max sample for metricspool"
[ "$(fetch /nothing | head -1)" = 404 ] || log_fail "an unknown path is not 404"
TARN_SOCKET="$socket" log_must tarn pool destroy metricspool
log_must rm -f "$VDEV_DIR/metrics.img"
log_pass
