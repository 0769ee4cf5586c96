//! Scrub and resilver: background scans of every block tree while the pool keeps syncing
//! (OpenZFS `dsl_scan.c`).
//!
//! # What a scan does
//! A scrub reads every copy (every DVA, every mirror child) of every block born up to the txg
//! the scan started in, verifies each against its checksum and rewrites bad copies from a good
//! one. A resilver does the same for the blocks born in the txgs some leaf missed (the union of
//! the leaves' dirty time logs, [`crate::vdev::dtl`]): subtrees born before the first missed txg
//! are skipped whole, so a resilver costs what was missed, not the pool's size. Blocks born
//! after the scan started are skipped: they were written to every usable child.
//!
//! # Order and bookmark
//! The object sets are scanned one after another: the MOS first, then every dataset (heads and
//! snapshots) in MOS object order, each with the resumable post-order walk of
//! [`crate::object::traverse`]. A dataset's walk skips blocks born at or before its previous
//! snapshot's txg (a clone's: its origin's): the older snapshot's walk reads those. The
//! position is (object set, object, block id) and is persisted, with the counters, in the
//! txg that advanced it. Each walk is synchronous (every block read is verified before the
//! bookmark passes it), so the bookmark advances only over I/O that has been issued and
//! completed. A resumed scan re-reads the tree of the current txg from the bookmark on: a block
//! freed meanwhile is simply not in it, a block written meanwhile is born after the scan's
//! last txg and skipped.
//!
//! # The namespace changing under a scan (OpenZFS `dsl_scan_ds_destroyed` and friends)
//! A dataset's walk covers the blocks born after its previous snapshot; the blocks of a
//! snapshot's own interval are walked with the snapshot. When a snapshot S (previous snapshot
//! P, next dataset N: a later snapshot or the head) is destroyed, the blocks born in
//! `(P, S]` that N still holds become N's to cover, and N's walk now starts from P. If the
//! scan has already walked N, or is walking it, and has not finished S, nobody would walk
//! them. Nor when it has not reached N yet: the destroy runs in its txg's sync before that
//! txg's scan round, and the round reads the records of the last synced txg, in which N's
//! walk still starts from S; a round that reaches N walks it from there. So whenever the scan
//! has not finished S, it records a *catch-up*, a walk of N's tree restricted to births in
//! `(P, S]`, done after the regular walks (cursor object set [`CURSOR_CATCH_UP`]). The same
//! holds for a destroy earlier in the sync that starts the scan: the new scan's walks read
//! the last synced txg's records, in which S still stands, so the destroys of that sync are
//! kept until it ends and owed by a scan starting in it as if it had been running. When N's
//! own walk starts later from P or below, it covers the catch-up, which is dropped then. A
//! catch-up owed to a dataset that is destroyed in turn passes to its next dataset.
//! A snapshot created during the regular walks comes after the cursor (MOS object numbers
//! only grow) and is walked with its whole interval, and its head's walk starts from it. But
//! a catch-up owed to its head walks the head's tree as it is when the walk gets there, and
//! what the head drops of those births after the snapshot is held by the snapshot alone; and
//! the regular walks may end without the snapshot (a round reads the last synced records,
//! which lack one taken in its own sync). So the new snapshot owes every catch-up its head
//! owes; a catch-up of a snapshot taken in the current sync waits for the next txg, in which
//! its record is synced. (Found by `tarn-stress` and by the storm test of
//! tests/scan_namespace.rs: a file's blocks kept only by such a snapshot went unverified.)
//! A rollback
//! leaves the head with blocks born at or before its snapshot, which the snapshot's walk
//! covers; an incremental receive's clone swap gives the head a tree whose blocks after the
//! source snapshot belong to the received snapshot, a new object walked later.
//! The catch-ups and the leaves that were unusable during the scan or attached after it
//! started (whose DTLs its end must not clear) are persisted with the scan's state (pool feature `com.tarn:scan_catch_up`;
//! without it, only in memory, as before).
//!
//! # Context
//! The scan runs in the sync thread, in pass 1 after the background frees: the trees it walks
//! (the last synced txg's) stay valid for the whole sync, since nothing freed in this txg is
//! reallocated before two more commit (invariant 3). Its reads go through the scrub I/O class
//! of the vdev queues (`vdev_scrub_max_active`), so the pool's own reads overtake them. The walk
//! collects up to 64 data blocks (with the indirect blocks it finishes on the way), then
//! [`SCAN_READERS`] threads read and verify them, so that the devices see several reads at once;
//! a resilver's writes of the blocks read are issued without waiting ([`ResilverWrites`], up to
//! 32 MiB in flight), so that the next reads overlap them. The bookmark moves past the batch
//! only when all its reads and writes are done.
//!
//! # Throttle
//! A txg scans for `scrub_min_time_ms` (`resilver_min_time_ms` for a resilver) and then stops
//! until the next; while a scan is active the sync thread syncs txgs back to back, as it does
//! for background frees, so a scan uses roughly the share of the disk that those times give it
//! against the pool's writes. `scan_blocks_per_txg_max` (unlimited by default) caps the blocks
//! per txg and lets the scan ride the txg timer instead: a slow, predictable scan for tests.
//! Reads are sorted into on-disk order only within one walk chunk (64 data blocks and the
//! indirect blocks finished with them); OpenZFS's sequential scrub, which gathers a large part
//! of the tree in memory (`zfs_scan_vdev_limit`) and issues it in offset order, is not done.
//!
//! # Counting (what `pool status` reports)
//! `examined` (zpool's "scanned") and `issued` both add a block's allocated bytes (every DVA,
//! one mirror child's worth) once, when its copies have been read and verified, however many
//! copies that took: a scan reads a chunk right after walking it, so `issued` equals
//! `examined` whenever the state is published, and never passes it (zpool's issued <=
//! scanned). `copies_bad` counts every copy found bad, `repaired` the bytes on disk of every
//! copy rewritten, `unrepaired` the bad copies whose rewrite failed (the leaf's queue counts
//! the write error). The walk reads the indirect and dnode blocks it descends through with
//! ordinary self-healing reads, which repair a bad copy on the child they try first before the
//! scan verifies the block; so each round also adds the growth of the pool's self-heal counts
//! ([`crate::block::pipeline::BlockIo::heal_counts`]) since the last round: as in OpenZFS,
//! where "repaired" counts every repair write made while a scan runs, a repair made by a
//! file's read during the scan is counted too. Without that, a leaf's CKSUM column grew by
//! copies that no scan reported.
//!
//! # Persistent state (MOS directory key `scan`)
//! One MOS object whose first [`SCAN_PHYS_SIZE`] bytes are [`ScanPhys`] (layout in
//! docs/design/10-pool.md §2.14b). Export, import and kill -9 resume from it: the import sees a
//! scan in state `scanning` and the next txg carries on. A resilver found necessary at import
//! (a leaf with a non-empty DTL) replaces a scrub in progress, as in OpenZFS.
//!
//! # Cost
//! Per txg while a scan runs: the blocks read in the time budget (every copy of each), the
//! indirect blocks on the path back to the bookmark, one 128-byte state rewrite in the MOS.
//! Memory: the walk's path (one indirect block per level), whatever the pool's size.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::block::blkptr::{BlockPtr, ObjectType};
use crate::block::pipeline::{CopyReport, HealCounts, PipelineError};
use crate::dataset::phys::DatasetPhys;
use crate::object::traverse::{walk_post_order_with_positions, BlockPosition, Bookmark, WalkEnd};

use crate::object::{ObjectError, Tx};
use crate::space::storage::SpaceStorage;
use crate::types::{Guid, ObjectId, Txg};

pub use super::scan_phys::{
    CatchUp, ScanExtension, ScanFunction, ScanPhys, ScanState, SCAN_KEY, SCAN_PHYS_SIZE,
};
use super::scan_phys::{CATCH_UPS_MAX, CURSOR_CATCH_UP, CURSOR_DONE};
use super::{
    kv_set_u64, lookup_mos_directory, now_seconds, PoolCore, PoolError, MOS_OBJECT_DIRECTORY,
};

/// Data blocks one walk call visits before the throttle is consulted again (and before their
/// reads are issued, [`SCAN_READERS`] at a time).
const WALK_CHUNK_BLOCKS: u64 = 64;
/// Threads that read and verify a batch of blocks at once.
const SCAN_READERS: usize = 4;
/// Bytes of blocks a resilver's writes in flight may hold before its readers wait for them.
const RESILVER_WRITE_BYTES_MAX: u64 = 32 << 20;

/// A batch's resilver writes in flight, and what those completed repaired: the readers go on
/// to the next block while the last one's writes run, up to [`RESILVER_WRITE_BYTES_MAX`].
struct ResilverWrites {
    pool: String,
    state: Mutex<ResilverWritesState>,
    changed: parking_lot::Condvar,
}

#[derive(Default)]
struct ResilverWritesState {
    bytes_in_flight: u64,
    repaired: u64,
    bytes_repaired: u64,
}

impl ResilverWrites {
    fn new(pool: &str) -> ResilverWrites {
        ResilverWrites {
            pool: pool.to_string(),
            state: Mutex::new(ResilverWritesState::default()),
            changed: parking_lot::Condvar::new(),
        }
    }

    /// Count a write of a block of `bytes` about to be issued, once there is room for it.
    fn start(&self, bytes: u64) {
        let mut state = self.state.lock();
        if state.bytes_in_flight > 0 && state.bytes_in_flight + bytes > RESILVER_WRITE_BYTES_MAX {
            // Writes this thread's plug holds would never complete while it waits.
            crate::vdev::plug::kick_plugged();
        }
        while state.bytes_in_flight > 0 && state.bytes_in_flight + bytes > RESILVER_WRITE_BYTES_MAX
        {
            self.changed.wait(&mut state);
        }
        state.bytes_in_flight += bytes;
    }

    /// A write counted by [`ResilverWrites::start`] completed with `result` (bytes written).
    fn finish(&self, bytes: u64, result: Result<u64, crate::vdev::VdevError>) {
        let mut state = self.state.lock();
        state.bytes_in_flight -= bytes;
        match result {
            Ok(written) => {
                state.repaired += 1;
                state.bytes_repaired += written;
            }
            // The leaf's queue counted the write error; the leaf's log keeps the txg.
            Err(error) => log::warn!("pool {}: resilver write failed: {error}", self.pool),
        }
        self.changed.notify_all();
    }

    /// Wait for every write to complete: the copies repaired and their bytes.
    fn wait(&self) -> (u64, u64) {
        // Writes this thread's plug holds would never complete while it waits.
        crate::vdev::plug::kick_plugged();
        let mut state = self.state.lock();
        while state.bytes_in_flight > 0 {
            self.changed.wait(&mut state);
        }
        (state.repaired, state.bytes_repaired)
    }
}

/// One round's walking state, shared by the regular walks and the catch-ups.
struct ScanWalk<'a> {
    txg: Txg,
    repair: bool,
    blocks_left: u64,
    examined_blocks: u64,
    should_pause: &'a dyn Fn(u64) -> bool,
}

/// A change to the scan asked for in open context and carried out by the next sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScanRequest {
    Start(ScanFunction),
    Cancel,
    Pause,
    Resume,
}

/// The blocks one scrub verified (tunable `scan_record_visits`, for tests): the first copy
/// (vdev, offset) of each block pointer it read. A test compares it with the pool's trees
/// after the scrub ends: every block there born at or before `max_txg` must be in it.
#[derive(Clone, Debug, Default)]
pub struct ScrubVisits {
    /// The scrub's last txg ([`ScanPhys::max_txg`]).
    pub max_txg: Txg,
    pub blocks: HashSet<(u64, u64)>,
    /// What decided the scrub's walks, in order: each walk started or resumed with another
    /// birth floor, each catch-up, each snapshot destroyed under it (for a miss's diagnosis).
    pub events: Vec<String>,
    /// The birth floor each object set's walk last used.
    floors: std::collections::HashMap<u64, Txg>,
}

/// A snapshot destroyed in a sync, as a scan must know of it (see "The namespace changing
/// under a scan").
#[derive(Clone, Copy, Debug)]
struct DestroyedSnapshot {
    /// The txg whose sync destroyed it.
    syncing: Txg,
    object: ObjectId,
    /// The txg of the snapshot before it (or of the origin), and its own.
    previous_txg: Txg,
    txg: Txg,
    /// The dataset after it, which holds what is left of its interval.
    next: ObjectId,
}

/// The scan's in-memory side (one per open pool).
#[derive(Debug, Default)]
pub struct Scanner {
    /// The MOS object holding the state, 0 until the first scan.
    object: AtomicU64,
    /// The state as of the last sync (None: the pool has never been scanned).
    pub(super) phys: Mutex<Option<ScanPhys>>,
    requests: Mutex<Vec<ScanRequest>>,
    /// Leaves that were unusable (offline, missing) at some point of the running scan, or were
    /// attached after it started: their DTLs are not cleared by it.
    unusable_during_scan: Mutex<HashSet<Guid>>,
    /// The walks namespace changes left owed (see "The namespace changing under a scan").
    catch_ups: Mutex<Vec<CatchUp>>,
    /// The snapshots destroyed so far in the txg being synced, scan or not: a scan started
    /// later in the same sync owes their walks too.
    destroyed_in_sync: Mutex<Vec<DestroyedSnapshot>>,
    /// The catch-ups or the unusable leaves changed since the state was last persisted.
    extension_dirty: std::sync::atomic::AtomicBool,
    /// When this process started or resumed the scan, and the bytes examined then (rate).
    pass: Mutex<Option<(Instant, u64)>>,
    /// The pool's self-heal counts ([`crate::block::pipeline::BlockIo::heal_counts`]) the
    /// scan has taken into its own so far (see "Counting").
    heals_counted: Mutex<HealCounts>,
    /// The blocks the running scrub verified, if `scan_record_visits` is on and the scrub
    /// started in this process (a scrub resumed at import has no record of its first part).
    pub(super) visits: Mutex<Option<ScrubVisits>>,
}

/// What `pool status` shows of a scan.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanStatus {
    pub phys: ScanPhys,
    /// Bytes examined per second since this process started (or resumed) the scan.
    pub rate_bytes_per_second: u64,
    /// Seconds left at that rate, if known.
    pub eta_seconds: Option<u64>,
}

/// Errors of scan requests.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScanRequestError {
    #[error("pool {0} is read-only: it cannot be scrubbed")]
    ReadOnly(String),
    #[error("pool {0} is currently resilvering; a scrub would be ignored until it finishes")]
    Resilvering(String),
    #[error("pool {0} is already scrubbing; use `tarn pool scrub -s {0}` to cancel it")]
    AlreadyScrubbing(String),
    #[error("pool {0} has no scrub or resilver in progress")]
    NothingToStop(String),
    #[error("pool {0} has no scrub in progress to pause")]
    NothingToPause(String),
    #[error("pool {0} is read-only: it cannot be resilvered")]
    ReadOnlyResilver(String),
}

/// What a resilver request (`pool resilver`, OpenZFS `zpool resilver`) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResilverRequest {
    /// No scan was in progress: a resilver starts with the next txg.
    Started,
    /// The resilver in progress starts again from the beginning with the next txg, over
    /// every leaf that misses txgs then.
    Restarted,
    /// The scrub in progress (running or paused) is canceled and a resilver takes its place.
    ReplacesScrub,
    /// No usable leaf misses a txg: nothing to resilver, nothing changed.
    NotNeeded,
}

impl PoolCore {
    /// At import: the persisted scan state; a scan in progress resumes with the next txg, and
    /// a leaf with missed txgs makes a resilver start (replacing a scrub in progress).
    pub(super) fn load_scan(&self) -> Result<(), PoolError> {
        if let Some(object) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, SCAN_KEY)? {
            self.scan.object.store(object, Ordering::Release);
            let mut bytes = vec![0u8; SCAN_PHYS_SIZE];
            self.storage()
                .read(ObjectId(object), 0, &mut bytes)
                .map_err(|error| PoolError::Corrupt(format!("scan state: {error}")))?;
            let phys = ScanPhys::decode(&bytes)?;
            let extension = self.read_scan_extension(ObjectId(object))?;
            *self.scan.catch_ups.lock() = extension.catch_ups;
            *self.scan.unusable_during_scan.lock() = extension.unusable.into_iter().collect();
            if phys.state == ScanState::Scanning {
                log::info!(
                    "pool {}: {} in progress resumes from its bookmark ({} of {} bytes examined)",
                    self.name,
                    phys.function.as_str(),
                    phys.examined,
                    phys.to_examine
                );
            }
            *self.scan.phys.lock() = Some(phys);
        }
        // What the import's own reads repaired is no scan's work.
        *self.scan.heals_counted.lock() = self.io.heal_counts();
        if !self.readonly {
            self.resilver_if_needed();
            // A crash between a scan's end and the txg that detaches a finished
            // replacement's old leaf leaves the replacement whole (its log empty) but
            // pending, and no scan end would come to finish it: finish it now.
            let scanning = self
                .scan
                .phys
                .lock()
                .as_ref()
                .is_some_and(|phys| phys.state == ScanState::Scanning);
            if !scanning {
                self.finish_replacements();
            }
        }
        self.update_scan_work();
        Ok(())
    }

    /// Whether a scan is running (not paused): it keeps the sync thread busy. Never on a
    /// read-only pool, which shows a persisted scan but does not carry it on.
    pub fn scan_active(&self) -> bool {
        if self.readonly {
            return false;
        }
        let running = self
            .scan
            .phys
            .lock()
            .as_ref()
            .is_some_and(|phys| phys.state == ScanState::Scanning && !phys.paused);
        running || !self.scan.requests.lock().is_empty()
    }

    /// Keep the sync thread syncing back to back while a scan runs (unless the scan is
    /// throttled per txg by `scan_blocks_per_txg_max`).
    pub(super) fn update_scan_work(&self) {
        let frees = self.background_work_pending();
        let scan = self.scan_active() && self.tunables.scan_blocks_per_txg_max == u64::MAX;
        self.txgs.set_background_work(frees || scan);
        if self.scan_active() {
            self.txgs.set_pending_work(true);
        }
    }

    /// The scan's state for `pool status`; None if the pool was never scanned.
    pub fn scan_status(&self) -> Option<ScanStatus> {
        let phys = self.scan.phys.lock().clone()?;
        let (rate, eta) = match *self.scan.pass.lock() {
            Some((started, examined_then)) if phys.state == ScanState::Scanning => {
                let seconds = started.elapsed().as_secs_f64().max(0.001);
                let rate = (phys.examined.saturating_sub(examined_then) as f64 / seconds) as u64;
                let left = phys.to_examine.saturating_sub(phys.examined);
                (rate, (rate > 0).then(|| left / rate))
            }
            _ => (0, None),
        };
        Some(ScanStatus {
            phys,
            rate_bytes_per_second: rate,
            eta_seconds: eta,
        })
    }

    /// Ask for a scrub (`pool scrub`); a paused scrub resumes. Carried out by the next sync.
    pub fn request_scrub(&self) -> Result<(), ScanRequestError> {
        if self.readonly {
            return Err(ScanRequestError::ReadOnly(self.name.clone()));
        }
        let current = self.scan.phys.lock().clone();
        let request = match current {
            Some(phys) if phys.state == ScanState::Scanning => match phys.function {
                ScanFunction::Resilver => {
                    return Err(ScanRequestError::Resilvering(self.name.clone()))
                }
                ScanFunction::Scrub if phys.paused => ScanRequest::Resume,
                ScanFunction::Scrub => {
                    return Err(ScanRequestError::AlreadyScrubbing(self.name.clone()))
                }
            },
            _ => ScanRequest::Start(ScanFunction::Scrub),
        };
        self.push_scan_request(request);
        Ok(())
    }

    /// Cancel the scrub or resilver in progress (`pool scrub -s`).
    pub fn request_scan_cancel(&self) -> Result<(), ScanRequestError> {
        let scanning = self
            .scan
            .phys
            .lock()
            .as_ref()
            .is_some_and(|phys| phys.state == ScanState::Scanning);
        if !scanning {
            return Err(ScanRequestError::NothingToStop(self.name.clone()));
        }
        self.push_scan_request(ScanRequest::Cancel);
        Ok(())
    }

    /// Pause the scrub in progress (`pool scrub -p`); `pool scrub` resumes it.
    pub fn request_scan_pause(&self) -> Result<(), ScanRequestError> {
        let scrubbing = self.scan.phys.lock().as_ref().is_some_and(|phys| {
            phys.state == ScanState::Scanning && phys.function == ScanFunction::Scrub
        });
        if !scrubbing {
            return Err(ScanRequestError::NothingToPause(self.name.clone()));
        }
        self.push_scan_request(ScanRequest::Pause);
        Ok(())
    }

    /// Start a resilver, or start the one in progress again from the beginning (`pool
    /// resilver`). As OpenZFS's `spa_scan(POOL_SCAN_RESILVER)`: when no usable leaf misses a
    /// txg there is nothing to do and nothing changes (a running scrub goes on); otherwise a
    /// scrub in progress, paused or not, gives way to the resilver, as `dsl_scan_sync` ends
    /// the scan it finds (`dsl_scan_done`, not complete) when a resilver restart is due.
    /// tarn has no deferred resilvers (OpenZFS's `resilver_defer` feature, which this command
    /// needs there): a leaf that misses txgs while a resilver runs is taken by the next one,
    /// queued when it ends, and a restart takes it at once. Carried out by the next sync.
    pub fn request_resilver(&self) -> Result<ResilverRequest, ScanRequestError> {
        if self.readonly {
            return Err(ScanRequestError::ReadOnlyResilver(self.name.clone()));
        }
        if !self.resilver_needed() {
            return Ok(ResilverRequest::NotNeeded);
        }
        let current = self.scan.phys.lock().clone();
        let outcome = match current {
            Some(phys) if phys.state == ScanState::Scanning => match phys.function {
                ScanFunction::Resilver => ResilverRequest::Restarted,
                ScanFunction::Scrub => ResilverRequest::ReplacesScrub,
            },
            _ => ResilverRequest::Started,
        };
        // Every start makes a new scan from the beginning, so one queued already does what
        // this one would.
        let queued =
            (self.scan.requests.lock()).contains(&ScanRequest::Start(ScanFunction::Resilver));
        if !queued {
            self.push_scan_request(ScanRequest::Start(ScanFunction::Resilver));
        }
        Ok(outcome)
    }

    /// Whether some usable leaf misses txgs (OpenZFS `vdev_resilver_needed`).
    fn resilver_needed(&self) -> bool {
        (self.io.vdevs.leaves()).any(|leaf| leaf.is_usable() && !leaf.dtl.is_empty())
    }

    fn push_scan_request(&self, request: ScanRequest) {
        self.scan.requests.lock().push(request);
        self.update_scan_work();
        self.txgs.kick();
    }

    /// Start a resilver if some usable leaf has missed txgs (after `pool online`, at import,
    /// after a scan that could not clear every log).
    pub fn resilver_if_needed(&self) {
        let running = self.scan.phys.lock().as_ref().is_some_and(|phys| {
            phys.state == ScanState::Scanning && phys.function == ScanFunction::Resilver
        });
        if !running {
            self.queue_resilver_if_logs();
        }
    }

    /// Queue a resilver if some usable leaf has missed txgs and none is queued yet; one in
    /// progress restarts (a leaf that just came back is included from the start).
    pub fn queue_resilver_if_logs(&self) {
        let needed = self.resilver_needed();
        let queued = self
            .scan
            .requests
            .lock()
            .contains(&ScanRequest::Start(ScanFunction::Resilver));
        if needed && !queued {
            self.push_scan_request(ScanRequest::Start(ScanFunction::Resilver));
        }
    }

    /// Note that a leaf became unusable: the running scan must not clear its log.
    pub fn note_leaf_unusable(&self, guid: Guid) {
        if self.scan.unusable_during_scan.lock().insert(guid) {
            self.scan.extension_dirty.store(true, Ordering::Release);
        }
    }

    /// Syncing context of txg `syncing`: snapshot `destroyed` (created in `txg`, its previous
    /// snapshot's txg `previous_txg`, the dataset after it `next`) is being destroyed. Owe a
    /// walk of what `next` now holds of its interval if the scan has not finished `destroyed`,
    /// and pass the catch-ups owed to `destroyed` on to `next` (see "The namespace changing
    /// under a scan"). Kept for the rest of the sync: a scan that starts later in it walks
    /// the last synced txg's records, in which the snapshot still stands, and owes the same.
    pub(super) fn scan_snapshot_destroyed(
        &self,
        syncing: Txg,
        destroyed: ObjectId,
        previous_txg: Txg,
        txg: Txg,
        next: ObjectId,
    ) {
        let event = DestroyedSnapshot {
            syncing,
            object: destroyed,
            previous_txg,
            txg,
            next,
        };
        {
            let mut recent = self.scan.destroyed_in_sync.lock();
            recent.retain(|earlier| earlier.syncing == syncing);
            recent.push(event);
        }
        let mut published = self.scan.phys.lock();
        if let Some(phys) = published
            .as_mut()
            .filter(|phys| phys.state == ScanState::Scanning)
        {
            self.owe_walk_of_destroyed(phys, &event);
        }
    }

    /// Add `owed` to `catch_ups`: merged into the one owed to the same dataset, else a new
    /// one; past [`CATCH_UPS_MAX`], every dataset is walked again from the start instead.
    /// Only while no catch-up of that dataset is being walked (widening one that is would
    /// lose the part before its bookmark).
    fn owe_catch_up(&self, phys: &mut ScanPhys, catch_ups: &mut Vec<CatchUp>, owed: CatchUp) {
        let count = catch_ups.len();
        match catch_ups
            .iter_mut()
            .find(|catch_up| catch_up.objset == owed.objset)
        {
            Some(catch_up) => {
                catch_up.min_txg = catch_up.min_txg.min(owed.min_txg);
                catch_up.max_txg = catch_up.max_txg.max(owed.max_txg);
            }
            None if count < CATCH_UPS_MAX => catch_ups.push(owed),
            None => {
                // Too many to keep: walk every dataset again from the start instead.
                log::info!(
                    "pool {}: {} catch-ups owed: the scan walks every dataset again",
                    self.name,
                    count + 1
                );
                catch_ups.clear();
                phys.cursor_objset = 0;
                phys.cursor = Bookmark::default();
            }
        }
    }

    /// Syncing context: snapshot `created` of the dataset `head` was just taken. A catch-up
    /// still owed to `head` walks the head's tree as it is when the walk gets there, and what
    /// the head drops of those births after this snapshot is held by the snapshot alone: so
    /// the snapshot owes the same walk (see "The namespace changing under a scan"). Owed even
    /// while the regular walks run, although their cursor has not reached the new number:
    /// this txg's round reads the last synced records, which lack the snapshot, and may end
    /// the regular walks without it. When a regular walk of the snapshot does come, from its
    /// previous snapshot's txg, it covers the catch-up, which is dropped then.
    pub(super) fn scan_snapshot_created(&self, head: ObjectId, created: ObjectId) {
        let mut published = self.scan.phys.lock();
        let Some(phys) = published
            .as_mut()
            .filter(|phys| phys.state == ScanState::Scanning)
        else {
            return;
        };
        let cursor = phys.cursor_objset;
        let mut catch_ups = self.scan.catch_ups.lock();
        let inherited: Vec<CatchUp> = (catch_ups.iter())
            .filter(|catch_up| catch_up.objset == head.0)
            .map(|catch_up| CatchUp {
                objset: created.0,
                ..*catch_up
            })
            .collect();
        if inherited.is_empty() {
            return;
        }
        for owed in inherited {
            self.owe_catch_up(phys, &mut catch_ups, owed);
        }
        self.scan.extension_dirty.store(true, Ordering::Release);
        if let Some(visits) = self.scan.visits.lock().as_mut() {
            visits.events.push(format!(
                "snapshot {created} of {head} taken, cursor {cursor}, catch-ups {:?}",
                *catch_ups
            ));
        }
    }

    /// What the destroy of a snapshot under the running scan `phys` owes (see
    /// [`PoolCore::scan_snapshot_destroyed`]).
    fn owe_walk_of_destroyed(&self, phys: &mut ScanPhys, event: &DestroyedSnapshot) {
        let DestroyedSnapshot {
            object: destroyed,
            previous_txg,
            txg,
            next,
            ..
        } = *event;
        let mut catch_ups = self.scan.catch_ups.lock();
        let mut changed = false;
        for (index, catch_up) in catch_ups.iter_mut().enumerate() {
            if catch_up.objset == destroyed.0 {
                catch_up.objset = next.0;
                changed = true;
                if index == 0 && phys.cursor_objset == CURSOR_CATCH_UP {
                    // The bookmark was in the destroyed tree: start again in the next one.
                    phys.cursor = Bookmark::default();
                }
            }
        }
        let cursor = phys.cursor_objset;
        let regular = cursor != CURSOR_CATCH_UP && cursor != CURSOR_DONE;
        // The regular walks have not finished `destroyed`; once they are all done, it was
        // walked with its whole interval. Owed whether or not they have reached `next`: this
        // txg's round reads the last synced records, in which `next` still starts from
        // `destroyed` (see "The namespace changing under a scan").
        let owed = regular && destroyed.0 >= cursor;
        if owed && previous_txg < txg {
            changed = true;
            // (Only during the regular walks: no catch-up is being walked, so widening one
            // loses no part before a bookmark.)
            self.owe_catch_up(
                phys,
                &mut catch_ups,
                CatchUp {
                    objset: next.0,
                    min_txg: previous_txg,
                    max_txg: txg,
                },
            );
        }
        if let Some(visits) = self.scan.visits.lock().as_mut() {
            visits.events.push(format!(
                "snapshot {destroyed} (births ({previous_txg}, {txg}]) destroyed, next {next}, cursor {cursor}, owed {owed}, catch-ups {:?}",
                *catch_ups
            ));
        }
        if changed {
            log::debug!(
                "pool {}: snapshot {destroyed} destroyed under the scan (cursor {cursor}): catch-ups {:?}",
                self.name,
                *catch_ups
            );
            self.scan.extension_dirty.store(true, Ordering::Release);
        }
    }

    /// Wait until no scan of `function` is in progress (`pool wait -t scrub|resilver`). A
    /// paused scrub is not in progress for this, as for OpenZFS's `zpool wait`: it does not
    /// end by itself, so waiting for it would wait until someone resumed it. A scrub asked
    /// to start or to resume is waited for.
    pub fn wait_scan(&self, function: ScanFunction) -> Result<(), PoolError> {
        loop {
            let running = self.scan.phys.lock().as_ref().is_some_and(|phys| {
                phys.state == ScanState::Scanning && phys.function == function && !phys.paused
            });
            let requested = self.scan.requests.lock().iter().any(|&request| {
                request == ScanRequest::Start(function)
                    || (request == ScanRequest::Resume && function == ScanFunction::Scrub)
            });
            let busy = running || requested;
            if !busy {
                return Ok(());
            }
            if self.txgs.is_shutting_down() {
                return Err(PoolError::Corrupt(format!(
                    "pool {} was exported while waiting for a {}",
                    self.name,
                    function.as_str()
                )));
            }
            if let Some(failure) = self.txgs.failure() {
                return Err(PoolError::Corrupt(format!(
                    "pool {}: syncing failed while waiting for a {}: {failure}",
                    self.name,
                    function.as_str()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Syncing context, pass 1: apply the requests, then one bounded round of the scan, and
    /// persist its state.
    pub(super) fn scan_sync(&self, txg: Txg, sync_started: Instant) -> Result<(), PoolError> {
        if self.readonly {
            return Ok(());
        }
        // The requests stay queued until their outcome is published below, so that a waiter
        // never sees neither the request nor the scan it started.
        let requests = self.scan.requests.lock().clone();
        let mut phys = self.scan.phys.lock().clone();
        let mut changed = false;
        let mut just_finished = false;
        for &request in &requests {
            changed = true;
            match request {
                ScanRequest::Start(function) => {
                    let mut started = self.new_scan(function, txg);
                    *self.scan.pass.lock() = Some((Instant::now(), 0));
                    *self.scan.heals_counted.lock() = self.io.heal_counts();
                    self.scan.unusable_during_scan.lock().clear();
                    self.scan.catch_ups.lock().clear();
                    self.scan.extension_dirty.store(true, Ordering::Release);
                    *self.scan.visits.lock() = (self.tunables.scan_record_visits
                        && function == ScanFunction::Scrub)
                        .then(|| ScrubVisits {
                            max_txg: Txg(txg.0.saturating_sub(1)),
                            ..ScrubVisits::default()
                        });
                    // Snapshots this sync destroyed before the scan started are in the records
                    // its walks read (the last synced txg's): their intervals are owed as if
                    // they had gone under it.
                    let destroyed: Vec<DestroyedSnapshot> = self
                        .scan
                        .destroyed_in_sync
                        .lock()
                        .iter()
                        .filter(|event| event.syncing == txg)
                        .copied()
                        .collect();
                    for event in &destroyed {
                        self.owe_walk_of_destroyed(&mut started, event);
                    }
                    phys = Some(started);
                    log::info!(
                        "pool {}: {} started in txg {txg}",
                        self.name,
                        function.as_str()
                    );
                }
                ScanRequest::Cancel => {
                    if let Some(phys) = phys.as_mut().filter(|p| p.state == ScanState::Scanning) {
                        phys.state = ScanState::Canceled;
                        phys.end_time = now_seconds();
                        log::info!("pool {}: {} canceled", self.name, phys.function.as_str());
                    }
                }
                ScanRequest::Pause | ScanRequest::Resume => {
                    if let Some(phys) = phys.as_mut().filter(|p| p.state == ScanState::Scanning) {
                        phys.paused = request == ScanRequest::Pause;
                        if !phys.paused {
                            *self.scan.pass.lock() = Some((Instant::now(), phys.examined));
                            *self.scan.heals_counted.lock() = self.io.heal_counts();
                        }
                    }
                }
            }
        }
        let Some(mut phys) = phys else {
            self.scan.requests.lock().drain(..requests.len());
            return Ok(());
        };
        // Published before the round, so that `pool status` shows a scan that was just started
        // while its first round runs.
        *self.scan.phys.lock() = Some(phys.clone());
        self.scan.requests.lock().drain(..requests.len());
        if phys.state == ScanState::Scanning && !phys.paused {
            if self.scan.pass.lock().is_none() {
                *self.scan.pass.lock() = Some((Instant::now(), phys.examined));
            }
            for leaf in self.io.vdevs.leaves() {
                if !leaf.is_usable() {
                    self.note_leaf_unusable(leaf.guid);
                }
            }
            self.scan_round(&mut phys, txg, sync_started)?;
            self.count_heals(&mut phys);
            changed = true;
            if phys.cursor_objset == CURSOR_DONE {
                self.finish_scan(&mut phys);
                just_finished = true;
            }
        }
        if self.scan.extension_dirty.load(Ordering::Acquire) {
            changed = true;
        }
        if changed {
            self.persist_scan(&phys, txg)?;
        }
        // A leaf that missed txgs during the scan (or came back meanwhile) is resilvered next;
        // the resilver is queued before the finished state is published, so that a waiter
        // never sees neither. Not after a scan that could not rewrite some copies (the leaf is
        // failing) or found blocks with no good copy (a later scan would find them again):
        // resilvering again and again would only load the pool; `pool online` retries.
        if just_finished && phys.unrepaired == 0 && phys.errors == 0 {
            self.queue_resilver_if_logs();
            // A replacement that is now whole takes its old leaf's place (vdev_change.rs).
            self.finish_replacements();
        }
        *self.scan.phys.lock() = Some(phys);
        self.update_scan_work();
        Ok(())
    }

    /// Add to the scan's counts the copies that self-healing reads found bad and rewrote
    /// since the last round (see "Counting").
    fn count_heals(&self, phys: &mut ScanPhys) {
        let now = self.io.heal_counts();
        let mut counted = self.scan.heals_counted.lock();
        let bad = now.copies_bad.saturating_sub(counted.copies_bad);
        let repaired = now.copies_repaired.saturating_sub(counted.copies_repaired);
        phys.copies_bad += bad;
        phys.repaired += now.bytes_repaired.saturating_sub(counted.bytes_repaired);
        phys.unrepaired += bad.saturating_sub(repaired);
        *counted = now;
    }

    fn new_scan(&self, function: ScanFunction, txg: Txg) -> ScanPhys {
        let min_txg = match function {
            ScanFunction::Scrub => Txg(0),
            ScanFunction::Resilver => Txg(self
                .io
                .vdevs
                .leaves()
                .filter_map(|leaf| leaf.dtl.bounds())
                .map(|(first, _)| first)
                .min()
                .unwrap_or(1)
                .saturating_sub(1)),
        };
        ScanPhys {
            function,
            state: ScanState::Scanning,
            paused: false,
            min_txg,
            // The trees walked are the last synced txg's: everything born in this txg or later
            // reached every usable child.
            max_txg: Txg(txg.0.saturating_sub(1)),
            start_time: now_seconds(),
            end_time: 0,
            to_examine: self.io.space.totals().allocated,
            examined: 0,
            issued: 0,
            repaired: 0,
            errors: 0,
            cursor_objset: 0,
            cursor: Bookmark::default(),
            copies_bad: 0,
            unrepaired: 0,
        }
    }

    /// The object sets still to scan from `cursor_objset` on, as (key, root, min birth).
    fn objsets_from(
        &self,
        cursor: u64,
        min_txg: Txg,
    ) -> Result<Vec<(u64, BlockPtr, Txg)>, PoolError> {
        let mut found = Vec::new();
        if cursor == 0 {
            found.push((0, self.mos.synced_root(), min_txg));
        }
        for (object, dnode) in self.mos.synced_objects()? {
            if dnode.object_type != ObjectType::Dataset || object.0 < cursor.max(1) {
                continue;
            }
            match DatasetPhys::decode(&dnode.bonus) {
                Ok(phys) => {
                    let min_birth = Txg(phys.prev_snapshot_txg.0.max(min_txg.0));
                    found.push((object.0, phys.root.clone(), min_birth));
                }
                Err(error) => log::error!(
                    "pool {}: scan skips dataset record {object}: {error}",
                    self.name
                ),
            }
        }
        Ok(found)
    }

    /// Scan until the throttle says stop or every object set is done.
    fn scan_round(
        &self,
        phys: &mut ScanPhys,
        txg: Txg,
        sync_started: Instant,
    ) -> Result<(), PoolError> {
        // The walk's own reads (indirect and dnode blocks) are scrub I/O too.
        let _class = crate::vdev::queue::ReadClassScope::new(crate::vdev::IoClass::Scrub);
        let min_time = Duration::from_millis(match phys.function {
            ScanFunction::Scrub => self.tunables.scrub_min_time_ms,
            ScanFunction::Resilver => self.tunables.resilver_min_time_ms,
        });
        let repair = self.io.is_writable();
        let objsets = match phys.cursor_objset {
            CURSOR_CATCH_UP | CURSOR_DONE => Vec::new(),
            cursor => self.objsets_from(cursor, phys.min_txg)?,
        };
        let mut walk = ScanWalk {
            txg,
            repair,
            blocks_left: self.tunables.scan_blocks_per_txg_max,
            examined_blocks: 0,
            should_pause: &|blocks_left: u64| {
                blocks_left == 0
                    || sync_started.elapsed() >= min_time
                    || self.txgs.is_shutting_down()
            },
        };
        for (key, root, min_birth) in objsets {
            if key != phys.cursor_objset {
                phys.cursor_objset = key;
                phys.cursor = Bookmark::default();
                // A walk of the whole tree from this floor covers what a catch-up owed to it
                // would walk again (a destroy before the scan reached the dataset).
                let mut catch_ups = self.scan.catch_ups.lock();
                let owed = catch_ups.len();
                catch_ups.retain(|owed| !(owed.objset == key && owed.min_txg >= min_birth));
                if catch_ups.len() != owed {
                    self.scan.extension_dirty.store(true, Ordering::Release);
                }
            }
            if let Some(visits) = self.scan.visits.lock().as_mut() {
                if visits.floors.insert(key, min_birth) != Some(min_birth) {
                    visits.events.push(format!(
                        "txg {txg}: walk of {key} from birth {min_birth} (bookmark {:?})",
                        phys.cursor
                    ));
                }
            }
            let max_txg = phys.max_txg;
            if !self.walk_objset(phys, &mut walk, key, &root, min_birth, max_txg) {
                return Ok(());
            }
        }
        // Then the walks that snapshots destroyed under the scan left owed, oldest first.
        loop {
            let first = self.scan.catch_ups.lock().first().copied();
            let Some(catch_up) = first else {
                break;
            };
            if phys.cursor_objset != CURSOR_CATCH_UP {
                phys.cursor_objset = CURSOR_CATCH_UP;
                phys.cursor = Bookmark::default();
            }
            // The dataset's record as last synced: its tree is what the walk reads.
            let dnode = self.mos.synced_dnode(ObjectId(catch_up.objset))?;
            let taken_in_this_sync = || {
                (self.mos.info(ObjectId(catch_up.objset)))
                    .is_ok_and(|info| info.object_type == ObjectType::Dataset)
            };
            if dnode.object_type != ObjectType::Dataset && taken_in_this_sync() {
                // A snapshot taken in this sync (`scan_snapshot_created`): its record is
                // walked from the next txg on.
                return Ok(());
            }
            let root = (dnode.object_type == ObjectType::Dataset)
                .then(|| DatasetPhys::decode(&dnode.bonus).ok())
                .flatten()
                .map(|record| record.root);
            if let Some(root) = root {
                let min_birth = catch_up.min_txg.max(phys.min_txg);
                let max_birth = catch_up.max_txg.min(phys.max_txg);
                if let Some(visits) = self.scan.visits.lock().as_mut() {
                    visits.events.push(format!(
                        "txg {txg}: catch-up of {} births ({min_birth}, {max_birth}] (bookmark {:?})",
                        catch_up.objset, phys.cursor
                    ));
                }
                if min_birth < max_birth
                    && !self.walk_objset(
                        phys,
                        &mut walk,
                        catch_up.objset,
                        &root,
                        min_birth,
                        max_birth,
                    )
                {
                    return Ok(());
                }
            }
            self.scan.catch_ups.lock().retain(|owed| *owed != catch_up);
            self.scan.extension_dirty.store(true, Ordering::Release);
            phys.cursor = Bookmark::default();
        }
        phys.cursor_objset = CURSOR_DONE;
        Ok(())
    }

    /// Walk the tree `root` of object set `key` (0 the MOS, else a dataset record) from the
    /// bookmark, verifying every block born in `(min_birth, max_birth]`, until it is done (true)
    /// or the throttle says stop (false, the bookmark in `phys`).
    fn walk_objset(
        &self,
        phys: &mut ScanPhys,
        walk: &mut ScanWalk<'_>,
        key: u64,
        root: &BlockPtr,
        min_birth: Txg,
        max_birth: Txg,
    ) -> bool {
        loop {
            if (walk.should_pause)(walk.blocks_left) {
                log::debug!(
                    "pool {}: txg {}: scanned {} blocks, paused at object set {key} {:?}",
                    self.name,
                    walk.txg,
                    walk.examined_blocks,
                    phys.cursor
                );
                return false;
            }
            let mut budget = WALK_CHUNK_BLOCKS.min(walk.blocks_left);
            let before = budget;
            let mut batch: Vec<(BlockPtr, BlockPosition)> = Vec::new();
            let mut visit = |bp: &BlockPtr, position: BlockPosition| -> Result<(), ObjectError> {
                if !(bp.is_hole() || bp.embedded || bp.birth_physical > max_birth) {
                    batch.push((bp.clone(), position));
                }
                Ok(())
            };
            let end = walk_post_order_with_positions(
                &self.io,
                root,
                min_birth,
                phys.cursor,
                &mut budget,
                &mut visit,
            );
            walk.blocks_left = walk.blocks_left.saturating_sub(before - budget.min(before));
            // Every block the walk passed is read and verified before the bookmark moves,
            // in on-disk order within the batch (a window of one walk chunk).
            batch.sort_by_key(|(bp, _)| bp.copies().next().map(|dva| (dva.vdev, dva.offset)));
            walk.examined_blocks += batch.len() as u64;
            self.verify_batch(key, &batch, walk.repair, phys);
            match end {
                Ok(WalkEnd::Done) => return true,
                Ok(WalkEnd::Paused(bookmark)) => phys.cursor = bookmark,
                Err(error) => {
                    // A tree that cannot be walked (an unreadable indirect block): count
                    // it and go on with the next object set.
                    phys.errors += 1;
                    log::error!(
                        "pool {}: scan of object set {key} stopped at {:?}: {error}",
                        self.name,
                        phys.cursor
                    );
                    return true;
                }
            }
        }
    }

    /// Read and verify every copy of each block of `batch` (blocks of object set `key`, with
    /// their positions) with [`SCAN_READERS`] threads, so that the devices see several reads at
    /// once (the walk itself reads one block at a time), and add the outcome to `phys`; a block
    /// with no good copy goes into the error log.
    fn verify_batch(
        &self,
        key: u64,
        batch: &[(BlockPtr, BlockPosition)],
        repair: bool,
        phys: &mut ScanPhys,
    ) {
        let function = phys.function;
        let next = AtomicU64::new(0);
        let totals = Mutex::new(phys.clone());
        let writes = Arc::new(ResilverWrites::new(&self.name));
        let work = || loop {
            let index = next.fetch_add(1, Ordering::Relaxed) as usize;
            let Some((bp, position)) = batch.get(index) else {
                return;
            };
            let outcome = match function {
                ScanFunction::Resilver if !bp.is_gang() => self.resilver_block(bp, &writes),
                _ => self.io.verify_all_copies(bp, repair),
            };
            let mut totals = totals.lock();
            // Both count the block's allocated bytes once, however many copies were read:
            // issued can never pass examined (see "Counting").
            totals.examined += bp.size_allocated();
            totals.issued += bp.size_allocated();
            match outcome {
                Ok(copies) => {
                    totals.copies_bad += copies.bad;
                    totals.repaired += copies.bytes_repaired;
                    totals.unrepaired += copies.bad.saturating_sub(copies.repaired);
                }
                Err(error) => {
                    totals.errors += 1;
                    log::error!("pool {}: scan: {bp}: {error}", self.name);
                    self.record_scan_damage(ObjectId(key), *position, bp);
                }
            }
        };
        if let Some(visits) = self.scan.visits.lock().as_mut() {
            visits.blocks.extend((batch.iter()).filter_map(|(bp, _)| {
                bp.copies()
                    .next()
                    .map(|dva| (u64::from(dva.vdev.0), dva.offset))
            }));
        }
        let readers = SCAN_READERS.min(batch.len());
        if readers <= 1 {
            work();
        } else {
            std::thread::scope(|scope| {
                for _ in 0..readers {
                    scope.spawn(work);
                }
            });
        }
        let mut totals = totals.into_inner();
        // The batch's resilver writes were counted as bad copies not repaired: those done are
        // repaired. The bookmark moves past the batch only once every one has completed.
        let (repaired, bytes_repaired) = writes.wait();
        totals.repaired += bytes_repaired;
        totals.unrepaired = totals.unrepaired.saturating_sub(repaired);
        *phys = totals;
    }

    /// Resilver one block (not a gang): read one good copy, verified, from a child that did
    /// not miss its txg, and write it to every usable child whose DTL holds the block's birth,
    /// without reading those (their copies are stale or missing). So a resilver reads and
    /// writes about what was missed (OpenZFS's resilver writes DTL children the same way). The
    /// writes are issued, not waited for: `writes` counts them (and their outcome), so that
    /// the next block's reads overlap them.
    fn resilver_block(
        &self,
        bp: &BlockPtr,
        writes: &Arc<ResilverWrites>,
    ) -> Result<CopyReport, PipelineError> {
        let birth = bp.birth_physical.0;
        let mut report = CopyReport::default();
        let _class = crate::vdev::queue::ReadClassScope::new(crate::vdev::IoClass::Scrub);
        // Syncing context: the tree does not change under the scan (vdev::tree).
        let stale: Vec<(&crate::block::blkptr::Dva, usize)> = bp
            .copies()
            .filter_map(|dva| self.io.vdevs.top(dva.vdev).map(|top| (dva, top)))
            .flat_map(|(dva, top)| {
                (0..top.child_count())
                    .filter(|&child| {
                        let leaf = &top.children[child];
                        leaf.is_usable() && leaf.dtl.contains(birth)
                    })
                    .map(move |child| (dva, child))
                    .collect::<Vec<_>>()
            })
            .collect();
        // One copy read (the pipeline tries children that did not miss the txg first).
        let physical = Arc::new(self.io.read_physical(bp, false)?);
        report.copies = 1;
        for (dva, child) in stale {
            report.bad += 1;
            let Some(top) = self.io.vdevs.top(dva.vdev) else {
                continue;
            };
            let bytes = physical.len() as u64;
            writes.start(bytes);
            let outcome = writes.clone();
            let held = physical.clone();
            top.rewrite_child_async(
                child,
                dva.offset,
                dva.size_allocated,
                birth,
                physical.clone(),
                move |result| {
                    outcome.finish(bytes, result);
                    // The last of the block's writes gives its buffer back.
                    if let Ok(buffer) = Arc::try_unwrap(held) {
                        crate::vdev::buffers::give(buffer);
                    }
                },
            );
        }
        if let Ok(buffer) = Arc::try_unwrap(physical) {
            crate::vdev::buffers::give(buffer);
        }
        Ok(report)
    }

    fn finish_scan(&self, phys: &mut ScanPhys) {
        phys.state = ScanState::Finished;
        phys.end_time = now_seconds();
        *self.scan.pass.lock() = None;
        // Every block born up to max_txg was read on every usable child and each bad copy
        // rewritten (a scrub as much as a resilver): the logs of the leaves that stayed usable
        // are clean up to there.
        if phys.unrepaired == 0 && phys.errors == 0 {
            let unusable = self.scan.unusable_during_scan.lock().clone();
            for leaf in self.io.vdevs.leaves() {
                if leaf.is_usable() && !unusable.contains(&leaf.guid) {
                    leaf.dtl.remove_before(phys.max_txg.0.saturating_add(1));
                }
            }
        }
        log::info!(
            "pool {}: {} finished: {} bytes examined, {} repaired, {} errors",
            self.name,
            phys.function.as_str(),
            phys.examined,
            phys.repaired,
            phys.errors
        );
    }

    fn persist_scan(&self, phys: &ScanPhys, txg: Txg) -> Result<(), PoolError> {
        let storage = self.storage();
        let object = match self.scan.object.load(Ordering::Acquire) {
            0 => {
                let object = storage
                    .create_object(4096, txg)
                    .map_err(|error| PoolError::Corrupt(format!("scan state: {error}")))?;
                kv_set_u64(
                    &self.mos,
                    &Tx::syncing(txg),
                    MOS_OBJECT_DIRECTORY,
                    SCAN_KEY,
                    object.0,
                )?;
                self.scan.object.store(object.0, Ordering::Release);
                object
            }
            object => ObjectId(object),
        };
        storage
            .write(object, 0, &phys.encode(), txg)
            .map_err(|error| PoolError::Corrupt(format!("scan state: {error}")))?;
        if self.scan.extension_dirty.swap(false, Ordering::AcqRel)
            && self
                .config
                .lock()
                .features
                .contains_key(super::SCAN_CATCH_UP_FEATURE)
        {
            let mut unusable: Vec<Guid> = self
                .scan
                .unusable_during_scan
                .lock()
                .iter()
                .copied()
                .collect();
            unusable.sort_unstable();
            self.feature_activate(super::SCAN_CATCH_UP_FEATURE);
            let extension = ScanExtension {
                catch_ups: self.scan.catch_ups.lock().clone(),
                unusable,
            };
            storage
                .write(object, SCAN_PHYS_SIZE as u64, &extension.encode(), txg)
                .map_err(|error| PoolError::Corrupt(format!("scan state: {error}")))?;
        }
        Ok(())
    }

    /// The extension after the scan state (empty in a pool that never wrote one).
    fn read_scan_extension(&self, object: ObjectId) -> Result<ScanExtension, PoolError> {
        let storage = self.storage();
        let read = |offset: u64, length: usize| -> Result<Vec<u8>, PoolError> {
            let mut bytes = vec![0u8; length];
            storage
                .read(object, offset, &mut bytes)
                .map_err(|error| PoolError::Corrupt(format!("scan state: {error}")))?;
            Ok(bytes)
        };
        let header = read(SCAN_PHYS_SIZE as u64, 16)?;
        let counts =
            |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
        // Bounded before anything is read: the unusable leaves are at most a pool's leaves.
        let (catch_ups, unusable) = (counts(4) as usize, counts(8) as usize);
        if catch_ups > CATCH_UPS_MAX || unusable > 1 << 16 {
            return ScanExtension::decode(&header);
        }
        let length = 16 + 24 * catch_ups + 8 * unusable;
        ScanExtension::decode(&read(SCAN_PHYS_SIZE as u64, length)?)
    }
}
