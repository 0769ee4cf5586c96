//! The ARC under memory pressure: the reaper thread shrinks the target when
//! the host has less free memory than `arc_sys_free` asks for, the cache evicts down to it,
//! and the freed memory goes back to the system: the process's resident size falls. Its own
//! test binary, so that no other test's allocations move the resident size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tarn::cache::{monotonic_clock, BlockCache, BlockKey, BlockKind};
use tarn::types::{Txg, VdevId};

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap()
        * 1024
}

#[test]
fn pressure_shrinks_the_target_and_resident_memory_falls() {
    const MIB: u64 = 1 << 20;
    let cache = Arc::new(BlockCache::with_limits(
        8 * MIB,
        256 * MIB,
        monotonic_clock(),
    ));
    let before = resident_bytes();
    for index in 0..160u64 {
        // Blocks of varied sizes, as a pool's mix of records and metadata.
        let size = if index % 4 == 0 {
            128 << 10
        } else {
            (1 << 20) + 4096 * index as usize
        };
        let key = BlockKey {
            vdev: VdevId(0),
            offset: index << 24,
            birth: Txg(5),
        };
        let kind = if index % 5 == 0 {
            BlockKind::Metadata
        } else {
            BlockKind::Data
        };
        assert!(cache.insert(key, Arc::new(vec![index as u8 | 1; size]), kind));
    }
    let warm = resident_bytes();
    let cached = cache.stats().size_bytes;
    assert!(cached > 100 * MIB, "only {cached} bytes cached");
    assert!(warm > before + 100 * MIB, "resident {before} -> {warm}");

    // Ask for more free memory than any machine has: every look is a shortfall.
    cache.start_reaper(1 << 50);
    let started = Instant::now();
    while cache.target() > 8 * MIB {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "target still {} after 20 s",
            cache.target()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let stats = cache.stats();
    assert!(
        stats.size_bytes <= 8 * MIB,
        "{} bytes cached",
        stats.size_bytes
    );
    assert!(stats.shrinks >= 1);
    let cold = resident_bytes();
    println!(
        "resident: {} MiB empty, {} MiB warm ({} MiB cached), {} MiB after shrinking to {} MiB",
        before >> 20,
        warm >> 20,
        cached >> 20,
        cold >> 20,
        stats.size_bytes >> 20
    );
    assert!(
        cold + 80 * MIB < warm,
        "resident memory did not fall: {warm} -> {cold}"
    );
}
