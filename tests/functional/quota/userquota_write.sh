#!/usr/bin/env bash
# User, group and project quotas through a mount: a user's write() loop gets EDQUOT from write(2) at
# its userquota while another user and root write on, what it wrote survives export and
# import, its synced usage is within the quota and the documented bound; a group's quota and
# an object quota stop their owners' writes and creates; removing the quota lets the user
# write again; a project's quota stops writes into a directory of that project.
. "$STF_SUITE/include/libtest.sh"
require_python
log_assert "user and group quotas stop their owners' writes with EDQUOT, others write on"
trap destroy_all_pools EXIT

helper="$STF_SUITE/include/write_full.py"
mnt="$ALTROOT/$TESTPOOL/u"
MIB=1048576
QUOTA=$((16 * MIB))

json() {
	python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print(v)' \
		"$SCRATCH/out" "$@"
}

# The system's python: a user other than root cannot run a pyenv shim under /root.
SYSTEM_PYTHON=/usr/bin/python3
[ -x "$SYSTEM_PYTHON" ] || log_unsupported "no $SYSTEM_PYTHON for writers other than root"
command -v setpriv >/dev/null 2>&1 || log_unsupported "setpriv (util-linux) is not installed"

# as UID GID COMMAND...: run a command as another user (no passwd entry needed), from inside
# the mount (the work directory above it is root's alone): paths are relative to it.
as() {
	local uid=$1 gid=$2
	shift 2
	(cd "$mnt" && setpriv --reuid="$uid" --regid="$gid" --clear-groups "$@")
}

value() { get_prop "$1" "$2" || log_fail "cannot get $1 of $2"; }

default_setup
log_must tarn create -o compression=off "$TESTPOOL/u"
log_must chmod 1777 "$mnt"
log_must tarn set userquota@1001=16M "$TESTPOOL/u"
log_must tarn set groupquota@2002=8M "$TESTPOOL/u"
log_must tarn set userobjquota@1003=5 "$TESTPOOL/u"
assert_eq "$(value userquota@1001 "$TESTPOOL/u")" "$QUOTA" "the user quota"

# 1. User 1001's write loop: EDQUOT from write(2), near the quota, synced usage within it.
as 1001 1001 "$SYSTEM_PYTHON" "$helper" write-loop u1001 $MIB $((64 * MIB)) >"$SCRATCH/out" ||
	log_fail "write-loop as 1001"
log_note "user 1001: $(cat "$SCRATCH/out")"
assert_eq "$(json first errno)" "EDQUOT" "user 1001's refusal"
written=$(json written)
[ "$written" -ge $((QUOTA - 3 * MIB)) ] || log_fail "user 1001 refused early: $written bytes"
log_must tarn pool sync "$TESTPOOL"
# The bound (pool/owner_quotas.rs): a cached writer's pages accepted before the owner
# passed its quota are written back, at most the mount's dirty bound (a 64th of this
# 256 MiB pool: 4 MiB).
used=$(value userused@1001 "$TESTPOOL/u")
log_note "user 1001 holds $used bytes under a quota of $QUOTA"
[ "$used" -le $((QUOTA + 4 * MIB)) ] ||
	log_fail "user 1001 holds $used bytes, past its quota of $QUOTA by more than the bound"

# 2. Others write on: user 1002 and root.
log_must as 1002 1002 dd if=/dev/urandom of=u1002 bs=1M count=20 conv=fsync
log_must dd if=/dev/urandom of="$mnt/root" bs=1M count=20 conv=fsync

# 3. Group 2002's quota stops user 1004 writing as that group. Its file is opened for cached
# writing (the group is far from its quota then): write(2) is refused once the write-backs
# show the group past it, so what write(2) accepted may pass the quota by the same bound
# (the kernel's dirty pages of the mount, 4 MiB). It passed by 1 MiB in about one run of two.
as 1004 2002 "$SYSTEM_PYTHON" "$helper" write-loop g2002 $MIB $((64 * MIB)) >"$SCRATCH/out" ||
	log_fail "write-loop as group 2002"
log_note "group 2002: $(cat "$SCRATCH/out")"
assert_eq "$(json first errno)" "EDQUOT" "group 2002's refusal"
group_written=$(json written)
[ "$group_written" -ge $((5 * MIB)) ] || log_fail "group 2002 refused early: $group_written bytes"
[ "$group_written" -le $((12 * MIB)) ] ||
	log_fail "group 2002 wrote $group_written bytes, past the bound"
log_must tarn pool sync "$TESTPOOL"
used=$(value groupused@2002 "$TESTPOOL/u")
log_note "group 2002 holds $used bytes under a quota of $((8 * MIB))"
[ "$used" -le $((12 * MIB)) ] || log_fail "group 2002 holds $used bytes, past the bound"

# 4. User 1003's object quota: five nodes, then EDQUOT.
for name in a b c d e; do
	log_must as 1003 1003 touch "o1003-$name"
done
log_mustnot_msg "quota exceeded" as 1003 1003 touch o1003-f

# 5. Nothing user 1001 was told was written is lost.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
python3 "$helper" check-prefix "$mnt/u1001" "$written" || log_fail "user 1001's file"

# 6. Without the quota, user 1001 writes again.
log_must tarn set userquota@1001=none "$TESTPOOL/u"
assert_eq "$(value userquota@1001 "$TESTPOOL/u")" "0" "userquota@1001=none (0 with -p)"
log_must as 1001 1001 dd if=/dev/urandom of=u1001-more bs=1M count=8 conv=fsync
# 7. A project's quota: files made in a directory of project 7 (chattr +P -p 7) stop at it,
# whoever writes them (root too, as in zfs).
if command -v chattr >/dev/null 2>&1; then
	log_must mkdir "$mnt/proj"
	log_must chattr +P -p 7 "$mnt/proj"
	log_must tarn set projectquota@7=6M "$TESTPOOL/u"
	python3 "$helper" write-loop "$mnt/proj/p" $MIB $((64 * MIB)) >"$SCRATCH/out" ||
		log_fail "write-loop in project 7"
	assert_eq "$(json first errno)" "EDQUOT" "project 7's refusal"
	log_must tarn pool sync "$TESTPOOL"
	used=$(value projectused@7 "$TESTPOOL/u")
	log_note "project 7 holds $used bytes under a quota of $((6 * MIB))"
	[ "$used" -le $((10 * MIB)) ] || log_fail "project 7 holds $used bytes, past the bound"
else
	log_note "chattr (e2fsprogs) is not installed: no project quota through the mount"
fi
verify_pool "$TESTPOOL"
log_pass
