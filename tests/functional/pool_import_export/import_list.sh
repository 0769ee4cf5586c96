#!/usr/bin/env bash
# import with no pool name lists the pools found in -d directories, imports nothing.
. "$STF_SUITE/include/libtest.sh"
log_assert "import -d DIR with no pool lists exported pools"
trap destroy_all_pools EXIT

create_pool first "$(vdev first)"
create_pool second mirror "$(vdev second-a)" "$(vdev second-b)"
log_must tarn pool export first
log_must tarn pool export second
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: first"
stdout_has "pool: second"
stdout_has "$(vdev second-a)"
stdout_has "$(vdev second-b)"
[ "$(grep -c 'state: ONLINE$' "$LAST_STDOUT")" -eq 2 ] || log_fail "both pools should be ONLINE"
[ "$(grep -c 'action: The pool can be imported using its name' "$LAST_STDOUT")" -eq 2 ] ||
	log_fail "both pools should import by name"
assert_eq "$(pool_names)" "" "pools after listing"

mkdir "$SCRATCH/empty"
log_must tarn pool import -d "$SCRATCH/empty"
stdout_has "no pools available"
log_pass
