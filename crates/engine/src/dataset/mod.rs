//! Dataset layer: dataset records and directories, and the single gate through which blocks
//! enter and leave a dataset (OpenZFS dsl_dataset.c, dsl_dir.c).
//!
//! # Overview
//! A *dataset directory* names a place in the hierarchy (children, properties, space used by it
//! and its descendants). Its *head dataset* record points at the dataset's object set and carries
//! the accounting (referenced, compressed, uncompressed, unique bytes) and the fields that
//! snapshots will use (previous snapshot and its txg, deadlist, guid). Both records live in the
//! bonus buffers of MOS objects ([`phys`]).
//!
//! # Destroy
//! A destroyed dataset's tree is queued on the pool's background destroy queue ([`bptree`])
//! and freed a bounded amount per txg; see `pool/background_free.rs`.
//!
//! # block_born / block_kill
//! Every block a dataset's object set writes is reported through [`Dataset::block_born`], and
//! every block it stops referencing through [`Dataset::block_kill`] (the object layer's
//! [`BlockLifecycle`]). Kill decides the block's fate by birth txg alone (DESIGN.md §3
//! invariant 8): a block born after the previous snapshot belongs to this dataset only and is
//! freed; an older block is still held by that snapshot and goes on the head's deadlist
//! ([`deadlist`]), collected during the object set's sync and put there right after it
//! ([`Dataset::flush_killed`], one append per deadlist entry). A clone with a livelist
//! ([`livelist`]) also records there every block it writes and every block born after its
//! origin that it kills, appended after the object set's sync ([`Dataset::flush_livelist`]).
//!
//! # Snapshots
//! A snapshot ([`Snapshot`]) is a frozen dataset record naming the head's object-set root as it
//! was at the end of the snapshot's txg; the head keeps its snapshots in memory, oldest first,
//! linked on disk through the records' previous/next fields and named in the head's
//! snapshot-names object. Creating, destroying and rolling back are sync tasks of the pool
//! (`pool/snapshots.rs`); this module holds the state they change.
//!
//! # Space
//! A head's referenced, compressed and uncompressed bytes count its live blocks; its unique
//! bytes the live blocks born after its newest snapshot. Every block only snapshots hold is on
//! exactly one deadlist (the head's or a later snapshot's), so `usedbysnapshots` is the sum of
//! the deadlists' totals and a newest snapshot's unique bytes are the part of the head's
//! deadlist born after the snapshot before it. Both are derived from the deadlists' headers,
//! never counted twice.
//!
//! A clone's origin is recorded ([`Dataset::set_origin`]: clone creation, promote, import),
//! never searched for: its own space is its referenced bytes less the origin's, plus the
//! origin's blocks on its deadlists (born at or before the origin's txg).
//!
//! # What a txg costs
//! Every deadlist keeps its total (constant time), and the dataset keeps its own space
//! ([`OwnSpace`]) and its snapshots' share of it between txgs, recomputed only after something
//! they are derived from changed. Each change bumps a generation counter *after* it is made,
//! and a figure is kept only if the generation it was computed at is still current, so a
//! figure read while a sync task is half done is never kept past that task. The sync driver
//! thus pays per dataset that changed, not per snapshot of every dataset.
//!
//! # Underflow
//! The kept figures never go below zero: a block taken off more than was added is an
//! accounting error, logged and counted ([`Dataset::accounting_errors`], reported by `check`,
//! which the integration tests run at their end), never clamped silently.
//!
//! # Context
//! Born and kill run in syncing context only, from the object set's sync; the accounting they
//! update is written into the dataset record by the pool's sync driver in the same txg.
//!
//! # Damage
//! A dataset whose object set cannot be opened (no good copy of its header) is *unavailable*:
//! it is listed with the reason, its records stay as they are on disk, and the pool syncs,
//! mounts and checks everything else (one damaged block never loses the pool).
//!
//! # Crash behaviour
//! The record is part of the MOS: a crash rolls it back together with the tree it describes.

pub mod bptree;
pub mod deadlist;
pub mod delegation;
pub mod limits;
pub mod livelist;
pub mod owner_quotas;
pub mod phys;
pub mod props;
pub mod snapshot;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::BlockPtr;
use crate::block::pipeline::SyncPoint;
use crate::object::bpobj::{BpObjEntry, BpSpace};
use crate::object::{BlockLifecycle, ObjectError, ObjectSet, Tx};
use crate::types::ObjectId;
use deadlist::{Deadlist, DeadlistStore};
use livelist::Livelist;
use phys::{DatasetDirPhys, DatasetPhys};
pub use snapshot::Snapshot;

/// Where a dataset's freed blocks go: the pool frees them now, or in the next txg when the
/// free happens in a late sync pass; and what a block counts for in the dataset's space.
/// Implemented by the pool layer.
pub trait BlockFreer: Send + Sync {
    fn free(&self, bp: &BlockPtr, at: SyncPoint) -> Result<(), ObjectError>;
    /// The bytes `bp` counts for in `referenced` and `unique`
    /// ([`crate::block::pipeline::BlockIo::dsize`]).
    fn dsize(&self, bp: &BlockPtr) -> u64;
}

/// A dataset (for now: the head of a file system) with its object set.
pub struct Dataset {
    /// Full name (`POOL/a/b`); changes on rename.
    name: parking_lot::RwLock<String>,
    pub object: ObjectId,
    pub dir_object: ObjectId,
    phys: Mutex<DatasetPhys>,
    dir: Mutex<DatasetDirPhys>,
    objset: Mutex<Option<Arc<ObjectSet>>>,
    freer: Arc<dyn BlockFreer>,
    /// Set when accounting changed in the syncing txg, so the record must be rewritten.
    record_dirty: Mutex<bool>,
    /// Why the dataset is unavailable: its object set could not be opened at import (no good
    /// copy of a block it needs). It stays listed, its records untouched, and is never synced.
    unavailable: Mutex<Option<String>>,
    /// Blocks held by the newest snapshot killed since the last sync (see [`deadlist`]).
    deadlist: Mutex<Deadlist>,
    /// Blocks killed in the syncing txg that go on the deadlist once the object set is synced.
    killed_shared: Mutex<Vec<BlockPtr>>,
    /// Snapshots, oldest first.
    snapshots: Mutex<Vec<Arc<Snapshot>>>,
    /// A clone's livelist (None: not a clone, the pool lacks the feature, or it was dropped).
    livelist: Mutex<Option<Livelist>>,
    /// Livelist entries recorded in the syncing txg, appended after the object set's sync.
    livelist_pending: Mutex<Vec<BpObjEntry>>,
    /// A clone's origin snapshot (the directory record's origin, resolved).
    origin: Mutex<Option<Arc<Snapshot>>>,
    /// Bumped after every change to what [`OwnSpace`] is derived from (see "What a txg costs").
    space_generation: AtomicU64,
    /// Bumped after every change to the snapshots' deadlists or the origin.
    snapshots_generation: AtomicU64,
    /// The kept figures, each with the generation it was computed at.
    space_memo: Mutex<SpaceMemo>,
    /// Times a kept figure would have gone below zero (see "Underflow").
    accounting_errors: AtomicU64,
    /// Quota, reservations and what is charged against them ([`limits`]).
    pub limits: limits::SpaceLimits,
    /// User, group and project quotas ([`owner_quotas`]).
    pub owner_quotas: owner_quotas::OwnerQuotas,
}

/// Where a dataset's own space is: its live blocks not shared with an origin
/// (`usedbydataset`) and the blocks only its snapshots hold (`usedbysnapshots`), each with its
/// compressed and logical figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnSpace {
    pub dataset: BpSpace,
    pub snapshots: BpSpace,
}

impl OwnSpace {
    pub fn total(&self) -> BpSpace {
        let mut total = self.dataset;
        total.add(self.snapshots);
        total
    }
}

/// The figures a dataset keeps between txgs, each with the generation it was computed at.
#[derive(Default)]
struct SpaceMemo {
    own: Option<(u64, OwnSpace)>,
    /// The snapshots' deadlists split at the origin txg (see [`Dataset::deadlist_space`]).
    snapshots: Option<(u64, (BpSpace, BpSpace))>,
}

/// What [`Dataset::flush_livelist`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivelistFlush {
    /// No livelist, or nothing to record.
    Unchanged,
    /// Entries appended.
    Appended,
    /// The clone shares too little with its origin: the livelist was destroyed.
    Dropped,
}

impl Dataset {
    pub fn new(
        name: String,
        object: ObjectId,
        phys: DatasetPhys,
        dir: DatasetDirPhys,
        freer: Arc<dyn BlockFreer>,
    ) -> Arc<Dataset> {
        Arc::new(Dataset {
            name: parking_lot::RwLock::new(name),
            object,
            dir_object: phys.dir_object,
            phys: Mutex::new(phys),
            dir: Mutex::new(dir),
            objset: Mutex::new(None),
            freer,
            record_dirty: Mutex::new(false),
            unavailable: Mutex::new(None),
            deadlist: Mutex::new(Deadlist::default()),
            killed_shared: Mutex::new(Vec::new()),
            snapshots: Mutex::new(Vec::new()),
            livelist: Mutex::new(None),
            livelist_pending: Mutex::new(Vec::new()),
            origin: Mutex::new(None),
            space_generation: AtomicU64::new(0),
            snapshots_generation: AtomicU64::new(0),
            space_memo: Mutex::new(SpaceMemo::default()),
            accounting_errors: AtomicU64::new(0),
            limits: limits::SpaceLimits::default(),
            owner_quotas: owner_quotas::OwnerQuotas::default(),
        })
    }

    /// Something [`OwnSpace`] is derived from changed (call after the change).
    fn space_changed(&self) {
        self.space_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The snapshots' deadlists or the origin changed (call after the change).
    fn snapshots_changed(&self) {
        self.snapshots_generation.fetch_add(1, Ordering::AcqRel);
        self.space_changed();
    }

    /// A snapshot's deadlist was replaced by a sync task (destroy of a neighbour, promote).
    pub fn snapshot_deadlists_changed(&self) {
        self.snapshots_changed();
    }

    /// The clone's origin snapshot, if it is a clone and its origin was resolved.
    pub fn origin(&self) -> Option<Arc<Snapshot>> {
        self.origin.lock().clone()
    }

    /// Record `origin` as this dataset's origin (clone creation, promote; None: no longer a
    /// clone): the directory's origin fields and the in-memory link together. Returns the
    /// directory record to write.
    pub fn set_origin(&self, origin: Option<Arc<Snapshot>>) -> DatasetDirPhys {
        let dir = {
            let mut dir = self.dir.lock();
            (dir.origin_snapshot_object, dir.origin_txg) = match &origin {
                Some(snapshot) => (snapshot.object, snapshot.txg()),
                None => (crate::types::ObjectId(0), crate::types::Txg(0)),
            };
            dir.clone()
        };
        *self.origin.lock() = origin;
        self.snapshots_changed();
        dir
    }

    /// Link the origin named by the directory record, found at import (no record changes).
    pub fn resolve_origin(&self, origin: Arc<Snapshot>) {
        debug_assert_eq!(origin.object, self.dir.lock().origin_snapshot_object);
        *self.origin.lock() = Some(origin);
        self.snapshots_changed();
    }

    /// Times a kept figure would have gone below zero since the dataset was opened.
    pub fn accounting_errors(&self) -> u64 {
        self.accounting_errors.load(Ordering::Acquire)
    }

    /// Install a livelist (clone creation, import).
    pub fn set_livelist(&self, livelist: Option<Livelist>) {
        *self.livelist.lock() = livelist;
    }

    /// The livelist, if the dataset keeps one (a copy).
    pub fn livelist(&self) -> Option<Livelist> {
        self.livelist.lock().clone()
    }

    /// Open context: the livelist's sub-lists with their counts (`debug dataset`, tests), or
    /// None without a livelist. The headers are read from a copy of the livelist without its
    /// lock, so a condense or a drop in syncing context may remove a list the copy names before
    /// its header is read; the read then finds no such object, and is made again from a new
    /// copy for as long as the livelist keeps changing under it.
    pub fn livelist_sublists(
        &self,
        store: &DeadlistStore,
    ) -> Result<Option<Vec<livelist::Sublist>>, ObjectError> {
        loop {
            let Some(copy) = self.livelist() else {
                return Ok(None);
            };
            match copy.sublists(store) {
                Err(ObjectError::NoSuchObject(_))
                    if self.livelist().map(|now| now.lists()) != Some(copy.lists()) => {}
                result => return result.map(Some),
            }
        }
    }

    /// Take the livelist out (destroy queues it; drop destroys it).
    pub fn take_livelist(&self) -> Option<Livelist> {
        self.livelist_pending.lock().clear();
        self.livelist.lock().take()
    }

    /// Syncing context, after the object set's sync and [`Dataset::flush_killed`]: append the
    /// livelist entries of this txg (starting a sub-list past `max_entries`), then drop the
    /// livelist if the clone shares less than `min_percent_shared` percent of its referenced
    /// bytes with its origin (see [`livelist`]). The record's livelist field follows; the
    /// caller writes the record.
    pub fn flush_livelist(
        &self,
        store: &DeadlistStore,
        tx: &Tx,
        max_entries: u64,
        min_percent_shared: u64,
    ) -> Result<LivelistFlush, ObjectError> {
        let pending = std::mem::take(&mut *self.livelist_pending.lock());
        let mut slot = self.livelist.lock();
        let Some(livelist) = slot.as_mut() else {
            return Ok(LivelistFlush::Unchanged);
        };
        if pending.is_empty() {
            return Ok(LivelistFlush::Unchanged);
        }
        let object = livelist.flush(store, tx, pending, max_entries)?;
        let referenced = self.phys.lock().referenced_bytes;
        let own = livelist.space().used_bytes;
        let shared = referenced.saturating_sub(own);
        if referenced > 0
            && u128::from(shared) * 100 < u128::from(min_percent_shared) * u128::from(referenced)
        {
            slot.take().expect("present above").destroy(store, tx)?;
            self.phys.lock().livelist_object = crate::types::ObjectId(0);
            return Ok(LivelistFlush::Dropped);
        }
        self.phys.lock().livelist_object = object;
        Ok(LivelistFlush::Appended)
    }

    /// Syncing context: destroy the livelist without freeing anything (promote, rollback).
    /// Returns whether there was one; the caller writes the record.
    pub fn drop_livelist(&self, store: &DeadlistStore, tx: &Tx) -> Result<bool, ObjectError> {
        let Some(livelist) = self.take_livelist() else {
            return Ok(false);
        };
        livelist.destroy(store, tx)?;
        self.phys.lock().livelist_object = crate::types::ObjectId(0);
        Ok(true)
    }

    /// Open context: take the livelist's next condense candidate for the pool's livelist
    /// reader (see [`livelist`], "Condense"); None without a livelist or a candidate.
    pub fn take_livelist_condense_candidate(&self) -> Option<livelist::CondenseTarget> {
        self.livelist.lock().as_mut()?.take_condense_candidate()
    }

    /// Syncing context: apply a condense read as far as the livelist is still as it was read
    /// (see [`livelist`], "Condense"); stale without a livelist. Unless stale, the caller
    /// writes the record.
    pub fn condense_livelist(
        &self,
        store: &DeadlistStore,
        tx: &Tx,
        read: livelist::CondenseRead,
    ) -> Result<livelist::CondenseOutcome, ObjectError> {
        let mut slot = self.livelist.lock();
        let Some(livelist) = slot.as_mut() else {
            return Ok(livelist::CondenseOutcome::Stale);
        };
        let outcome = livelist.apply_condense(store, tx, read)?;
        if outcome != livelist::CondenseOutcome::Stale {
            self.phys.lock().livelist_object = livelist.object();
        }
        Ok(outcome)
    }

    /// Record a block in the livelist, if the dataset keeps one and the block is the clone's
    /// own (born after the origin).
    fn record_livelist(&self, bp: &BlockPtr, free: bool) {
        if bp.is_hole() || bp.embedded || self.livelist.lock().is_none() {
            return;
        }
        if bp.birth_physical <= self.origin_txg() {
            return;
        }
        self.livelist_pending.lock().push(BpObjEntry {
            bp: bp.clone(),
            free,
        });
    }

    /// Full name (`POOL/a/b`).
    pub fn name(&self) -> String {
        self.name.read().clone()
    }

    /// Rename (the pool's namespace lock held).
    pub fn set_name(&self, name: String) {
        *self.name.write() = name;
    }

    /// Install the deadlist and snapshots loaded at import.
    pub fn set_snapshot_state(&self, deadlist: Deadlist, snapshots: Vec<Arc<Snapshot>>) {
        *self.deadlist.lock() = deadlist;
        *self.snapshots.lock() = snapshots;
        self.snapshots_changed();
    }

    /// Snapshots, oldest first.
    pub fn snapshots(&self) -> Vec<Arc<Snapshot>> {
        self.snapshots.lock().clone()
    }

    /// The snapshot with short name `name`.
    pub fn snapshot(&self, name: &str) -> Option<Arc<Snapshot>> {
        self.snapshots
            .lock()
            .iter()
            .find(|snapshot| snapshot.short_name() == name)
            .cloned()
    }

    /// The newest snapshot.
    pub fn newest_snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshots.lock().last().cloned()
    }

    /// Replace the snapshot list (sync tasks).
    pub fn set_snapshots(&self, snapshots: Vec<Arc<Snapshot>>) {
        *self.snapshots.lock() = snapshots;
        self.snapshots_changed();
    }

    /// The head's deadlist (a copy: sync tasks change it through [`Dataset::with_deadlist`]).
    /// A copy of the head's deadlist (see [`Snapshot::with_deadlist`] to read one in place).
    pub fn deadlist(&self) -> Deadlist {
        self.deadlist.lock().clone()
    }

    /// The space of every entry of the head's deadlist, read in place.
    pub fn deadlist_total(&self) -> BpSpace {
        self.deadlist.lock().total()
    }

    /// Change the head's deadlist under its lock.
    pub fn with_deadlist<R>(&self, change: impl FnOnce(&mut Deadlist) -> R) -> R {
        let result = change(&mut self.deadlist.lock());
        self.space_changed();
        result
    }

    /// Change the head's record under its lock (sync tasks); returns the record to write.
    pub fn update_phys(&self, change: impl FnOnce(&mut DatasetPhys)) -> DatasetPhys {
        let phys = {
            let mut phys = self.phys.lock();
            change(&mut phys);
            phys.clone()
        };
        self.space_changed();
        phys
    }

    /// Change the directory record under its lock (not its origin: [`Dataset::set_origin`]);
    /// returns the record to write.
    pub fn update_dir(&self, change: impl FnOnce(&mut DatasetDirPhys)) -> DatasetDirPhys {
        let mut dir = self.dir.lock();
        let origin = (dir.origin_snapshot_object, dir.origin_txg);
        change(&mut dir);
        debug_assert_eq!(
            origin,
            (dir.origin_snapshot_object, dir.origin_txg),
            "a dataset's origin changes through set_origin"
        );
        dir.clone()
    }

    /// The origin snapshot's txg for a clone (0 otherwise): blocks born at or before it belong
    /// to the origin.
    pub fn origin_txg(&self) -> crate::types::Txg {
        self.dir.lock().origin_txg
    }

    /// The deadlists of the head and its snapshots, split at the origin txg: (blocks born
    /// after it, which only this dataset's snapshots hold: `usedbysnapshots`; blocks born at
    /// or before it, the origin's blocks this clone no longer references). For a dataset that
    /// is not a clone the second is empty.
    pub fn deadlist_space(&self) -> (BpSpace, BpSpace) {
        self.head_and(self.kept_snapshots_deadlist_space())
    }

    /// The head's deadlist split at the origin, added to the snapshots' share.
    fn head_and(&self, snapshots: (BpSpace, BpSpace)) -> (BpSpace, BpSpace) {
        let (mut above, mut below) = split_at_origin(&*self.deadlist.lock(), self.origin_txg());
        above.add(snapshots.0);
        below.add(snapshots.1);
        (above, below)
    }

    /// The snapshots' share of [`Dataset::deadlist_space`], summed afresh.
    fn snapshots_deadlist_space(&self) -> (BpSpace, BpSpace) {
        let origin = self.origin_txg();
        let mut above = BpSpace::default();
        let mut below = BpSpace::default();
        for snapshot in self.snapshots.lock().iter() {
            let (more_above, more_below) =
                snapshot.with_deadlist_summary(|summary| split_at_origin(summary, origin));
            above.add(more_above);
            below.add(more_below);
        }
        (above, below)
    }

    /// The snapshots' share of [`Dataset::deadlist_space`], kept between changes.
    fn kept_snapshots_deadlist_space(&self) -> (BpSpace, BpSpace) {
        let generation = self.snapshots_generation.load(Ordering::Acquire);
        if let Some((at, space)) = self.space_memo.lock().snapshots {
            if at == generation {
                return space;
            }
        }
        let (above, below) = self.snapshots_deadlist_space();
        let mut memo = self.space_memo.lock();
        if self.snapshots_generation.load(Ordering::Acquire) == generation {
            memo.snapshots = Some((generation, (above, below)));
        }
        (above, below)
    }

    /// Space held only by snapshots (`usedbysnapshots`).
    pub fn snapshot_space(&self) -> BpSpace {
        self.deadlist_space().0
    }

    /// The dataset's own space (see [`OwnSpace`]), kept between changes.
    pub fn own_space(&self) -> OwnSpace {
        let generation = self.space_generation.load(Ordering::Acquire);
        if let Some((at, own)) = self.space_memo.lock().own {
            if at == generation {
                return own;
            }
        }
        let own = self.own_space_from(self.deadlist_space());
        let mut memo = self.space_memo.lock();
        if self.space_generation.load(Ordering::Acquire) == generation {
            memo.own = Some((generation, own));
        }
        own
    }

    /// [`Dataset::own_space`] derived afresh, every deadlist summed again.
    pub fn compute_own_space(&self) -> OwnSpace {
        self.own_space_from(self.head_and(self.snapshots_deadlist_space()))
    }

    /// The own space from the deadlists' split (see [`Dataset::deadlist_space`]). For a clone,
    /// the origin's blocks it still references are not its own: they are the origin's
    /// referenced bytes less those on the clone's deadlists (born at or before the origin).
    fn own_space_from(&self, (above, below): (BpSpace, BpSpace)) -> OwnSpace {
        let phys = self.phys();
        let mut live = BpSpace {
            used_bytes: phys.referenced_bytes,
            compressed_bytes: phys.compressed_bytes,
            uncompressed_bytes: phys.uncompressed_bytes,
        };
        if let Some(origin) = self.origin() {
            let origin = origin.phys();
            live.add(below);
            live.sub(BpSpace {
                used_bytes: origin.referenced_bytes,
                compressed_bytes: origin.compressed_bytes,
                uncompressed_bytes: origin.uncompressed_bytes,
            });
        }
        OwnSpace {
            dataset: live,
            snapshots: above,
        }
    }

    /// Whether the kept own space equals one derived afresh (check, debug builds); None when
    /// something changed in between, so the two cannot be compared.
    pub fn kept_space_matches(&self) -> Option<bool> {
        let generation = self.space_generation.load(Ordering::Acquire);
        let kept = self.own_space();
        let fresh = self.compute_own_space();
        (self.space_generation.load(Ordering::Acquire) == generation).then_some(kept == fresh)
    }

    /// Syncing context, after the object set's sync: put the blocks killed while shared with
    /// the newest snapshot on the deadlist, and bring that snapshot's unique bytes up to date.
    /// Returns the newest snapshot when its record changed, and whether the head's record
    /// changed (a new deadlist object), for the caller to write.
    pub fn flush_killed(
        &self,
        store: &DeadlistStore,
        tx: &Tx,
    ) -> Result<Option<Arc<Snapshot>>, ObjectError> {
        let killed = std::mem::take(&mut *self.killed_shared.lock());
        if killed.is_empty() {
            return Ok(None);
        }
        let object = {
            let mut deadlist = self.deadlist.lock();
            deadlist.insert(store, tx, &killed)?;
            deadlist.save(store, tx)?
        };
        self.phys.lock().deadlist_object = object;
        self.space_changed();
        // A clone without snapshots of its own shares its blocks with its origin, whose unique
        // bytes do not change (the origin's next dataset is in another file system).
        let Some(newest) = self.newest_snapshot() else {
            return Ok(None);
        };
        newest.refresh_unique(&self.deadlist.lock());
        Ok(Some(newest))
    }

    /// Mark the dataset unavailable (its object set could not be opened), saying why.
    pub fn set_unavailable(&self, why: String) {
        *self.unavailable.lock() = Some(why);
    }

    /// Why the dataset is unavailable, if it is.
    pub fn unavailable(&self) -> Option<String> {
        self.unavailable.lock().clone()
    }

    /// Attach the dataset's object set (opened or created by the pool with this dataset as its
    /// lifecycle).
    pub fn attach_objset(&self, objset: Arc<ObjectSet>) {
        *self.objset.lock() = Some(objset);
    }

    /// Drop the reference to the object set (which refers back to this dataset), when the pool
    /// closes.
    pub fn detach_objset(&self) {
        *self.objset.lock() = None;
    }

    pub fn objset(&self) -> Arc<ObjectSet> {
        self.objset
            .lock()
            .clone()
            .expect("dataset object set attached at open")
    }

    /// The object set, if one is attached (none after the pool closed it, or while a dataset
    /// whose object set could not be opened is listed as unavailable).
    pub fn try_objset(&self) -> Option<Arc<ObjectSet>> {
        self.objset.lock().clone()
    }

    pub fn phys(&self) -> DatasetPhys {
        self.phys.lock().clone()
    }

    pub fn dir(&self) -> DatasetDirPhys {
        self.dir.lock().clone()
    }

    /// Record the object set's new root after a sync pass; returns the record to write.
    pub fn set_root(&self, root: BlockPtr) -> DatasetPhys {
        let mut phys = self.phys.lock();
        phys.root = root;
        *self.record_dirty.lock() = false;
        phys.clone()
    }

    /// Set the directory's totals (this dataset, its snapshots and its descendants) and used
    /// breakdown; returns the record to write when they changed (always for a version-1
    /// record, which gains the breakdown).
    pub fn set_dir_totals(
        &self,
        used: u64,
        compressed: u64,
        uncompressed: u64,
        breakdown: phys::UsedBreakdown,
    ) -> Option<DatasetDirPhys> {
        let mut dir = self.dir.lock();
        if (dir.used_bytes, dir.compressed_bytes, dir.uncompressed_bytes)
            == (used, compressed, uncompressed)
            && dir.used_breakdown == breakdown
            && dir.flags & phys::DD_FLAG_USED_BREAKDOWN != 0
        {
            return None;
        }
        dir.used_bytes = used;
        dir.compressed_bytes = compressed;
        dir.uncompressed_bytes = uncompressed;
        dir.used_breakdown = breakdown;
        dir.flags |= phys::DD_FLAG_USED_BREAKDOWN;
        Some(dir.clone())
    }

    pub fn referenced_bytes(&self) -> u64 {
        self.phys.lock().referenced_bytes
    }

    /// The head's bytes no snapshot shares (born after the newest snapshot): what its
    /// refreservation is measured against, as zfs's ds_unique_bytes.
    pub fn unique_bytes(&self) -> u64 {
        self.phys.lock().unique_bytes
    }

    /// Add (`sign` > 0) or take off a block's space: referenced always, unique when the block
    /// is not shared with a snapshot. A figure that would go below zero is an accounting error
    /// (see "Underflow"): it is left at zero, logged and counted.
    fn account(&self, bp: &BlockPtr, sign: i64, unique: bool) {
        let used = self.freer.dsize(bp);
        let mut underflows = Vec::new();
        {
            let mut phys = self.phys.lock();
            let mut apply = |value: &mut u64, delta: u64, what: &'static str| {
                *value = if sign > 0 {
                    value.saturating_add(delta)
                } else {
                    value.checked_sub(delta).unwrap_or_else(|| {
                        underflows.push((what, *value, delta));
                        0
                    })
                };
            };
            apply(&mut phys.referenced_bytes, used, "referenced");
            if unique {
                apply(&mut phys.unique_bytes, used, "unique");
            }
            apply(
                &mut phys.compressed_bytes,
                bp.size_physical as u64,
                "compressed",
            );
            apply(
                &mut phys.uncompressed_bytes,
                bp.size_uncompressed_accounted(),
                "uncompressed",
            );
        }
        *self.record_dirty.lock() = true;
        self.space_changed();
        for (what, value, delta) in underflows {
            self.accounting_errors.fetch_add(1, Ordering::AcqRel);
            log::error!(
                "dataset {}: accounting error: {what} bytes {value} less {delta} of a block born in txg {} would go below zero",
                self.name(),
                bp.birth_physical
            );
        }
    }
}

/// A deadlist's space split at a clone's origin txg: (blocks born after it, blocks born at or
/// before it). Not a clone (origin 0): the total and nothing, in constant time.
fn split_at_origin(
    deadlist: &impl deadlist::DeadlistSpace,
    origin: crate::types::Txg,
) -> (BpSpace, BpSpace) {
    if origin.0 == 0 {
        return (deadlist.total(), BpSpace::default());
    }
    (
        deadlist.space_range(origin, crate::types::Txg(u64::MAX)),
        deadlist.space_range(crate::types::Txg(0), origin),
    )
}

impl BlockLifecycle for Dataset {
    fn block_born(&self, bp: &BlockPtr, _at: SyncPoint) {
        debug_assert!(!bp.is_hole());
        self.account(bp, 1, true);
        self.record_livelist(bp, false);
    }

    fn block_kill(&self, bp: &BlockPtr, at: SyncPoint) -> Result<(), ObjectError> {
        self.record_livelist(bp, true);
        let prev_snapshot_txg = self.phys.lock().prev_snapshot_txg;
        if bp.birth_physical <= prev_snapshot_txg && !bp.is_hole() {
            // Held by the newest snapshot: to the deadlist, after the object set's sync. An
            // embedded block owns no space and is listed nowhere.
            self.account(bp, -1, false);
            if bp.embedded {
                return Ok(());
            }
            if at.pass != 1 {
                return Err(ObjectError::Lifecycle(format!(
                    "dataset {}: a block shared with a snapshot killed in sync pass {}",
                    self.name(),
                    at.pass
                )));
            }
            self.killed_shared.lock().push(bp.clone());
            return Ok(());
        }
        self.account(bp, -1, true);
        self.freer.free(bp, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::blkptr::{ChecksumType, Compression, Dva, ObjectType, DVAS_MAX};
    use crate::types::{Txg, VdevId};

    /// Frees nothing: these tests look at the accounting alone.
    struct NoFreer;

    impl BlockFreer for NoFreer {
        fn free(&self, _bp: &BlockPtr, _at: SyncPoint) -> Result<(), ObjectError> {
            Ok(())
        }
        fn dsize(&self, bp: &BlockPtr) -> u64 {
            bp.size_allocated()
        }
    }

    fn dataset() -> Arc<Dataset> {
        Dataset::new(
            "pool/fs".into(),
            ObjectId(10),
            DatasetPhys::new_head(ObjectId(11), 0, Txg(1), crate::types::Guid(1)),
            DatasetDirPhys::default(),
            Arc::new(NoFreer),
        )
    }

    fn block(offset: u64, birth: u64) -> BlockPtr {
        let mut dvas = [Dva::default(); DVAS_MAX];
        dvas[0] = Dva {
            vdev: VdevId(0),
            offset,
            size_allocated: 4096,
            gang: false,
        };
        BlockPtr {
            dvas,
            size_logical: 8192,
            size_physical: 4096,
            compression: Compression::Lz4,
            checksum_type: ChecksumType::Fletcher4,
            object_type: ObjectType::PlainFile,
            level: 0,
            embedded: false,
            birth_logical: Txg(birth),
            birth_physical: Txg(birth),
            fill_count: 1,
            checksum: [0; 32],
            embedded_payload: Vec::new(),
        }
    }

    fn at() -> SyncPoint {
        SyncPoint {
            txg: Txg(5),
            pass: 1,
        }
    }

    #[test]
    fn the_kept_own_space_follows_every_born_and_kill() {
        let dataset = dataset();
        assert_eq!(dataset.own_space(), OwnSpace::default());
        for offset in 0..3 {
            dataset.block_born(&block(offset * 4096, 5), at());
        }
        let own = dataset.own_space();
        assert_eq!(own.dataset.used_bytes, 3 * 4096);
        assert_eq!(own.dataset.uncompressed_bytes, 3 * 8192);
        dataset.block_kill(&block(0, 5), at()).unwrap();
        assert_eq!(dataset.own_space().dataset.used_bytes, 2 * 4096);
        assert_eq!(dataset.kept_space_matches(), Some(true));
        assert_eq!(dataset.accounting_errors(), 0);
    }

    #[test]
    fn a_record_change_is_seen_by_the_kept_figures() {
        let dataset = dataset();
        dataset.block_born(&block(0, 5), at());
        assert_eq!(dataset.own_space().dataset.used_bytes, 4096);
        dataset.update_phys(|phys| phys.referenced_bytes = 10 * 4096);
        assert_eq!(dataset.own_space().dataset.used_bytes, 10 * 4096);
        assert_eq!(dataset.kept_space_matches(), Some(true));
    }

    #[test]
    fn killing_more_than_was_born_is_an_accounting_error_not_a_silent_clamp() {
        let dataset = dataset();
        dataset.block_born(&block(0, 5), at());
        dataset.block_kill(&block(0, 5), at()).unwrap();
        assert_eq!(dataset.accounting_errors(), 0);
        // The same block killed twice: every figure it was counted in would go below zero.
        dataset.block_kill(&block(0, 5), at()).unwrap();
        let phys = dataset.phys();
        assert_eq!(
            (
                phys.referenced_bytes,
                phys.unique_bytes,
                phys.compressed_bytes
            ),
            (0, 0, 0)
        );
        assert_eq!(dataset.accounting_errors(), 4);
    }
}
