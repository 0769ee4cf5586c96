#!/usr/bin/env bash
# pool list -H: no header, tab-separated; -o: exactly the fields asked, in that order.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool list -H and -o"

log_must tarn pool list -H
assert_eq "$(wc -l <"$LAST_STDOUT")" 1 "lines with -H"
assert_eq "$(awk -F'\t' '{ print NF }' "$LAST_STDOUT")" 7 "tab-separated fields"
log_must tarn pool list -H -o health,name
assert_eq "$(last_stdout)" "$(printf 'ONLINE\t%s' "$TESTPOOL")" "-o health,name"
log_must tarn pool list -o name
assert_eq "$(last_stdout | tr -s ' \n' ' ')" "NAME $TESTPOOL " "-o name with header"
log_mustnot_msg "bogus" tarn pool list -o name,bogus
log_mustnot_msg "nosuchpool" tarn pool list nosuchpool
log_pass
