//! A fault-injecting wrapper around a block device, for crash and error tests.
//!
//! A [`FaultyDevice`] forwards to an inner device under the control of a shared [`FaultPlan`]
//! that a test can change at run time (it is an `Arc`, and every knob is an atomic or sits
//! behind a mutex). Writes are numbered from 0 in the order they reach the wrapper, durable
//! writes ([`BlockDevice::write_durable_at`], the intent log's) among them, and every write knob
//! below applies to both kinds; a durable write is not a flush, so the flush knobs do not apply
//! to it. The plan can
//!
//! - fail one write, or every write from some number on, with `EIO`;
//! - *stop* at a write: that write and every later write and flush are dropped silently while
//!   reporting success, as if the machine lost power (reads still see what reached the device);
//! - *tear* a write: only a prefix of whole 512-byte sectors reaches the device, then the
//!   device behaves as stopped;
//! - stop at a flush: it never happens, and the device behaves as stopped;
//! - fail or corrupt reads that overlap a byte range;
//! - delay every read and write by a fixed time (a slow disk), which `iostat`'s device wait
//!   must show.
//!
//! When a write is both the stop (or tear) point and a failure point, the stop wins: a dead
//! machine reports nothing.
//!
//! # The power-cut model (a volatile write cache)
//!
//! A crash is a power cut (DESIGN.md §4 "Crash model"): a disk acknowledges a write once it is
//! in its volatile cache, and only a flush makes the writes before it durable. With
//! [`FaultPlan::set_power_cut`] the wrapper models that cache. Every write still reaches the
//! inner device at once (so reads, including the pool's own, see it, as a disk serves reads from
//! its cache), but the device remembers, per write since its last successful flush, the bytes
//! the write replaced. When the device stops (a stop or tear point, or
//! [`FaultPlan::stop_now`]: the moment of the power cut), every device of the plan puts back
//! what its unflushed writes replaced and then replays them in a random order, each one
//! independently kept whole, dropped, or torn (a random subset of its 512-byte sectors kept;
//! the share kept whole is itself drawn per power cut, from 5% to 95%).
//! The choices come from a seeded generator ([`FaultPlan::power_cut_seed`]), so a failure
//! reproduces from the seed a test prints. Without the model, a stop keeps every write issued
//! before it, in order: the gentler kill -9 case, where the kernel's page cache survives.
//!
//! A durable write is what an O_DSYNC or FUA write is on a disk: on stable storage when it
//! returns, and nothing else with it. It never enters the cache, and the writes already there
//! stay volatile (a flush of the whole device would make them durable: the model would then
//! hide an intent-log commit that relies on data it never made durable). The bytes it
//! overwrites are taken out of the cached writes that covered them, both what they wrote and
//! what they replaced, so that neither the putting back nor the replay at a power cut can bring
//! older bytes back over a durable write; a write issued after it over the same bytes is cached
//! as any other, and the durable bytes are what it replaced.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};

use super::BlockDevice;

/// The sector size torn writes are cut at: the smallest atomic unit a disk promises.
pub const TEAR_SECTOR_SIZE: usize = 512;

/// "No such write": the value of an unset write-number knob.
const UNSET: u64 = u64::MAX;

/// What happens to a read that overlaps a faulty byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFaultKind {
    /// The read fails with `EIO`.
    Fail,
    /// The read succeeds, but every byte of the range in the buffer is flipped (XOR 0xFF).
    Corrupt,
}

#[derive(Clone, Debug)]
struct ReadFault {
    range: Range<u64>,
    kind: ReadFaultKind,
}

/// The shared, runtime-controllable fault plan. All knobs start unset (a transparent device).
#[derive(Debug)]
pub struct FaultPlan {
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    fail_write_at: AtomicU64,
    fail_writes_from: AtomicU64,
    stop_at_write: AtomicU64,
    stop_at_flush: AtomicU64,
    tear_at_write: AtomicU64,
    tear_sectors_kept: AtomicU64,
    fail_flushes: AtomicBool,
    stopped: AtomicBool,
    has_read_faults: AtomicBool,
    read_faults: Mutex<Vec<ReadFault>>,
    /// Whether the volatile write cache is modelled (see the module documentation).
    power_cut: AtomicBool,
    /// Seed of the power cut's choices.
    power_cut_seed: AtomicU64,
    /// The share of unflushed writes a power cut keeps whole, in millionths, or `u64::MAX`
    /// to draw it per cut (see [`FaultPlan::set_power_cut_kept_share`]).
    power_cut_kept_share: AtomicU64,
    /// The write caches of the devices under this plan (weak: a closed device is gone).
    caches: Mutex<Vec<Weak<WriteCache>>>,
    /// What the last power cut did: writes kept whole, dropped, torn.
    power_cut_outcome: Mutex<PowerCutOutcome>,
    /// Nanoseconds every read and write sleeps before reaching the device (0: none).
    io_delay_ns: AtomicU64,
    /// The device is gone ([`FaultPlan::set_removed`]).
    removed: AtomicBool,
}

/// What a power cut did to the unflushed writes of every device of a plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerCutOutcome {
    pub kept: u64,
    pub dropped: u64,
    pub torn: u64,
}

/// One write since the device's last flush: the extents of it that no later durable write has
/// overwritten (one, unless a durable write cut it). A power cut keeps, drops or tears the
/// write as a whole.
struct PendingWrite {
    extents: Vec<Extent>,
}

/// Bytes of a cached write: where, what the write put there, what it replaced.
struct Extent {
    offset: u64,
    new: Vec<u8>,
    old: Vec<u8>,
}

impl Extent {
    fn end(&self) -> u64 {
        self.offset + self.new.len() as u64
    }

    /// The part of this extent from byte `from` to byte `to` of it.
    fn part(&self, from: usize, to: usize) -> Extent {
        Extent {
            offset: self.offset + from as u64,
            new: self.new[from..to].to_vec(),
            old: self.old[from..to].to_vec(),
        }
    }
}

impl PendingWrite {
    /// A durable write overwrote `range`: forget this write's bytes there. Returns whether
    /// anything of the write is left.
    fn overwritten(&mut self, range: &Range<u64>) -> bool {
        let mut left = Vec::with_capacity(self.extents.len());
        for extent in self.extents.drain(..) {
            if extent.end() <= range.start || range.end <= extent.offset {
                left.push(extent);
                continue;
            }
            if extent.offset < range.start {
                left.push(extent.part(0, (range.start - extent.offset) as usize));
            }
            if range.end < extent.end() {
                let from = (range.end - extent.offset) as usize;
                left.push(extent.part(from, extent.new.len()));
            }
        }
        self.extents = left;
        !self.extents.is_empty()
    }
}

/// A device's volatile write cache: the writes since its last successful flush.
struct WriteCache {
    inner: Arc<dyn BlockDevice>,
    /// Index of the device under its plan (mixed into the seed).
    index: u64,
    pending: Mutex<Vec<PendingWrite>>,
}

impl WriteCache {
    /// The power cut for this device: undo every unflushed write, newest first, then replay
    /// them in a random order, each kept, dropped or torn. What the undo leaves is the device
    /// as of its last flush with every durable write since (their bytes are in no extent).
    fn cut(&self, seed: u64, kept_share: Option<f64>, outcome: &mut PowerCutOutcome) {
        let mut pending = self.pending.lock();
        for extent in pending.iter().rev().flat_map(|write| &write.extents) {
            let _ = self.inner.write_at(extent.offset, &extent.old);
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            seed ^ self.index.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        let mut order: Vec<usize> = (0..pending.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        // How much of the cache reaches the media differs from cut to cut: from almost
        // nothing to almost everything. Of the rest, a quarter is torn.
        let drawn = rng.gen_range(0.05..0.95);
        let keep = kept_share.unwrap_or(drawn);
        for index in order {
            let write = &pending[index];
            let fate = if rng.gen_bool(keep) {
                0
            } else if rng.gen_bool(0.25) {
                2
            } else {
                1
            };
            match fate {
                0 => {
                    for extent in &write.extents {
                        let _ = self.inner.write_at(extent.offset, &extent.new);
                    }
                    outcome.kept += 1;
                }
                1 => outcome.dropped += 1,
                _ => {
                    for extent in &write.extents {
                        for (sector, bytes) in extent.new.chunks(TEAR_SECTOR_SIZE).enumerate() {
                            if rng.gen_bool(0.5) {
                                let at = extent.offset + (sector * TEAR_SECTOR_SIZE) as u64;
                                let _ = self.inner.write_at(at, bytes);
                            }
                        }
                    }
                    outcome.torn += 1;
                }
            }
        }
        pending.clear();
    }
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            fail_write_at: AtomicU64::new(UNSET),
            fail_writes_from: AtomicU64::new(UNSET),
            stop_at_write: AtomicU64::new(UNSET),
            stop_at_flush: AtomicU64::new(UNSET),
            tear_at_write: AtomicU64::new(UNSET),
            tear_sectors_kept: AtomicU64::new(0),
            fail_flushes: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            has_read_faults: AtomicBool::new(false),
            read_faults: Mutex::new(Vec::new()),
            power_cut: AtomicBool::new(false),
            power_cut_seed: AtomicU64::new(0),
            power_cut_kept_share: AtomicU64::new(u64::MAX),
            caches: Mutex::new(Vec::new()),
            power_cut_outcome: Mutex::new(PowerCutOutcome::default()),
            io_delay_ns: AtomicU64::new(0),
            removed: AtomicBool::new(false),
        }
    }
}

impl FaultPlan {
    /// Make the device disappear (`removed`) or come back: while removed, every I/O fails with
    /// ENXIO and the leaf shows as REMOVED.
    pub fn set_removed(&self, removed: bool) {
        self.removed.store(removed, Ordering::SeqCst);
    }

    fn removed_error(&self) -> Option<io::Error> {
        self.removed
            .load(Ordering::SeqCst)
            .then(|| io::Error::from_raw_os_error(libc::ENXIO))
    }

    /// A new transparent plan.
    pub fn new() -> Arc<FaultPlan> {
        Arc::new(FaultPlan::default())
    }

    /// Reads seen so far (including failed ones).
    pub fn read_count(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// Writes seen so far (including failed, dropped and torn ones); the next write's number.
    pub fn write_count(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Flushes seen so far.
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(Ordering::SeqCst)
    }

    /// Fail write number `n` (counting from 0) with `EIO`.
    pub fn fail_write(&self, n: u64) {
        self.fail_write_at.store(n, Ordering::SeqCst);
    }

    /// Fail every write numbered `n` or later with `EIO`.
    pub fn fail_writes_from(&self, n: u64) {
        self.fail_writes_from.store(n, Ordering::SeqCst);
    }

    /// Fail every flush with `EIO` (or stop doing so).
    pub fn set_fail_flushes(&self, fail: bool) {
        self.fail_flushes.store(fail, Ordering::SeqCst);
    }

    /// Drop write number `n` and everything after it, reporting success (power loss).
    pub fn stop_at_write(&self, n: u64) {
        self.stop_at_write.store(n, Ordering::SeqCst);
    }

    /// Stop as flush number `n` (counting from 0) is issued: it never happens, and the
    /// device behaves as stopped (under the power-cut model: the power fails just before it).
    pub fn stop_at_flush(&self, n: u64) {
        self.stop_at_flush.store(n, Ordering::SeqCst);
    }

    /// Stop now: every later write and flush is dropped, reporting success. Under the
    /// power-cut model this is the power cut: unflushed writes are kept, dropped or torn.
    pub fn stop_now(&self) {
        self.stop();
    }

    /// Model a volatile write cache from now on, with `seed` for the power cut's choices (see
    /// the module documentation). Writes issued before this call count as flushed.
    pub fn set_power_cut(&self, seed: u64) {
        self.power_cut_seed.store(seed, Ordering::SeqCst);
        self.power_cut.store(true, Ordering::SeqCst);
    }

    /// Fix the share of unflushed writes a power cut keeps whole (0.0 to 1.0) instead of
    /// drawing it per cut: a test that must see an unflushed write lost (a guard of the model
    /// itself) cuts with 0.0, the worst case, and does not depend on the draw.
    pub fn set_power_cut_kept_share(&self, share: f64) {
        let millionths = (share.clamp(0.0, 1.0) * 1e6) as u64;
        self.power_cut_kept_share
            .store(millionths, Ordering::SeqCst);
    }

    /// The seed of the power-cut model (print it so that a failure reproduces).
    pub fn power_cut_seed(&self) -> u64 {
        self.power_cut_seed.load(Ordering::SeqCst)
    }

    /// What the last power cut did (all zero before one).
    pub fn power_cut_outcome(&self) -> PowerCutOutcome {
        *self.power_cut_outcome.lock()
    }

    /// Writes held in the devices' volatile caches (issued since their last flush).
    pub fn unflushed_writes(&self) -> usize {
        self.caches
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .map(|cache| cache.pending.lock().len())
            .sum()
    }

    /// The device stops; the first stop under the power-cut model cuts the power.
    fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        if !self.power_cut.load(Ordering::SeqCst) {
            return;
        }
        let seed = self.power_cut_seed();
        let kept_share = match self.power_cut_kept_share.load(Ordering::SeqCst) {
            u64::MAX => None,
            millionths => Some(millionths as f64 / 1e6),
        };
        let caches: Vec<Arc<WriteCache>> = self
            .caches
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut outcome = PowerCutOutcome::default();
        for cache in caches {
            cache.cut(seed, kept_share, &mut outcome);
        }
        *self.power_cut_outcome.lock() = outcome;
    }

    /// Tear write number `n`: only its first `sectors_kept` 512-byte sectors reach the device
    /// (at most all but the last sector of the write), then the device behaves as stopped.
    pub fn tear_write(&self, n: u64, sectors_kept: u64) {
        self.tear_sectors_kept.store(sectors_kept, Ordering::SeqCst);
        self.tear_at_write.store(n, Ordering::SeqCst);
    }

    /// Delay every later read and write by `delay` (zero: no delay), as a slow disk would.
    pub fn set_io_delay(&self, delay: std::time::Duration) {
        self.io_delay_ns.store(
            delay.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::SeqCst,
        );
    }

    fn delay_io(&self) {
        let ns = self.io_delay_ns.load(Ordering::Relaxed);
        if ns > 0 {
            std::thread::sleep(std::time::Duration::from_nanos(ns));
        }
    }

    /// Whether the device has stopped (by a stop or tear point, or [`FaultPlan::stop_now`]).
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Make reads overlapping `range` (absolute device bytes) fail or return corrupted bytes.
    pub fn add_read_fault(&self, range: Range<u64>, kind: ReadFaultKind) {
        self.read_faults.lock().push(ReadFault { range, kind });
        self.has_read_faults.store(true, Ordering::SeqCst);
    }

    /// Remove every read fault.
    pub fn clear_read_faults(&self) {
        self.read_faults.lock().clear();
        self.has_read_faults.store(false, Ordering::SeqCst);
    }

    /// Return to a transparent, running device, keeping the counters.
    pub fn clear(&self) {
        self.fail_write_at.store(UNSET, Ordering::SeqCst);
        self.fail_writes_from.store(UNSET, Ordering::SeqCst);
        self.stop_at_write.store(UNSET, Ordering::SeqCst);
        self.stop_at_flush.store(UNSET, Ordering::SeqCst);
        self.tear_at_write.store(UNSET, Ordering::SeqCst);
        self.fail_flushes.store(false, Ordering::SeqCst);
        self.stopped.store(false, Ordering::SeqCst);
        self.io_delay_ns.store(0, Ordering::SeqCst);
        self.clear_read_faults();
    }
}

/// What the plan decided for one write.
enum WriteDecision {
    Pass,
    Fail,
    Drop,
    Tear { bytes_kept: usize },
}

/// A block device that injects the faults its [`FaultPlan`] asks for.
pub struct FaultyDevice {
    inner: Arc<dyn BlockDevice>,
    plan: Arc<FaultPlan>,
    cache: Arc<WriteCache>,
}

impl FaultyDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, plan: Arc<FaultPlan>) -> FaultyDevice {
        let cache = {
            let mut caches = plan.caches.lock();
            caches.retain(|cache| cache.strong_count() > 0);
            let cache = Arc::new(WriteCache {
                inner: inner.clone(),
                index: caches.len() as u64,
                pending: Mutex::new(Vec::new()),
            });
            caches.push(Arc::downgrade(&cache));
            cache
        };
        FaultyDevice { inner, plan, cache }
    }

    /// A write that passed the plan: straight to the device. Under the power-cut model an
    /// ordinary write is remembered in the volatile cache, and a durable one takes the bytes it
    /// overwrites out of the cached writes (module documentation). The cache lock orders it
    /// against a power cut: a write either is done (cached or durable) when the power goes,
    /// or sees the device stopped and is lost.
    fn write_through(&self, offset: u64, data: &[u8], durable: bool) -> io::Result<()> {
        let write = |offset, data| {
            if durable {
                self.inner.write_durable_at(offset, data)
            } else {
                self.inner.write_at(offset, data)
            }
        };
        if !self.plan.power_cut.load(Ordering::SeqCst) {
            return write(offset, data);
        }
        let mut pending = self.cache.pending.lock();
        if self.plan.is_stopped() {
            return Ok(());
        }
        if durable {
            write(offset, data)?;
            let range = offset..offset + data.len() as u64;
            pending.retain_mut(|cached| cached.overwritten(&range));
            return Ok(());
        }
        let mut old = vec![0u8; data.len()];
        self.inner.read_at(offset, &mut old)?;
        write(offset, data)?;
        pending.push(PendingWrite {
            extents: vec![Extent {
                offset,
                new: data.to_vec(),
                old,
            }],
        });
        Ok(())
    }

    /// An ordinary or durable write, as the plan decides.
    fn write(&self, offset: u64, data: &[u8], durable: bool) -> io::Result<()> {
        self.plan.delay_io();
        if let Some(error) = self.plan.removed_error() {
            return Err(error);
        }
        match self.decide_write(data.len()) {
            WriteDecision::Pass => self.write_through(offset, data, durable),
            WriteDecision::Fail => Err(injected_eio()),
            WriteDecision::Drop => Ok(()),
            WriteDecision::Tear { bytes_kept } => {
                // After the power cut (the tear point stopped the device): this write's prefix
                // is what reached the media.
                if bytes_kept > 0 {
                    self.inner.write_at(offset, &data[..bytes_kept])?;
                }
                Ok(())
            }
        }
    }

    /// The plan controlling this device.
    pub fn plan(&self) -> &Arc<FaultPlan> {
        &self.plan
    }

    fn decide_write(&self, length: usize) -> WriteDecision {
        let plan = &self.plan;
        let n = plan.writes.fetch_add(1, Ordering::SeqCst);
        if plan.stopped.load(Ordering::SeqCst) {
            return WriteDecision::Drop;
        }
        if plan.stop_at_write.load(Ordering::SeqCst) == n {
            plan.stop();
            return WriteDecision::Drop;
        }
        if plan.tear_at_write.load(Ordering::SeqCst) == n {
            plan.stop();
            let sectors_in_write = (length / TEAR_SECTOR_SIZE) as u64;
            let sectors_kept = plan
                .tear_sectors_kept
                .load(Ordering::SeqCst)
                .min(sectors_in_write.saturating_sub(1));
            return WriteDecision::Tear {
                bytes_kept: sectors_kept as usize * TEAR_SECTOR_SIZE,
            };
        }
        if plan.fail_write_at.load(Ordering::SeqCst) == n
            || n >= plan.fail_writes_from.load(Ordering::SeqCst)
        {
            return WriteDecision::Fail;
        }
        WriteDecision::Pass
    }
}

/// An injected error looks exactly like the kernel's: `EIO`. The device's
/// [`BlockDevice::describe`] says that it is fault-injected.
fn injected_eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl BlockDevice for FaultyDevice {
    fn release(&self) {
        self.inner.release();
    }

    fn is_removed(&self) -> bool {
        self.plan.removed.load(Ordering::SeqCst) || self.inner.is_removed()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.plan.reads.fetch_add(1, Ordering::SeqCst);
        self.plan.delay_io();
        if let Some(error) = self.plan.removed_error() {
            return Err(error);
        }
        let faults: Vec<ReadFault> = if self.plan.has_read_faults.load(Ordering::SeqCst) {
            let end = offset.saturating_add(buf.len() as u64);
            self.plan
                .read_faults
                .lock()
                .iter()
                .filter(|fault| fault.range.start < end && offset < fault.range.end)
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        if faults.iter().any(|fault| fault.kind == ReadFaultKind::Fail) {
            return Err(injected_eio());
        }
        self.inner.read_at(offset, buf)?;
        let end = offset + buf.len() as u64;
        for fault in faults {
            let start = fault.range.start.max(offset);
            let stop = fault.range.end.min(end);
            for byte in &mut buf[(start - offset) as usize..(stop - offset) as usize] {
                *byte ^= 0xFF;
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write(offset, data, false)
    }

    /// Durable when it returns, and only this write: the writes before it stay as volatile as
    /// they were (the default, a write and a flush, would make them all durable).
    fn write_durable_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write(offset, data, true)
    }

    fn flush(&self) -> io::Result<()> {
        if let Some(error) = self.plan.removed_error() {
            return Err(error);
        }
        let n = self.plan.flushes.fetch_add(1, Ordering::SeqCst);
        if self.plan.stop_at_flush.load(Ordering::SeqCst) == n {
            self.plan.stop();
        }
        if self.plan.stopped.load(Ordering::SeqCst) {
            return Ok(());
        }
        if self.plan.fail_flushes.load(Ordering::SeqCst) {
            return Err(injected_eio());
        }
        // The writes held now are durable once the flush returns; hold the cache so that a
        // power cut cannot fall between the flush and forgetting them.
        let mut pending = self.cache.pending.lock();
        if self.plan.is_stopped() {
            return Ok(());
        }
        self.inner.flush()?;
        pending.clear();
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn describe(&self) -> String {
        format!("{} (fault-injected)", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::FileDevice;

    fn setup() -> (
        tempfile::TempDir,
        Arc<FileDevice>,
        FaultyDevice,
        Arc<FaultPlan>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(FileDevice::create_sparse(&dir.path().join("leaf"), 1 << 20).unwrap());
        let plan = FaultPlan::new();
        let device = FaultyDevice::new(file.clone(), plan.clone());
        (dir, file, device, plan)
    }

    fn read(device: &dyn BlockDevice, offset: u64, length: usize) -> Vec<u8> {
        let mut buf = vec![0u8; length];
        device.read_at(offset, &mut buf).unwrap();
        buf
    }

    #[test]
    fn stop_drops_that_write_and_everything_after_reporting_success() {
        let (_dir, file, device, plan) = setup();
        plan.stop_at_write(1);
        device.write_at(0, &[1u8; 512]).unwrap();
        assert!(!plan.is_stopped());
        device.write_at(512, &[2u8; 512]).unwrap();
        assert!(plan.is_stopped());
        device.write_at(1024, &[3u8; 512]).unwrap();
        device.flush().unwrap();
        assert_eq!(plan.write_count(), 3);
        assert_eq!(plan.flush_count(), 1);
        assert_eq!(read(&*file, 0, 512), vec![1u8; 512]);
        assert_eq!(read(&*file, 512, 1024), vec![0u8; 1024]);
        // Reads through the wrapper see what reached the device.
        assert_eq!(read(&device, 512, 512), vec![0u8; 512]);
    }

    #[test]
    fn tear_keeps_a_whole_sector_prefix_then_stops() {
        let (_dir, file, device, plan) = setup();
        plan.tear_write(0, 3);
        device.write_at(4096, &[9u8; 8 * 512]).unwrap();
        assert!(plan.is_stopped());
        device.write_at(0, &[5u8; 512]).unwrap();
        let on_disk = read(&*file, 4096, 8 * 512);
        assert_eq!(&on_disk[..3 * 512], &[9u8; 3 * 512][..]);
        assert_eq!(&on_disk[3 * 512..], &[0u8; 5 * 512][..]);
        assert_eq!(read(&*file, 0, 512), vec![0u8; 512]);
    }

    #[test]
    fn tear_never_keeps_the_whole_write() {
        let (_dir, file, device, plan) = setup();
        plan.tear_write(0, 100);
        device.write_at(0, &[9u8; 2 * 512]).unwrap();
        let on_disk = read(&*file, 0, 2 * 512);
        assert_eq!(&on_disk[..512], &[9u8; 512][..]);
        assert_eq!(&on_disk[512..], &[0u8; 512][..]);
    }

    #[test]
    fn fail_one_write_and_writes_from_n() {
        let (_dir, file, device, plan) = setup();
        plan.fail_write(1);
        plan.fail_writes_from(3);
        device.write_at(0, &[1u8; 512]).unwrap();
        let error = device.write_at(512, &[2u8; 512]).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        device.write_at(1024, &[3u8; 512]).unwrap();
        assert!(device.write_at(1536, &[4u8; 512]).is_err());
        assert!(device.write_at(2048, &[5u8; 512]).is_err());
        assert!(!plan.is_stopped());
        assert_eq!(read(&*file, 0, 512), vec![1u8; 512]);
        assert_eq!(read(&*file, 512, 512), vec![0u8; 512]);
        assert_eq!(read(&*file, 1024, 512), vec![3u8; 512]);
        assert_eq!(read(&*file, 1536, 1024), vec![0u8; 1024]);
        plan.clear();
        device.write_at(1536, &[4u8; 512]).unwrap();
        assert_eq!(read(&*file, 1536, 512), vec![4u8; 512]);
    }

    #[test]
    fn read_faults_fail_or_corrupt_overlapping_reads_only() {
        let (_dir, _file, device, plan) = setup();
        device.write_at(0, &[0x0Fu8; 4096]).unwrap();
        plan.add_read_fault(100..200, ReadFaultKind::Corrupt);
        plan.add_read_fault(2048..2049, ReadFaultKind::Fail);
        let buf = read(&device, 0, 1024);
        assert_eq!(&buf[..100], &[0x0Fu8; 100][..]);
        assert_eq!(&buf[100..200], &[0xF0u8; 100][..]);
        assert_eq!(&buf[200..], &[0x0Fu8; 824][..]);
        let mut buf = vec![0u8; 512];
        device.read_at(1536, &mut buf).unwrap();
        let mut buf = vec![0u8; 1024];
        assert!(device.read_at(1536, &mut buf).is_err());
        assert_eq!(read(&device, 2049, 100), vec![0x0Fu8; 100]);
        assert_eq!(plan.read_count(), 4);
        plan.clear_read_faults();
        assert_eq!(read(&device, 0, 1024), vec![0x0Fu8; 1024]);
    }

    /// Write 64 one-sector writes of `byte`-marked data at sectors 0..64, flush, then 64 more
    /// over them marked `byte + 1`, and cut the power. Returns the device's sectors.
    fn power_cut_after_unflushed_writes(seed: u64) -> (Vec<u8>, PowerCutOutcome) {
        let (_dir, file, device, plan) = setup();
        plan.set_power_cut(seed);
        for sector in 0..64u64 {
            device.write_at(sector * 1024, &[1u8; 1024]).unwrap();
        }
        device.flush().unwrap();
        assert_eq!(plan.unflushed_writes(), 0);
        for sector in 0..64u64 {
            device.write_at(sector * 1024, &[2u8; 1024]).unwrap();
        }
        assert_eq!(plan.unflushed_writes(), 64);
        assert_eq!(
            read(&device, 0, 1024),
            vec![2u8; 1024],
            "reads see the cache"
        );
        plan.stop_now();
        device.write_at(0, &[3u8; 1024]).unwrap();
        (read(&*file, 0, 64 * 1024), plan.power_cut_outcome())
    }

    #[test]
    fn power_cut_keeps_drops_or_tears_each_unflushed_write_and_nothing_flushed() {
        let (bytes, outcome) = power_cut_after_unflushed_writes(7);
        assert_eq!(outcome.kept + outcome.dropped + outcome.torn, 64);
        assert!(
            outcome.kept > 0 && outcome.dropped > 0 && outcome.torn > 0,
            "{outcome:?}"
        );
        let mut mixed = 0;
        for write in bytes.chunks(1024) {
            // Every sector holds the flushed or the unflushed bytes, never anything else.
            for sector in write.chunks(512) {
                assert!(sector == [1u8; 512] || sector == [2u8; 512]);
            }
            if write[..512] != write[512..] {
                mixed += 1;
            }
        }
        assert!(mixed > 0, "no torn write kept part of its sectors");
        let (again, same) = power_cut_after_unflushed_writes(7);
        assert_eq!(
            (again, same),
            (bytes, outcome),
            "a seed reproduces its power cut"
        );
    }

    /// A durable write makes only itself durable. The default `write_durable_at`, a write and
    /// a flush, made every unflushed write before it durable too, so that a commit of the
    /// intent log whose log block names data written without being made durable passed every
    /// power-cut test.
    #[test]
    fn a_durable_write_leaves_the_unflushed_writes_before_it_volatile() {
        let (_dir, file, device, plan) = setup();
        plan.set_power_cut(7);
        for sector in 0..64u64 {
            device.write_at(sector * 1024, &[1u8; 1024]).unwrap();
        }
        device.write_durable_at(512 << 10, &[9u8; 4096]).unwrap();
        assert_eq!(
            plan.unflushed_writes(),
            64,
            "the durable write flushed the cache"
        );
        assert_eq!(plan.flush_count(), 0, "a durable write counted as a flush");
        plan.stop_now();
        let outcome = plan.power_cut_outcome();
        assert_eq!(outcome.kept + outcome.dropped + outcome.torn, 64);
        assert!(outcome.dropped + outcome.torn > 0, "{outcome:?}");
        assert!(
            read(&*file, 0, 64 * 1024) != vec![1u8; 64 * 1024],
            "every unflushed write survived"
        );
        assert_eq!(read(&*file, 512 << 10, 4096), vec![9u8; 4096]);
    }

    /// Every 512-byte sector of `range` holds one of the `allowed` bytes throughout.
    fn check_sectors(bytes: &[u8], range: Range<usize>, allowed: &[u8], seed: u64) {
        for sector in range.step_by(512) {
            let value = bytes[sector];
            assert!(
                allowed.contains(&value) && bytes[sector..sector + 512].iter().all(|&b| b == value),
                "seed {seed}: sector at {sector} holds {value}, allowed {allowed:?}"
            );
        }
    }

    /// A durable write over bytes that unflushed writes covered stays, whatever the power cut
    /// does with those writes: putting back what they replaced, or replaying them, must not
    /// bring older bytes back over it. A write after it over the same bytes is volatile as any
    /// other, with the durable bytes beneath it; a cached write the durable one overwrites
    /// whole leaves the cache.
    #[test]
    fn durable_bytes_survive_every_power_cut() {
        for seed in 0..64 {
            let (_dir, file, device, plan) = setup();
            device.write_at(0, &[5u8; 16 << 10]).unwrap();
            device.flush().unwrap();
            plan.set_power_cut(seed);
            device.write_at(0, &[1u8; 4096]).unwrap();
            device.write_at(1024, &[2u8; 2048]).unwrap();
            // Cuts the first write in two and the second short.
            device.write_durable_at(1536, &[3u8; 1024]).unwrap();
            assert_eq!(plan.unflushed_writes(), 2);
            device.write_at(2048, &[4u8; 1024]).unwrap();
            device.write_at(8192, &[6u8; 512]).unwrap();
            assert_eq!(plan.unflushed_writes(), 4);
            device.write_durable_at(8192, &[7u8; 1024]).unwrap();
            assert_eq!(
                plan.unflushed_writes(),
                3,
                "an overwritten write stayed cached"
            );
            plan.stop_now();
            let bytes = read(&*file, 0, 16 << 10);
            check_sectors(&bytes, 0..1024, &[5, 1], seed);
            check_sectors(&bytes, 1024..1536, &[5, 1, 2], seed);
            check_sectors(&bytes, 1536..2048, &[3], seed);
            check_sectors(&bytes, 2048..2560, &[3, 4], seed);
            check_sectors(&bytes, 2560..3072, &[5, 1, 2, 4], seed);
            check_sectors(&bytes, 3072..4096, &[5, 1], seed);
            check_sectors(&bytes, 4096..8192, &[5], seed);
            check_sectors(&bytes, 8192..9216, &[7], seed);
            check_sectors(&bytes, 9216..16 << 10, &[5], seed);
        }
    }

    /// The write knobs count durable writes and apply to them as to any write; a durable write
    /// is no flush, so the flush knobs leave it alone.
    #[test]
    fn write_knobs_apply_to_durable_writes_and_flush_knobs_do_not() {
        let (_dir, file, device, plan) = setup();
        plan.fail_write(0);
        plan.set_fail_flushes(true);
        let error = device.write_durable_at(0, &[1u8; 512]).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        device.write_durable_at(512, &[2u8; 512]).unwrap();
        assert_eq!((plan.write_count(), plan.flush_count()), (2, 0));
        assert_eq!(read(&*file, 0, 1024)[..512], [0u8; 512]);
        assert_eq!(read(&*file, 512, 512), vec![2u8; 512]);
        plan.tear_write(2, 1);
        device.write_durable_at(4096, &[3u8; 4 * 512]).unwrap();
        assert!(plan.is_stopped());
        let torn = read(&*file, 4096, 4 * 512);
        assert_eq!(&torn[..512], &[3u8; 512][..]);
        assert_eq!(&torn[512..], &[0u8; 3 * 512][..]);
    }

    /// A stop point at a durable write is the power cut: that write is lost, and the unflushed
    /// writes before it are kept, dropped or torn.
    #[test]
    fn a_durable_write_can_be_the_stop_point_of_a_power_cut() {
        let (_dir, file, device, plan) = setup();
        plan.set_power_cut(3);
        for sector in 0..16u64 {
            device.write_at(sector * 512, &[1u8; 512]).unwrap();
        }
        plan.stop_at_write(16);
        device.write_durable_at(64 << 10, &[2u8; 4096]).unwrap();
        assert!(plan.is_stopped());
        let outcome = plan.power_cut_outcome();
        assert_eq!(outcome.kept + outcome.dropped + outcome.torn, 16);
        device.write_durable_at(128 << 10, &[3u8; 4096]).unwrap();
        assert_eq!(read(&*file, 64 << 10, 4096), vec![0u8; 4096]);
        assert_eq!(read(&*file, 128 << 10, 4096), vec![0u8; 4096]);
    }

    #[test]
    fn stopped_device_drops_flushes_and_failing_flushes_fail() {
        let (_dir, _file, device, plan) = setup();
        plan.set_fail_flushes(true);
        assert!(device.flush().is_err());
        plan.stop_now();
        device.flush().unwrap();
    }
}
