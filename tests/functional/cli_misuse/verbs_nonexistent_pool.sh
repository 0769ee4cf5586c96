#!/usr/bin/env bash
# Every verb that takes a pool (or dataset) name, given one that does not exist, fails with a
# message naming it, and changes nothing; the same with the daemon not running.
. "$STF_SUITE/include/libtest.sh"
log_assert "verbs on a non-existent pool fail naming the pool"
trap destroy_all_pools EXIT

default_setup
pools_before=$(pool_names)
attempt_all() {
	log_mustnot_msg nosuchpool tarn pool export nosuchpool
	log_mustnot_msg nosuchpool tarn pool export -f nosuchpool
	log_mustnot_msg nosuchpool tarn pool destroy nosuchpool
	log_mustnot_msg nosuchpool tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" nosuchpool
	log_mustnot_msg nosuchpool tarn pool list nosuchpool
	log_mustnot_msg nosuchpool tarn pool status nosuchpool
	log_mustnot_msg nosuchpool tarn pool sync nosuchpool
	log_mustnot_msg nosuchpool tarn check nosuchpool
	log_mustnot_msg nosuchpool tarn check -d "$VDEV_DIR" nosuchpool
	log_mustnot_msg nosuchpool tarn debug metaslabs nosuchpool
	log_mustnot_msg nosuchpool tarn debug spacemap nosuchpool 0 0
	if tarn create --help >/dev/null 2>&1; then
		log_mustnot_msg nosuchpool tarn create nosuchpool/fs
		log_mustnot_msg nosuchpool tarn destroy nosuchpool/fs
		log_mustnot_msg nosuchpool tarn list nosuchpool
		log_mustnot_msg nosuchpool tarn get all nosuchpool
		log_mustnot_msg nosuchpool tarn set atime=off nosuchpool
		log_mustnot_msg nosuchpool tarn inherit atime nosuchpool/fs
		log_mustnot_msg nosuchpool tarn mount nosuchpool/fs
		log_mustnot_msg nosuchpool tarn unmount nosuchpool/fs
	fi
}
attempt_all
assert_eq "$(pool_names)" "$pools_before" "pools after the misuse"

log_must tarn pool export "$TESTPOOL"
log_must tarn daemon --stop
attempt_all
log_must tarn pool import -d "$VDEV_DIR"
stdout_has "pool: $TESTPOOL"
stdout_lacks "nosuchpool"
log_pass
