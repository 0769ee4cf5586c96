#!/usr/bin/env bash
# An exported pool can be destroyed from its vdevs (-d), after which it no longer imports.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool destroy -d DIR of an exported pool"
trap destroy_all_pools EXIT

default_setup
log_must tarn pool export "$TESTPOOL"
log_must tarn pool destroy -d "$VDEV_DIR" "$TESTPOOL"
log_must tarn pool import -d "$VDEV_DIR"
stdout_lacks "pool: $TESTPOOL"
log_mustnot tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
log_pass
