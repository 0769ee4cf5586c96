//! A snapshot in memory: its record, its deadlist, and its object set opened read-only on
//! demand (for `.zfs/snapshot`, send and check).
//!
//! A snapshot's record is frozen at creation except for what its neighbours' destroys change:
//! the previous/next links, the deadlist it inherits, and its unique bytes. Those changes happen
//! in syncing context; readers take copies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::BlockPtr;
use crate::block::pipeline::{BlockIo, SyncPoint};
use crate::object::{BlockLifecycle, ObjectError, ObjectSet};
use crate::types::{ObjectId, Txg};

use super::deadlist::Deadlist;
use super::phys::DatasetPhys;

pub struct Snapshot {
    /// The name after `@`.
    short_name: Mutex<String>,
    pub object: ObjectId,
    phys: Mutex<DatasetPhys>,
    deadlist: Mutex<Deadlist>,
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
        deadlist: Deadlist,
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

    /// A copy of the deadlist, for a sync task that changes it and sets it back.
    pub fn deadlist(&self) -> Deadlist {
        self.deadlist.lock().clone()
    }

    /// Read the deadlist under its lock, without copying it: the space figures of every
    /// snapshot are read each txg, and a copy of each deadlist's key tree was most of that
    /// txg's cost once a pool held thousands of snapshots.
    pub fn with_deadlist<R>(&self, read: impl FnOnce(&Deadlist) -> R) -> R {
        read(&self.deadlist.lock())
    }

    /// Replace the deadlist (sync tasks).
    pub fn set_deadlist(&self, deadlist: Deadlist) {
        self.phys.lock().deadlist_object = deadlist.object();
        *self.deadlist.lock() = deadlist;
    }

    /// The deadlist keys of the dataset after this snapshot: this one's keys, its previous
    /// snapshot's txg, and 0 (one entry per older snapshot interval).
    pub fn next_deadlist_keys(&self) -> Vec<Txg> {
        let mut keys: Vec<Txg> = self.deadlist.lock().keys().collect();
        keys.push(self.phys.lock().prev_snapshot_txg);
        keys.push(Txg(0));
        keys.sort();
        keys.dedup();
        keys
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
