#!/usr/bin/env bash
# Helpers of the scrub area's kill tests (sourced, not a test).

# scan_examined POOL FUNCTION: bytes examined by the FUNCTION (scrub or resilver) in progress
# on POOL, -1 when none is in progress.
scan_examined() {
	"$TARN" pool status -j -p "$1" | python3 -c 'import json,sys; s=json.load(sys.stdin)["pools"][sys.argv[1]].get("scan_stats"); print(s["examined"] if s and s["function"] == sys.argv[2].upper() and s["state"] == "SCANNING" else -1)' "$1" "$2"
}

# kill_during_scan POOL FUNCTION: once the slow FUNCTION on POOL has examined something and
# that is synced, kill -9 the daemon, import POOL again, and check that the scan resumed from
# at least where it was (not from the start).
kill_during_scan() {
	local before after
	wait_for 60 "[ \"\$(scan_examined $1 $2)\" -gt 0 ]" || log_fail "the $2 made no progress"
	log_must "$TARN" pool sync "$1"
	before=$(scan_examined "$1" "$2")
	kill_daemon
	import_pool "$1"
	after=$(scan_examined "$1" "$2")
	log_note "$2 examined before the kill: $before, after import: $after"
	[ "$after" -ge "$before" ] || log_fail "the $2 restarted from $after (it had examined $before)"
}
