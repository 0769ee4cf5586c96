#!/usr/bin/env bash
# pool iostat POOL INTERVAL COUNT prints COUNT reports (the header once); -y skips the report
# since import; bad intervals and counts, and unknown pools, are clear errors.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool iostat repeats, skips the first report with -y, and refuses bad input"

log_must tarn pool iostat -H "$TESTPOOL" 0.2 3
assert_eq "$(wc -l <"$LAST_STDOUT")" "3" "three reports"
log_must tarn pool iostat "$TESTPOOL" 0.2 2
assert_eq "$(grep -c '^pool ' "$LAST_STDOUT")" "1" "one header"
log_must tarn pool iostat -y -H "$TESTPOOL" 0.2 2
assert_eq "$(wc -l <"$LAST_STDOUT")" "2" "two reports after the skipped one"

log_mustnot tarn pool iostat "$TESTPOOL" 0
stderr_has "invalid interval"
log_mustnot tarn pool iostat "$TESTPOOL" 1 0
stderr_has "invalid count"
log_mustnot tarn pool iostat "$TESTPOOL" soon
stderr_has "invalid interval"
log_mustnot tarn pool iostat nosuchpool
stderr_has "not imported"
log_pass
