#!/usr/bin/env bash
# diff FS@SNAP [FS@SNAP|FS] reports what changed as zfs diff does: M modified (contents, xattrs,
# a directory's entries, a file's links as "(+1)"), + added, - removed, R renamed, each path
# under the mountpoint, spaces and non-ASCII bytes escaped as \0ooo unless -h; -F adds the file
# type, -H separates a rename's paths with a tab, -t puts the ctime first. Without a second
# argument the file system as it is now is compared, leaving no snapshot behind.
. "$STF_SUITE/include/libtest.sh"
require_snapshot_verbs
log_assert "diff: every kind of change, as zfs diff prints it"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
m=$ALTROOT/$fs
log_must tarn create "$fs"
mkdir -p "$m/d/e"
for name in modified removed renamed xattr linked; do
	echo "$name" >"$m/$name"
done
for index in $(seq 1 30); do echo same >"$m/same$index"; done
log_must tarn snapshot "$fs@a"

echo more >>"$m/modified"
rm "$m/removed"
mv "$m/renamed" "$m/d/moved"
setfattr -n user.note -v value "$m/xattr" || log_fail "setfattr"
ln "$m/linked" "$m/d/e/second"
echo new >"$m/d/with space é"
mkdir "$m/newdir"
mkfifo "$m/fifo"
ln -s modified "$m/symlink"
log_must tarn snapshot "$fs@b"

log_must tarn diff -H "$fs@a" "$fs@b"
assert_eq "$(last_stdout | LC_ALL=C sort)" "$(printf '%s\n' \
	"+	$m/d/with\\0040space\\0040\\0303\\0251" \
	"+	$m/fifo" \
	"+	$m/newdir" \
	"+	$m/symlink" \
	"-	$m/removed" \
	"M	$m/" \
	"M	$m/d" \
	"M	$m/d/e" \
	"M	$m/linked	(+1)" \
	"M	$m/modified" \
	"M	$m/xattr" \
	"R	$m/renamed	$m/d/moved" | LC_ALL=C sort)" "diff -H"
stdout_lacks "same"

# -F: the type column; without -H a rename is "OLD -> NEW".
log_must tarn diff -F "$fs@a" "$fs@b"
stdout_has "+	|	$m/fifo"
stdout_has "+	@	$m/symlink"
stdout_has "+	/	$m/newdir"
stdout_has "+	F	$m/d/with\\0040space\\0040\\0303\\0251"
stdout_has "M	/	$m/d"
stdout_has "-	F	$m/removed"
stdout_has "R	F	$m/renamed -> $m/d/moved"
assert_eq "$(last_stdout | wc -l)" 12 "lines of diff -F"

# -h: paths as they are.
log_must tarn diff -h "$fs@a" "$fs@b"
stdout_has "+	$m/d/with space é"

# -t: the ctime first, seconds.nanoseconds, the file's own in the later snapshot.
log_must tarn diff -t -H "$fs@a" "$fs@b"
ctime=$(stat -c %.9Z "$m/.zfs/snapshot/b/modified") || log_fail "stat in .zfs/snapshot/b"
stdout_has "$ctime	M	$m/modified"
bad=$(last_stdout | grep -cvE '^ *[0-9]+\.[0-9]{9}	[-+MR]	')
assert_eq "$bad" 0 "lines of diff -t without a leading ctime"

# @SNAP names the other side's file system.
log_must tarn diff -H "$fs@a" "@b"
assert_eq "$(last_stdout | wc -l)" 12 "lines of diff FS@a @b"

# Against the file system now: through a temporary snapshot that is gone afterwards.
snapshots=$(tarn list -H -t snapshot -o name)
echo later >"$m/later"
rm "$m/fifo"
# A name that is not UTF-8 travels as its bytes: escaped, or with -h as it is.
echo raw >"$m/raw"$'\xff'
log_must tarn diff -H "$fs@b"
assert_eq "$(last_stdout | LC_ALL=C sort)" "$(printf '%s\n' \
	"+	$m/later" \
	"+	$m/raw\\0377" \
	"-	$m/fifo" \
	"M	$m/" | LC_ALL=C sort)" "diff against the file system"
log_must tarn diff -H -h "$fs@b" "$fs"
assert_eq "$(last_stdout | wc -l)" 4 "lines of diff FS@b FS"
grep -qaxF "+	$m/raw"$'\xff' "$LAST_STDOUT" || log_fail "diff -h should print the raw name"
assert_eq "$(tarn list -H -t snapshot -o name)" "$snapshots" "snapshots after diffs against the file system"
# Nothing changed: nothing printed.
log_must tarn snapshot "$fs@c"
log_must tarn diff "$fs@c"
assert_eq "$(last_stdout)" "" "diff of an unchanged file system"

# A clone diffs against its origin, its paths under its own mountpoint.
log_must tarn clone "$fs@b" "$TESTPOOL/clone"
echo cloned >"$ALTROOT/$TESTPOOL/clone/in clone"
log_must tarn diff -H "$fs@b" "$TESTPOOL/clone"
assert_eq "$(last_stdout | LC_ALL=C sort)" "$(printf '%s\n' \
	"+	$ALTROOT/$TESTPOOL/clone/in\\0040clone" \
	"M	$ALTROOT/$TESTPOOL/clone/" | LC_ALL=C sort)" "diff of a clone from its origin"
log_mustnot_msg "not an earlier snapshot" tarn diff "$fs@c" "$TESTPOOL/clone"
log_must tarn destroy "$TESTPOOL/clone"
log_must tarn pool wait -t free "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
