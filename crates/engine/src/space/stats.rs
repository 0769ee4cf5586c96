//! Per-txg figures of the space layer, the columns `tarn stat txgs` prints after the txg
//! layer's own.
//!
//! - `spacemap_writes`: space-map and metaslab-array data blocks written by the txg's sync,
//!   counted once per sync pass that dirtied them (a block dirtied in passes 1 and 2 is written
//!   twice), times the MOS copies (the pool multiplies: this layer does not know them).
//! - `ms_condensed`, `ms_loaded`, `ms_unloaded`: metaslabs condensed, loaded and unloaded.
//! - `alloc_segments_p999`: 99.9th percentile of the free segments examined per allocation (the
//!   first-fit walk plus one for a best-fit lookup).
//! - `alloc_load_waits`: allocations that had to load a metaslab's space map first.
//! - `alloc_p999_ns`: 99.9th percentile of the wall-clock time of one allocation.
//! - `log_writes`: of `spacemap_writes`, the blocks of the log space map (`log.rs`).
//! - `ms_flushed`: metaslabs whose unflushed changes went from the log to their own maps.
//! - `spacemap_headers`: space-map headers (bonus buffers) rewritten, once per pass that
//!   rewrote them. Every sync that changes a metaslab rewrites its map's header (the histogram),
//!   with the log as without it (OpenZFS dirties `sm_dbuf` the same way), so a comparison of
//!   the two ways that counts only data blocks overstates what the log saves. Not a column:
//!   headers are dnodes, and the blocks they dirty are the MOS's, counted in the txg's
//!   `blocks_written`.
//! - `gang_blocks`: blocks written as gangs because no free segment held them whole (or
//!   forced by `metaslab_force_ganging`), counted by the block layer (block/gang.rs).
//!
//! Counting costs a few relaxed atomic adds per allocation and one set insert per space-map
//! block write; [`SpaceStatsCollector::take`] reads and resets them once per txg.
//! Percentiles come from log-linear histograms (4 sub-buckets per power of two), so they are
//! upper bounds within 25%.

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the space layer did during one txg.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpaceTxgStats {
    pub spacemap_writes: u64,
    pub ms_condensed: u64,
    pub ms_loaded: u64,
    pub ms_unloaded: u64,
    pub alloc_segments_p999: u64,
    pub alloc_load_waits: u64,
    pub alloc_p999_ns: u64,
    #[serde(default)]
    pub gang_blocks: u64,
    /// Of `spacemap_writes`, the blocks of the log space map (space/log.rs).
    #[serde(default)]
    pub log_writes: u64,
    /// Metaslabs flushed from the log to their own maps.
    #[serde(default)]
    pub ms_flushed: u64,
    /// Allocations made (not a column: the denominator of the others).
    pub allocations: u64,
    /// Space-map headers rewritten (not a column; see the module documentation).
    #[serde(default)]
    pub spacemap_headers: u64,
}

const SUB_BUCKETS: u64 = 4;
const BUCKETS: usize = 256;

/// A log-linear histogram of u64 values with atomic buckets.
pub struct LogHistogram {
    buckets: Vec<AtomicU64>,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl LogHistogram {
    fn bucket(value: u64) -> usize {
        if value < SUB_BUCKETS {
            return value as usize;
        }
        let exponent = 63 - value.leading_zeros() as u64; // >= 2
        let sub = (value >> (exponent - 2)) & (SUB_BUCKETS - 1);
        ((exponent - 1) * SUB_BUCKETS + sub) as usize
    }

    /// The largest value that falls in `bucket`.
    fn upper_bound(bucket: usize) -> u64 {
        let bucket = bucket as u64;
        if bucket < SUB_BUCKETS {
            return bucket;
        }
        let exponent = bucket / SUB_BUCKETS + 1;
        let sub = bucket % SUB_BUCKETS;
        ((((SUB_BUCKETS + sub + 1) as u128) << (exponent - 2)) - 1).min(u64::MAX as u128) as u64
    }

    pub fn record(&self, value: u64) {
        self.buckets[Self::bucket(value)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `quantile` (0..=1) of the recorded values as an upper bound, and reset.
    pub fn take_quantile(&self, quantile: f64) -> u64 {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|bucket| bucket.swap(0, Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((total as f64 * quantile).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (bucket, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Self::upper_bound(bucket);
            }
        }
        Self::upper_bound(BUCKETS - 1)
    }
}

/// The live counters behind [`SpaceTxgStats`].
#[derive(Default)]
pub struct SpaceStatsCollector {
    condensed: AtomicU64,
    loaded: AtomicU64,
    unloaded: AtomicU64,
    load_waits: AtomicU64,
    allocations: AtomicU64,
    spacemap_blocks: AtomicU64,
    gang_blocks: AtomicU64,
    flushed: AtomicU64,
    log_blocks: AtomicU64,
    header_writes: AtomicU64,
    segments: LogHistogram,
    latency_ns: LogHistogram,
    /// (object, block) pairs written in the current sync pass.
    pass_blocks: Mutex<BTreeSet<(u64, u64)>>,
    /// Of those, the log space map's.
    pass_log_blocks: Mutex<BTreeSet<(u64, u64)>>,
    /// Objects whose header was rewritten in the current sync pass.
    pass_headers: Mutex<BTreeSet<u64>>,
}

impl SpaceStatsCollector {
    pub fn condensed(&self) {
        self.condensed.fetch_add(1, Ordering::Relaxed);
    }
    pub fn loaded(&self) {
        self.loaded.fetch_add(1, Ordering::Relaxed);
    }
    pub fn gang_block(&self) {
        self.gang_blocks.fetch_add(1, Ordering::Relaxed);
    }
    pub fn flushed(&self) {
        self.flushed.fetch_add(1, Ordering::Relaxed);
    }
    pub fn unloaded(&self) {
        self.unloaded.fetch_add(1, Ordering::Relaxed);
    }

    /// One allocation attempt: segments examined, whether it loaded a metaslab, time taken.
    pub fn allocation(&self, segments: u64, load_wait: bool, ns: u64) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        if load_wait {
            self.load_waits.fetch_add(1, Ordering::Relaxed);
        }
        self.segments.record(segments);
        self.latency_ns.record(ns);
    }

    /// A space-map write of `length` bytes at `offset` of `object` (blocks of `block_size`).
    pub fn spacemap_write(&self, object: u64, offset: u64, length: u64, block_size: u64) {
        if length == 0 {
            return;
        }
        let mut blocks = self.pass_blocks.lock();
        for block in offset / block_size..=(offset + length - 1) / block_size {
            blocks.insert((object, block));
        }
    }

    /// A write to a log space map: counted in `spacemap_writes` and in `log_writes`.
    pub fn log_write(&self, object: u64, offset: u64, length: u64, block_size: u64) {
        if length == 0 {
            return;
        }
        self.spacemap_write(object, offset, length, block_size);
        let mut blocks = self.pass_log_blocks.lock();
        for block in offset / block_size..=(offset + length - 1) / block_size {
            blocks.insert((object, block));
        }
    }

    /// A space map's header (its bonus buffer) rewritten.
    pub fn header_write(&self, object: u64) {
        self.pass_headers.lock().insert(object);
    }

    /// End of a sync pass: count the distinct blocks and headers it wrote.
    pub fn end_pass(&self) {
        let mut headers = self.pass_headers.lock();
        self.header_writes
            .fetch_add(headers.len() as u64, Ordering::Relaxed);
        headers.clear();
        let mut blocks = self.pass_blocks.lock();
        self.spacemap_blocks
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        blocks.clear();
        let mut log_blocks = self.pass_log_blocks.lock();
        self.log_blocks
            .fetch_add(log_blocks.len() as u64, Ordering::Relaxed);
        log_blocks.clear();
    }

    /// Read and reset; `spacemap_writes` is in blocks (one copy each).
    pub fn take(&self) -> SpaceTxgStats {
        self.end_pass();
        SpaceTxgStats {
            spacemap_writes: self.spacemap_blocks.swap(0, Ordering::Relaxed),
            ms_condensed: self.condensed.swap(0, Ordering::Relaxed),
            ms_loaded: self.loaded.swap(0, Ordering::Relaxed),
            ms_unloaded: self.unloaded.swap(0, Ordering::Relaxed),
            alloc_segments_p999: self.segments.take_quantile(0.999),
            alloc_load_waits: self.load_waits.swap(0, Ordering::Relaxed),
            alloc_p999_ns: self.latency_ns.take_quantile(0.999),
            allocations: self.allocations.swap(0, Ordering::Relaxed),
            gang_blocks: self.gang_blocks.swap(0, Ordering::Relaxed),
            log_writes: self.log_blocks.swap(0, Ordering::Relaxed),
            ms_flushed: self.flushed.swap(0, Ordering::Relaxed),
            spacemap_headers: self.header_writes.swap(0, Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn bucket_bounds_contain_their_values(value in any::<u64>()) {
            let bucket = LogHistogram::bucket(value);
            prop_assert!(bucket < BUCKETS);
            prop_assert!(value <= LogHistogram::upper_bound(bucket));
            if bucket > 0 {
                prop_assert!(value > LogHistogram::upper_bound(bucket - 1));
            }
        }
    }

    #[test]
    fn quantile_is_an_upper_bound_within_a_quarter() {
        let histogram = LogHistogram::default();
        for value in 1..=1000u64 {
            histogram.record(value);
        }
        let p999 = histogram.take_quantile(0.999);
        assert!((999..=1250).contains(&p999), "{p999}");
        assert_eq!(histogram.take_quantile(0.999), 0, "reset");
    }

    #[test]
    fn spacemap_blocks_count_once_per_pass() {
        let stats = SpaceStatsCollector::default();
        stats.spacemap_write(5, 0, 100, 4096);
        stats.spacemap_write(5, 4000, 200, 4096); // blocks 0 and 1
        stats.end_pass();
        stats.spacemap_write(5, 4100, 8, 4096); // block 1 again, in pass 2
        assert_eq!(stats.take().spacemap_writes, 3);
    }
}
