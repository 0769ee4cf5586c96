#!/usr/bin/env bash
# stat vdev_queue POOL: one row per leaf and I/O class (seven classes), the queue counters
# that pool iostat prints; after a sync, the async write class has requests and queue time.
. "$STF_SUITE/include/libtest.sh"
log_assert "stat vdev_queue prints the vdev queues' counters per class"

echo "queue data" >"$ALTROOT/$TESTPOOL/queue-file"
log_must tarn pool sync "$TESTPOOL"
log_must tarn stat vdev_queue "$TESTPOOL"
header=$(head -1 "$LAST_STDOUT" | tr -s ' ' | sed 's/^ //')
assert_eq "$header" "VDEV CLASS PENDING ACTIVE REQUESTS BYTES QUEUE_WAIT DISK_WAIT QUEUE_NS DISK_NS IND_IOS AGG_IOS" "header"
log_must tarn stat vdev_queue -H -p "$TESTPOOL"
assert_eq "$(wc -l <"$LAST_STDOUT")" "7" "seven classes of one leaf"
awk -F'\t' '$2 == "async_write" && $5 > 0 && $9 > 0 { found = 1 } END { exit !found }' \
	"$LAST_STDOUT" || log_fail "no async write requests"
log_pass
