#!/usr/bin/env bash
# A pool on one vdev: listed ONLINE, its root file system mounted at ALTROOT/POOL, usable, clean.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create on one vdev gives an ONLINE, mounted, writable, consistent pool"
trap destroy_all_pools EXIT

create_pool "$TESTPOOL" "$(vdev one)"
stdout_has "created pool $TESTPOOL"
assert_eq "$(pool_names)" "$TESTPOOL" "pools after create"
log_must tarn pool list -H -o name,health "$TESTPOOL"
assert_eq "$(last_stdout)" "$(printf '%s\tONLINE' "$TESTPOOL")" "name and health"
is_mounted "$ALTROOT/$TESTPOOL" || log_fail "root file system not mounted at $ALTROOT/$TESTPOOL"
log_must cp "$STF_SUITE/include/libtest.sh" "$ALTROOT/$TESTPOOL/copy"
log_must cmp "$STF_SUITE/include/libtest.sh" "$ALTROOT/$TESTPOOL/copy"
verify_pool "$TESTPOOL"
log_pass
