#!/usr/bin/env bash
# pool status of a mirror and a stripe together: each top-level vdev and its children.
. "$STF_SUITE/include/libtest.sh"
log_assert "pool status shows mirror children under mirror-N"

create_pool mixed mirror "$(vdev m-a)" "$(vdev m-b)" mirror "$(vdev m-c)" "$(vdev m-d)"
log_must tarn pool status mixed
stdout_has "mirror-0"
stdout_has "mirror-1"
for side in m-a m-b m-c m-d; do stdout_has "$(vdev "$side")"; done
# mirror-1's children come after it and after mirror-0's children.
order=$(grep -o -e 'mirror-[01]' -e 'm-[abcd]\.img' "$LAST_STDOUT" | tr '\n' ' ')
assert_eq "$order" "mirror-0 m-a.img m-b.img mirror-1 m-c.img m-d.img " "tree order"
log_must tarn pool destroy mixed
log_pass
