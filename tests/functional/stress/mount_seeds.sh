#!/usr/bin/env bash
# tarn-stress's mount mode: file operations through a real FUSE mount of a
# daemon of its own, the daemon SIGKILLed or the pool exported at moments the seed chooses,
# near-full rounds that make write(2) meet ENOSPC, then the pool imported, checked, and every
# file, snapshot and fsync promise verified. A fixed seed, then a fresh one (printed, so a
# failure can be run again). Any inconsistency fails the run (exit 1) and keeps its evidence.
. "$STF_SUITE/include/libtest.sh"
log_assert "tarn-stress --mount: kills, near-full rounds and re-imports leave every file as promised"

stress="$(dirname "$TARN")/tarn-stress"
[ -x "$stress" ] || log_fail "$stress is missing (scripts/functional.sh builds it)"

run_seed() {
	local name=$1 dir="$SCRATCH/$1"
	shift
	# The tool's daemon has a socket of its own under DIR; this run's daemon is not used.
	log_must env -u TARN_SOCKET "$stress" --mount --tarn "$TARN" --dir "$dir" --threads 2 "$@"
	stdout_has " 0 failures"
	local line kills clean imports promises refused
	line=$(grep -E '^tarn-stress: [0-9]+ operations' "$LAST_STDOUT")
	kills=$(sed -E 's/.* ([0-9]+) kills.*/\1/' <<<"$line")
	clean=$(sed -E 's/.* ([0-9]+) clean ends.*/\1/' <<<"$line")
	imports=$(sed -E 's/.* ([0-9]+) imports.*/\1/' <<<"$line")
	promises=$(sed -E 's/.* ([0-9]+) fsync promises.*/\1/' <<<"$line")
	refused=$(sed -E 's/.*\(([0-9]+) refused\).*/\1/' <<<"$line")
	# The fixed seed is known to kill; a fresh one may end its few rounds cleanly (one round
	# in four exports instead), but rounds must have ended.
	[ "$kills" -gt 0 ] || [ "$name" != fixed ] || log_fail "no daemon was killed: $line"
	[ $((kills + clean)) -gt 0 ] || log_fail "no round ended: $line"
	[ "$imports" -gt "$kills" ] || log_fail "fewer imports than kills: $line"
	# A fresh seed may spend its few rounds under a quota (one round in three), where the
	# quota is met within a second and every write, and so the fsync promise that would
	# follow it, is refused (seed 3975891361065534480: two quota rounds, 0 promises); the
	# fixed seed has near-full rounds and makes promises.
	[ "$promises" -gt 0 ] || [ "$name" != fixed ] || log_fail "no fsync promise was checked: $line"
	[ "$refused" -gt 0 ] || log_fail "nothing was refused: $line"
	line=$(grep -E 'near-full rounds' "$LAST_STDOUT")
	no_space=$(sed -E 's/.* ([0-9]+) writes refused with ENOSPC.*/\1/' <<<"$line")
	[ "$no_space" -gt 0 ] || [ "$name" != fixed ] || log_fail "no write met ENOSPC: $line"
}

run_seed fixed --seed 3 --duration 20
run_seed fresh --duration 10
log_pass
