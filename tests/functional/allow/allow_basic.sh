#!/usr/bin/env bash
# tarn allow / unallow as root (zfs allow): grants to users, groups and everyone, local (-l),
# descendent (-d) or both; `tarn allow FS` lists them as zfs allow does, for the file system
# and each ancestor with grants; unallow removes some or all of a grantee's; grants are kept
# in the pool (feature@delegation active, check clean) across export and import.
. "$STF_SUITE/include/libtest.sh"
. "$STF_SUITE/allow/users.shlib"
log_assert "tarn allow grants, lists and revokes delegated permissions, kept in the pool"
trap 'destroy_all_pools; remove_users' EXIT

make_users
default_setup
log_must tarn create "$TESTPOOL/a"
log_must tarn create "$TESTPOOL/a/b"
log_must tarn pool get -H -o value feature@delegation "$TESTPOOL"
assert_eq "$(last_stdout)" "enabled" "feature@delegation of a new pool"

# Nothing granted: nothing listed.
log_must tarn allow "$TESTPOOL/a"
assert_eq "$(last_stdout)" "" "grants of a new file system"

log_must tarn allow -u "$ALICE" create,snapshot "$TESTPOOL/a"
log_must tarn allow -l -u "$ALICE" destroy "$TESTPOOL/a"
log_must tarn allow -d -g "$STAFF" mount "$TESTPOOL/a"
log_must tarn allow -e send "$TESTPOOL"
log_must tarn allow -l -u "$BOB",root compression,userprop "$TESTPOOL/a"
header() { printf -- '---- Permissions on %s %s\n' "$1" "$(printf '%*s' $((70 - 21 - ${#1})) '' | tr ' ' -)"; }
log_must tarn allow "$TESTPOOL/a"
assert_eq "$(last_stdout)" "$(
	header "$TESTPOOL/a"
	printf 'Local permissions:\n\tuser root compression,userprop\n\tuser %s destroy\n\tuser %s compression,userprop\n' "$ALICE" "$BOB"
	printf 'Descendent permissions:\n\tgroup %s mount\n' "$STAFF"
	printf 'Local+Descendent permissions:\n\tuser %s create,snapshot\n' "$ALICE"
	header "$TESTPOOL"
	printf 'Local+Descendent permissions:\n\teveryone send'
)" "tarn allow $TESTPOOL/a"
# Every header line is 70 characters, as zfs's.
assert_eq "$(head -n 1 "$LAST_STDOUT" | tr -d '\n' | wc -c)" "70" "header width"

# A file system below lists its own (none) and its ancestors'.
log_must tarn allow "$TESTPOOL/a/b"
assert_eq "$(head -n 1 "$LAST_STDOUT")" "$(header "$TESTPOOL/a")" "first block of $TESTPOOL/a/b"

# Granting again adds; unallow of some permissions removes those; of none, all of them.
log_must tarn allow -u "$ALICE" rollback "$TESTPOOL/a"
log_must tarn allow "$TESTPOOL/a"
stdout_has "user $ALICE create,rollback,snapshot"
log_must tarn unallow -u "$ALICE" rollback,create "$TESTPOOL/a"
log_must tarn allow "$TESTPOOL/a"
stdout_has "user $ALICE snapshot"
stdout_lacks "rollback"
log_must tarn unallow -d -u "$ALICE" snapshot "$TESTPOOL/a"
log_must tarn allow "$TESTPOOL/a"
stdout_has "	user $ALICE destroy,snapshot"
log_must tarn unallow -u root "$TESTPOOL/a"
log_must tarn allow "$TESTPOOL/a"
stdout_lacks "user root"

# Kept in the pool: the feature is active, check accepts the keys, import brings them back.
log_must tarn pool get -H -o value feature@delegation "$TESTPOOL"
assert_eq "$(last_stdout)" "active" "feature@delegation after a grant"
log_must tarn allow "$TESTPOOL/a"
before=$(last_stdout)
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
log_must tarn allow "$TESTPOOL/a"
assert_eq "$(last_stdout)" "$before" "grants after export and import"
log_must tarn check "$TESTPOOL"

# A grant goes with its file system: renamed with it, gone with it.
log_must tarn rename "$TESTPOOL/a" "$TESTPOOL/c"
log_must tarn allow "$TESTPOOL/c"
stdout_has "user $ALICE destroy,snapshot"
log_must tarn destroy -r "$TESTPOOL/c"
log_must tarn create "$TESTPOOL/c"
log_must tarn allow "$TESTPOOL/c"
stdout_lacks "$ALICE"
log_pass
