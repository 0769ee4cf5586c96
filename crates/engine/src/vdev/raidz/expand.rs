//! The running state of a RAID-Z expansion, shared by every generation of the vdev: how far
//! the copy is durable and how far it has been issued, and the range lock that keeps block I/O
//! and the copy apart (`reflow.rs` gives the order of the copy, `placement.rs` what the state
//! means for a block's places).
//!
//! A block I/O holds its range shared from before it reads the state until its last child I/O
//! completes; a copy batch holds exclusively its sectors and the old places its writes
//! overwrite, and moves `next` while it holds them. So a writer that saw a sector below `next`
//! writes its shadow too, and one that saw it above wrote before the batch read it.

use std::ops::Range;

use parking_lot::Mutex;

use super::placement::ReflowView;
use super::progress::{ReflowProgress, ScratchState};
use super::range_lock::{RangeGuard, RangeLock};

/// An expansion's copy: its progress (in sectors of the vdev's address space) and its lock.
#[derive(Debug)]
pub struct RaidzReflow {
    sector_size: u64,
    view: Mutex<ReflowView>,
    lock: RangeLock,
}

impl RaidzReflow {
    /// The state of an expansion that has copied nothing.
    pub fn new(sector_size: u64) -> RaidzReflow {
        RaidzReflow {
            sector_size,
            view: Mutex::new(ReflowView {
                synced: 0,
                next: 0,
                scratch: false,
            }),
            lock: RangeLock::new(),
        }
    }

    /// The state as the uberblock `progress` says (at import, before the MOS is read): durable
    /// and issued up to its offset.
    pub fn set_committed(&self, progress: &ReflowProgress) {
        let sectors = progress.offset / self.sector_size;
        *self.view.lock() = ReflowView {
            synced: sectors,
            next: sectors,
            scratch: progress.scratch == ScratchState::Valid,
        };
    }

    /// The copies up to `synced` sectors are durable and an uberblock counts them.
    pub fn commit(&self, synced: u64) {
        let mut view = self.view.lock();
        assert!(
            synced >= view.synced && synced <= view.next.max(synced),
            "reflow committed {synced} outside {}..={}",
            view.synced,
            view.next
        );
        view.synced = synced;
        view.next = view.next.max(synced);
        view.scratch = false;
    }

    /// The state for one block I/O; read it only while holding [`RaidzReflow::shared`].
    pub fn view(&self) -> ReflowView {
        *self.view.lock()
    }

    /// Hold the bytes `range` of the address space for a block I/O.
    pub fn shared(&self, range: Range<u64>) -> RangeGuard {
        self.lock.shared(range, crate::vdev::plug::kick_plugged)
    }

    /// Count sectors up to `sector` as issued without copying them: free space, which no
    /// allocation can take while its metaslab is copied.
    pub fn skip_to(&self, sector: u64) {
        let mut view = self.view.lock();
        view.next = view.next.max(sector);
    }

    /// A batch from `sector` failed: it is issued again (its sectors are still read at their
    /// old places, as nothing counted them).
    pub fn retreat(&self, sector: u64) {
        let mut view = self.view.lock();
        view.next = view.next.min(sector).max(view.synced);
    }

    /// Hold `sectors` exclusively without moving the copy (a copy of the scratch area again).
    pub fn hold(&self, sectors: Range<u64>) -> RangeGuard {
        self.lock
            .exclusive(sectors.start * self.sector_size..sectors.end * self.sector_size)
    }

    /// Hold what the copy of sectors `sectors` on a vdev going to `width` children touches (the
    /// sectors, and the old places the new ones overwrite, which start at old row `start / width`)
    /// and mark them issued. The copy runs while the guard lives.
    pub fn begin_batch(&self, sectors: Range<u64>, width: u64) -> RangeGuard {
        let first_overwritten = sectors.start / width * (width - 1);
        let guard = self.lock.exclusive(
            first_overwritten.min(sectors.start) * self.sector_size..sectors.end * self.sector_size,
        );
        let mut view = self.view.lock();
        assert_eq!(
            view.next, sectors.start,
            "a reflow batch must start where the copy stands"
        );
        view.next = sectors.end;
        guard
    }
}
