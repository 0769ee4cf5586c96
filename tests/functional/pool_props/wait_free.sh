#!/usr/bin/env bash
# pool wait -t free: after destroying a filled file system its space is freed in the
# background (the freeing property); pool wait returns once freeing is 0, quietly when not on
# a terminal, and free space is back at once, in `free` and in the file systems' `avail`
# (no sync or txg timeout needed after it). With no scan running, -t scrub|resilver return at once;
# other activities are refused as not supported yet.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "pool wait -t free waits for background frees"

fs=$TESTPOOL/fill
log_must tarn create "$fs"
log_must tarn pool get -H -p -o value free "$TESTPOOL"
free_before=$(last_stdout)
avail_before=$(get_prop avail "$TESTPOOL")
for i in 1 2 3 4; do
	head -c 8M /dev/urandom >"$ALTROOT/$fs/file$i" || log_fail "cannot write $ALTROOT/$fs/file$i"
done
log_must tarn pool sync "$TESTPOOL"
log_must tarn destroy "$fs"
log_must tarn pool get -H -p -o value freeing "$TESTPOOL"
log_note "freeing right after destroy: $(last_stdout)"
log_must tarn pool wait -t free "$TESTPOOL"
assert_eq "$(last_stdout)" "" "pool wait prints nothing"
assert_eq "$(cat "$LAST_STDERR")" "" "no progress line off a terminal"
log_must tarn pool get -H -p -o value freeing "$TESTPOOL"
assert_eq "$(last_stdout)" "0" "freeing after pool wait"
log_must tarn pool get -H -p -o value free "$TESTPOOL"
# The 32M came back (within a few metadata blocks), without a sync after the wait.
[ "$(last_stdout)" -ge $((free_before - (4 << 20))) ] ||
	log_fail "free space not back after wait: $(last_stdout) < $free_before"
avail=$(get_prop avail "$TESTPOOL")
[ "$avail" -ge $((avail_before - (4 << 20))) ] ||
	log_fail "avail not back after wait: $avail < $avail_before"

log_must tarn pool wait "$TESTPOOL"
# No scrub or resilver in progress: waiting for them returns at once.
log_must tarn pool wait -t scrub "$TESTPOOL"
log_must tarn pool wait -t resilver,free "$TESTPOOL"
log_mustnot_msg "not supported yet" tarn pool wait -t trim "$TESTPOOL"
log_mustnot_msg "no such pool" tarn pool wait -t free nosuchpool
log_pass
