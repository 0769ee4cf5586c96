#!/usr/bin/env bash
# Benchmark of big frees: destroy a file system of ~1 million 4 KiB blocks, and delete a
# 16 GiB file, through a real daemon and FUSE mount. Prints, for each: how long the command took,
# the longest txg sync seen meanwhile (from `tarn stat txgs`, when the build has it), the daemon's
# peak resident memory while it ran (sampled every 100 ms) and the time until the freed space is
# back (`freeing` 0 and allocation settled). Run it with an old build for the "before" figures:
#   bash scripts/bench-destroy.sh [TARN_BINARY] [DIR] [BLOCKS_GIB] [FILE_GIB] [CLONE_GIB]
# Then, with CLONE_GIB > 0 (default 4): a clone of a CLONE_GIB file of 8 KiB records
# with 2000 scattered 8 KiB overwrites, destroyed from the command line as a user would, timed
# phase by phase (`tarn unmount`, `tarn destroy`, `pool wait -t free`, `pool sync`; three warm,
# three cold after an export, a drop of the page cache and an import), and with mkfs.btrfs, the
# same on btrfs on a loop device (`subvolume delete -C`, `subvolume list -d` polled every 2 ms
# until the cleaner is done, `filesystem sync`; `subvolume sync` would sleep a second between
# its checks). It is a benchmark, not a test: it asserts nothing. Needs root and /dev/fuse.
set -euo pipefail
tarn=$(realpath "${1:-target/release/tarn}")
dir=${2:-/var/tmp/tarn-bench-destroy}
small_gib=${3:-4}
big_gib=${4:-16}
clone_gib=${5:-4}
mkdir -p "$dir"
dir=$(realpath "$dir")
export TARN_SOCKET=$dir/sock
pool=bd
btrfs_device=""
cleanup() {
    "$tarn" pool destroy -f "$pool" >/dev/null 2>&1 || true
    rm -f "$dir/v0.img"
    if [ -n "$btrfs_device" ]; then
        umount "$dir/btrfs-mnt" 2>/dev/null || true
        losetup -d "$btrfs_device" 2>/dev/null || true
        rm -f "$dir/btrfs.img"
    fi
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

[ "$clone_gib" -gt 0 ] || exit 0
now() { date +%s.%N; }
ms() { printf '%.1f' "$(echo "($2 - $1) * 1000" | bc -l)"; }
records=$((clone_gib * 131072))
# 2000 scattered 8 KiB overwrites of file $1 (seed $2), then an fsync.
overwrite() {
    local state=$2 i
    for ((i = 0; i < 2000; i++)); do
        state=$(((state * 1103515245 + 12345) & 0x7fffffff))
        dd if=/dev/urandom of="$1" bs=8K count=1 seek=$((state % records)) conv=notrunc status=none
    done
    sync "$1"
}
cleanup
echo "== clone destroy from the command line: a clone of a $clone_gib GiB file, 2000 8K overwrites"
"$tarn" pool create -s $((clone_gib + clone_gib / 4 + 2))G -O compression=off -m "$dir/mnt" "$pool" "$dir/v0.img"
"$tarn" create -o recordsize=8K -o compression=off "$pool/fs"
dd if=/dev/urandom of="$dir/mnt/fs/big" bs=1M count=$((clone_gib * 1024)) status=none
"$tarn" pool sync "$pool" >/dev/null
"$tarn" snapshot "$pool/fs@origin" >/dev/null
for state in warm cold; do
    for run in 1 2 3; do
        clone=c$state$run
        "$tarn" clone "$pool/fs@origin" "$pool/$clone" >/dev/null
        overwrite "$dir/mnt/$clone/big" $((run * 7919))
        "$tarn" pool sync "$pool" >/dev/null
        if [ "$state" = cold ]; then
            "$tarn" pool export "$pool" >/dev/null
            echo 3 >/proc/sys/vm/drop_caches
            "$tarn" pool import -d "$dir" "$pool" >/dev/null
        fi
        first_txg=$(newest_txg)
        t0=$(now)
        "$tarn" unmount "$pool/$clone" >/dev/null
        t1=$(now)
        "$tarn" destroy "$pool/$clone" >/dev/null
        t2=$(now)
        "$tarn" pool wait -t free "$pool"
        t3=$(now)
        "$tarn" pool sync "$pool" >/dev/null
        t4=$(now)
        txgs="-"
        if [ "$has_stat" = 1 ]; then
            txgs=$("$tarn" stat -H -p txgs "$pool" |
                awk -v after="$first_txg" '$1 > after && $3 == "C" {n++; s += $12} END {printf "%d txgs synced in %.1f ms", n, s / 1e6}')
        fi
        echo "tarn  $state: $(ms "$t0" "$t4") ms = unmount $(ms "$t0" "$t1") + destroy $(ms "$t1" "$t2") + wait -t free $(ms "$t2" "$t3") + sync $(ms "$t3" "$t4"); $txgs"
    done
done
"$tarn" pool destroy -f "$pool" >/dev/null
rm -f "$dir/v0.img"
if ! command -v mkfs.btrfs >/dev/null; then
    echo "btrfs skipped (no mkfs.btrfs)"
    exit 0
fi
truncate -s $((clone_gib + clone_gib / 4 + 2))G "$dir/btrfs.img"
btrfs_device=$(losetup --find --show "$dir/btrfs.img")
mnt=$dir/btrfs-mnt
mkdir -p "$mnt"
mkfs.btrfs -q -f "$btrfs_device"
mount -t btrfs "$btrfs_device" "$mnt"
btrfs -q subvolume create "$mnt/vol"
dd if=/dev/urandom of="$mnt/vol/big" bs=1M count=$((clone_gib * 1024)) status=none conv=fsync
for state in warm cold; do
    for run in 1 2 3; do
        snapshot=$mnt/s$state$run
        btrfs -q subvolume snapshot "$mnt/vol" "$snapshot"
        overwrite "$snapshot/big" $((run * 7919))
        btrfs -q filesystem sync "$mnt"
        if [ "$state" = cold ]; then
            umount "$mnt"
            echo 3 >/proc/sys/vm/drop_caches
            mount -t btrfs "$btrfs_device" "$mnt"
        fi
        t0=$(now)
        btrfs -q subvolume delete -C "$snapshot"
        t1=$(now)
        while [ -n "$(btrfs subvolume list -d "$mnt")" ]; do sleep 0.002; done
        t2=$(now)
        btrfs -q filesystem sync "$mnt"
        t3=$(now)
        echo "btrfs $state: $(ms "$t0" "$t3") ms = delete -C $(ms "$t0" "$t1") + cleaner $(ms "$t1" "$t2") + sync $(ms "$t2" "$t3")"
    done
done
