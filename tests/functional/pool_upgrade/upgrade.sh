#!/usr/bin/env bash
# pool upgrade: without a pool it lists the imported pools with supported features not
# enabled (and says so when there are none); with a pool it enables them all, printing each,
# and says that log_spacemap can only be chosen at create; a second upgrade has nothing to do;
# -a upgrades every imported pool; a pool that is not imported is an error.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool upgrade [-a | POOL] enables every supported feature but the create-only ones"
trap destroy_all_pools EXIT

create_pool "$TESTPOOL" -o feature@embedded_data=disabled -o feature@livelist=disabled \
	-o feature@log_spacemap=disabled "$(vdev "$TESTPOOL")"
create_pool "$TESTPOOL-b" -o feature@scan_catch_up=disabled "$(vdev "$TESTPOOL-b")"
create_pool "$TESTPOOL-c" "$(vdev "$TESTPOOL-c")"

log_must tarn pool upgrade
stdout_has "Some supported features are not enabled on the following pools."
awk '$1 == "'"$TESTPOOL"'" { found = 1 } END { exit !found }' "$LAST_STDOUT" ||
	log_fail "pool upgrade does not list $TESTPOOL"
stdout_has "      embedded_data"
stdout_has "      livelist"
stdout_has "      scan_catch_up"
stdout_lacks "log_spacemap"
awk '$1 == "'"$TESTPOOL-c"'" { found = 1 } END { exit !found }' "$LAST_STDOUT" &&
	log_fail "pool upgrade lists $TESTPOOL-c, which has every feature"

log_must tarn pool upgrade "$TESTPOOL"
assert_eq "$(last_stdout)" "$(printf '%s\n' \
	"Enabled the following features on '$TESTPOOL':" \
	"  embedded_data" \
	"  livelist" \
	"feature@log_spacemap not enabled on '$TESTPOOL': it can only be chosen when a pool is created")" \
	"pool upgrade $TESTPOOL"
log_must tarn pool get -H -o value feature@embedded_data,feature@livelist,feature@log_spacemap "$TESTPOOL"
assert_eq "$(last_stdout)" "$(printf 'active\nenabled\ndisabled')" "states after upgrade"
log_must tarn pool upgrade "$TESTPOOL"
stdout_has "Pool '$TESTPOOL' already has all supported features enabled."

log_must tarn pool upgrade -a
stdout_has "Enabled the following features on '$TESTPOOL-b':"
stdout_has "  scan_catch_up"
stdout_has "Pool '$TESTPOOL-c' already has all supported features enabled."
log_must tarn pool upgrade
assert_eq "$(last_stdout)" "All imported pools have every supported feature enabled." "listing after -a"

# The upgrade is on disk: it survives export and import.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
log_must tarn pool get -H -o value feature@livelist "$TESTPOOL"
assert_eq "$(last_stdout)" "enabled" "feature@livelist after import"

log_mustnot_msg "no such pool" tarn pool upgrade nosuchpool
log_mustnot_msg "cannot be used with" tarn pool upgrade -a "$TESTPOOL"
log_pass
