//! Per-leaf I/O statistics: counters, latency histograms and request-size histograms, as
//! `zpool iostat -l`, `-w`, `-r` and `-q` show them (OpenZFS's `vdev_stat_t` and
//! `vdev_stat_ex_t`).
//!
//! Every counter is an atomic updated with relaxed ordering: the I/O path takes no lock of its
//! own here, and a snapshot is a set of individually exact counters, not a consistent cut (as
//! kstats are).
//!
//! What is counted (the vdev queue, [`super::queue`], records everything):
//! - per *device I/O* (one `pread`/`pwrite`, possibly an aggregate of several requests): the
//!   operations and bytes `iostat` prints, errors, and the request-size histograms (`ind` for
//!   an I/O of one request, `agg` for an aggregate, by class);
//! - per *request* (what a caller submitted): time in the queue (submit to issue), time at the
//!   device (issue to completion of the device I/O that carried it) and the total, each as an
//!   exact nanosecond sum and as a power-of-two histogram. Queue time is kept per class
//!   (`syncq_wait`, `asyncq_wait`, `scrub`, `trim`, `rebuild`), device and total time per
//!   direction (read, write);
//! - the pending and active counts of every class (gauges, kept by the queue under its lock).
//!
//! Averages (`iostat -l`) are the exact sums divided by the request counts, not histogram
//! midpoints, so a delay injected at the device shows up as itself.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::io_class::{IoClass, IoKind, IO_CLASSES};

/// Number of latency histogram buckets. Bucket `i` counts I/Os whose latency in nanoseconds
/// lies in `[2^i, 2^(i+1))` (bucket 0 also counts 0 ns); the last bucket also counts
/// everything longer, so the histogram spans 1 ns to about 137 s like `zpool iostat -w`
/// (OpenZFS's VDEV_L_HISTO_BUCKETS).
pub const LATENCY_HISTOGRAM_BUCKETS: usize = 37;

/// Number of request-size histogram buckets: bucket `i` counts I/Os of `[2^i, 2^(i+1))` bytes,
/// the last one everything larger, up to 16 MiB (OpenZFS's VDEV_RQ_HISTO_BUCKETS).
pub const SIZE_HISTOGRAM_BUCKETS: usize = 25;

/// The histogram bucket for a latency in nanoseconds.
pub fn latency_bucket(latency_ns: u64) -> usize {
    power_of_two_bucket(latency_ns, LATENCY_HISTOGRAM_BUCKETS)
}

/// The histogram bucket for a request size in bytes.
pub fn size_bucket(bytes: u64) -> usize {
    power_of_two_bucket(bytes, SIZE_HISTOGRAM_BUCKETS)
}

fn power_of_two_bucket(value: u64, buckets: usize) -> usize {
    if value == 0 {
        return 0;
    }
    let bucket = (63 - value.leading_zeros()) as usize;
    bucket.min(buckets - 1)
}

/// Counters of one direction (read or write).
#[derive(Debug)]
struct KindCounters {
    /// Device I/Os completed without error, and their bytes.
    ops: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    /// Requests completed (whatever the outcome), and their summed times.
    requests: AtomicU64,
    total_ns: AtomicU64,
    disk_ns: AtomicU64,
    total_histogram: [AtomicU64; LATENCY_HISTOGRAM_BUCKETS],
    disk_histogram: [AtomicU64; LATENCY_HISTOGRAM_BUCKETS],
}

/// Counters of one queue class.
#[derive(Debug)]
struct ClassCounters {
    requests: AtomicU64,
    bytes: AtomicU64,
    queue_ns: AtomicU64,
    disk_ns: AtomicU64,
    pending: AtomicU64,
    active: AtomicU64,
    queue_histogram: [AtomicU64; LATENCY_HISTOGRAM_BUCKETS],
    individual_histogram: [AtomicU64; SIZE_HISTOGRAM_BUCKETS],
    aggregated_histogram: [AtomicU64; SIZE_HISTOGRAM_BUCKETS],
}

fn zeroed<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

impl KindCounters {
    fn new() -> KindCounters {
        KindCounters {
            ops: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            disk_ns: AtomicU64::new(0),
            total_histogram: zeroed(),
            disk_histogram: zeroed(),
        }
    }
}

impl ClassCounters {
    fn new() -> ClassCounters {
        ClassCounters {
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            queue_ns: AtomicU64::new(0),
            disk_ns: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            active: AtomicU64::new(0),
            queue_histogram: zeroed(),
            individual_histogram: zeroed(),
            aggregated_histogram: zeroed(),
        }
    }
}

/// Counters of one leaf device.
#[derive(Debug)]
pub struct LeafStats {
    kinds: [KindCounters; 2],
    classes: [ClassCounters; IO_CLASSES],
    checksum_errors: AtomicU64,
}

impl Default for LeafStats {
    fn default() -> Self {
        LeafStats::new()
    }
}

fn add(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

impl LeafStats {
    pub fn new() -> LeafStats {
        LeafStats {
            kinds: [KindCounters::new(), KindCounters::new()],
            classes: std::array::from_fn(|_| ClassCounters::new()),
            checksum_errors: AtomicU64::new(0),
        }
    }

    /// Record one device I/O of `bytes` that carried `requests` requests of `class`: an
    /// operation (or an error), and its size in the class's individual or aggregated
    /// histogram.
    pub fn record_device_io(
        &self,
        kind: IoKind,
        class: IoClass,
        bytes: u64,
        requests: usize,
        ok: bool,
    ) {
        let counters = &self.kinds[kind.index()];
        if !ok {
            add(&counters.errors, 1);
            return;
        }
        add(&counters.ops, 1);
        add(&counters.bytes, bytes);
        let class = &self.classes[class.index()];
        let histogram = if requests > 1 {
            &class.aggregated_histogram
        } else {
            &class.individual_histogram
        };
        add(&histogram[size_bucket(bytes)], 1);
    }

    /// Record one completed request: its time in the queue and at the device.
    pub fn record_request(
        &self,
        kind: IoKind,
        class: IoClass,
        bytes: u64,
        queue_ns: u64,
        disk_ns: u64,
    ) {
        let total_ns = queue_ns.saturating_add(disk_ns);
        let counters = &self.kinds[kind.index()];
        add(&counters.requests, 1);
        add(&counters.total_ns, total_ns);
        add(&counters.disk_ns, disk_ns);
        add(&counters.total_histogram[latency_bucket(total_ns)], 1);
        add(&counters.disk_histogram[latency_bucket(disk_ns)], 1);
        let class = &self.classes[class.index()];
        add(&class.requests, 1);
        add(&class.bytes, bytes);
        add(&class.queue_ns, queue_ns);
        add(&class.disk_ns, disk_ns);
        add(&class.queue_histogram[latency_bucket(queue_ns)], 1);
    }

    /// Set the pending and active gauges of a class (the queue calls this under its lock).
    pub(crate) fn set_queue_depth(&self, class: IoClass, pending: u64, active: u64) {
        let class = &self.classes[class.index()];
        class.pending.store(pending, Ordering::Relaxed);
        class.active.store(active, Ordering::Relaxed);
    }

    /// Record one I/O that did not go through the queue (a flush): an error only if it failed.
    pub fn record_write_error(&self) {
        add(&self.kinds[IoKind::Write.index()].errors, 1);
    }

    /// Record a block read from this leaf that failed its checksum.
    pub fn record_checksum_error(&self) {
        self.checksum_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Reset the read, write and checksum error counts (`pool clear`).
    pub fn clear_errors(&self) {
        for kind in [IoKind::Read, IoKind::Write] {
            self.kinds[kind.index()].errors.store(0, Ordering::Relaxed);
        }
        self.checksum_errors.store(0, Ordering::Relaxed);
    }

    /// Copy every counter into a plain struct for printing or differencing.
    pub fn snapshot(&self) -> LeafStatsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let histogram = |counters: &[AtomicU64]| counters.iter().map(load).collect::<Vec<u64>>();
        let kind = |kind: IoKind| {
            let counters = &self.kinds[kind.index()];
            KindSnapshot {
                requests: load(&counters.requests),
                total_ns: load(&counters.total_ns),
                disk_ns: load(&counters.disk_ns),
                total_histogram: histogram(&counters.total_histogram),
                disk_histogram: histogram(&counters.disk_histogram),
            }
        };
        let read = &self.kinds[IoKind::Read.index()];
        let write = &self.kinds[IoKind::Write.index()];
        LeafStatsSnapshot {
            read_ops: load(&read.ops),
            read_bytes: load(&read.bytes),
            write_ops: load(&write.ops),
            write_bytes: load(&write.bytes),
            read_errors: load(&read.errors),
            write_errors: load(&write.errors),
            checksum_errors: load(&self.checksum_errors),
            read: kind(IoKind::Read),
            write: kind(IoKind::Write),
            classes: self
                .classes
                .iter()
                .map(|class| ClassSnapshot {
                    requests: load(&class.requests),
                    bytes: load(&class.bytes),
                    queue_ns: load(&class.queue_ns),
                    disk_ns: load(&class.disk_ns),
                    pending: load(&class.pending),
                    active: load(&class.active),
                    queue_histogram: histogram(&class.queue_histogram),
                    individual_histogram: histogram(&class.individual_histogram),
                    aggregated_histogram: histogram(&class.aggregated_histogram),
                })
                .collect(),
        }
    }
}

/// The per-direction part of a [`LeafStatsSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindSnapshot {
    pub requests: u64,
    pub total_ns: u64,
    pub disk_ns: u64,
    /// [`LATENCY_HISTOGRAM_BUCKETS`] buckets of queue plus device time.
    pub total_histogram: Vec<u64>,
    /// [`LATENCY_HISTOGRAM_BUCKETS`] buckets of device time.
    pub disk_histogram: Vec<u64>,
}

impl Default for KindSnapshot {
    fn default() -> Self {
        KindSnapshot {
            requests: 0,
            total_ns: 0,
            disk_ns: 0,
            total_histogram: vec![0; LATENCY_HISTOGRAM_BUCKETS],
            disk_histogram: vec![0; LATENCY_HISTOGRAM_BUCKETS],
        }
    }
}

/// The per-class part of a [`LeafStatsSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassSnapshot {
    pub requests: u64,
    pub bytes: u64,
    pub queue_ns: u64,
    pub disk_ns: u64,
    /// Requests waiting in the queue (a gauge: the value now, not a count).
    pub pending: u64,
    /// Device I/Os of this class being executed (a gauge).
    pub active: u64,
    /// [`LATENCY_HISTOGRAM_BUCKETS`] buckets of queue time.
    pub queue_histogram: Vec<u64>,
    /// [`SIZE_HISTOGRAM_BUCKETS`] buckets of device I/Os that carried one request.
    pub individual_histogram: Vec<u64>,
    /// [`SIZE_HISTOGRAM_BUCKETS`] buckets of device I/Os that aggregated several requests.
    pub aggregated_histogram: Vec<u64>,
}

impl Default for ClassSnapshot {
    fn default() -> Self {
        ClassSnapshot {
            requests: 0,
            bytes: 0,
            queue_ns: 0,
            disk_ns: 0,
            pending: 0,
            active: 0,
            queue_histogram: vec![0; LATENCY_HISTOGRAM_BUCKETS],
            individual_histogram: vec![0; SIZE_HISTOGRAM_BUCKETS],
            aggregated_histogram: vec![0; SIZE_HISTOGRAM_BUCKETS],
        }
    }
}

/// A plain copy of [`LeafStats`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafStatsSnapshot {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub read: KindSnapshot,
    pub write: KindSnapshot,
    /// One entry per [`IoClass`], in [`IoClass::ALL`] order.
    pub classes: Vec<ClassSnapshot>,
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
            read: KindSnapshot::default(),
            write: KindSnapshot::default(),
            classes: vec![ClassSnapshot::default(); IO_CLASSES],
        }
    }
}

fn minus(now: &[u64], earlier: &[u64]) -> Vec<u64> {
    now.iter()
        .enumerate()
        .map(|(i, value)| value.wrapping_sub(earlier.get(i).copied().unwrap_or(0)))
        .collect()
}

fn plus(into: &mut [u64], other: &[u64]) {
    for (value, more) in into.iter_mut().zip(other) {
        *value = value.wrapping_add(*more);
    }
}

impl KindSnapshot {
    fn since(&self, earlier: &KindSnapshot) -> KindSnapshot {
        KindSnapshot {
            requests: self.requests.wrapping_sub(earlier.requests),
            total_ns: self.total_ns.wrapping_sub(earlier.total_ns),
            disk_ns: self.disk_ns.wrapping_sub(earlier.disk_ns),
            total_histogram: minus(&self.total_histogram, &earlier.total_histogram),
            disk_histogram: minus(&self.disk_histogram, &earlier.disk_histogram),
        }
    }

    fn add(&mut self, other: &KindSnapshot) {
        self.requests = self.requests.wrapping_add(other.requests);
        self.total_ns = self.total_ns.wrapping_add(other.total_ns);
        self.disk_ns = self.disk_ns.wrapping_add(other.disk_ns);
        plus(&mut self.total_histogram, &other.total_histogram);
        plus(&mut self.disk_histogram, &other.disk_histogram);
    }

    /// Average queue-plus-device time of a request in nanoseconds; 0 without requests.
    pub fn total_wait_ns(&self) -> u64 {
        self.total_ns.checked_div(self.requests).unwrap_or(0)
    }

    /// Average device time of a request in nanoseconds; 0 without requests.
    pub fn disk_wait_ns(&self) -> u64 {
        self.disk_ns.checked_div(self.requests).unwrap_or(0)
    }
}

impl ClassSnapshot {
    fn since(&self, earlier: &ClassSnapshot) -> ClassSnapshot {
        ClassSnapshot {
            requests: self.requests.wrapping_sub(earlier.requests),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
            queue_ns: self.queue_ns.wrapping_sub(earlier.queue_ns),
            disk_ns: self.disk_ns.wrapping_sub(earlier.disk_ns),
            pending: self.pending,
            active: self.active,
            queue_histogram: minus(&self.queue_histogram, &earlier.queue_histogram),
            individual_histogram: minus(&self.individual_histogram, &earlier.individual_histogram),
            aggregated_histogram: minus(&self.aggregated_histogram, &earlier.aggregated_histogram),
        }
    }

    fn add(&mut self, other: &ClassSnapshot) {
        self.requests = self.requests.wrapping_add(other.requests);
        self.bytes = self.bytes.wrapping_add(other.bytes);
        self.queue_ns = self.queue_ns.wrapping_add(other.queue_ns);
        self.disk_ns = self.disk_ns.wrapping_add(other.disk_ns);
        self.pending = self.pending.wrapping_add(other.pending);
        self.active = self.active.wrapping_add(other.active);
        plus(&mut self.queue_histogram, &other.queue_histogram);
        plus(&mut self.individual_histogram, &other.individual_histogram);
        plus(&mut self.aggregated_histogram, &other.aggregated_histogram);
    }

    /// Average time a request of this class waited in the queue, in nanoseconds.
    pub fn queue_wait_ns(&self) -> u64 {
        self.queue_ns.checked_div(self.requests).unwrap_or(0)
    }
}

impl LeafStatsSnapshot {
    /// The counters accumulated since `earlier` (for per-interval `iostat` lines). The pending
    /// and active gauges are this snapshot's.
    pub fn since(&self, earlier: &LeafStatsSnapshot) -> LeafStatsSnapshot {
        LeafStatsSnapshot {
            read_ops: self.read_ops.wrapping_sub(earlier.read_ops),
            read_bytes: self.read_bytes.wrapping_sub(earlier.read_bytes),
            write_ops: self.write_ops.wrapping_sub(earlier.write_ops),
            write_bytes: self.write_bytes.wrapping_sub(earlier.write_bytes),
            read_errors: self.read_errors.wrapping_sub(earlier.read_errors),
            write_errors: self.write_errors.wrapping_sub(earlier.write_errors),
            checksum_errors: self.checksum_errors.wrapping_sub(earlier.checksum_errors),
            read: self.read.since(&earlier.read),
            write: self.write.since(&earlier.write),
            classes: self
                .classes
                .iter()
                .enumerate()
                .map(|(i, class)| match earlier.classes.get(i) {
                    Some(earlier) => class.since(earlier),
                    None => class.clone(),
                })
                .collect(),
        }
    }

    /// Add `other` into this snapshot: the counters of a top-level vdev or a pool are the sums
    /// of its leaves' (gauges included).
    pub fn add(&mut self, other: &LeafStatsSnapshot) {
        self.read_ops = self.read_ops.wrapping_add(other.read_ops);
        self.read_bytes = self.read_bytes.wrapping_add(other.read_bytes);
        self.write_ops = self.write_ops.wrapping_add(other.write_ops);
        self.write_bytes = self.write_bytes.wrapping_add(other.write_bytes);
        self.read_errors = self.read_errors.wrapping_add(other.read_errors);
        self.write_errors = self.write_errors.wrapping_add(other.write_errors);
        self.checksum_errors = self.checksum_errors.wrapping_add(other.checksum_errors);
        self.read.add(&other.read);
        self.write.add(&other.write);
        for (class, more) in self.classes.iter_mut().zip(&other.classes) {
            class.add(more);
        }
    }

    /// The counters of one class.
    pub fn class(&self, class: IoClass) -> &ClassSnapshot {
        &self.classes[class.index()]
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
        assert_eq!(size_bucket(4096), 12);
        assert_eq!(size_bucket(1 << 20), 20);
        assert_eq!(size_bucket(1 << 30), SIZE_HISTOGRAM_BUCKETS - 1);
    }

    #[test]
    fn counters_and_histograms_accumulate() {
        let stats = LeafStats::new();
        stats.record_device_io(IoKind::Read, IoClass::SyncRead, 4096, 1, true);
        stats.record_request(IoKind::Read, IoClass::SyncRead, 4096, 500, 1000);
        stats.record_device_io(IoKind::Read, IoClass::AsyncRead, 8192, 2, true);
        stats.record_request(IoKind::Read, IoClass::AsyncRead, 4096, 100, 1500);
        stats.record_request(IoKind::Read, IoClass::AsyncRead, 4096, 300, 1500);
        stats.record_device_io(IoKind::Read, IoClass::SyncRead, 4096, 1, false);
        stats.record_device_io(IoKind::Write, IoClass::AsyncWrite, 512, 1, true);
        stats.record_request(IoKind::Write, IoClass::AsyncWrite, 512, 0, 1 << 20);
        stats.record_write_error();
        stats.record_checksum_error();
        stats.set_queue_depth(IoClass::AsyncWrite, 7, 2);
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.read_ops, 2);
        assert_eq!(snapshot.read_bytes, 12288);
        assert_eq!(snapshot.read_errors, 1);
        assert_eq!(snapshot.write_ops, 1);
        assert_eq!(snapshot.write_bytes, 512);
        assert_eq!(snapshot.write_errors, 1);
        assert_eq!(snapshot.checksum_errors, 1);
        assert_eq!(snapshot.read.requests, 3);
        assert_eq!(snapshot.read.disk_wait_ns(), 4000 / 3);
        assert_eq!(snapshot.read.total_wait_ns(), (1500 + 1600 + 1800) / 3);
        assert_eq!(snapshot.read.disk_histogram[9], 1);
        assert_eq!(snapshot.read.disk_histogram[10], 2);
        assert_eq!(snapshot.write.disk_histogram[20], 1);
        let async_read = snapshot.class(IoClass::AsyncRead);
        assert_eq!(async_read.requests, 2);
        assert_eq!(async_read.queue_wait_ns(), 200);
        assert_eq!(async_read.aggregated_histogram[13], 1);
        assert_eq!(
            snapshot.class(IoClass::SyncRead).individual_histogram[12],
            1
        );
        assert_eq!(snapshot.class(IoClass::AsyncWrite).pending, 7);
        assert_eq!(snapshot.class(IoClass::AsyncWrite).active, 2);

        stats.record_device_io(IoKind::Read, IoClass::SyncRead, 100, 1, true);
        stats.record_request(IoKind::Read, IoClass::SyncRead, 100, 64, 64);
        let delta = stats.snapshot().since(&snapshot);
        assert_eq!(delta.read_ops, 1);
        assert_eq!(delta.read_bytes, 100);
        assert_eq!(delta.write_ops, 0);
        assert_eq!(delta.read.disk_histogram[6], 1);
        assert_eq!(delta.read.disk_histogram.iter().sum::<u64>(), 1);
        assert_eq!(delta.class(IoClass::SyncRead).queue_histogram[6], 1);
        assert_eq!(
            delta.class(IoClass::AsyncWrite).pending,
            7,
            "gauges are kept"
        );

        let mut sum = LeafStatsSnapshot::default();
        sum.add(&snapshot);
        sum.add(&snapshot);
        assert_eq!(sum.read_ops, 4);
        assert_eq!(sum.class(IoClass::AsyncWrite).pending, 14);
    }
}
