#!/usr/bin/env bash
# `pool import -f` is honoured as zpool's: a pool that a daemon on another host left imported
# (not exported; its labels name that host) is listed as needing -f, refused without -f by a
# message naming -f and the host, and imported with -f; once exported here it imports without
# -f again. A destroyed pool imports with -D and -f together, and with -D alone is refused.
# Before, -f and -D POOL were parsed and ignored: the other host's pool imported without -f.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool import -f imports a pool left active by another host; -D -f a destroyed one"
trap destroy_all_pools EXIT
command -v unshare >/dev/null || log_unsupported "unshare is not installed"
# A host without a name never counts as another host (nor as this one).
[ -n "$(cat /proc/sys/kernel/hostname)" ] || log_unsupported "this host has no name"

# "Another host": this run's daemon started in a UTS namespace with its own host name. The CLI
# starts the daemon, which inherits the namespace; kill -9 leaves the pool active there.
log_must tarn daemon --stop
log_must unshare --uts bash -c 'hostname tarn-elsewhere && exec "$0" pool create -s "$1" -R "$2" "$3" "$4"' \
	"$TARN" "$VDEV_SIZE" "$ALTROOT" "$TESTPOOL" "$(vdev "$TESTPOOL")"
write_marked_file "$ALTROOT/$TESTPOOL/data" 64
sum=$(digest "$ALTROOT/$TESTPOOL/data")
log_must tarn pool sync "$TESTPOOL"
kill_daemon

log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: $TESTPOOL"
stdout_has "host tarn-elsewhere"
stdout_has "the '-f' flag"
log_mustnot_msg "import with -f" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
stderr_has "tarn-elsewhere"
assert_eq "$(pool_names)" "" "pools after the import refused without -f"
import_pool -f "$TESTPOOL"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/data")" "$sum" "data imported with -f"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"

log_must tarn pool destroy "$TESTPOOL"
log_mustnot_msg "was destroyed" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
log_must tarn pool import -D -d "$VDEV_DIR"
stdout_has "pool: $TESTPOOL"
stdout_has "'-Df' flags"
log_mustnot_msg "-D and -f" tarn pool import -D -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
assert_eq "$(pool_names)" "" "pools after the import refused without -f"
import_pool -D -f "$TESTPOOL"
assert_eq "$(pool_names)" "$TESTPOOL" "pools after import -D -f"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/data")" "$sum" "data of the destroyed pool imported again"
verify_pool "$TESTPOOL"
log_pass
