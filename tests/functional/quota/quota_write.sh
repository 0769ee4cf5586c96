#!/usr/bin/env bash
# Quotas through a mount, as users meet them: a python write() loop and dd into a file system
# with a quota get EDQUOT from write(2) itself, close to the quota and never past it (what
# the txgs sync is at most the quota); every byte a call reported written is there after
# export and import; the quota holds for a second writer, frees make room, and a quota below
# what the dataset uses is refused.
. "$STF_SUITE/include/libtest.sh"
require_python
log_assert "EDQUOT reaches write(2); used stays within the quota; nothing reported written is lost"
trap destroy_all_pools EXIT

helper="$STF_SUITE/include/write_full.py"
mnt="$ALTROOT/$TESTPOOL/q"
MIB=1048576
QUOTA=$((48 * MIB))

json() {
	python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print(v)' \
		"${3:-$SCRATCH/out}" "$1" ${2:+"$2"}
}

# value PROP DATASET: a property's exact value.
value() { get_prop "$1" "$2" || log_fail "cannot get $1 of $2"; }

reimport() {
	log_must tarn pool export "$TESTPOOL"
	import_pool "$TESTPOOL"
}

default_setup
log_must tarn create -o compression=off "$TESTPOOL/q"
log_must tarn set quota=48M "$TESTPOOL/q"
assert_eq "$(value quota "$TESTPOOL/q")" "$QUOTA" "the quota"
log_must tarn get -H -o value quota "$TESTPOOL"
assert_eq "$(cat "$LAST_STDOUT")" "none" "the parent's quota (not inherited)"
python3 "$helper" pattern-file "$SCRATCH/source" $((100 * MIB)) || log_fail "cannot make the source"

# 1. A python write() loop: EDQUOT from write(2), after all that df said was available but
# the documented margin (the page cache's held-back space, as for ENOSPC, and the quota's
# own: a write's charge and the object set's blocks).
available=$(python3 -c 'import os,sys; s=os.statvfs(sys.argv[1]); print(s.f_bavail*s.f_frsize)' "$mnt")
[ "$available" -le "$QUOTA" ] || log_fail "df says $available bytes are available under a quota of $QUOTA"
python3 "$helper" write-loop "$mnt/loop" $MIB $((100 * MIB)) >"$SCRATCH/out" || log_fail "write-loop"
log_note "write loop: $(cat "$SCRATCH/out")"
assert_eq "$(json first call)" "write" "the first failing call"
assert_eq "$(json first errno)" "EDQUOT" "its errno"
written=$(json written)
[ "$written" -ge $((available - 14 * MIB)) ] ||
	log_fail "only $written bytes accepted before EDQUOT; df said $available were available"
log_must tarn pool sync "$TESTPOOL"
used=$(value used "$TESTPOOL/q")
[ "$used" -le "$QUOTA" ] || log_fail "used $used is over the quota $QUOTA"
assert_eq "$(value available "$TESTPOOL/q")" "$((QUOTA - used))" "avail under the quota"
reimport
python3 "$helper" check-prefix "$mnt/loop" "$written" || log_fail "the write loop's file"

# 2. dd into the full quota fails with EDQUOT's message and leaves a prefix of the source.
log_mustnot_msg "quota exceeded" dd if="$SCRATCH/source" of="$mnt/dd" bs=1M
reimport
python3 "$helper" check-copy "$mnt/dd" "$SCRATCH/source" || log_fail "dd's file"

# 3. A quota below what the dataset uses is refused; deleting makes room again.
log_mustnot_msg "less than current used" tarn set quota=8M "$TESTPOOL/q"
rm -f "$mnt/loop" "$mnt/dd"
log_must tarn pool sync "$TESTPOOL"
log_must dd if="$SCRATCH/source" of="$mnt/again" bs=1M count=24 conv=fsync
log_must tarn set quota=none "$TESTPOOL/q"
assert_eq "$(value quota "$TESTPOOL/q")" "0" "quota=none"
log_must dd if="$SCRATCH/source" of="$mnt/more" bs=1M count=40 conv=fsync
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
