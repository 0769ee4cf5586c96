#!/usr/bin/env bash
# check on a clean pool, imported (through the daemon) and exported (in-process, -d): no errors,
# exit 0, and a block count that grows with the data written.
. "$STF_SUITE/include/libtest.sh"
log_assert "check of a clean pool finds no errors, imported or exported"
trap destroy_all_pools EXIT

default_mirror_setup
log_must tarn check "$TESTPOOL"
stdout_has "no errors found"
blocks_empty=$(sed -n 's/^ *blocks: *\([0-9]*\)$/\1/p' "$LAST_STDOUT")
write_marked_file "$ALTROOT/$TESTPOOL/data" 512
log_must tarn pool sync "$TESTPOOL"
log_must tarn check "$TESTPOOL"
stdout_has "(0 bad, 0 repaired)"
blocks_full=$(sed -n 's/^ *blocks: *\([0-9]*\)$/\1/p' "$LAST_STDOUT")
[ "$blocks_full" -gt "$blocks_empty" ] || log_fail "blocks did not grow: $blocks_empty then $blocks_full"

log_must tarn pool export "$TESTPOOL"
log_must tarn check -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "no errors found"
stdout_has "(0 bad, 0 repaired)"
log_mustnot_msg "nosuchpool" tarn check -d "$VDEV_DIR" nosuchpool
log_pass
