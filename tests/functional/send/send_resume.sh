#!/usr/bin/env bash
# Resumable receives: a stream cut part-way into receive -s leaves the partial file system
# (full stream) or hidden clone (incremental stream) with a receive_resume_token; send -t
# continues from where it stopped (with -n, writes nothing), and the result matches the source
# file by file; receive -A
# abandons a partial receive; a damaged token is refused; the target of a cut incremental
# receive never changed; check is clean.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "send -t resumes what receive -s kept of a cut stream"
trap destroy_all_pools EXIT

default_setup
src=$TESTPOOL/src
mnt=$ALTROOT/$src
log_must tarn create "$src"
for i in 1 2 3 4 5 6; do head -c 700000 /dev/urandom >"$mnt/file$i"; done
log_must tarn snapshot "$src@a"
echo changed >"$mnt/file2"
head -c 900000 /dev/urandom >"$mnt/file7"
log_must tarn snapshot "$src@b"
tarn send "$src@a" >"$SCRATCH/full" || log_fail "send"
tarn send -i @a "$src@b" >"$SCRATCH/incr" || log_fail "send -i"
token_of() { tarn get -H -o value receive_resume_token "$1"; }

# A full stream cut at a third: kept, with a token; resumed.
[ "$(token_of "$src")" = "-" ] || log_fail "a file system without a partial receive has a token"
head -c $(($(stat -c %s "$SCRATCH/full") / 3)) "$SCRATCH/full" >"$SCRATCH/cut"
log_mustnot tarn receive -s "$TESTPOOL/copy" <"$SCRATCH/cut"
token=$(token_of "$TESTPOOL/copy")
[ -n "$token" ] && [ "$token" != "-" ] || log_fail "no receive_resume_token after a cut receive -s"
log_mustnot_msg "partial receive" tarn receive "$TESTPOOL/copy" <"$SCRATCH/full"
# -n with -t writes no stream (it wrote the whole rest before); -c is the token's to say.
tarn send -n -t "$token" >"$SCRATCH/dry" || log_fail "send -n -t"
assert_eq "$(stat -c %s "$SCRATCH/dry")" 0 "bytes written by send -n -t"
log_must tarn send -n -P -t "$token"
grep -q "^size" "$LAST_STDOUT" || log_fail "send -n -P -t says no size"
log_mustnot tarn send -c -t "$token"
tarn send -t "$token" >"$SCRATCH/rest" || log_fail "send -t"
[ "$(stat -c %s "$SCRATCH/rest")" -lt "$(stat -c %s "$SCRATCH/full")" ] || log_fail "the resumed stream is not shorter"
log_must tarn receive -s "$TESTPOOL/copy" <"$SCRATCH/rest"
[ "$(token_of "$TESTPOOL/copy")" = "-" ] || log_fail "the token stays after the receive finished"
# Reading the copy below must not count as a change to it.
log_must tarn set atime=off "$TESTPOOL/copy"
log_must diff -r "$ALTROOT/$TESTPOOL/copy" "$ALTROOT/$src/.zfs/snapshot/a"

# An incremental stream cut halfway: the target is unchanged; abort, then cut and resume.
head -c $(($(stat -c %s "$SCRATCH/incr") / 2)) "$SCRATCH/incr" >"$SCRATCH/cut"
log_mustnot tarn receive -s "$TESTPOOL/copy" <"$SCRATCH/cut"
log_must diff -r "$ALTROOT/$TESTPOOL/copy" "$ALTROOT/$src/.zfs/snapshot/a"
[ "$(token_of "$TESTPOOL/copy")" != "-" ] || log_fail "no token after a cut incremental receive -s"
log_must tarn receive -A "$TESTPOOL/copy"
[ "$(token_of "$TESTPOOL/copy")" = "-" ] || log_fail "receive -A left the token"
log_mustnot_msg "no partial receive" tarn receive -A "$TESTPOOL/copy"
log_mustnot tarn receive -s "$TESTPOOL/copy" <"$SCRATCH/cut"
log_mustnot_msg "resume token" tarn send -t "1-0000-zz"
tarn send -t "$(token_of "$TESTPOOL/copy")" | tarn receive "$TESTPOOL/copy" || log_fail "send -t | receive"
log_must diff -r "$ALTROOT/$TESTPOOL/copy" "$mnt"
tarn list -H -o name -r "$TESTPOOL" | grep -q '%' && log_fail "the hidden clone is listed"
verify_pool "$TESTPOOL"
log_pass
