#!/usr/bin/env bash
# Received properties: a stream's properties (send -p, -R) are received values, shown with the
# source "received"; a local setting overrides one; inherit masks it and inherit -S brings it
# back; a later receive with properties replaces the received set; receive -o sets local
# values and -x keeps the stream's value out; a received value is sent on with send -p; the
# keys pass check and the feature goes active; a pool without the feature receives local values.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_snapshot_verbs
log_assert "received properties: source, override, inherit -S, replacement, -o and -x"
trap destroy_all_pools EXIT

default_setup
src=$TESTPOOL/src
assert_eq "$(tarn pool get -H -o value feature@received_properties "$TESTPOOL")" enabled "feature before"
log_must tarn create -o compression=zstd -o atime=off -o com.example:tag=one "$src"
log_must tarn snapshot "$src@1"
tarn send -p "$src@1" | tarn receive "$TESTPOOL/dst" || log_fail "send -p | receive"
assert_eq "$(tarn pool get -H -o value feature@received_properties "$TESTPOOL")" active "feature after"
assert_prop "$TESTPOOL/dst" compression zstd received
assert_prop "$TESTPOOL/dst" atime off received
assert_prop "$TESTPOOL/dst" com.example:tag one received
log_must tarn create "$TESTPOOL/dst/child"
assert_prop "$TESTPOOL/dst/child" compression zstd "inherited from $TESTPOOL/dst"
log_must tarn get -H -o property -s received all "$TESTPOOL/dst"
assert_eq "$(sort "$LAST_STDOUT" | tr '\n' ' ')" "atime com.example:tag compression " "get -s received"

# A local setting overrides the received value; inherit masks it; inherit -S brings it back.
log_must tarn set compression=lz4 com.example:tag=mine "$TESTPOOL/dst"
assert_prop "$TESTPOOL/dst" compression lz4 local
assert_prop "$TESTPOOL/dst" com.example:tag mine local
log_must tarn inherit compression "$TESTPOOL/dst"
log_must tarn inherit com.example:tag "$TESTPOOL/dst"
assert_prop "$TESTPOOL/dst" compression lz4 default
assert_prop "$TESTPOOL/dst" com.example:tag - -
log_must tarn inherit -S compression "$TESTPOOL/dst"
log_must tarn inherit -S com.example:tag "$TESTPOOL/dst"
assert_prop "$TESTPOOL/dst" compression zstd received
assert_prop "$TESTPOOL/dst" com.example:tag one received
# inherit -S of a property with no received value inherits as plain inherit does.
log_must tarn set checksum=blake3 "$TESTPOOL/dst"
log_must tarn inherit -S checksum "$TESTPOOL/dst"
assert_prop "$TESTPOOL/dst" checksum fletcher4 default
# Kept across export and import.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
assert_prop "$TESTPOOL/dst" atime off received

# Sent on: a received value travels with send -p as a local one would.
tarn send -p "$TESTPOOL/dst@1" | tarn receive "$TESTPOOL/again" || log_fail "send -p of received values"
assert_prop "$TESTPOOL/again" compression zstd received
assert_prop "$TESTPOOL/again" com.example:tag one received

# A later receive with properties replaces the received set: what the source no longer sets
# goes, what it changed changes; a local setting made meanwhile stays in effect.
log_must tarn set atime=on "$TESTPOOL/dst"
log_must tarn inherit com.example:tag "$src"
log_must tarn set compression=lz4 "$src"
log_must tarn snapshot "$src@2"
tarn send -p -i "$src@1" "$src@2" | tarn receive -F "$TESTPOOL/dst" || log_fail "incremental send -p | receive"
assert_prop "$TESTPOOL/dst" com.example:tag - -
assert_prop "$TESTPOOL/dst" compression lz4 received
assert_prop "$TESTPOOL/dst" atime on local

# receive -o sets a local value, -x keeps the stream's out.
tarn send -p "$src@2" | tarn receive -o atime=on -x compression "$TESTPOOL/opts" || log_fail "receive -o -x"
assert_prop "$TESTPOOL/opts" atime on local
assert_prop "$TESTPOOL/opts" compression lz4 default
verify_pool "$TESTPOOL"

# A pool without the feature receives local values, as before it.
create_pool old -o feature@received_properties=disabled "$(vdev old)"
tarn send -p "$src@2" | tarn receive old/dst || log_fail "receive into a pool without the feature"
assert_prop old/dst compression lz4 local
assert_prop old/dst atime off local
assert_eq "$(tarn pool get -H -o value feature@received_properties old)" disabled "feature on the old pool"
verify_pool old
log_pass
