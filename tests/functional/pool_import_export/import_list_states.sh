#!/usr/bin/env bash
# `pool import` (the listing) once called every exported pool "exported cleanly;
# imports as it is" and named only the devices it found, so a mirror with a side gone or wiped,
# and a pool without one of its top-level vdevs, looked healthy. Now the listing has zpool's
# shape: the pool's state (ONLINE, DEGRADED, UNAVAIL), a status and an action that are true,
# and the config with every vdev the labels name, each with its state and why it is UNAVAIL
# ("cannot open" when its file is gone, "invalid label" when its labels were wiped). A
# DEGRADED mirror imports; a pool missing a top-level vdev is refused, naming it.
. "$STF_SUITE/include/libtest.sh"
log_assert "import listings show each pool's state and every device's, and import follows them"
trap destroy_all_pools EXIT

# listing POOL: the listing of POOL alone, from the last `tarn pool import` output.
listing() {
	awk -v pool="$1" '/^   pool: / { shown = ($2 == pool) } shown' "$LAST_STDOUT"
}

# listed_has POOL LINE: the listing of POOL has LINE (a whole line, fixed string).
listed_has() {
	listing "$1" | grep -qxF -- "$2" || log_fail "the listing of $1 lacks the line '$2'"
}

# device_is POOL NAME STATE [WHY]: the config of POOL shows NAME (a vdev path, mirror-N or the
# pool) as STATE, followed by WHY if given and by nothing otherwise. A config line is a tab,
# the indent, the name, two or more spaces, the state, and two spaces and the reason if any.
device_is() {
	local pool=$1 name=$2 want="$3${4:+  $4}" got
	got=$(listing "$pool" | awk -v name="$name" '/^\t/ {
		line = $0; sub(/^\t */, "", line); n = index(line, "  ")
		if (n > 0 && substr(line, 1, n - 1) == name) { rest = substr(line, n); sub(/^ +/, "", rest); print rest }
	}')
	assert_eq "$got" "$want" "state of $name in the listing of $pool"
}

mir_a=$(vdev lst-mir-a)
mir_b=$(vdev lst-mir-b)
two_a=$(vdev lst-two-a)
two_b=$(vdev lst-two-b)
create_pool lstmir mirror "$mir_a" "$mir_b"
create_pool lsttwo "$two_a" "$two_b"
log_must dd if=/dev/urandom of="$ALTROOT/lstmir/data" bs=64k count=16 status=none
log_must dd if=/dev/urandom of="$ALTROOT/lsttwo/data" bs=64k count=16 status=none
mir_data=$(digest "$ALTROOT/lstmir/data")
two_data=$(digest "$ALTROOT/lsttwo/data")
log_must tarn pool export lstmir
log_must tarn pool export lsttwo
# What the devices held when the pools were whole, to put back at the end.
log_must cp --sparse=always "$mir_b" "$SCRATCH/mir-b.img"

log_must tarn pool import -d "$VDEV_DIR"
for pool in lstmir lsttwo; do
	listed_has "$pool" "  state: ONLINE"
	listed_has "$pool" " action: The pool can be imported using its name or numeric identifier."
	listing "$pool" | grep -q "status:" && log_fail "the listing of healthy $pool has a status"
	device_is "$pool" "$pool" ONLINE
done
device_is lstmir mirror-0 ONLINE
device_is lstmir "$mir_a" ONLINE
device_is lstmir "$mir_b" ONLINE
device_is lsttwo "$two_a" ONLINE
device_is lsttwo "$two_b" ONLINE

# (a) A mirror side's file is gone: DEGRADED, the side UNAVAIL "cannot open"; it imports.
log_must rm "$mir_b"
log_must tarn pool import -d "$VDEV_DIR"
listed_has lstmir "  state: DEGRADED"
listed_has lstmir " status: One or more devices are missing from the system."
listed_has lstmir " action: The pool can be imported despite missing or damaged devices. The fault tolerance of the pool may be compromised if imported."
device_is lstmir lstmir DEGRADED
device_is lstmir mirror-0 DEGRADED
device_is lstmir "$mir_a" ONLINE
device_is lstmir "$mir_b" UNAVAIL "cannot open"
listed_has lsttwo "  state: ONLINE"
import_pool lstmir
log_must tarn pool status lstmir
stdout_has "state: DEGRADED"
assert_eq "$(digest "$ALTROOT/lstmir/data")" "$mir_data" "data of the degraded mirror"
log_must tarn pool export lstmir

# (b) The side comes back with its labels wiped (tarn keeps two 256 KiB labels at the start
# of a device and two at its end): UNAVAIL "invalid label", never taken for a member.
log_must cp --sparse=always "$SCRATCH/mir-b.img" "$mir_b"
size=$(stat -c %s "$mir_b")
log_must dd if=/dev/zero of="$mir_b" bs=256k count=2 conv=notrunc status=none
log_must dd if=/dev/zero of="$mir_b" bs=256k seek=$((size / 262144 - 2)) count=2 conv=notrunc status=none
wiped=$(digest "$mir_b")
log_must tarn pool import -d "$VDEV_DIR"
listed_has lstmir "  state: DEGRADED"
listed_has lstmir " status: One or more devices contain corrupted data."
listed_has lstmir " action: The pool can be imported despite missing or damaged devices. The fault tolerance of the pool may be compromised if imported."
device_is lstmir mirror-0 DEGRADED
device_is lstmir "$mir_a" ONLINE
device_is lstmir "$mir_b" UNAVAIL "invalid label"
import_pool lstmir
log_must tarn pool status lstmir
stdout_has "state: DEGRADED"
assert_eq "$(digest "$ALTROOT/lstmir/data")" "$mir_data" "data of the mirror without its wiped side"
log_must tarn pool export lstmir
assert_eq "$(digest "$mir_b")" "$wiped" "the wiped device after the import (never written)"

# (c) A top-level vdev's file is gone: UNAVAIL, and the import is refused naming it.
log_must mv "$two_b" "$SCRATCH/two-b.img"
log_must tarn pool import -d "$VDEV_DIR"
listed_has lsttwo "  state: UNAVAIL"
listed_has lsttwo " status: One or more devices are missing from the system."
listed_has lsttwo " action: The pool cannot be imported. Attach the missing devices and try again."
device_is lsttwo lsttwo UNAVAIL "insufficient replicas"
device_is lsttwo "$two_a" ONLINE
device_is lsttwo "$two_b" UNAVAIL "cannot open"
before=$(digest "$two_a")
log_mustnot_msg "missing top-level vdev 1" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" lsttwo
stderr_has "$two_b: cannot open"
stderr_has "attach the missing devices"
pool_is_imported lsttwo && log_fail "lsttwo was imported without a top-level vdev"
assert_eq "$(digest "$two_a")" "$before" "the remaining vdev after the refused import"

# Everything back: both pools list ONLINE, import, and check clean (the mirror side that
# missed txgs is resilvered first).
log_must mv "$SCRATCH/two-b.img" "$two_b"
log_must cp --sparse=always "$SCRATCH/mir-b.img" "$mir_b"
log_must tarn pool import -d "$VDEV_DIR"
for pool in lstmir lsttwo; do
	listed_has "$pool" "  state: ONLINE"
	device_is "$pool" "$pool" ONLINE
done
device_is lstmir "$mir_b" ONLINE
device_is lsttwo "$two_b" ONLINE
import_pool lstmir
import_pool lsttwo
log_must tarn pool wait -t resilver lstmir
log_must tarn pool status lstmir
stdout_has "state: ONLINE"
verify_pool lstmir
verify_pool lsttwo
assert_eq "$(digest "$ALTROOT/lstmir/data")" "$mir_data" "data of the mirror at the end"
assert_eq "$(digest "$ALTROOT/lsttwo/data")" "$two_data" "data of the two-vdev pool at the end"
log_pass
