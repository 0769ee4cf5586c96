#!/usr/bin/env bash
# Usage by owner is what du counts: files and directories made through a mount by root and
# given away with chown, and files a user who is not root wrote itself (setpriv), are charged
# to their owners. After a sync, `tarn userspace -Hp -o name,used` gives each user exactly the
# sum of st_blocks x 512 over the nodes it owns (find -printf '%u %b'), OBJUSED their number,
# `groupspace` the same by group, `projectspace` all of it to project 0. Owners are shown by
# name where the passwd and group databases have one, by number where not and with -n. A
# snapshot keeps its figures while the file system's change.
. "$STF_SUITE/include/libtest.sh"
log_assert "userspace, groupspace and projectspace agree with du for every owner"
trap destroy_all_pools EXIT

fs="$TESTPOOL/owners"
mnt="$ALTROOT/$fs"
# IDs that no database names (numbers in the listings), and the non-root writer.
UNKNOWN_UID=4000001 UNKNOWN_GID=4000002 WRITER=1001
getent passwd "$UNKNOWN_UID" >/dev/null && log_unsupported "uid $UNKNOWN_UID has a name here"
getent group "$UNKNOWN_GID" >/dev/null && log_unsupported "gid $UNKNOWN_GID has a name here"
# A user and a group other than root that the databases name, so that names are shown.
named_user=$(getent passwd | awk -F: '$3 > 0 && $3 < 60000 { print $1; exit }')
named_group=$(getent group | awk -F: '$3 > 0 && $3 < 60000 { print $1; exit }')
[ -n "$named_user" ] && [ -n "$named_group" ] || log_unsupported "no user or group but root is named here"

# by FIELD: "OWNER<TAB>BYTES" for every owner that find's FIELD gives (%u: the user's name,
# or its number when it has none, as userspace shows it; %U: the uid; %g, %G: the group),
# summing st_blocks (%b, 512-byte blocks) over every node of the mount, sorted.
by() {
	find "$mnt" -printf "$1 %b\n" |
		awk '{ bytes[$1] += $2 * 512 } END { for (owner in bytes) printf "%s\t%d\n", owner, bytes[owner] }' |
		sort
}
# count_by FIELD: "OWNER<TAB>NODES".
count_by() { find "$mnt" -printf "$1\n" | sort | uniq -c | awk '{ printf "%s\t%d\n", $2, $1 }' | sort; }

# listing VERB ARGS...: the verb's output, sorted like by's (the command's log to stderr, so
# that only the listing is captured).
listing() {
	log_must tarn "$@" >&2
	sort "$LAST_STDOUT"
}

# settle: sync the pool twice (usage is updated by each txg's sync) and mount the file system
# afresh, so that find reads st_blocks from the engine, not from attributes the kernel cached.
settle() {
	sync
	log_must tarn pool sync "$TESTPOOL"
	log_must tarn pool sync "$TESTPOOL"
	log_must tarn unmount "$fs"
	log_must tarn mount "$fs"
	assert_mounted "$fs" "$mnt"
}

# compare WHAT: every figure of userspace, groupspace and projectspace against find's.
compare() {
	assert_eq "$(listing userspace -Hp -o name,used "$fs")" "$(by %u)" "$1: used by user (name)"
	assert_eq "$(listing userspace -Hpn -o name,used "$fs")" "$(by %U)" "$1: used by uid (-n)"
	assert_eq "$(listing userspace -Hp -o name,objused "$fs")" "$(count_by %u)" "$1: nodes by user"
	assert_eq "$(listing groupspace -Hp -o name,used "$fs")" "$(by %g)" "$1: used by group (name)"
	assert_eq "$(listing groupspace -Hpn -o name,used "$fs")" "$(by %G)" "$1: used by gid (-n)"
	assert_eq "$(listing groupspace -Hpn -o name,objused "$fs")" "$(count_by %G)" "$1: nodes by gid"
	local total
	total=$(find "$mnt" -printf '%b\n' | awk '{ sum += $1 * 512 } END { printf "%d", sum }')
	assert_eq "$(listing projectspace -Hp -o name,used "$fs")" "0	$total" "$1: project 0 holds everything"
	log_note "$1: du by uid: $(by %U | tr '\t\n' '= ')"
}

default_setup
log_must tarn create -o compression=off -o atime=off "$fs"
assert_mounted "$fs" "$mnt"

# Root's own files, files given away to a named user, to numbered owners, a symlink, an empty
# file, a directory tree of an owner no database knows.
log_must mkdir "$mnt/rootdir"
head -c 100000 /dev/urandom >"$mnt/rootdir/file" || log_fail "writing root's file"
head -c 300000 /dev/urandom >"$mnt/named" || log_fail "writing a file"
log_must chown "$named_user:$named_group" "$mnt/named"
head -c 1048576 /dev/urandom >"$mnt/b" || log_fail "writing a file"
log_must chown 1002:2002 "$mnt/b"
log_must ln -s b "$mnt/link"
log_must chown -h 1002:2002 "$mnt/link"
log_must touch "$mnt/empty"
log_must chown 1003:1003 "$mnt/empty"
log_must mkdir -p "$mnt/tree/sub"
for i in $(seq 1 20); do
	head -c $((i * 5000)) /dev/urandom >"$mnt/tree/sub/f$i" || log_fail "writing f$i"
done
printf x >"$mnt/tree/tiny"
log_must chown -R "$UNKNOWN_UID:$UNKNOWN_GID" "$mnt/tree"
log_must chown 1002 "$mnt/tree/tiny"

# A user who is not root writes through the mount itself: from inside its own directory (the
# work directory above the mount is root's alone), as uid and gid 1001 with no other groups.
log_must mkdir "$mnt/home"
log_must chown "$WRITER:$WRITER" "$mnt/home"
(cd "$mnt/home" && setpriv --reuid=$WRITER --regid=$WRITER --clear-groups sh -c \
	'head -c 2000000 /dev/urandom >big && mkdir sub && head -c 50000 /dev/urandom >sub/small') ||
	log_fail "uid $WRITER could not write in its directory"
assert_eq "$(stat -c %u:%g "$mnt/home/big" "$mnt/home/sub/small" | sort -u)" "$WRITER:$WRITER" \
	"owner of what uid $WRITER wrote"

settle
compare "after writing"
# Names where the databases have them, numbers where not.
log_must tarn userspace -Hp -o name "$fs"
stdout_has "root"
stdout_has "$named_user"
stdout_has "$UNKNOWN_UID"
stdout_has "$WRITER"
log_must tarn groupspace -Hp -o name "$fs"
stdout_has "$named_group"
stdout_has "$UNKNOWN_GID"
# The default table: zfs's columns and type names, usage in human form.
log_must tarn userspace "$fs"
assert_eq "$(head -n 1 "$LAST_STDOUT" | tr -s ' ')" "TYPE NAME USED QUOTA OBJUSED OBJQUOTA" "the header"
stdout_has "POSIX User"
stdout_lacks "POSIX Group"
log_must tarn groupspace -H "$fs"
stdout_has "POSIX Group	$named_group	"

# A snapshot keeps the figures; the file system follows what is removed and given away.
log_must tarn snapshot "$fs@before"
before_users=$(by %U)
before_groups=$(by %G)
log_must rm -f "$mnt/home/big" "$mnt/tree/sub/f20"
log_must chown -R 1003:1003 "$mnt/tree/sub"
settle
compare "after removing and giving away"
assert_eq "$(listing userspace -Hpn -o name,used "$fs@before")" "$before_users" "the snapshot's users"
assert_eq "$(listing groupspace -Hpn -o name,used "$fs@before")" "$before_groups" "the snapshot's groups"
[ "$(by %U)" != "$before_users" ] || log_fail "removing files changed nobody's usage"

log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
compare "after export and import"
verify_pool "$TESTPOOL"
log_pass
