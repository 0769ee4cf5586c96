#!/usr/bin/env bash
# primarycache: what reads leave in the ARC. A cold read of an 8 MiB file with
# primarycache=metadata leaves no data in the ARC, with all it does; a child inherits the
# setting; bad values are refused; the setting survives export and import.
. "$STF_SUITE/include/libtest.sh"
log_assert "primarycache=metadata keeps file data out of the ARC"

arc_field() {
	tarn stat arc -p "$TESTPOOL" | awk -v name="$1" '$1 == name { print $3 }'
}
cold_read() {
	log_must tarn pool export "$TESTPOOL"
	log_must tarn pool import -d "$VDEV_DIR" -R "$ALTROOT" "$TESTPOOL"
	log_must cat "$ALTROOT/$TESTPOOL/pc/file" >/dev/null
}

log_must tarn create "$TESTPOOL/pc"
log_must dd if=/dev/urandom of="$ALTROOT/$TESTPOOL/pc/file" bs=128k count=64 status=none
log_mustnot tarn set primarycache=some "$TESTPOOL/pc"
log_mustnot tarn set secondarycache=data "$TESTPOOL/pc"

log_must tarn set primarycache=metadata "$TESTPOOL/pc"
log_must tarn set secondarycache=none "$TESTPOOL/pc"
cold_read
log_must tarn get -H -o value primarycache,secondarycache "$TESTPOOL/pc"
[ "$(tr '\n' ' ' <"$LAST_STDOUT")" = "metadata none " ] || log_fail "the settings did not survive import: $(cat "$LAST_STDOUT")"
kept=$(arc_field data_size)
[ "$kept" -lt $((1 << 20)) ] || log_fail "primarycache=metadata kept $kept bytes of data"

log_must tarn create "$TESTPOOL/pc/child"
log_must tarn get -H -o value,source primarycache "$TESTPOOL/pc/child"
grep -q "^metadata" "$LAST_STDOUT" || log_fail "the child does not inherit primarycache"

log_must tarn set primarycache=all "$TESTPOOL/pc"
cold_read
kept=$(arc_field data_size)
[ "$kept" -ge $((4 << 20)) ] || log_fail "primarycache=all kept only $kept bytes of data"
log_must tarn destroy -r "$TESTPOOL/pc"
log_pass
