#!/usr/bin/env bash
# One default search path for every verb that looks for a pool's devices without -d, the one
# `pool import` uses: /dev/disk/by-id and the directories the cache file names, never the
# current directory. check, debug metaslabs, pool history, pool import -F -n, pool export and
# pool destroy of a pool no daemon holds find an exported pool beside an imported one, and none
# of them finds a pool in the current directory that no cache file names.
. "$STF_SUITE/include/libtest.sh"
log_assert "verbs without -d search the default search path, never the current directory"
trap destroy_all_pools EXIT

mkdir -p "$SCRATCH/known" "$SCRATCH/here"
# herepool: exported, in a directory no cache file names.
create_pool herepool "$SCRATCH/here/herepool.img"
log_must tarn pool export herepool
# anchor, imported, puts $SCRATCH/known in the cache file; neighbour is exported beside it.
create_pool anchor "$SCRATCH/known/anchor.img"
create_pool neighbour "$SCRATCH/known/neighbour.img"
log_must tarn pool export neighbour

cd "$SCRATCH/here" || log_fail "cd $SCRATCH/here"
log_mustnot_msg herepool tarn check herepool
log_mustnot_msg herepool tarn debug metaslabs herepool
log_mustnot_msg herepool tarn pool history herepool
log_mustnot_msg herepool tarn pool import -F -n herepool
log_mustnot_msg herepool tarn pool export herepool
log_mustnot_msg herepool tarn pool destroy herepool
cd / || log_fail "cd /"
log_must tarn pool import -d "$SCRATCH/here"
stdout_has "pool: herepool"

log_must tarn check neighbour
stdout_has "no errors found"
log_must tarn debug metaslabs neighbour
stdout_has "vdev 0:"
log_must tarn pool history neighbour
stdout_has "History for 'neighbour':"
log_must tarn pool import -F -n neighbour
stdout_has "no rewind needed"
log_must tarn pool export neighbour
stdout_has "pool neighbour is already exported"
log_must tarn pool destroy neighbour
stdout_has "destroyed pool neighbour"
log_must tarn pool import -d "$SCRATCH/known"
stdout_lacks "pool: neighbour"

log_must tarn pool destroy -d "$SCRATCH/here" herepool
log_pass
