#!/usr/bin/env bash
# -s SIZE creates missing vdev files as sparse files of exactly SIZE.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool create -s SIZE creates sparse vdev files of that size"
trap destroy_all_pools EXIT

[ ! -e "$(vdev a)" ] || log_fail "$(vdev a) exists before the test"
log_must tarn pool create -s 128M -R "$ALTROOT" "$TESTPOOL" mirror "$(vdev a)" "$(vdev b)"
for file in "$(vdev a)" "$(vdev b)"; do
	assert_eq "$(stat -c %s "$file")" $((128 * 1024 * 1024)) "size of $file"
	allocated=$(($(stat -c %b "$file") * $(stat -c %B "$file")))
	[ "$allocated" -lt $((64 * 1024 * 1024)) ] || log_fail "$file is not sparse: $allocated bytes allocated"
done
log_mustnot tarn pool create -s 12Q -R "$ALTROOT" other "$(vdev other)"
[ ! -e "$(vdev other)" ] || log_fail "a refused size created $(vdev other)"
log_pass
