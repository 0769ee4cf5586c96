//! Dirty time logs (OpenZFS `vdev_dtl`): per leaf, the txgs whose writes it missed, and the
//! leaf's administrative state (online or offline).
//!
//! # Model
//! A mirror write that reaches some children but not others succeeds; each child that missed
//! it records the txg the write belongs to in its dirty time log (DTL). The unit is the txg,
//! not the byte: a resilver finds what to copy by walking block trees and taking the blocks
//! whose physical birth falls in a missed txg (subtrees born before the first missed txg are
//! skipped whole), exactly as OpenZFS does. A DTL is a set of disjoint, half-open txg ranges
//! `[first, end)`, small whatever the amount of data missed: a leaf that was away for an hour
//! of 5-second txgs has one range.
//!
//! The txg a write belongs to is the one the sync thread is writing
//! ([`super::VdevTree::set_syncing_txg`]), except for writes made outside syncing context:
//! blocks written ahead for the intent log and log blocks are born in an open txg, later than
//! the syncing one, and are logged against their own txg
//! ([`super::TopVdev::write_in_txg`]). Logged against the syncing txg, a side that came
//! back before their txg synced would keep them stale with no record of it, and the
//! resilver, which walks by birth txg, would skip them (OpenZFS logs a zio's own `io_txg`).
//! A repair ([`super::TopVdev::write_child`]) logs nothing when it fails: the copy stays bad,
//! and the next read or scrub of the block finds it again.
//!
//! # Persistence
//! This module is the in-memory side. The pool layer (`pool/dtl.rs`) writes every changed DTL
//! in syncing context as a space map over txg units (shift 0, one ALLOC run per range) in the
//! MOS, and loads it at import; the byte layout is in docs/design/01-vdev.md §2.14a ("Dirty time
//! logs").
//!
//! # Failed flushes
//! A write that a child took is durable only once a flush issued after it succeeds. A flush
//! that fails may have lost every write the child took since its last flush began (a device
//! whose cache was dropped, a host whose page cache forgot the dirty pages), and a later flush
//! that succeeds does not bring them back. So each leaf notes the oldest txg it took a write
//! of since its last flush began ([`DirtyTimeLog::note_written`]); a flush takes that note
//! ([`DirtyTimeLog::begin_flush`]), and if it fails the leaf logs every txg from the noted one
//! to the syncing one, as if it had missed those writes ([`DirtyTimeLog::flush_failed`]). The
//! commit protocol flushes after every txg's writes (pool/sync.rs), so a failed flush
//! normally logs the syncing txg alone; a txg whose flush was skipped (the child was offline)
//! or writes taken while a flush was in flight widen the range. OpenZFS ignores flush errors
//! (`zio_flush` is issued `CANFAIL | DONT_PROPAGATE`); tarn treats one as the loss of the
//! writes it should have made durable.
//!
//! # Offline
//! An offline leaf takes no I/O at all: writes to it are missed (and logged), reads are not
//! attempted, labels and uberblocks are not written to it. Bringing it online starts a resilver
//! of its DTL.
//!
//! # Locking and cost
//! One mutex per leaf, taken only when a write fails, when the sync thread persists the log and
//! when a scan reads or trims it. Recording a txg already in the log changes nothing (and so
//! does not dirty the log again, which keeps sync passes converging).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// The txgs a leaf missed: disjoint half-open ranges, coalesced.
#[derive(Debug, Default)]
pub struct DirtyTimeLog {
    inner: Mutex<DtlInner>,
    offline: AtomicBool,
    /// Set for a leaf opened by an import until the pool layer has loaded its persisted log
    /// and offline flag: until then a stale copy or column cannot be told from a damaged one,
    /// so reads charge it no checksum error.
    unloaded: AtomicBool,
    /// The oldest txg of a write this leaf took since its last flush began, 0 if none (see
    /// "Failed flushes" above).
    unflushed_first_txg: AtomicU64,
}

#[derive(Debug, Default)]
struct DtlInner {
    /// first txg -> end txg (exclusive).
    ranges: BTreeMap<u64, u64>,
    /// Changed since the pool layer last persisted it.
    dirty: bool,
}

impl DirtyTimeLog {
    pub fn new() -> DirtyTimeLog {
        DirtyTimeLog::default()
    }

    /// An imported leaf: its persisted log is not loaded yet (see [`DirtyTimeLog::is_loaded`]).
    pub fn mark_unloaded(&self) {
        self.unloaded.store(true, Ordering::Release);
    }

    /// The persisted log and offline flag are in (import), or the leaf is new.
    pub fn mark_loaded(&self) {
        self.unloaded.store(false, Ordering::Release);
    }

    /// Whether this log says all the pool knows of what the leaf missed: false for a leaf of
    /// a pool being imported whose log is not loaded yet.
    pub fn is_loaded(&self) -> bool {
        !self.unloaded.load(Ordering::Acquire)
    }

    /// Record that a write of `txg` missed this leaf.
    pub fn record(&self, txg: u64) {
        let mut inner = self.inner.lock();
        if inner.add(txg, txg.saturating_add(1)) {
            inner.dirty = true;
        }
    }

    /// Note that this leaf took a write of `txg`: it is durable only once a later flush
    /// succeeds. One atomic load when a write of the same or an older txg is noted already.
    pub fn note_written(&self, txg: u64) {
        let _ =
            self.unflushed_first_txg
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |first| {
                    (first == 0 || txg < first).then_some(txg)
                });
    }

    /// A flush of this leaf begins: take the oldest txg written since the last one began (0 if
    /// none). Pass it to [`DirtyTimeLog::flush_failed`] if the flush fails; writes noted from
    /// now on wait for the next flush.
    pub fn begin_flush(&self) -> u64 {
        self.unflushed_first_txg.swap(0, Ordering::AcqRel)
    }

    /// The flush that [`DirtyTimeLog::begin_flush`] returned `first` for failed while txg
    /// `syncing` was being written: every write taken before it, and during it, may be lost.
    /// Logs `[oldest of those, syncing]`; nothing if the leaf took no write meanwhile.
    pub fn flush_failed(&self, first: u64, syncing: u64) {
        let during = self.unflushed_first_txg.swap(0, Ordering::AcqRel);
        let oldest = [first, during].into_iter().filter(|&txg| txg != 0).min();
        if let Some(oldest) = oldest {
            self.add_range(oldest, syncing.max(oldest).saturating_add(1));
        }
    }

    /// Record the range `[first, end)` (loading a persisted log, tests).
    pub fn add_range(&self, first: u64, end: u64) {
        if first >= end {
            return;
        }
        let mut inner = self.inner.lock();
        if inner.add(first, end) {
            inner.dirty = true;
        }
    }

    /// Replace the whole log by `ranges` (import: the persisted log); not dirty afterwards.
    pub fn load(&self, ranges: &[(u64, u64)]) {
        let mut inner = self.inner.lock();
        inner.ranges.clear();
        for &(first, end) in ranges {
            if first < end {
                inner.add(first, end);
            }
        }
        inner.dirty = false;
    }

    /// Forget every txg before `end` (a resilver covered them); the rest stays.
    pub fn remove_before(&self, end: u64) {
        let mut inner = self.inner.lock();
        let covered: Vec<(u64, u64)> = inner
            .ranges
            .range(..end)
            .map(|(&first, &last)| (first, last))
            .collect();
        if covered.is_empty() {
            return;
        }
        for (first, last) in covered {
            inner.ranges.remove(&first);
            if last > end {
                inner.ranges.insert(end, last);
            }
        }
        inner.dirty = true;
    }

    /// The ranges, in order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.inner
            .lock()
            .ranges
            .iter()
            .map(|(&first, &end)| (first, end))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.lock().ranges.is_empty()
    }

    /// The first missed txg and one past the last, if any.
    pub fn bounds(&self) -> Option<(u64, u64)> {
        let inner = self.inner.lock();
        let first = *inner.ranges.keys().next()?;
        let end = *inner.ranges.values().next_back()?;
        Some((first, end))
    }

    /// Whether a block born in `txg` may be missing or stale on this leaf.
    pub fn contains(&self, txg: u64) -> bool {
        let inner = self.inner.lock();
        inner
            .ranges
            .range(..=txg)
            .next_back()
            .is_some_and(|(_, &end)| txg < end)
    }

    /// Take the dirty flag: true if the log changed since the last call.
    pub fn take_dirty(&self) -> bool {
        std::mem::take(&mut self.inner.lock().dirty)
    }

    /// Whether the log changed since it was last persisted.
    pub fn is_dirty(&self) -> bool {
        self.inner.lock().dirty
    }

    /// Mark the log changed (its persisted copy must be rewritten).
    pub fn mark_dirty(&self) {
        self.inner.lock().dirty = true;
    }

    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }

    pub fn set_offline(&self, offline: bool) {
        self.offline.store(offline, Ordering::Release);
    }
}

impl DtlInner {
    /// Add `[first, end)`, merging with neighbours; true if the set changed.
    fn add(&mut self, first: u64, end: u64) -> bool {
        let mut new_first = first;
        let mut new_end = end;
        // A range starting at or before `end` whose end reaches `first` overlaps or touches.
        let touching: Vec<(u64, u64)> = self
            .ranges
            .range(..=end)
            .rev()
            .take_while(|(_, &range_end)| range_end >= first)
            .map(|(&range_first, &range_end)| (range_first, range_end))
            .collect();
        if let [(only_first, only_end)] = touching[..] {
            if only_first <= first && only_end >= end {
                return false;
            }
        }
        for (range_first, range_end) in touching {
            self.ranges.remove(&range_first);
            new_first = new_first.min(range_first);
            new_end = new_end.max(range_end);
        }
        self.ranges.insert(new_first, new_end);
        true
    }
}

/// The order in which to read the children of `top` for a block born in `birth_txg`: usable
/// children whose log does not hold the birth first, then those that may be stale, then the
/// unusable ones (their reads fail at once; they stay in the list so that a caller's repair
/// sees them as bad copies).
pub fn read_order(top: &super::TopVdev, birth_txg: u64) -> Vec<usize> {
    let rank = |child: usize| {
        let leaf = &top.children[child];
        if !leaf.is_usable() {
            2
        } else if leaf.dtl.contains(birth_txg) {
            1
        } else {
            0
        }
    };
    let mut order: Vec<usize> = (0..top.child_count()).collect();
    order.sort_by_key(|&child| rank(child));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_coalesce_and_repeat_records_are_not_dirty() {
        let dtl = DirtyTimeLog::new();
        assert!(dtl.is_empty());
        dtl.record(5);
        dtl.record(6);
        dtl.record(9);
        assert_eq!(dtl.ranges(), vec![(5, 7), (9, 10)]);
        assert!(dtl.take_dirty());
        dtl.record(6);
        assert!(
            !dtl.take_dirty(),
            "a txg already logged does not dirty the log"
        );
        dtl.record(7);
        dtl.record(8);
        assert_eq!(dtl.ranges(), vec![(5, 10)]);
        assert_eq!(dtl.bounds(), Some((5, 10)));
        assert!(dtl.contains(5) && dtl.contains(9));
        assert!(!dtl.contains(4) && !dtl.contains(10));
    }

    #[test]
    fn remove_before_trims_and_keeps_later_txgs() {
        let dtl = DirtyTimeLog::new();
        dtl.add_range(3, 8);
        dtl.add_range(20, 30);
        dtl.take_dirty();
        dtl.remove_before(6);
        assert_eq!(dtl.ranges(), vec![(6, 8), (20, 30)]);
        assert!(dtl.take_dirty());
        dtl.remove_before(25);
        assert_eq!(dtl.ranges(), vec![(25, 30)]);
        dtl.remove_before(100);
        assert!(dtl.is_empty());
        dtl.load(&[(1, 2), (2, 4), (7, 7)]);
        assert_eq!(dtl.ranges(), vec![(1, 4)]);
        assert!(!dtl.is_dirty());
    }

    #[test]
    fn failed_flush_logs_the_txgs_written_since_the_last_flush_began() {
        let dtl = DirtyTimeLog::new();
        // A flush with nothing written since the last one loses nothing.
        let first = dtl.begin_flush();
        dtl.flush_failed(first, 4);
        assert!(dtl.is_empty());
        // Txg 5 written and flushed: a failed flush in txg 6 logs txg 6 alone.
        dtl.note_written(5);
        assert_eq!(dtl.begin_flush(), 5);
        dtl.note_written(6);
        dtl.note_written(6);
        let first = dtl.begin_flush();
        assert_eq!(first, 6);
        dtl.flush_failed(first, 6);
        assert_eq!(dtl.ranges(), vec![(6, 7)]);
        assert!(dtl.take_dirty());
        // Txgs 8 and 9 written with no flush between (8's was skipped), a write of 9 taken
        // while 9's flush was in flight: the failed flush logs 8 and 9, and the write taken
        // meanwhile is not left for the next flush to forget.
        dtl.note_written(8);
        dtl.note_written(9);
        let first = dtl.begin_flush();
        dtl.note_written(9);
        dtl.flush_failed(first, 9);
        assert_eq!(dtl.ranges(), vec![(6, 7), (8, 10)]);
        assert_eq!(dtl.begin_flush(), 0);
        // An older txg noted after a newer one (a write logged late) still counts.
        dtl.note_written(12);
        dtl.note_written(11);
        let first = dtl.begin_flush();
        assert_eq!(first, 11);
        // A write taken during a flush that succeeds waits for the next flush.
        dtl.note_written(12);
        assert_eq!(dtl.begin_flush(), 12);
    }

    #[test]
    fn offline_flag() {
        let dtl = DirtyTimeLog::new();
        assert!(!dtl.is_offline());
        dtl.set_offline(true);
        assert!(dtl.is_offline());
    }
}
