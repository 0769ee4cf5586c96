#!/usr/bin/env bash
# POSIX ACLs with acltype=posix: setfacl/getfacl round trip, the mode's group bits follow the
# mask, chmod rewrites the ACL, default ACLs are inherited by new files and directories, the
# kernel enforces a named-user entry; cp -a and rsync -aAX carry ACLs and xattrs to ext4 (the
# host's file system) and back unchanged.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "POSIX ACLs are kept, inherited, enforced and copied"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs dir=$ALTROOT/$TESTPOOL/fs
log_must tarn create -o acltype=posix "$fs"
assert_prop "$fs" acltype posix
echo secret >"$dir/f"
chmod 600 "$dir/f"
log_must setfacl -m u:4321:r "$dir/f"
log_must getfacl -c "$dir/f"
stdout_has "user:4321:r--"
stdout_has "mask::r--"
assert_eq "$(stat -c %a "$dir/f")" 640 "mode group bits are the mask"
log_must chmod 700 "$dir/f"
log_must getfacl -c "$dir/f"
stdout_has "mask::---"
log_must setfacl -m m::r "$dir/f"

# Enforced by the kernel: user 4321 may read, user 4322 may not.
if command -v setpriv >/dev/null 2>&1; then
	# From inside the mount, so that the run's private work directory is not in the path.
	chmod 755 "$dir"
	cd "$dir" || log_fail "cd $dir"
	log_must setpriv --reuid=4321 --regid=4321 --clear-groups cat f
	log_mustnot_msg "Permission denied" setpriv --reuid=4322 --regid=4322 --clear-groups cat f
	cd / || log_fail "cd /"
else
	log_note "setpriv missing: enforcement not checked"
fi

# Default ACLs are inherited, and the umask does not apply over them.
mkdir "$dir/d"
log_must setfacl -d -m u:4321:rwx,g::rx,o::- "$dir/d"
(umask 077 && touch "$dir/d/new" && mkdir "$dir/d/sub")
log_must getfacl -c "$dir/d/new"
stdout_has "user:4321:rwx	#effective:rw-"
log_must getfacl -c "$dir/d/sub"
stdout_has "default:user:4321:rwx"
assert_eq "$(stat -c %a "$dir/d/new")" 660 "inherited mode (umask ignored)"

# Round trips through ext4 (or whatever the host's /var/tmp is) with cp -a and rsync -aAX.
setfattr -n user.note -v kept "$dir/f"
# describe ROOT: every ACL and user xattr of the test's files, in a fixed order.
describe() {
	local path
	for path in f d d/new d/sub; do
		echo "== $path"
		getfacl -c "$1/$path" 2>/dev/null
		getfattr -d -m user --absolute-names "$1/$path" | grep -v '^#'
	done
}
describe "$dir" >"$SCRATCH/acl.before"
host=$SCRATCH/host
mkdir -p "$host"
log_must cp -a "$dir/f" "$dir/d" "$host/"
if getfacl -c "$host/f" | grep -q "user:4321"; then
	log_must rm -r "$dir/f" "$dir/d"
	if command -v rsync >/dev/null 2>&1; then
		log_must rsync -aAX "$host/f" "$host/d" "$dir/"
	else
		log_must cp -a "$host/f" "$host/d" "$dir/"
	fi
	describe "$dir" >"$SCRATCH/acl.after"
	describe "$host" >"$SCRATCH/acl.host"
	log_must diff "$SCRATCH/acl.before" "$SCRATCH/acl.host"
	log_must diff "$SCRATCH/acl.before" "$SCRATCH/acl.after"
	grep -q "user:4321" "$SCRATCH/acl.after" || log_fail "no ACL survived the round trip"
	grep -q "user.note" "$SCRATCH/acl.after" || log_fail "no xattr survived the round trip"
else
	log_note "the host file system under $SCRATCH keeps no ACLs: round trip not checked"
fi

# acltype=off again (remounts): the ACLs are refused, the files stay readable.
log_must tarn set acltype=off "$fs"
log_mustnot_msg "Operation not supported" setfacl -m u:4321:rw "$dir/f"
log_mustnot_msg "Operation not supported" getfattr -n system.posix_acl_access "$dir/f"
assert_eq "$(cat "$dir/f")" secret "file after acltype=off"
verify_pool "$TESTPOOL"
log_pass
