#!/usr/bin/env bash
# Owner quotas and usage as properties, as zfs has them: `tarn set userquota@USER=SIZE` (and
# groupquota@, projectquota@, the obj forms) with a name or a number, listed by userspace,
# groupspace and projectspace (human, -p, -n); `tarn get userquota@USER` and `userused@USER`
# under the name asked, with their sources; none and inherit remove a quota; -s and -S sort,
# -t picks the types; a name that no database knows is refused and changes nothing; the quotas
# survive export and import; `get all` lists none of them.
. "$STF_SUITE/include/libtest.sh"
log_assert "owner quotas set by name or ID are listed and read back; unknown names are refused"
trap destroy_all_pools EXIT

fs="$TESTPOOL/q"
mnt="$ALTROOT/$fs"
MIB=1048576
named_user=$(getent passwd | awk -F: '$3 > 0 && $3 < 60000 { print $1; exit }')
named_group=$(getent group | awk -F: '$3 > 0 && $3 < 60000 { print $1; exit }')
[ -n "$named_user" ] && [ -n "$named_group" ] || log_unsupported "no user or group but root is named here"
uid=$(getent passwd "$named_user" | cut -d: -f3)
gid=$(getent group "$named_group" | cut -d: -f3)
getent passwd 4000999 >/dev/null && log_unsupported "uid 4000999 has a name here"

# owners VERB: the whole -Hp listing of every type, to prove a refused command changed nothing.
owners() { "$TARN" "$1" -Hp -o type,name,used,quota,objused,objquota "$fs"; }

default_setup
log_must tarn create -o compression=off "$fs"
head -c $((3 * MIB)) /dev/urandom >"$mnt/mine" || log_fail "writing a file"
log_must chown "$uid:$gid" "$mnt/mine"
log_must mkdir "$mnt/d"
head -c $((1 * MIB)) /dev/urandom >"$mnt/d/other" || log_fail "writing a file"
log_must chown -R 1001:1001 "$mnt/d"
sync
log_must tarn pool sync "$TESTPOOL"
log_must tarn pool sync "$TESTPOOL"
# Mounted afresh, so that stat reads st_blocks as synced, not as the kernel cached it.
log_must tarn unmount "$fs"
log_must tarn mount "$fs"

# Set by name and by number; each kind and measure.
log_must tarn set "userquota@$named_user=50M" "$fs"
log_must tarn set userquota@1001=1G "$fs"
log_must tarn set userobjquota@1001=1000 "$fs"
log_must tarn set userquota@4000999=2G "$fs"
log_must tarn set "groupquota@$named_group=2G" "$fs"
log_must tarn set groupobjquota@1001=5000 "$fs"
log_must tarn set projectquota@7=10M "$fs"
log_must tarn set projectobjquota@7=100 "$fs"

log_must tarn userspace -H -o name,quota,objquota "$fs"
stdout_has "$named_user	50M	none"
stdout_has "4000999	2G	none"
stdout_has "root	none	none"
log_must tarn userspace -Hpn -o name,quota,objquota "$fs"
stdout_has "$uid	$((50 * MIB))	none"
stdout_has "1001	$((1024 * MIB))	1000"
stdout_has "0	none	none"
log_must tarn groupspace -Hp -o name,quota,objquota "$fs"
stdout_has "$named_group	$((2048 * MIB))	none"
log_must tarn groupspace -Hpn -o name,quota,objquota "$fs"
stdout_has "1001	none	5000"
# A project with quotas and nothing of its own.
log_must tarn projectspace -Hp "$fs"
stdout_has "Project	7	0	$((10 * MIB))	0	100"
stdout_has "Project	0	"

# get: under the name asked, human or exact, the quota's source; usage is a statistic.
log_must tarn get -H "userquota@$named_user,userused@$named_user,used" "$fs"
assert_eq "$(cut -f2,4 "$LAST_STDOUT")" "userquota@$named_user	local
userused@$named_user	-
used	-" "the properties under the names asked, and their sources"
assert_eq "$(head -n 1 "$LAST_STDOUT" | cut -f3)" "50M" "userquota@$named_user, human"
mine=$(stat -c %b "$mnt/mine")
assert_eq "$(get_prop "userused@$named_user" "$fs")" "$((mine * 512))" "userused@$named_user (st_blocks of its file)"
assert_eq "$(get_prop "userused@$uid" "$fs")" "$((mine * 512))" "userused@$uid"
assert_eq "$(get_prop userobjused@1001 "$fs")" "2" "userobjused@1001 (a directory and a file)"
assert_eq "$(get_prop userobjquota@1001 "$fs")" "1000" "userobjquota@1001"
assert_eq "$(get_prop "groupquota@$named_group" "$fs")" "$((2048 * MIB))" "groupquota@$named_group"
log_must tarn get -H -o property,value,source userquota@1002,projectquota@7 "$fs" "$TESTPOOL"
assert_eq "$(last_stdout)" "userquota@1002	none	default
projectquota@7	10M	local
userquota@1002	none	default
projectquota@7	none	default" "quotas of two datasets, in the order asked"
assert_eq "$(get_prop userquota@1002 "$fs")" "0" "an unset quota, exactly"
log_must tarn get -H -o property all "$fs"
stdout_lacks "@"

# Sorting: -s used ascending, -S used descending, the default by type then name.
log_must tarn userspace -Hp -o used -s used "$fs"
sort -n -c "$LAST_STDOUT" || log_fail "userspace -s used is not in ascending order"
log_must tarn userspace -Hp -o used -S used "$fs"
sort -n -r -c "$LAST_STDOUT" || log_fail "userspace -S used is not in descending order"
log_must tarn userspace -Hn -o name "$fs"
sort -n -c "$LAST_STDOUT" || log_fail "userspace -n is not sorted by ID"
log_must tarn userspace -H -t all -o type "$fs"
assert_eq "$(uniq "$LAST_STDOUT")" "POSIX Group
POSIX User" "userspace -t all: groups, then users"
log_must tarn userspace -H -t smbuser "$fs"
assert_eq "$(last_stdout)" "" "userspace -t smbuser (no SMB identities)"
log_mustnot_msg "takes no -t" tarn projectspace -t all "$fs"
log_mustnot_msg "invalid type" tarn userspace -t posix "$fs"
log_mustnot_msg "invalid sort field" tarn userspace -s size "$fs"
log_mustnot_msg "invalid field" tarn userspace -o name,size "$fs"
log_mustnot_msg "does not exist" tarn userspace "$TESTPOOL/nonesuch"

# Names no database knows are refused, and nothing changes.
users_before=$(owners userspace) groups_before=$(owners groupspace)
log_mustnot_msg "no such user 'tarn_no_such_user'" tarn set userquota@tarn_no_such_user=1G "$fs"
log_mustnot_msg "no such user 'tarn_no_such_user'" tarn set userobjquota@tarn_no_such_user=10 "$fs"
log_mustnot_msg "no such group 'tarn_no_such_group'" tarn set groupquota@tarn_no_such_group=1G "$fs"
log_mustnot_msg "no such user" tarn get userused@tarn_no_such_user "$fs"
log_mustnot_msg "no such user" tarn inherit userquota@tarn_no_such_user "$fs"
log_mustnot_msg "invalid project ID" tarn set projectquota@web=1G "$fs"
log_mustnot_msg "read-only" tarn set userused@1001=5 "$fs"
log_mustnot_msg "snapshot" tarn set userquota@1001=1G "$fs@nosnap"
assert_eq "$(owners userspace)" "$users_before" "userspace after the refused commands"
assert_eq "$(owners groupspace)" "$groups_before" "groupspace after the refused commands"

# The quotas survive export and import.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_eq "$(owners userspace)" "$users_before" "userspace after export and import"
assert_eq "$(owners groupspace)" "$groups_before" "groupspace after export and import"

# none and inherit remove a quota; an owner with nothing left is no longer listed.
log_must tarn set userquota@1001=none "$fs"
log_must tarn inherit "userquota@$named_user" "$fs"
log_must tarn set userquota@4000999=none "$fs"
assert_eq "$(get_prop userquota@1001 "$fs")" "0" "userquota@1001 after none"
assert_eq "$(get_prop userobjquota@1001 "$fs")" "1000" "userobjquota@1001 stays"
log_must tarn userspace -H -o name,quota "$fs"
stdout_has "$named_user	none"
stdout_lacks "4000999"

# create -o sets owner quotas with the new file system, names resolved as by set; a bad one
# creates nothing.
log_must tarn create -o "userquota@$named_user=5M" -o groupobjquota@0=9 -o compression=off \
	"$TESTPOOL/made"
assert_eq "$(get_prop "userquota@$named_user" "$TESTPOOL/made")" "5242880" "create -o userquota"
assert_eq "$(get_prop groupobjquota@0 "$TESTPOOL/made")" "9" "create -o groupobjquota"
assert_eq "$(get_prop compression "$TESTPOOL/made")" "off" "create -o compression beside them"
log_mustnot_msg "bad value" tarn create -o userquota@1001=lots "$TESTPOOL/bad"
log_mustnot_msg "read-only" tarn create -o userused@1001=5 "$TESTPOOL/bad"
log_mustnot_msg "no such user" tarn create -o userquota@tarn_no_such_user=1G "$TESTPOOL/bad"
log_mustnot tarn list "$TESTPOOL/bad"
verify_pool "$TESTPOOL"
log_pass
