#!/usr/bin/env bash
# Benchmark of big frees (issue 9): destroy a file system of ~1 million 4 KiB blocks, and delete a
# 16 GiB file, through a real daemon and FUSE mount. Prints, for each: how long the command took,
# the longest txg sync seen meanwhile (from `tarn stat txgs`, when the build has it), the daemon's
# peak resident memory while it ran (sampled every 100 ms) and the time until the freed space is
# back (`freeing` 0 and allocation settled). Run it with an old build for the "before" figures:
#   bash scripts/bench-destroy.sh [TARN_BINARY] [DIR] [BLOCKS_GIB] [FILE_GIB]
# It is a benchmark, not a test: it asserts nothing. Needs root and /dev/fuse.
set -euo pipefail
tarn=$(realpath "${1:-target/release/tarn}")
dir=${2:-/var/tmp/tarn-bench-destroy}
small_gib=${3:-4}
big_gib=${4:-16}
mkdir -p "$dir"
dir=$(realpath "$dir")
export TARN_SOCKET=$dir/sock
pool=bd
cleanup() {
    "$tarn" pool destroy -f "$pool" >/dev/null 2>&1 || true
    rm -f "$dir/v0.img"
}
trap cleanup EXIT
cleanup
"$tarn" pool create -s $((small_gib + big_gib + 8))G -O compression=off -m "$dir/mnt" "$pool" "$dir/v0.img"
pid=$(cat "$TARN_SOCKET.pid")
has_stat=0
"$tarn" stat -H -p txgs "$pool" >/dev/null 2>&1 && has_stat=1

allocated() { "$tarn" pool list -H -p -o alloc "$pool"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
# The longest sync (stime) among committed txgs after $1.
longest_txg_ms() {
    if [ "$has_stat" = 1 ]; then
        "$tarn" stat -H -p txgs "$pool" |
            awk -v after="$1" '$1 > after && $3 == "C" && $12 > max {max = $12} END {printf "%d", max / 1000000}'
    else
        echo "-"
    fi
}
newest_txg() {
    if [ "$has_stat" = 1 ]; then
        "$tarn" stat -H -p txgs "$pool" | awk '$3 == "C" && $1 > max {max = $1} END {print max + 0}'
    else
        echo 0
    fi
}

# Run "$@" while sampling the daemon's RSS and the txg history; then wait for the space to
# come back. Prints one line of figures.
measure() {
    local label=$1
    shift
    local before_alloc peak=0 longest=0 started finished settled
    before_alloc=$(allocated)
    local first_txg
    first_txg=$(newest_txg)
    started=$(date +%s.%N)
    "$@" &
    local command=$!
    local done_at=""
    local last_alloc="" stable=0
    while :; do
        local rss
        rss=$(rss_kib)
        [ "$rss" -gt "$peak" ] && peak=$rss
        local txg
        txg=$(longest_txg_ms "$first_txg")
        if [ "$txg" != "-" ] && [ "$txg" -gt "$longest" ]; then longest=$txg; fi
        if [ -z "$done_at" ] && ! kill -0 "$command" 2>/dev/null; then
            wait "$command"
            done_at=$(date +%s.%N)
        fi
        if [ -n "$done_at" ]; then
            local now_alloc freeing=0
            now_alloc=$(allocated)
            freeing=$("$tarn" pool get -H -p -o value freeing "$pool" 2>/dev/null || echo 0)
            if [ "$now_alloc" = "$last_alloc" ] && [ "$freeing" = 0 ]; then
                stable=$((stable + 1))
            else
                stable=0
            fi
            last_alloc=$now_alloc
            # Settled: freeing 0 and the allocation unchanged for 3 s.
            [ "$stable" -ge 30 ] && break
        fi
        sleep 0.1
    done
    settled=$(date +%s.%N)
    [ "$has_stat" = 1 ] || longest="-"
    printf '%-28s command %7.1f s   longest txg %6s ms   daemon peak RSS %7d MiB   space back after %7.1f s   freed %d MiB\n' \
        "$label" "$(echo "$done_at - $started" | bc)" "$longest" $((peak / 1024)) \
        "$(echo "$settled - 3 - $started" | bc)" $(((before_alloc - last_alloc) >> 20))
}

echo "== filling: a file system of 4 KiB records ($small_gib GiB) and a ${big_gib} GiB file"
"$tarn" create -o recordsize=4K -o compression=off "$pool/small"
dd if=/dev/zero of="$dir/mnt/small/f" bs=1M count=$((small_gib * 1024)) status=none
dd if=/dev/zero of="$dir/mnt/big" bs=1M count=$((big_gib * 1024)) status=none
"$tarn" pool sync "$pool"
sleep 6
echo "daemon RSS after filling: $(($(rss_kib) / 1024)) MiB; allocated $(($(allocated) >> 20)) MiB"

measure "destroy $small_gib GiB of 4K blocks" "$tarn" destroy "$pool/small"
measure "rm ${big_gib} GiB file" rm "$dir/mnt/big"
