#!/usr/bin/env bash
# tarn allow / unallow refuse what they cannot do, with a message and nothing changed: an
# unknown permission, `allow` itself (only root grants in this version), no grantee, no
# permission, an unknown user or group, a snapshot, a file system that does not exist; and a
# user other than root may list grants but not grant or revoke.
. "$STF_SUITE/include/libtest.sh"
. "$STF_SUITE/allow/users.shlib"
log_assert "tarn allow and unallow refuse bad input and users other than root"
trap 'destroy_all_pools; remove_users' EXIT

make_users
default_setup
log_must tarn create "$TESTPOOL/a"
log_must tarn snapshot "$TESTPOOL/a@s"

log_mustnot_msg "unknown permission \"frobnicate\"" tarn allow -u "$ALICE" frobnicate "$TESTPOOL/a"
log_mustnot_msg "unknown permission \"used\"" tarn allow -u "$ALICE" snapshot,used "$TESTPOOL/a"
log_mustnot_msg "only root grants" tarn allow -u "$ALICE" allow "$TESTPOOL/a"
log_mustnot_msg "name who" tarn allow snapshot "$TESTPOOL/a"
log_mustnot_msg "name who" tarn unallow "$TESTPOOL/a"
log_mustnot_msg "no permission named" tarn allow -u "$ALICE" "$TESTPOOL/a"
log_mustnot_msg "permission list is empty" tarn allow -u "$ALICE" , "$TESTPOOL/a"
log_mustnot_msg "no such user 'no-such-user-here'" tarn allow -u no-such-user-here snapshot "$TESTPOOL/a"
log_mustnot_msg "no such group" tarn allow -g no-such-group-here snapshot "$TESTPOOL/a"
log_mustnot_msg "granted on file systems" tarn allow -u "$ALICE" hold "$TESTPOOL/a@s"
log_mustnot_msg "does not exist" tarn allow -u "$ALICE" snapshot "$TESTPOOL/nope"
log_mustnot tarn allow -u "$ALICE" snapshot
log_must tarn allow "$TESTPOOL/a"
assert_eq "$(last_stdout)" "" "grants after the refusals"
log_must tarn pool get -H -o value feature@delegation "$TESTPOOL"
assert_eq "$(last_stdout)" "enabled" "feature@delegation after the refusals"

# Without the feature, a grant is refused with the way to enable it.
create_pool "$TESTPOOL2" -o feature@delegation=disabled "$(vdev "$TESTPOOL2")"
log_mustnot_msg "tarn pool set feature@delegation=enabled $TESTPOOL2" \
	tarn allow -u "$ALICE" snapshot "$TESTPOOL2"
log_must tarn pool destroy "$TESTPOOL2"

# Users other than root list, but do not grant or revoke (not even to themselves).
log_must tarn allow -u "$ALICE" snapshot "$TESTPOOL/a"
log_must as_user "$ALICE" allow "$TESTPOOL/a"
stdout_has "user $ALICE snapshot"
log_mustnot_msg "only root may run allow" as_user "$ALICE" allow -u "$ALICE" destroy "$TESTPOOL/a"
log_mustnot_msg "only root may run unallow" as_user "$ALICE" unallow -u "$ALICE" "$TESTPOOL/a"
log_must tarn allow "$TESTPOOL/a"
stdout_has "user $ALICE snapshot"
stdout_lacks "destroy"
log_pass
