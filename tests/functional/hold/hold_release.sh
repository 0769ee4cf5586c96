#!/usr/bin/env bash
# hold / holds / release: a hold (with -r, on the snapshot of that name in every descendant)
# refuses every destroy that would free the snapshot: destroy FS@SNAP, a range, destroy -r of
# its file system, rollback -r past it; holds lists NAME TAG TIMESTAMP (-H tabs, -p seconds);
# holds survive export and import; a tag put twice or released when absent is refused and
# changes nothing; released, the snapshot is destroyed as usual; check is clean.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "user holds keep snapshots until released, across export and import"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs
log_must tarn create "$fs"
log_must tarn create "$fs/child"
echo data >"$ALTROOT/$fs/file"
log_must tarn snapshot -r "$fs@s1"
log_must tarn snapshot -r "$fs@s2"
assert_eq "$(tarn pool get -H -o value feature@user_holds "$TESTPOOL")" enabled "feature before any hold"

before=$(date +%s)
log_must tarn hold -r keep "$fs@s1"
after=$(date +%s)
assert_eq "$(tarn pool get -H -o value feature@user_holds "$TESTPOOL")" active "feature with holds"
log_must tarn holds "$fs@s1"
stdout_has "NAME"
stdout_has "TIMESTAMP"
log_must tarn holds -r -H -p "$fs@s1"
assert_eq "$(last_stdout | cut -f1,2 | tr '\t' ' ')" "$fs@s1 keep
$fs/child@s1 keep" "holds -r -H"
stamp=$(last_stdout | head -n 1 | cut -f3)
[ "$stamp" -ge "$before" ] && [ "$stamp" -le "$after" ] || log_fail "hold time $stamp not in [$before, $after]"
log_must tarn holds -H "$fs@s2"
assert_eq "$(last_stdout)" "" "an unheld snapshot has no holds"
assert_eq "$(get_prop userrefs "$fs@s1")" 1 "userrefs"
assert_eq "$(get_prop userrefs "$fs@s2")" 0 "userrefs of an unheld snapshot"

# Every destroy that would free a held snapshot is refused, and destroys nothing.
log_mustnot_msg "is held (keep)" tarn destroy "$fs@s1"
log_mustnot_msg "is held" tarn destroy "$fs@s1%s2"
log_mustnot_msg "is held" tarn destroy -r "$fs@s1"
log_mustnot_msg "is held" tarn destroy -r "$fs"
log_must tarn hold later "$fs/child@s2"
log_mustnot_msg "is held" tarn rollback -r "$fs/child@s1"
log_must tarn release later "$fs/child@s2"
log_must tarn list -H -t snapshot -o name -r "$fs"
assert_eq "$(last_stdout | wc -l)" 4 "snapshots after refused destroys"

# A tag put twice: refused for every snapshot named, none gets it.
log_mustnot_msg "already exists" tarn hold keep "$fs@s2" "$fs@s1"
log_must tarn holds -H "$fs@s2"
assert_eq "$(last_stdout)" "" "a refused hold holds nothing"
log_must tarn hold other "$fs@s1"
assert_eq "$(get_prop userrefs "$fs@s1")" 2 "two tags"

# Export and import: the holds are on disk.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
log_must tarn holds -H "$fs@s1"
assert_eq "$(last_stdout | cut -f2 | tr '\n' ' ')" "keep other " "tags after import"
log_mustnot_msg "is held" tarn destroy "$fs@s1"

# A release of a tag a snapshot lacks is refused whole; then each goes.
log_mustnot_msg "no such tag" tarn release -r other "$fs@s1"
assert_eq "$(get_prop userrefs "$fs@s1")" 2 "a refused release releases nothing"
log_must tarn release -r keep "$fs@s1"
log_must tarn release other "$fs@s1"
assert_eq "$(tarn pool get -H -o value feature@user_holds "$TESTPOOL")" enabled "feature after the last release"
log_must tarn destroy -r "$fs@s1"
stdout_has "destroyed $fs/child@s1"
verify_pool "$TESTPOOL"
log_pass
