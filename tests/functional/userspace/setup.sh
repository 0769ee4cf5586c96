#!/usr/bin/env bash
# Area setup: FUSE is available, root can give files away (chown) and run a command as another
# user (setpriv), and this run's daemon holds no pool; each test makes its own.
. "$STF_SUITE/include/libtest.sh"
[ -e /dev/fuse ] || log_unsupported "/dev/fuse is not available"
[ "$(id -u)" -eq 0 ] || log_unsupported "the owners' files are made by root with chown"
command -v setpriv >/dev/null 2>&1 || log_unsupported "setpriv (util-linux) is not installed"
destroy_all_pools
assert_eq "$(pool_names)" "" "pools left before the area"
log_pass
