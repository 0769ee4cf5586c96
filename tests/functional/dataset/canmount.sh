#!/usr/bin/env bash
# canmount=off never mounts; canmount=noauto mounts only when asked by name, not by create,
# mount -a or import.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "canmount off and noauto"
trap destroy_all_pools EXIT

default_setup
log_must tarn create -o canmount=off "$TESTPOOL/off"
assert_unmounted "$TESTPOOL/off"
log_mustnot tarn mount "$TESTPOOL/off"
assert_unmounted "$TESTPOOL/off"
log_must tarn create -o canmount=noauto "$TESTPOOL/noauto"
assert_unmounted "$TESTPOOL/noauto"
log_must tarn mount -a
assert_unmounted "$TESTPOOL/off"
assert_unmounted "$TESTPOOL/noauto"
log_must tarn mount "$TESTPOOL/noauto"
assert_mounted "$TESTPOOL/noauto" "$ALTROOT/$TESTPOOL/noauto"
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_unmounted "$TESTPOOL/off"
assert_unmounted "$TESTPOOL/noauto"
log_pass
