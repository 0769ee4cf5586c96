#!/usr/bin/env bash
# Project IDs through a mount, as chattr and lsattr reach them (FS_IOC_FSSETXATTR and
# FS_IOC_SETFLAGS): chattr +P -p on a directory, inherited by the files and directories made in
# it; chattr -p on a file; a link or rename into a directory of another project refused with
# EXDEV, and mv's copy landing in the target's project; other flags refused; a non-root owner
# refused; snapshots show projects read-only; projects survive export and import.
. "$STF_SUITE/include/libtest.sh"
require_python
require_snapshot_verbs
command -v chattr >/dev/null 2>&1 && command -v lsattr >/dev/null 2>&1 ||
	log_unsupported "chattr and lsattr (e2fsprogs) are not installed"
log_assert "chattr -p and +P set projects that new nodes inherit; links and renames across projects are EXDEV"
trap destroy_all_pools EXIT

default_setup
mnt=$ALTROOT/$TESTPOOL
cd "$mnt" || log_fail "cannot enter $mnt"

# project PATH: the project ID lsattr shows for PATH itself.
project() {
	lsattr -d -p "$1" >"$SCRATCH/lsattr" 2>&1 || log_fail "lsattr -p $1: $(cat "$SCRATCH/lsattr")"
	awk '{print $1}' "$SCRATCH/lsattr"
}
# inherits PATH: yes if lsattr shows the project inherit flag (P) on PATH itself, else no.
inherits() {
	lsattr -d "$1" >"$SCRATCH/lsattr" 2>&1 || log_fail "lsattr $1: $(cat "$SCRATCH/lsattr")"
	case $(awk '{print $1}' "$SCRATCH/lsattr") in
	*P*) echo yes ;;
	*) echo no ;;
	esac
}
# exdev_rename FROM TO: os.rename gives EXDEV.
exdev_rename() {
	python3 -c '
import errno, os, sys
try:
    os.rename(sys.argv[1], sys.argv[2])
except OSError as error:
    sys.exit(0 if error.errno == errno.EXDEV else "rename: %s" % error)
sys.exit("rename succeeded")' "$1" "$2" || log_fail "rename $1 to $2 was not EXDEV"
}

# 1. A directory in project 42 with the inherit flag passes both on.
mkdir tree other
assert_eq "$(project tree)" 0 "a new directory's project"
assert_eq "$(inherits tree)" no "a new directory's flag"
log_must chattr +P -p 42 tree
assert_eq "$(project tree)" 42 "project after chattr +P -p 42"
assert_eq "$(inherits tree)" yes "flag after chattr +P"
touch tree/file
mkdir tree/sub
echo deep >tree/sub/deep
ln -s file tree/link
assert_eq "$(project tree/file)" 42 "a file made in the tree"
assert_eq "$(inherits tree/file)" no "a file does not carry the flag"
assert_eq "$(project tree/sub)" 42 "a directory made in the tree"
assert_eq "$(inherits tree/sub)" yes "a directory carries the flag"
assert_eq "$(project tree/sub/deep)" 42 "two levels down"
touch other/outside
assert_eq "$(project other/outside)" 0 "a file made outside"

# 2. chattr -p on a file; the flag on a file is dropped, as ext4 and XFS drop it; other flags
# are refused.
log_must chattr -p 7 other/outside
assert_eq "$(project other/outside)" 7 "a file's own project"
log_must chattr +P other/outside
assert_eq "$(inherits other/outside)" no "the flag on a file"
log_mustnot_msg "Operation not supported" chattr +A other/outside
assert_eq "$(project other/outside)" 7 "a refused flag changes nothing"

# 3. Links and renames into a directory of another project are EXDEV; out of it, or into a
# directory that passes no project on, they are not.
mkdir elsewhere
log_must chattr +P -p 43 elsewhere
log_mustnot_msg "Invalid cross-device link" ln tree/file elsewhere/file
exdev_rename tree/file elsewhere/file
exdev_rename tree/sub elsewhere/sub
[ -e tree/file ] && [ -e tree/sub/deep ] || log_fail "a refused rename moved something"
[ -e elsewhere/file ] && log_fail "a refused link or rename left a name"
log_must ln tree/file other/file-link
log_must mv tree/sub/deep other/deep
assert_eq "$(project other/deep)" 42 "a moved file keeps its project"
log_must mv other/deep tree/sub/deep
# mv copies when rename says EXDEV: the copy is made in, and charged to, the target's project.
log_must mv tree/sub/deep elsewhere/deep
assert_eq "$(cat elsewhere/deep)" deep "mv's copy"
assert_eq "$(project elsewhere/deep)" 43 "the copy's project"
[ -e tree/sub/deep ] && log_fail "mv left its source"
# Put in the target's project, the file may go.
log_must chattr -p 43 tree/file
log_must mv tree/file elsewhere/file
assert_eq "$(project elsewhere/file)" 43 "a file renamed within its project"

# 4. Only root changes projects: the owner of a file is refused (the kernel lets the owner
# through; the adapter does not), and may still read it.
if command -v setpriv >/dev/null 2>&1; then
	touch other/owned
	chown 4321:4321 other/owned
	as_owner() { setpriv --reuid=4321 --regid=4321 --clear-groups "$@"; }
	log_mustnot_msg "Operation not permitted" as_owner chattr -p 9 other/owned
	log_must as_owner lsattr -p other/owned
	assert_eq "$(project other/owned)" 0 "a refused owner changed nothing"
else
	log_note "setpriv missing: the owner's refusal not checked"
fi

# 5. Snapshots show projects and refuse changes.
log_must tarn snapshot "$TESTPOOL@s"
snap=.zfs/snapshot/s
assert_eq "$(project $snap/tree/sub)" 42 "a snapshot's project"
assert_eq "$(inherits $snap/tree)" yes "a snapshot's flag"
log_mustnot_msg "Read-only file system" chattr -p 5 $snap/other/outside

# 6. Export and import: the projects and flags stay, and inheritance goes on.
cd / || log_fail "cannot leave the mount"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
cd "$mnt" || log_fail "cannot enter $mnt"
assert_eq "$(project tree)" 42 "project after import"
assert_eq "$(inherits tree)" yes "flag after import"
assert_eq "$(project other/outside)" 7 "a file's project after import"
assert_eq "$(project elsewhere/file)" 43 "a renamed file's project after import"
mkdir tree/later
assert_eq "$(project tree/later)" 42 "inheritance after import"
assert_eq "$(inherits tree/later)" yes "the flag inherited after import"
log_must chattr -P tree
assert_eq "$(inherits tree)" no "chattr -P clears the flag"
assert_eq "$(project tree)" 42 "and keeps the project"
touch tree/last
assert_eq "$(project tree/last)" 0 "no inheritance without the flag"
cd / || log_fail "cannot leave the mount"
log_must tarn pool sync "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
