#!/usr/bin/env bash
# failmode: a pool whose writes reach no device suspends. Its vdev lives on a small
# tmpfs that is then filled, so the sparse vdev's new blocks fail with ENOSPC. With
# failmode=continue the daemon keeps serving: status says the pool is suspended, writes fail,
# reads go on. Once the tmpfs has room again, pool clear retries the sync from scratch: the
# pool is reopened from its last committed txg with its intent log replayed, so a file written
# with fsync before the failure is whole, and it takes writes again. With failmode=panic the
# daemon logs why and exits with status 70 at once.
. "$STF_SUITE/include/libtest.sh"
log_assert "failmode continue keeps serving a suspended pool; panic ends the daemon"
small="$SCRATCH/small"
cleanup_failmode() {
	destroy_all_pools
	umount -l "$small" 2>/dev/null
	# A pool the daemon held when it exited stays in its cache file (as in zpool.cache); these
	# two are gone with the tmpfs, so take them out for the tests that follow.
	python3 - "$TARN_SOCKET.cache" <<'PY' 2>/dev/null
import json, sys
path = sys.argv[1]
cache = json.load(open(path))
cache["pools"] = [p for p in cache["pools"] if p["name"] not in ("contpool", "panicpool")]
json.dump(cache, open(path, "w"))
PY
}
trap cleanup_failmode EXIT
mkdir -p "$small"
mount -t tmpfs -o size=48m tmpfs "$small" || log_unsupported "cannot mount a tmpfs"

suspend_pool() {
	local pool=$1
	create_pool "$pool" "$small/$pool.img"
	log_must tarn pool set failmode="$2" "$pool"
	log_must dd if=/dev/urandom of="$ALTROOT/$pool/before" bs=64k count=4 status=none
	log_must tarn pool sync "$pool"
	# Durable through the intent log only: the txg that carries it will fail.
	log_must dd if=/dev/urandom of="$SCRATCH/synced.$pool" bs=4k count=16 status=none
	log_must dd if="$SCRATCH/synced.$pool" of="$ALTROOT/$pool/synced" bs=4k conv=fsync status=none
	# Fill the tmpfs: the vdev's unwritten (sparse) blocks can no longer be allocated.
	dd if=/dev/zero of="$small/fill.$pool" bs=1M status=none 2>/dev/null
	dd if=/dev/urandom of="$ALTROOT/$pool/after" bs=1M count=8 status=none 2>/dev/null
	_run_logged tarn pool sync "$pool"
}

suspend_pool contpool continue
[ "$LAST_STATUS" -ne 0 ] || log_fail "the sync of a pool whose writes fail succeeded"
log_must tarn pool status contpool
stdout_has "status: the pool is suspended"
stdout_has "failmode=continue"
cat "$ALTROOT/contpool/before" >/dev/null || log_fail "reads stopped on a suspended pool"
pid=$(daemon_pid)
kill -0 "$pid" || log_fail "the daemon died under failmode=continue"

# Room again: pool clear reopens the pool and it serves writes; the fsynced file is whole.
rm -f "$small/fill.contpool"
log_must tarn pool clear contpool
stdout_has "pool contpool resumed"
log_must tarn pool status contpool
stdout_lacks "suspended"
cmp "$SCRATCH/synced.contpool" "$ALTROOT/contpool/synced" || log_fail "the fsynced file changed across the resume"
[ "$(stat -c %s "$ALTROOT/contpool/before")" -eq $((4 * 65536)) ] || log_fail "the synced file is not whole"
log_must dd if=/dev/urandom of="$ALTROOT/contpool/resumed" bs=64k count=2 status=none
log_must tarn pool sync contpool
verify_pool contpool
log_must tarn pool export contpool
rm -f "$small"/*

suspend_pool panicpool panic
pid=$(daemon_pid)
wait_for 20 "! kill -0 $pid 2>/dev/null" || log_fail "the daemon did not exit under failmode=panic"
grep -q "its failmode is panic" "$TARN_SOCKET.log" || log_fail "no log line says why the daemon exited"
unmount_stale
log_pass
