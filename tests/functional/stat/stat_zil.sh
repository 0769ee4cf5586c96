#!/usr/bin/env bash
# stat zil: the intent log's counters as OpenZFS's zil kstat names them; -p exactly as
# /proc/spl/kstat/zfs/zil prints them (kstat header, "name type data", "name 4 value" lines);
# creating files with fsync (namespace records) and renaming them counts commits,
# log blocks and namespace records; under logbias=throughput fsynced writes are counted as
# written in place (zil_itx_indirect_*); -j is one JSON object.
. "$STF_SUITE/include/libtest.sh"
log_assert "stat zil prints the intent log's counters, which fsyncs of new files move"

field() { awk -v name="$1" '$1 == name { print $3 }' "$LAST_STDOUT"; }

log_must tarn stat zil -p "$TESTPOOL"
head -1 "$LAST_STDOUT" | grep -Eq '^13 1 0x01 [0-9]+ ' || log_fail "no kstat header line"
sed -n 2p "$LAST_STDOUT" | tr -s ' ' | grep -qx 'name type data' || log_fail "no 'name type data' line"
tail -n +3 "$LAST_STDOUT" | awk 'NF != 3 || $2 != 4 || $3 !~ /^[0-9]+$/ { bad = 1 } END { exit bad }' ||
	log_fail "a field line is not 'name 4 value'"
for name in zil_commit_count zil_commit_writer_count zil_itx_count zil_itx_indirect_count \
	zil_itx_copied_count zil_itx_copied_bytes zil_itx_needcopy_count zil_itx_needcopy_bytes \
	zil_itx_metaslab_normal_count zil_itx_metaslab_normal_bytes zil_itx_namespace_count; do
	grep -q "^$name " "$LAST_STDOUT" || log_fail "field $name missing"
done
commits_before=$(field zil_commit_count)
namespace_before=$(field zil_itx_namespace_count)
blocks_before=$(field zil_itx_metaslab_normal_count)

dir="$ALTROOT/$TESTPOOL/zil-dir"
log_must mkdir -p "$dir"
for i in $(seq 1 20); do
	log_must dd if=/dev/zero of="$dir/new-$i" bs=4k count=1 conv=fsync status=none
	log_must mv "$dir/new-$i" "$dir/moved-$i"
done
log_must sync "$dir/moved-20"

log_must tarn stat zil -p "$TESTPOOL"
[ "$(field zil_commit_count)" -ge $((commits_before + 20)) ] ||
	log_fail "20 fsyncs counted $(($(field zil_commit_count) - commits_before)) commit requests"
[ "$(field zil_itx_namespace_count)" -ge $((namespace_before + 20)) ] ||
	log_fail "20 creates committed $(($(field zil_itx_namespace_count) - namespace_before)) namespace records"
[ "$(field zil_itx_metaslab_normal_count)" -gt "$blocks_before" ] || log_fail "no log block written"
[ "$(field zil_itx_needcopy_bytes)" -ge $((20 * 4096)) ] || log_fail "the 4 KiB writes are not counted"
[ "$(field zil_itx_indirect_count)" -eq 0 ] || log_fail "4 KiB writes were written in place under logbias=latency"

# logbias=throughput: every fsynced write is written in place and only its pointer logged
# (WR_INDIRECT); a bad value is refused.
indirect_before=$(field zil_itx_indirect_count)
log_mustnot tarn set logbias=fast "$TESTPOOL"
log_must tarn set logbias=throughput "$TESTPOOL"
log_must tarn get -H -o value logbias "$TESTPOOL"
grep -qx throughput "$LAST_STDOUT" || log_fail "logbias is not throughput"
for i in $(seq 1 10); do
	log_must dd if=/dev/urandom of="$dir/in-place" bs=16k count=1 seek="$i" conv=fsync,notrunc status=none
done
log_must tarn stat zil -p "$TESTPOOL"
[ "$(field zil_itx_indirect_count)" -gt "$indirect_before" ] ||
	log_fail "no write was written in place under logbias=throughput"
[ "$(field zil_itx_indirect_bytes)" -ge 16384 ] || log_fail "no indirect bytes counted"
log_must cmp <(dd if="$dir/in-place" bs=16k skip=1 count=10 status=none | wc -c) <(echo $((10 * 16384)))
log_must tarn set logbias=latency "$TESTPOOL"

log_must tarn stat zil "$TESTPOOL"
head -1 "$LAST_STDOUT" | tr -s ' ' | sed 's/^ //' | grep -qx 'NAME VALUE' || log_fail "no NAME VALUE header"
log_must tarn stat zil -j "$TESTPOOL"
grep -q '"zil"' "$LAST_STDOUT" || log_fail "no zil object in -j output"
grep -q '"zil_commit_count"' "$LAST_STDOUT" || log_fail "no zil_commit_count in -j output"

log_mustnot tarn stat zil no-such-pool
log_pass
