#!/usr/bin/env bash
# Wrong uses of attach, detach, replace and add fail with a message saying what was wrong, and
# leave the pool as it was.
. "$STF_SUITE/include/libtest.sh"
log_assert "attach, detach, replace and add refuse bad requests clearly"

create_pool misdev "$(vdev md-a)"
truncate -s 64M "$(vdev md-small)"
truncate -s "$VDEV_SIZE" "$(vdev md-b)"
log_mustnot_msg "no such pool" tarn pool attach nosuchpool "$(vdev md-a)" "$(vdev md-b)"
log_mustnot_msg "too small" tarn pool attach misdev "$(vdev md-a)" "$(vdev md-small)"
log_mustnot_msg "does not exist" tarn pool attach misdev "$(vdev md-a)" "$(vdev md-none)"
log_mustnot_msg "has no device named" tarn pool attach misdev /no/such/device "$(vdev md-b)"
log_mustnot_msg "already a device" tarn pool add misdev "$(vdev md-a)"
log_mustnot_msg "only a side of a mirror" tarn pool detach misdev "$(vdev md-a)"
log_mustnot_msg "is still this vdev" tarn pool replace misdev "$(vdev md-a)"
create_pool otherpool "$(vdev md-other)"
log_must tarn pool export otherpool
log_mustnot_msg "part of pool" tarn pool attach misdev "$(vdev md-a)" "$(vdev md-other)"
log_mustnot_msg "required" tarn pool add misdev
log_must tarn pool status misdev
stdout_lacks "mirror"
stdout_lacks "$(vdev md-b)"
verify_pool misdev
log_must tarn pool destroy misdev
log_pass
