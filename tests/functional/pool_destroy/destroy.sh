#!/usr/bin/env bash
# Destroy unmounts and forgets a pool: not listed, not importable, shown by import -D.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool destroy removes the pool for good"
trap destroy_all_pools EXIT

default_setup
create_pool other "$(vdev other)"
log_must tarn pool destroy "$TESTPOOL"
stdout_has "destroyed pool $TESTPOOL"
assert_eq "$(pool_names)" "other" "pools after destroy"
is_mounted "$ALTROOT/$TESTPOOL" && log_fail "still mounted after destroy"
log_must tarn pool import -d "$VDEV_DIR"
stdout_lacks "pool: $TESTPOOL"
log_mustnot tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
assert_eq "$(pool_names)" "other" "pools after a refused import"
log_must tarn pool import -D -d "$VDEV_DIR"
stdout_has "pool: $TESTPOOL"
verify_pool other
log_pass
