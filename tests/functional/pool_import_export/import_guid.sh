#!/usr/bin/env bash
# A pool imports by the numeric id the import listing shows.
. "$STF_SUITE/include/libtest.sh"
log_assert "import by guid"
trap destroy_all_pools EXIT

default_setup
echo "by guid" >"$ALTROOT/$TESTPOOL/file"
log_must tarn pool export "$TESTPOOL"
log_must tarn pool import -d "$VDEV_DIR"
guid=$(awk -v pool="$TESTPOOL" '$1 == "pool:" { name = $2 } $1 == "id:" && name == pool { print $2 }' "$LAST_STDOUT")
[[ $guid =~ ^[0-9]+$ ]] || log_fail "no numeric id for $TESTPOOL in the listing"
import_pool "$guid"
assert_eq "$(pool_names)" "$TESTPOOL" "pools after import by guid"
assert_eq "$(cat "$ALTROOT/$TESTPOOL/file")" "by guid" "file after import"
log_must tarn pool export "$TESTPOOL"
log_mustnot tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" 12345
assert_eq "$(pool_names)" "" "pools after import of an unknown guid"
log_pass
