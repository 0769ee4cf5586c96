#!/usr/bin/env bash
# send -P prints zfs send -P's machine-parsable lines: "full\tSNAP\tBYTES" or
# "incremental\tFROM\tSNAP\tBYTES" per substream, then "size\tBYTES"; with -n on stdout (and
# nothing else there), without -n on stderr beside the stream, whose size line is the exact
# length of the stream written. Before, CLI.md promised -P and clap refused it. -v says the
# same for people, as zfs send -v; without -v or -P send says nothing (it named each substream
# on stderr whatever -v said, and send -n printed an estimate without -v).
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "send -P prints parsable substream and size lines"
trap destroy_all_pools EXIT

default_setup
src=$TESTPOOL/src
log_must tarn create "$src"
head -c 2000000 /dev/urandom >"$ALTROOT/$src/a"
log_must tarn snapshot "$src@a"
head -c 500000 /dev/urandom >"$ALTROOT/$src/b"
log_must tarn snapshot "$src@b"
tab=$(printf '\t')

# -nP: the lines on stdout, a number in each size field; the total is their sum.
log_must tarn send -nP "$src@a"
grep -qE "^full${tab}$src@a${tab}[0-9]+\$" "$LAST_STDOUT" || log_fail "no full line: $(last_stdout)"
grep -qE "^size${tab}[0-9]+\$" "$LAST_STDOUT" || log_fail "no size line: $(last_stdout)"
assert_eq "$(wc -l <"$LAST_STDOUT")" 2 "lines of send -nP (one substream, then size)"
full=$(awk -F'\t' '$1 == "full" { print $3 }' "$LAST_STDOUT")
size=$(awk -F'\t' '$1 == "size" { print $2 }' "$LAST_STDOUT")
assert_eq "$size" "$full" "size of a one-substream send"
[ "$size" -gt 2000000 ] || log_fail "estimate $size is less than the 2 MB file sent"

# -I: one incremental line per snapshot between.
log_must tarn send -nP -I "$src@a" "$src@b"
grep -qE "^incremental${tab}$src@a${tab}$src@b${tab}[0-9]+\$" "$LAST_STDOUT" \
	|| log_fail "no incremental line: $(last_stdout)"

# A real send: the stream on stdout, the lines on stderr, size = the stream's length.
tarn send -P "$src@b" >"$SCRATCH/stream" 2>"$SCRATCH/lines" || log_fail "send -P failed: $(cat "$SCRATCH/lines")"
cat "$SCRATCH/lines"
grep -qE "^full${tab}$src@b${tab}[0-9]+\$" "$SCRATCH/lines" || log_fail "no full line on stderr"
sent=$(awk -F'\t' '$1 == "size" { print $2 }' "$SCRATCH/lines")
assert_eq "$sent" "$(stat -c %s "$SCRATCH/stream")" "size line of a real send"
tarn receive "$TESTPOOL/copy" <"$SCRATCH/stream" || log_fail "the stream of send -P does not receive"
assert_eq "$(digest "$ALTROOT/$TESTPOOL/copy/b")" "$(digest "$ALTROOT/$src/b")" "received file"

# Without -v or -P nothing is said; -v says each substream and the total.
tarn send "$src@a" >/dev/null 2>"$SCRATCH/quiet" || log_fail "send"
assert_eq "$(cat "$SCRATCH/quiet")" "" "stderr of a send without -v"
log_must tarn send -n "$src@a"
assert_eq "$(last_stdout)" "" "stdout of send -n without -v"
log_must tarn send -n -v -i @a "$src@b"
stdout_has "send from $src@a to $src@b estimated size is"
stdout_has "total estimated size is"
tarn send -v "$src@a" >/dev/null 2>"$SCRATCH/verbose" || log_fail "send -v"
grep -q "^full send of $src@a size is" "$SCRATCH/verbose" || log_fail "send -v: $(cat "$SCRATCH/verbose")"
grep -q "^total size is" "$SCRATCH/verbose" || log_fail "send -v says no total"
log_pass
