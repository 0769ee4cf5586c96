#!/usr/bin/env bash
# send | receive through the daemon: a full stream into a new file system, then an incremental
# one (-i) and a chain (-I) into a second copy; the mounted copies match their source file by
# file (contents, modes, owners, hard links, symlinks, sparse files, xattrs) as diff -r and
# getfattr see them; received snapshots keep their guid; send -n -v estimates; a stream saved
# to a file receives the same; a bookmark is the source of an incremental stream after its
# snapshot is destroyed; check is clean.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "send and receive round trip file systems through a mount"
trap destroy_all_pools EXIT

default_setup
src=$TESTPOOL/src
mnt=$ALTROOT/$src
log_must tarn create "$src"
mkdir -p "$mnt/dir/sub"
head -c 3000000 /dev/urandom >"$mnt/dir/random"
echo one >"$mnt/dir/one"
ln "$mnt/dir/one" "$mnt/hardlink"
ln -s dir/one "$mnt/symlink"
: >"$mnt/empty"
printf x >"$mnt/byte"
truncate -s 20M "$mnt/sparse"
echo tail >>"$mnt/sparse"
chmod 640 "$mnt/dir/one"
chown 123:456 "$mnt/dir/sub"
setfattr -n user.small -v value "$mnt/dir/one" 2>/dev/null || log_note "setfattr missing: xattrs not compared"
python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.big", os.urandom(3000))' "$mnt/dir/random" 2>/dev/null || true
log_must tarn snapshot "$src@a"

# Full stream, through a pipe.
log_must_pipe() { "$@" || log_fail "failed: $*"; }
tarn send "$src@a" | tarn receive -v "$TESTPOOL/copy" >"$SCRATCH/recv.out" 2>&1 || { cat "$SCRATCH/recv.out"; log_fail "send | receive failed"; }
grep -q "received $TESTPOOL/copy@a" "$SCRATCH/recv.out" || log_fail "receive -v names the snapshot: $(cat "$SCRATCH/recv.out")"
copy=$ALTROOT/$TESTPOOL/copy
log_must diff -r --no-dereference "$mnt" "$copy"
compare_meta() {
	(cd "$1" && find . -printf '%p %m %u %g %n %s %y %l\n' | sort) >"$SCRATCH/meta.1"
	(cd "$2" && find . -printf '%p %m %u %g %n %s %y %l\n' | sort) >"$SCRATCH/meta.2"
	diff "$SCRATCH/meta.1" "$SCRATCH/meta.2" || log_fail "metadata of $1 and $2 differ"
	if command -v getfattr >/dev/null; then
		(cd "$1" && getfattr -R -d -m user . 2>/dev/null) >"$SCRATCH/x.1"
		(cd "$2" && getfattr -R -d -m user . 2>/dev/null) >"$SCRATCH/x.2"
		diff "$SCRATCH/x.1" "$SCRATCH/x.2" || log_fail "xattrs of $1 and $2 differ"
	fi
}
compare_meta "$mnt" "$copy"
assert_eq "$(get_prop guid "$TESTPOOL/copy@a")" "$(get_prop guid "$src@a")" "received guid"

# Changes, an incremental stream, and a chain through a saved file.
rm "$mnt/hardlink"
mv "$mnt/symlink" "$mnt/dir/moved"
head -c 100000 /dev/urandom | dd of="$mnt/dir/random" bs=1 seek=1000000 conv=notrunc status=none
truncate -s 1M "$mnt/sparse"
setfattr -x user.small "$mnt/dir/one" 2>/dev/null || true
echo new >"$mnt/new"
log_must tarn snapshot "$src@b"
echo third >"$mnt/third"
log_must tarn snapshot "$src@c"
log_must tarn send -n -v -i @a "$src@b"
stdout_has "estimated size is"
# diff read the copy's files, which changed their access times: -F rolls that back.
tarn send -i "$src@a" "$src@b" | tarn receive "$TESTPOOL/copy" && log_fail "a modified copy took an incremental stream without -F"
tarn send -i "$src@a" "$src@b" | tarn receive -F "$TESTPOOL/copy" || log_fail "incremental receive"
log_must diff -r --no-dereference "$ALTROOT/$src/.zfs/snapshot/b" "$copy"
compare_meta "$ALTROOT/$src/.zfs/snapshot/b" "$copy"

tarn send "$src@a" >"$SCRATCH/full.stream" || log_fail "send to a file"
tarn send -I @a "$src@c" >"$SCRATCH/chain.stream" || log_fail "send -I"
log_must_pipe tarn receive "$TESTPOOL/second" <"$SCRATCH/full.stream"
log_must_pipe tarn receive "$TESTPOOL/second" <"$SCRATCH/chain.stream"
log_must tarn list -H -t snapshot -o name -r "$TESTPOOL/second"
stdout_has "$TESTPOOL/second@b"
stdout_has "$TESTPOOL/second@c"
log_must diff -r --no-dereference "$mnt" "$ALTROOT/$TESTPOOL/second"

# A bookmark stands in for a destroyed snapshot as the source of an incremental stream.
log_must tarn bookmark "$src@c" "$src#c"
log_mustnot_msg "exists" tarn bookmark "$src@c" "$src#c"
log_must tarn list -H -t bookmark -o name,guid "$src"
stdout_has "$src#c	$(get_prop guid "$src@c")"
echo fourth >"$mnt/fourth"
log_must tarn snapshot "$src@d"
log_must tarn destroy "$src@c"
tarn send -i "#c" "$src@d" | tarn receive -F "$TESTPOOL/second" || log_fail "send -i from a bookmark"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/second/fourth")" fourth "received from a bookmark"
# A dry run names the bookmark and destroys nothing; -r and -R do not apply to a bookmark.
log_must tarn destroy -n "$src#c"
stdout_has "would destroy $src#c"
log_must tarn list -H -t bookmark -o name "$src"
stdout_has "$src#c"
log_mustnot_msg "not to a bookmark" tarn destroy -r "$src#c"
log_mustnot_msg "not to a bookmark" tarn destroy -R "$src#c"
log_must tarn destroy -v "$src#c"
stdout_has "will destroy $src#c"
log_mustnot tarn destroy "$src#c"
log_mustnot tarn destroy -n "$src#c"
verify_pool "$TESTPOOL"
log_pass
