#!/usr/bin/env bash
# Retention as sanoid/syncoid and zrepl run it, end to end on two pools: each round takes a
# snapshot, sends it incrementally from the last one the replica has, holds it as the next
# base and releases the previous base, then prunes by pattern (FS@first%last) on both sides,
# keeping the newest three. A prune that would take the held base is refused whole; destroy -d
# of the same range destroys the rest and defers the base, which goes when its hold is
# released. The replica matches the source snapshot by snapshot; check is clean on both.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "take, hold, send incrementally, release, destroy by pattern"
trap destroy_all_pools EXIT

default_setup
create_pool backup "$(vdev backup)"
src=$TESTPOOL/data
dst=backup/data
log_must tarn create "$src"
keep=3
rounds=7
for round in $(seq 1 $rounds); do
	head -c $((round * 40000)) /dev/urandom >"$ALTROOT/$src/file-$round"
	[ "$round" -gt 2 ] && rm "$ALTROOT/$src/file-$((round - 2))"
	log_must tarn snapshot "$src@auto-$round"
	if [ "$round" -eq 1 ]; then
		tarn send "$src@auto-1" | tarn receive -u "$dst" || log_fail "full send, round 1"
	else
		tarn send -i "@auto-$((round - 1))" "$src@auto-$round" | tarn receive -u -F "$dst" \
			|| log_fail "incremental send, round $round"
	fi
	# The new base is held before the old one is released: there is always one.
	log_must tarn hold replica "$src@auto-$round"
	[ "$round" -gt 1 ] && log_must tarn release replica "$src@auto-$((round - 1))"
	log_must tarn holds -H "$src@auto-$round"
	stdout_has "replica"
	if [ "$round" -gt "$keep" ]; then
		oldest=$(tarn list -H -t snapshot -o name "$src" | head -n 1)
		log_must tarn destroy "$src@${oldest#*@}%auto-$((round - keep))"
		log_must tarn destroy "$dst@${oldest#*@}%auto-$((round - keep))"
	fi
	log_must tarn list -H -t snapshot -o name "$src"
	[ "$(last_stdout | wc -l)" -le "$keep" ] || log_fail "round $round keeps more than $keep: $(last_stdout)"
done
# Received with -u: mounted now, to read the replica's snapshot.
log_must tarn mount "$dst"
expected=""
for round in $(seq $((rounds - keep + 1)) $rounds); do
	expected="$expected $src@auto-$round"
	assert_eq "$(get_prop guid "$dst@auto-$round")" "$(get_prop guid "$src@auto-$round")" "guid of auto-$round on the replica"
done
assert_eq "$(tarn list -H -t snapshot -o name "$src" | tr '\n' ' ')" "${expected# } " "source snapshots kept"
log_must tarn list -H -t snapshot -o name "$dst"
assert_eq "$(last_stdout | sed 's/^backup/'"$TESTPOOL"'/' | tr '\n' ' ')" "${expected# } " "replica snapshots kept"
log_must diff -r "$ALTROOT/$src/.zfs/snapshot/auto-$rounds" "$ALTROOT/$dst/.zfs/snapshot/auto-$rounds"

# The held base refuses a prune that would take it, whole.
log_mustnot_msg "is held (replica)" tarn destroy "$src@auto-$((rounds - keep + 1))%auto-$rounds"
assert_eq "$(tarn list -H -t snapshot -o name "$src" | wc -l)" "$keep" "a refused prune destroys nothing"
# destroy -d: the others go, the base waits for its release.
log_must tarn destroy -d "$src@auto-$((rounds - keep + 1))%auto-$rounds"
stdout_has "deferred the destroy of $src@auto-$rounds"
assert_eq "$(tarn list -H -t snapshot -o name "$src")" "$src@auto-$rounds" "the base stays"
log_must tarn release replica "$src@auto-$rounds"
stdout_has "destroyed $src@auto-$rounds"
assert_eq "$(tarn list -H -t snapshot -o name "$src")" "" "the base goes with its hold"
log_must tarn pool wait -t free "$TESTPOOL"
verify_pool "$TESTPOOL"
verify_pool backup
log_pass
