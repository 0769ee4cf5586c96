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
//! freed; an older block would go to the deadlist (snapshots are not built yet, so there is none:
//! that branch is asserted unreachable). Clones will add their livelist here.
//!
//! # Context
//! Born and kill run in syncing context only, from the object set's sync; the accounting they
//! update is written into the dataset record by the pool's sync driver in the same txg.
//!
//! # Damage
//! A dataset whose object set cannot be opened (no good copy of its header) is *unavailable*:
//! it is listed with the reason, its records stay as they are on disk, and the pool syncs,
//! mounts and checks everything else (issue 8: one damaged block never loses the pool).
//!
//! # Crash behaviour
//! The record is part of the MOS: a crash rolls it back together with the tree it describes.

pub mod bptree;
pub mod phys;
pub mod props;

use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::BlockPtr;
use crate::block::pipeline::SyncPoint;
use crate::object::{BlockLifecycle, ObjectError, ObjectSet};
use crate::types::ObjectId;
use phys::{DatasetDirPhys, DatasetPhys};

/// Where a dataset's freed blocks go: the pool frees them now, or in the next txg when the
/// free happens in a late sync pass. Implemented by the pool layer.
pub trait BlockFreer: Send + Sync {
    fn free(&self, bp: &BlockPtr, at: SyncPoint) -> Result<(), ObjectError>;
}

/// A dataset (for now: the head of a file system) with its object set.
pub struct Dataset {
    pub name: String,
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
            name,
            object,
            dir_object: phys.dir_object,
            phys: Mutex::new(phys),
            dir: Mutex::new(dir),
            objset: Mutex::new(None),
            freer,
            record_dirty: Mutex::new(false),
            unavailable: Mutex::new(None),
        })
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

    /// Set the directory's totals (this dataset and its descendants); returns the record to
    /// write when they changed.
    pub fn set_dir_totals(
        &self,
        used: u64,
        compressed: u64,
        uncompressed: u64,
    ) -> Option<DatasetDirPhys> {
        let mut dir = self.dir.lock();
        if (dir.used_bytes, dir.compressed_bytes, dir.uncompressed_bytes)
            == (used, compressed, uncompressed)
        {
            return None;
        }
        dir.used_bytes = used;
        dir.compressed_bytes = compressed;
        dir.uncompressed_bytes = uncompressed;
        Some(dir.clone())
    }

    pub fn referenced_bytes(&self) -> u64 {
        self.phys.lock().referenced_bytes
    }

    fn account(&self, bp: &BlockPtr, sign: i64) {
        let mut phys = self.phys.lock();
        let apply = |value: &mut u64, delta: u64| {
            *value = if sign > 0 {
                value.saturating_add(delta)
            } else {
                value.saturating_sub(delta)
            };
        };
        apply(&mut phys.referenced_bytes, bp.size_allocated());
        apply(&mut phys.unique_bytes, bp.size_allocated());
        apply(&mut phys.compressed_bytes, bp.size_physical as u64);
        apply(
            &mut phys.uncompressed_bytes,
            bp.size_uncompressed_accounted(),
        );
        *self.record_dirty.lock() = true;
    }
}

impl BlockLifecycle for Dataset {
    fn block_born(&self, bp: &BlockPtr, _at: SyncPoint) {
        debug_assert!(!bp.is_hole());
        self.account(bp, 1);
    }

    fn block_kill(&self, bp: &BlockPtr, at: SyncPoint) -> Result<(), ObjectError> {
        let prev_snapshot_txg = self.phys.lock().prev_snapshot_txg;
        if bp.birth_physical <= prev_snapshot_txg && prev_snapshot_txg.0 != 0 {
            // Snapshots do not exist yet; when they do, this block goes to the deadlist.
            return Err(ObjectError::Lifecycle(format!(
                "dataset {}: block born in txg {} is shared with a snapshot, but deadlists are not implemented",
                self.name, bp.birth_physical
            )));
        }
        self.account(bp, -1);
        self.freer.free(bp, at)
    }
}
