#!/usr/bin/env bash
# The cache file: an imported pool is recorded in the daemon's cache file (here
# $TARN_SOCKET.cache, the default beside a private socket); after the daemon stops, starting it
# again (tarn pool import -a) brings the pool back, mounted where it was, without -d; after a
# kill -9 the next daemon does the same, and importing as before finds it done; an explicit
# export takes it out of the file.
. "$STF_SUITE/include/libtest.sh"
log_assert "pools in the cache file come back when the daemon starts"
require_python
trap destroy_all_pools EXIT
cache="$TARN_SOCKET.cache"
listed() { python3 -c 'import json,sys; print(" ".join(p["name"] for p in json.load(open(sys.argv[1]))["pools"]))' "$cache"; }

default_setup
write_marked_file "$ALTROOT/$TESTPOOL/data" 64
sum=$(digest "$ALTROOT/$TESTPOOL/data")
log_must tarn pool get -H -o value,source cachefile "$TESTPOOL"
assert_eq "$(tr -s '\t' ' ' <"$LAST_STDOUT")" "- default" "cachefile property (the default, as zpool shows it)"
assert_eq "$(listed)" "$TESTPOOL" "pools in the cache file"

# A clean stop exports the pool but keeps it in the file.
log_must tarn daemon --stop
wait_for 30 '[ -z "$(daemon_pid)" ]' || log_fail "the daemon did not stop"
assert_eq "$(listed)" "$TESTPOOL" "pools in the cache file after the daemon stopped"
is_mounted "$ALTROOT/$TESTPOOL" && log_fail "still mounted after the daemon stopped"

log_must tarn pool import -a
stdout_has "pool $TESTPOOL is imported"
pool_is_imported "$TESTPOOL" || log_fail "$TESTPOOL did not come back"
is_mounted "$ALTROOT/$TESTPOOL" || log_fail "$TESTPOOL is not mounted at its altroot"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/data")" "$sum" "data after the restart"

# A crash: the next daemon imports it at start; the usual import finds it done.
kill_daemon
import_pool "$TESTPOOL"
stdout_has "from the cache file"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/data")" "$sum" "data after the crash"
log_must tarn pool history "$TESTPOOL"
stdout_has "tarn pool create"

# An export by request forgets it.
log_must tarn pool export "$TESTPOOL"
assert_eq "$(listed)" "" "pools in the cache file after export"
import_pool -o cachefile=none "$TESTPOOL"
assert_eq "$(listed)" "" "pools in the cache file after an import with cachefile=none"
log_must tarn pool get -H -o value cachefile "$TESTPOOL"
assert_eq "$(cat "$LAST_STDOUT")" "none" "cachefile=none"
log_must tarn pool set cachefile="$SCRATCH/other.cache" "$TESTPOOL"
grep -q "\"$TESTPOOL\"" "$SCRATCH/other.cache" || log_fail "pool set cachefile did not write the new file"
log_pass
