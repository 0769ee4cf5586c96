#!/usr/bin/env bash
# pool sync POOL: a txg sync happens (the txg moves on) and written data is on disk: a kill -9
# right after the sync loses nothing.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool sync advances the txg and makes writes durable"

txg() { tarn pool status -j -p "$TESTPOOL" | sed -n 's/.*"txg": \([0-9]*\).*/\1/p'; }
before=$(txg)
[[ $before =~ ^[0-9]+$ ]] || log_fail "no txg in pool status -j"
echo "synced data" >"$ALTROOT/$TESTPOOL/synced"
log_must tarn pool sync "$TESTPOOL"
stdout_has "synced pool $TESTPOOL"
after=$(txg)
[ "$after" -gt "$before" ] || log_fail "txg $before did not advance (now $after)"
kill_daemon
import_pool "$TESTPOOL"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/synced")" "synced data" "synced file after kill -9"
verify_pool "$TESTPOOL"
log_pass
