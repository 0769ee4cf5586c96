//! Per-leaf I/O statistics: counters and latency histograms, as `zpool iostat -l` / `-w` show.
//!
//! Every counter is an atomic updated with relaxed ordering: the I/O path takes no lock, and a
//! snapshot is a set of individually exact counters, not a consistent cut (as kstats are).

use std::sync::atomic::{AtomicU64, Ordering};

/// Number of latency histogram buckets. Bucket `i` counts I/Os whose latency in nanoseconds
/// lies in `[2^i, 2^(i+1))` (bucket 0 also counts 0 ns); the last bucket also counts
/// everything longer, so the histogram spans 1 ns to about 137 s like `zpool iostat -w`.
pub const LATENCY_HISTOGRAM_BUCKETS: usize = 37;

/// The histogram bucket for a latency in nanoseconds.
pub fn latency_bucket(latency_ns: u64) -> usize {
    if latency_ns == 0 {
        return 0;
    }
    let bucket = (63 - latency_ns.leading_zeros()) as usize;
    bucket.min(LATENCY_HISTOGRAM_BUCKETS - 1)
}

/// Counters of one leaf device.
#[derive(Debug)]
pub struct LeafStats {
    read_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_ops: AtomicU64,
    write_bytes: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    checksum_errors: AtomicU64,
    read_latency_histogram: [AtomicU64; LATENCY_HISTOGRAM_BUCKETS],
    write_latency_histogram: [AtomicU64; LATENCY_HISTOGRAM_BUCKETS],
}

impl Default for LeafStats {
    fn default() -> Self {
        LeafStats::new()
    }
}

impl LeafStats {
    pub fn new() -> LeafStats {
        LeafStats {
            read_ops: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            write_ops: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            read_errors: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
            read_latency_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
            write_latency_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Record one completed read. A failed read counts as an error, not as an operation, and
    /// its latency is not recorded.
    pub fn record_read(&self, bytes: u64, latency_ns: u64, ok: bool) {
        if ok {
            self.read_ops.fetch_add(1, Ordering::Relaxed);
            self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.read_latency_histogram[latency_bucket(latency_ns)].fetch_add(1, Ordering::Relaxed);
        } else {
            self.read_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Record one completed write; see [`LeafStats::record_read`].
    pub fn record_write(&self, bytes: u64, latency_ns: u64, ok: bool) {
        if ok {
            self.write_ops.fetch_add(1, Ordering::Relaxed);
            self.write_bytes.fetch_add(bytes, Ordering::Relaxed);
            self.write_latency_histogram[latency_bucket(latency_ns)]
                .fetch_add(1, Ordering::Relaxed);
        } else {
            self.write_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Record a block read from this leaf that failed its checksum.
    pub fn record_checksum_error(&self) {
        self.checksum_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Copy every counter into a plain struct for printing or differencing.
    pub fn snapshot(&self) -> LeafStatsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LeafStatsSnapshot {
            read_ops: load(&self.read_ops),
            read_bytes: load(&self.read_bytes),
            write_ops: load(&self.write_ops),
            write_bytes: load(&self.write_bytes),
            read_errors: load(&self.read_errors),
            write_errors: load(&self.write_errors),
            checksum_errors: load(&self.checksum_errors),
            read_latency_histogram: std::array::from_fn(|i| load(&self.read_latency_histogram[i])),
            write_latency_histogram: std::array::from_fn(|i| {
                load(&self.write_latency_histogram[i])
            }),
        }
    }
}

/// A plain copy of [`LeafStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafStatsSnapshot {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub read_latency_histogram: [u64; LATENCY_HISTOGRAM_BUCKETS],
    pub write_latency_histogram: [u64; LATENCY_HISTOGRAM_BUCKETS],
}

impl Default for LeafStatsSnapshot {
    fn default() -> Self {
        LeafStatsSnapshot {
            read_ops: 0,
            read_bytes: 0,
            write_ops: 0,
            write_bytes: 0,
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            read_latency_histogram: [0; LATENCY_HISTOGRAM_BUCKETS],
            write_latency_histogram: [0; LATENCY_HISTOGRAM_BUCKETS],
        }
    }
}

impl LeafStatsSnapshot {
    /// The counters accumulated since `earlier` (for per-interval `iostat` lines).
    pub fn since(&self, earlier: &LeafStatsSnapshot) -> LeafStatsSnapshot {
        LeafStatsSnapshot {
            read_ops: self.read_ops.wrapping_sub(earlier.read_ops),
            read_bytes: self.read_bytes.wrapping_sub(earlier.read_bytes),
            write_ops: self.write_ops.wrapping_sub(earlier.write_ops),
            write_bytes: self.write_bytes.wrapping_sub(earlier.write_bytes),
            read_errors: self.read_errors.wrapping_sub(earlier.read_errors),
            write_errors: self.write_errors.wrapping_sub(earlier.write_errors),
            checksum_errors: self.checksum_errors.wrapping_sub(earlier.checksum_errors),
            read_latency_histogram: std::array::from_fn(|i| {
                self.read_latency_histogram[i].wrapping_sub(earlier.read_latency_histogram[i])
            }),
            write_latency_histogram: std::array::from_fn(|i| {
                self.write_latency_histogram[i].wrapping_sub(earlier.write_latency_histogram[i])
            }),
        }
    }

    /// Average latency from a histogram, taking each bucket's midpoint 1.5 × 2^i ns as
    /// `zpool iostat -l` does; 0 when the histogram is empty.
    pub fn histogram_average_latency_ns(histogram: &[u64; LATENCY_HISTOGRAM_BUCKETS]) -> u64 {
        let mut count: u128 = 0;
        let mut total_ns: u128 = 0;
        for (bucket, &ops) in histogram.iter().enumerate() {
            count += ops as u128;
            total_ns += ops as u128 * ((1u128 << bucket) * 3 / 2);
        }
        total_ns.checked_div(count).unwrap_or(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(1), 0);
        assert_eq!(latency_bucket(2), 1);
        assert_eq!(latency_bucket(3), 1);
        assert_eq!(latency_bucket(1024), 10);
        assert_eq!(latency_bucket(2047), 10);
        assert_eq!(latency_bucket(u64::MAX), LATENCY_HISTOGRAM_BUCKETS - 1);
    }

    #[test]
    fn counters_and_histograms_accumulate() {
        let stats = LeafStats::new();
        stats.record_read(4096, 1500, true);
        stats.record_read(4096, 1600, true);
        stats.record_read(4096, 10, false);
        stats.record_write(512, 1 << 20, true);
        stats.record_write(512, 5, false);
        stats.record_checksum_error();
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.read_ops, 2);
        assert_eq!(snapshot.read_bytes, 8192);
        assert_eq!(snapshot.read_errors, 1);
        assert_eq!(snapshot.write_ops, 1);
        assert_eq!(snapshot.write_bytes, 512);
        assert_eq!(snapshot.write_errors, 1);
        assert_eq!(snapshot.checksum_errors, 1);
        assert_eq!(snapshot.read_latency_histogram[10], 2);
        assert_eq!(snapshot.read_latency_histogram.iter().sum::<u64>(), 2);
        assert_eq!(snapshot.write_latency_histogram[20], 1);
        assert_eq!(
            LeafStatsSnapshot::histogram_average_latency_ns(&snapshot.read_latency_histogram),
            1536
        );

        stats.record_read(100, 100, true);
        let delta = stats.snapshot().since(&snapshot);
        assert_eq!(delta.read_ops, 1);
        assert_eq!(delta.read_bytes, 100);
        assert_eq!(delta.write_ops, 0);
        assert_eq!(delta.read_latency_histogram[6], 1);
    }
}
