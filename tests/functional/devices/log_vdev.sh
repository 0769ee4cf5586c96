#!/usr/bin/env bash
# Separate log devices: `pool create ... log DEV` and `pool add POOL log DEV` make log vdevs
# that status shows under `logs`, that take the intent log's writes (an O_DSYNC writer through
# the mount writes to the log device) but no file data, and that are left out of the pool's
# size; an import without the log device is refused unless -m.
. "$STF_SUITE/include/libtest.sh"
log_assert "log vdevs take the intent log, show under logs, and import only with -m when missing"

create_pool slog "$(vdev sl-data)" log "$(vdev sl-log)"
log_must tarn pool status slog
awk '$1 == "logs" { logs = NR } index($0, dev) && logs && NR > logs { found = 1 } END { exit !found }' \
	dev="$(vdev sl-log)" "$LAST_STDOUT" || log_fail "the log device is not under logs: $(cat "$LAST_STDOUT")"
# The pool's size is the data vdev's alone.
size=$(tarn pool list -H -p -o size slog)
[ "$size" -lt "$(stat -c %s "$(vdev sl-data)")" ] || log_fail "pool size $size counts the log device"

# O_DSYNC writes commit through the intent log, onto the log device: its sparse file gains
# at least the 256 KiB written (each commit goes to a new log block).
log_before=$(du -k "$(vdev sl-log)" | cut -f1)
log_must dd if=/dev/urandom of="$ALTROOT/slog/synced" bs=4k count=64 oflag=dsync status=none
want=$(digest "$ALTROOT/slog/synced")
log_after=$(du -k "$(vdev sl-log)" | cut -f1)
[ "$log_after" -ge $((log_before + 256)) ] ||
	log_fail "the log device's file grew from $log_before to $log_after KiB for 64 O_DSYNC writes of 4 KiB"
# Bulk data stays off it.
head -c 32M /dev/urandom >"$SCRATCH/big"
log_must cp "$SCRATCH/big" "$ALTROOT/slog/big"
log_must tarn pool sync slog
log_must tarn pool iostat -v -p slog
stdout_has "logs"
log_alloc=$(awk -v dev="$(vdev sl-log)" '$1 == dev { print $2 }' "$LAST_STDOUT")
[ "$log_alloc" -lt $((4 << 20)) ] || log_fail "$log_alloc bytes allocated on the log device after 32 MiB of data"

# A second log vdev, added later; -n only tells.
truncate -s "$VDEV_SIZE" "$(vdev sl-log2)"
log_must tarn pool add -n slog log "$(vdev sl-log2)"
stdout_has "logs"
log_must tarn pool status slog
stdout_lacks "$(vdev sl-log2)"
log_must tarn pool add slog log "$(vdev sl-log2)"
log_must tarn pool status slog
stdout_has "$(vdev sl-log2)"
log_mustnot_msg "log requires at least one device" tarn pool add slog log
log_mustnot_msg "log devices cannot be removed yet" tarn pool remove slog "$(vdev sl-log2)"

# Export, lose the first log device: import is refused, then -m imports without it.
log_must tarn pool export slog
mv "$(vdev sl-log)" "$SCRATCH/log-away"
log_mustnot_msg "import with -m" tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" slog
import_pool -m slog
log_must tarn pool status slog
stdout_has "DEGRADED"
stdout_has "UNAVAIL"
assert_eq "$(digest "$ALTROOT/slog/synced")" "$want" "O_DSYNC file after import -m"
assert_eq "$(digest "$ALTROOT/slog/big")" "$(digest "$SCRATCH/big")" "bulk file after import -m"
log_must dd if=/dev/urandom of="$ALTROOT/slog/after" bs=4k count=8 oflag=dsync status=none
verify_pool slog
log_must tarn pool destroy slog
log_pass
