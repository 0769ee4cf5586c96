#!/usr/bin/env bash
# Wrong uses of scrub and device verbs fail with a message saying what was wrong.
. "$STF_SUITE/include/libtest.sh"
log_assert "scrub, online and offline refuse bad requests clearly"

log_mustnot_msg "no such pool" tarn pool scrub nosuchpool
create_pool misused "$(vdev mu-a)"
log_mustnot_msg "no scrub or resilver in progress" tarn pool scrub -s misused
log_mustnot_msg "no scrub in progress to pause" tarn pool scrub -p misused
log_mustnot_msg "cannot be given together" tarn pool scrub -s -p misused
log_mustnot_msg "not with -s or -p" tarn pool scrub -w -s misused
log_mustnot_msg "has no device named" tarn pool offline misused /no/such/device
log_mustnot_msg "no valid replicas" tarn pool offline misused "$(vdev mu-a)"
log_mustnot_msg "missing device name" tarn pool online misused
log_mustnot_msg "only a side of a mirror" tarn pool detach misused "$(vdev mu-a)"
# A scrub on a single vdev works (it can count, not repair); -w returns once it is done.
log_must tarn pool scrub -w misused
log_must tarn pool status misused
stdout_has "scan: scrub repaired 0B"
log_must tarn pool destroy misused
log_pass
