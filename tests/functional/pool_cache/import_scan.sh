#!/usr/bin/env bash
# pool import without -d: scans /dev/disk/by-id and the directories the cache file
# names, never the current directory; listings tell exported, active and destroyed pools apart.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool import without -d does not scan the current directory"
trap destroy_all_pools EXIT

mkdir -p "$SCRATCH/here"
create_pool herepool "$SCRATCH/here/herepool.img"
log_must tarn pool export herepool
# Exported: out of the cache file, and the current directory is not scanned.
cd "$SCRATCH/here" || log_fail "cd"
log_must tarn pool import
stdout_lacks "pool: herepool"
log_must tarn pool import -d "$SCRATCH/here"
stdout_has "pool: herepool"
stdout_has "state: ONLINE"
stdout_has "action: The pool can be imported using its name or numeric identifier."
stdout_lacks "status:"
cd / || log_fail "cd /"

# A pool in the cache file: its directory is scanned without -d, and finds an exported
# neighbour there.
log_must tarn pool import -d "$SCRATCH/here" -R "$ALTROOT" herepool
create_pool neighbour "$SCRATCH/here/neighbour.img"
log_must tarn pool export neighbour
log_must tarn pool import
stdout_has "pool: neighbour"
stdout_lacks "pool: herepool"
stdout_has "already imported by the tarn daemon on $TARN_SOCKET: herepool"
log_must tarn pool import -R "$ALTROOT" neighbour
pool_is_imported neighbour || log_fail "neighbour was not imported without -d"
log_must tarn pool destroy neighbour
log_must tarn pool destroy herepool
log_must tarn pool import -D -d "$SCRATCH/here"
stdout_has "state: ONLINE (DESTROYED)"
log_pass
