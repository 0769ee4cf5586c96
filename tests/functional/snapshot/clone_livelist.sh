#!/usr/bin/env bash
# Livelists: a clone in a pool with feature@livelist (the default) keeps one, shown by
# `debug dataset` with its sub-lists, checked by `tarn check`, and its destroy says it freed
# through the livelist; a pool created with -o feature@livelist=disabled walks the clone's tree
# instead; the space comes back either way.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "clone destroy: livelist with the feature, traversal without"
trap destroy_all_pools EXIT

# run_case POOL EXPECTED_PATH: a 16 MiB file at recordsize 8K, snapshot, clone, scattered
# overwrites in the clone, then destroy -v of the clone.
run_case() {
	local pool=$1 expected=$2 fs=$1/fs
	log_must tarn create -o recordsize=8K -o compression=off "$fs"
	dd if=/dev/urandom of="$ALTROOT/$fs/big" bs=1M count=16 status=none
	log_must tarn snapshot "$fs@origin"
	log_must tarn pool sync "$pool"
	local before
	before=$(tarn pool list -H -p -o alloc "$pool")
	log_must tarn clone "$fs@origin" "$pool/work"
	local i
	for i in $(seq 0 63); do
		dd if=/dev/urandom of="$ALTROOT/$pool/work/big" bs=8K count=1 seek=$(((i * 97) % 2048)) \
			conv=notrunc status=none
	done
	log_must tarn pool sync "$pool"
	log_must tarn debug dataset "$pool/work"
	if [ "$expected" = livelist ]; then
		stdout_has "Livelist:"
		stdout_has "txgs ("
	else
		stdout_lacks "Livelist:"
	fi
	verify_pool "$pool"
	log_must tarn destroy -v "$pool/work"
	stdout_has "destroyed $pool/work (clone; destroy path: $expected)"
	log_must tarn pool wait -t free "$pool"
	log_must tarn pool sync "$pool"
	assert_eq "$(tarn pool get -H -p -o value freeing "$pool")" "0" "freeing after the destroy"
	local after
	after=$(tarn pool list -H -p -o alloc "$pool")
	[ "$after" -le $((before + (1 << 20))) ] || log_fail "clone destroy left space: $before -> $after"
	verify_pool "$pool"
}

default_setup
# Enabled, not active, until a clone keeps a livelist (pool_upgrade/features_get).
log_must tarn pool get -H -o value feature@livelist "$TESTPOOL"
stdout_has "enabled"
run_case "$TESTPOOL" livelist

create_pool nolive -o feature@livelist=disabled "$(vdev nolive)"
log_must tarn pool get -H -o value feature@livelist nolive
stdout_has "disabled"
run_case nolive traversal
log_pass
