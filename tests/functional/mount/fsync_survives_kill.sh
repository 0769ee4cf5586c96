#!/usr/bin/env bash
# fsync through the mount commits the intent log: appends each followed by fsync, O_DSYNC
# writes, and sqlite3 transactions in WAL mode (synchronous=FULL) all survive a kill -9 of
# the daemon that comes right after them, with no txg sync in between (pool import replays
# the log); check is clean.
. "$STF_SUITE/include/libtest.sh"
log_assert "fsynced data survives kill -9 of the daemon (intent log replay)"
trap destroy_all_pools EXIT
require_python

default_setup
root="$ALTROOT/$TESTPOOL"
# Created and synced first: a create is not logged, and its fsync would wait for a txg.
log_must touch "$root/appends" "$root/dsync"
log_must tarn pool sync "$TESTPOOL"
log_must python3 - "$root" <<'PY'
import os, sys
root = sys.argv[1]
fd = os.open(os.path.join(root, "appends"), os.O_WRONLY)
for i in range(200):
    os.pwrite(fd, bytes([i % 251]) * 4096, i * 4096)
    os.fsync(fd)
os.close(fd)
fd = os.open(os.path.join(root, "dsync"), os.O_WRONLY | os.O_DSYNC)
for i in range(50):
    os.pwrite(fd, bytes([(i * 7) % 251]) * 1000, i * 1000)
os.close(fd)
PY
if command -v sqlite3 >/dev/null 2>&1; then
	log_must sqlite3 "$root/db.sqlite" "PRAGMA journal_mode=WAL; CREATE TABLE t(x);"
	log_must tarn pool sync "$TESTPOOL"
	script=$(printf 'PRAGMA synchronous=FULL;\n'; for i in $(seq 1 300); do printf 'INSERT INTO t VALUES(%d);\n' "$i"; done)
	log_must sqlite3 "$root/db.sqlite" "$script"
fi
kill_daemon
import_pool "$TESTPOOL"
log_must python3 - "$root" <<'PY'
import os, sys
root = sys.argv[1]
data = open(os.path.join(root, "appends"), "rb").read()
assert len(data) == 200 * 4096, len(data)
for i in range(200):
    assert data[i * 4096:(i + 1) * 4096] == bytes([i % 251]) * 4096, i
data = open(os.path.join(root, "dsync"), "rb").read()
assert len(data) == 50 * 1000, len(data)
for i in range(50):
    assert data[i * 1000:(i + 1) * 1000] == bytes([(i * 7) % 251]) * 1000, i
PY
if command -v sqlite3 >/dev/null 2>&1; then
	log_must sqlite3 "$root/db.sqlite" "PRAGMA integrity_check;"
	stdout_has "ok"
	log_must sqlite3 "$root/db.sqlite" "SELECT count(*) FROM t;"
	assert_eq "$(last_stdout)" "300" "sqlite rows after kill -9"
fi
verify_pool "$TESTPOOL"
log_pass
