#!/usr/bin/env bash
# Two paths make two top-level vdevs (a stripe): status shows both, size is about twice one.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create with two paths stripes over two top-level vdevs"
trap destroy_all_pools EXIT

create_pool single "$(vdev single)"
log_must tarn pool list -H -p -o size single
size_one=$(last_stdout)
create_pool "$TESTPOOL" "$(vdev a)" "$(vdev b)"
log_must tarn pool status "$TESTPOOL"
stdout_has "$(vdev a)"
stdout_has "$(vdev b)"
stdout_lacks "mirror"
log_must tarn pool list -H -p -o size "$TESTPOOL"
size_two=$(last_stdout)
[ "$size_two" -ge $((2 * size_one - size_one / 10)) ] && [ "$size_two" -le $((2 * size_one)) ] ||
	log_fail "two vdevs give $size_two bytes, one gives $size_one"
verify_pool "$TESTPOOL"
log_pass
