#!/usr/bin/env bash
# Area setup: FUSE and the attr/acl tools are available and this run's daemon holds no pool;
# each test makes its own.
. "$STF_SUITE/include/libtest.sh"
[ -e /dev/fuse ] || log_unsupported "/dev/fuse is not available"
for tool in setfattr getfattr setfacl getfacl; do
	command -v "$tool" >/dev/null 2>&1 ||
		log_unsupported "$tool is not installed (scripts/install-deps.sh installs attr and acl)"
done
destroy_all_pools
assert_eq "$(pool_names)" "" "pools left before the area"
log_pass
