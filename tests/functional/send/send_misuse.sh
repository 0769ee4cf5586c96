#!/usr/bin/env bash
# Bad uses of send and receive fail with a message and change nothing: sending a file system
# (not a snapshot) or from a newer snapshot; a full stream into an existing file system; an
# incremental stream into a target without its source, or modified since it (until -F); a
# damaged or truncated stream (the partial file system is gone, the target of an incremental
# one is as it was); a stream to or from a terminal is refused.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "send and receive refuse bad requests and bad streams, leaving pools intact"
trap destroy_all_pools EXIT

default_setup
src=$TESTPOOL/src
mnt=$ALTROOT/$src
log_must tarn create "$src"
head -c 2000000 /dev/urandom >"$mnt/data"
log_must tarn snapshot "$src@a"
echo more >"$mnt/more"
log_must tarn snapshot "$src@b"

log_mustnot_msg "name a snapshot" tarn send "$src"
log_mustnot_msg "not older" tarn send -i @b "$src@a"
log_mustnot_msg "does not exist" tarn send "$src@nope"
tarn send "$src@a" >"$SCRATCH/full" || log_fail "send"
tarn send -i @a "$src@b" >"$SCRATCH/incr" || log_fail "send -i"

log_mustnot_msg "exists" tarn receive "$src" <"$SCRATCH/full"
log_mustnot_msg "does not exist" tarn receive "$TESTPOOL/none" <"$SCRATCH/incr"

# Damaged and truncated streams.
cp "$SCRATCH/full" "$SCRATCH/damaged"
printf '\xff\xff\xff\xff' | dd of="$SCRATCH/damaged" bs=1 seek=1000000 conv=notrunc status=none
log_mustnot_msg "checksum" tarn receive "$TESTPOOL/copy" <"$SCRATCH/damaged"
head -c 1500000 "$SCRATCH/full" >"$SCRATCH/short"
log_mustnot_msg "truncated" tarn receive "$TESTPOOL/copy" <"$SCRATCH/short"
log_mustnot tarn list "$TESTPOOL/copy"

# A modified target needs -F; a damaged incremental stream leaves the target as it was.
log_must tarn receive "$TESTPOOL/copy" <"$SCRATCH/full"
echo local >"$ALTROOT/$TESTPOOL/copy/local"
log_must tarn pool sync "$TESTPOOL"
log_mustnot_msg "modified" tarn receive "$TESTPOOL/copy" <"$SCRATCH/incr"
cp "$SCRATCH/incr" "$SCRATCH/incr.bad"
size=$(stat -c %s "$SCRATCH/incr.bad")
printf '\xff\xff\xff\xff' | dd of="$SCRATCH/incr.bad" bs=1 seek=$((size - 8)) conv=notrunc status=none
log_mustnot tarn receive -F "$TESTPOOL/copy" <"$SCRATCH/incr.bad"
[ -e "$ALTROOT/$TESTPOOL/copy/more" ] && log_fail "a failed receive left its changes"
# It was applied to the hidden clone FS/%recv, so even -F left the target's own change.
[ -e "$ALTROOT/$TESTPOOL/copy/local" ] || log_fail "a failed receive -F rolled the target back"
tarn list -H -o name -r "$TESTPOOL" | grep -q '%' && log_fail "the hidden clone is listed"
log_mustnot_msg "reserved" tarn create "$TESTPOOL/copy/%recv"
log_must tarn receive -F "$TESTPOOL/copy" <"$SCRATCH/incr"
[ -e "$ALTROOT/$TESTPOOL/copy/more" ] || log_fail "the incremental receive did not apply"
[ -e "$ALTROOT/$TESTPOOL/copy/local" ] && log_fail "-F kept the local change"

# Terminals are refused (only when the test runs with one).
if [ -t 0 ]; then log_mustnot_msg "terminal" tarn receive "$TESTPOOL/tty"; fi
verify_pool "$TESTPOOL"
log_pass
