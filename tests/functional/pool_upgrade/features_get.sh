#!/usr/bin/env bash
# pool get feature@* and feature@NAME: every known feature with its state, disabled (not
# enabled at create), enabled (refcount 0) or active (in use); livelist goes active with a
# clone and back to enabled once the clone is destroyed and its livelist freed; pool get all
# lists the features last; setting a feature to anything but enabled, or an unknown feature,
# is refused.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "pool get feature@*: disabled, enabled, active, and livelist following its clones"
trap destroy_all_pools EXIT

create_pool "$TESTPOOL" -o feature@stalled_frees=disabled "$(vdev "$TESTPOOL")"
log_must tarn pool get -H -o property,value,source 'feature@*' "$TESTPOOL"
assert_eq "$(last_stdout)" "$(printf '%s\n' \
	"feature@embedded_data	active	local" \
	"feature@livelist	enabled	local" \
	"feature@log_spacemap	active	local" \
	"feature@stalled_frees	disabled	default" \
	"feature@scan_catch_up	enabled	local" \
	"feature@replay_sequence	active	local" \
	"feature@deadlist_totals	active	local" \
	"feature@space_limits	enabled	local" \
	"feature@user_accounting	active	local" \
	"feature@user_holds	enabled	local" \
	"feature@user_properties	enabled	local" \
	"feature@delegation	enabled	local" \
	"feature@received_properties	enabled	local" \
	"feature@raidz	enabled	local" \
	"feature@raidz_expansion	enabled	local")" "feature@* of a new pool"

# pool get all: the features come last.
log_must tarn pool get -H -o property all "$TESTPOOL"
assert_eq "$(tail -n 15 "$LAST_STDOUT" | grep -c '^feature@')" "15" "features last in pool get all"

# livelist: active while a clone keeps one, enabled again once it is destroyed and freed.
log_must tarn create "$TESTPOOL/fs"
log_must sh -c "head -c 1000000 /dev/urandom > '$ALTROOT/$TESTPOOL/fs/f'"
log_must tarn snapshot "$TESTPOOL/fs@origin"
log_must tarn clone "$TESTPOOL/fs@origin" "$TESTPOOL/clone"
log_must tarn pool get -H -o value feature@livelist "$TESTPOOL"
assert_eq "$(last_stdout)" "active" "feature@livelist with a clone"
log_must tarn destroy "$TESTPOOL/clone"
log_must tarn pool wait -t free "$TESTPOOL"
log_must tarn pool sync "$TESTPOOL"
log_must tarn pool get -H -o value feature@livelist "$TESTPOOL"
assert_eq "$(last_stdout)" "enabled" "feature@livelist after the clone's destroy"

# The state survives export and import.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
log_must tarn pool get -H -o value feature@livelist,feature@stalled_frees "$TESTPOOL"
assert_eq "$(last_stdout)" "$(printf 'enabled\ndisabled')" "states after import"

log_mustnot_msg "can only be set to 'enabled'" tarn pool set feature@livelist=active "$TESTPOOL"
log_mustnot_msg "unknown feature \"nonsense\"" tarn pool set feature@nonsense=enabled "$TESTPOOL"
log_mustnot_msg "no pool property" tarn pool get feature@nonsense "$TESTPOOL"
log_pass
