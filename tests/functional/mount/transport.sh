#!/usr/bin/env bash
# The FUSE transport: tarn mount lists each mount's (the ring whenever the host's switch is on,
# unless the run asks for /dev/fuse: run.sh -F); tarn mount -j carries it; files written through
# it read back; a daemon refuses a transport that is not one, and the CLI passes no such name.
. "$STF_SUITE/include/libtest.sh"
log_assert "each mount's FUSE transport is listed, and bad transports are refused"
trap destroy_all_pools EXIT

switch=$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo absent)
case "${TARN_FUSE_TRANSPORT:-auto}" in
dev) expected=dev ;;
uring) expected=uring ;;
*) if [ "$switch" = Y ]; then expected=uring; else expected=dev; fi ;;
esac

default_setup
log_must tarn create "$TESTPOOL/fs"
log_must tarn mount
for fs in "$TESTPOOL" "$TESTPOOL/fs"; do
	grep -qE "^$fs[[:space:]]+$(mounted_at "$fs")[[:space:]]+$expected\$" "$LAST_STDOUT" ||
		log_fail "tarn mount does not list $fs over $expected (switch: $switch)"
done
log_must tarn mount -j
require_python
python3 - "$LAST_STDOUT" "$TESTPOOL/fs" "$expected" <<'PY' || log_fail "tarn mount -j lacks the transport"
import json, sys
document = json.load(open(sys.argv[1]))
row = document["datasets"][sys.argv[2]]
assert row["transport"] == sys.argv[3], row
PY
write_marked_file "$ALTROOT/$TESTPOOL/fs/data" 4096
written=$(digest "$ALTROOT/$TESTPOOL/fs/data")
log_must tarn unmount "$TESTPOOL/fs"
log_must tarn mount "$TESTPOOL/fs"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/fs/data")" "$written" "16 MiB written and read back"

log_mustnot_msg "invalid value 'ring'" tarn daemon --fuse-transport ring
log_mustnot_msg "cannot be used with" tarn daemon --stop --fuse-transport dev
# The switch is the host's: nothing above changed it.
assert_eq "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo absent)" "$switch" "enable_uring"
log_pass
