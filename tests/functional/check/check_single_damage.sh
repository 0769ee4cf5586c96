#!/usr/bin/env bash
# Damaged data on a single-vdev pool has no good copy: check (and check -n, which writes
# nothing) names the unreadable blocks and exits non-zero.
. "$STF_SUITE/include/libtest.sh"
log_assert "check exits non-zero on blocks with no good copy"
trap destroy_all_pools EXIT

default_setup
write_marked_file "$ALTROOT/$TESTPOOL/data" 512
log_must tarn pool export "$TESTPOOL"
damage_marked_blocks "$(vdev "$TESTPOOL")" 64
before=$(digest "$(vdev "$TESTPOOL")")
for flags in -n ""; do
	_run_logged tarn check $flags -d "$VDEV_DIR" "$TESTPOOL"
	[ "$LAST_STATUS" -ne 0 ] || log_fail "check $flags exited 0 on unrecoverable damage"
	stdout_has "UNREADABLE"
	stdout_has "ERRORS FOUND"
	! grep -q "no errors found" "$LAST_STDOUT" || log_fail "check said 'no errors found'"
	# check -n opens the pool read-only: not a byte changes.
	[ -n "$flags" ] && assert_eq "$(digest "$(vdev "$TESTPOOL")")" "$before" "the vdev after check -n"
done
log_pass
