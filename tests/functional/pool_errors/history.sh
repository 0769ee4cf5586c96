#!/usr/bin/env bash
# pool history: every command that changed the pool, in order, with its command
# line (scrub and export included); commands that only read are not recorded; -l gives the
# newest record the txg it went into, not 0; the history is kept in the pool, so it survives
# export and import and can be read from an exported pool.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool history lists the commands that changed the pool"
trap destroy_all_pools EXIT

default_setup
log_must tarn create "$TESTPOOL/fs"
log_must tarn set compression=lz4 "$TESTPOOL/fs"
log_must tarn snapshot "$TESTPOOL/fs@s1"
log_must tarn pool scrub -w "$TESTPOOL"
log_must tarn pool status "$TESTPOOL"
log_must tarn list
log_mustnot tarn create "$TESTPOOL/no/parent"

log_must tarn pool history "$TESTPOOL"
stdout_has "History for '$TESTPOOL':"
commands=$(sed 1d "$LAST_STDOUT" | sed -n 's/^[0-9-]*\.[0-9:]* //p' | awk '{print $1, $2, $3}')
expected="tarn pool create
tarn create $TESTPOOL/fs
tarn set compression=lz4
tarn snapshot $TESTPOOL/fs@s1
tarn pool scrub"
assert_eq "$commands" "$expected" "recorded commands"
grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}\.[0-9]{2}:[0-9]{2}:[0-9]{2} tarn pool create ' "$LAST_STDOUT" ||
	log_fail "no timestamped create line"
log_must tarn set atime=off "$TESTPOOL/fs"
log_must tarn pool history -l "$TESTPOOL"
stdout_has "[user 0 (root) on "
newest=$(tail -n 1 "$LAST_STDOUT")
case "$newest" in
*"tarn set atime=off $TESTPOOL/fs [user 0 (root) on "*", txg "[1-9]*"]") ;;
*) log_fail "the newest record has no txg: $newest" ;;
esac

log_must tarn pool export "$TESTPOOL"
# Read from the exported pool, in-process.
log_must tarn pool history -d "$VDEV_DIR" "$TESTPOOL"
stdout_has "tarn snapshot $TESTPOOL/fs@s1"
last=$(tail -n 1 "$LAST_STDOUT")
case "$last" in
*"tarn pool export $TESTPOOL") ;;
*) log_fail "the export is not the last record of the exported pool: $last" ;;
esac
import_pool "$TESTPOOL"
log_must tarn pool history "$TESTPOOL"
stdout_has "tarn snapshot $TESTPOOL/fs@s1"
last=$(tail -n 1 "$LAST_STDOUT")
case "$last" in
*"tarn pool import -d $VDEV_DIR -R $ALTROOT $TESTPOOL") ;;
*) log_fail "the import is not the last record: $last" ;;
esac
log_pass
