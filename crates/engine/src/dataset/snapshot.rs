//! A snapshot in memory: its record, a summary of its deadlist, and its object set opened
//! read-only on demand (for `.zfs/snapshot`, send and check).
//!
//! A snapshot's record is frozen at creation except for what its neighbours' destroys change:
//! the previous/next links, the deadlist it inherits, and its unique bytes. Those changes happen
//! in syncing context; readers take copies. The deadlist itself is read from disk by the sync
//! tasks that change it ([`Snapshot::deadlist`]); memory holds only its summary, so a pool
//! with many snapshots does not keep every snapshot's keys (see `deadlist.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::BlockPtr;
use crate::block::pipeline::{BlockIo, SyncPoint};
use crate::object::{BlockLifecycle, ObjectError, ObjectSet};
use crate::types::{ObjectId, Txg};

use super::deadlist::{Deadlist, DeadlistStore, DeadlistSummary};
use super::phys::DatasetPhys;

pub struct Snapshot {
    /// The name after `@`.
    short_name: Mutex<String>,
    pub object: ObjectId,
    phys: Mutex<DatasetPhys>,
    deadlist: Mutex<DeadlistSummary>,
    objset: Mutex<Option<Arc<ObjectSet>>>,
    /// Set when its destroy runs (syncing context), before any of its blocks is freed: readers
    /// holding its object set (`.zfs/snapshot`) check it and stop reading.
    destroyed: AtomicBool,
}

/// The lifecycle of a read-only object set: it never writes, so nothing is born or killed.
pub struct ReadOnlyLifecycle;

impl BlockLifecycle for ReadOnlyLifecycle {
    fn block_born(&self, _bp: &BlockPtr, _at: SyncPoint) {}

    fn block_kill(&self, _bp: &BlockPtr, _at: SyncPoint) -> Result<(), ObjectError> {
        Err(ObjectError::Lifecycle(
            "a read-only object set (a snapshot) never changes".into(),
        ))
    }
}

impl Snapshot {
    pub fn new(
        short_name: String,
        object: ObjectId,
        phys: DatasetPhys,
        deadlist: DeadlistSummary,
    ) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            short_name: Mutex::new(short_name),
            object,
            phys: Mutex::new(phys),
            deadlist: Mutex::new(deadlist),
            objset: Mutex::new(None),
            destroyed: AtomicBool::new(false),
        })
    }

    /// Whether the snapshot was destroyed (its blocks are being freed: read nothing more).
    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// Mark the snapshot destroyed (its destroy task, before it frees anything).
    pub fn mark_destroyed(&self) {
        self.destroyed.store(true, Ordering::Release);
    }

    pub fn short_name(&self) -> String {
        self.short_name.lock().clone()
    }

    pub fn set_short_name(&self, name: String) {
        *self.short_name.lock() = name;
    }

    pub fn phys(&self) -> DatasetPhys {
        self.phys.lock().clone()
    }

    /// The snapshot's txg: it holds every block born at or before it.
    pub fn txg(&self) -> Txg {
        self.phys.lock().creation_txg
    }

    /// Change the record (sync tasks); returns the record to write.
    pub fn update_phys(&self, change: impl FnOnce(&mut DatasetPhys)) -> DatasetPhys {
        let mut phys = self.phys.lock();
        change(&mut phys);
        phys.clone()
    }

    /// The deadlist, read whole from disk (sync tasks that change it and set it back, `debug
    /// dataset`).
    pub fn deadlist(&self, store: &DeadlistStore) -> Result<Deadlist, ObjectError> {
        Deadlist::load(store, self.phys.lock().deadlist_object)
    }

    /// The deadlist's summary (its totals, and its non-empty entries when known).
    pub fn deadlist_summary(&self) -> DeadlistSummary {
        self.deadlist.lock().clone()
    }

    /// Read the deadlist's summary under its lock, without copying it (the space figures of
    /// every snapshot are read whenever a dataset's snapshots change).
    pub fn with_deadlist_summary<R>(&self, read: impl FnOnce(&DeadlistSummary) -> R) -> R {
        read(&self.deadlist.lock())
    }

    /// The deadlist's totals.
    pub fn deadlist_total(&self) -> crate::object::bpobj::BpSpace {
        self.deadlist.lock().total()
    }

    /// Make the summary's entries known, reading the deadlist if import read only its header
    /// (a snapshot of a clone, whose space is split at the origin by key).
    pub fn load_deadlist_entries(&self, store: &DeadlistStore) -> Result<(), ObjectError> {
        if self.deadlist.lock().is_whole() {
            return Ok(());
        }
        let summary = DeadlistSummary::of(&self.deadlist(store)?);
        *self.deadlist.lock() = summary;
        Ok(())
    }

    /// Set the deadlist after a sync task changed it (and saved it: the record names its
    /// object, and later tasks read it from disk).
    pub fn set_deadlist(&self, deadlist: &Deadlist) {
        self.phys.lock().deadlist_object = deadlist.object();
        *self.deadlist.lock() = DeadlistSummary::of(deadlist);
    }

    /// The deadlist keys of the dataset after this snapshot: this one's keys, its previous
    /// snapshot's txg, and 0 (one entry per older snapshot interval). Read from disk.
    pub fn next_deadlist_keys(&self, store: &DeadlistStore) -> Result<Vec<Txg>, ObjectError> {
        let mut keys: Vec<Txg> = self.deadlist(store)?.keys().collect();
        keys.push(self.phys.lock().prev_snapshot_txg);
        keys.push(Txg(0));
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Recompute the unique bytes from the deadlist of the dataset after this one (`next`):
    /// the blocks born after this snapshot's previous one that `next` no longer holds.
    pub fn refresh_unique(&self, next: &Deadlist) -> u64 {
        let mut phys = self.phys.lock();
        phys.unique_bytes = next
            .space_range(phys.prev_snapshot_txg, Txg(u64::MAX))
            .used_bytes;
        phys.unique_bytes
    }

    /// The snapshot's object set if something has opened it (the error log drains its read
    /// errors without opening every snapshot).
    pub fn opened_objset(&self) -> Option<Arc<ObjectSet>> {
        self.objset.lock().clone()
    }

    /// The snapshot's object set, opened read-only on first use.
    pub fn objset(&self, io: &Arc<BlockIo>) -> Result<Arc<ObjectSet>, ObjectError> {
        let mut slot = self.objset.lock();
        if let Some(objset) = slot.as_ref() {
            return Ok(objset.clone());
        }
        let root = self.phys.lock().root.clone();
        let objset = Arc::new(ObjectSet::open(
            io.clone(),
            &root,
            Arc::new(ReadOnlyLifecycle),
            1,
        )?);
        *slot = Some(objset.clone());
        Ok(objset)
    }
}
