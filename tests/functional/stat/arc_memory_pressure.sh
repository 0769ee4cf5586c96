#!/usr/bin/env bash
# The ARC gives memory back when the daemon's cgroup nears its limit: move
# the daemon into a cgroup of its own (before it allocates, since neither cgroup version moves
# old charges by default), warm the ARC by reading a file cold, lower the cgroup's soft limit
# (v1) or memory.high (v2) below what the daemon holds, and watch the ARC's target
# shrink (to its floor, a quarter of arc_max) and the daemon's resident size fall.
. "$STF_SUITE/include/libtest.sh"
log_assert "the ARC shrinks and resident memory falls under a lowered cgroup limit"

resident() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid/status"; }
arc_field() { tarn stat arc -p "$TESTPOOL" | awk -v name="$1" '$1 == name { print $3 }'; }

file="$ALTROOT/$TESTPOOL/arc-pressure"
log_must dd if=/dev/urandom of="$file" bs=1M count=96 status=none
log_must tarn pool export "$TESTPOOL"
log_must tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
# The daemon that holds the pool now (an export of its last pool may have ended the last one).
pid=$(daemon_pid)
[ -n "$pid" ] || log_fail "no daemon pid"
line=$(grep -E '^[0-9]+:([^:]*,)?memory(,[^:]*)?:' "/proc/$pid/cgroup" | head -1)
if [ -n "$line" ]; then
	parent="/sys/fs/cgroup/memory${line##*:}"
	limit_file=memory.soft_limit_in_bytes
else
	parent="/sys/fs/cgroup$(grep -E '^0::' "/proc/$pid/cgroup" | cut -d: -f3)"
	limit_file=memory.high
fi
group="$parent/tarn-arc-$$"
mkdir "$group" 2>/dev/null || log_unsupported "cannot make a memory cgroup under $parent"
[ -w "$group/$limit_file" ] || { rmdir "$group"; log_unsupported "no $limit_file in $group"; }
restore() {
	echo "$pid" >"$parent/cgroup.procs" 2>/dev/null
	rmdir "$group" 2>/dev/null
}
trap restore EXIT
echo "$pid" >"$group/cgroup.procs" || log_fail "cannot move the daemon into $group"

log_must cat "$file" >/dev/null
size=$(arc_field size)
warm=$(resident)
[ "$size" -gt $((80 << 20)) ] || log_fail "the ARC holds only $size bytes after a 96 MiB cold read"
c_before=$(arc_field c)

echo $((warm / 3)) >"$group/$limit_file" || log_fail "cannot set $limit_file"
wait_for 20 "[ \"\$(arc_field shrinks)\" -ge 1 ]" || log_fail "the ARC never shrank (c $c_before)"
wait_for 20 "[ \"\$(resident)\" -lt $((warm - (24 << 20))) ]" ||
	log_fail "resident memory did not fall: $warm -> $(resident) bytes"
c_after=$(arc_field c)
[ "$c_after" -lt "$c_before" ] || log_fail "target c $c_before -> $c_after"
log_note "ARC size $size, resident $warm -> $(resident) bytes, c $c_before -> $c_after"
log_must rm -f "$file"
log_pass
