#!/usr/bin/env bash
# tarn list: header and columns, -H, -p, -o, -r, a named dataset, -j with the documented shape,
# and used space that grows with data.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
log_assert "tarn list output forms"
trap destroy_all_pools EXIT

default_setup
log_must tarn create -p "$TESTPOOL/a/b"
log_must tarn list
assert_eq "$(head -n 1 "$LAST_STDOUT" | tr -s ' ')" "NAME USED AVAIL REFER MOUNTPOINT" "header"
log_must tarn list -H -p -o name,used,avail,refer,mountpoint -r "$TESTPOOL"
assert_eq "$(cut -f1 "$LAST_STDOUT" | tr '\n' ' ')" "$TESTPOOL $TESTPOOL/a $TESTPOOL/a/b " "names"
while IFS=$'\t' read -r name used avail refer mountpoint; do
	for value in "$used" "$avail" "$refer"; do
		[[ $value =~ ^[0-9]+$ ]] || log_fail "$name: '$value' is not an exact number"
	done
	[ "$used" -ge "$refer" ] || log_fail "$name: used $used < refer $refer"
done <"$LAST_STDOUT"
log_must tarn list -H -o name "$TESTPOOL/a"
assert_eq "$(last_stdout)" "$TESTPOOL/a" "list of one dataset"
log_mustnot_msg "bogus" tarn list -o name,bogus
# The xattr and snapshot-directory properties are list columns too (as zfs list -o takes any).
log_must tarn list -H -o name,snapdir,xattr,acltype "$TESTPOOL"
assert_eq "$(cat "$LAST_STDOUT")" "$(printf '%s\thidden\tsa\toff' "$TESTPOOL")" "list -o snapdir,xattr,acltype"

used_before=$(tarn list -H -p -o used "$TESTPOOL/a")
write_marked_file "$ALTROOT/$TESTPOOL/a/b/data" 1024
log_must tarn pool sync "$TESTPOOL"
used_after=$(tarn list -H -p -o used "$TESTPOOL/a")
[ "$used_after" -ge $((used_before + 4000000)) ] || log_fail "used of $TESTPOOL/a went from $used_before to $used_after after 4 MiB in a child"

if command -v python3 >/dev/null; then
	# zfs list -j: datasets keyed by name, each with its identity and the default columns as
	# value/source pairs under zfs's names; -p makes sizes integers.
	log_must tarn list -j -p -r "$TESTPOOL"
	python3 -c '
import json, sys
document = json.load(sys.stdin)
assert document["output_version"]["command"] == "tarn list", document
sets = document["datasets"]
assert sorted(sets) == [sys.argv[1], sys.argv[1] + "/a", sys.argv[1] + "/a/b"], sets
for name, d in sets.items():
    assert d["name"] == name and d["type"] == "FILESYSTEM" and d["pool"] == sys.argv[1], d
    assert isinstance(d["createtxg"], int), d
    props = d["properties"]
    assert sorted(props) == ["available", "mountpoint", "referenced", "used"], props
    for key in ("used", "available", "referenced"):
        assert isinstance(props[key]["value"], int), props
        assert props[key]["source"] == {"type": "NONE", "data": "-"}, props
    assert props["mountpoint"]["source"]["type"] == "DEFAULT", props
' "$TESTPOOL" <"$LAST_STDOUT" || log_fail "list -j does not have the documented shape"
fi
log_pass
