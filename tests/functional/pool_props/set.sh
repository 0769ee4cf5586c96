#!/usr/bin/env bash
# pool set: feature@NAME=enabled is accepted (and idempotent); the properties fixed for an
# import (readonly, altroot) and the read-only figures are refused with a message
# saying when they can be set; nothing changes.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool set feature@NAME=enabled; import-time and read-only properties refused"

log_must tarn pool set feature@embedded_data=enabled "$TESTPOOL"
log_must tarn pool get -H -o value,source feature@embedded_data "$TESTPOOL"
case "$(last_stdout)" in
"$(printf 'enabled\tlocal')" | "$(printf 'active\tlocal')") ;;
*) log_fail "feature@embedded_data after set: $(last_stdout)" ;;
esac
log_mustnot_msg "only be set to 'enabled'" tarn pool set feature@embedded_data=disabled "$TESTPOOL"
log_mustnot_msg "unknown feature" tarn pool set feature@bogus=enabled "$TESTPOOL"
log_mustnot_msg "can only be set at import time" tarn pool set readonly=on "$TESTPOOL"
log_mustnot_msg "can only be set during pool creation or import" tarn pool set altroot=/mnt "$TESTPOOL"
log_mustnot_msg "read-only" tarn pool set size=1G "$TESTPOOL"
log_mustnot_msg "PROP=VALUE" tarn pool set readonly "$TESTPOOL"
log_must tarn pool get -H -o value readonly,altroot "$TESTPOOL"
assert_eq "$(last_stdout)" "$(printf 'off\n%s' "$ALTROOT")" "nothing changed"
log_pass
